//! [`Flight`]: one capture at a time, shared by the calls that waited for it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::lock;

/// One capture in flight at a time. A call that arrives while a capture runs waits for it. It
/// is answered by the next capture, which every caller that arrived meanwhile shares. A capture
/// that started before the call may have missed the state the caller wants kept.
#[derive(Default)]
pub(super) struct Flight {
    /// Held by the capture in flight; waiters queue on it in arrival order.
    turn: tokio::sync::Mutex<()>,
    /// Captures started so far; a call is served by a capture numbered above what it saw.
    started: AtomicU64,
    /// The newest finished capture: its number, and whether it wrote a checkpoint.
    finished: Mutex<(u64, bool)>,
}

/// A call's turn: the capture in flight is over, and none starts until this is dropped.
pub(super) struct Turn<'f> {
    flight: &'f Flight,
    /// The first capture that may answer the call: one that started after it arrived.
    wanted: u64,
    _turn: tokio::sync::MutexGuard<'f, ()>,
}

impl Flight {
    /// Waits for the call's turn, in arrival order.
    pub(super) async fn turn(&self) -> Turn<'_> {
        let wanted = self.started.load(Ordering::SeqCst) + 1;
        let turn = self.turn.lock().await;
        Turn {
            flight: self,
            wanted,
            _turn: turn,
        }
    }
}

impl Turn<'_> {
    /// Whether a capture that started after the call arrived wrote a checkpoint, if one has
    /// finished: a capture that waiters shared answers them all.
    pub(super) fn answered(&self) -> Option<bool> {
        let (newest, wrote) = *lock(&self.flight.finished);
        (newest >= self.wanted).then_some(wrote)
    }

    /// Runs `capture` as the next capture in flight; answers whether it wrote a checkpoint.
    pub(super) async fn capture(&self, capture: impl Future<Output = bool>) -> bool {
        let number = self.flight.started.fetch_add(1, Ordering::SeqCst) + 1;
        let wrote = capture.await;
        *lock(&self.flight.finished) = (number, wrote);
        wrote
    }
}
