//! Chromium's IndexedDB change tracking, which lets a capture take a frame's IndexedDB as
//! unchanged instead of reading it again (see `IdbWatch`). A capture uses it through a few
//! calls: [`IdbWatch::begin`] (what its script may take as unchanged), [`IdbWatch::moved`]
//! (which frames to read again) and [`IdbWatch::settle`] (what it read), each frame's read
//! described by an [`IdbAnswer`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::storage::{
    GetStorageKeyParams, TrackIndexedDbForStorageKeyParams, UntrackIndexedDbForStorageKeyParams,
};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::{PartCache, is_storable_origin};
use crate::relay::Calls;
use tokio_util::task::AbortOnDropHandle;

/// Whether a frame's IndexedDB may have changed since the capture script last read it in full.
/// It listens to Chromium's own change events for the frame's storage key. While none came, the
/// capture takes the last read as standing, so an unchanged IndexedDB costs nothing more.
/// The events may come after the commit, so a checkpoint that relied on them is watched after
/// it is taken ([`IdbWatch::stale`]). How and why, with the measurements:
/// `docs/survives.md`, "How the checkpoint reads IndexedDB".
/// One watch per page session: tracking belongs to the session.
#[derive(Default)]
pub(crate) struct IdbWatch {
    state: Mutex<IdbState>,
    /// Woken when the newest checkpoint may lack a change (see `Seen::stood`).
    stale: Arc<Notify>,
}

/// Chromium answers a session's first tracking at once but registers the observer behind it
/// with the storage service without waiting (`StorageHandler::GetIndexedDBObserver`): a commit
/// in that moment is never reported. A read counts as unchanged-since only if its capture began
/// this long after that first answer.
const OBSERVER_SETTLES: Duration = Duration::from_secs(1);

/// However quiet Chromium's change events are, a frame's IndexedDB is read in full at least
/// this often. The events' order is observed, not promised by the protocol. And a tracking
/// Chromium dropped without closing the session would otherwise go unnoticed.
const IDB_READ_IN_FULL_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct IdbState {
    /// The watcher, once a key is tracked.
    events: Option<IdbEvents>,
    /// What the watcher has seen; shared with it.
    seen: Arc<Mutex<Seen>>,
    /// The last full read of each scope's IndexedDB.
    last: HashMap<String, IdbRead>,
    /// The storage key of each scope met (a scope always has the same one: see the capture
    /// script).
    keys: HashMap<String, String>,
    /// Full reads reported so far.
    #[cfg(test)]
    full_reads: u64,
}

/// What the watcher has seen of Chromium's change events.
#[derive(Default)]
struct Seen {
    /// Storage keys tracked now: the watcher untracks each at its first change (the next
    /// full read of it tracks it again), so however many transactions a page commits between
    /// two captures, at most a few events per key are ever sent.
    tracked: HashSet<String>,
    /// Storage keys whose tracking was asked for and not answered yet, with the key's change
    /// count then: a start answered after a change is not taken as tracking (the change had
    /// the tracking stopped behind it).
    asking: HashMap<String, u64>,
    /// Every storage key a tracking was asked for on this session.
    ever: HashSet<String>,
    /// The change events so far.
    changes: Changes,
    /// The events' streams ended: no change would be heard, so nothing is taken as unchanged.
    ended: bool,
    /// The storage keys whose frames' reads the newest capture took as standing (see
    /// [`IdbWatch::settle`]): a change to one of them from now on means that checkpoint may
    /// lack it. Replaced by each capture's; a key leaves it at its change (one wake-up each).
    stood: HashSet<String>,
    /// Such a change came, and [`IdbWatch::stale`] is still to be woken.
    stale: bool,
    /// From when Chromium's observer behind the trackings is taken as registered (see
    /// [`OBSERVER_SETTLES`]); `None` before the session's first tracking.
    observing_from: Option<Instant>,
}

impl Seen {
    /// Counts a change event for storage key `key`; answers whether Chromium is to stop
    /// tracking it. An event for a key never tracked here (a form of key this code does not
    /// know) counts as a change to every key.
    fn note(&mut self, key: String) -> bool {
        self.changes.all += 1;
        if !self.ever.contains(&key) {
            self.changes.unattributed += 1;
            self.stale |= !self.stood.is_empty();
            self.stood.clear();
            return false;
        }
        if self.stood.remove(&key) {
            self.stale = true;
        }
        let untrack = self.tracked.remove(&key) | self.asking.remove(&key).is_some();
        *self.changes.per_key.entry(key).or_default() += 1;
        untrack
    }

    /// Whether to ask for `key`'s tracking: not while it is tracked or asked for already (a
    /// second start answered after a stop would leave it noted tracked while Chromium is not
    /// tracking it). Notes it asked for, at its change count now.
    fn ask(&mut self, key: &str) -> Option<u64> {
        if self.tracked.contains(key) || self.asking.contains_key(key) {
            return None;
        }
        let at = self.changes.per_key.get(key).copied().unwrap_or(0);
        self.asking.insert(key.to_owned(), at);
        self.ever.insert(key.to_owned());
        Some(at)
    }

    /// Chromium answered the start of `key`'s tracking asked at change count `at`: tracked,
    /// unless a change came since (which stopped it) or the events ended.
    fn answered(&mut self, key: String, at: u64, started: bool) {
        if self.asking.get(&key) != Some(&at) {
            return;
        }
        self.asking.remove(&key);
        if started && !self.ended {
            self.tracked.insert(key);
            self.observing_from
                .get_or_insert_with(|| Instant::now() + OBSERVER_SETTLES);
        }
    }

    /// The storage keys tracked, as far as reads may rely on it: none until Chromium's
    /// observer had time to register.
    fn relied_on(&self) -> HashSet<String> {
        match self.observing_from {
            Some(from) if Instant::now() >= from => self.tracked.clone(),
            _ => HashSet::new(),
        }
    }

    /// The events' streams ended: nothing is tracked any more, and what came meanwhile is
    /// unknown, so it counts as a change to every key.
    fn end(&mut self) {
        self.ended = true;
        self.tracked.clear();
        self.asking.clear();
        self.changes.unattributed += 1;
    }
}

/// Change events counted: in all, per storage key, and those of no key tracked here.
#[derive(Clone, Default)]
struct Changes {
    all: u64,
    per_key: HashMap<String, u64>,
    unattributed: u64,
}

impl Changes {
    /// The changes that may have touched `key`.
    fn of(&self, key: &str) -> u64 {
        self.per_key.get(key).copied().unwrap_or(0) + self.unattributed
    }
}

/// Chromium's change events on this session, and the two tasks that keep up with them. The
/// watcher counts each event by its storage key as it comes, and asks for a key's tracking to
/// stop at its first change without waiting for it (so no event waits uncounted behind a round
/// trip); a capture counts whatever is already delivered before it decides anything
/// ([`IdbEvents::count_delivered`]), so an event the relay has handed over is counted
/// however the tasks are scheduled. The tracker sends Chromium the starts and stops of
/// tracking in the order they were asked for (one start per key at a time: see `Seen::ask`)
/// and notes a key tracked once Chromium said so, unless a change came since. Both tasks stop
/// with this value.
struct IdbEvents {
    feed: Arc<Mutex<Feed>>,
    commands: mpsc::UnboundedSender<Tracking>,
    /// The watch's [`IdbWatch::stale`].
    stale: Arc<Notify>,
    _watcher: AbortOnDropHandle<()>,
    _tracker: AbortOnDropHandle<()>,
}

/// The events' storage keys as the relay reads them, taken by the watcher and by captures.
struct Feed {
    keys: mpsc::UnboundedReceiver<String>,
}

/// What the tracker sends Chromium.
enum Tracking {
    /// Start tracking a key (asked at that change count of it).
    Track(String, u64),
    /// Stop tracking a key.
    Untrack(String),
}

impl IdbEvents {
    fn watch(
        page: &Page,
        keys: mpsc::UnboundedReceiver<String>,
        seen: Arc<Mutex<Seen>>,
        stale: Arc<Notify>,
    ) -> IdbEvents {
        let feed = Arc::new(Mutex::new(Feed { keys }));
        let (commands, mut todo) = mpsc::unbounded_channel();
        let (watched, stops, counted) = (feed.clone(), commands.clone(), seen.clone());
        let wake = stale.clone();
        let watcher = crate::quiet::spawn(async move {
            loop {
                let next = futures::future::poll_fn(|cx| lock(&watched).keys.poll_recv(cx)).await;
                if !note(&counted, next, &stops, &wake) {
                    break;
                }
            }
        });
        let page = page.clone();
        let tracker = crate::quiet::spawn(async move {
            while let Some(command) = todo.recv().await {
                match command {
                    Tracking::Track(key, at) => {
                        let ask = TrackIndexedDbForStorageKeyParams::new(key.clone());
                        let started = page.execute(ask).await;
                        if let Err(e) = &started {
                            tracing::debug!(error = %e, "IndexedDB change tracking unavailable; every capture reads it in full");
                        }
                        lock(&seen).answered(key, at, started.is_ok());
                    }
                    Tracking::Untrack(key) => {
                        let ask = UntrackIndexedDbForStorageKeyParams::new(key);
                        let _ = page.execute(ask).await;
                    }
                }
            }
        });
        IdbEvents {
            feed,
            commands,
            stale,
            _watcher: AbortOnDropHandle::new(watcher),
            _tracker: AbortOnDropHandle::new(tracker),
        }
    }

    /// Counts every event already delivered (the watcher stays registered for what comes
    /// next).
    fn count_delivered(&self, seen: &Mutex<Seen>) {
        let mut feed = lock(&self.feed);
        loop {
            let next = match feed.keys.try_recv() {
                Ok(key) => Some(key),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => None,
            };
            if !note(seen, next, &self.commands, &self.stale) {
                return;
            }
        }
    }
}

/// Counts one event (`Some` key) or the end of the events (`None`), asking the tracker to
/// stop tracking a key at its first change and waking `stale` at a change the newest
/// checkpoint may lack; answers whether more may come.
fn note(
    seen: &Mutex<Seen>,
    next: Option<String>,
    tracker: &mpsc::UnboundedSender<Tracking>,
    stale: &Notify,
) -> bool {
    let mut seen = lock(seen);
    match next {
        Some(key) => {
            if seen.note(key.clone()) {
                let _ = tracker.send(Tracking::Untrack(key));
            }
            if std::mem::take(&mut seen.stale) {
                stale.notify_one();
            }
            true
        }
        None => {
            seen.end();
            false
        }
    }
}

/// Locks `m`, taking what a poisoned lock guards as it stands.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The last full read of a scope's IndexedDB.
struct IdbRead {
    hash: String,
    list: String,
    /// Its storage key.
    key: String,
    /// The key's change count when the capture that read it started.
    changes: u64,
    /// When it was read.
    at: Instant,
    /// Whether its storage key was tracked when that capture started, and still after it.
    tracked: bool,
}

/// What a capture starts with (see [`IdbWatch::begin`]).
pub(super) struct Begun {
    /// The change counts.
    changes: Changes,
    /// What the capture script may take as unchanged: `[{scope, hash, list}]`.
    same: Vec<serde_json::Value>,
    /// The storage keys tracked (a read of one of them counts as unchanged-since).
    tracked: HashSet<String>,
}

impl Begun {
    /// What the capture script may take as unchanged: `[{scope, hash, list}]`.
    pub(super) fn offered(&self) -> &[serde_json::Value] {
        &self.same
    }
}

/// What a capture's read of one frame says of its IndexedDB.
#[derive(Clone, Copy)]
pub(super) struct IdbAnswer<'a> {
    /// The frame's scope, as its script stated it (`None` where unknown).
    pub(super) scope: Option<&'a str>,
    /// The IndexedDB part the script sent, if any.
    pub(super) part: Option<IdbPart<'a>>,
    /// The frame's origin.
    pub(super) origin: &'a str,
    /// An out-of-process frame's id (empty where unknown); `None` for the top frame.
    pub(super) frame_id: Option<&'a str>,
}

/// An IndexedDB part as the capture script sent it.
#[derive(Clone, Copy)]
pub(super) struct IdbPart<'a> {
    pub(super) hash: &'a str,
    /// The databases found (names and versions): sent with a full read only.
    pub(super) list: Option<&'a str>,
    /// Whether the content was sent.
    pub(super) sent: bool,
}

impl<'a> IdbAnswer<'a> {
    /// The same answer, of the out-of-process frame `frame_id`.
    pub(super) fn in_frame(self, frame_id: &'a str) -> Self {
        IdbAnswer {
            frame_id: Some(frame_id),
            ..self
        }
    }

    /// Whether the script took IndexedDB as unchanged since the last full read (it sent
    /// neither the database list nor the data).
    fn taken_as_unchanged(&self) -> bool {
        self.part.is_some_and(|p| p.list.is_none() && !p.sent)
    }

    /// The full read this answer is (it sent the database list), where its storage key can
    /// be known.
    fn full_read(&self) -> Option<FullRead> {
        let origin = self.origin.to_owned();
        let frame = match self.frame_id {
            None => Frame::Top { origin },
            Some(frame_id) => {
                // A frame with no ancestors would share its scope with a top frame of its
                // origin.
                let framed = self.scope.is_some_and(|s| s.contains(' '));
                if frame_id.is_empty() || !framed {
                    return None;
                }
                let frame_id = frame_id.to_owned();
                Frame::Remote { frame_id, origin }
            }
        };
        let part = self.part?;
        Some(FullRead {
            scope: self.scope?.to_owned(),
            frame,
            hash: part.hash.to_owned(),
            list: part.list?.to_owned(),
        })
    }
}

/// The scopes whose storage key may have changed since a capture began (see
/// [`IdbWatch::moved`]).
pub(super) struct Moved(HashSet<String>);

impl Moved {
    /// Whether the frame that gave `answer` is to be read again: it took its last full read as
    /// standing, and its scope moved (or is unknown).
    pub(super) fn to_read_again(&self, answer: &IdbAnswer) -> bool {
        answer.taken_as_unchanged() && answer.scope.is_none_or(|s| self.0.contains(s))
    }
}

/// What a capture's frames said of their IndexedDB, kept for [`IdbWatch::settle`].
pub(super) struct IdbAnswers {
    /// The frames read in full.
    full: Vec<FullRead>,
    /// The scopes of the frames that took their last full read as standing.
    standing: Vec<String>,
}

impl IdbAnswers {
    /// Keeps what `answers` (the top frame's first) say.
    pub(super) fn of<'a>(answers: impl IntoIterator<Item = IdbAnswer<'a>>) -> Self {
        let mut kept = IdbAnswers {
            full: Vec::new(),
            standing: Vec::new(),
        };
        for answer in answers {
            if answer.taken_as_unchanged()
                && let Some(scope) = answer.scope
            {
                kept.standing.push(scope.to_owned());
            }
            kept.full.extend(answer.full_read());
        }
        kept
    }
}

/// A frame whose IndexedDB a capture read in full.
struct FullRead {
    /// What the script said the frame's scope is.
    scope: String,
    frame: Frame,
    hash: String,
    list: String,
}

/// Where a frame read in full is, for its storage key.
enum Frame {
    /// The top frame: its origin's (first-party) storage key.
    Top { origin: String },
    /// An out-of-process frame of `origin`: its storage key asked of the browser by its frame
    /// id.
    Remote { frame_id: String, origin: String },
}

impl IdbWatch {
    /// A watch for another page session whose [`IdbWatch::stale`] wakes this one's waiter too:
    /// one wait covers every tab.
    pub(crate) fn beside(&self) -> IdbWatch {
        IdbWatch {
            state: Mutex::default(),
            stale: self.stale.clone(),
        }
    }

    /// The watch's state, locked (before its `seen`, where both are).
    fn state(&self) -> std::sync::MutexGuard<'_, IdbState> {
        lock(&self.state)
    }

    /// Resolves once a checkpoint taken on this page may lack an IndexedDB change Chromium
    /// reported after the capture's last look (see [`IdbWatch::settle`]): the next capture holds
    /// it. Cancel-safe; a wake-up before anyone waits is kept for the next wait.
    pub(crate) async fn stale(&self) {
        self.stale.notified().await;
    }

    /// At the end of a capture, begun as `begun`, whose frames said `answers`: notes each full
    /// read (see [`IdbWatch::read_in_full`]), then watches the reads taken as standing (see
    /// [`IdbWatch::watch_standing`]).
    pub(super) async fn settle(
        &self,
        page: &Page,
        calls: &Calls,
        begun: &Begun,
        answers: IdbAnswers,
    ) {
        let IdbAnswers { full, standing } = answers;
        let tracking = full
            .into_iter()
            .map(|read| self.read_in_full(page, calls, read, begun));
        futures::future::join_all(tracking).await;
        self.watch_standing(&standing, begun);
    }

    /// At the end of a capture, begun as `begun`, whose frames of `scopes` took their last full
    /// read as standing: from now on (until the next capture ends), a change event for one of
    /// their storage keys wakes [`IdbWatch::stale`] — as does one that came since the capture
    /// began, after its last look. (A capture that fails leaves the one before watched.)
    fn watch_standing(&self, scopes: &[String], begun: &Begun) {
        // A wake-up stored for the checkpoint before is this one's to give now (this capture
        // looked at every key since it began).
        let _ = futures::FutureExt::now_or_never(self.stale.notified());
        let state = self.state();
        state.count_delivered();
        let mut seen = lock(&state.seen);
        seen.stood.clear();
        let mut moved = false;
        for key in scopes
            .iter()
            .filter_map(|scope| state.last.get(scope))
            .map(|r| &r.key)
        {
            if seen.changes.of(key) == begun.changes.of(key) {
                seen.stood.insert(key.clone());
            } else {
                moved = true;
            }
        }
        drop(seen);
        if moved {
            self.stale.notify_one();
        }
    }

    /// After a capture's first reads (`answers`): if a frame took its last full read as standing
    /// and a change came since `begun` (a commit the page may have acted on in what was read),
    /// the scopes whose storage key may have changed.
    pub(super) fn moved<'a>(
        &self,
        begun: &Begun,
        answers: impl IntoIterator<Item = IdbAnswer<'a>>,
    ) -> Option<Moved> {
        let offered = !begun.same.is_empty();
        if !(offered && answers.into_iter().any(|a| a.taken_as_unchanged())) {
            return None;
        }
        self.moved_since(&begun.changes).map(Moved)
    }

    /// If a change came (or the tracking ended) since `begin` answered `changes`: the scopes
    /// whose storage key may have changed (every scope read, once the tracking ended).
    fn moved_since(&self, changes: &Changes) -> Option<HashSet<String>> {
        let state = self.state();
        state.count_delivered();
        let seen = lock(&state.seen);
        let over = state.events.is_none() || seen.ended;
        if !over && seen.changes.all == changes.all {
            return None;
        }
        let scopes = state
            .last
            .iter()
            .filter(|(_, r)| over || seen.changes.of(&r.key) != changes.of(&r.key))
            .map(|(scope, _)| scope.clone())
            .collect();
        Some(scopes)
    }

    /// At a capture's start: the change counts, what the capture script may take as
    /// unchanged (a scope read in full while its key was tracked, with no change to that key
    /// since), and which storage keys are tracked. Reads too old to be offered are forgotten
    /// (with their scope's key; the keys' change counts stay, a few bytes each). `in_full`:
    /// nothing may be taken as unchanged.
    pub(super) fn begin(&self, cache: &PartCache, in_full: bool) -> Begun {
        let mut begun = self.offer(cache);
        if in_full {
            begun.same.clear();
        }
        begun
    }

    /// [`IdbWatch::begin`], offering what may be taken as unchanged.
    fn offer(&self, cache: &PartCache) -> Begun {
        let mut state = self.state();
        let state = &mut *state;
        state.count_delivered();
        state
            .last
            .retain(|_, r| r.at.elapsed() < IDB_READ_IN_FULL_EVERY);
        let last = &state.last;
        state.keys.retain(|scope, _| last.contains_key(scope));
        let seen = lock(&state.seen);
        let same = state
            .last
            .iter()
            .filter(|(_, r)| {
                r.tracked
                    && !seen.ended
                    && seen.tracked.contains(&r.key)
                    && r.changes == seen.changes.of(&r.key)
                    && cache.get(&r.hash).is_some()
            })
            .map(|(scope, r)| serde_json::json!({ "scope": scope, "hash": r.hash, "list": r.list }))
            .collect();
        Begun {
            changes: seen.changes.clone(),
            same,
            tracked: seen.relied_on(),
        }
    }

    /// After a capture, begun as `begun`, that read a frame's IndexedDB in full (`read`): that
    /// read stands for the key's changes as the capture began (a change during the capture,
    /// before or after the read, has the next capture read it again). Starts tracking the
    /// frame's storage key if it is not tracked yet: that read does not count as
    /// unchanged-since, the next one will.
    async fn read_in_full(&self, page: &Page, calls: &Calls, read: FullRead, begun: &Begun) {
        let FullRead {
            scope,
            frame,
            hash,
            list,
        } = read;
        let Some(key) = self.key_of(page, &scope, &frame).await else {
            return;
        };
        let tracked = {
            let mut state = self.state();
            #[cfg(test)]
            {
                state.full_reads += 1;
            }
            // Tracked as the capture began (a key another frame's read started tracking
            // meanwhile was not tracked during this one) and still (a change since stopped it).
            let tracked = begun.tracked.contains(&key) && lock(&state.seen).tracked.contains(&key);
            let read = IdbRead {
                hash,
                list,
                changes: begun.changes.of(&key),
                key: key.clone(),
                at: Instant::now(),
                tracked,
            };
            state.last.insert(scope, read);
            tracked
        };
        if !tracked {
            self.track(page, calls, key);
        }
    }

    /// The storage key of the frame read as `scope` (see [`storage_key`]), remembered once
    /// known (not when unknown: the browser may say next time).
    async fn key_of(&self, page: &Page, scope: &str, frame: &Frame) -> Option<String> {
        let known = self.state().keys.get(scope).cloned();
        if known.is_some() {
            return known;
        }
        let key = storage_key(page, frame).await?;
        self.state().keys.insert(scope.to_owned(), key.clone());
        Some(key)
    }

    /// Has Chromium track `key` (without waiting for it: the tracker notes it tracked once
    /// Chromium says so), having the relay hand over the page session's change events first —
    /// the watcher started, or started again if its events ended — so no event after it is
    /// missed. Nothing is tracked with no relay behind `calls`.
    fn track(&self, page: &Page, calls: &Calls, key: String) {
        let mut state = self.state();
        if state.events.is_none() || lock(&state.seen).ended {
            let session = page.session_id().as_ref().to_owned();
            let Some(keys) = calls.indexed_db_changes(session) else {
                return;
            };
            let seen = state.seen.clone();
            lock(&seen).ended = false;
            state.events = Some(IdbEvents::watch(page, keys, seen, self.stale.clone()));
        }
        let Some(events) = &state.events else {
            return;
        };
        // Known before Chromium can send an event for it.
        let Some(at) = lock(&state.seen).ask(&key) else {
            return;
        };
        let _ = events.commands.send(Tracking::Track(key, at));
    }
}

impl IdbState {
    /// Counts the change events already delivered (see [`IdbEvents`]).
    fn count_delivered(&self) {
        if let Some(events) = &self.events {
            events.count_delivered(&self.seen);
        }
    }
}

/// The storage key of `frame` (`None` where it has none worth tracking, or the browser does
/// not say). A first-party storage key is the origin with a slash (`Storage.getStorageKey`);
/// a cross-site frame's is partitioned by its top-level site, which takes the public suffix
/// list to work out: the browser is asked — about the frame's document *now*, so an answer for
/// another origin (the frame navigated since it was read) is refused, and so is a key made
/// with a nonce (another in each document: nothing to keep).
async fn storage_key(page: &Page, frame: &Frame) -> Option<String> {
    let (frame_id, origin) = match frame {
        Frame::Top { origin } => return is_storable_origin(origin).then(|| format!("{origin}/")),
        Frame::Remote { frame_id, origin } => (frame_id, origin),
    };
    let ask = GetStorageKeyParams::builder()
        .frame_id(frame_id.clone())
        .build();
    let key: String = match page.execute(ask).await {
        Ok(answer) => answer.result.storage_key.into(),
        Err(e) => {
            tracing::debug!(error = %e, "a frame's storage key is unknown; its IndexedDB is read in full at each capture");
            return None;
        }
    };
    trackable_key(&key, origin).then_some(key)
}

/// Whether `key` (a serialised storage key) is `origin`'s, first-party, partitioned by another
/// top-level site (`^0`) or same-site with a cross-site ancestor (`^31`), and made with no
/// nonce (`^1`, `^2`; `^4`–`^6` for an opaque top-level site).
fn trackable_key(key: &str, origin: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(origin)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    // Chromium's forms: `origin/`, `origin/^31` (same site as the top, a cross-site
    // ancestor), `origin/^0<top-level site>`; a site holds no `^`.
    rest.is_empty()
        || rest == "^31"
        || rest
            .strip_prefix("^0")
            .is_some_and(|site| !site.is_empty() && !site.contains('^'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{
        frame_value, key, local, read_value, relayed_page, the_frame, two_site_server,
    };
    use crate::checkpoint::{CaptureOptions, Checkpoint, StorageKey, capture, restore};
    use crate::relay::Calls;

    /// What the captures of these tests read: IndexedDB too, up to 1 MiB a frame.
    const OPTIONS: CaptureOptions = CaptureOptions {
        indexed_db: true,
        indexed_db_max_bytes: 1 << 20,
        frame_timeout: Duration::from_secs(5),
        indexed_db_in_full: false,
    };

    /// A page under test, the relay's calls, and what its captures keep between them: the
    /// IndexedDB watch and the parts cache. Dropped in this order, the guards that keep the
    /// page's Chromium alive last.
    struct Captures<G> {
        watch: IdbWatch,
        cache: PartCache,
        calls: Calls,
        page: Page,
        _guards: G,
    }

    impl<G> Captures<G> {
        fn new(page: Page, calls: Calls, guards: G) -> Self {
            Captures {
                watch: IdbWatch::default(),
                cache: PartCache::default(),
                calls,
                page,
                _guards: guards,
            }
        }

        /// A checkpoint of the page, as a run takes one.
        async fn capture(&self) -> Checkpoint {
            let (page, calls) = (&self.page, &self.calls);
            capture(page, calls, &self.cache, &self.watch, OPTIONS)
                .await
                .unwrap()
        }

        /// Captures, waits until `n` storage keys are tracked, and captures again: the next
        /// capture may take these reads as standing.
        async fn capture_tracked(&self, n: usize) {
            self.capture().await;
            until_tracked(&self.watch, n).await;
            self.capture().await;
        }

        /// Runs `write` (a page's or a frame's script), then waits until its change event was
        /// counted: so a capture right after it tests what a capture does with the event.
        async fn changed_by<O>(&self, write: impl Future<Output = O>) -> O {
            let n = changes(&self.watch);
            let written = write.await;
            until_changed(&self.watch, n).await;
            written
        }

        /// The frames' IndexedDB read in full so far.
        fn full_reads(&self) -> u64 {
            self.watch.state().full_reads
        }
    }

    /// A page of a real origin, `https://app.example`, restored from a one-item checkpoint
    /// (served by a restore document; no request leaves), reached through outlive's relay
    /// (which hands over IndexedDB's change events).
    async fn page_on_app_origin() -> Captures<impl Sized> {
        let (chromium, relay, browser, pump, page) = relayed_page().await;
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["k","v"]]"#),
        );
        let calls = relay.calls();
        restore(&page, &calls, &cp, None).await.unwrap();
        Captures::new(page, calls, (pump, browser, relay, chromium))
    }

    /// A relayed page, and the port of a two-site server to point it at: its `/top{n}` frames
    /// a cross-site `/frame{n}`.
    async fn page_on_two_sites() -> (Captures<impl Sized>, u16) {
        let (chromium, relay, browser, pump, page) = relayed_page().await;
        let (port, server) = two_site_server().await;
        let calls = relay.calls();
        let guards = (server, pump, browser, relay, chromium);
        (Captures::new(page, calls, guards), port)
    }

    /// The IndexedDB (JSON) of the first storage key `cp` holds; empty if none.
    fn idb_of(cp: &Checkpoint) -> String {
        cp.storage
            .keys()
            .next()
            .map_or_else(String::new, |key| idb_at(cp, key))
    }

    /// The IndexedDB (JSON) `cp` holds for storage key `key`; empty if none.
    fn idb_at(cp: &Checkpoint, key: &StorageKey) -> String {
        cp.storage
            .get(key)
            .and_then(|s| s.idb.as_ref())
            .map(|p| p.json.clone())
            .unwrap_or_default()
    }

    /// Waits (bounded) until `n` storage keys are tracked: the tracker starts a tracking after
    /// the capture that asked for it.
    async fn until_tracked(watch: &IdbWatch, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&watch.state().seen).relied_on().len() < n {
            assert!(Instant::now() < deadline, "{n} keys tracked within 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The change events counted so far (counting those delivered now).
    fn changes(watch: &IdbWatch) -> u64 {
        let state = watch.state();
        state.count_delivered();
        lock(&state.seen).changes.all
    }

    /// Waits (bounded) until more than `n` change events were counted. Chromium's event for a
    /// commit usually reaches outlive before the commit's completion reaches the page, not
    /// always (see `IdbWatch`): a test that captures right after a write waits for its event
    /// first, so it tests what a capture does with the event.
    async fn until_changed(watch: &IdbWatch, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while changes(watch) <= n {
            assert!(Instant::now() < deadline, "a change event within 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn only_an_origins_own_keys_without_a_nonce_are_tracked() {
        let (o, w) = ("http://localhost:9", "https://w.example");
        let cases = [
            ("http://localhost:9/", o, true, "first-party"),
            (
                "http://localhost:9/^0http://127.0.0.1",
                o,
                true,
                "under another top site",
            ),
            (
                "https://w.example/^31",
                w,
                true,
                "with a cross-site ancestor",
            ),
            ("https://w.example/^30", w, false, "not a form it tracks"),
            (
                "https://w.example/^0https://shop.example^31",
                w,
                false,
                "a site with a ^",
            ),
            ("http://localhost:90/", o, false, "another origin (port)"),
            (
                "http://localhost:9/^0http://127.0.0.1",
                "http://127.0.0.1",
                false,
                "another origin.s",
            ),
            ("http://localhost:9/^112345^267890", o, false, "a nonce"),
            (
                "http://localhost:9/^0http://127.0.0.1^4123^5456",
                o,
                false,
                "an opaque top",
            ),
            ("http://localhost:9/x", o, false, "a path"),
            ("", o, false, "empty"),
        ];
        for (key, origin, tracked, what) in cases {
            assert_eq!(trackable_key(key, origin), tracked, "{what}: {key}");
        }
    }

    /// A `Seen` that tracks `a/` and `b/`.
    fn tracking_a_and_b() -> Seen {
        let mut seen = Seen::default();
        for key in ["a/", "b/"] {
            seen.ever.insert(key.to_owned());
            seen.tracked.insert(key.to_owned());
        }
        seen
    }

    #[test]
    fn a_change_is_counted_against_its_key_and_an_unknown_key_against_all() {
        let mut seen = tracking_a_and_b();
        assert!(
            seen.note("a/".into()),
            "a's first change stops its tracking"
        );
        assert!(!seen.note("a/".into()), "already stopped");
        assert_eq!((seen.changes.of("a/"), seen.changes.of("b/")), (2, 0));
        assert!(seen.tracked.contains("b/"));
        assert!(!seen.note("a/^0c".into()), "a key of a form never tracked");
        assert_eq!((seen.changes.of("a/"), seen.changes.of("b/")), (3, 1));
        assert_eq!(seen.changes.all, 3);
    }

    #[test]
    fn a_change_to_a_key_taken_as_standing_marks_the_checkpoint_stale_once() {
        let mut seen = tracking_a_and_b();
        seen.stood.insert("a/".to_owned());
        seen.note("b/".into());
        assert!(!seen.stale, "b's read was not taken as standing");
        seen.note("a/".into());
        assert!(std::mem::take(&mut seen.stale), "a's was");
        seen.note("a/".into());
        assert!(!seen.stale, "once");
        seen.stood.insert("b/".to_owned());
        seen.note("a/^0c".into());
        assert!(
            seen.stale && seen.stood.is_empty(),
            "a key of a form never tracked may be any key"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tracking_is_relied_on_once_chromiums_observer_had_time_to_register() {
        let mut seen = Seen::default();
        let at = seen.ask("a/").unwrap();
        seen.answered("a/".into(), at, true);
        assert!(seen.tracked.contains("a/"));
        assert!(
            seen.relied_on().is_empty(),
            "the observer may not be there yet"
        );
        tokio::time::advance(OBSERVER_SETTLES / 2).await;
        let at = seen.ask("b/").unwrap();
        seen.answered("b/".into(), at, true);
        assert!(seen.relied_on().is_empty());
        tokio::time::advance(OBSERVER_SETTLES / 2).await;
        assert_eq!(
            seen.relied_on().len(),
            2,
            "one observer for the session's trackings"
        );
    }

    #[test]
    fn a_start_answered_after_a_change_is_not_taken_as_tracking() {
        let mut seen = Seen::default();
        let at = seen.ask("a/").unwrap();
        assert_eq!(seen.ask("a/"), None, "one start at a time");
        seen.answered("a/".into(), at, true);
        assert!(seen.tracked.contains("a/"));
        assert_eq!(seen.ask("a/"), None, "tracked already");
        assert!(seen.note("a/".into()), "its change stops it");
        let at = seen.ask("a/").unwrap();
        assert!(
            seen.note("a/".into()),
            "a change while a start is asked for stops it too"
        );
        assert!(seen.ask("a/").is_some(), "and a new start may be asked for");
        seen.answered("a/".into(), at, true);
        assert!(
            !seen.tracked.contains("a/"),
            "the earlier start, answered after the change, is not taken as tracking"
        );
    }

    /// A script that writes `value` under the key `k` of store `s` of database `db`, and
    /// answers 1 once it is committed.
    fn put(value: &str) -> String {
        format!(
            "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
            r.onupgradeneeded = () => r.result.createObjectStore('s');
            r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
              tx.objectStore('s').put('{value}', 'k'); tx.oncomplete = () => {{ r.result.close(); resolve(1); }}; }};
            r.onerror = () => reject(r.error); }})"
        )
    }

    /// An unchanged IndexedDB is not read again once Chromium tracks it; every kind of change
    /// — a record written, a database created — is in the next capture.
    #[tokio::test]
    async fn indexeddb_is_read_again_only_after_a_change() {
        let t = page_on_app_origin().await;
        let _: i64 = read_value(&t.page, put("first")).await;

        let first = t.capture().await;
        assert!(idb_of(&first).contains("first"));
        assert!(
            t.watch.begin(&t.cache, false).same.is_empty(),
            "read before tracking began"
        );
        until_tracked(&t.watch, 1).await;
        let second = t.capture().await;
        assert_eq!(idb_of(&second), idb_of(&first));
        assert!(
            !t.watch.begin(&t.cache, false).same.is_empty(),
            "read while tracked and unchanged: the next capture may skip it"
        );
        assert_eq!(t.full_reads(), 2);
        let third = t.capture().await;
        assert_eq!(idb_of(&third), idb_of(&first), "the same content");
        assert_eq!(t.full_reads(), 2, "not read again: nothing changed");

        let _: i64 = t.changed_by(read_value(&t.page, put("second"))).await;
        let after_put = t.capture().await;
        assert!(
            idb_of(&after_put).contains("second"),
            "a record written is seen"
        );
        assert_eq!(t.full_reads(), 3);
        until_tracked(&t.watch, 1).await;
        t.capture().await;

        let create = "new Promise((resolve) => { const r = indexedDB.open('other', 3);
              r.onsuccess = () => { r.result.close(); resolve(1); }; })";
        let _: i64 = t.changed_by(read_value(&t.page, create.into())).await;
        let after_create = t.capture().await;
        assert!(
            idb_of(&after_create).contains("\"other\""),
            "a database created is seen: {}",
            idb_of(&after_create)
        );
        until_tracked(&t.watch, 1).await;
        t.capture().await;
        let delete = "new Promise((resolve) => { const r = indexedDB.deleteDatabase('other');
              r.onsuccess = () => resolve(1); })";
        let _: i64 = t.changed_by(read_value(&t.page, delete.into())).await;
        let after_delete = t.capture().await;
        assert!(
            !idb_of(&after_delete).contains("\"other\""),
            "a database deleted is seen"
        );
    }

    /// A change reported after a capture that took the frame's read as standing (Chromium
    /// reports a commit after the page learned of it, now and then) wakes `stale`, so the run
    /// takes a new checkpoint at once; that one holds it. A capture that took nothing as
    /// standing leaves `stale` asleep.
    #[tokio::test]
    async fn a_change_reported_after_a_capture_that_took_it_as_standing_wakes_stale() {
        use futures::FutureExt;
        let t = page_on_app_origin().await;
        let _: i64 = read_value(&t.page, put("first")).await;
        t.capture_tracked(1).await;
        let _: i64 = t.changed_by(read_value(&t.page, put("read in full"))).await;
        assert!(
            t.watch.stale().now_or_never().is_none(),
            "read in full: nothing stood"
        );
        t.capture_tracked(1).await;
        let standing = t.capture().await;
        assert_eq!(t.full_reads(), 4, "the last read stood");
        assert!(idb_of(&standing).contains("read in full"));

        let _: i64 = read_value(&t.page, put("late")).await;
        tokio::time::timeout(Duration::from_secs(10), t.watch.stale())
            .await
            .expect("woken within 10 s");
        let next = t.capture().await;
        assert!(idb_of(&next).contains("late"), "{}", idb_of(&next));
    }

    /// A change that comes while a capture runs — after it began, before the frame's script
    /// read — has that frame read again in full: the checkpoint holds the change, not the last
    /// read taken as standing.
    #[tokio::test]
    async fn a_change_during_a_capture_is_in_it() {
        let t = page_on_app_origin().await;
        let _: i64 = read_value(&t.page, put("first")).await;
        t.capture_tracked(1).await;
        assert!(
            !t.watch.begin(&t.cache, false).same.is_empty(),
            "the next capture may take it as standing"
        );
        // The capture script lists the databases first: the page writes, once, as it does,
        // and goes on once the write's event was counted (`counted`, set below).
        let hook = format!(
            "(() => {{ const databases = indexedDB.databases.bind(indexedDB);
              indexedDB.databases = async () => {{ delete indexedDB.databases; await {};
                globalThis.written = true;
                while (!globalThis.counted) await new Promise((go) => setTimeout(go, 5));
                return databases(); }};
              return 1; }})()",
            put("during")
        );
        let _: i64 = read_value(&t.page, hook).await;
        let n = changes(&t.watch);
        let (during, ()) = futures::join!(t.capture(), async {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !read_value::<bool>(&t.page, "globalThis.written === true".into()).await {
                assert!(Instant::now() < deadline, "the page wrote within 10 s");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            until_changed(&t.watch, n).await;
            let _: bool = read_value(&t.page, "globalThis.counted = true".into()).await;
        });
        assert!(
            idb_of(&during).contains("during"),
            "the change during the capture is in it: {}",
            idb_of(&during)
        );
        assert_eq!(t.full_reads(), 3, "read again in full once");
    }

    /// A cross-site iframe's IndexedDB (partitioned under the top's site, in a renderer of its
    /// own) is tracked too: once tracked, it is not read again — on the frame's next document
    /// either — until a change, which the next capture has.
    #[tokio::test]
    async fn a_cross_site_frames_indexeddb_is_read_again_only_after_a_change() {
        let (t, port) = page_on_two_sites().await;
        let frame_key = key(
            &format!("http://127.0.0.1:{port}"),
            &format!("http://localhost:{port}"),
        );
        let frame_idb = |cp: &Checkpoint| idb_at(cp, &frame_key);
        let go = |n: u32| t.page.goto(format!("http://127.0.0.1:{port}/top{n}"));

        go(0).await.unwrap();
        let mut frame = the_frame(&t.page, &t.calls, None).await;
        assert_eq!(frame_value(&t.calls, &frame, &put("first")).await, 1);
        let first = t.capture().await;
        assert!(frame_idb(&first).contains("first"), "{}", frame_idb(&first));
        until_tracked(&t.watch, 1).await;
        t.capture().await;
        assert_eq!(t.full_reads(), 2, "read in full until tracked");
        t.capture().await;
        assert_eq!(t.full_reads(), 2, "not read again: nothing changed");

        go(1).await.unwrap();
        frame = the_frame(&t.page, &t.calls, Some(&frame)).await;
        let on_a_new_document = t.capture().await;
        assert_eq!(frame_idb(&on_a_new_document), frame_idb(&first));
        assert_eq!(
            t.full_reads(),
            2,
            "not read again on the frame's new document: nothing changed"
        );

        let written = t
            .changed_by(frame_value(&t.calls, &frame, &put("second")))
            .await;
        assert_eq!(written, 1);
        let after_put = t.capture().await;
        assert!(
            frame_idb(&after_put).contains("second"),
            "a record written in the frame is seen: {}",
            frame_idb(&after_put)
        );
        assert_eq!(t.full_reads(), 3);
    }

    /// A change to one storage key's IndexedDB has only the frames of that key read again: the
    /// top's change leaves the cross-site frame's read standing, and the frame's the top's.
    #[tokio::test]
    async fn a_change_in_one_frames_indexeddb_has_only_that_frame_read_again() {
        let (t, port) = page_on_two_sites().await;
        let top = format!("http://127.0.0.1:{port}");
        let frame_key = key(&top, &format!("http://localhost:{port}"));
        let top_key = key(&top, &top);

        t.page.goto(format!("{top}/top0")).await.unwrap();
        let frame = the_frame(&t.page, &t.calls, None).await;
        let _: i64 = read_value(&t.page, put("top1")).await;
        assert_eq!(frame_value(&t.calls, &frame, &put("frame1")).await, 1);
        t.capture_tracked(2).await;
        assert_eq!(t.full_reads(), 4, "both read in full until tracked");
        t.capture().await;
        assert_eq!(t.full_reads(), 4, "neither read again: nothing changed");

        let _: i64 = t.changed_by(read_value(&t.page, put("top2"))).await;
        let cp = t.capture().await;
        let (top_idb, frame_idb) = (idb_at(&cp, &top_key), idb_at(&cp, &frame_key));
        assert!(top_idb.contains("top2"), "{top_idb}");
        assert!(frame_idb.contains("frame1"));
        assert_eq!(t.full_reads(), 5, "the top read again, not the frame");
        until_tracked(&t.watch, 2).await;

        let written = t
            .changed_by(frame_value(&t.calls, &frame, &put("frame2")))
            .await;
        assert_eq!(written, 1);
        let cp = t.capture().await;
        let (top_idb, frame_idb) = (idb_at(&cp, &top_key), idb_at(&cp, &frame_key));
        assert!(frame_idb.contains("frame2"), "{frame_idb}");
        assert!(top_idb.contains("top2"));
        // The top's read after its change was not tracked as it began (its change untracked
        // it): read once more, then it stands.
        assert_eq!(
            t.full_reads(),
            7,
            "the frame read again, and the top's second read"
        );
        until_tracked(&t.watch, 2).await;
        t.capture().await;
        assert_eq!(
            t.full_reads(),
            8,
            "the frame's second read after its change"
        );
        t.capture().await;
        assert_eq!(t.full_reads(), 8, "neither read again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_indexeddb_commits_leaves_no_events_piled_up() {
        let t = page_on_app_origin().await;
        let commits = |n: u32, tag: &str| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onsuccess = async () => {{
                  for (let i = 0; i < {n}; i++) await new Promise(done => {{
                    const tx = r.result.transaction('s', 'readwrite');
                    tx.objectStore('s').put('{tag}' + i, 'k'); tx.oncomplete = done;
                    tx.onabort = () => reject(tx.error); }});
                  r.result.close(); resolve(1); }};
                r.onerror = () => reject(r.error); }})"
            )
        };
        let _: i64 = read_value(&t.page, commits(1, "a")).await;
        t.capture_tracked(1).await;

        // 2 000 transactions, one after another: the watcher sees the first and stops the
        // tracking, so the events of most of the others are never sent.
        let _: i64 = read_value(&t.page, commits(2_000, "b")).await;
        // The watcher runs on its own task: wait (bounded) for it to have seen the change and
        // stopped the tracking.
        let stopped = || {
            let state = t.watch.state();
            let seen = lock(&state.seen);
            seen.changes.all > 0 && seen.tracked.is_empty()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped() {
            assert!(
                Instant::now() < deadline,
                "the watcher saw the change and untracked"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The events sent are delivered by now as a rule (a commit's report comes before its
        // completion but for a rare late one): counted, they show the tracking stopped early.
        t.watch.begin(&t.cache, false);
        let events = lock(&t.watch.state().seen).changes.all;
        assert!(events < 1_000, "{events} events for 2 000 commits");
        let after = t.capture().await;
        let idb = idb_of(&after);
        assert!(
            idb.contains("b1999"),
            "the newest record is captured: {idb}"
        );
        // Tracked again after that full read.
        until_tracked(&t.watch, 1).await;
    }
}
