//! [`lock`]: the one way this crate takes a `std` mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, poisoned or not: a poll log or a launch list a panic left behind is still
/// worth reading, and a second panic would hide the first.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
