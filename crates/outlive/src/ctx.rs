//! [`Ctx`]: what the task learns about its entry, and how it asks for a checkpoint. The
//! run's checkpoints are in a [`Store`]; one capture runs at a time ([`flight`]); a rotation
//! waits for a safe point ([`switch`]).

mod flight;
mod store;
mod switch;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::Instrument;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) use store::Store;

use crate::checkpoint::{Checkpoint, Progress};
use crate::error::Error;
use crate::lifetime::{CheckpointKind, SafePoints};
use crate::options::{OnMilestone, Options};
use crate::provider::BoxFuture;
use crate::redact::{Diagnostics, redact};
use crate::sync::lock;
use flight::Flight;
use switch::Switch;

/// Tries of one capture before it counts as failed.
const CAPTURE_TRIES: u32 = 3;
/// Between two tries.
const CAPTURE_RETRY: Duration = Duration::from_millis(50);

/// Captures a checkpoint from the entry's page, reading the frames' databases as told.
pub(crate) type Capturer =
    Arc<dyn Fn(DeepReads) -> BoxFuture<'static, Result<Checkpoint, Error>> + Send + Sync>;

/// How a capture reads the databases the frames store: the deep part of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeepReads {
    /// A frame's last full read may stand while Chromium reports no change to it: should the
    /// report come after the checkpoint, the next one holds the change (see
    /// `LiveBrowser::checkpoint_stale`).
    MayStand,
    /// Every frame's databases read in full: while a rotation is armed, the checkpoint may be
    /// the one the task resumes from in the successor at once, with no next one to make up for
    /// a late report.
    InFull,
}

/// Where a re-entered task resumes: the checkpoint restored into its browser.
#[derive(Clone, PartialEq, Eq)]
pub struct ResumedFrom {
    /// The URL the page was navigated to (the top frame's URL at the checkpoint).
    pub url: String,
    /// When that checkpoint was taken.
    pub checkpoint_at: SystemTime,
}

impl fmt::Debug for ResumedFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumedFrom")
            .field("url", &crate::redact::redact_url(&self.url))
            .field("checkpoint_at", &self.checkpoint_at)
            .finish()
    }
}

/// What an entry knows of the run and the browser beyond the task's page: for a task that
/// serves the browser to another client (a command).
#[derive(Clone, Default)]
pub(crate) struct EntryLink {
    /// The run's id (the wide event's `runId`).
    pub(crate) run_id: String,
    /// The browser's own CDP endpoint, when the backend has one (a secret).
    pub(crate) endpoint: Option<crate::CdpEndpoint>,
    /// The relay's calls, when the backend has a relay: the front tells it of a program's
    /// commands (see `relay::ProgramCall`).
    pub(crate) calls: Option<crate::relay::Calls>,
}

/// What every entry's [`Ctx`] takes from the run, resolved once: the options a checkpoint
/// follows, and what counts as progress.
#[derive(Clone)]
pub(crate) struct Rules {
    capture_timeout: Duration,
    /// How much of an error a log line may show (`Options::diagnostics`).
    diagnostics: Diagnostics,
    on_milestone: Option<OnMilestone>,
    /// Where checkpoints' time and size are recorded.
    metrics: Option<crate::Metrics>,
    /// Where checkpoints are saved, sealed, for a durable run.
    #[cfg(feature = "durable")]
    durable: Option<crate::Durable>,
    /// Whether a client's use counts as progress (`outlive serve`).
    client_use_counts: bool,
}

impl Rules {
    /// The rules of a run with `options`, whose backend says whether a client's use of the
    /// browser is progress.
    pub(crate) fn of(options: &Options, client_use_counts: bool) -> Rules {
        Rules {
            capture_timeout: options.capture_timeout,
            diagnostics: options.diagnostics,
            on_milestone: options.on_milestone.clone(),
            metrics: options.metrics.clone(),
            #[cfg(feature = "durable")]
            durable: options.durable.clone(),
            client_use_counts,
        }
    }
}

struct Inner {
    flight: Flight,
    link: EntryLink,
    /// Flips to `true` once, when the entry is retired.
    retired_tx: tokio::sync::watch::Sender<bool>,
    switch: Switch,
    attempt: u32,
    resumed_from: Option<ResumedFrom>,
    retired: AtomicBool,
    holds: AtomicU32,
    /// When the entry started.
    started: Instant,
    /// When the task's own newest checkpoint in this entry was written.
    last_own: Mutex<Option<Instant>>,
    capture: Capturer,
    store: Arc<Store>,
    rules: Rules,
    /// The progress this entry resumed with (from the restored checkpoint).
    restored_progress: Option<Progress>,
    /// The newest progress the task gave: every capture from now on carries it.
    progress: Mutex<Option<Progress>>,
    /// A checkpoint was kept with progress other than `restored_progress`.
    advanced: AtomicBool,
    /// The client the browser is served to sent it a command in this entry.
    client_used: AtomicBool,
}

/// The task's handle on its entry: which attempt this is, what was restored, and
/// [`Ctx::checkpoint`]. Cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    inner: Arc<Inner>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("attempt", &self.inner.attempt)
            .field("resumed_from", &self.inner.resumed_from)
            .field("retired", &self.is_retired())
            .finish()
    }
}

impl Ctx {
    pub(crate) fn new(
        attempt: u32,
        resumed_from: Option<ResumedFrom>,
        capture: Capturer,
        store: Arc<Store>,
        rules: Rules,
        restored_progress: Option<Progress>,
        link: EntryLink,
    ) -> Self {
        Ctx {
            inner: Arc::new(Inner {
                flight: Flight::default(),
                link,
                retired_tx: tokio::sync::watch::channel(false).0,
                switch: Switch::default(),
                attempt,
                resumed_from,
                retired: AtomicBool::new(false),
                holds: AtomicU32::new(0),
                started: Instant::now(),
                last_own: Mutex::new(None),
                capture,
                store,
                rules,
                progress: Mutex::new(restored_progress.clone()),
                restored_progress,
                advanced: AtomicBool::new(false),
                client_used: AtomicBool::new(false),
            }),
        }
    }

    /// 1 on the first entry, 2 after the first relaunch, and so on. This, not
    /// [`Ctx::resumed_from`], is the re-entry signal.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The checkpoint restored into this browser. `None` on the first entry, and also after
    /// a death that happened before any checkpoint existed.
    pub fn resumed_from(&self) -> Option<&ResumedFrom> {
        self.inner.resumed_from.as_ref()
    }

    /// Captures the browser state now (cookies, Web Storage, IndexedDB, the URL). Never fails:
    /// answers `true` if a checkpoint was written, `false` if not (the browser is dying, the
    /// capture timed out, or this entry was retired after a death).
    ///
    /// This is the task saying "what I did so far is saved": the next entry starts over from
    /// here, what comes after is redone (the wide event's `redoneMs`). With
    /// [`Options::rotation`](crate::Options::rotation), it is also where the task may be moved
    /// to a successor browser: the entry then ends inside this call, which never returns.
    ///
    /// One capture runs at a time. A call made while one is running (a periodic checkpoint,
    /// or another `checkpoint()` of the task) waits for it. It is then answered by one
    /// follow-up capture shared by every call that arrived meanwhile. It is never answered by
    /// the capture already running, which may have missed the state the call wants kept.
    pub async fn checkpoint(&self) -> bool {
        self.checkpoint_as(CheckpointKind::Own).await
    }

    /// An automatic checkpoint, on the run loop's clock.
    pub(crate) async fn checkpoint_periodic(&self) -> bool {
        self.checkpoint_as(CheckpointKind::Periodic).await
    }

    async fn checkpoint_as(&self, kind: CheckpointKind) -> bool {
        if self.is_retired() {
            return false;
        }
        let turn = self.inner.flight.turn().await;
        let wrote = match turn.answered() {
            Some(wrote) => wrote,
            None if self.is_retired() => return false,
            None => turn.capture(self.capture()).await,
        };
        if wrote {
            if kind == CheckpointKind::Own {
                self.note_own();
            }
            self.park_if_switching(kind).await;
        }
        wrote
    }

    /// The task's own checkpoint was written: its progress is safe up to now.
    fn note_own(&self) {
        let now = Instant::now();
        let mut last = lock(&self.inner.last_own);
        let since = last.unwrap_or(self.inner.started);
        self.inner
            .store
            .note_own_gap(now.saturating_duration_since(since));
        *last = Some(now);
    }

    /// When the task's own newest checkpoint in this entry was written, or the entry started:
    /// what a cut now would make it redo is the time since.
    pub(crate) fn own_since(&self) -> Instant {
        lock(&self.inner.last_own).unwrap_or(self.inner.started)
    }

    /// Whether the task wrote a checkpoint of its own in this entry.
    pub(crate) fn made_own_checkpoint(&self) -> bool {
        lock(&self.inner.last_own).is_some()
    }

    /// Whether this entry moved the run on, which starts the budget's counts in a row again
    /// (see `Options::max_relaunches`). That is a checkpoint kept with progress other than the
    /// one the entry was handed. In a run with no progress saved yet, a checkpoint of the
    /// task's own counts. Under `serve`, so does a client that used the browser.
    pub(crate) fn made_progress(&self) -> bool {
        let inner = &self.inner;
        inner.advanced.load(Ordering::SeqCst)
            || (inner.restored_progress.is_none() && self.made_own_checkpoint())
            || (inner.rules.client_use_counts && inner.client_used.load(Ordering::SeqCst))
    }

    /// The client the browser is served to sent it a command.
    /// Tells the run's milestone callback, if any.
    pub(crate) fn note(&self, milestone: &crate::report::Milestone) {
        if let Some(f) = &self.inner.rules.on_milestone {
            f(milestone);
        }
    }

    pub(crate) fn note_client_used(&self) {
        if !self.inner.client_used.load(Ordering::Relaxed) {
            self.inner.client_used.store(true, Ordering::SeqCst);
        }
    }

    /// Like [`Ctx::checkpoint`], with the task's own progress saved in the same checkpoint:
    /// a re-entered task reads it back with [`Ctx::progress`], so it keeps no state outside
    /// itself. The progress and the browser state are kept together or not at all: when this
    /// answers `true`, the checkpoint written holds `progress` and the browser as it was after
    /// the call. Later checkpoints (periodic ones too) carry the same progress until the next
    /// call.
    ///
    /// Answers `false` without a capture if `progress` cannot be serialised to JSON (a map
    /// with non-string keys, a failing `Serialize` impl): the error is logged (its kind, never
    /// the value) and the progress kept is the one before.
    ///
    /// ```no_run
    /// # async fn demo(ctx: outlive::Ctx) {
    /// #[derive(serde::Serialize, serde::Deserialize, Default)]
    /// struct Done { pages: u32 }
    ///
    /// let mut done: Done = ctx.progress().ok().flatten().unwrap_or_default();
    /// while done.pages < 100 {
    ///     // … scrape page `done.pages` …
    ///     done.pages += 1;
    ///     ctx.checkpoint_with(&done).await;
    /// }
    /// # }
    /// ```
    pub async fn checkpoint_with<P: Serialize + ?Sized>(&self, progress: &P) -> bool {
        let json = match serde_json::to_string(progress) {
            Ok(json) => zeroize::Zeroizing::new(json),
            Err(e) => {
                tracing::warn!(
                    attempt = self.inner.attempt,
                    error = ?e.classify(),
                    "the task's progress could not be serialised to JSON; no checkpoint taken"
                );
                return false;
            }
        };
        *lock(&self.inner.progress) = Some(Arc::new(json));
        self.checkpoint().await
    }

    /// The progress this entry resumed with: what the task gave [`Ctx::checkpoint_with`] for
    /// the checkpoint restored into this browser. `Ok(None)` on the first entry, or when that
    /// checkpoint holds no progress.
    ///
    /// # Errors
    ///
    /// [`crate::ErrorKind::Progress`] when the stored progress does not deserialise as `P`
    /// (the task's progress type changed between the run's entries).
    pub fn progress<P: DeserializeOwned>(&self) -> Result<Option<P>, Error> {
        let Some(json) = &self.inner.restored_progress else {
            return Ok(None);
        };
        serde_json::from_str(json).map(Some).map_err(|e| {
            Error::new(
                crate::ErrorKind::Progress,
                format!(
                    "the progress saved with the checkpoint does not read as {} ({:?} error at line {}, column {}); did the task's progress type change?",
                    std::any::type_name::<P>(),
                    e.classify(),
                    e.line(),
                    e.column()
                ),
            )
        })
    }

    /// At a safe point with a switch armed: waits here until the loop ends the entry (this
    /// future is then dropped) or calls the switch off.
    async fn park_if_switching(&self, kind: CheckpointKind) {
        if self.is_held() || self.is_retired() || !self.is_safe_point(kind, Instant::now()) {
            return;
        }
        tracing::debug!(
            attempt = self.inner.attempt,
            ?kind,
            "at a safe point; switching browsers"
        );
        self.inner.switch.park().await;
    }

    /// Whether a `kind` checkpoint written at `now` is a safe point of the armed switch.
    pub(crate) fn is_safe_point(&self, kind: CheckpointKind, now: Instant) -> bool {
        let armed = self.inner.switch.armed();
        armed.is_some_and(|points| {
            points.is_safe(kind, now, self.own_since(), self.inner.store.cadence())
        })
    }

    /// From when an automatic checkpoint is a safe point of the armed switch, if ever.
    pub(crate) fn periodic_safe_from(&self) -> Option<Instant> {
        let armed = self.inner.switch.armed();
        armed.and_then(|points| points.periodic_from(self.own_since(), self.inner.store.cadence()))
    }

    /// Arms the switch: from now on, a checkpoint written outside a hold at one of `points`
    /// parks the task.
    pub(crate) fn arm_switch(&self, points: SafePoints) {
        self.inner.switch.arm(points);
    }

    /// Calls the switch off; a checkpoint parked at a safe point returns to the task.
    pub(crate) fn disarm_switch(&self) {
        self.inner.switch.disarm();
    }

    pub(crate) fn is_switch_armed(&self) -> bool {
        self.inner.switch.armed().is_some()
    }

    /// Resolves once a checkpoint is parked at a safe point. Cancel-safe.
    pub(crate) fn at_safe_point(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.switch.parked()
    }

    /// One capture, offered to the store, in a `checkpoint` span (its size and whether it
    /// was kept recorded on it).
    async fn capture(&self) -> bool {
        let span = tracing::info_span!(
            "checkpoint",
            attempt = i64::from(self.inner.attempt),
            bytes = tracing::field::Empty,
            kept = tracing::field::Empty,
        );
        let kept = self.capture_now().instrument(span.clone()).await;
        span.record("kept", kept);
        kept
    }

    /// One capture, offered to the store.
    async fn capture_now(&self) -> bool {
        let started = Instant::now();
        // A cap too big to add (`Duration::MAX` as "no cap") is a year.
        let deadline = started
            .checked_add(self.inner.rules.capture_timeout)
            .unwrap_or(started + Duration::from_secs(365 * 24 * 3600));
        // The progress as of the capture's start: the browser state captured is after it.
        let progress = lock(&self.inner.progress).clone();
        let mut tries = 0;
        // A capture that races a navigation fails (its document went away under it); the next
        // document is there a moment later, so a failed capture is tried again soon rather
        // than an interval later.
        let captured = loop {
            tries += 1;
            let reads = if self.is_switch_armed() {
                DeepReads::InFull
            } else {
                DeepReads::MayStand
            };
            match tokio::time::timeout_at(deadline, (self.inner.capture)(reads)).await {
                Ok(Err(e)) if tries < CAPTURE_TRIES && !self.is_retired() => {
                    tracing::debug!(attempt = self.inner.attempt, error = %redact(&e.to_string(), self.inner.rules.diagnostics), "checkpoint capture failed; trying again");
                    tokio::time::sleep(CAPTURE_RETRY).await;
                }
                other => break other,
            }
        };
        match captured {
            Ok(Ok(mut cp)) if !self.is_retired() => {
                // Compared as JSON text: the same value sent twice is sent alike.
                let advances = progress.as_ref().map(|p| p.as_str())
                    != self.inner.restored_progress.as_ref().map(|p| p.as_str());
                cp.progress = progress;
                let bytes = cp.bytes();
                tracing::Span::current().record("bytes", bytes as i64);
                #[cfg(feature = "durable")]
                let plain = self.inner.rules.durable.as_ref().map(|_| cp.to_bytes());
                let kept = self.inner.store.offer(cp);
                // A durable run's checkpoint counts once its store has it.
                #[cfg(feature = "durable")]
                let kept = match (kept, plain, &self.inner.rules.durable) {
                    (true, Some(plain), Some(durable)) => {
                        self.persist(durable, &plain, deadline).await
                    }
                    (kept, ..) => kept,
                };
                if kept && advances {
                    self.inner.advanced.store(true, Ordering::SeqCst);
                }
                if let (true, Some(m)) = (kept, &self.inner.rules.metrics) {
                    m.checkpointed(started.elapsed(), bytes);
                }
                if let (true, Some(f)) = (kept, &self.inner.rules.on_milestone) {
                    f(&crate::report::Milestone::Checkpointed {
                        took: started.elapsed(),
                        bytes,
                    });
                }
                tracing::debug!(
                    attempt = self.inner.attempt,
                    bytes,
                    kept,
                    "checkpoint captured"
                );
                kept
            }
            Ok(Ok(_)) => false,
            Ok(Err(e)) => {
                tracing::debug!(attempt = self.inner.attempt, error = %redact(&e.to_string(), self.inner.rules.diagnostics), "checkpoint capture failed");
                false
            }
            Err(_) => {
                tracing::debug!(attempt = self.inner.attempt, "checkpoint capture timed out");
                false
            }
        }
    }

    /// Seals `plain` and saves it in the durable run's store, by `deadline`.
    #[cfg(feature = "durable")]
    async fn persist(&self, durable: &crate::Durable, plain: &[u8], deadline: Instant) -> bool {
        let sealed = durable.sealer.seal(&durable.run_id, plain);
        let attempt = self.inner.attempt;
        let save = durable.store.save(&durable.run_id, attempt, sealed);
        match tokio::time::timeout_at(deadline, save).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(attempt, error = %redact(&e.to_string(), self.inner.rules.diagnostics), "the checkpoint could not be saved: it serves a relaunch here, not a takeover");
                false
            }
            Err(_) => {
                tracing::warn!(
                    attempt,
                    "saving the checkpoint did not finish within capture_timeout"
                );
                false
            }
        }
    }

    pub(crate) fn retire(&self) {
        self.inner.retired.store(true, Ordering::SeqCst);
        self.inner.retired_tx.send_replace(true);
    }

    /// Resolves once the entry is retired (its browser or page failed, or it was cut at a
    /// safe point). Cancel-safe; not tied to `self`'s lifetime.
    pub(crate) fn retired(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.retired_tx.subscribe();
        async move {
            let _ = rx.wait_for(|r| *r).await;
        }
    }

    /// The run's id and the browser's endpoint.
    pub(crate) fn link(&self) -> &EntryLink {
        &self.inner.link
    }

    /// What the next entry will resume from if this one is cut now: the newest checkpoint's
    /// URL and time, and the progress saved with it.
    pub(crate) fn next_resume(&self) -> (Option<ResumedFrom>, Option<Progress>) {
        match self.inner.store.latest() {
            Some(cp) => (
                Some(ResumedFrom {
                    url: cp.url.clone(),
                    checkpoint_at: cp.at,
                }),
                cp.progress.clone(),
            ),
            None => (None, None),
        }
    }

    /// The progress this entry resumed with, as the JSON it was saved as.
    pub(crate) fn progress_json(&self) -> Option<&str> {
        self.inner.restored_progress.as_ref().map(|p| p.as_str())
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.inner.retired.load(Ordering::SeqCst)
    }

    /// Holds the automatic checkpoints until the returned guard is dropped.
    ///
    /// A periodic capture can land in the middle of a multi-step, non-repeatable operation
    /// (between "the bank accepted the TOTP" and "the welcome page stored its preference") and
    /// checkpoint a state that is neither before nor after it. Hold the automatic checkpoints
    /// for the operation, then call [`Ctx::checkpoint`] when it is done: a death inside it
    /// then resumes from before it, and the task's re-entry check sees it undone.
    /// [`Ctx::checkpoint`] itself is not held.
    ///
    /// A hold also holds a planned rotation ([`Options::rotation`](crate::Options::rotation)),
    /// which switches browsers at the task's last own checkpoint before the predicted death. A
    /// hold that runs into the death meets it instead. Its step is then redone on the
    /// successor, already up.
    ///
    /// ```no_run
    /// # async fn demo(ctx: outlive::Ctx) {
    /// {
    ///     let _hold = ctx.hold_checkpoints();
    ///     // … sign in: password, TOTP, welcome page …
    /// }
    /// ctx.checkpoint().await;
    /// # }
    /// ```
    pub fn hold_checkpoints(&self) -> CheckpointHold {
        self.inner.holds.fetch_add(1, Ordering::SeqCst);
        CheckpointHold { ctx: self.clone() }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.inner.holds.load(Ordering::SeqCst) > 0
    }
}

/// Returned by [`Ctx::hold_checkpoints`]; automatic checkpoints resume when it is dropped.
#[must_use = "the hold ends when this guard is dropped"]
#[derive(Debug)]
pub struct CheckpointHold {
    ctx: Ctx,
}

impl Drop for CheckpointHold {
    fn drop(&mut self) {
        self.ctx.inner.holds.fetch_sub(1, Ordering::SeqCst);
    }
}
