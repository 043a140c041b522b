//! Control-plane faults: `POST /sessions` and `DELETE /sessions/:id` refusing (or, for a
//! delete, never answering) on demand, for the next N requests or until cleared.
//!
//! A fault is consumed per HTTP request, so a client that retries a faulted request sends the
//! next request, which takes the next fault (or none). A faulted create never touches the
//! `Idempotency-Key` store: the retry of a faulted keyed create creates; nothing replays a
//! fault.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind};

/// What a faulted `DELETE /sessions/:id` answers.
///
/// Either way the session's browser is killed when the fault is taken (the *answer* is the
/// fault, not the cleanup), so no Chromium leaks. The session stays unreleased, and dead,
/// until a delete that is not faulted (or shutdown) releases it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteFault {
    /// This HTTP error status (400–599), with the JSON body a real one would carry (`500` has
    /// code `InternalError`).
    Status(u16),
    /// No answer at all: the request hangs until the client gives up or the gateway stops.
    Hang,
}

/// How many requests the gateway has answered with an injected fault so far.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultCounters {
    /// `POST /sessions` requests answered with an injected status.
    pub creates_faulted: u64,
    /// `DELETE /sessions/:id` requests answered with an injected status or left hanging.
    pub deletes_faulted: u64,
}

/// A queued create fault: `remaining` more creates answer `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CreateFaults {
    pub(crate) remaining: u32,
    pub(crate) status: u16,
}

/// A queued delete fault: `remaining` more deletes (`None`: every one) get `fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeleteFaults {
    pub(crate) remaining: Option<u32>,
    pub(crate) fault: DeleteFault,
}

/// The faults still queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) creates: Option<CreateFaults>,
    pub(crate) deletes: Option<DeleteFaults>,
}

/// The gateway's fault switchboard, shared by the REST handlers and the
/// [`Gateway`](crate::Gateway) handle.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    queued: Mutex<Queued>,
    creates_faulted: AtomicU64,
    deletes_faulted: AtomicU64,
}

impl Faults {
    fn queued(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queued
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the create fault: the next `n` creates answer `status` (`n == 0` clears it).
    pub(crate) fn fail_creates(&self, n: u32, status: u16) {
        self.queued().creates = (n > 0).then_some(CreateFaults {
            remaining: n,
            status,
        });
    }

    /// Replaces the delete fault: the next `n` deletes (`None`: all, until cleared) get
    /// `fault` (`Some(0)` clears it).
    pub(crate) fn fail_deletes(&self, n: Option<u32>, fault: DeleteFault) {
        self.queued().deletes = (n != Some(0)).then_some(DeleteFaults {
            remaining: n,
            fault,
        });
    }

    /// Drops every queued fault; the counters stay.
    pub(crate) fn clear(&self) {
        *self.queued() = Queued::default();
    }

    /// The faults still queued.
    pub(crate) fn snapshot(&self) -> Queued {
        *self.queued()
    }

    /// Takes one create fault, if any is queued: the status to answer.
    pub(crate) fn take_create(&self) -> Option<u16> {
        let mut q = self.queued();
        let f = q.creates.as_mut()?;
        let status = f.status;
        f.remaining -= 1;
        if f.remaining == 0 {
            q.creates = None;
        }
        self.creates_faulted.fetch_add(1, Ordering::Relaxed);
        Some(status)
    }

    /// Takes one delete fault, if any is queued.
    pub(crate) fn take_delete(&self) -> Option<DeleteFault> {
        let mut q = self.queued();
        let f = q.deletes.as_mut()?;
        let fault = f.fault;
        if let Some(n) = f.remaining.as_mut() {
            *n -= 1;
            if *n == 0 {
                q.deletes = None;
            }
        }
        self.deletes_faulted.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }

    pub(crate) fn counters(&self) -> FaultCounters {
        FaultCounters {
            creates_faulted: self.creates_faulted.load(Ordering::Relaxed),
            deletes_faulted: self.deletes_faulted.load(Ordering::Relaxed),
        }
    }
}

/// Checks that `status` is an HTTP error status a fault may answer with.
pub(crate) fn check_status(status: u16) -> Result<(), Error> {
    if (400..=599).contains(&status) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidFault,
            format!("a fault's status must be an HTTP error status (400-599), got {status}"),
        ))
    }
}

/// The Solari error `code` a real answer with this status carries.
pub(crate) fn wire_code(status: u16) -> &'static str {
    match status {
        400 => "ValidationError",
        401 => "Unauthorized",
        404 => "NotFound",
        409 => "Conflict",
        413 => "PayloadTooLarge",
        429 => "ConcurrencyLimitExceeded",
        500 => "InternalError",
        502 => "BadGateway",
        503 => "BrowserUnhealthy",
        504 => "GatewayTimeout",
        _ => "InjectedFault",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_faults_are_taken_one_per_request() {
        let f = Faults::default();
        f.fail_creates(2, 503);
        assert_eq!(f.take_create(), Some(503));
        assert_eq!(f.take_create(), Some(503));
        assert_eq!(f.take_create(), None);
        assert_eq!(f.counters().creates_faulted, 2);
        f.fail_creates(1, 429);
        f.fail_creates(0, 429);
        assert_eq!(f.take_create(), None, "n = 0 clears");
    }

    #[test]
    fn delete_faults_count_down_or_last_until_cleared() {
        let f = Faults::default();
        f.fail_deletes(Some(1), DeleteFault::Status(500));
        assert_eq!(f.take_delete(), Some(DeleteFault::Status(500)));
        assert_eq!(f.take_delete(), None);
        f.fail_deletes(None, DeleteFault::Hang);
        for _ in 0..5 {
            assert_eq!(f.take_delete(), Some(DeleteFault::Hang));
        }
        f.clear();
        assert_eq!(f.take_delete(), None);
        assert_eq!(f.counters().deletes_faulted, 6);
        assert_eq!(f.snapshot(), Queued::default());
    }

    #[test]
    fn only_error_statuses_are_faults() {
        for ok in [400, 429, 500, 503, 599] {
            assert!(check_status(ok).is_ok(), "{ok}");
        }
        for bad in [0, 200, 204, 302, 399, 600] {
            assert_eq!(
                check_status(bad).unwrap_err().kind(),
                ErrorKind::InvalidFault
            );
        }
    }
}
