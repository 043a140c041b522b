//! The keeper: one task per live browser, which faults its pages on schedule and kills it at
//! its death time, on command, or at release.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use super::Shared;
use crate::chaos::Death;
use crate::chromium::Browser;
use crate::config::PageFault;
use crate::page;

/// What a keeper is told to do.
pub(super) enum Command {
    /// Kill now, with this death or (`None`) the session's own.
    Kill {
        death: Option<Death>,
        done: oneshot::Sender<Death>,
    },
    /// Kill now, as part of the session's release.
    Release { done: oneshot::Sender<()> },
}

/// Tells a keeper to kill its browser and waits until it has.
pub(super) async fn stop_keeper(keeper: mpsc::UnboundedSender<Command>) {
    let (done, finished) = oneshot::channel();
    if keeper.send(Command::Release { done }).is_ok() {
        // Ok or a dropped sender: either way the keeper has closed the browser.
        let _ = finished.await;
    }
}

/// What a keeper carries out on its own, and when.
pub(super) struct Schedule {
    pub(super) death_at: Instant,
    pub(super) death: Death,
    /// The session's page fault, if any, and when.
    pub(super) page_fault: Option<(PageFault, Instant)>,
}

/// Owns one session's browser: faults its pages on schedule, kills it at its death time, on
/// command, or at release, and notices when it exits on its own.
pub(super) async fn keep(
    shared: Arc<Shared>,
    id: Uuid,
    mut browser: Browser,
    schedule: Schedule,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    enum Why {
        Scheduled,
        Crashed,
        Killed(Option<Death>, oneshot::Sender<Death>),
        Released(Option<oneshot::Sender<()>>),
    }
    let Schedule {
        death_at,
        death,
        page_fault,
    } = schedule;
    let upstream = browser.endpoint();
    // Part of this future, not a task of its own: whatever ends the session drops it, and with
    // it the fault's connection to the browser.
    let mut fault = Box::pin(async {
        let Some((fault, at)) = page_fault else {
            return;
        };
        tokio::time::sleep_until(at).await;
        match page::fail_pages(&upstream, fault).await {
            Ok(pages) => tracing::info!(session = %id, %fault, pages, "pages faulted on schedule"),
            Err(e) => {
                tracing::warn!(session = %id, %fault, error = %e, "scheduled page fault failed")
            }
        }
    });
    let mut fault_pending = true;
    let why = loop {
        tokio::select! {
            _ = tokio::time::sleep_until(death_at) => break Why::Scheduled,
            _ = browser.exited() => break Why::Crashed,
            command = commands.recv() => break match command {
                Some(Command::Kill { death, done }) => Why::Killed(death, done),
                Some(Command::Release { done }) => Why::Released(Some(done)),
                None => Why::Released(None),
            },
            () = &mut fault, if fault_pending => fault_pending = false,
        }
    };
    drop(fault);
    let dies = match &why {
        Why::Scheduled => Some(death),
        Why::Crashed => {
            tracing::warn!(session = %id, "chromium exited on its own");
            Some(Death::Close)
        }
        Why::Killed(chosen, _) => Some(chosen.unwrap_or(death)),
        Why::Released(_) => None,
    };
    browser.close().await;
    // Published only now, so that whoever sees the death (the relay, `GET`, `status`) also
    // sees the browser gone.
    if let Some(death) = dies {
        tracing::info!(session = %id, ?death, "session died");
        shared.mark_dead(id, death);
    }
    match why {
        Why::Killed(_, done) => {
            let _ = done.send(dies.unwrap_or(death));
        }
        Why::Released(Some(done)) => {
            let _ = done.send(());
        }
        _ => {}
    }
    // Dropping `commands` here answers any queued command: the browser is gone.
}
