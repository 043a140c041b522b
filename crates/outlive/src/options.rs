//! [`Options`]: how a run behaves, validated once before anything is launched.

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::dialogs::Dialogs;
use crate::error::Error;
use crate::redact::Diagnostics;
use crate::setters::setters;

use crate::report::{Milestone, WideEvent};

/// A page size in CSS pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewport {
    /// Width in CSS pixels.
    pub width: u32,
    /// Height in CSS pixels.
    pub height: u32,
}

/// Whether outlive moves the task to a new browser *before* the old one dies.
///
/// A rotation launches a successor ahead of the predicted death, restores the newest checkpoint
/// into it (storage only: no request reaches the site), and switches the task at a safe point.
/// The entry ends exactly there and is re-entered on the successor with `resumed_from` set;
/// the old session is released. Deaths nobody predicted still take the reactive path.
///
/// The safe point is the task's own last checkpoint before the browser is to be left
/// ([`Ctx::checkpoint`](crate::Ctx::checkpoint), [`checkpoint_with`](crate::Ctx::checkpoint_with)),
/// outside any [`hold_checkpoints`](crate::Ctx::hold_checkpoints): a re-entered task starts over
/// from what it saved itself. An automatic checkpoint serves only as the last resort. A rotation
/// without progress counts toward [`Options::max_relaunches`]; a run uses at most one session
/// more than reacting, and the wide event's `redoneMs` says what it cost. The whole algorithm:
/// `docs/rotation.md`.
///
/// The predicted death is at *expected lifetime − margin* of a session's age (counted from the
/// start of its launch). The margin is 10 % of the expected lifetime, or the spread of the
/// ages at which this run's browsers died when that is wider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rotation {
    /// Only react to deaths.
    #[default]
    Off,
    /// Learn the lifetime from this run's browser deaths: once two browsers have died of old
    /// age (deaths more than a quarter away from the median age are outliers), rotate ahead of
    /// the earliest of them.
    Learned,
    /// Sessions live about this long (Solari: 600 s). Learned deaths refine it downwards.
    Expected(Duration),
}

type OnEvent = Arc<dyn Fn(&WideEvent) + Send + Sync>;
pub(crate) type OnMilestone = Arc<dyn Fn(&Milestone) + Send + Sync>;

/// Options of one [`outlive`](crate::outlive()) run. Chain the setters; every value is
/// checked when the run starts, before anything is launched, and a bad one is reported as
/// [`ErrorKind::InvalidOption`](crate::ErrorKind::InvalidOption) naming the option.
///
/// ```
/// use std::time::Duration;
/// let options = outlive::Options::new()
///     .checkpoint_every(Duration::from_secs(10))
///     .max_relaunches(8)
///     .start_url("https://bank.example/login");
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) checkpoint_every: Duration,
    pub(crate) max_relaunches: u32,
    pub(crate) max_page_recoveries: u32,
    pub(crate) max_sessions: u32,
    pub(crate) relaunch_backoff: Duration,
    pub(crate) viewport: Viewport,
    pub(crate) start_url: Option<String>,
    pub(crate) navigation_timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) diagnostics: Diagnostics,
    pub(crate) on_event: Option<OnEvent>,
    pub(crate) on_milestone: Option<OnMilestone>,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_timeout: Duration,
    pub(crate) capture_timeout: Duration,
    pub(crate) release_timeout: Duration,
    pub(crate) indexed_db: bool,
    pub(crate) indexed_db_max_bytes: usize,
    pub(crate) cache_storage_and_opfs: bool,
    pub(crate) cache_storage_and_opfs_max_bytes: usize,
    pub(crate) page_state: bool,
    /// `None`: the lifetime the session states, if any.
    pub(crate) rotation: Option<Rotation>,
    pub(crate) standby: bool,
    pub(crate) carry_clients: bool,
    pub(crate) dialogs: Option<Dialogs>,
    pub(crate) metrics: Option<crate::Metrics>,
    #[cfg(feature = "durable")]
    pub(crate) durable: Option<crate::durable::Durable>,
}

impl Default for Options {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("checkpoint_every", &self.checkpoint_every)
            .field("max_relaunches", &self.max_relaunches)
            .field("max_page_recoveries", &self.max_page_recoveries)
            .field("max_sessions", &self.max_sessions)
            .field("relaunch_backoff", &self.relaunch_backoff)
            .field("viewport", &self.viewport)
            .field(
                "start_url",
                &self.start_url.as_deref().map(crate::redact::redact_url),
            )
            .field("navigation_timeout", &self.navigation_timeout)
            .field("grace", &self.grace)
            .field("diagnostics", &self.diagnostics)
            .field("on_event", &self.on_event.is_some())
            .field("on_milestone", &self.on_milestone.is_some())
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("capture_timeout", &self.capture_timeout)
            .field("release_timeout", &self.release_timeout)
            .field("indexed_db", &self.indexed_db)
            .field("indexed_db_max_bytes", &self.indexed_db_max_bytes)
            .field("cache_storage_and_opfs", &self.cache_storage_and_opfs)
            .field(
                "cache_storage_and_opfs_max_bytes",
                &self.cache_storage_and_opfs_max_bytes,
            )
            .field("page_state", &self.page_state)
            .field("rotation", &self.rotation)
            .field("standby", &self.standby)
            .field("carry_clients", &self.carry_clients)
            .field("dialogs", &self.dialogs)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Options {
    /// The defaults listed on each setter.
    pub fn new() -> Self {
        Self {
            checkpoint_every: Duration::from_secs(30),
            max_relaunches: 5,
            max_page_recoveries: 10,
            max_sessions: 100,
            relaunch_backoff: Duration::from_secs(2),
            viewport: Viewport {
                width: 1280,
                height: 800,
            },
            start_url: None,
            navigation_timeout: Duration::from_secs(45),
            grace: Duration::from_millis(250),
            diagnostics: Diagnostics::Safe,
            on_event: None,
            on_milestone: None,
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(2),
            capture_timeout: Duration::from_secs(10),
            release_timeout: Duration::from_secs(10),
            indexed_db: true,
            indexed_db_max_bytes: 16 << 20,
            cache_storage_and_opfs: true,
            cache_storage_and_opfs_max_bytes: 16 << 20,
            page_state: true,
            rotation: None,
            standby: false,
            carry_clients: true,
            dialogs: None,
            metrics: None,
            #[cfg(feature = "durable")]
            durable: None,
        }
    }

    /// What happens to a JavaScript dialog the task's page opens; see [`Dialogs`].
    ///
    /// # Default
    ///
    /// [`Dialogs::Dismiss`] for a Rust task; [`Dialogs::Leave`] for a command
    /// ([`run_command`](crate::run_command), [`serve`](crate::serve)), whose own client
    /// answers dialogs (Playwright dismisses those no handler takes), so outlive never races
    /// a handler the script set.
    pub fn dialogs(mut self, dialogs: Dialogs) -> Self {
        self.dialogs = Some(dialogs);
        self
    }

    /// Where the run records its deaths, sessions, relaunches and checkpoints as they happen:
    /// a [`Metrics`](crate::Metrics) registered in a Prometheus registry of yours. Many runs
    /// may share one.
    ///
    /// # Default
    ///
    /// None: nothing is recorded.
    pub fn metrics(mut self, metrics: crate::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Makes the run durable: every checkpoint sealed and saved outside this process, and —
    /// with [`Durable::resume`](crate::Durable::resume) — the run taken over from the
    /// checkpoint another process saved. See [`Durable`](crate::Durable).
    ///
    /// # Default
    ///
    /// None: checkpoints live in this process's memory only.
    #[cfg(feature = "durable")]
    pub fn durable(mut self, durable: crate::Durable) -> Self {
        self.durable = Some(durable);
        self
    }

    /// Whether to move the task to a new browser before the old one's predicted death; see
    /// [`Rotation`]. A lifetime the session states ([`Session::lifetime`](crate::Session::lifetime))
    /// caps an expected one.
    ///
    /// # Default
    ///
    /// Unset: the lifetime the session states, when it states one, taken as it is (not
    /// refined by deaths, unlike [`Rotation::Expected`]); else [`Rotation::Off`].
    pub fn rotation(mut self, rotation: Rotation) -> Self {
        self.rotation = Some(rotation);
        self
    }

    setters! {
        /// Keeps a warm standby: a second browser, launched and restored ahead of need, and
        /// brought up to date with the newest checkpoint when used. An unplanned death is then
        /// replaced in about the time of the final navigation instead of a whole launch. It
        /// costs a session for the whole run: the wide event reports `sessions` and `standbyMs`
        /// so the price is visible. With [`Rotation`], the standby is also the successor when it
        /// is young enough.
        ///
        /// # Default
        ///
        /// `false`.
        fn standby(keep: bool);

        /// Whether [`serve`](crate::serve) carries each client's connection to the next
        /// browser at a death: the client sees a reload of each page, with the same targets
        /// and sessions. A client that uses what cannot be carried (request interception, a
        /// download, a screencast…) is closed instead, the reason in the log. `false` closes
        /// every connection at a death, for clients that reconnect by themselves.
        ///
        /// # Default
        ///
        /// `true`.
        fn carry_clients(carry: bool);

        /// Whether checkpoints hold IndexedDB: every database of every origin the page and its
        /// frames use, with versions, object stores, indexes and records. Values beyond JSON
        /// (`Date`, typed arrays, `ArrayBuffer`, `Map`, `Set`, `Blob`, `BigInt`, …) come back as
        /// the same types; values that cannot be serialised (a `CryptoKey`, a cycle) are left
        /// out and counted in [`WideEvent::state_left_out`]. Every checkpoint reads the databases
        /// in the page; only changed ones are sent.
        ///
        /// # Default
        ///
        /// `true`.
        fn indexed_db(capture: bool);

        /// The most IndexedDB (serialised, per frame) a checkpoint holds. A frame's databases
        /// above it are not captured and their records are counted in
        /// [`WideEvent::state_left_out`]. At most 1 GiB.
        ///
        /// # Default
        ///
        /// 16 MiB.
        fn indexed_db_max_bytes(bytes: usize);

        /// Whether checkpoints hold Cache Storage and the origin private file system (OPFS)
        /// of every origin the page and its frames use, each restored on its own origin.
        /// Cache Storage comes back entry by entry: URL, status, status text, headers and
        /// body. Opaque (`no-cors`) responses cannot be read: they are left out and counted in
        /// [`WideEvent::state_left_out`], as files a worker holds locked, and entries past
        /// the first 1 000 of an origin. Origins without these APIs (not secure contexts) are
        /// skipped quietly. A restore writes what the checkpoint holds and deletes nothing:
        /// what was left out stays as the browser has it.
        ///
        /// The cost: each checkpoint walks every origin's OPFS tree (names, sizes, times) and
        /// reads its files only when that changed; it reads every Cache Storage entry and body
        /// each time (there is no cheap sign of a change). Unchanged data crosses the wire as
        /// a hash. The read has half the frame's time. If it takes longer, that checkpoint
        /// holds no Cache Storage or files for the frame, but keeps its Web Storage and
        /// IndexedDB; a restore leaves the browser's as they are.
        ///
        /// # Default
        ///
        /// `true`.
        fn cache_storage_and_opfs(capture: bool);

        /// The most Cache Storage, and the most OPFS files, one origin's frame holds in a
        /// checkpoint (serialised, bodies in base64: 4/3 of their bytes). Four times as much
        /// is the cap of both kinds across all origins of one tab (the top origin counted
        /// first; a checkpoint of several tabs may hold that much per tab). Entries and files
        /// over a cap are left out and counted in [`WideEvent::state_left_out`]. At most
        /// 1 GiB.
        ///
        /// # Default
        ///
        /// 16 MiB.
        fn cache_storage_and_opfs_max_bytes(bytes: usize);

        /// Whether checkpoints hold the page as the user left it: form fields typed but not
        /// sent, and the scroll positions of the window and of scrolled elements, in the page
        /// and its same-origin frames. They come back after the resume navigation, before the
        /// task (or a client) gets the page: each field through its native setter, then
        /// `input` and `change`, so a framework's controlled inputs follow. Never password,
        /// hidden or file inputs, nor `autocomplete="off"` fields; a field the page filled by
        /// itself is left alone. At most 2 000 fields and 256 KiB of values per page: the
        /// excess, and fields the restored page no longer has, are counted in
        /// [`WideEvent::state_left_out`]. An unchanged page costs no extra round trip.
        ///
        /// Each tab's back/forward list comes back too (its entries' URLs and titles, and where
        /// it stood), so Back and Forward go where they went: at most 25 entries per tab, the
        /// rest counted in `state_left_out`. Other entries come back as stubs that load their
        /// page afresh when gone to (`docs/survives.md`).
        ///
        /// # Default
        ///
        /// `true`.
        fn page_state(keep: bool);

        /// Interval of the automatic checkpoint. A target, not a guarantee: a capture that fails
        /// (the browser is already dying) is simply not written.
        ///
        /// # Default
        ///
        /// 30 s.
        fn checkpoint_every(every: Duration);

        /// How many times in a row the browser may die before the run gives up. A failed launch,
        /// or a rotation that ends an entry without progress, counts too. In a row means
        /// without progress between. So a long task that keeps moving outlives any number of
        /// browsers, while one whose browsers die before it gets anywhere stops.
        ///
        /// An entry makes progress when a checkpoint it leaves holds progress
        /// ([`Ctx::checkpoint_with`](crate::Ctx::checkpoint_with), or a foreign client's
        /// `POST …/checkpoint` with a body) other than what the entry was handed. Saving the
        /// same progress again is no progress: a task that signs in on every entry and dies
        /// before its first step does that. A task that saves no progress (plain
        /// [`Ctx::checkpoint`](crate::Ctx::checkpoint)) cannot show a step from a repeat. So
        /// until progress is saved in the run, a checkpoint of the task's own counts as
        /// progress; [`Options::max_sessions`] bounds what that can cost. Under
        /// [`serve`](crate::serve), an entry whose client sent the browser a command made
        /// progress too. `0` means the first death ends the run with `GaveUp`.
        ///
        /// # Default
        ///
        /// 5.
        fn max_relaunches(n: u32);

        /// How many times the task's page may fail (crash, be closed, hang) in a browser that
        /// lives on before the run gives up. Each such failure is recovered on a fresh page in the
        /// same browser, without a relaunch; this budget is separate from `max_relaunches`. A page
        /// that fails again and again (a site that exhausts the renderer's memory) ends the run
        /// with `GaveUp` instead of looping. Counted like `max_relaunches`: in a row, without
        /// progress between. `0` means the first page failure gives up.
        ///
        /// # Default
        ///
        /// 10.
        fn max_page_recoveries(n: u32);

        /// How many browser sessions the whole run may use (launches started: replacements,
        /// successors and standbys). When a replacement would need one more, the run gives up
        /// with `GaveUp` naming `max_sessions`. A backstop for what progress cannot see: a
        /// task that seems to move on but never finishes would otherwise pay for sessions
        /// forever. At least 1.
        ///
        /// # Default
        ///
        /// 100: about 16 hours of 10-minute sessions. Raise it for runs longer than that.
        fn max_sessions(n: u32);

        /// Wait after a launch that failed. A death relaunches at once.
        ///
        /// # Default
        ///
        /// 2 s.
        fn relaunch_backoff(backoff: Duration);
    }

    /// Size of the task's page.
    ///
    /// # Default
    ///
    /// 1280 × 800.
    pub fn viewport(mut self, width: u32, height: u32) -> Self {
        self.viewport = Viewport { width, height };
        self
    }

    /// Navigated to before the first entry only; later entries start at the checkpoint URL.
    /// An absolute `http`, `https`, `file`, `about` or `data` URL.
    ///
    /// # Default
    ///
    /// None: the first entry starts on `about:blank`.
    pub fn start_url(mut self, url: impl Into<String>) -> Self {
        self.start_url = Some(url.into());
        self
    }

    setters! {
        /// Cap on the resume navigation (and on the `start_url` navigation). When it is hit the
        /// task is entered anyway, on whatever the page shows.
        ///
        /// # Default
        ///
        /// 45 s.
        fn navigation_timeout(timeout: Duration);

        /// How long a death waits for the running entry to finish before the entry is dropped.
        ///
        /// # Default
        ///
        /// 250 ms.
        fn grace(grace: Duration);

        /// How much outlive may reveal in logs and the wide event.
        ///
        /// # Default
        ///
        /// [`Diagnostics::Safe`].
        fn diagnostics(diagnostics: Diagnostics);
    }

    /// Called once per run, on every path, with the wide event.
    ///
    /// # Default
    ///
    /// None; the event still goes to `tracing` at INFO under target `outlive::event`.
    pub fn on_event(mut self, f: impl Fn(&WideEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    /// Called at each step of the run as it happens (launch, restore, entry, checkpoint,
    /// death). Keep it quick: it runs on the run's task.
    ///
    /// # Default
    ///
    /// None.
    pub fn on_milestone(mut self, f: impl Fn(&Milestone) + Send + Sync + 'static) -> Self {
        self.on_milestone = Some(Arc::new(f));
        self
    }

    /// Adds `f` to the milestone callback: the one set before (by
    /// [`on_milestone`](Options::on_milestone) or another `also_on_milestone`) is still
    /// called, first. For a layer that records milestones without taking the caller's
    /// callback away.
    pub fn also_on_milestone(mut self, f: impl Fn(&Milestone) + Send + Sync + 'static) -> Self {
        self.on_milestone = Some(match self.on_milestone.take() {
            Some(theirs) => Arc::new(move |m: &Milestone| {
                theirs(m);
                f(m);
            }),
            None => Arc::new(f),
        });
        self
    }

    /// Also delivers the run's event to `slot` (after the caller's own `on_event`).
    pub(crate) fn with_event_slot(
        mut self,
        slot: Arc<std::sync::Mutex<Option<WideEvent>>>,
    ) -> Self {
        let theirs = self.on_event.take();
        self.on_event = Some(Arc::new(move |e: &WideEvent| {
            if let Some(f) = &theirs {
                f(e);
            }
            *crate::sync::lock(&slot) = Some(e.clone());
        }));
        self
    }

    /// Logs `milestone` (see `Milestone::trace`) and tells the milestone callback, if any.
    pub(crate) fn note(&self, milestone: Milestone) {
        milestone.trace();
        if let Some(f) = &self.on_milestone {
            f(&milestone);
        }
    }

    setters! {
        /// How long the connection may be quiet before outlive asks the browser whether it is
        /// still there (a CDP `Browser.getVersion` sent by the relay).
        ///
        /// # Default
        ///
        /// 1 s.
        fn heartbeat_interval(interval: Duration);

        /// How long the heartbeat waits for an answer before the browser is declared dead
        /// (the half-open, silent connection). Silence is detected within interval + timeout.
        ///
        /// # Default
        ///
        /// 2 s.
        fn heartbeat_timeout(timeout: Duration);

        /// Cap on one checkpoint capture. A cross-site iframe that has not answered within half
        /// of it is left out of that checkpoint: its earlier storage is kept, and it is counted
        /// in the wide event's `stateLeftOut`. So one hung iframe does not cost every
        /// checkpoint. Until it answers (or three times this cap has passed), later checkpoints
        /// leave it out at once and send it nothing more.
        ///
        /// # Default
        ///
        /// 10 s.
        fn capture_timeout(timeout: Duration);

        /// Cap on releasing one browser (a provider's `DELETE` that hangs). A release that takes
        /// longer is counted in `releaseFailed` and the run goes on.
        ///
        /// # Default
        ///
        /// 10 s.
        fn release_timeout(timeout: Duration);
    }

    /// Checks every value; the run calls this before launching anything.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`](crate::ErrorKind::InvalidOption) naming the first bad option.
    pub fn validate(&self) -> Result<(), Error> {
        positive("checkpoint_every", self.checkpoint_every)?;
        positive("navigation_timeout", self.navigation_timeout)?;
        positive("heartbeat_interval", self.heartbeat_interval)?;
        positive("heartbeat_timeout", self.heartbeat_timeout)?;
        positive("capture_timeout", self.capture_timeout)?;
        positive("release_timeout", self.release_timeout)?;
        self.viewport.validate()?;
        within("max_relaunches", self.max_relaunches as usize, 0..=1_000)?;
        if self.max_sessions == 0 {
            return Err(Error::invalid_option(
                "max_sessions",
                "option `max_sessions` must be at least 1",
            ));
        }
        within(
            "max_page_recoveries",
            self.max_page_recoveries as usize,
            0..=1_000,
        )?;
        within(
            "indexed_db_max_bytes",
            self.indexed_db_max_bytes,
            1..=1 << 30,
        )?;
        within(
            "cache_storage_and_opfs_max_bytes",
            self.cache_storage_and_opfs_max_bytes,
            1..=1 << 30,
        )?;
        if let Some(Rotation::Expected(lifetime)) = self.rotation {
            if lifetime < Duration::from_secs(1) {
                return Err(Error::invalid_option(
                    "rotation",
                    format!(
                        "option `rotation`: an expected lifetime must be at least 1 s, got {lifetime:?}"
                    ),
                ));
            }
        }
        match &self.start_url {
            Some(url) => validate_start_url(url, self.diagnostics),
            None => Ok(()),
        }
    }
}

impl Viewport {
    fn validate(self) -> Result<(), Error> {
        let Viewport { width, height } = self;
        if (1..=10_000).contains(&width) && (1..=10_000).contains(&height) {
            return Ok(());
        }
        Err(Error::invalid_option(
            "viewport",
            format!("option `viewport` must be between 1×1 and 10000×10000, got {width}×{height}"),
        ))
    }
}

/// `d` is more than zero, or the option `name` is refused.
fn positive(name: &'static str, d: Duration) -> Result<(), Error> {
    if d.is_zero() {
        Err(Error::invalid_option(
            name,
            format!("option `{name}` must be greater than zero"),
        ))
    } else {
        Ok(())
    }
}

/// `value` is in `range`, or the option `name` is refused.
fn within(name: &'static str, value: usize, range: RangeInclusive<usize>) -> Result<(), Error> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(Error::invalid_option(
            name,
            format!(
                "option `{name}` must be between {} and {}, got {value}",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// A start URL outlive can navigate to: absolute, of a scheme a page opens. The error shows
/// it redacted (a query may carry a token).
fn validate_start_url(url: &str, diagnostics: Diagnostics) -> Result<(), Error> {
    let ok = url::Url::parse(url)
        .map(|u| matches!(u.scheme(), "http" | "https" | "file" | "about" | "data"))
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    Err(Error::invalid_option(
        "start_url",
        format!(
            "option `start_url` must be an absolute http, https, file, about or data URL, got {}",
            crate::redact::redact(url, diagnostics)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn also_on_milestone_keeps_the_callback_set_before() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (a, b) = (seen.clone(), seen.clone());
        let options = Options::new()
            .on_milestone(move |_| a.lock().unwrap().push("theirs"))
            .also_on_milestone(move |_| b.lock().unwrap().push("added"));
        options.note(Milestone::LaunchFailed {
            error: "refused".into(),
        });
        assert_eq!(*seen.lock().unwrap(), ["theirs", "added"]);
    }

    #[test]
    fn defaults_are_valid() {
        Options::new().validate().unwrap();
    }

    #[test]
    fn each_bad_value_names_its_option() {
        let cases = [
            (
                Options::new().checkpoint_every(Duration::ZERO),
                "checkpoint_every",
            ),
            (
                Options::new().navigation_timeout(Duration::ZERO),
                "navigation_timeout",
            ),
            (Options::new().viewport(0, 0), "viewport"),
            (Options::new().viewport(1280, 0), "viewport"),
            (
                Options::new().heartbeat_timeout(Duration::ZERO),
                "heartbeat_timeout",
            ),
            (Options::new().start_url("not a url"), "start_url"),
            (Options::new().start_url("/relative"), "start_url"),
            (Options::new().max_relaunches(5000), "max_relaunches"),
            (Options::new().max_sessions(0), "max_sessions"),
            (
                Options::new().rotation(Rotation::Expected(Duration::from_millis(10))),
                "rotation",
            ),
            (
                Options::new().indexed_db_max_bytes(0),
                "indexed_db_max_bytes",
            ),
            (
                Options::new().cache_storage_and_opfs_max_bytes(0),
                "cache_storage_and_opfs_max_bytes",
            ),
        ];
        for (options, name) in cases {
            let err = options.validate().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidOption);
            assert_eq!(err.option(), Some(name));
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
