//! The forwarding halves: one writer per direction, fed through a bounded queue, so that no
//! socket write is ever awaited where the relay decides anything.
//!
//! The driver puts each message into the direction's [`Outbox`] without waiting. A full queue
//! holds it, and the driver stops reading the feeding side until [`Outbox::make_room`] moves
//! it on: back-pressure, not memory. The writer ([`write()`]) writes for as long as the socket
//! needs, the relay's own messages first. Under the upstream socket, [`Draining`] keeps its
//! [`Flow`], which tells a slow link from a half-open one. Each own message is reported once
//! written ([`Written`]), when a probe's clock starts. More: `docs/deaths.md`, "Inside the relay".

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_tungstenite::tungstenite::Message;
use futures::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::time::Instant;

use super::frames::{Frame, WriteError, Writer};
use super::watchdog::{Flow, Written};

/// Messages queued per direction before the side feeding it is held back.
pub(super) const QUEUE: usize = 32;
/// The relay's own messages queued for the browser. More than this unsent means the socket
/// has not moved for long: the next is dropped (a probe then goes unanswered, which is what
/// a silent browser earns).
pub(super) const OWN_QUEUE: usize = 64;

/// The driver's end of one direction.
pub(super) struct Outbox {
    queue: mpsc::Sender<Frame>,
    /// Messages that did not fit, oldest first.
    held: VecDeque<Frame>,
}

impl Outbox {
    /// An outbox and the receiving end its writer takes from.
    pub fn new() -> (Outbox, mpsc::Receiver<Frame>) {
        let (queue, rx) = mpsc::channel(QUEUE);
        (
            Outbox {
                queue,
                held: VecDeque::new(),
            },
            rx,
        )
    }

    /// Queues `message` behind everything put before it, without waiting.
    pub fn push(&mut self, message: impl Into<Frame>) {
        let message = message.into();
        if !self.held.is_empty() {
            self.held.push_back(message);
            return;
        }
        match self.queue.try_send(message) {
            Ok(()) => {}
            Err(TrySendError::Full(m)) => self.held.push_back(m),
            // The writer is gone, so is the relay in a moment.
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// Nothing is held: the side feeding this direction may be read again.
    pub fn is_clear(&self) -> bool {
        self.held.is_empty()
    }

    /// Waits for room in the queue and moves the oldest held message into it. Cancel-safe.
    pub async fn make_room(&mut self) {
        match self.queue.reserve().await {
            Ok(permit) => {
                if let Some(m) = self.held.pop_front() {
                    permit.send(m);
                }
            }
            Err(_) => std::future::pending().await,
        }
    }

    /// Hands everything held to the writer (waiting for room), then lets it finish.
    pub async fn close(mut self) {
        while let Some(m) = self.held.pop_front() {
            if self.queue.send(m).await.is_err() {
                return;
            }
        }
    }
}

/// The browser writer's side for the relay's own messages: they come with their ids, go
/// before the queue, and each is reported once written.
pub(super) struct Own {
    pub messages: mpsc::Receiver<(u64, Message)>,
    pub written: mpsc::UnboundedSender<Written>,
    pub flows: Flows,
}

/// Writes what the driver queued to `writer` (the relay's `own` messages first) until the
/// queue closes (`Ok`) or a write fails.
pub(super) async fn write<W: AsyncWrite + Unpin>(
    mut writer: Writer<W>,
    mut own: Option<Own>,
    mut queue: mpsc::Receiver<Frame>,
) -> Result<(), WriteError> {
    loop {
        let next = match own.as_mut() {
            Some(own) => tokio::select! {
                biased;
                Some((id, m)) = own.messages.recv() => Some((Some(id), Frame::Whole(m))),
                m = queue.recv() => m.map(|m| (None, m)),
            },
            None => queue.recv().await.map(|m| (None, m)),
        };
        let Some((id, message)) = next else {
            return Ok(());
        };
        writer.send(message).await?;
        if let (Some(id), Some(own)) = (id, own.as_ref()) {
            let at = Instant::now();
            let flow = own.flows.now();
            let _ = own.written.send(Written { id, at, flow });
        }
    }
}

/// The upstream socket's [`Flow`], shared between its writes and the driver.
#[derive(Clone, Default)]
pub(super) struct Flows(Arc<Mutex<Flow>>);

impl Flows {
    pub fn now(&self) -> Flow {
        *crate::sync::lock(&self.0)
    }

    fn update(&self, f: impl FnOnce(&mut Flow)) {
        f(&mut crate::sync::lock(&self.0));
    }
}

/// A socket whose writes keep its [`Flows`]: a write the kernel has no room for starts a
/// stall; the next one it takes ends it (a drain).
pub(super) struct Draining<S> {
    inner: S,
    /// Since when a write waits for room.
    stalled_since: Option<Instant>,
    flows: Flows,
}

impl<S> Draining<S> {
    pub fn new(inner: S, flows: Flows) -> Draining<S> {
        Draining {
            inner,
            stalled_since: None,
            flows,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Draining<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Draining<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        match &polled {
            Poll::Pending if self.stalled_since.is_none() => {
                self.stalled_since = Some(Instant::now());
            }
            Poll::Ready(Ok(n)) if *n > 0 => {
                if let Some(since) = self.stalled_since.take() {
                    let now = Instant::now();
                    self.flows.update(|f| {
                        f.drained = Some(now);
                        f.last_stall = now - since;
                    });
                }
            }
            _ => {}
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
