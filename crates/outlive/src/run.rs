//! The run loop: launch, restore, enter, watch, and on a death, grace, drop, relaunch.
//!
//! The loop is generic over a [`Backend`] so that its timing logic (grace, backoff, lost
//! work) can be tested with a paused clock against a scripted fake; the real backend is
//! [`crate::browser::CdpBackend`].

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::OptionFuture;
use tokio::time::{Instant, sleep, sleep_until};
use tracing::Instrument;

use crate::checkpoint::Checkpoint;
use crate::ctx::{Capturer, Ctx, ResumedFrom, Store};
use crate::error::{Error, ErrorKind, RunError};
use crate::options::Options;
use crate::redact::redact;
use crate::relay::Death;
use crate::report::{Milestone, Outcome, WideEvent};

/// Where browsers come from, for the run loop.
pub(crate) trait Backend {
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
    /// Resolves with the first death detected. Cancel-safe.
    fn died(&self) -> impl Future<Output = Death> + Send;
    /// The death, if one has been detected.
    fn death(&self) -> Option<Death>;
    /// Asks the browser whether it is alive; records a death if it is not.
    fn confirm_alive(&self, timeout: Duration) -> impl Future<Output = bool> + Send;
    /// Cuts the connection so every page call fails at once.
    fn cut(&mut self);
    fn restore(&self, checkpoint: &Checkpoint) -> impl Future<Output = Result<(), Error>> + Send;
    fn navigate(&self, url: &str) -> impl Future<Output = Result<(), Error>> + Send;
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Counters of one run; become the wide event.
#[derive(Debug, Default)]
struct Tally {
    relaunches: u32,
    attempts: u32,
    /// Deaths plus failed launches: what `max_relaunches` limits.
    failures: u32,
    lost_work: Duration,
    max_lost_work: Duration,
    release_failed: u32,
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

    fn outlive_error<T, E>(&mut self, e: Error) -> Result<T, RunError<E>> {
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
        Err(RunError::Outlive(e))
    }

    fn record_death(&mut self, death: Death, entry_started: Option<Instant>) -> Duration {
        let lost = match entry_started {
            Some(entry) => {
                let from = self.store.latest_taken().map_or(entry, |cp| cp.max(entry));
                death.at.saturating_duration_since(from)
            }
            // Died before the task was entered: no task work was lost.
            None => Duration::ZERO,
        };
        self.tally.lost_work += lost;
        self.tally.max_lost_work = self.tally.max_lost_work.max(lost);
        self.tally.failures += 1;
        lost
    }

    async fn release<B: LiveBrowser>(&mut self, browser: B) {
        let limit = self.options.release_timeout;
        match tokio::time::timeout(limit, browser.release()).await {
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
    mut task: F,
    options: &Options,
) -> Result<T, RunError<E>>
where
    B: Backend,
    F: FnMut(B::Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let run_id = uuid::Uuid::new_v4().to_string();
    let span = tracing::info_span!("outlive", run_id = %run_id);
    let store = Arc::new(Store::default());
    let mut reporter = Reporter {
        run_id,
        started: Instant::now(),
        options,
        store: store.clone(),
        tally: Tally::default(),
        emitted: false,
    };
    async move {
        if let Err(e) = options.validate() {
            return reporter.outlive_error(e);
        }
        let mut first = true;
        let mut last_death: Option<Instant> = None;
        let mut pending = None;
        loop {
            if !first {
                reporter.tally.relaunches += 1;
            }
            first = false;

            let (launch_started, launch) = match pending.take() {
                Some((started, spare)) => (started, spare),
                None => (Instant::now(), Spare::Launching(Box::pin(backend.launch(options)))),
            };
            let mut browser = match launch.get().await {
                Ok(b) => b,
                Err(e) => {
                    reporter.tally.failures += 1;
                    options.note(Milestone::LaunchFailed { error: redact(&e.to_string(), options.diagnostics) });
                    tracing::warn!(
                        failures = reporter.tally.failures,
                        error = %redact(&e.to_string(), options.diagnostics),
                        "launch failed"
                    );
                    if reporter.tally.failures > options.max_relaunches {
                        let msg = format!(
                            "gave up after {} browser failures (max_relaunches is {}); the last launch failed: {}",
                            reporter.tally.failures, options.max_relaunches, e
                        );
                        return reporter.outlive_error(Error::new(ErrorKind::GaveUp, msg).with_source(e));
                    }
                    sleep(options.relaunch_backoff).await;
                    continue;
                }
            };
            let launched_in = launch_started.elapsed();
            options.note(Milestone::Launched { took: launched_in });

            // Restore (or the first navigation); a death here is a death before any entry.
            let latest = store.latest();
            let prepare = async {
                match &latest {
                    Some(cp) => {
                        let restore_started = Instant::now();
                        browser.restore(cp).await?;
                        let restore = restore_started.elapsed();
                        let navigate_started = Instant::now();
                        if let Err(e) = navigate(&browser, &cp.url, options).await {
                            tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "resume navigation failed; entering anyway");
                        }
                        let navigate = navigate_started.elapsed();
                        options.note(Milestone::Restored { restore, navigate });
                        tracing::debug!(?launched_in, ?restore, ?navigate, "checkpoint restored");
                        Ok(Some(ResumedFrom { url: cp.url.clone(), checkpoint_at: cp.at }))
                    }
                    None => {
                        if reporter.tally.attempts == 0 {
                            if let Some(url) = &options.start_url {
                                if let Err(e) = navigate(&browser, url, options).await {
                                    tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "start_url navigation failed; entering anyway");
                                }
                            }
                        }
                        Ok::<_, Error>(None)
                    }
                }
            };
            let prepared = tokio::select! {
                biased;
                death = browser.died() => Err(Some(death)),
                r = prepare => r.map_err(|e| { tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "restore failed"); None }),
            };
            let resumed_from = match prepared {
                Ok(r) => r,
                Err(death) => {
                    let death = death.or(browser.death());
                    browser.cut();
                    reporter.release(browser).await;
                    match death {
                        Some(d) => {
                            reporter.record_death(d, None);
                            last_death = Some(d.at);
                            options.note(Milestone::Died {
                                attempt: 0,
                                cause: d.cause,
                                detected_at: d.at.into_std(),
                                lost_work: Duration::ZERO,
                            });
                            tracing::info!(cause = d.cause.as_str(), "browser died before the task was entered");
                        }
                        None => reporter.tally.failures += 1,
                    }
                    if reporter.tally.failures > options.max_relaunches {
                        return reporter.outlive_error(gave_up(&reporter.tally, options, death));
                    }
                    if death.is_none() {
                        sleep(options.relaunch_backoff).await;
                    }
                    continue;
                }
            };

            reporter.tally.attempts += 1;
            let attempt = reporter.tally.attempts;
            let ctx = Ctx::new(
                attempt,
                resumed_from,
                browser.capturer(),
                store.clone(),
                options.capture_timeout,
                options.on_milestone.clone(),
            );
            let entry_started = Instant::now();
            options.note(Milestone::Entered {
                attempt,
                resumed: ctx.resumed_from().is_some(),
                replaced_in: last_death.map(|d| entry_started.saturating_duration_since(d)),
            });
            tracing::info!(attempt, resumed = ctx.resumed_from().is_some(), "entering the task");
            let entry = AssertUnwindSafe(
                task(browser.page(), ctx.clone()).instrument(tracing::info_span!("entry", attempt)),
            )
            .catch_unwind();
            // Boxed so that dropping it really ends the entry, at the point the loop says.
            let mut entry = Box::pin(entry);

            // Watch the entry, the connection and the checkpoint clock together.
            let mut periodic: Option<std::pin::Pin<Box<dyn Future<Output = bool> + Send>>> = None;
            let mut last_periodic = entry_started;
            let ended = loop {
                let base = store.latest_taken().map_or(entry_started, |t| t.max(entry_started)).max(last_periodic);
                let due = base + options.checkpoint_every;
                tokio::select! {
                    biased;
                    out = &mut entry => break Ok(out),
                    death = browser.died() => break Err(death),
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

            let death = match ended {
                Ok(Ok(Ok(value))) => {
                    ctx.retire();
                    reporter.release(browser).await;
                    reporter.emit(Outcome::Completed, None);
                    return Ok(value);
                }
                Ok(Ok(Err(e))) => {
                    // The task's error is its own unless its browser is already dead.
                    let dead = browser.death().is_some()
                        || !browser.confirm_alive(options.heartbeat_timeout).await;
                    match (dead, browser.death()) {
                        (true, Some(death)) => {
                            tracing::info!(cause = death.cause.as_str(), "the task failed because its browser died");
                            ctx.retire();
                            browser.cut();
                            death
                        }
                        _ => {
                            ctx.retire();
                            reporter.release(browser).await;
                            reporter.emit(
                                Outcome::Failed,
                                Some((type_name_of::<E>(), "task_error", e.to_string())),
                            );
                            return Err(RunError::Task(e));
                        }
                    }
                }
                Ok(Err(panic)) => {
                    ctx.retire();
                    reporter.release(browser).await;
                    let message = panic_message(&*panic);
                    reporter.emit(Outcome::Failed, Some(("Panic".to_owned(), "panic", message)));
                    std::panic::resume_unwind(panic);
                }
                Err(death) => {
                    ctx.retire();
                    browser.cut();
                    tracing::info!(cause = death.cause.as_str(), grace = ?options.grace, "browser died; waiting out the grace period");
                    // The replacement launches now, while the dead entry has its grace; it
                    // is entered only after that entry is gone.
                    let spare_started = Instant::now();
                    let mut launching = Box::pin(backend.launch(options));
                    let mut ready = None;
                    let grace_end = Instant::now() + options.grace;
                    let finished = loop {
                        tokio::select! {
                            biased;
                            out = &mut entry => break Some(out),
                            r = &mut launching, if ready.is_none() => ready = Some(r),
                            _ = sleep_until(grace_end) => break None,
                        }
                    };
                    let spare = match ready {
                        Some(r) => Spare::Ready(r),
                        None => Spare::Launching(launching),
                    };
                    match finished {
                        Some(Ok(Ok(value))) => {
                            tracing::info!("the task finished within the grace period");
                            reporter.release(browser).await;
                            spare.discard(&mut reporter).await;
                            reporter.emit(Outcome::Completed, None);
                            return Ok(value);
                        }
                        Some(Err(panic)) => {
                            reporter.release(browser).await;
                            spare.discard(&mut reporter).await;
                            let message = panic_message(&*panic);
                            reporter.emit(Outcome::Failed, Some(("Panic".to_owned(), "panic", message)));
                            std::panic::resume_unwind(panic);
                        }
                        // An error after the death is the death's doing; a timeout drops the entry.
                        Some(Ok(Err(_))) | None => {
                            pending = Some((spare_started, spare));
                            death
                        }
                    }
                }
            };

            // At most one entry alive: the dead one is dropped before anything relaunches.
            drop(entry);
            let lost = reporter.record_death(death, Some(entry_started));
            last_death = Some(death.at);
            options.note(Milestone::Died {
                attempt,
                cause: death.cause,
                detected_at: death.at.into_std(),
                lost_work: lost,
            });
            tracing::info!(
                attempt,
                cause = death.cause.as_str(),
                lost_work_ms = lost.as_millis() as u64,
                "entry abandoned after a browser death"
            );
            reporter.release(browser).await;
            if reporter.tally.failures > options.max_relaunches {
                if let Some((_, spare)) = pending.take() {
                    spare.discard(&mut reporter).await;
                }
                return reporter.outlive_error(gave_up(&reporter.tally, options, Some(death)));
            }
        }
    }
    .instrument(span)
    .await
}

/// A browser launched ahead of need (during a dead entry's grace period).
enum Spare<F, B> {
    /// Still launching.
    Launching(std::pin::Pin<Box<F>>),
    /// Launched (or failed to).
    Ready(Result<B, Error>),
}

impl<F: Future<Output = Result<B, Error>>, B: LiveBrowser> Spare<F, B> {
    async fn get(self) -> Result<B, Error> {
        match self {
            Spare::Launching(f) => f.await,
            Spare::Ready(r) => r,
        }
    }

    /// Not needed after all: finish the launch (so no session is left half-created) and
    /// release it.
    async fn discard(self, reporter: &mut Reporter<'_>) {
        if let Ok(browser) = self.get().await {
            reporter.release(browser).await;
        }
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

fn gave_up(tally: &Tally, options: &Options, death: Option<Death>) -> Error {
    let cause = death.map_or("a failed restore", |d| d.cause.as_str());
    Error::new(
        ErrorKind::GaveUp,
        format!(
            "gave up after {} browser failures (max_relaunches is {}); the last was: {}",
            tally.failures, options.max_relaunches, cause
        ),
    )
}

#[cfg(test)]
mod tests {
    //! The loop's accounting, pinned with a paused clock and a scripted backend.

    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

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
    }

    struct Fake {
        plans: Mutex<VecDeque<Plan>>,
        launches: Mutex<Vec<Instant>>,
        releases: AtomicU32,
        capture_cost: Duration,
    }

    impl Fake {
        fn new(plans: &[Plan]) -> Arc<Fake> {
            Arc::new(Fake {
                plans: Mutex::new(plans.iter().copied().collect()),
                launches: Mutex::default(),
                releases: AtomicU32::new(0),
                capture_cost: Duration::from_millis(200),
            })
        }
    }

    struct FakeBrowser {
        dies_at: Option<Instant>,
        fake: Arc<Fake>,
    }

    impl Backend for Arc<Fake> {
        type Page = ();
        type Browser = FakeBrowser;

        async fn launch(&self, _options: &Options) -> Result<FakeBrowser, Error> {
            self.launches.lock().unwrap().push(Instant::now());
            let plan = self.plans.lock().unwrap().pop_front().unwrap_or(Plan::Live);
            match plan {
                Plan::Fail => Err(Error::new(ErrorKind::Launch, "scripted launch failure")),
                Plan::DieAfter(d) => Ok(FakeBrowser {
                    dies_at: Some(Instant::now() + d),
                    fake: self.clone(),
                }),
                Plan::Live => Ok(FakeBrowser {
                    dies_at: None,
                    fake: self.clone(),
                }),
            }
        }
    }

    impl LiveBrowser for FakeBrowser {
        type Page = ();

        fn page(&self) {}

        fn capturer(&self) -> Capturer {
            let (dies_at, cost) = (self.dies_at, self.fake.capture_cost);
            Arc::new(move || {
                Box::pin(async move {
                    let taken = Instant::now();
                    tokio::time::sleep(cost).await;
                    if dies_at.is_some_and(|d| Instant::now() >= d) {
                        return Err(Error::new(ErrorKind::Cdp, "browser gone"));
                    }
                    Ok(Checkpoint::at_url("https://example.test/", taken))
                })
            })
        }

        fn died(&self) -> impl Future<Output = Death> + Send {
            let dies_at = self.dies_at;
            async move {
                match dies_at {
                    Some(at) => {
                        sleep_until(at).await;
                        Death {
                            cause: DeathCause::Closed,
                            at,
                        }
                    }
                    None => std::future::pending().await,
                }
            }
        }

        fn death(&self) -> Option<Death> {
            self.dies_at
                .filter(|at| Instant::now() >= *at)
                .map(|at| Death {
                    cause: DeathCause::Closed,
                    at,
                })
        }

        async fn confirm_alive(&self, _timeout: Duration) -> bool {
            self.death().is_none()
        }

        fn cut(&mut self) {}

        async fn restore(&self, _checkpoint: &Checkpoint) -> Result<(), Error> {
            Ok(())
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

    #[tokio::test(start_paused = true)]
    async fn lost_work_counts_from_the_newest_checkpoint_to_detection() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(25)), Plan::Live]);
        let event = Arc::default();
        let v = run(
            &fake,
            |(), ctx| work_forever_then_finish(ctx.attempt()),
            &options(&event),
        )
        .await
        .unwrap();
        assert_eq!(v, 2);
        let e = event.lock().unwrap().clone().unwrap();
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
        let event = Arc::default();
        let v = run(
            &fake,
            |(), ctx| async move {
                if ctx.attempt() < 3 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(ctx.attempt())
            },
            &options(&event),
        )
        .await
        .unwrap();
        assert_eq!(v, 3);
        let e = event.lock().unwrap().clone().unwrap();
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
        let event = Arc::default();
        let started = Instant::now();
        run(
            &fake,
            |(), ctx| work_forever_then_finish(ctx.attempt()),
            &options(&event),
        )
        .await
        .unwrap();
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
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!((e.attempts, e.relaunches, e.lost_work_ms), (2, 3, 1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn more_deaths_than_max_relaunches_give_up() {
        let die = Plan::DieAfter(Duration::from_secs(1));
        let fake = Fake::new(&[die, die, die, die]);
        let event = Arc::default();
        let err = run(
            &fake,
            |(), _ctx| std::future::pending::<Result<(), String>>(),
            &options(&event).max_relaunches(2),
        )
        .await
        .unwrap_err();
        assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!(e.outcome, Outcome::GaveUp);
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
        let event = Arc::default();
        let err = run(
            &fake,
            |(), _ctx| async { Ok::<(), String>(()) },
            &options(&event).max_relaunches(1),
        )
        .await
        .unwrap_err();
        assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!((e.attempts, e.relaunches), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_that_finishes_within_the_grace_completes() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1))]);
        let event = Arc::default();
        let v = run(
            &fake,
            |(), _ctx| async {
                tokio::time::sleep(Duration::from_millis(1_100)).await;
                Ok::<_, String>("done")
            },
            &options(&event),
        )
        .await
        .unwrap();
        assert_eq!(v, "done");
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!(
            (e.outcome, e.attempts, e.relaunches, e.lost_work_ms),
            (Outcome::Completed, 1, 0, 0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_after_the_death_is_a_death_not_a_failure() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1)), Plan::Live]);
        let event = Arc::default();
        let v = run(
            &fake,
            |(), ctx| async move {
                if ctx.attempt() == 1 {
                    tokio::time::sleep(Duration::from_millis(1_100)).await;
                    return Err("page call failed: connection closed".to_owned());
                }
                Ok(ctx.attempt())
            },
            &options(&event),
        )
        .await
        .unwrap();
        assert_eq!(v, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_error_with_a_live_browser_is_returned_unchanged() {
        let fake = Fake::new(&[Plan::Live]);
        let event = Arc::default();
        let calls = AtomicU32::new(0);
        let err = run(
            &fake,
            |(), _ctx| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(vec![1, 2, 3]).map_err(|v| format!("{v:?}")) }
            },
            &options(&event),
        )
        .await
        .unwrap_err();
        assert_eq!(err.into_task().unwrap(), "[1, 2, 3]");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!(e.error_code.as_deref(), Some("task_error"));
    }

    #[tokio::test(start_paused = true)]
    async fn held_checkpoints_are_skipped_until_the_hold_ends() {
        let fake = Fake::new(&[Plan::Live]);
        let event = Arc::default();
        run(
            &fake,
            |(), ctx| async move {
                {
                    let _hold = ctx.hold_checkpoints();
                    tokio::time::sleep(Duration::from_secs(25)).await; // 2 periodic slots held
                }
                tokio::time::sleep(Duration::from_secs(11)).await; // one more runs
                Ok::<_, String>(())
            },
            &options(&event),
        )
        .await
        .unwrap();
        let e = event.lock().unwrap().clone().unwrap();
        assert_eq!(
            e.checkpoint_count, 1,
            "only the checkpoint after the hold ran"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn checkpoints_after_the_death_are_refused() {
        let fake = Fake::new(&[Plan::DieAfter(Duration::from_secs(1)), Plan::Live]);
        let event = Arc::default();
        let answers = Mutex::new(Vec::new());
        run(
            &fake,
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
            &options(&event),
        )
        .await
        .unwrap();
        assert_eq!(*answers.lock().unwrap(), vec![false, true]);
    }
}
