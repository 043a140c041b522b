//! Keeping a client's connection through a browser swap (issue 51): the pure parts.
//!
//! * [`shape`]: the kinds of id the front keeps stable, and how a message's fields hold them.
//! * [`schema`]: which fields of which CDP command, reply and event hold them, generated
//!   from the protocol that chromiumoxide ships (refresh: see its header).
//! * [`ids`]: the client's ids against the current browser's, per kind.
//! * [`rewrite`]: a frame's ids put into the other side's terms, spliced in its bytes.
//! * [`sticky`]: the client's setter commands, the latest value of each, to replay.
//! * [`fallback`]: what the front cannot carry over, by name.
//! * [`link`]: one client's connection across browsers, the swap as a state machine.

mod fallback;
mod ids;
mod link;
mod rewrite;
#[rustfmt::skip] // generated (see its header)
mod schema;
mod shape;
mod sticky;

pub(super) use fallback::Reason;
pub(super) use link::{Link, Out};
