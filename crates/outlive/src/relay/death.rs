//! Deaths: what ended an entry, how it was made sure of, and where the relay publishes it.

use tokio::sync::watch;
use tokio::time::Instant;

/// What ended an entry: the browser connection died, or (the `Page*` causes) only the task's
/// page did, in a browser that lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeathCause {
    /// The endpoint sent a websocket close frame, or closed the TCP connection cleanly.
    Closed,
    /// The TCP connection was reset or failed with an I/O error.
    Reset,
    /// No answer to a heartbeat within the heartbeat timeout: a half-open, silent connection.
    Silence,
    /// The provider reported the browser gone (the local process exited).
    ProcessExit,
    /// A page call failed and the browser did not answer an on-demand probe.
    ProbeFailed,
    /// The task's page crashed (its renderer died: out of memory, "Aw, Snap!"); the browser
    /// lives on.
    PageCrashed,
    /// The task's page target was closed or detached by something other than outlive (the
    /// site, another CDP client, the provider).
    PageClosed,
    /// The task's page stopped answering (its main thread is stuck, e.g. in an endless
    /// script) while the browser still answers.
    PageHung,
}

impl DeathCause {
    /// A short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DeathCause::Closed => "closed",
            DeathCause::Reset => "reset",
            DeathCause::Silence => "silence",
            DeathCause::ProcessExit => "process_exit",
            DeathCause::ProbeFailed => "probe_failed",
            DeathCause::PageCrashed => "page_crashed",
            DeathCause::PageClosed => "page_closed",
            DeathCause::PageHung => "page_hung",
        }
    }

    /// Whether only the page failed: the browser may still be alive, and a fresh page in it
    /// can take over.
    pub fn is_page(self) -> bool {
        matches!(
            self,
            DeathCause::PageCrashed | DeathCause::PageClosed | DeathCause::PageHung
        )
    }
}

/// How a browser's death was made sure of: what the connection, or a second one, showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Confirmation {
    /// A close frame or an end of stream, on the connection or on a second one.
    Close,
    /// A TCP reset or another I/O error.
    Reset,
    /// A second connection was refused (no listener; HTTP 403, 404 or 410), or reached a
    /// browser without the targets of this one.
    Refused,
    /// Nothing: a silence outlasted its allowance, with no second connection to ask or none
    /// that answered.
    Silence,
    /// The local browser process exited.
    Exit,
}

impl Confirmation {
    /// A short stable name for logs and the wide event.
    pub fn as_str(self) -> &'static str {
        match self {
            Confirmation::Close => "close",
            Confirmation::Reset => "reset",
            Confirmation::Refused => "refused",
            Confirmation::Silence => "silence",
            Confirmation::Exit => "exit",
        }
    }

    /// How a death of `cause` is confirmed when nothing more was learned; `None` for a page's
    /// failure.
    pub fn of(cause: DeathCause) -> Option<Confirmation> {
        match cause {
            DeathCause::Closed => Some(Confirmation::Close),
            DeathCause::Reset => Some(Confirmation::Reset),
            DeathCause::ProcessExit => Some(Confirmation::Exit),
            DeathCause::Silence | DeathCause::ProbeFailed => Some(Confirmation::Silence),
            _ => None,
        }
    }
}

/// A death and the moment it was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Death {
    /// What the relay saw.
    pub cause: DeathCause,
    /// When it saw it.
    pub at: Instant,
    /// How the browser's death was made sure of; `None` for a page's failure.
    pub confirmed: Option<Confirmation>,
}

impl Death {
    /// A death of `cause` detected at `at`, confirmed as the cause alone says.
    pub fn new(cause: DeathCause, at: Instant) -> Death {
        Death {
            cause,
            at,
            confirmed: Confirmation::of(cause),
        }
    }
}

/// A page failure: which page (generation) and the death.
pub(crate) type PageDeath = Option<(u64, Death)>;

/// Resolves with the first death published on `rx`.
pub(crate) async fn wait_death(rx: &mut watch::Receiver<Option<Death>>) -> Death {
    loop {
        if let Some(d) = *rx.borrow_and_update() {
            return d;
        }
        if rx.changed().await.is_err() {
            // The relay is gone without reporting; treat it as a closed connection.
            return Death::new(DeathCause::Closed, Instant::now());
        }
    }
}

/// Resolves with the failure of page `generation`.
pub(crate) async fn wait_page_death(rx: &mut watch::Receiver<PageDeath>, generation: u64) -> Death {
    loop {
        if let Some((g, d)) = *rx.borrow_and_update() {
            if g == generation {
                return d;
            }
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Records the failure of page `generation` unless one is recorded; returns the recorded one.
pub(super) fn declare_page(
    tx: &watch::Sender<PageDeath>,
    generation: u64,
    cause: DeathCause,
) -> Death {
    let mut recorded = Death::new(cause, Instant::now());
    tx.send_if_modified(|d| match d {
        Some((g, existing)) if *g == generation => {
            recorded = *existing;
            false
        }
        _ => {
            *d = Some((generation, recorded));
            true
        }
    });
    recorded
}

/// Reports a death to the relay's watchers; the first report wins.
#[derive(Clone)]
pub(crate) struct DeathSender(pub(super) watch::Sender<Option<Death>>);

impl DeathSender {
    /// Records `cause` now unless a death is already recorded; returns the recorded one.
    pub fn declare(&self, cause: DeathCause) -> Death {
        self.declare_confirmed(cause, Confirmation::of(cause))
    }

    /// Records `cause`, made sure of as `confirmed`, now unless a death is already recorded;
    /// returns the recorded one.
    pub fn declare_confirmed(&self, cause: DeathCause, confirmed: Option<Confirmation>) -> Death {
        let mut recorded = Death {
            cause,
            at: Instant::now(),
            confirmed,
        };
        self.0.send_if_modified(|d| match d {
            Some(existing) => {
                recorded = *existing;
                false
            }
            None => {
                *d = Some(recorded);
                true
            }
        });
        recorded
    }
}

/// The channels the relay task publishes deaths on.
pub(super) struct Signals {
    pub(super) death: watch::Sender<Option<Death>>,
    pub(super) page_death: watch::Sender<PageDeath>,
}

impl Signals {
    /// Publishes the browser's death (unless one is published already).
    pub(super) fn die(&self, cause: DeathCause) {
        DeathSender(self.death.clone()).declare(cause);
    }

    /// Publishes the browser's death, made sure of as `confirmed`.
    pub(super) fn die_confirmed(&self, cause: DeathCause, confirmed: Confirmation) {
        DeathSender(self.death.clone()).declare_confirmed(cause, Some(confirmed));
    }

    /// Publishes the failure of page `generation` (unless one is published already).
    pub(super) fn fail_page(&self, generation: u64, cause: DeathCause) {
        declare_page(&self.page_death, generation, cause);
    }
}
