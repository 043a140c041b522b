//! Where the run's browsers come from: a launch, a successor, a standby, the spare; and their
//! releases, in the background.

use std::fmt::Display;

use futures::{FutureExt, StreamExt};
use tokio::time::{Instant, sleep};

use super::spares::{Launch, NextBrowser, Standing, Successor};
use super::{Backend, LiveBrowser, Reporter, Run, TaskFn, background};
use crate::error::{Error, ErrorKind, RunError};
use crate::redact::redact;
use crate::report::Milestone;

impl<'r, B, F, T, E> Run<'r, B, F>
where
    B: Backend,
    F: TaskFn<B::Page, Value = T, Error = E>,
    E: Display,
{
    /// Launches a browser (or takes the spare launched during the last grace). `Ok(None)`: the
    /// launch failed and the backoff has passed; try again.
    pub(super) async fn next_browser(&mut self) -> Result<Option<B::Browser>, RunError<E>> {
        // `fresh`: launched for this, so its time is a launch's (a standby's is its age).
        let NextBrowser {
            since: launch_started,
            launch,
            fresh,
        } = match self.spares.next.take() {
            Some(next) => next,
            None => match self.take_standby() {
                Some(s) => {
                    self.reporter.tally.standby += s.born.elapsed();
                    NextBrowser {
                        since: s.born,
                        launch: s.into_launch(),
                        fresh: false,
                    }
                }
                None if self.reporter.budget.may_launch() => NextBrowser {
                    since: Instant::now(),
                    launch: self.launch(),
                    fresh: true,
                },
                None => {
                    let gave_up = self.reporter.budget.out_of_sessions();
                    return Err(self.give_up(gave_up.into_error()).await);
                }
            },
        };
        // Every launch but the first replaces something.
        if self.launches > 0 {
            self.reporter.tally.relaunches += 1;
        }
        self.launches += 1;
        if fresh {
            self.start_deferred();
        }
        match background(&mut self.releasing, &mut self.reporter, launch).await {
            Ok((browser, restored)) => {
                self.options.note(Milestone::Launched {
                    took: launch_started.elapsed(),
                });
                if fresh {
                    self.lifetime.launched_in(launch_started.elapsed());
                }
                self.lifetime.stated(browser.stated_lifetime());
                self.born = launch_started;
                self.prior = restored;
                Ok(Some(browser))
            }
            Err(e) => {
                let error = redact(&e.to_string(), self.options.diagnostics);
                self.options.note(Milestone::LaunchFailed {
                    error: error.clone(),
                });
                tracing::warn!(%error, "launch failed");
                if let Err(gave_up) = self.reporter.budget.launch_failed(&e.to_string()) {
                    return Err(self.give_up(gave_up.into_error().with_source(e)).await);
                }
                sleep(self.options.relaunch_backoff).await;
                Ok(None)
            }
        }
    }

    /// Starts a launch (a session asked for).
    pub(super) fn launch(&mut self) -> Launch<'r, B::Browser> {
        self.reporter.budget.launched();
        let (backend, options) = (self.backend, self.options);
        async move { Ok((backend.launch(options).await?, None)) }.boxed()
    }

    /// Starts a successor: launched, then restored with the newest checkpoint (storage only;
    /// no request reaches a site).
    pub(super) fn launch_successor(&mut self) -> Successor<'r, B::Browser> {
        self.reporter.budget.launched();
        let (backend, options) = (self.backend, self.options);
        let latest = self.store.latest();
        let launch = async move {
            let browser = backend.launch(options).await?;
            let Some(cp) = latest else {
                return Ok((browser, None));
            };
            let restored = tokio::select! {
                biased;
                death = browser.died() => Err(Error::new(ErrorKind::Launch, format!("the successor died while it was restored ({})", death.cause.as_str()))),
                r = browser.restore(&cp, None) => r,
            };
            match restored {
                Ok(_) => Ok((browser, Some(cp))),
                Err(e) => {
                    let _ = tokio::time::timeout(options.release_timeout, browser.release()).await;
                    Err(e)
                }
            }
        }
        .boxed();
        Successor {
            born: Instant::now(),
            standby: options.standby,
            state: Standing::Launching(launch),
        }
    }

    /// Releases `browser` in the background: the task goes on meanwhile.
    pub(super) fn release_later(&mut self, browser: B::Browser) {
        let limit = self.options.release_timeout;
        self.deferred
            .push(tokio::time::timeout(limit, browser.release()).boxed());
    }

    /// Starts the releases deferred so far.
    pub(super) fn start_deferred(&mut self) {
        self.releasing.extend(self.deferred.drain(..));
    }

    /// A successor no longer wanted: released in the background once its launch is over.
    pub(super) fn discard_successor(&mut self, successor: Successor<'r, B::Browser>) {
        self.reporter.tally.standby += successor.born.elapsed();
        let limit = self.options.release_timeout;
        let launch = successor.into_launch();
        self.deferred.push(
            async move {
                match launch.await {
                    Ok((mut browser, _)) => {
                        browser.cut();
                        tokio::time::timeout(limit, browser.release()).await
                    }
                    Err(_) => Ok(Ok(())),
                }
            }
            .boxed(),
        );
    }

    /// The browser to replace a dead one with, if one is up or coming (see
    /// [`Spares::take_standby`](super::spares::Spares::take_standby)); those let go are released in the background.
    pub(super) fn take_standby(&mut self) -> Option<Successor<'r, B::Browser>> {
        let (taken, gone) = self.spares.take_standby(self.lifetime.for_standby());
        for old in gone {
            self.discard_successor(old);
        }
        taken
    }

    /// Before the run returns: the successor discarded, every release (the task's browser's
    /// among them) finished — side by side, so the run does not wait for one after another.
    pub(super) async fn settle_background(&mut self) {
        let (kept, next) = self.spares.drain();
        for s in kept {
            self.discard_successor(s);
        }
        if let Some(next) = next {
            discard(next, &mut self.reporter).await;
        }
        self.start_deferred();
        while let Some(released) = self.releasing.next().await {
            self.reporter.note_release(released);
        }
    }
}

/// A launch no longer needed (the spare launched during a dead entry's grace): finished (so
/// no session is left half-created), then released.
pub(super) async fn discard<B: LiveBrowser>(launch: Launch<'_, B>, reporter: &mut Reporter<'_>) {
    if let Ok((browser, _)) = launch.await {
        reporter.release(browser).await;
    }
}
