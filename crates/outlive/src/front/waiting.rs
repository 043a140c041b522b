//! What the front tells the relay of a program's commands, which travel on the program's own
//! connection: each command as it goes out (with its page's target), and its answer. So the
//! relay's watchdog judges silence under a waiting program call as under outlive's own.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use crate::relay::wire::{self, Head};
use crate::relay::{Calls, ProgramCall};

/// Numbers the front's client connections, for the relay to tell their ids apart.
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

/// One client connection's account to the relay; dropping it says the connection ended.
pub(super) struct ProgramCalls {
    calls: Option<Calls>,
    conn: u64,
}

impl ProgramCalls {
    /// The account of a new connection, to the relay behind `calls` (none: nobody to tell).
    pub(super) fn new(calls: Option<Calls>) -> ProgramCalls {
        ProgramCalls {
            calls,
            conn: CONNECTIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The client sends `frame` to the browser now; `target_of` names a session's page target.
    pub(super) fn sent(&self, frame: &[u8], target_of: impl FnOnce(&str) -> Option<String>) {
        let Some(calls) = &self.calls else {
            return;
        };
        let head = Head::of(frame);
        let Some(id) = head.id else {
            return;
        };
        calls.program(ProgramCall::Sent {
            conn: self.conn,
            id,
            target: head.session_id.as_deref().and_then(target_of),
            busy: head.method.as_deref().is_some_and(wire::keeps_browser_busy),
            at: Instant::now(),
        });
    }

    /// `frame` came from the browser now: a reply ends its command's wait.
    pub(super) fn heard(&self, frame: &[u8]) {
        let Some(calls) = &self.calls else {
            return;
        };
        if let Some(id) = wire::reply_id(frame) {
            calls.program(ProgramCall::Answered {
                conn: self.conn,
                id,
                at: Instant::now(),
            });
        }
    }
}

impl Drop for ProgramCalls {
    fn drop(&mut self) {
        if let Some(calls) = &self.calls {
            calls.program(ProgramCall::Gone { conn: self.conn });
        }
    }
}
