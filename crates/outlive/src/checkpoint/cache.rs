//! The parts outlive holds by content hash, so the capture script can send a part it already
//! holds as its hash alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::model::{Checkpoint, Part};
use crate::sync::lock;

/// Parts smaller than this are simply sent again; only bigger ones are offered by hash.
pub(super) const KNOWN_MIN_BYTES: usize = 512;

/// The parts of the newest capture by hash: what the capture script need not send again.
/// Content-addressed, so it can never hand back the wrong frame's state.
#[derive(Default)]
pub(crate) struct PartCache(Mutex<HashMap<String, Arc<Part>>>);

impl PartCache {
    pub(super) fn known(&self) -> Vec<String> {
        let cache = lock(&self.0);
        cache
            .values()
            .filter(|p| p.json.len() >= KNOWN_MIN_BYTES)
            .map(|p| p.hash.clone())
            .collect()
    }

    pub(super) fn get(&self, hash: &str) -> Option<Arc<Part>> {
        lock(&self.0).get(hash).cloned()
    }

    /// Holds exactly the parts of `checkpoint` from now on (a restored one, or the newest
    /// capture).
    pub(crate) fn remember(&self, checkpoint: &Checkpoint) {
        let parts = checkpoint
            .parts()
            .map(|p| (p.hash.clone(), p.clone()))
            .collect();
        *lock(&self.0) = parts;
    }
}
