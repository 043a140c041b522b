//! How the relay makes sure a silent browser is dead, and where it sums the stalls survived.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// How the relay may make sure a silent browser is dead, and where it sums the stalls it
/// survived.
#[derive(Clone, Default)]
pub(crate) struct LinkWatch {
    /// A second, short-lived connection to the endpoint may ask the browser whether it lives
    /// ([`crate::Session::second_connection`]).
    pub second_connection: bool,
    /// Shared by the relays of one run.
    pub stalls: Arc<Stalls>,
}

/// The stalls the relays of one run survived: silences that raised a suspicion and ended
/// with the connection heard again.
#[derive(Debug, Default)]
pub(crate) struct Stalls {
    survived: AtomicU32,
    longest_ms: AtomicU64,
}

impl Stalls {
    /// A stall of `stall` survived.
    pub fn record(&self, stall: Duration) {
        self.survived.fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.longest_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How many were survived.
    pub fn survived(&self) -> u32 {
        self.survived.load(Ordering::Relaxed)
    }

    /// The longest, in milliseconds.
    pub fn longest_ms(&self) -> u64 {
        self.longest_ms.load(Ordering::Relaxed)
    }
}
