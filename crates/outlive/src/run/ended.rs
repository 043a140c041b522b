//! How an entry ended: the run over, a failure, or a rotation; and what the cut entry did.

use std::sync::Arc;

use tokio::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::ctx::Ctx;
use crate::error::{Error, RunError};
use crate::relay::Death;

/// An entry that a failure or a rotation cut.
#[derive(Debug, Clone, Copy)]
pub(super) struct EntryEnd {
    pub(super) attempt: u32,
    pub(super) started: Instant,
    /// The task's own last checkpoint in the entry, or its start: what the next entry redoes
    /// counts from here.
    pub(super) redo_from: Instant,
    /// The entry made progress (see `Ctx::made_progress`): the failures counted in a row are
    /// behind it.
    pub(super) progressed: bool,
    /// The task saved a checkpoint of its own in the entry (new progress or not).
    pub(super) checkpointed: bool,
}

impl EntryEnd {
    /// The entry of `ctx`, started at `started`, cut now.
    pub(super) fn of(ctx: &Ctx, started: Instant) -> EntryEnd {
        EntryEnd {
            attempt: ctx.attempt(),
            started,
            redo_from: ctx.own_since(),
            progressed: ctx.made_progress(),
            checkpointed: ctx.made_own_checkpoint(),
        }
    }
}

/// How an entry ended.
pub(super) enum Ended<T, E, Br> {
    /// The run is over: completed, failed with the task's error, or given up. Reported.
    Over(Result<T, RunError<E>>),
    /// The entry's browser or page failed; the entry is gone.
    Failed {
        browser: Br,
        death: Death,
        entry: EntryEnd,
        /// For a page failure, the fresh page opened during the grace (or why none could be).
        fresh_page: Option<Result<(), Error>>,
    },
    /// The entry ended at a safe point; the task moves to the successor.
    Rotated {
        old: Br,
        successor: Br,
        born: Instant,
        restored: Option<Arc<Checkpoint>>,
        /// The entry the rotation cut.
        entry: EntryEnd,
    },
}
