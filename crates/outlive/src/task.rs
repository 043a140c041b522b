//! Ownership of background tasks.

use tokio::task::JoinHandle;

/// Aborts the task when dropped, so a spawned task never outlives its owner.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
