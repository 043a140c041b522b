//! What the watcher has seen of Chromium's change events on one page session: the storage
//! keys tracked, the changes counted per key, and the keys the newest capture took as standing.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

/// Chromium answers a session's first tracking at once but registers the observer behind it
/// with the storage service without waiting (`StorageHandler::GetIndexedDBObserver`): a commit
/// in that moment is never reported. A read counts as unchanged-since only if its capture began
/// this long after that first answer.
const OBSERVER_SETTLES: Duration = Duration::from_secs(1);

/// What the watcher has seen of Chromium's change events.
#[derive(Default)]
pub(super) struct Seen {
    /// Storage keys tracked now: the watcher untracks each at its first change (the next
    /// full read of it tracks it again), so however many transactions a page commits between
    /// two captures, at most a few events per key are ever sent.
    pub(super) tracked: HashSet<String>,
    /// Storage keys whose tracking was asked for and not answered yet, with the key's change
    /// count then: a start answered after a change is not taken as tracking (the change had
    /// the tracking stopped behind it).
    pub(super) asking: HashMap<String, u64>,
    /// Every storage key a tracking was asked for on this session.
    pub(super) ever: HashSet<String>,
    /// The change events so far.
    pub(super) changes: Changes,
    /// The events' streams ended: no change would be heard, so nothing is taken as unchanged.
    pub(super) ended: bool,
    /// The storage keys whose frames' reads the newest capture took as standing (see
    /// `IdbCapture::settle`): a change to one of them from now on means that checkpoint may
    /// lack it. Replaced by each capture's; a key leaves it at its change (one wake-up each).
    pub(super) stood: HashSet<String>,
    /// Such a change came, and the watch's stale waiter is still to be woken.
    pub(super) stale: bool,
    /// From when Chromium's observer behind the trackings is taken as registered (see
    /// [`OBSERVER_SETTLES`]); `None` before the session's first tracking.
    pub(super) observing_from: Option<Instant>,
}

impl Seen {
    /// Counts a change event for storage key `key`; answers whether Chromium is to stop
    /// tracking it. An event for a key never tracked here (a form of key this code does not
    /// know) counts as a change to every key.
    pub(super) fn note(&mut self, key: String) -> bool {
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
    pub(super) fn ask(&mut self, key: &str) -> Option<u64> {
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
    pub(super) fn answered(&mut self, key: String, at: u64, started: bool) {
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
    pub(super) fn relied_on(&self) -> HashSet<String> {
        match self.observing_from {
            Some(from) if Instant::now() >= from => self.tracked.clone(),
            _ => HashSet::new(),
        }
    }

    /// The events' streams ended: nothing is tracked any more, and what came meanwhile is
    /// unknown, so it counts as a change to every key.
    pub(super) fn end(&mut self) {
        self.ended = true;
        self.tracked.clear();
        self.asking.clear();
        self.changes.unattributed += 1;
    }
}

/// Change events counted: in all, per storage key, and those of no key tracked here.
#[derive(Clone, Default)]
pub(super) struct Changes {
    pub(super) all: u64,
    pub(super) per_key: HashMap<String, u64>,
    pub(super) unattributed: u64,
}

impl Changes {
    /// The changes that may have touched `key`.
    pub(super) fn of(&self, key: &str) -> u64 {
        self.per_key.get(key).copied().unwrap_or(0) + self.unattributed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
