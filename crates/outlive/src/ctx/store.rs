//! [`Store`]: the run's checkpoints, shared by its entries.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::checkpoint::Checkpoint;
use crate::lifetime::Cadence;
use crate::sync::lock;

/// The run's checkpoints: the newest one and how many were written.
#[derive(Default)]
pub(crate) struct Store {
    latest: Mutex<Option<Arc<Checkpoint>>>,
    count: AtomicU32,
    /// The most state any kept checkpoint could not hold.
    max_left_out: AtomicU64,
    /// Bumped whenever a checkpoint is kept, so the run loop wakes for it.
    kept: tokio::sync::watch::Sender<u32>,
    /// How often the task checkpoints by itself, across its entries.
    cadence: Mutex<Cadence>,
}

impl Store {
    /// Keeps `fresh` if it is newer than what is stored, merging in origins only older
    /// checkpoints saw. Answers whether it was kept.
    pub(crate) fn offer(&self, mut fresh: Checkpoint) -> bool {
        let mut latest = lock(&self.latest);
        if let Some(older) = latest.as_ref() {
            if older.taken > fresh.taken {
                return false;
            }
            fresh.merge_older(older);
        }
        self.max_left_out
            .fetch_max(fresh.left_out(), Ordering::Relaxed);
        *latest = Some(Arc::new(fresh));
        self.count.fetch_add(1, Ordering::Relaxed);
        self.kept.send_modify(|n| *n = n.wrapping_add(1));
        true
    }

    /// Makes `checkpoint` the newest without counting it (one taken by another process).
    #[cfg(feature = "durable")]
    pub(crate) fn seed(&self, checkpoint: Checkpoint) {
        *lock(&self.latest) = Some(Arc::new(checkpoint));
    }

    pub(crate) fn latest(&self) -> Option<Arc<Checkpoint>> {
        lock(&self.latest).clone()
    }

    /// Wakes when a checkpoint is kept after the receiver last looked.
    pub(crate) fn watch_kept(&self) -> tokio::sync::watch::Receiver<u32> {
        self.kept.subscribe()
    }

    pub(crate) fn latest_taken(&self) -> Option<Instant> {
        self.latest().map(|c| c.taken)
    }

    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// The most state any kept checkpoint could not hold (see `Checkpoint::left_out`).
    pub(crate) fn max_left_out(&self) -> u64 {
        self.max_left_out.load(Ordering::Relaxed)
    }

    /// The longest recent gap between the task's own checkpoints, once it has made one.
    pub(crate) fn cadence(&self) -> Option<Duration> {
        lock(&self.cadence).every()
    }

    /// Notes a gap between two of the task's own checkpoints.
    pub(super) fn note_own_gap(&self, gap: Duration) {
        lock(&self.cadence).note(gap);
    }
}
