//! The tracking of one page session: the last full read of each scope's IndexedDB, the
//! storage keys met, and what the watcher has seen since. A capture asks it what may be taken
//! as unchanged and, at its end, tells it what it read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::Page;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::answer::{Frame, FullRead};
use super::events::{CHANGE_EVENTS, IdbEvents};
use super::key::storage_key;
use super::seen::{Changes, Seen};
use crate::checkpoint::cache::PartCache;
use crate::relay::Calls;
use crate::sync::lock;

/// Whether a frame's IndexedDB may have changed since the capture script last read it in full.
/// It listens to Chromium's own change events for the frame's storage key. While none came, the
/// capture takes the last read as standing, so an unchanged IndexedDB costs nothing more.
/// The events may come after the commit, so a checkpoint that relied on them is watched after
/// it is taken ([`Tracking::stale`]). How and why, with the measurements:
/// `docs/survives.md`, "How the checkpoint reads IndexedDB".
/// One watch per page session: tracking belongs to the session.
#[derive(Default)]
pub(crate) struct Tracking {
    state: Mutex<IdbState>,
    /// Woken when the newest checkpoint may lack a change (see `Seen::stood`).
    stale: Arc<Notify>,
}

/// However quiet Chromium's change events are, a frame's IndexedDB is read in full at least
/// this often. The events' order is observed, not promised by the protocol. And a tracking
/// Chromium dropped without closing the session would otherwise go unnoticed.
const IDB_READ_IN_FULL_EVERY: Duration = Duration::from_secs(60);

/// The tracking's state, behind its lock.
#[derive(Default)]
pub(super) struct IdbState {
    /// The watcher, once a key is tracked.
    events: Option<IdbEvents>,
    /// What the watcher has seen; shared with it.
    pub(super) seen: Arc<Mutex<Seen>>,
    /// The last full read of each scope's IndexedDB.
    last: HashMap<String, IdbRead>,
    /// The storage key of each scope met (a scope always has the same one: see the capture
    /// script).
    keys: HashMap<String, String>,
    /// Full reads reported so far.
    #[cfg(test)]
    pub(super) full_reads: u64,
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

/// What a capture starts with (see `IdbCapture`).
pub(super) struct Begun {
    /// The change counts.
    pub(super) changes: Changes,
    /// What the capture script may take as unchanged: `[{scope, hash, list}]`.
    pub(super) same: Vec<serde_json::Value>,
    /// The storage keys tracked (a read of one of them counts as unchanged-since).
    pub(super) tracked: HashSet<String>,
}

impl Tracking {
    /// A watch for another page session whose [`Tracking::stale`] wakes this one's waiter too:
    /// one wait covers every tab.
    pub(crate) fn beside(&self) -> Tracking {
        Tracking {
            state: Mutex::default(),
            stale: self.stale.clone(),
        }
    }

    /// The watch's state, locked (before its `seen`, where both are).
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, IdbState> {
        lock(&self.state)
    }

    /// Resolves once a checkpoint taken on this page may lack an IndexedDB change Chromium
    /// reported after the capture's last look (see `IdbCapture::settle`): the next capture holds
    /// it. Cancel-safe; a wake-up before anyone waits is kept for the next wait.
    pub(crate) async fn stale(&self) {
        self.stale.notified().await;
    }

    /// At the end of a capture, begun as `begun`, whose frames of `scopes` took their last full
    /// read as standing: from now on (until the next capture ends), a change event for one of
    /// their storage keys wakes [`Tracking::stale`] — as does one that came since the capture
    /// began, after its last look. (A capture that fails leaves the one before watched.)
    pub(super) fn watch_standing(&self, scopes: &[String], begun: &Begun) {
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

    /// If a change came (or the tracking ended) since `begin` answered `changes`: the scopes
    /// whose storage key may have changed (every scope read, once the tracking ended).
    pub(super) fn moved_since(&self, changes: &Changes) -> Option<HashSet<String>> {
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
    /// (with their scope's key; the keys' change counts stay, a few bytes each).
    pub(super) fn offer(&self, cache: &PartCache) -> Begun {
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
    pub(super) async fn read_in_full(
        &self,
        page: &Page,
        calls: &Calls,
        read: FullRead,
        begun: &Begun,
    ) {
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
            let Some(tap) = calls.tap(session, CHANGE_EVENTS) else {
                return;
            };
            let seen = state.seen.clone();
            lock(&seen).ended = false;
            state.events = Some(IdbEvents::watch(page, tap, seen, self.stale.clone()));
        }
        let Some(events) = &state.events else {
            return;
        };
        // Known before Chromium can send an event for it.
        let Some(at) = lock(&state.seen).ask(&key) else {
            return;
        };
        events.track(key, at);
    }
}

impl IdbState {
    /// Counts the change events already delivered (see [`IdbEvents`]).
    pub(super) fn count_delivered(&self) {
        if let Some(events) = &self.events {
            events.count_delivered(&self.seen);
        }
    }
}
