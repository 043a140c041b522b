//! The browsers kept beside the task's, each in its slot with its lifecycle:
//! * `next`: launched (or a standby taken) while a dead entry had its grace; the next
//!   entry's browser.
//! * `successor`: launched beside the task's browser, for a rotation or on standby.
//! * `stale`: a standby past its age, kept until the fresh one replacing it is ready, so a
//!   death in between still finds a browser up.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::backend::LiveBrowser;
use crate::checkpoint::Checkpoint;
use crate::error::Error;
use crate::relay::Death;

/// The slots (see the module doc).
pub(super) struct Spares<'r, B> {
    pub(super) next: Option<NextBrowser<'r, B>>,
    pub(super) successor: Option<Successor<'r, B>>,
    pub(super) stale: Option<Successor<'r, B>>,
}

impl<B> Default for Spares<'_, B> {
    fn default() -> Self {
        Spares {
            next: None,
            successor: None,
            stale: None,
        }
    }
}

/// The browser for the next entry, chosen during a dead entry's grace.
pub(super) struct NextBrowser<'r, B> {
    /// When its launch started (a standby's: when it was launched ahead of need).
    pub(super) since: Instant,
    pub(super) launch: Launch<'r, B>,
    /// Launched for this, not a standby already up: its time is a launch's.
    pub(super) fresh: bool,
}

impl<'r, B: LiveBrowser + 'r> Spares<'r, B> {
    /// The standby to replace a dead browser with, if one is up or coming: a ready successor,
    /// else the old standby (the fresh one, still launching, stays for the next entry), else
    /// the successor still launching. Past three quarters of `life` (the lifetime known), a
    /// standby would only bring the next death: it is let go. Answers it, and those let go.
    pub(super) fn take_standby(
        &mut self,
        life: Option<Duration>,
    ) -> (Option<Successor<'r, B>>, Vec<Successor<'r, B>>) {
        let mut gone = Vec::new();
        if let Some(life) = life {
            let old = |s: &mut Successor<'r, B>| s.born.elapsed() > life * 3 / 4;
            gone.extend(self.stale.take_if(old));
            gone.extend(self.successor.take_if(old));
        }
        let taken = match (self.stale.take(), self.successor.take()) {
            (Some(old), Some(new)) if new.is_ready() => {
                gone.push(old);
                Some(new)
            }
            (Some(old), new) => {
                self.successor = new;
                Some(old)
            }
            (None, new) => new,
        };
        (taken, gone)
    }

    /// The successor becomes the old standby, kept until a fresh one is ready. Answers an
    /// older one still kept, to let go.
    pub(super) fn renew_standby(&mut self) -> Option<Successor<'r, B>> {
        let s = self
            .successor
            .take()
            .expect("renewed only with a successor");
        self.stale.replace(s)
    }

    /// Everything kept, to let go when the run ends.
    pub(super) fn drain(&mut self) -> (Vec<Successor<'r, B>>, Option<Launch<'r, B>>) {
        let kept = [self.successor.take(), self.stale.take()];
        let next = self.next.take().map(|n| n.launch);
        (kept.into_iter().flatten().collect(), next)
    }

    /// Whether the next entry's browser is a standby already up (not launched for it).
    pub(super) fn next_is_standby(&self) -> bool {
        self.next.as_ref().is_some_and(|n| !n.fresh)
    }
}

/// A launch in progress, boxed so it can wait in a slot: the browser, and the checkpoint
/// already restored into it (a successor's), if any.
pub(super) type Launch<'r, B> = BoxFuture<'r, Result<(B, Option<Arc<Checkpoint>>), Error>>;

/// A browser launched beside the task's, ahead of need.
pub(super) struct Successor<'r, B> {
    /// When its launch started.
    pub(super) born: Instant,
    /// Kept for unplanned deaths (`Options::standby`), not only for a rotation.
    pub(super) standby: bool,
    pub(super) state: Standing<'r, B>,
}

pub(super) enum Standing<'r, B> {
    /// Launching, then restoring the newest checkpoint.
    Launching(Launch<'r, B>),
    /// Ready: restored with `restored` (if there was a checkpoint).
    Ready {
        browser: B,
        restored: Option<Arc<Checkpoint>>,
    },
}

/// What happened to a successor.
pub(super) enum Turn<B> {
    Launched(Result<(B, Option<Arc<Checkpoint>>), Error>),
    Died(Death),
}

impl<'r, B: LiveBrowser + 'r> Successor<'r, B> {
    /// Waits for the launch to end, or for the ready browser to die. Cancel-safe.
    pub(super) async fn turn(&mut self) -> Turn<B> {
        match &mut self.state {
            Standing::Launching(launch) => Turn::Launched(launch.await),
            Standing::Ready { browser, .. } => Turn::Died(browser.died().await),
        }
    }

    pub(super) fn is_ready(&self) -> bool {
        matches!(self.state, Standing::Ready { .. })
    }

    /// Resolves when a ready browser dies; never while launching. Cancel-safe.
    pub(super) async fn standing_death(&mut self) -> Death {
        match &self.state {
            Standing::Ready { browser, .. } => browser.died().await,
            Standing::Launching(_) => std::future::pending().await,
        }
    }

    /// As a launch that also brings a ready browser's restore up to date with `latest`
    /// (storage only, no request to a site): to replace a dead browser with, while the dead
    /// entry has its grace.
    pub(super) fn into_update(self, latest: Option<Arc<Checkpoint>>) -> Launch<'r, B> {
        match (self.state, latest) {
            (Standing::Ready { browser, restored }, Some(cp)) => async move {
                match browser.restore(&cp, restored.as_deref()).await {
                    Ok(_) => Ok((browser, Some(cp))),
                    // The restore before the entry tries again, from what was there.
                    Err(_) => Ok((browser, restored)),
                }
            }
            .boxed(),
            (state, _) => Successor { state, ..self }.into_launch(),
        }
    }

    /// As a launch: to replace a dead browser with.
    pub(super) fn into_launch(self) -> Launch<'r, B> {
        match self.state {
            Standing::Launching(launch) => launch,
            Standing::Ready { browser, restored } => {
                futures::future::ready(Ok((browser, restored))).boxed()
            }
        }
    }
}
