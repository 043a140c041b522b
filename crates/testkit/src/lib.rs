//! Helpers the workspace's test suites share, so that no suite keeps its own copy.
//!
//! # Layout
//!
//! * [`Captured`] — a `tracing` writer that keeps everything written, for searching the
//!   logs for secrets afterwards.
//! * [`serve`] — an axum app on 127.0.0.1, stopped when the returned [`Served`] drops.
//! * [`ScratchDatabase`] — a PostgreSQL database of a test's or a benchmark's own.
#![forbid(unsafe_code)]

mod scratch;

pub use scratch::{ScratchDatabase, ScratchError, TEST_DATABASE_ENV};

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;

/// A `tracing` writer that keeps everything written, for searching the logs afterwards.
///
/// It is a [`MakeWriter`]: pass a clone to `tracing_subscriber::fmt().with_writer(..)`.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Captures every event and span at TRACE on this thread, without ANSI colours, until
    /// the guard drops (for `current_thread` tests: other threads are not captured).
    pub fn trace_on_this_thread() -> (Captured, DefaultGuard) {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(captured.clone())
            .with_ansi(false)
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// An app served by [`serve`]; dropping it shuts the server down.
pub struct Served {
    /// `http://127.0.0.1:{port}`.
    pub base: String,
    _stop: oneshot::Sender<()>,
}

/// Serves `app` on a free port of 127.0.0.1 in a background task, until the returned
/// [`Served`] drops. Panics if the port cannot be bound (a test has nothing better to do).
pub async fn serve(app: axum::Router) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Served { base, _stop: stop }
}
