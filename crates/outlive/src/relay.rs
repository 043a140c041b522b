//! The loopback relay outlive owns between chromiumoxide and the browser's endpoint.
//!
//! chromiumoxide 0.9 does not surface a dead connection reliably: its handler stream never
//! ends, and page calls hang on a reset or a silent socket. So every frame passes through the
//! relay. It sees a close, a reset or an EOF first, and asks for a sign of life
//! (`Browser.getVersion`) after a quiet heartbeat interval. It also watches the task's page for
//! a crash, a close and a hang. Each death is published before the client side is cut.
//! Parts: `handle` ([`Relay`]), `calls` ([`Calls`]), `tap` (events handed over by method),
//! `death`, `control`, `link`, `driver`, `forward`, `gate`, `watchdog`, `confirm` (the second
//! path), `wire`, `socket`, `frames`. How and why: `docs/deaths.md`, "The browser dies" to
//! "Inside the relay".

mod calls;
mod confirm;
mod control;
mod death;
mod driver;
mod forward;
mod frames;
mod gate;
mod handle;
mod link;
mod socket;
mod tap;
mod watchdog;
pub(crate) mod wire;

pub(crate) use calls::Calls;
pub(crate) use control::{FrameSession, Heartbeat, OwnCall, ProgramCall};
pub use death::{Confirmation, Death, DeathCause};
pub(crate) use death::{DeathSender, wait_death, wait_page_death};
pub(crate) use handle::Relay;
pub(crate) use link::{LinkWatch, Stalls};
pub(crate) use tap::{Tap, Tapped};

#[cfg(test)]
mod tests;
