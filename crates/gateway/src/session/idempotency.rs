//! Keyed creates: the first create with an `Idempotency-Key` runs, later ones replay its answer.

use std::sync::Arc;

use serde_json::Value;

use super::Shared;

/// Completed creates remembered per `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEYS: usize = 1024;

/// The answer to a keyed create.
pub(crate) enum IdempotencyBegin {
    /// First use of the key: create, then [`IdempotencyGuard::complete`].
    Fresh(IdempotencyGuard),
    /// A create with this key is still running.
    InProgress,
    /// The first create's response body.
    Done(Value),
}

/// A key's create: running, or done with this answer.
pub(super) enum Keyed {
    InProgress,
    Done(Value),
}

impl Shared {
    /// Starts (or answers) a create carrying `key`.
    pub(crate) fn idempotency_begin(self: &Arc<Self>, key: &str) -> IdempotencyBegin {
        let mut reg = self.registry();
        match reg.keyed.get(key) {
            Some(Keyed::InProgress) => IdempotencyBegin::InProgress,
            Some(Keyed::Done(v)) => IdempotencyBegin::Done(v.clone()),
            None => {
                reg.keyed.insert(key.to_owned(), Keyed::InProgress);
                IdempotencyBegin::Fresh(IdempotencyGuard {
                    shared: self.clone(),
                    key: Some(key.to_owned()),
                })
            }
        }
    }
}

/// Marks a keyed create in progress; dropping it without [`complete`](Self::complete) forgets
/// the key, so a retry can create.
pub(crate) struct IdempotencyGuard {
    shared: Arc<Shared>,
    key: Option<String>,
}

impl IdempotencyGuard {
    /// Stores the first create's response body for every later use of the key.
    pub(crate) fn complete(mut self, body: Value) {
        if let Some(key) = self.key.take() {
            let mut reg = self.shared.registry();
            reg.keyed.insert(key.clone(), Keyed::Done(body));
            reg.keyed_order.push_back(key);
            while reg.keyed_order.len() > MAX_IDEMPOTENCY_KEYS {
                if let Some(old) = reg.keyed_order.pop_front() {
                    reg.keyed.remove(&old);
                }
            }
        }
    }
}

impl Drop for IdempotencyGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.shared.registry().keyed.remove(&key);
        }
    }
}
