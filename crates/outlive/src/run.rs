//! The run loop: launch, restore, enter, watch, and on a failure, grace, drop, replace.
//!
//! One mechanism for every layer: a browser death and a page failure both end the entry at a
//! well-defined point (after the grace period, the entry is dropped), and the task is
//! re-entered with `attempt` + 1 on a replacement — a fresh page in the same browser when only
//! the page failed and the browser still answers, a new browser otherwise. The loop is a
//! struct with named steps ([`Run::next_browser`], [`Run::prepare`], [`Run::watch_entry`],
//! [`Run::after_failure`]), generic over a [`Backend`] so that its timing logic (grace,
//! backoff, lost work, budgets) is tested with a paused clock against a scripted fake; the
//! real backend is [`crate::browser::CdpBackend`].

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::{Instant, sleep, sleep_until};
use tracing::Instrument;

use crate::checkpoint::Checkpoint;
use crate::ctx::{Capturer, Ctx, ResumedFrom, Store};
use crate::error::{Error, ErrorKind, RunError};
use crate::lifetime::Lifetime;
use crate::options::Options;
use crate::redact::redact;
use crate::relay::Death;
use crate::report::{Milestone, Outcome, WideEvent};

/// Where browsers come from, for the run loop.
pub(crate) trait Backend: Sync {
    type Page: Clone;
    type Browser: LiveBrowser<Page = Self::Page>;

    /// Launches and connects a browser whose page is ready for the task.
    fn launch(
        &self,
        options: &Options,
    ) -> impl Future<Output = Result<Self::Browser, Error>> + Send;
}

/// One connected browser, for the run loop.
pub(crate) trait LiveBrowser: Send {
    type Page: Clone;

    fn page(&self) -> Self::Page;
    fn capturer(&self) -> Capturer;
    /// Resolves with the first failure detected: the browser's death or the current page's.
    /// Cancel-safe.
    fn died(&self) -> impl Future<Output = Death> + Send;
    /// The failure, if one has been detected: the browser's death first, else the current
    /// page's.
    fn death(&self) -> Option<Death>;
    /// The browser's own death, if one has been detected (page failures aside).
    fn browser_death(&self) -> Option<Death>;
    /// Asks the browser and the page whether they are alive; records a failure if not.
    fn confirm_alive(&self, timeout: Duration) -> impl Future<Output = bool> + Send;
    /// Cuts the connection so every page call fails at once.
    fn cut(&mut self);
    /// Disposes of the failed page and opens a fresh one in the same browser; fails if the
    /// browser is dead too or no page opens.
    fn replace_page(&mut self) -> impl Future<Output = Result<(), Error>> + Send;
    /// Puts `checkpoint` into the page; answers how many writes failed in the page. With
    /// `prior` (restored into this browser before, nothing else done in it since), writes only
    /// what changed.
    fn restore(
        &self,
        checkpoint: &Checkpoint,
        prior: Option<&Checkpoint>,
    ) -> impl Future<Output = Result<u64, Error>> + Send;
    fn navigate(&self, url: &str) -> impl Future<Output = Result<(), Error>> + Send;
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Counters of one run; become the wide event.
#[derive(Debug, Default)]
struct Tally {
    relaunches: u32,
    attempts: u32,
    /// Browser deaths plus failed launches and restores: what `max_relaunches` limits.
    failures: u32,
    /// Page failures: what `max_page_recoveries` limits.
    page_failures: u32,
    /// Fresh pages that took over in a browser that lived on.
    page_recoveries: u32,
    lost_work: Duration,
    max_lost_work: Duration,
    release_failed: u32,
    /// Writes that failed in restore documents.
    restore_writes_failed: u64,
    /// Switches to a successor at a safe point.
    rotations: u32,
    /// Launches started (every session the run asked for).
    sessions: u32,
    /// Time successors and standbys were up beside the task's browser.
    standby: Duration,
}

/// Builds and emits the wide event exactly once; if the run future is dropped first, its
/// `Drop` emits a `failed`/`cancelled` event.
struct Reporter<'o> {
    run_id: String,
    started: Instant,
    options: &'o Options,
    store: Arc<Store>,
    tally: Tally,
    emitted: bool,
}

impl Reporter<'_> {
    fn event(&self, outcome: Outcome, failure: Option<(String, &str, String)>) -> WideEvent {
        let (error_name, error_code, error) = match failure {
            Some((name, code, message)) => (
                Some(name),
                Some(code.to_owned()),
                Some(redact(&message, self.options.diagnostics)),
            ),
            None => (None, None, None),
        };
        WideEvent {
            run_id: self.run_id.clone(),
            outcome,
            relaunches: self.tally.relaunches,
            checkpoint_count: self.store.count(),
            lost_work_ms: self.tally.lost_work.as_millis() as u64,
            max_lost_work_ms: self.tally.max_lost_work.as_millis() as u64,
            total_ms: self.started.elapsed().as_millis() as u64,
            attempts: self.tally.attempts,
            release_failed: self.tally.release_failed,
            page_recoveries: self.tally.page_recoveries,
            state_left_out: self.store.max_left_out() + self.tally.restore_writes_failed,
            rotations: self.tally.rotations,
            sessions: self.tally.sessions,
            standby_ms: self.tally.standby.as_millis() as u64,
            error_name,
            error_code,
            error,
        }
    }

    fn emit(&mut self, outcome: Outcome, failure: Option<(String, &str, String)>) {
        if self.emitted {
            return;
        }
        self.emitted = true;
        let event = self.event(outcome, failure);
        event.emit(self.options.on_event.as_deref());
    }

    fn outlive_error<E>(&mut self, e: Error) -> RunError<E> {
        let outcome = if e.kind() == ErrorKind::GaveUp {
            Outcome::GaveUp
        } else {
            Outcome::Failed
        };
        let name = match e.kind() {
            ErrorKind::GaveUp => "GaveUp",
            ErrorKind::InvalidOption => "InvalidOption",
            _ => "OutliveError",
        };
        self.emit(outcome, Some((name.to_owned(), e.code(), e.to_string())));
        RunError::Outlive(e)
    }

    /// Adds the work `death` cost to the tally: from the newest checkpoint (or the entry's
    /// start, if later) to its detection; nothing when no entry was running.
    fn record_loss(&mut self, death: Death, entry_started: Option<Instant>) -> Duration {
        let lost = match entry_started {
            Some(entry) => {
                let from = self.store.latest_taken().map_or(entry, |cp| cp.max(entry));
                death.at.saturating_duration_since(from)
            }
            None => Duration::ZERO,
        };
        self.tally.lost_work += lost;
        self.tally.max_lost_work = self.tally.max_lost_work.max(lost);
        lost
    }

    async fn release<B: LiveBrowser>(&mut self, browser: B) {
        let limit = self.options.release_timeout;
        let released = tokio::time::timeout(limit, browser.release()).await;
        self.note_release(released);
    }

    /// Counts a release that failed or timed out.
    fn note_release(&mut self, released: Result<Result<(), Error>, tokio::time::error::Elapsed>) {
        let limit = self.options.release_timeout;
        match released {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.tally.release_failed += 1;
                tracing::warn!(error = %redact(&e.to_string(), self.options.diagnostics), "release failed");
            }
            Err(_) => {
                self.tally.release_failed += 1;
                tracing::warn!(timeout = ?limit, "release did not finish in time");
            }
        }
    }
}

impl Drop for Reporter<'_> {
    fn drop(&mut self) {
        if !self.emitted {
            let (name, code) = if std::thread::panicking() {
                ("Panic", "panic")
            } else {
                ("Cancelled", "cancelled")
            };
            let message = format!("the run ended early: {code}");
            self.emit(Outcome::Failed, Some((name.to_owned(), code, message)));
        }
    }
}

fn type_name_of<E>() -> String {
    let full = std::any::type_name::<E>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_owned()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "the task panicked".to_owned()
    }
}

/// The run loop. See the crate docs for the semantics.
pub(crate) async fn run<B, F, Fut, T, E>(
    backend: &B,
    task: F,
    options: &Options,
) -> Result<T, RunError<E>>
where
    B: Backend,
    F: FnMut(B::Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let run_id = options
        .durable
        .as_ref()
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |d| d.run_id.clone());
    let span = tracing::info_span!("outlive", run_id = %run_id);
    let store = Arc::new(Store::default());
    let reporter = Reporter {
        run_id,
        started: Instant::now(),
        options,
        store: store.clone(),
        tally: Tally::default(),
        emitted: false,
    };
    let mut run = Run {
        backend,
        task,
        options,
        store,
        reporter,
        last_failure: None,
        spare: None,
        launches: 0,
        lifetime: Lifetime::new(options.rotation),
        born: Instant::now(),
        successor: None,
        stale: None,
        releasing: FuturesUnordered::new(),
        deferred: Vec::new(),
        prior: None,
    };
    run.drive().instrument(span).await
}

/// A launch in progress, boxed so it can wait in [`Run::spare`]: the browser, and the
/// checkpoint already restored into it (a successor's), if any.
type Launch<'r, B> = BoxFuture<'r, Result<(B, Option<Arc<Checkpoint>>), Error>>;

/// A release in progress, capped by `release_timeout`.
type Release<'r> = BoxFuture<'r, Result<Result<(), Error>, tokio::time::error::Elapsed>>;

/// The state of one run, shared by its steps.
struct Run<'r, B: Backend, F> {
    backend: &'r B,
    task: F,
    options: &'r Options,
    store: Arc<Store>,
    reporter: Reporter<'r>,
    /// When the last failure was detected: what the next entry's `replaced_in` counts from.
    last_failure: Option<Instant>,
    /// A browser launched during a dead entry's grace, taken by the next [`Run::next_browser`]:
    /// since when, and whether it was launched then (rather than a standby already up).
    spare: Option<(Instant, Launch<'r, B::Browser>, bool)>,
    /// Launches so far (the spare counts when it is used).
    launches: u32,
    /// The lifetime learned and declared, for rotations.
    lifetime: Lifetime,
    /// When the current browser's launch started: its age counts from there.
    born: Instant,
    /// A browser launched beside the current one: a rotation's successor or a standby.
    successor: Option<Successor<'r, B::Browser>>,
    /// A standby past its age, kept until the fresh one replacing it is ready: a death in
    /// between still finds a browser up.
    stale: Option<Successor<'r, B::Browser>>,
    /// Releases going on in the background (old browsers left at a rotation, dead successors).
    releasing: FuturesUnordered<Release<'r>>,
    /// Releases not started yet: those due while the next entry is prepared wait for it to be
    /// entered (or for a fresh launch), so that a provider tearing a browser down on the same
    /// machine does not slow the restore and navigation the task is waiting for.
    deferred: Vec<Release<'r>>,
    /// What was restored into the next browser before it was taken (a successor's
    /// checkpoint): its restore writes only what changed since.
    prior: Option<Arc<Checkpoint>>,
}

/// A browser launched beside the task's, ahead of need.
struct Successor<'r, B> {
    /// When its launch started.
    born: Instant,
    /// Kept for unplanned deaths (`Options::standby`), not only for a rotation.
    standby: bool,
    state: Standing<'r, B>,
}

enum Standing<'r, B> {
    /// Launching, then restoring the newest checkpoint.
    Launching(Launch<'r, B>),
    /// Ready: restored with `restored` (if there was a checkpoint).
    Ready {
        browser: B,
        restored: Option<Arc<Checkpoint>>,
    },
}

/// What happened to a successor.
enum Turn<B> {
    Launched(Result<(B, Option<Arc<Checkpoint>>), Error>),
    Died(Death),
}

impl<'r, B: LiveBrowser + 'r> Successor<'r, B> {
    /// Waits for the launch to end, or for the ready browser to die. Cancel-safe.
    async fn turn(&mut self) -> Turn<B> {
        match &mut self.state {
            Standing::Launching(launch) => Turn::Launched(launch.await),
            Standing::Ready { browser, .. } => Turn::Died(browser.died().await),
        }
    }

    fn is_ready(&self) -> bool {
        matches!(self.state, Standing::Ready { .. })
    }

    /// Resolves when a ready browser dies; never while launching. Cancel-safe.
    async fn standing_death(&mut self) -> Death {
        match &self.state {
            Standing::Ready { browser, .. } => browser.died().await,
            Standing::Launching(_) => std::future::pending().await,
        }
    }

    /// As a launch that also brings a ready browser's restore up to date with `latest`
    /// (storage only, no request to a site): to replace a dead browser with, while the dead
    /// entry has its grace.
    fn into_update(self, latest: Option<Arc<Checkpoint>>) -> Launch<'r, B> {
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
    fn into_launch(self) -> Launch<'r, B> {
        match self.state {
            Standing::Launching(launch) => launch,
            Standing::Ready { browser, restored } => {
                futures::future::ready(Ok((browser, restored))).boxed()
            }
        }
    }
}

/// How an entry ended.
enum Ended<T, E, Br> {
    /// The run is over: completed, failed with the task's error, or given up. Reported.
    Over(Result<T, RunError<E>>),
    /// The entry's browser or page failed; the entry is gone: the browser, the failure, the
    /// entry's (start, attempt), and for a page failure the fresh page opened during the
    /// grace (or why none could be).
    Failed(Br, Death, (Instant, u32), Option<Result<(), Error>>),
    /// The entry ended at a safe point; the task moves to the successor.
    Rotated {
        old: Br,
        successor: Br,
        born: Instant,
        restored: Option<Arc<Checkpoint>>,
    },
}

impl<'r, B, F, Fut, T, E> Run<'r, B, F>
where
    B: Backend,
    F: FnMut(B::Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    /// The loop: a browser (new, or the one whose page was replaced), prepared, entered,
    /// watched; on a failure, accounted and replaced.
    async fn drive(&mut self) -> Result<T, RunError<E>> {
        if let Err(e) = self.options.validate() {
            return Err(self.reporter.outlive_error(e));
        }
        if let Err(e) = self.take_over() {
            return Err(self.reporter.outlive_error(e));
        }
        let mut reuse: Option<B::Browser> = None;
        loop {
            let browser = match reuse.take() {
                Some(b) => b,
                None => match self.next_browser().await? {
                    Some(b) => b,
                    None => continue,
                },
            };
            let resumed_from = match self.prepare(&browser).await {
                Ok(r) => r,
                Err(death) => {
                    reuse = self.after_failure(browser, death, None, None).await?;
                    continue;
                }
            };
            match self.watch_entry(browser, resumed_from).await {
                Ended::Over(result) => return result,
                Ended::Rotated {
                    mut old,
                    successor,
                    born,
                    restored,
                } => {
                    old.cut();
                    self.release_later(old);
                    self.born = born;
                    self.prior = restored;
                    self.last_failure = Some(Instant::now());
                    reuse = Some(successor);
                }
                Ended::Failed(browser, death, entry, replaced) => {
                    reuse = self
                        .after_failure(browser, Some(death), Some(entry), replaced)
                        .await?;
                }
            }
        }
    }

    /// A durable run taken over from another process: its sealed checkpoint opened and made
    /// the newest, the entries made there counted.
    fn take_over(&mut self) -> Result<(), Error> {
        let Some(durable) = &self.options.durable else {
            return Ok(());
        };
        let Some(resume) = &durable.resume else {
            return Ok(());
        };
        let plain = durable.sealer.open(&durable.run_id, &resume.sealed)?;
        let checkpoint = Checkpoint::from_bytes(&plain, Instant::now())?;
        tracing::info!(
            attempts = resume.attempts,
            "taking the run over from its saved checkpoint"
        );
        self.store.seed(checkpoint);
        self.reporter.tally.attempts = resume.attempts;
        Ok(())
    }

    /// Launches a browser (or takes the spare launched during the last grace). `Ok(None)`: the
    /// launch failed and the backoff has passed; try again.
    async fn next_browser(&mut self) -> Result<Option<B::Browser>, RunError<E>> {
        // Every launch but the first replaces something.
        if self.launches > 0 {
            self.reporter.tally.relaunches += 1;
        }
        self.launches += 1;
        // `fresh`: launched for this, so its time is a launch's (a standby's is its age).
        let (launch_started, launch, fresh) = match (self.spare.take(), self.successor.take()) {
            (Some(spare), successor) => {
                self.successor = successor;
                spare
            }
            (None, successor) => {
                self.successor = successor;
                match self.take_standby() {
                    Some(s) => {
                        self.reporter.tally.standby += s.born.elapsed();
                        (s.born, s.into_launch(), false)
                    }
                    None => (Instant::now(), self.launch(), true),
                }
            }
        };
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
                self.born = launch_started;
                self.prior = restored;
                Ok(Some(browser))
            }
            Err(e) => {
                let error = redact(&e.to_string(), self.options.diagnostics);
                self.reporter.tally.failures += 1;
                self.options.note(Milestone::LaunchFailed {
                    error: error.clone(),
                });
                tracing::warn!(failures = self.reporter.tally.failures, %error, "launch failed");
                if self.reporter.tally.failures > self.options.max_relaunches {
                    let msg = format!(
                        "gave up after {} browser failures (max_relaunches is {}); the last launch failed: {}",
                        self.reporter.tally.failures, self.options.max_relaunches, e
                    );
                    return Err(self
                        .reporter
                        .outlive_error(Error::new(ErrorKind::GaveUp, msg).with_source(e)));
                }
                sleep(self.options.relaunch_backoff).await;
                Ok(None)
            }
        }
    }

    /// Restores the newest checkpoint into the browser's page and navigates to its URL (or,
    /// before any checkpoint, opens `start_url` on the first entry). `Err(Some(death))`: the
    /// browser or page failed meanwhile; `Err(None)`: the restore failed with both alive.
    async fn prepare(
        &mut self,
        browser: &B::Browser,
    ) -> Result<Option<ResumedFrom>, Option<Death>> {
        let options = self.options;
        let latest = self.store.latest();
        let prior = self.prior.take();
        let first_entry = self.reporter.tally.attempts == 0;
        let restore = async {
            match &latest {
                Some(cp) => {
                    let restore_started = Instant::now();
                    let failed = browser.restore(cp, prior.as_deref()).await?;
                    let restore = restore_started.elapsed();
                    let navigate_started = Instant::now();
                    if let Err(e) = navigate(browser, &cp.url, options).await {
                        tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "resume navigation failed; entering anyway");
                    }
                    let navigate = navigate_started.elapsed();
                    options.note(Milestone::Restored { restore, navigate });
                    tracing::debug!(?restore, ?navigate, "checkpoint restored");
                    Ok((
                        Some(ResumedFrom {
                            url: cp.url.clone(),
                            checkpoint_at: cp.at,
                        }),
                        failed,
                    ))
                }
                None => {
                    if let (true, Some(url)) = (first_entry, &options.start_url) {
                        if let Err(e) = navigate(browser, url, options).await {
                            tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "start_url navigation failed; entering anyway");
                        }
                    }
                    Ok::<_, Error>((None, 0))
                }
            }
        };
        let prepared = background(&mut self.releasing, &mut self.reporter, async {
            tokio::select! {
                biased;
                death = browser.died() => Err(Some(death)),
                r = restore => r.map_err(|e| {
                    tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "restore failed");
                    None
                }),
            }
        })
        .await;
        // A restore that failed because the browser or page failed is that failure.
        match prepared {
            Ok((resumed, failed)) => {
                if failed > 0 {
                    tracing::warn!(
                        failed,
                        "some restore writes failed; the state they held is not in the page"
                    );
                }
                self.reporter.tally.restore_writes_failed += failed;
                Ok(resumed)
            }
            Err(death) => Err(death.or(browser.death())),
        }
    }

    /// Enters the task and watches the entry, the connection and the checkpoint clock until
    /// the entry ends or fails; on a failure, gives the entry its grace while the replacement
    /// (a fresh page, or a new browser) gets ready, then drops it.
    async fn watch_entry(
        &mut self,
        mut browser: B::Browser,
        resumed_from: Option<ResumedFrom>,
    ) -> Ended<T, E, B::Browser> {
        let options = self.options;
        self.reporter.tally.attempts += 1;
        let attempt = self.reporter.tally.attempts;
        // The progress saved with the checkpoint this entry resumes from (the newest: no
        // capture can land between the restore and the entry).
        let progress = resumed_from
            .as_ref()
            .and_then(|_| self.store.latest())
            .and_then(|cp| cp.progress.clone());
        let ctx = Ctx::new(
            attempt,
            resumed_from,
            browser.capturer(),
            self.store.clone(),
            options,
            progress,
        );
        let entry_started = Instant::now();
        self.start_deferred();
        options.note(Milestone::Entered {
            attempt,
            resumed: ctx.resumed_from().is_some(),
            replaced_in: self
                .last_failure
                .map(|d| entry_started.saturating_duration_since(d)),
        });
        tracing::info!(
            attempt,
            resumed = ctx.resumed_from().is_some(),
            "entering the task"
        );
        let entry = AssertUnwindSafe(
            (self.task)(browser.page(), ctx.clone())
                .instrument(tracing::info_span!("entry", attempt)),
        )
        .catch_unwind();
        // Boxed so that dropping it really ends the entry, at the point the loop says.
        let mut entry = Box::pin(entry);

        let mut periodic: Option<Pin<Box<dyn Future<Output = bool> + Send>>> = None;
        let mut last_periodic = entry_started;
        // Rotation: when to launch a successor, and when to move to it.
        let plan = self.lifetime.plan(options.checkpoint_every);
        let born = self.born;
        let rotate_from = plan.map(|p| born + p.launch_at);
        let mut succ = self.successor.take();
        let mut stale = self.stale.take();
        let mut retry_at = entry_started;
        // The entry's first checkpoint is what a standby waits for.
        let mut kept = self.store.watch_kept();
        let ended = loop {
            // While the entry runs, nothing waits: releases start as they come.
            self.start_deferred();
            let base = self
                .store
                .latest_taken()
                .map_or(entry_started, |t| t.max(entry_started))
                .max(last_periodic);
            let due = base + options.checkpoint_every;
            // A successor is launched for a rotation when it is due; a standby once this entry
            // has taken its first checkpoint (so its launch does not slow the entry's start,
            // and it has something current to restore).
            let checkpointed = self
                .store
                .latest_taken()
                .is_some_and(|t| t >= entry_started);
            let launch_successor_at = match (&succ, options.standby, rotate_from) {
                (Some(_), _, _) => None,
                (None, true, _) if checkpointed => Some(retry_at),
                (None, true, None) => None,
                (None, true, Some(at)) => Some(at.max(retry_at)),
                (None, false, at) => at.map(|at| at.max(retry_at)),
            };
            // A standby must outlive the browser it stands by for. With rotations, one younger
            // than that browser does (it leaves first); one older is replaced now. Without, it
            // is kept younger than half the lifetime known, so that it outlives the browser it
            // replaces by at least that much.
            let stale_at = match (&succ, self.lifetime.for_standby()) {
                (Some(s), Some(life)) if s.standby && s.is_ready() => match plan {
                    Some(_) if s.born >= born => None,
                    Some(_) => Some(s.born),
                    None => Some(s.born + life / 2),
                },
                _ => None,
            };
            // A ready successor is switched to once the rotation is due. A standby that would
            // be older than a quarter of the lifetime at the switch is no successor: it is
            // replaced as soon as the successor is due to launch, so the fresh one has the
            // whole lead to get ready. (Judged once, here, for both.)
            let arm = match (&succ, rotate_from, plan) {
                (Some(s), Some(at), Some(p)) if s.is_ready() && !ctx.is_switch_armed() => {
                    let switch_from = at.max(born + p.switch_at);
                    let too_old =
                        s.standby && switch_from.saturating_duration_since(s.born) > p.dies_at / 4;
                    Some(if too_old {
                        (at, true)
                    } else {
                        (switch_from, false)
                    })
                }
                _ => None,
            };
            tokio::select! {
                biased;
                () = ctx.at_safe_point(), if ctx.is_switch_armed() => break Err(None),
                out = &mut entry => break Ok(out),
                _ = kept.changed(), if options.standby && succ.is_none() && !checkpointed => {}
                death = browser.died() => break Err(Some(death)),
                turn = async { succ.as_mut().expect("checked").turn().await }, if succ.is_some() => {
                    let s = succ.take().expect("checked");
                    match turn {
                        Turn::Launched(Ok((successor, restored))) => {
                            // The old standby goes now, unless this is the rotation's successor:
                            // then at the switch, so its teardown does not slow the safe
                            // point's checkpoint.
                            let rotating = rotate_from.is_some_and(|at| Instant::now() >= at);
                            if let Some(old) = stale.take_if(|_| !rotating) {
                                self.discard_successor(old);
                            }
                            options.note(Milestone::SuccessorReady { took: s.born.elapsed(), standby: s.standby });
                            self.lifetime.launched_in(s.born.elapsed());
                            tracing::debug!(took = ?s.born.elapsed(), standby = s.standby, "successor ready");
                            succ = Some(Successor { state: Standing::Ready { browser: successor, restored }, ..s });
                        }
                        Turn::Launched(Err(e)) => {
                            self.reporter.tally.standby += s.born.elapsed();
                            tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "a successor's launch failed; trying again after the backoff");
                            retry_at = Instant::now() + options.relaunch_backoff;
                        }
                        Turn::Died(death) => {
                            ctx.disarm_switch();
                            tracing::info!(cause = death.cause.as_str(), "a successor died before the switch; launching another");
                            self.discard_successor(s);
                            retry_at = Instant::now();
                        }
                    }
                }
                death = async { stale.as_mut().expect("checked").standing_death().await }, if stale.is_some() => {
                    tracing::info!(cause = death.cause.as_str(), "the old standby died");
                    let old = stale.take().expect("checked");
                    self.discard_successor(old);
                }
                Some(released) = self.releasing.next(), if !self.releasing.is_empty() => {
                    self.reporter.note_release(released);
                }
                _ = sleep_until(launch_successor_at.unwrap_or(entry_started)), if launch_successor_at.is_some() => {
                    succ = Some(self.launch_successor());
                }
                _ = sleep_until(stale_at.unwrap_or(entry_started)), if stale_at.is_some() && !ctx.is_switch_armed() => {
                    tracing::debug!("the standby is getting old; launching a fresh one");
                    let s = succ.take().expect("checked");
                    // Kept until the fresh one is ready.
                    if let Some(older) = stale.replace(s) {
                        self.discard_successor(older);
                    }
                    retry_at = Instant::now();
                }
                _ = sleep_until(arm.map_or(entry_started, |(at, _)| at)), if arm.is_some() => {
                    let s = succ.take().expect("checked");
                    if arm.is_some_and(|(_, too_old)| too_old) {
                        // A standby about as old as this browser would soon need leaving too:
                        // a fresh one takes its place, and is the successor.
                        tracing::debug!("the standby is too old to rotate to; launching a fresh one");
                        if let Some(older) = stale.replace(s) {
                            self.discard_successor(older);
                        }
                        retry_at = Instant::now();
                    } else {
                        succ = Some(s);
                        ctx.arm_switch();
                        tracing::debug!(age = ?born.elapsed(), "rotation armed: switching at the next safe point");
                        // A safe point now, unless the task holds checkpoints (its own comes at
                        // the end of the hold).
                        if periodic.is_none() && !ctx.is_held() {
                            last_periodic = Instant::now();
                            let ctx = ctx.clone();
                            periodic = Some(Box::pin(async move { ctx.checkpoint().await }));
                        }
                    }
                }
                Some(_) = OptionFuture::from(periodic.as_mut()), if periodic.is_some() => {
                    periodic = None;
                }
                _ = sleep_until(due), if periodic.is_none() => {
                    last_periodic = Instant::now();
                    // Held by the task: skip this one; the next is due an interval later.
                    if !ctx.is_held() {
                        let ctx = ctx.clone();
                        periodic = Some(Box::pin(async move { ctx.checkpoint().await }));
                    }
                }
            }
        };
        drop(periodic);
        let ended = match ended {
            Ok(out) => Ok(out),
            Err(Some(death)) => Err(death),
            Err(None) => {
                // At a safe point: the entry ends here, before anything after the checkpoint.
                drop(entry);
                ctx.retire();
                let ended_at = Instant::now();
                let s = succ.take().expect("armed only with a successor");
                let Standing::Ready {
                    browser: successor,
                    restored,
                } = s.state
                else {
                    unreachable!("armed only when ready");
                };
                if let Some(old) = stale.take() {
                    self.discard_successor(old);
                }
                self.reporter.tally.rotations += 1;
                self.reporter.tally.standby += ended_at.saturating_duration_since(s.born);
                let lost_work = self
                    .store
                    .latest_taken()
                    .map_or(Duration::ZERO, |t| ended_at.saturating_duration_since(t));
                options.note(Milestone::Rotated {
                    attempt,
                    age: ended_at.saturating_duration_since(born),
                    lost_work,
                });
                tracing::info!(attempt, age = ?ended_at.saturating_duration_since(born), lost_work = ?lost_work, "rotated to the successor at a safe point");
                return Ended::Rotated {
                    old: browser,
                    successor,
                    born: s.born,
                    restored,
                };
            }
        };
        ctx.disarm_switch();
        self.successor = succ;
        self.stale = stale;

        let death = match ended {
            Ok(Ok(Ok(value))) => {
                ctx.retire();
                return Ended::Over(self.complete(browser, value).await);
            }
            Ok(Ok(Err(e))) => {
                // The task's error is its own unless its browser or page already failed.
                let failed = browser.death().is_some()
                    || !browser.confirm_alive(options.heartbeat_timeout).await;
                match (failed, browser.death()) {
                    (true, Some(death)) => {
                        tracing::info!(
                            cause = death.cause.as_str(),
                            "the task failed because its browser or page failed"
                        );
                        ctx.retire();
                        // Nothing is left of the entry: no grace to give.
                        drop(entry);
                        return self.failed(browser, death, entry_started, attempt).await;
                    }
                    _ => {
                        ctx.retire();
                        // Released with everything else still up, at once.
                        self.release_later(browser);
                        self.settle_background().await;
                        self.reporter.emit(
                            Outcome::Failed,
                            Some((type_name_of::<E>(), "task_error", e.to_string())),
                        );
                        return Ended::Over(Err(RunError::Task(e)));
                    }
                }
            }
            Ok(Err(panic)) => {
                ctx.retire();
                self.panicked(browser, panic).await
            }
            Err(death) => death,
        };

        ctx.retire();
        tracing::info!(cause = death.cause.as_str(), grace = ?options.grace, "the entry's {} failed; waiting out the grace period", if death.cause.is_page() { "page" } else { "browser" });
        if death.cause.is_page() && browser.browser_death().is_none() {
            // The fresh page opens now, while the entry has its grace.
            let mut replacing = Box::pin(browser.replace_page());
            let (finished, replaced) = grace(&mut entry, &mut replacing, options.grace).await;
            match finished {
                Some(Ok(Ok(value))) => {
                    drop(replacing);
                    return Ended::Over(self.complete(browser, value).await);
                }
                Some(Err(panic)) => {
                    drop(replacing);
                    self.panicked(browser, panic).await
                }
                // An error after the failure is the failure's doing; a timeout drops the entry.
                Some(Ok(Err(_))) | None => {}
            }
            // At most one entry alive: it is dropped before the fresh page is used.
            drop(entry);
            let replaced = match replaced {
                Some(r) => {
                    drop(replacing);
                    r
                }
                None => replacing.await,
            };
            return Ended::Failed(browser, death, (entry_started, attempt), Some(replaced));
        }

        browser.cut();
        // The replacement launches now (or is the successor already up), while the dead entry
        // has its grace; it is entered only after that entry is gone.
        let (spare_started, mut launching, fresh) = match self.take_standby() {
            Some(s) => {
                self.reporter.tally.standby += s.born.elapsed();
                (s.born, s.into_update(self.store.latest()), false)
            }
            None => (Instant::now(), self.launch(), true),
        };
        let (finished, launched) = grace(&mut entry, &mut launching, options.grace).await;
        let spare = match launched {
            Some(r) => futures::future::ready(r).boxed(),
            None => launching,
        };
        match finished {
            Some(Ok(Ok(value))) => {
                tracing::info!("the task finished within the grace period");
                discard(spare, &mut self.reporter).await;
                return Ended::Over(self.complete(browser, value).await);
            }
            Some(Err(panic)) => {
                discard(spare, &mut self.reporter).await;
                self.panicked(browser, panic).await
            }
            Some(Ok(Err(_))) | None => {}
        }
        drop(entry);
        self.spare = Some((spare_started, spare, fresh));
        Ended::Failed(browser, death, (entry_started, attempt), None)
    }

    /// An entry failed with nothing left to wait for (its error was the failure's).
    async fn failed(
        &mut self,
        mut browser: B::Browser,
        death: Death,
        entry_started: Instant,
        attempt: u32,
    ) -> Ended<T, E, B::Browser> {
        let replaced = if death.cause.is_page() && browser.browser_death().is_none() {
            Some(browser.replace_page().await)
        } else {
            browser.cut();
            None
        };
        Ended::Failed(browser, death, (entry_started, attempt), replaced)
    }

    /// Accounts for a failure (lost work, milestones, budgets) and decides what comes next:
    /// `Ok(Some(browser))` to re-enter on its fresh page, `Ok(None)` to launch a new browser,
    /// `Err` when the run gave up (reported, everything released).
    async fn after_failure(
        &mut self,
        mut browser: B::Browser,
        death: Option<Death>,
        entry: Option<(Instant, u32)>,
        replaced: Option<Result<(), Error>>,
    ) -> Result<Option<B::Browser>, RunError<E>> {
        let options = self.options;
        let attempt = entry.map_or(0, |(_, a)| a);
        let Some(death) = death else {
            // The restore failed with the browser alive: a failure of this browser.
            browser.cut();
            self.reporter.release(browser).await;
            self.reporter.tally.failures += 1;
            self.check_budget(None).await?;
            sleep(options.relaunch_backoff).await;
            return Ok(None);
        };
        let lost = self
            .reporter
            .record_loss(death, entry.map(|(started, _)| started));
        self.last_failure = Some(death.at);
        tracing::info!(
            attempt,
            cause = death.cause.as_str(),
            lost_work_ms = lost.as_millis() as u64,
            "entry ended by a failure"
        );

        if death.cause.is_page() && browser.browser_death().is_none() {
            options.note(Milestone::PageFailed {
                attempt,
                cause: death.cause,
                detected_at: death.at.into_std(),
                lost_work: lost,
            });
            self.reporter.tally.page_failures += 1;
            if self.reporter.tally.page_failures > options.max_page_recoveries {
                self.release_later(browser);
                self.settle_background().await;
                return Err(self.give_up(format!(
                    "gave up after {} page failures (max_page_recoveries is {}); the last was: {}",
                    self.reporter.tally.page_failures,
                    options.max_page_recoveries,
                    death.cause.as_str()
                )));
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
                    return Ok(Some(browser));
                }
                Err(e) => {
                    tracing::info!(error = %redact(&e.to_string(), options.diagnostics), "no fresh page in this browser; relaunching");
                }
            }
        } else {
            self.lifetime
                .died_at(death.at.saturating_duration_since(self.born));
            options.note(Milestone::Died {
                attempt,
                cause: death.cause,
                detected_at: death.at.into_std(),
                lost_work: lost,
            });
        }
        // A new browser: this one died, or could not give a fresh page. When a standby takes
        // over, the release goes on in the background (the standby need not wait for a
        // provider's DELETE); before a launch it is awaited, so the launch does not meet the
        // provider's concurrency limit with the dead session still counted.
        browser.cut();
        if matches!(self.spare, Some((_, _, false))) {
            self.release_later(browser);
        } else {
            self.reporter.release(browser).await;
        }
        self.reporter.tally.failures += 1;
        self.check_budget(Some(death)).await?;
        Ok(None)
    }

    /// Starts a launch (a session asked for).
    fn launch(&mut self) -> Launch<'r, B::Browser> {
        self.reporter.tally.sessions += 1;
        let (backend, options) = (self.backend, self.options);
        async move { Ok((backend.launch(options).await?, None)) }.boxed()
    }

    /// Starts a successor: launched, then restored with the newest checkpoint (storage only;
    /// no request reaches a site).
    fn launch_successor(&mut self) -> Successor<'r, B::Browser> {
        self.reporter.tally.sessions += 1;
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
    fn release_later(&mut self, browser: B::Browser) {
        let limit = self.options.release_timeout;
        self.deferred
            .push(tokio::time::timeout(limit, browser.release()).boxed());
    }

    /// Starts the releases deferred so far.
    fn start_deferred(&mut self) {
        self.releasing.extend(self.deferred.drain(..));
    }

    /// A successor no longer wanted: released in the background once its launch is over.
    fn discard_successor(&mut self, successor: Successor<'r, B::Browser>) {
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

    /// The browser to replace a dead one with, if one is up or coming: a ready successor, else
    /// the old standby (the fresh one, still launching, stays for the next entry), else the
    /// successor still launching.
    fn take_standby(&mut self) -> Option<Successor<'r, B::Browser>> {
        // An old standby close to its own death would only bring the next one: past three
        // quarters of the lifetime known, it is let go.
        if let (Some(old), Some(life)) = (&self.stale, self.lifetime.for_standby()) {
            if old.born.elapsed() > life * 3 / 4 {
                let old = self.stale.take().expect("checked");
                self.discard_successor(old);
            }
        }
        match (self.stale.take(), self.successor.take()) {
            (Some(old), Some(new)) if new.is_ready() => {
                self.discard_successor(old);
                Some(new)
            }
            (Some(old), new) => {
                self.successor = new;
                Some(old)
            }
            (None, new) => new,
        }
    }

    /// Before the run returns: the successor discarded, every release (the task's browser's
    /// among them) finished — side by side, so the run does not wait for one after another.
    async fn settle_background(&mut self) {
        for s in [self.successor.take(), self.stale.take()]
            .into_iter()
            .flatten()
        {
            self.discard_successor(s);
        }
        if let Some((_, spare, _)) = self.spare.take() {
            discard(spare, &mut self.reporter).await;
        }
        self.start_deferred();
        while let Some(released) = self.releasing.next().await {
            self.reporter.note_release(released);
        }
    }

    /// Gives up when browser failures exceed `max_relaunches`, releasing any spare.
    async fn check_budget(&mut self, death: Option<Death>) -> Result<(), RunError<E>> {
        if self.reporter.tally.failures <= self.options.max_relaunches {
            return Ok(());
        }
        self.settle_background().await;
        let cause = death.map_or("a failed restore", |d| d.cause.as_str());
        Err(self.give_up(format!(
            "gave up after {} browser failures (max_relaunches is {}); the last was: {}",
            self.reporter.tally.failures, self.options.max_relaunches, cause
        )))
    }

    fn give_up(&mut self, message: String) -> RunError<E> {
        self.reporter
            .outlive_error(Error::new(ErrorKind::GaveUp, message))
    }

    /// The task returned `Ok`: release, report, return.
    async fn complete(&mut self, browser: B::Browser, value: T) -> Result<T, RunError<E>> {
        self.release_later(browser);
        self.settle_background().await;
        self.reporter.emit(Outcome::Completed, None);
        Ok(value)
    }

    /// The task panicked: release, report, and resume unwinding.
    async fn panicked(&mut self, browser: B::Browser, panic: Box<dyn std::any::Any + Send>) -> ! {
        self.release_later(browser);
        self.settle_background().await;
        let message = panic_message(&*panic);
        self.reporter.emit(
            Outcome::Failed,
            Some(("Panic".to_owned(), "panic", message)),
        );
        std::panic::resume_unwind(panic)
    }
}

/// Awaits `fut` while the background releases go on.
async fn background<T>(
    releasing: &mut FuturesUnordered<Release<'_>>,
    reporter: &mut Reporter<'_>,
    fut: impl Future<Output = T>,
) -> T {
    let mut fut = std::pin::pin!(fut);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            Some(released) = releasing.next(), if !releasing.is_empty() => {
                reporter.note_release(released);
            }
        }
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

/// A launch no longer needed (the spare launched during a dead entry's grace): finished (so
/// no session is left half-created), then released.
async fn discard<B: LiveBrowser>(launch: Launch<'_, B>, reporter: &mut Reporter<'_>) {
    if let Ok((browser, _)) = launch.await {
        reporter.release(browser).await;
    }
}

/// The resume (or start) navigation, capped by `navigation_timeout`. Non-web URLs
/// (`about:blank`, an error page) are not navigated to.
async fn navigate<L: LiveBrowser>(browser: &L, url: &str, options: &Options) -> Result<(), Error> {
    if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("file://")) {
        return Ok(());
    }
    match tokio::time::timeout(options.navigation_timeout, browser.navigate(url)).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Cdp,
            format!(
                "navigation did not finish within navigation_timeout ({:?})",
                options.navigation_timeout
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    //! The loop's accounting, pinned with a paused clock and a scripted backend.

    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use super::*;
    use crate::relay::DeathCause;

    /// What one launch does.
    #[derive(Clone, Copy)]
    enum Plan {
        /// The launch fails.
        Fail,
        /// The browser dies this long after launch.
        DieAfter(Duration),
        /// The browser lives forever.
        Live,
        /// The browser lives forever; each of its first `times` pages fails (crashes) `after`
        /// it was opened, and fresh pages open fine.
        PagesFail { after: Duration, times: u32 },
        /// The page fails `after` launch, and no fresh page opens (the browser is gone too).
        PageFailsNoFreshPage { after: Duration },
        /// The page fails `page_after` launch, the browser dies `dies_after` launch.
        PageFailsThenDies {
            page_after: Duration,
            dies_after: Duration,
        },
    }

    struct Fake {
        plans: Mutex<VecDeque<Plan>>,
        launches: Mutex<Vec<Instant>>,
        releases: AtomicU32,
        capture_cost: Duration,
        restore_cost: Duration,
        launch_cost: Duration,
    }

    impl Fake {
        fn new(plans: &[Plan]) -> Arc<Fake> {
            Fake::with_costs(plans, Duration::from_millis(200), Duration::ZERO)
        }

        fn with_costs(plans: &[Plan], capture_cost: Duration, restore_cost: Duration) -> Arc<Fake> {
            Arc::new(Fake {
                plans: Mutex::new(plans.iter().copied().collect()),
                launches: Mutex::default(),
                releases: AtomicU32::new(0),
                capture_cost,
                restore_cost,
                launch_cost: Duration::ZERO,
            })
        }

        /// Launches that take `cost` before they answer.
        fn with_launch_cost(plans: &[Plan], cost: Duration) -> Arc<Fake> {
            let mut fake =
                Fake::with_costs(plans, Duration::from_millis(10), Duration::from_millis(100));
            Arc::get_mut(&mut fake).expect("fresh").launch_cost = cost;
            fake
        }
    }

    struct FakeBrowser {
        dies_at: Option<Instant>,
        /// When the current page fails, if it does.
        page_fails_at: Option<Instant>,
        /// How long after opening each fresh page fails, and for how many more pages.
        page_plan: Option<(Duration, u32)>,
        fresh_pages_open: bool,
        fake: Arc<Fake>,
    }

    /// A death by `cause` at `at`, once `at` has passed.
    fn passed(at: Option<Instant>, cause: DeathCause) -> Option<Death> {
        at.filter(|at| Instant::now() >= *at)
            .map(|at| Death { cause, at })
    }

    impl FakeBrowser {
        fn page_death(&self) -> Option<Death> {
            passed(self.page_fails_at, DeathCause::PageCrashed)
        }
    }

    impl Backend for Arc<Fake> {
        type Page = ();
        type Browser = FakeBrowser;

        async fn launch(&self, _options: &Options) -> Result<FakeBrowser, Error> {
            self.launches.lock().unwrap().push(Instant::now());
            tokio::time::sleep(self.launch_cost).await;
            let plan = self.plans.lock().unwrap().pop_front().unwrap_or(Plan::Live);
            let browser = |dies_at, page: Option<(Duration, u32)>, fresh_pages_open| FakeBrowser {
                dies_at,
                page_fails_at: page.map(|(after, _)| Instant::now() + after),
                page_plan: page.map(|(after, times)| (after, times - 1)),
                fresh_pages_open,
                fake: self.clone(),
            };
            match plan {
                Plan::Fail => Err(Error::new(ErrorKind::Launch, "scripted launch failure")),
                Plan::DieAfter(d) => Ok(browser(Some(Instant::now() + d), None, true)),
                Plan::Live => Ok(browser(None, None, true)),
                Plan::PagesFail { after, times } => Ok(browser(None, Some((after, times)), true)),
                Plan::PageFailsNoFreshPage { after } => Ok(browser(None, Some((after, 1)), false)),
                Plan::PageFailsThenDies {
                    page_after,
                    dies_after,
                } => Ok(browser(
                    Some(Instant::now() + dies_after),
                    Some((page_after, 1)),
                    true,
                )),
            }
        }
    }

    impl LiveBrowser for FakeBrowser {
        type Page = ();

        fn page(&self) {}

        fn capturer(&self) -> Capturer {
            let (dies_at, cost) = (self.dies_at, self.fake.capture_cost);
            let page_fails_at = self.page_fails_at;
            Arc::new(move || {
                Box::pin(async move {
                    let taken = Instant::now();
                    tokio::time::sleep(cost).await;
                    let now = Instant::now();
                    if dies_at.is_some_and(|d| now >= d) || page_fails_at.is_some_and(|d| now >= d)
                    {
                        return Err(Error::new(ErrorKind::Cdp, "browser gone"));
                    }
                    Ok(Checkpoint::at_url("https://example.test/", taken))
                })
            })
        }

        fn died(&self) -> impl Future<Output = Death> + Send {
            let (dies_at, page_fails_at) = (self.dies_at, self.page_fails_at);
            async move {
                let first = match (dies_at, page_fails_at) {
                    (Some(b), Some(p)) if p < b => Some((p, DeathCause::PageCrashed)),
                    (Some(b), _) => Some((b, DeathCause::Closed)),
                    (None, Some(p)) => Some((p, DeathCause::PageCrashed)),
                    (None, None) => None,
                };
                match first {
                    Some((at, cause)) => {
                        sleep_until(at).await;
                        Death { cause, at }
                    }
                    None => std::future::pending().await,
                }
            }
        }

        fn death(&self) -> Option<Death> {
            self.browser_death().or_else(|| self.page_death())
        }

        fn browser_death(&self) -> Option<Death> {
            passed(self.dies_at, DeathCause::Closed)
        }

        async fn confirm_alive(&self, _timeout: Duration) -> bool {
            self.death().is_none()
        }

        fn cut(&mut self) {}

        async fn replace_page(&mut self) -> Result<(), Error> {
            if !self.fresh_pages_open || self.browser_death().is_some() {
                return Err(Error::new(ErrorKind::Cdp, "no fresh page"));
            }
            self.page_fails_at = match self.page_plan {
                Some((after, n)) if n > 0 => {
                    self.page_plan = Some((after, n - 1));
                    Some(Instant::now() + after)
                }
                _ => None,
            };
            Ok(())
        }

        async fn restore(
            &self,
            _checkpoint: &Checkpoint,
            _prior: Option<&Checkpoint>,
        ) -> Result<u64, Error> {
            tokio::time::sleep(self.fake.restore_cost).await;
            Ok(0)
        }

        async fn navigate(&self, _url: &str) -> Result<(), Error> {
            Ok(())
        }

        async fn release(self) -> Result<(), Error> {
            self.fake.releases.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn options(event: &Arc<Mutex<Option<WideEvent>>>) -> Options {
        let slot = event.clone();
        Options::new()
            .checkpoint_every(Duration::from_secs(10))
            .on_event(move |e| *slot.lock().unwrap() = Some(e.clone()))
    }

    /// Attempt 1 works until it is dropped; later attempts finish at once.
    async fn work_forever_then_finish(attempt: u32) -> Result<u32, String> {
        if attempt == 1 {
            std::future::pending::<()>().await;
        }
        Ok(attempt)
    }

    /// Runs `task` on `fake` with the test options adjusted by `tweak`; returns the run's
    /// result and its event.
    async fn run_fake<T, Fut>(
        fake: &Arc<Fake>,
        tweak: impl FnOnce(Options) -> Options,
        task: impl FnMut((), Ctx) -> Fut,
    ) -> (Result<T, RunError<String>>, WideEvent)
    where
        Fut: Future<Output = Result<T, String>>,
    {
        let event = Arc::default();
        let result = run(fake, task, &tweak(options(&event))).await;
        let e = event.lock().unwrap().clone().unwrap();
        (result, e)
    }

    /// The test options adjusted to also collect, into `into`, what `pick` takes from each
    /// milestone.
    fn collecting<T: Send + 'static>(
        into: &Arc<Mutex<Vec<T>>>,
        pick: impl Fn(&Milestone) -> Option<T> + Send + Sync + 'static,
    ) -> impl FnOnce(Options) -> Options {
        let into = into.clone();
        move |o| o.on_milestone(move |m| into.lock().unwrap().extend(pick(m)))
    }

    /// Runs `task` in one browser that lives, with the test options; returns the run's result
    /// and its event.
    async fn run_live<T, Fut>(
        task: impl FnMut((), Ctx) -> Fut,
    ) -> (Result<T, RunError<String>>, WideEvent)
    where
        Fut: Future<Output = Result<T, String>>,
    {
        run_fake(&Fake::new(&[Plan::Live]), |o| o, task).await
    }

    /// Runs a task whose first entry works until it is dropped and whose second finishes, with
    /// the test options adjusted by `tweak`; returns the run's event.
    async fn second_entry_finishes(
        fake: &Arc<Fake>,
        tweak: impl FnOnce(Options) -> Options,
    ) -> WideEvent {
        let (v, e) = run_fake(fake, tweak, |(), ctx| {
            work_forever_then_finish(ctx.attempt())
        })
        .await;
        assert_eq!(v.unwrap(), 2);
        e
    }

    /// Runs a task that works until it is dropped, with the test options adjusted by `tweak`,
    /// expecting the run to give up; returns the error and the run's event.
    async fn gives_up(
        fake: &Arc<Fake>,
        tweak: impl FnOnce(Options) -> Options,
    ) -> (RunError<String>, WideEvent) {
        let (result, e) = run_fake(fake, tweak, |(), _ctx| {
            std::future::pending::<Result<(), String>>()
        })
        .await;
        let err = result.unwrap_err();
        assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
        assert_eq!(e.outcome, Outcome::GaveUp);
        (err, e)
    }

    #[tokio::test(start_paused = true)]
    async fn lost_work_counts_from_the_newest_checkpoint_to_detection() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(25)), Plan::Live]);
        let e = second_entry_finishes(&fake, |o| o).await;
        // Checkpoints taken at 10 s and 20 s; death detected at 25 s; grace not counted.
        assert_eq!(e.lost_work_ms, 5_000);
        assert_eq!(e.max_lost_work_ms, 5_000);
        assert_eq!(e.checkpoint_count, 2);
        assert_eq!((e.attempts, e.relaunches), (2, 1));
        assert_eq!(
            e.total_ms, 25_250,
            "the relaunch follows the 250 ms grace at once"
        );
        assert_eq!(fake.releases.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_work_starts_at_the_entry_when_the_checkpoint_is_older() {
        let fake = Fake::new(&[
            Plan::DieAfter(Duration::from_secs(15)),
            Plan::DieAfter(Duration::from_secs(3)),
            Plan::Live,
        ]);
        let (v, e) = run_fake(
            &fake,
            |o| o,
            |(), ctx| async move {
                if ctx.attempt() < 3 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 3);
        // First death: 15 s − checkpoint at 10 s = 5 s. The second browser launched at 15 s
        // (during the grace) and died at 18 s; its entry began at 15.25 s, later than the
        // 10 s checkpoint, so it lost 2.75 s.
        assert_eq!(e.lost_work_ms, 7_750);
        assert_eq!(e.max_lost_work_ms, 5_000);
        assert_eq!((e.attempts, e.relaunches), (3, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_follows_failed_launches_only() {
        let fake = Fake::new(&[
            Plan::Fail,
            Plan::Fail,
            Plan::DieAfter(Duration::from_secs(1)),
            Plan::Live,
        ]);
        let started = Instant::now();
        let (result, e) = run_fake(
            &fake,
            |o| o,
            |(), ctx| work_forever_then_finish(ctx.attempt()),
        )
        .await;
        result.unwrap();
        let launches: Vec<u128> = fake
            .launches
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.duration_since(started).as_millis())
            .collect();
        // Two failures, 2 s apart each; the death at 5 s relaunches at once (the replacement
        // launches during the grace; it is entered after it).
        assert_eq!(launches, vec![0, 2_000, 4_000, 5_000]);
        assert_eq!((e.attempts, e.relaunches, e.lost_work_ms), (2, 3, 1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn more_deaths_than_max_relaunches_give_up() {
        let die = Plan::DieAfter(Duration::from_secs(1));
        let fake = Fake::new(&[die, die, die, die]);
        let (_, e) = gives_up(&fake, |o| o.max_relaunches(2)).await;
        assert_eq!((e.attempts, e.relaunches), (3, 2));
        // Three used, plus the replacement launched during the last grace and not needed.
        assert_eq!(
            fake.releases.load(Ordering::SeqCst),
            4,
            "every browser released"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn launch_failures_count_toward_the_budget() {
        let fake = Fake::new(&[Plan::Fail, Plan::Fail]);
        let (result, e) = run_fake(
            &fake,
            |o| o.max_relaunches(1),
            |(), _ctx| async { Ok::<(), String>(()) },
        )
        .await;
        let err = result.unwrap_err();
        assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
        assert_eq!((e.attempts, e.relaunches), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_that_finishes_within_the_grace_completes() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1))]);
        let (v, e) = run_fake(
            &fake,
            |o| o,
            |(), _ctx| async {
                tokio::time::sleep(Duration::from_millis(1_100)).await;
                Ok::<_, String>("done")
            },
        )
        .await;
        assert_eq!(v.unwrap(), "done");
        assert_eq!(
            (e.outcome, e.attempts, e.relaunches, e.lost_work_ms),
            (Outcome::Completed, 1, 0, 0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_after_the_death_is_a_death_not_a_failure() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1)), Plan::Live]);
        let (v, _) = run_fake(
            &fake,
            |o| o,
            |(), ctx| async move {
                if ctx.attempt() == 1 {
                    tokio::time::sleep(Duration::from_millis(1_100)).await;
                    return Err("page call failed: connection closed".to_owned());
                }
                Ok(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_error_with_a_live_browser_is_returned_unchanged() {
        let calls = AtomicU32::new(0);
        let (result, e) = run_live(|(), _ctx| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(vec![1, 2, 3]).map_err(|v| format!("{v:?}")) }
        })
        .await;
        let err = result.unwrap_err();
        assert_eq!(err.into_task().unwrap(), "[1, 2, 3]");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(e.error_code.as_deref(), Some("task_error"));
    }

    #[tokio::test(start_paused = true)]
    async fn held_checkpoints_are_skipped_until_the_hold_ends() {
        let (result, e) = run_live(|(), ctx| async move {
            {
                let _hold = ctx.hold_checkpoints();
                tokio::time::sleep(Duration::from_secs(25)).await; // 2 periodic slots held
            }
            tokio::time::sleep(Duration::from_secs(11)).await; // one more runs
            Ok::<_, String>(())
        })
        .await;
        result.unwrap();
        assert_eq!(
            e.checkpoint_count, 1,
            "only the checkpoint after the hold ran"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn checkpoints_after_the_death_are_refused() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1)), Plan::Live]);
        let answers = Mutex::new(Vec::new());
        let (result, _) = run_fake(
            &fake,
            |o| o,
            |(), ctx| {
                let answers = &answers;
                async move {
                    if ctx.attempt() == 1 {
                        tokio::time::sleep(Duration::from_millis(1_050)).await;
                        // Dead browser, retired ctx: no checkpoint.
                        let answer = ctx.checkpoint().await;
                        answers.lock().unwrap().push(answer);
                        std::future::pending::<()>().await;
                    }
                    let answer = ctx.checkpoint().await;
                    answers.lock().unwrap().push(answer);
                    Ok::<_, String>(())
                }
            },
        )
        .await;
        result.unwrap();
        assert_eq!(*answers.lock().unwrap(), vec![false, true]);
    }

    /// One page failure `after` launch, in a task that works until it is dropped: the
    /// event, whether each entry was resumed, and the fake.
    async fn one_page_failure(after: Duration) -> (WideEvent, Vec<bool>, Arc<Fake>) {
        let fake = Fake::new(&[Plan::PagesFail { after, times: 1 }]);
        let resumed = Mutex::new(Vec::new());
        let (v, e) = run_fake(
            &fake,
            |o| o,
            |(), ctx| {
                resumed.lock().unwrap().push(ctx.resumed_from().is_some());
                work_forever_then_finish(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        (e, resumed.into_inner().unwrap(), fake)
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_failure_is_recovered_in_the_same_browser() {
        let (e, resumed, fake) = one_page_failure(Duration::from_secs(25)).await;
        assert_eq!(
            (e.attempts, e.relaunches, e.page_recoveries),
            (2, 0, 1),
            "re-entered on a fresh page, no relaunch"
        );
        // Checkpoints at 10 s and 20 s; the page failed at 25 s.
        assert_eq!((e.lost_work_ms, e.max_lost_work_ms), (5_000, 5_000));
        assert_eq!(fake.launches.lock().unwrap().len(), 1);
        assert_eq!(fake.releases.load(Ordering::SeqCst), 1);
        assert_eq!(resumed, vec![false, true]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_failure_before_any_checkpoint_re_enters_without_resumed_from() {
        let (e, resumed, _) = one_page_failure(Duration::from_secs(3)).await;
        assert_eq!(resumed, vec![false, false]);
        assert_eq!((e.page_recoveries, e.lost_work_ms), (1, 3_000));
    }

    #[tokio::test(start_paused = true)]
    async fn pages_that_fail_before_and_during_the_restore_are_replaced_again() {
        // Every page fails 100 ms after it opens, three times; a capture takes 50 ms and a
        // restore 300 ms. Page 1 fails in the entry at 100 ms (after a checkpoint at 0–50 ms);
        // page 2 fails during the grace, before its restore; page 3 during its restore; page 4
        // lives, and the task is re-entered on it.
        let fake = Fake::with_costs(
            &[Plan::PagesFail {
                after: Duration::from_millis(100),
                times: 3,
            }],
            Duration::from_millis(50),
            Duration::from_millis(300),
        );
        let failed_in = Arc::default();
        let (v, e) = run_fake(
            &fake,
            collecting(&failed_in, |m| match m {
                Milestone::PageFailed { attempt, .. } => Some(*attempt),
                _ => None,
            }),
            |(), ctx| async move {
                if ctx.attempt() == 1 {
                    assert!(ctx.checkpoint().await);
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(ctx.resumed_from().is_some())
            },
        )
        .await;
        assert!(v.unwrap(), "the last entry was resumed from the checkpoint");
        assert_eq!(*failed_in.lock().unwrap(), vec![1, 0, 0]);
        assert_eq!((e.attempts, e.page_recoveries, e.relaunches), (2, 3, 0));
        assert_eq!(e.lost_work_ms, 100, "only the entry's failure lost work");
        assert_eq!(fake.launches.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn page_failures_beyond_max_page_recoveries_give_up() {
        let fake = Fake::new(&[Plan::PagesFail {
            after: Duration::from_secs(1),
            times: 10,
        }]);
        let (err, e) = gives_up(&fake, |o| o.max_page_recoveries(2)).await;
        assert!(err.to_string().contains("page failures"), "{err}");
        assert_eq!((e.attempts, e.page_recoveries, e.relaunches), (3, 2, 0));
        assert_eq!(
            fake.releases.load(Ordering::SeqCst),
            1,
            "the browser was released"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_fresh_page_falls_back_to_a_relaunch() {
        let fake = Fake::new(&[
            Plan::PageFailsNoFreshPage {
                after: Duration::from_secs(15),
            },
            Plan::Live,
        ]);
        let e = second_entry_finishes(&fake, |o| o).await;
        assert_eq!((e.attempts, e.page_recoveries, e.relaunches), (2, 0, 1));
        assert_eq!(e.lost_work_ms, 5_000);
        assert_eq!(fake.releases.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_failure_racing_a_browser_death_relaunches() {
        // The page fails at 15 s and the browser dies 100 ms later, during the grace: the
        // fresh page opened in the dead browser is of no use, the run relaunches.
        let fake = Fake::new(&[
            Plan::PageFailsThenDies {
                page_after: Duration::from_millis(15_000),
                dies_after: Duration::from_millis(15_100),
            },
            Plan::Live,
        ]);
        let causes = Arc::default();
        let (v, e) = run_fake(
            &fake,
            collecting(&causes, |m| match m {
                Milestone::Died { cause, .. } => Some(*cause),
                _ => None,
            }),
            |(), ctx| work_forever_then_finish(ctx.attempt()),
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!((e.attempts, e.relaunches, e.page_recoveries), (2, 1, 0));
        assert_eq!(e.lost_work_ms, 5_000, "counted to the page failure");
        assert_eq!(
            *causes.lock().unwrap(),
            vec![DeathCause::PageCrashed],
            "one death reported: the page failure the run acted on"
        );
        assert_eq!(fake.releases.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_during_a_capture_share_one_follow_up_capture() {
        // A capture takes 200 ms.
        let (answers, e) = run_live(|(), ctx| async move {
            let started = Instant::now();
            let call = |delay: u64| {
                let ctx = ctx.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    let wrote = ctx.checkpoint().await;
                    (delay, wrote, started.elapsed().as_millis())
                }
            };
            // The first call starts a capture at 0 ms (0–200); the calls at 50 and
            // 150 ms arrive while it runs and share one follow-up (200–400); the call
            // at 450 ms finds nothing running and captures on its own (450–650).
            let got = futures::join!(call(0), call(50), call(150), call(450));
            Ok::<_, String>(vec![got.0, got.1, got.2, got.3])
        })
        .await;
        assert_eq!(
            answers.unwrap(),
            vec![
                (0, true, 200),
                (50, true, 400),
                (150, true, 400),
                (450, true, 650)
            ]
        );
        assert_eq!(e.checkpoint_count, 3, "three captures for four calls");
    }

    #[tokio::test(start_paused = true)]
    async fn a_periodic_capture_in_flight_does_not_answer_a_later_call() {
        let (took, e) = run_live(|(), ctx| async move {
            // The periodic capture starts at 10 s; this call arrives at 10.1 s.
            tokio::time::sleep(Duration::from_millis(10_100)).await;
            let started = Instant::now();
            assert!(ctx.checkpoint().await);
            Ok::<_, String>(started.elapsed().as_millis())
        })
        .await;
        // It waited for the periodic one (until 10.2 s), then had its own (10.2–10.4 s).
        assert_eq!(took.unwrap(), 300);
        assert_eq!(e.checkpoint_count, 2);
    }

    /// A rotation test's result, its event, the fake, and each rotation's (attempt, age, lost
    /// work).
    type Rotated = (
        Result<u32, RunError<String>>,
        WideEvent,
        Arc<Fake>,
        Vec<(u32, Duration, Duration)>,
    );

    /// Rotation tests: a browser with a declared 20 s lifetime, checkpoints every second,
    /// captures of 10 ms. Answers the result, the event, the fake, and each rotation's
    /// (attempt, age, lost work).
    async fn rotating<Fut>(
        plans: &[Plan],
        tweak: impl FnOnce(Options) -> Options,
        task: impl FnMut((), Ctx) -> Fut,
    ) -> Rotated
    where
        Fut: Future<Output = Result<u32, String>>,
    {
        rotating_on(Fake::with_launch_cost(plans, Duration::ZERO), tweak, task).await
    }

    async fn rotating_on<Fut>(
        fake: Arc<Fake>,
        tweak: impl FnOnce(Options) -> Options,
        task: impl FnMut((), Ctx) -> Fut,
    ) -> Rotated
    where
        Fut: Future<Output = Result<u32, String>>,
    {
        let rotated = Arc::default();
        let pick = collecting(&rotated, |m| match m {
            Milestone::Rotated {
                attempt,
                age,
                lost_work,
            } => Some((*attempt, *age, *lost_work)),
            _ => None,
        });
        let (result, e) = run_fake(
            &fake,
            |o| {
                tweak(pick(
                    o.checkpoint_every(Duration::from_secs(1))
                        .rotation(crate::Rotation::Expected(Duration::from_secs(20))),
                ))
            },
            task,
        )
        .await;
        let rotated = rotated.lock().unwrap().clone();
        (result, e, fake, rotated)
    }

    /// The first entry works until it is dropped; later ones finish at once.
    async fn first_entry_works_on((): (), ctx: Ctx) -> Result<u32, String> {
        work_forever_then_finish(ctx.attempt()).await
    }

    /// A browser that dies `ms` after its launch.
    fn dies(ms: u64) -> Plan {
        Plan::DieAfter(Duration::from_millis(ms))
    }

    /// Entries before attempt `n` work until they are dropped; attempt `n` finishes.
    fn until_attempt(n: u32) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
        until_attempt_after(n, Duration::ZERO)
    }

    /// Entries before attempt `n` work until they are dropped; attempt `n` (or any later)
    /// works for `work`, then finishes.
    fn until_attempt_after(
        n: u32,
        work: Duration,
    ) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
        move |(), ctx| {
            async move {
                if ctx.attempt() < n {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(work).await;
                Ok(ctx.attempt())
            }
            .boxed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotation_switches_at_a_checkpoint_before_the_predicted_death() {
        let (v, e, fake, rotated) =
            rotating(&[dies(20_000), Plan::Live], |o| o, first_entry_works_on).await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!((e.rotations, e.relaunches, e.attempts), (1, 0, 2));
        assert_eq!(e.lost_work_ms, 0, "a rotation is not a death");
        assert_eq!(e.sessions, 2);
        // Leave by 18 s (20 s − 10 %); launch a lead (1 s) + an interval (1 s) before: at
        // 16 s; ready after its 100 ms restore; switch from an interval before leaving (17 s):
        // the checkpoint started then is the safe point.
        let (attempt, age, lost) = rotated[0];
        assert_eq!(attempt, 1);
        assert_eq!(age, Duration::from_millis(17_010));
        assert_eq!(lost, Duration::from_millis(10), "the capture's own time");
        assert_eq!(fake.launches.lock().unwrap().len(), 2);
        assert_eq!(fake.releases.load(Ordering::SeqCst), 2, "both released");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_defers_the_rotation_to_the_checkpoint_that_ends_it() {
        let (v, e, _fake, rotated) = rotating(
            &[dies(20_000), Plan::Live],
            |o| o,
            |(), ctx| async move {
                if ctx.attempt() > 1 {
                    return Ok(ctx.attempt());
                }
                tokio::time::sleep(Duration::from_secs(15)).await;
                {
                    let _hold = ctx.hold_checkpoints();
                    // A non-repeatable step, 15 s to 18.5 s: no rotation may split it.
                    tokio::time::sleep(Duration::from_millis(3_500)).await;
                }
                ctx.checkpoint().await;
                unreachable!("the entry ends at the checkpoint after the hold");
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!((e.rotations, e.relaunches), (1, 0));
        assert_eq!(rotated[0].1, Duration::from_millis(18_510));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_safe_point_the_death_takes_the_warm_successor() {
        let entered = Arc::default();
        let pick = collecting(&entered, |m| match m {
            Milestone::Entered { replaced_in, .. } => Some(*replaced_in),
            _ => None,
        });
        let (v, e, fake, rotated) =
            rotating(&[dies(20_000), Plan::Live], pick, |(), ctx| async move {
                if ctx.attempt() > 1 {
                    return Ok(ctx.attempt());
                }
                ctx.checkpoint().await;
                let _hold = ctx.hold_checkpoints();
                std::future::pending().await
            })
            .await;
        assert_eq!(v.unwrap(), 2);
        assert!(rotated.is_empty());
        assert_eq!((e.rotations, e.relaunches), (0, 1));
        assert_eq!(e.sessions, 2, "no launch after the death");
        assert_eq!(fake.launches.lock().unwrap().len(), 2);
        // Grace (250 ms) and the restore (100 ms), no launch.
        assert_eq!(entered.lock().unwrap()[1], Some(Duration::from_millis(350)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_successor_that_dies_before_the_switch_is_replaced() {
        let (v, e, fake, rotated) = rotating(
            &[dies(20_000), dies(105), Plan::Live],
            |o| o,
            first_entry_works_on,
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!((e.rotations, e.relaunches, e.sessions), (1, 0, 3));
        // The first successor died at 16.105 s, after its restore; the second launched at
        // once, was restored by 16.205 s, and waited for the switch at 17 s.
        assert_eq!(rotated[0].1, Duration::from_millis(17_010));
        assert_eq!(fake.releases.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_successor_that_dies_during_the_switch_is_a_death_after_a_rotation() {
        let (v, e, fake, rotated) = rotating(
            &[
                dies(20_000),
                // Restored by 16.1 s; switched to at 17.01 s; dies during the final restore.
                dies(1_050),
                Plan::Live,
            ],
            |o| o,
            |(), ctx| async move {
                if ctx.attempt() == 2 {
                    assert!(ctx.resumed_from().is_some());
                    return Ok(2);
                }
                std::future::pending().await
            },
        )
        .await;
        // The successor died before it was entered: attempt 2 runs on a relaunched browser.
        assert_eq!(v.unwrap(), 2);
        assert_eq!(rotated.len(), 1);
        assert_eq!((e.rotations, e.relaunches, e.sessions), (1, 1, 3));
        assert_eq!(e.lost_work_ms, 0, "the death came before the entry");
        assert_eq!(fake.releases.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_replaces_an_unplanned_death_without_a_launch() {
        let entered = Arc::default();
        let pick = collecting(&entered, |m| match m {
            Milestone::Entered { replaced_in, .. } => Some(*replaced_in),
            _ => None,
        });
        let (v, e, fake, rotated) = rotating(
            &[dies(5_000), Plan::Live],
            |o| pick(o.standby(true)),
            // Long enough for the next standby to be launched (after the entry's first
            // checkpoint, 1 s in).
            until_attempt_after(2, Duration::from_secs(2)),
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert!(rotated.is_empty(), "an early death, not a rotation");
        assert_eq!(
            (e.relaunches, e.sessions),
            (1, 3),
            "a new standby after the death"
        );
        // Grace + the update of the standby's restore, no launch.
        assert_eq!(entered.lock().unwrap()[1], Some(Duration::from_millis(350)));
        // Standby up from 1 s (the first checkpoint) to 5 s, and the next one from 6.35 s
        // to the end.
        assert!(e.standby_ms >= 4_000, "{}", e.standby_ms);
        assert_eq!(fake.releases.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_learned_lifetime_rotates_after_two_deaths_of_old_age() {
        let (v, e, _fake, rotated) = rotating(
            &[dies(20_000), dies(20_000), dies(20_000), Plan::Live],
            |o| o.rotation(crate::Rotation::Learned),
            until_attempt(4),
        )
        .await;
        assert_eq!(v.unwrap(), 4);
        assert_eq!((e.relaunches, e.rotations), (2, 1));
        assert_eq!(rotated[0].0, 3, "the third browser is left before it dies");
        assert!(rotated[0].1 < Duration::from_secs(18));
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_standby_serves_a_death_while_its_replacement_launches() {
        let entered = Arc::default();
        let pick = collecting(&entered, |m| match m {
            Milestone::Entered { replaced_in, .. } => Some(*replaced_in),
            _ => None,
        });
        // No rotation; launches take 1 s, restores 100 ms; checkpoints every second, and a
        // standby is launched at each entry's first. The first two browsers die at 11 s and
        // 13 s of age (0–11 s, then its standby, launched at 2 s, to 15 s): two typical
        // deaths, the lifetime for a standby is 11 s. The standby then up (launched at
        // 12.35 s) takes over at 15 s; the next is launched at 16.35 s and renewed at 21.85 s
        // (half the lifetime from its launch), the fresh one up at 22.95 s. The third browser
        // dies at 22.4 s, in between: the old standby serves. Without it the fresh one would
        // be waited for.
        let fake = Fake::with_launch_cost(
            &[
                dies(10_000),
                dies(12_000),
                dies(9_050),
                Plan::Live,
                Plan::Live,
            ],
            Duration::from_secs(1),
        );
        let (v, e, fake, rotated) = rotating_on(
            fake,
            |o| pick(o.rotation(crate::Rotation::Off).standby(true)),
            until_attempt(4),
        )
        .await;
        assert_eq!(v.unwrap(), 4);
        assert!(rotated.is_empty());
        assert_eq!(e.relaunches, 3);
        // Grace (250 ms) during which the standby is brought up to date (100 ms), then its
        // restore is checked (100 ms): no launch waited for, each time.
        let entered = entered.lock().unwrap().clone();
        assert_eq!(entered[1..], [Some(Duration::from_millis(350)); 3]);
        assert_eq!(
            e.sessions, 5,
            "three primaries, the old standby, the fresh one"
        );
        assert_eq!(fake.releases.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn with_rotations_a_standby_younger_than_its_browser_is_not_renewed() {
        // The standby, launched at the first entry, outlives the browser's rotation at 16 s:
        // it is not renewed at half the lifetime. At the rotation it is too old to be the
        // successor (16 s > a quarter of the lifetime); a fresh one is, and another standby
        // follows the switch.
        let (v, e, fake, rotated) = rotating(
            &[dies(20_000), Plan::Live, Plan::Live, Plan::Live],
            |o| o.standby(true),
            until_attempt_after(2, Duration::from_secs(2)),
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!(rotated.len(), 1);
        assert_eq!(e.relaunches, 0);
        assert_eq!(
            e.sessions, 4,
            "the browser, its standby, the successor, the next standby"
        );
        assert_eq!(fake.releases.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_too_old_by_the_switch_is_replaced_when_the_successor_is_due() {
        // Launches take 3 s (lead 6 s). The first browser dies early, at 10 s; its standby
        // (launched at 4.1 s, so this browser is born then) takes over, and a new standby is
        // launched at ~11.4 s. The successor is due at 15.1 s (age 11 s) and the switch at
        // 21.1 s (age 17 s); the browser dies at 24.1 s. At 15.1 s the standby is 3.7 s old,
        // but at the switch it would be 9.7 s old (over a quarter of the lifetime): it is
        // replaced at 15.1 s, and the fresh one is ready long before the switch. Judged at the
        // switch instead, the fresh one would only be launched at 21.1 s and meet the death.
        let fake = Fake::with_launch_cost(
            &[
                dies(7_000),
                dies(17_000),
                Plan::Live,
                Plan::Live,
                Plan::Live,
            ],
            Duration::from_secs(3),
        );
        let (v, e, _fake, rotated) = rotating_on(
            fake,
            |o| o.standby(true),
            until_attempt_after(3, Duration::from_secs(2)),
        )
        .await;
        assert_eq!(v.unwrap(), 3);
        assert_eq!((e.relaunches, e.rotations), (1, 1), "{}", e.to_json());
        assert_eq!(rotated[0].0, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_that_takes_over_does_not_count_its_age_as_a_launch() {
        // The standby is up from 0 s; the browser dies at 9 s and the standby (9 s old) takes
        // over. Its age is not a launch time: the lead stays 1 s, so the new browser's
        // successor is launched once, at 15 s of age (18 s − 2 s − 1 s), and switched to at
        // 17 s, not again and again.
        let plans = [dies(9_000), Plan::Live];
        let run = rotating(
            &plans,
            |o| o.standby(true),
            until_attempt_after(2, Duration::from_secs(12)),
        );
        let (v, e, _fake, rotated) = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the run ends");
        assert_eq!(v.unwrap(), 3);
        assert_eq!((e.relaunches, e.rotations), (1, 1));
        assert_eq!(rotated[0].0, 2);
        assert!(
            rotated[0].1 >= Duration::from_secs(15),
            "{:?}",
            rotated[0].1
        );
    }

    /// A task that counts steps (one a second), saving its count with each checkpoint; records
    /// what each entry resumed with, and the last count each entry saved; entry `last` returns
    /// its count.
    fn counting(
        seen: &Arc<Mutex<Vec<u32>>>,
        saved: &Arc<Mutex<Vec<u32>>>,
        last: u32,
    ) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
        let (seen, saved) = (seen.clone(), saved.clone());
        move |(), ctx| {
            let (seen, saved) = (seen.clone(), saved.clone());
            async move {
                let mut done: u32 = ctx.progress().map_err(|e| e.to_string())?.unwrap_or(0);
                seen.lock().unwrap().push(done);
                saved.lock().unwrap().push(done);
                if ctx.attempt() == last {
                    return Ok(done);
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    done += 1;
                    if ctx.checkpoint_with(&done).await {
                        *saved.lock().unwrap().last_mut().expect("pushed") = done;
                    }
                }
            }
            .boxed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_comes_back_with_the_checkpoint_it_was_saved_with() {
        let fake = Fake::new(&[dies(5_500), dies(5_500), Plan::Live]);
        let (seen, saved) = (Arc::default(), Arc::default());
        let (v, e) = run_fake(&fake, |o| o, counting(&seen, &saved, 3)).await;
        assert_eq!(e.relaunches, 2);
        let (seen, saved) = (seen.lock().unwrap().clone(), saved.lock().unwrap().clone());
        // Each entry resumed with the last count its predecessor saved, and steps were done
        // in each: nothing counted twice, nothing lost.
        assert_eq!(seen[0], 0);
        assert_eq!(seen[1..], saved[..2], "seen {seen:?}, saved {saved:?}");
        assert!(seen[1] >= 3 && seen[2] >= seen[1] + 3, "{seen:?}");
        assert_eq!(v.unwrap(), seen[2]);
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_checkpoints_carry_the_newest_progress() {
        // Progress saved once at 1 s; the periodic checkpoints at 11 s and 21 s carry it; the
        // death at 25 s resumes from the one at 21 s.
        let fake = Fake::new(&[dies(25_000), Plan::Live]);
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let record = seen.clone();
        let (v, e) = run_fake(
            &fake,
            |o| o,
            move |(), ctx| {
                let record = record.clone();
                async move {
                    record
                        .lock()
                        .unwrap()
                        .push(ctx.progress::<String>().map_err(|e| e.to_string())?);
                    if ctx.attempt() == 2 {
                        return Ok(ctx.attempt());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    assert!(ctx.checkpoint_with("signed in").await);
                    std::future::pending().await
                }
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        assert_eq!(e.checkpoint_count, 3);
        assert_eq!(*seen.lock().unwrap(), [None, Some("signed in".to_owned())]);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_of_another_type_is_an_error_that_names_the_type_not_the_value() {
        let fake = Fake::new(&[dies(5_000), Plan::Live]);
        let (v, _e) = run_fake(
            &fake,
            |o| o,
            |(), ctx| async move {
                if ctx.attempt() == 1 {
                    ctx.checkpoint_with(&"a secret-ish string").await;
                    std::future::pending::<()>().await;
                }
                let err = ctx.progress::<u32>().expect_err("a string is not a u32");
                assert_eq!(err.kind(), crate::ErrorKind::Progress);
                let message = err.to_string();
                assert!(message.contains("u32"), "{message}");
                assert!(!message.contains("secret"), "{message}");
                Ok::<_, String>(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
    }

    /// A checkpoint store in memory: every save, in order; refuses saves when `fail` is set.
    #[derive(Default)]
    struct Saves {
        saved: Mutex<Vec<(String, u32, Vec<u8>)>>,
        fail: AtomicBool,
    }

    impl crate::CheckpointStore for Saves {
        fn save<'a>(
            &'a self,
            run_id: &'a str,
            attempt: u32,
            sealed: Vec<u8>,
        ) -> BoxFuture<'a, Result<(), Error>> {
            Box::pin(async move {
                if self.fail.load(Ordering::SeqCst) {
                    return Err(Error::new(ErrorKind::Io, "the database is down"));
                }
                self.saved
                    .lock()
                    .unwrap()
                    .push((run_id.to_owned(), attempt, sealed));
                Ok(())
            })
        }
    }

    fn sealer() -> crate::Sealer {
        crate::Sealer::new(crate::SealKey::from_bytes([7; 32]))
    }

    #[tokio::test(start_paused = true)]
    async fn a_durable_run_saves_each_checkpoint_sealed_for_its_run() {
        let saves = Arc::new(Saves::default());
        let durable = crate::Durable::new("run-1", sealer(), saves.clone());
        let (v, e) = run_fake(
            &Fake::new(&[Plan::Live]),
            |o| o.durable(durable),
            |(), ctx| async move {
                assert!(ctx.checkpoint_with(&3u32).await);
                Ok::<_, String>(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 1);
        assert_eq!(
            e.run_id, "run-1",
            "the wide event carries the durable run's id"
        );
        let saved = saves.saved.lock().unwrap();
        assert_eq!(saved.len(), 1);
        let (run, attempt, sealed) = &saved[0];
        assert_eq!((run.as_str(), *attempt), ("run-1", 1));
        let plain = sealer().open("run-1", sealed).unwrap();
        let cp = Checkpoint::from_bytes(&plain, Instant::now()).unwrap();
        assert_eq!(cp.progress.as_deref().map(|p| p.as_str()), Some("3"));
        assert!(sealer().open("run-2", sealed).is_err(), "bound to its run");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_taken_over_resumes_from_the_sealed_checkpoint() {
        // The first process: two entries (one death), the last checkpoint saved with progress 5.
        let saves = Arc::new(Saves::default());
        let (v, _) = run_fake(
            &Fake::new(&[dies(5_000), Plan::Live]),
            |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone())),
            |(), ctx| async move {
                assert!(ctx.checkpoint_with(&(ctx.attempt() + 3)).await);
                if ctx.attempt() == 1 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(ctx.attempt())
            },
        )
        .await;
        assert_eq!(v.unwrap(), 2);
        let (_, attempt, sealed) = saves.saved.lock().unwrap().last().cloned().unwrap();
        assert_eq!(attempt, 2);
        // Another process takes the run over from what the store kept.
        let fake = Fake::new(&[Plan::Live]);
        let (v, e) = run_fake(
            &fake,
            |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone()).resume(sealed, 2)),
            |(), ctx| async move {
                let progress: Option<u32> = ctx.progress().map_err(|e| e.to_string())?;
                Ok::<_, String>((ctx.attempt(), ctx.resumed_from().is_some(), progress))
            },
        )
        .await;
        assert_eq!(v.unwrap(), (3, true, Some(5)));
        assert_eq!(e.attempts, 3, "attempts continue");
        assert_eq!(fake.launches.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_that_does_not_open_ends_the_run_before_any_launch() {
        let sealed = sealer().seal("run-1", b"{}");
        let wrong_key = crate::Sealer::new(crate::SealKey::from_bytes([8; 32]));
        for (durable, says) in [
            (
                crate::Durable::new("run-1", wrong_key, Arc::new(Saves::default())),
                "sealed under key",
            ),
            (
                crate::Durable::new("run-2", sealer(), Arc::new(Saves::default())),
                "another run",
            ),
        ] {
            let fake = Fake::new(&[Plan::Live]);
            let (v, _) = run_fake(
                &fake,
                |o| o.durable(durable.resume(sealed.clone(), 1)),
                |(), _ctx| async { Ok::<_, String>(()) },
            )
            .await;
            let err = match v {
                Err(RunError::Outlive(e)) => e,
                other => panic!("refused, not {other:?}"),
            };
            assert_eq!(err.kind(), ErrorKind::Sealed);
            assert!(err.to_string().contains(says), "{err}");
            assert!(fake.launches.lock().unwrap().is_empty(), "nothing launched");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_the_store_refused_is_not_counted_as_taken() {
        let saves = Arc::new(Saves::default());
        saves.fail.store(true, Ordering::SeqCst);
        let (v, _) = run_fake(
            &Fake::new(&[Plan::Live]),
            |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone())),
            |(), ctx| async move { Ok::<_, String>(ctx.checkpoint().await) },
        )
        .await;
        assert!(!v.unwrap(), "not durable, so not taken");
    }
}
