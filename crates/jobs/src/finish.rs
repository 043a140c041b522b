//! How a run of a task ends: [`Finished`], and [`stopped`], the worker asking it to stop.

use outlive::WideEvent;
use tokio::sync::watch;

/// How a run ended, as a task reports it.
pub(crate) struct Finished {
    pub(crate) result: Result<serde_json::Value, String>,
    pub(crate) event: Option<WideEvent>,
}

/// Resolves once `stop` says so; never if its sender is gone without saying it.
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}
