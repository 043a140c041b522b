//! The run's budget: what it may spend before it gives up, and the message when it does.
//!
//! Three limits. Browser failures in a row (`max_relaunches`) and page failures in a row
//! (`max_page_recoveries`) start again after an entry that made progress (see
//! `Ctx::made_progress`). Sessions (`max_sessions`) count for the whole run, so a task that
//! seems to progress but never finishes still stops.

use super::ended::EntryEnd;
use crate::error::{Error, ErrorKind};
use crate::options::Options;

/// The limit a run hit.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Relaunches,
    PageRecoveries,
    Sessions,
}

/// The run gives up: the message names the limit hit and what the entries did.
#[derive(Debug)]
pub(super) struct GaveUp(String);

impl GaveUp {
    pub(super) fn into_error(self) -> Error {
        Error::new(ErrorKind::GaveUp, self.0)
    }
}

/// What the entries that ended did, for the message.
#[derive(Debug, Default)]
struct Entries {
    ended: u32,
    progressed: u32,
    /// Saved a checkpoint of their own, but no new progress.
    checkpointed_only: u32,
}

/// Counts what the run spends and decides when it gives up.
#[derive(Debug)]
pub(super) struct Budget {
    max_relaunches: u32,
    max_page_recoveries: u32,
    max_sessions: u32,
    /// Browser deaths, failed launches and restores, and rotations without progress, since
    /// the last entry that made progress.
    failures: u32,
    /// Page failures since the last entry that made progress.
    page_failures: u32,
    /// Launches started: every session the run asked for, successors and standbys too.
    sessions: u32,
    entries: Entries,
}

impl Budget {
    pub(super) fn new(options: &Options) -> Budget {
        Budget {
            max_relaunches: options.max_relaunches,
            max_page_recoveries: options.max_page_recoveries,
            max_sessions: options.max_sessions,
            failures: 0,
            page_failures: 0,
            sessions: 0,
            entries: Entries::default(),
        }
    }

    /// Sessions asked for so far.
    pub(super) fn sessions(&self) -> u32 {
        self.sessions
    }

    /// Whether one more session is within `max_sessions`.
    pub(super) fn may_launch(&self) -> bool {
        self.sessions < self.max_sessions
    }

    /// A launch started (check [`Budget::may_launch`] first).
    pub(super) fn launched(&mut self) {
        self.sessions += 1;
    }

    /// A replacement is needed and no session is left.
    pub(super) fn out_of_sessions(&self) -> GaveUp {
        self.gave_up(Limit::Sessions, None)
    }

    /// An entry was cut (by a failure or a rotation): with progress, the counts in a row
    /// start again.
    pub(super) fn entry_ended(&mut self, entry: &EntryEnd) {
        self.entries.ended += 1;
        if entry.progressed {
            self.entries.progressed += 1;
            self.failures = 0;
            self.page_failures = 0;
        } else if entry.checkpointed {
            self.entries.checkpointed_only += 1;
        }
    }

    /// The browser died, or a restore failed in it: `last` says which.
    pub(super) fn browser_failed(&mut self, last: &str) -> Result<(), GaveUp> {
        self.failures += 1;
        self.check(Limit::Relaunches, self.failures, last)
    }

    /// A launch failed with `error`.
    pub(super) fn launch_failed(&mut self, error: &str) -> Result<(), GaveUp> {
        self.failures += 1;
        self.check(
            Limit::Relaunches,
            self.failures,
            &format!("a failed launch ({error})"),
        )
    }

    /// A rotation ended an entry without progress: as costly as a death, the task starts
    /// over on the successor.
    pub(super) fn fruitless_rotation(&mut self) -> Result<(), GaveUp> {
        self.browser_failed("a rotation without progress")
    }

    /// The page failed in a browser that lives on.
    pub(super) fn page_failed(&mut self, last: &str) -> Result<(), GaveUp> {
        self.page_failures += 1;
        self.check(Limit::PageRecoveries, self.page_failures, last)
    }

    fn check(&self, limit: Limit, count: u32, last: &str) -> Result<(), GaveUp> {
        let max = match limit {
            Limit::Relaunches => self.max_relaunches,
            Limit::PageRecoveries => self.max_page_recoveries,
            Limit::Sessions => self.max_sessions,
        };
        if count <= max {
            return Ok(());
        }
        Err(self.gave_up(limit, Some(last)))
    }

    /// The one message of a run that gives up.
    fn gave_up(&self, limit: Limit, last: Option<&str>) -> GaveUp {
        let head = match limit {
            Limit::Relaunches => format!(
                "gave up after {} browser failures in a row without progress (max_relaunches is {})",
                self.failures, self.max_relaunches
            ),
            Limit::PageRecoveries => format!(
                "gave up after {} page failures in a row without progress (max_page_recoveries is {})",
                self.page_failures, self.max_page_recoveries
            ),
            Limit::Sessions => format!(
                "gave up after {} sessions (max_sessions is {})",
                self.sessions, self.max_sessions
            ),
        };
        let last = last
            .map(|l| format!("; the last was {l}"))
            .unwrap_or_default();
        let Entries {
            ended,
            progressed,
            checkpointed_only,
        } = self.entries;
        let entries = match ended {
            0 => "; no entry ran".to_owned(),
            _ => format!(
                "; of {ended} entries cut, {progressed} made progress and {checkpointed_only} more saved a checkpoint without new progress"
            ),
        };
        GaveUp(format!("{head}{last}{entries}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn entry(progressed: bool, checkpointed: bool) -> EntryEnd {
        let now = Instant::now();
        EntryEnd {
            attempt: 1,
            started: now,
            redo_from: now,
            progressed,
            checkpointed,
        }
    }

    #[test]
    fn progress_starts_the_counts_in_a_row_again() {
        let mut b = Budget::new(&Options::new().max_relaunches(1).max_page_recoveries(1));
        b.browser_failed("closed").unwrap();
        b.page_failed("page_crashed").unwrap();
        b.entry_ended(&entry(true, true));
        b.browser_failed("closed").unwrap();
        b.page_failed("page_crashed").unwrap();
        b.entry_ended(&entry(false, true));
        let err = b.browser_failed("closed").unwrap_err().0;
        assert_eq!(
            err,
            "gave up after 2 browser failures in a row without progress (max_relaunches is 1); \
             the last was closed; of 2 entries cut, 1 made progress and 1 more saved a \
             checkpoint without new progress"
        );
        assert!(b.page_failed("page_crashed").is_err());
    }

    #[test]
    fn sessions_are_counted_for_the_whole_run() {
        let mut b = Budget::new(&Options::new().max_sessions(2));
        for _ in 0..2 {
            assert!(b.may_launch());
            b.launched();
            b.entry_ended(&entry(true, true));
        }
        assert!(!b.may_launch());
        let err = b.out_of_sessions().0;
        assert!(
            err.starts_with(
                "gave up after 2 sessions (max_sessions is 2); of 2 entries cut, 2 made progress"
            ),
            "{err}"
        );
    }
}
