//! After an entry's browser or page failed: the entry's grace while the replacement gets
//! ready, then the failure accounted (lost work, milestones, budgets) and what comes next
//! decided: the fresh page, or a new browser.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::FutureExt;
use futures::future::OptionFuture;
use tokio::time::{Instant, sleep, sleep_until};

use super::ended::{Ended, EntryEnd};
use super::entry::TaskResult;
use super::launch::discard;
use super::spares::NextBrowser;
use super::{Backend, LiveBrowser, Run, TaskFn};
use crate::error::{Error, RunError};
use crate::redact::redact;
use crate::relay::Death;
use crate::report::Milestone;

/// What a failure cost: the entry it cut (0: none), the work lost and the work to redo.
#[derive(Clone, Copy)]
struct Loss {
    attempt: u32,
    lost: Duration,
    redone: Duration,
}

/// What a page failure leaves of the browser.
enum PageRecovery<Br> {
    /// A fresh page is open in it: the task re-enters there.
    Recovered(Br),
    /// No fresh page opened: a new browser replaces it.
    Relaunch(Br),
}

impl<'r, B, F, T, E> Run<'r, B, F>
where
    B: Backend,
    F: TaskFn<B::Page, Value = T, Error = E>,
    E: Display,
{
    /// After the entry's browser or page failed: the entry gets its grace while the
    /// replacement (a fresh page, or a new browser or the standby) gets ready; then the entry
    /// is dropped, unless it finished meanwhile.
    pub(super) async fn give_grace<En>(
        &mut self,
        mut browser: B::Browser,
        death: Death,
        cut: EntryEnd,
        mut entry: Pin<Box<En>>,
    ) -> Ended<T, E, B::Browser>
    where
        En: Future<Output = TaskResult<T, E>>,
    {
        let options = self.options;
        tracing::info!(cause = death.cause.as_str(), grace = ?options.grace, "the entry's {} failed; waiting out the grace period", if death.cause.is_page() { "page" } else { "browser" });
        let fresh_page = if death.cause.is_page() && browser.browser_death().is_none() {
            // The fresh page opens now, while the entry has its grace.
            let mut replacing = Box::pin(browser.replace_page());
            let (out, replaced) = grace(&mut entry, &mut replacing, options.grace).await;
            if let Some(end) = finished(out) {
                drop(replacing);
                return self.end_in_grace(browser, end).await;
            }
            // At most one entry alive: it is dropped before the fresh page is used.
            drop(entry);
            Some(match replaced {
                Some(r) => r,
                None => replacing.await,
            })
        } else {
            browser.cut();
            if let Some(end) = self.browser_grace(&mut entry).await {
                return self.end_in_grace(browser, end).await;
            }
            drop(entry);
            None
        };
        Ended::Failed {
            browser,
            death,
            entry: cut,
            fresh_page,
        }
    }

    /// The grace after the browser failed: its replacement gets ready meanwhile and is the
    /// next browser, unless the entry finished (then it is let go, and the entry's end told).
    async fn browser_grace(
        &mut self,
        entry: &mut (impl Future<Output = TaskResult<T, E>> + Unpin),
    ) -> Option<Finished<T>> {
        // The replacement launches now (or is the successor already up), while the dead entry
        // has its grace; it is entered only after that entry is gone. None when no session
        // is left: the next browser gives up.
        let replacement = match self.take_standby() {
            Some(s) => {
                self.reporter.tally.standby += s.born.elapsed();
                Some((s.born, s.into_update(self.store.latest()), false))
            }
            None if self.reporter.budget.may_launch() => {
                Some((Instant::now(), self.launch(), true))
            }
            None => None,
        };
        let (spare_started, mut launching, fresh) = match replacement {
            Some((started, launching, fresh)) => (started, Some(launching), fresh),
            None => (Instant::now(), None, false),
        };
        let (out, launched) = grace(
            entry,
            &mut OptionFuture::from(launching.as_mut()),
            self.options.grace,
        )
        .await;
        let spare = match launched {
            Some(Some(r)) => Some(futures::future::ready(r).boxed()),
            _ => launching,
        };
        if let Some(end) = finished(out) {
            if end.is_ok() {
                tracing::info!("the task finished within the grace period");
            }
            if let Some(spare) = spare {
                discard(spare, &mut self.reporter).await;
            }
            return Some(end);
        }
        self.spares.next = spare.map(|launch| NextBrowser {
            since: spare_started,
            launch,
            fresh,
        });
        None
    }

    /// The run's end when the entry finished within its grace: its value, or its panic.
    async fn end_in_grace(
        &mut self,
        browser: B::Browser,
        end: Finished<T>,
    ) -> Ended<T, E, B::Browser> {
        match end {
            Ok(value) => Ended::Over(self.complete(browser, value).await),
            Err(panic) => self.panicked(browser, panic).await,
        }
    }

    /// An entry failed with nothing left to wait for (its error was the failure's).
    pub(super) async fn failed(
        &mut self,
        mut browser: B::Browser,
        death: Death,
        entry: EntryEnd,
    ) -> Ended<T, E, B::Browser> {
        let fresh_page = if death.cause.is_page() && browser.browser_death().is_none() {
            Some(browser.replace_page().await)
        } else {
            browser.cut();
            None
        };
        Ended::Failed {
            browser,
            death,
            entry,
            fresh_page,
        }
    }

    /// Accounts for a failure (lost work, milestones, budgets) and decides what comes next:
    /// `Ok(Some(browser))` to re-enter on its fresh page, `Ok(None)` to launch a new browser,
    /// `Err` when the run gave up (reported, everything released).
    pub(super) async fn after_failure(
        &mut self,
        browser: B::Browser,
        death: Option<Death>,
        entry: Option<EntryEnd>,
        replaced: Option<Result<(), Error>>,
    ) -> Result<Option<B::Browser>, RunError<E>> {
        // A browser after a death may rotate at an automatic checkpoint again.
        self.periodic_safe = true;
        let Some(death) = death else {
            return self.after_failed_restore(browser).await;
        };
        let loss = self.record_failure(death, entry);
        let browser = if death.cause.is_page() && browser.browser_death().is_none() {
            match self
                .after_page_failure(browser, death, loss, replaced)
                .await?
            {
                PageRecovery::Recovered(browser) => return Ok(Some(browser)),
                PageRecovery::Relaunch(browser) => browser,
            }
        } else {
            self.lifetime
                .died_at(death.at.saturating_duration_since(self.born));
            self.reporter.count_death(death);
            self.options.note(Milestone::Died {
                attempt: loss.attempt,
                cause: death.cause,
                confirmed: death.confirmed,
                detected_at: death.at.into_std(),
                lost_work: loss.lost,
                redone: loss.redone,
            });
            browser
        };
        self.let_go(browser, death).await
    }

    /// The restore failed with the browser alive: a failure of this browser; a new one is
    /// launched after the backoff.
    async fn after_failed_restore(
        &mut self,
        mut browser: B::Browser,
    ) -> Result<Option<B::Browser>, RunError<E>> {
        browser.cut();
        self.reporter.release(browser).await;
        if let Err(gave_up) = self.reporter.budget.browser_failed("a failed restore") {
            return Err(self.give_up(gave_up.into_error()).await);
        }
        sleep(self.options.relaunch_backoff).await;
        Ok(None)
    }

    /// Adds what `death` cost the entry it cut (if any) to the tally.
    fn record_failure(&mut self, death: Death, entry: Option<EntryEnd>) -> Loss {
        let attempt = entry.map_or(0, |e| e.attempt);
        if let Some(entry) = &entry {
            self.reporter.budget.entry_ended(entry);
        }
        let lost = self.reporter.record_loss(death, entry.map(|e| e.started));
        let redone = entry.map_or(Duration::ZERO, |e| {
            self.reporter.record_redone(&e, death.at)
        });
        self.last_failure = Some(death.at);
        tracing::info!(
            attempt,
            cause = death.cause.as_str(),
            lost_work_ms = lost.as_millis() as u64,
            redone_ms = redone.as_millis() as u64,
            "entry ended by a failure"
        );
        Loss {
            attempt,
            lost,
            redone,
        }
    }

    /// A page failed in a browser that lives on: a fresh page (`replaced`, if it was opened
    /// during the grace) takes over, within `max_page_recoveries`.
    async fn after_page_failure(
        &mut self,
        mut browser: B::Browser,
        death: Death,
        loss: Loss,
        replaced: Option<Result<(), Error>>,
    ) -> Result<PageRecovery<B::Browser>, RunError<E>> {
        let options = self.options;
        options.note(Milestone::PageFailed {
            attempt: loss.attempt,
            cause: death.cause,
            detected_at: death.at.into_std(),
            lost_work: loss.lost,
            redone: loss.redone,
        });
        if let Err(gave_up) = self.reporter.budget.page_failed(death.cause.as_str()) {
            self.release_later(browser);
            return Err(self.give_up(gave_up.into_error()).await);
        }
        let replaced = match replaced {
            Some(r) => r,
            None => browser.replace_page().await,
        };
        match replaced {
            Ok(()) => {
                self.reporter.tally.page_recoveries += 1;
                options.note(Milestone::PageRecovered {
                    took: death.at.elapsed(),
                });
                Ok(PageRecovery::Recovered(browser))
            }
            Err(e) => {
                tracing::info!(error = %redact(&e.to_string(), options.diagnostics), "no fresh page in this browser; relaunching");
                Ok(PageRecovery::Relaunch(browser))
            }
        }
    }

    /// A new browser is needed: this one died, or could not give a fresh page. Counted as a
    /// browser failure; answers `Ok(None)` (launch) unless the run gives up.
    async fn let_go(
        &mut self,
        mut browser: B::Browser,
        death: Death,
    ) -> Result<Option<B::Browser>, RunError<E>> {
        self.relaunching = Some(death.at);
        if let Some(m) = &self.options.metrics {
            // A page failure whose fresh page would not open may have been the browser's death.
            let died = if death.cause.is_page() {
                browser.browser_death()
            } else {
                Some(death)
            };
            if let Some(died) = died {
                m.died(died.cause);
            }
        }
        // When a standby takes over, the release goes on in the background: the standby need
        // not wait for a provider's DELETE. Before a launch it is awaited, so the launch does
        // not meet the provider's concurrency limit with the dead session still counted.
        browser.cut();
        if self.spares.next_is_standby() {
            self.release_later(browser);
        } else {
            self.reporter.release(browser).await;
        }
        match self.reporter.budget.browser_failed(death.cause.as_str()) {
            Ok(()) => Ok(None),
            Err(gave_up) => Err(self.give_up(gave_up.into_error()).await),
        }
    }
}

/// How an entry that finished within its grace ends the run: its value, or its panic.
type Finished<T> = std::thread::Result<T>;

/// Whether the entry's end within its grace ends the run: its value or its panic does; an
/// error after the failure is the failure's doing, and a timeout drops the entry.
fn finished<T, E>(out: Option<TaskResult<T, E>>) -> Option<Finished<T>> {
    match out? {
        Ok(Ok(value)) => Some(Ok(value)),
        Ok(Err(_)) => None,
        Err(panic) => Some(Err(panic)),
    }
}

/// Gives a failed entry the grace period to finish, while `replacement` makes progress.
/// Returns the entry's outcome if it finished in time, and the replacement's if it did.
async fn grace<O, R>(
    entry: &mut (impl Future<Output = O> + Unpin),
    replacement: &mut (impl Future<Output = R> + Unpin),
    grace: Duration,
) -> (Option<O>, Option<R>) {
    let end = Instant::now() + grace;
    let mut replaced = None;
    let finished = loop {
        tokio::select! {
            biased;
            out = &mut *entry => break Some(out),
            r = &mut *replacement, if replaced.is_none() => replaced = Some(r),
            _ = sleep_until(end) => break None,
        }
    };
    (finished, replaced)
}
