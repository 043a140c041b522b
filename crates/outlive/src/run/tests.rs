//! The loop's accounting, pinned with a paused clock and a scripted backend.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::FutureExt;
use tokio::time::sleep_until;

use super::*;
use crate::ctx::{Capturer, DeepReads};
use crate::relay::DeathCause;
use crate::report::Milestone;

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
    /// Wakes `checkpoint_stale` of the browsers (the newest checkpoint lacks a change).
    stale: Arc<tokio::sync::Notify>,
    /// How each capture was asked to read the stored databases, in order, with when it started.
    reads: Arc<Mutex<Vec<(Instant, DeepReads)>>>,
    /// A client's use of a browser counts as progress (as under `serve`).
    served: bool,
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
            stale: Arc::default(),
            reads: Arc::default(),
            served: false,
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
        .map(|at| Death::new(cause, at))
}

impl FakeBrowser {
    fn page_death(&self) -> Option<Death> {
        passed(self.page_fails_at, DeathCause::PageCrashed)
    }
}

impl Backend for Arc<Fake> {
    type Page = ();
    type Browser = FakeBrowser;

    fn client_use_is_progress(&self) -> bool {
        self.served
    }

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
        let reads = self.fake.reads.clone();
        Arc::new(move |how| {
            reads.lock().unwrap().push((Instant::now(), how));
            Box::pin(async move {
                let taken = Instant::now();
                tokio::time::sleep(cost).await;
                let now = Instant::now();
                if dies_at.is_some_and(|d| now >= d) || page_fails_at.is_some_and(|d| now >= d) {
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
                    Death::new(cause, at)
                }
                None => std::future::pending().await,
            }
        }
    }

    fn checkpoint_stale(&self) -> impl Future<Output = ()> + Send {
        let stale = self.fake.stale.clone();
        async move { stale.notified().await }
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

/// A rotation test's result, its event, the fake, and each rotation's (attempt, age, lost
/// work).
type Rotated = (
    Result<u32, RunError<String>>,
    WideEvent,
    Arc<Fake>,
    Vec<(u32, Duration, Duration, Duration)>,
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
            redone,
        } => Some((*attempt, *age, *lost_work, *redone)),
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

/// The first entry works until it is dropped, checkpointing on its own every 500 ms (490 ms
/// of work, a 10 ms capture); later ones finish at once.
async fn first_entry_works_on((): (), ctx: Ctx) -> Result<u32, String> {
    if ctx.attempt() == 1 {
        work_with_checkpoints(&ctx).await;
    }
    Ok(ctx.attempt())
}

/// Works until dropped, checkpointing on its own every 500 ms (490 ms of work, a 10 ms
/// capture).
async fn work_with_checkpoints(ctx: &Ctx) -> ! {
    loop {
        tokio::time::sleep(Duration::from_millis(490)).await;
        ctx.checkpoint().await;
    }
}

/// A browser that dies `ms` after its launch.
fn dies(ms: u64) -> Plan {
    Plan::DieAfter(Duration::from_millis(ms))
}

/// Entries before attempt `n` work until they are dropped; attempt `n` finishes.
fn until_attempt(n: u32) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
    until_attempt_after(n, Duration::ZERO)
}

/// Entries before attempt `n` work until they are dropped (checkpointing on their own every
/// 500 ms); attempt `n` (or any later) works for `work`, then finishes.
fn until_attempt_after(
    n: u32,
    work: Duration,
) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
    move |(), ctx| {
        async move {
            if ctx.attempt() < n {
                work_with_checkpoints(&ctx).await;
            }
            tokio::time::sleep(work).await;
            Ok(ctx.attempt())
        }
        .boxed()
    }
}

mod budget;
mod checkpoints;
#[cfg(feature = "durable")]
mod durable;
mod ending;
mod pages;
mod rotation;
mod steps;
