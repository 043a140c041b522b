//! [`Listening`]: the handle of a server running on its own task, which both
//! [`spawn`](crate::spawn) and [`twosite::spawn`](crate::twosite::spawn) return inside their
//! own handles.

use std::future::Future;
use std::io;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A server on a tokio task. Dropping it stops the server at once;
/// [`shutdown`](Self::shutdown) stops it gracefully and reports how it ended.
pub(crate) struct Listening {
    stop: Option<watch::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl Listening {
    /// Spawns the server `serve` builds from its stop signal.
    pub(crate) fn spawn<F>(serve: impl FnOnce(Stop) -> F) -> Listening
    where
        F: Future<Output = io::Result<()>> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(());
        Listening {
            stop: Some(stop),
            task: Some(tokio::spawn(serve(Stop(stopped)))),
        }
    }

    /// Signals stop, then waits for the server to finish the requests in flight.
    ///
    /// # Errors
    ///
    /// The server's own error, or an error of kind `Other` if its task panicked.
    pub(crate) async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The stop signal a [`Listening`] server gets; clones share it.
#[derive(Clone)]
pub(crate) struct Stop(watch::Receiver<()>);

impl Stop {
    /// Resolves once [`Listening::shutdown`] is called or the handle is dropped.
    pub(crate) async fn requested(mut self) {
        // A dropped sender also means stop.
        let _ = self.0.changed().await;
    }
}
