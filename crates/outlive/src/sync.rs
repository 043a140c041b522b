//! [`lock`]: the one way this crate takes a `std` mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not. Nothing here panics while holding a lock, and a value a
/// panic left behind is still a value: better than a second panic in a relay or a drop.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
