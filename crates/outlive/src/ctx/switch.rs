//! [`Switch`]: the move to a successor browser, waiting for a safe point.

use std::sync::Mutex;

use crate::lifetime::SafePoints;
use crate::sync::lock;

/// The switch to a successor browser, ready and waiting for a safe point: the end of a
/// checkpoint taken outside any hold that [`SafePoints`] accepts. The checkpoint that reaches
/// it does not return until the loop has ended the entry there (or called the switch off).
#[derive(Default)]
pub(super) struct Switch {
    /// Armed: which checkpoints are safe points.
    armed: Mutex<Option<SafePoints>>,
    /// `true` while a checkpoint waits at the safe point for the loop.
    parked: tokio::sync::watch::Sender<bool>,
}

impl Switch {
    /// Which checkpoints are safe points, while the switch is armed.
    pub(super) fn armed(&self) -> Option<SafePoints> {
        *lock(&self.armed)
    }

    /// From now on, a checkpoint written outside a hold at one of `points` parks.
    pub(super) fn arm(&self, points: SafePoints) {
        *lock(&self.armed) = Some(points);
    }

    /// Calls the switch off; a checkpoint parked at a safe point goes on.
    pub(super) fn disarm(&self) {
        *lock(&self.armed) = None;
        self.parked.send_replace(false);
    }

    /// Parks the checkpoint at the safe point until the switch is called off (or the future
    /// is dropped with the entry).
    pub(super) async fn park(&self) {
        let mut parked = self.parked.subscribe();
        self.parked.send_replace(true);
        let _ = parked.wait_for(|p| !*p).await;
    }

    /// Resolves once a checkpoint is parked. Cancel-safe; not tied to `self`'s lifetime.
    pub(super) fn parked(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut parked = self.parked.subscribe();
        async move {
            let _ = parked.wait_for(|p| *p).await;
        }
    }
}
