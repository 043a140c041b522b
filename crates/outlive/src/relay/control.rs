//! What the relay's handle asks of its task, and what it tells it: the page to watch, the
//! heartbeat, outlive's own calls and a program's commands.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::dialogs::Dialogs;

/// Heartbeat settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    pub interval: Duration,
    pub timeout: Duration,
}

/// The page the relay watches: a target and its flattened session, numbered so that a
/// failure of an earlier page is never taken for one of the current page.
#[derive(Debug, Clone)]
pub(crate) struct WatchedPage {
    pub target_id: String,
    pub session_id: String,
    pub generation: u64,
    /// What the relay does with a JavaScript dialog the page opens.
    pub dialogs: Dialogs,
}

/// The receiving end of the handle's requests.
pub(super) type ControlRx = mpsc::UnboundedReceiver<Control>;

/// What the relay's handle asks of its task.
pub(super) enum Control {
    /// Ask the browser for a sign of life; answer when it replies.
    Probe(oneshot::Sender<()>),
    /// Ask the watched page for a sign of life; answer when it replies.
    ProbePage(oneshot::Sender<()>),
    /// Watch this page from now on.
    Watch(WatchedPage),
    /// A page is being opened, to be watched as this generation: the first page target created
    /// from now on is taken for it, and its crash or close fails that generation at once.
    Opening(u64),
    /// The handle declared the watched page failed: fail its commands as for any page death.
    PageFailed(u64),
    /// Done with a failed page: crash its renderer first if it hangs (so no new page can
    /// share the stuck process), then close its target. Replies are not awaited.
    Retire {
        target_id: String,
        session_id: String,
        crash: bool,
    },
    /// Send a command of outlive's own and hand back the raw reply.
    Call {
        call: OwnCall,
        reply: oneshot::Sender<String>,
    },
    /// The out-of-process frames (cross-site iframes) of the page with this session, and the
    /// sessions of every frame known.
    Frames(String, oneshot::Sender<(Vec<FrameSession>, Vec<String>)>),
    /// From now on, register these scripts (`Page.addScriptToEvaluateOnNewDocument`) on every
    /// out-of-process frame, as it attaches.
    ArmFrames(Vec<String>),
    /// A program's command on its own connection to the browser (see [`ProgramCall`]).
    Program(ProgramCall),
    /// An on-demand probe went unanswered: suspect the connection, as for a silence, and tell
    /// the sender when it is heard again (dropped if the browser is dead).
    Suspect(oneshot::Sender<()>),
}

/// What the front tells the relay of a program's commands, which travel on the program's own
/// connection to the browser: silence while one waits is judged as under outlive's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProgramCall {
    /// Command `id` of connection `conn` went to the browser `at`; `target` is its page's
    /// target, when it was sent on a page's session the front knows.
    Sent {
        conn: u64,
        id: u64,
        target: Option<String>,
        /// Whether it keeps the browser busy ([`wire::keeps_browser_busy`](super::wire::keeps_browser_busy)).
        busy: bool,
        at: Instant,
    },
    /// The browser answered command `id` of connection `conn` `at`.
    Answered { conn: u64, id: u64, at: Instant },
    /// Connection `conn` ended: its commands wait no more.
    Gone { conn: u64 },
}

/// An out-of-process frame of the watched page: its session on the relay, and its frame id
/// (its target's id; empty if the browser did not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameSession {
    pub session: String,
    pub frame_id: String,
}

/// A command of outlive's own: `method` with `params`, on `session`.
pub(crate) struct OwnCall {
    pub(crate) session: String,
    pub(crate) method: &'static str,
    pub(crate) params: serde_json::Value,
}
