//! Outlive's own calls through the relay, on any session of the browser.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::control::{Control, FrameSession, OwnCall, ProgramCall};
use super::tap::{Tap, Taps};

/// Sends commands of outlive's own through the relay, on any session of the browser —
/// chromiumoxide has no handle on the sessions of out-of-process frames, the relay sees them.
#[derive(Clone)]
pub(crate) struct Calls {
    pub(super) control: mpsc::UnboundedSender<Control>,
    /// Shared by every `Calls` of a relay: see [`Calls::call_unless_unanswered`].
    pub(super) unanswered: Unanswered,
    /// Shared with the relay's task and every `Calls`: see [`Calls::tap`].
    pub(super) taps: Taps,
}

/// The replies still awaited for calls that outlived their timeout, by session (one each), with
/// when they were sent: the browser answers them when the session's renderer is free again,
/// or never (a promise that never settles).
pub(super) type Unanswered = Arc<Mutex<HashMap<String, Waiting>>>;

/// A call's reply still awaited after its timeout.
pub(super) struct Waiting {
    pub(super) sent: Instant,
    pub(super) reply: oneshot::Receiver<String>,
}

impl Waiting {
    /// Whether the reply is still to come (the browser has not answered, the relay still
    /// waits for it) and the call was sent less than `retry_after` ago.
    pub(super) fn holds(&mut self, retry_after: Duration) -> bool {
        let pending = matches!(
            self.reply.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        pending && self.sent.elapsed() < retry_after
    }
}

/// A session whose call has gone unanswered this many times its timeout gets a new one. A hung
/// renderer gets at most one call per this span. And a call that will never be answered (a
/// promise that never settles) does not shut the session out for good.
const UNANSWERED_RETRY_AFTER: u32 = 6;

impl Calls {
    /// Calls with no relay behind them (a page connected directly, in tests): no frame
    /// sessions, every call unanswered.
    #[cfg(test)]
    pub fn detached() -> Calls {
        let taps = Taps::open();
        taps.close();
        Calls {
            control: mpsc::unbounded_channel().0,
            unanswered: Unanswered::default(),
            taps,
        }
    }

    /// Whether a relay is behind these calls (it may still die before the next one).
    pub fn is_relayed(&self) -> bool {
        !self.control.is_closed()
    }

    /// The out-of-process frames (cross-site iframes) of the page whose session is `page`.
    /// The unanswered calls of frames no longer there are forgotten.
    pub async fn frame_sessions(&self, page: &str) -> Vec<FrameSession> {
        let (tx, rx) = oneshot::channel();
        if self
            .control
            .send(Control::Frames(page.to_owned(), tx))
            .is_err()
        {
            return Vec::new();
        }
        let (frames, known) = rx.await.unwrap_or_default();
        self.unanswered()
            .retain(|session, _| known.iter().any(|s| s == session));
        frames
    }

    /// From now on, each out-of-process frame attached under the watched page gets `scripts`
    /// registered to run as its documents start, before chromiumoxide lets it run (it attaches
    /// frames paused; the relay sends these as it forwards the attach). Replies are not awaited.
    pub fn arm_frames(&self, scripts: Vec<String>) {
        let _ = self.control.send(Control::ArmFrames(scripts));
    }

    /// From now on, each event of `methods` that comes on `session`, in the order the browser
    /// sent them, handed over as the relay reads each — before it forwards the event to
    /// chromiumoxide, so before any reply the browser sent after it reaches its caller
    /// (chromiumoxide hands a reply over at once but queues the events read with it for its
    /// listeners' next pass). A second tap of the same session and methods replaces the first,
    /// whose channel closes. `None` with no relay behind these calls; the channel closes when
    /// the relay ends.
    pub fn tap(&self, session: String, methods: &'static [&'static str]) -> Option<Tap> {
        self.taps.tap(session, methods)
    }

    /// Tells the relay what a program's command on its own connection does (see
    /// [`ProgramCall`]).
    pub fn program(&self, call: ProgramCall) {
        let _ = self.control.send(Control::Program(call));
    }

    /// Sends `call`; the raw reply text, or `None` if the relay is gone or no reply came
    /// within `timeout`.
    pub async fn call(&self, call: OwnCall, timeout: Duration) -> Option<String> {
        let rx = self.send(call)?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }

    /// Like [`Calls::call`], except on a session where an earlier such call outlived its
    /// timeout and the browser has not answered it since (for less than
    /// [`UNANSWERED_RETRY_AFTER`] times `timeout`): there nothing is sent and `None` comes at
    /// once, as it does for a zero `timeout`. A renderer that hangs runs every command queued
    /// for it once it is free again, so repeated calls to a hung frame (a capture per
    /// checkpoint) would pile up.
    pub async fn call_unless_unanswered(&self, call: OwnCall, timeout: Duration) -> Option<String> {
        if timeout.is_zero() {
            return None;
        }
        let retry_after = timeout.saturating_mul(UNANSWERED_RETRY_AFTER);
        let waiting = self
            .unanswered()
            .get_mut(&call.session)
            .is_some_and(|earlier| earlier.holds(retry_after));
        if waiting {
            tracing::debug!(
                "an earlier call on this session is still unanswered; not calling again"
            );
            return None;
        }
        self.unanswered().remove(&call.session);
        let session = call.session.clone();
        let sent = Instant::now();
        let mut reply = self.send(call)?;
        match tokio::time::timeout(timeout, &mut reply).await {
            Ok(reply) => reply.ok(),
            Err(_) => {
                // Kept, so the relay keeps its way to it until the browser answers.
                self.unanswered().insert(session, Waiting { sent, reply });
                None
            }
        }
    }

    /// Hands `call` to the relay; where its reply will come.
    fn send(&self, call: OwnCall) -> Option<oneshot::Receiver<String>> {
        let (reply, rx) = oneshot::channel();
        self.control.send(Control::Call { call, reply }).ok()?;
        Some(rx)
    }

    /// The replies awaited after their timeout (see [`Unanswered`]).
    fn unanswered(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        crate::sync::lock(&self.unanswered)
    }
}
