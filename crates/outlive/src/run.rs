//! The run loop: launch, restore, enter, watch, and on a failure, grace, drop, replace.
//!
//! A browser death and a page failure both end the entry after the grace period. The task is
//! re-entered with `attempt` + 1 on a fresh page of the same browser if it still answers,
//! else on a new browser. The loop's steps: [`Run::next_browser`], [`Run::prepare`],
//! [`Run::watch_entry`], [`Run::after_failure`]. Generic over a [`Backend`], its timing is
//! tested with a paused clock against a fake; the real one is [`crate::browser::CdpBackend`].
//! Parts: browsers launched and released ([`launch`]), an entry prepared ([`prepare`]) and
//! watched ([`entry`], clocks in [`schedule`]), how it ended ([`ended`]), after a failure
//! ([`failure`]), what the run may spend ([`budget`]).

mod backend;
mod budget;
mod ended;
mod entry;
mod failure;
mod launch;
mod prepare;
mod schedule;
mod spares;

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tracing::Instrument;

pub(crate) use backend::{Backend, LiveBrowser};

use crate::checkpoint::Checkpoint;
use crate::ctx::{Ctx, Rules, Store};
use crate::error::{Error, ErrorKind, RunError};
use crate::lifetime::Lifetime;
use crate::options::Options;
use crate::redact::redact;
use crate::relay::Death;
use crate::report::{Outcome, WideEvent};
use budget::Budget;
use ended::{Ended, EntryEnd};
use spares::{Spares, Standing, Successor, Turn};

/// Counters of one run; become the wide event (with the budget's sessions).
#[derive(Debug, Default)]
struct Tally {
    relaunches: u32,
    attempts: u32,
    /// Fresh pages that took over in a browser that lived on.
    page_recoveries: u32,
    lost_work: Duration,
    max_lost_work: Duration,
    /// Work the task had to do again: from its own last checkpoint to each cut.
    redone: Duration,
    max_redone: Duration,
    release_failed: u32,
    /// Writes that failed in restore documents.
    restore_writes_failed: u64,
    /// Switches to a successor at a safe point.
    rotations: u32,
    /// Time successors and standbys were up beside the task's browser.
    standby: Duration,
    /// Browser deaths by how each was made sure of.
    deaths_confirmed_by: std::collections::BTreeMap<String, u32>,
}

/// Builds and emits the wide event exactly once; if the run future is dropped first, its
/// `Drop` emits a `failed`/`cancelled` event.
struct Reporter<'o> {
    run_id: String,
    started: Instant,
    options: &'o Options,
    store: Arc<Store>,
    tally: Tally,
    budget: Budget,
    /// The stalls the backend's relays survived, if it keeps them.
    stalls: Option<Arc<crate::relay::Stalls>>,
    /// What the front saw of a foreign client, if one uses the run's browsers.
    clients: Option<Arc<crate::front::Usage>>,
    /// The run's span: the wide event is emitted in it, its outcome and counts recorded on
    /// it.
    span: tracing::Span,
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
        let carried = self
            .clients
            .as_ref()
            .map(|c| c.carried())
            .unwrap_or_default();
        WideEvent {
            run_id: self.run_id.clone(),
            outcome,
            relaunches: self.tally.relaunches,
            checkpoint_count: self.store.count(),
            lost_work_ms: self.tally.lost_work.as_millis() as u64,
            max_lost_work_ms: self.tally.max_lost_work.as_millis() as u64,
            redone_ms: self.tally.redone.as_millis() as u64,
            max_redone_ms: self.tally.max_redone.as_millis() as u64,
            total_ms: self.started.elapsed().as_millis() as u64,
            attempts: self.tally.attempts,
            release_failed: self.tally.release_failed,
            page_recoveries: self.tally.page_recoveries,
            state_left_out: self.store.max_left_out() + self.tally.restore_writes_failed,
            rotations: self.tally.rotations,
            sessions: self.budget.sessions(),
            standby_ms: self.tally.standby.as_millis() as u64,
            stalls_survived: self.stalls.as_ref().map_or(0, |s| s.survived()),
            longest_stall_ms: self.stalls.as_ref().map_or(0, |s| s.longest_ms()),
            deaths_confirmed_by: self.tally.deaths_confirmed_by.clone(),
            clients_carried: carried.clients,
            longest_carry_ms: carried.longest.as_millis() as u64,
            client_fallbacks: carried.fallbacks,
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
        // In the run's span even when emitted by `Drop`, outside it.
        self.span.in_scope(|| {
            record_on_span(&self.span, &event);
            event.emit(self.options.on_event.as_deref());
        });
    }

    fn outlive_error<E>(&mut self, e: Error) -> RunError<E> {
        let outcome = if e.kind() == ErrorKind::GaveUp {
            Outcome::GaveUp
        } else {
            Outcome::Failed
        };
        if let (Outcome::GaveUp, Some(m)) = (outcome, &self.options.metrics) {
            m.gave_up();
        }
        let name = match e.kind() {
            ErrorKind::GaveUp => "GaveUp",
            ErrorKind::InvalidOption => "InvalidOption",
            _ => "OutliveError",
        };
        self.emit(outcome, Some((name.to_owned(), e.code(), e.to_string())));
        RunError::Outlive(e)
    }

    /// Counts a browser's death by how it was made sure of.
    fn count_death(&mut self, death: Death) {
        if let Some(how) = death.confirmed {
            let count = self
                .tally
                .deaths_confirmed_by
                .entry(how.as_str().to_owned());
            *count.or_default() += 1;
        }
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

    /// Adds the work a cut of `entry` at `at` makes the task redo: from its own last checkpoint
    /// in the entry (or the entry's start) to the cut.
    fn record_redone(&mut self, entry: &EntryEnd, at: Instant) -> Duration {
        let redone = at.saturating_duration_since(entry.redo_from);
        self.tally.redone += redone;
        self.tally.max_redone = self.tally.max_redone.max(redone);
        if let Some(m) = &self.options.metrics {
            m.redone(redone);
        }
        redone
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
    #[cfg(feature = "durable")]
    let run_id = options
        .durable
        .as_ref()
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |d| d.run_id.clone());
    #[cfg(not(feature = "durable"))]
    let run_id = uuid::Uuid::new_v4().to_string();
    let span = run_span(&run_id);
    let store = Arc::new(Store::default());
    let reporter = Reporter {
        run_id,
        started: Instant::now(),
        options,
        store: store.clone(),
        tally: Tally::default(),
        budget: Budget::new(options),
        stalls: backend.stalls(),
        clients: backend.clients(),
        span: span.clone(),
        emitted: false,
    };
    let mut run = Run {
        backend,
        task,
        options,
        rules: Rules::of(options, backend.client_use_is_progress()),
        store,
        reporter,
        last_failure: None,
        relaunching: None,
        spares: Spares::default(),
        launches: 0,
        lifetime: Lifetime::new(options.rotation),
        born: Instant::now(),
        releasing: FuturesUnordered::new(),
        deferred: Vec::new(),
        prior: None,
        periodic_safe: true,
        blind: false,
    };
    run.drive().instrument(span).await
}

/// The span of a run: its id now, its outcome and counts when it ends
/// ([`record_on_span`]).
fn run_span(run_id: &str) -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!(
        "outlive",
        run_id = %run_id,
        outcome = Empty,
        attempts = Empty,
        relaunches = Empty,
        rotations = Empty,
        checkpoints = Empty,
        sessions = Empty,
        error_code = Empty,
        otel.status_code = Empty,
    )
}

/// Records the run's outcome and counts on its span. Counts as `i64`: OpenTelemetry has no
/// unsigned integer, and `tracing-opentelemetry` sends a `u64` as text.
fn record_on_span(span: &tracing::Span, event: &WideEvent) {
    span.record("outcome", event.outcome.as_str());
    span.record("attempts", i64::from(event.attempts));
    span.record("relaunches", i64::from(event.relaunches));
    span.record("rotations", i64::from(event.rotations));
    span.record("checkpoints", i64::from(event.checkpoint_count));
    span.record("sessions", i64::from(event.sessions));
    if let Some(code) = &event.error_code {
        span.record("error_code", code.as_str());
    }
    if event.outcome != Outcome::Completed {
        span.record("otel.status_code", "ERROR");
    }
}

/// A release in progress, capped by `release_timeout`.
type Release<'r> = BoxFuture<'r, Result<Result<(), Error>, tokio::time::error::Elapsed>>;

/// The task a run enters: called with each entry's page and context, its future answers the
/// task's value or error. Named once for `Run`'s impls, which are split over modules.
trait TaskFn<P>: FnMut(P, Ctx) -> <Self as TaskFn<P>>::Entry {
    /// One entry's future.
    type Entry: Future<Output = Result<Self::Value, Self::Error>>;
    /// What the task answers.
    type Value;
    /// The task's error.
    type Error;
}

impl<P, F, Fut, T, E> TaskFn<P> for F
where
    F: FnMut(P, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    type Entry = Fut;
    type Value = T;
    type Error = E;
}

/// The state of one run, shared by its steps.
struct Run<'r, B: Backend, F> {
    backend: &'r B,
    task: F,
    options: &'r Options,
    /// What every entry's `Ctx` takes from the run.
    rules: Rules,
    store: Arc<Store>,
    reporter: Reporter<'r>,
    /// When the last failure was detected: what the next entry's `replaced_in` counts from.
    last_failure: Option<Instant>,
    /// When the failure that needs a new browser was detected, until the next entry: the
    /// relaunch metric.
    relaunching: Option<Instant>,
    /// The browsers kept beside the task's: for the next entry, for a rotation, on standby.
    spares: Spares<'r, B::Browser>,
    /// Launches so far (the spare counts when it is used).
    launches: u32,
    /// The lifetime learned and declared, for rotations.
    lifetime: Lifetime,
    /// When the current browser's launch started: its age counts from there.
    born: Instant,
    /// Releases going on in the background (old browsers left at a rotation, dead successors).
    releasing: FuturesUnordered<Release<'r>>,
    /// Releases not started yet. Those due while the next entry is prepared wait for it to be
    /// entered (or for a fresh launch). A provider tearing a browser down on the same machine
    /// would otherwise slow the restore and navigation the task is waiting for.
    deferred: Vec<Release<'r>>,
    /// What was restored into the next browser before it was taken (a successor's
    /// checkpoint): its restore writes only what changed since.
    prior: Option<Arc<Checkpoint>>,
    /// Whether an automatic checkpoint may be a rotation's safe point on the next browser: not
    /// after a rotation at one that ended an entry without progress of the task's own.
    periodic_safe: bool,
    /// An entry ended without a checkpoint of the task's own: the task may never make one,
    /// so a rotation need not wait for its first (see [`crate::lifetime::SafePoints::blind`]).
    blind: bool,
}

impl<'r, B, F, T, E> Run<'r, B, F>
where
    B: Backend,
    F: TaskFn<B::Page, Value = T, Error = E>,
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
                    entry,
                } => {
                    old.cut();
                    self.release_later(old);
                    self.born = born;
                    self.prior = restored;
                    self.last_failure = Some(Instant::now());
                    reuse = Some(self.after_rotation(successor, entry).await?);
                }
                Ended::Failed {
                    browser,
                    death,
                    entry,
                    fresh_page,
                } => {
                    reuse = self
                        .after_failure(browser, Some(death), Some(entry), fresh_page)
                        .await?;
                }
            }
        }
    }

    /// A durable run taken over from another process: its sealed checkpoint opened and made
    /// the newest, the entries made there counted.
    #[cfg(not(feature = "durable"))]
    fn take_over(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// A durable run taken over from another process: its sealed checkpoint opened and made
    /// the newest, the entries made there counted.
    #[cfg(feature = "durable")]
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

    /// After a rotation to `successor` that cut `entry`: the task goes on there, unless the
    /// entry made no progress and the budget is spent.
    async fn after_rotation(
        &mut self,
        successor: B::Browser,
        entry: EntryEnd,
    ) -> Result<B::Browser, RunError<E>> {
        // Without a checkpoint of the task's own, the next browser reacts, and a rotation
        // need not wait for the task's first.
        self.periodic_safe = entry.checkpointed;
        self.blind |= !entry.checkpointed;
        self.reporter.budget.entry_ended(&entry);
        if entry.progressed {
            return Ok(successor);
        }
        match self.reporter.budget.fruitless_rotation() {
            Ok(()) => Ok(successor),
            Err(gave_up) => {
                self.release_later(successor);
                Err(self.give_up(gave_up.into_error()).await)
            }
        }
    }

    /// The run gives up with `e` (of kind `GaveUp`): everything released, then reported.
    async fn give_up(&mut self, e: Error) -> RunError<E> {
        self.settle_background().await;
        self.reporter.outlive_error(e)
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

#[cfg(test)]
mod tests;
