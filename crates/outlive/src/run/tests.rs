//! The loop's accounting, pinned with a paused clock and a scripted backend.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::sleep_until;

use super::*;
use crate::ctx::IdbReads;
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
    /// Wakes `checkpoint_stale` of the browsers (the newest checkpoint lacks a change).
    stale: Arc<tokio::sync::Notify>,
    /// How each capture was asked to read IndexedDB, in order, with when it started.
    reads: Arc<Mutex<Vec<(Instant, IdbReads)>>>,
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

/// Each entry checkpoints on its own (its step done) 500 ms in, then works until it is
/// dropped; attempt `n` finishes.
fn one_step_per_entry_until(
    n: u32,
) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
    move |(), ctx| {
        async move {
            if ctx.attempt() >= n {
                return Ok(ctx.attempt());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            ctx.checkpoint().await;
            std::future::pending::<()>().await;
            unreachable!()
        }
        .boxed()
    }
}

#[tokio::test(start_paused = true)]
async fn deaths_after_progress_start_the_budget_again() {
    // Eight deaths, each after the entry saved a checkpoint of its own: a long task that keeps
    // moving is never given up on, however many browsers it outlives.
    let fake = Fake::new(&[dies(1_000); 8]);
    let (v, e) = run_fake(&fake, |o| o.max_relaunches(2), one_step_per_entry_until(9)).await;
    assert_eq!(v.unwrap(), 9);
    assert_eq!((e.attempts, e.relaunches), (9, 8));
}

#[tokio::test(start_paused = true)]
async fn deaths_in_a_row_without_progress_give_up_after_progress_too() {
    // Entries 1 and 2 save a step; from the third on, the browser dies before any step is
    // done: the budget (2) counts from the last entry with progress.
    let fake = Fake::new(&[
        dies(1_000),
        dies(1_000),
        dies(300),
        dies(300),
        dies(300),
        dies(300),
    ]);
    let (result, e) = run_fake(&fake, |o| o.max_relaunches(2), one_step_per_entry_until(99)).await;
    let err = result.unwrap_err();
    assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
    assert!(
        err.to_string()
            .contains("3 browser failures in a row without progress"),
        "{err}"
    );
    // Deaths 1 and 2 after progress; death 2 starts the count at 1; deaths 3 and 4 make it 3.
    assert_eq!((e.attempts, e.relaunches), (4, 3));
}

/// Each entry does `step` 500 ms in (given its attempt and its ctx), then works until it is
/// dropped; its browser dies 1 s after launch. Answers the run's error and event.
async fn dies_after_each_step<S, Fut>(
    tweak: impl FnOnce(Options) -> Options,
    step: S,
) -> (RunError<String>, WideEvent)
where
    S: Fn(Ctx) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let fake = Fake::new(&[dies(1_000); 40]);
    let (result, e) = run_fake(&fake, tweak, move |(), ctx| {
        let step = step.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            step(ctx).await;
            std::future::pending::<Result<(), String>>().await
        }
    })
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.outlive().unwrap().kind(), ErrorKind::GaveUp);
    assert_eq!(e.outcome, Outcome::GaveUp);
    (err, e)
}

#[tokio::test(start_paused = true)]
async fn the_same_progress_saved_on_every_entry_is_no_progress() {
    // Every entry signs in and saves that, then dies before its first step: only the first
    // entry's save is new, so the deaths after it count in a row.
    let (err, e) = dies_after_each_step(
        |o| o.max_relaunches(2),
        |ctx| async move {
            assert!(ctx.checkpoint_with("signed in").await);
        },
    )
    .await;
    assert_eq!(
        err.to_string(),
        "gave up after 3 browser failures in a row without progress (max_relaunches is 2); \
         the last was closed; of 3 entries cut, 1 made progress and 2 more saved a checkpoint \
         without new progress"
    );
    // Deaths in a row from the first on (its entry's progress was behind it): max_relaunches
    // + 1 deaths in all.
    assert_eq!((e.attempts, e.relaunches), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn progress_that_advances_goes_on_until_max_sessions() {
    let (err, e) = dies_after_each_step(
        |o| o.max_relaunches(1).max_sessions(12),
        |ctx| async move {
            let done: u32 = ctx.progress().unwrap().unwrap_or(0);
            assert_eq!(done + 1, ctx.attempt());
            assert!(ctx.checkpoint_with(&(done + 1)).await);
        },
    )
    .await;
    assert_eq!(
        err.to_string(),
        "gave up after 12 sessions (max_sessions is 12); of 12 entries cut, 12 made progress \
         and 0 more saved a checkpoint without new progress"
    );
    // No spare is launched past the cap: every session was an entry's.
    assert_eq!((e.attempts, e.relaunches, e.sessions), (12, 11, 12));
}

#[tokio::test(start_paused = true)]
async fn a_client_at_work_is_progress_only_under_serve() {
    let served = |o: Options| o.for_a_served_client().max_relaunches(1).max_sessions(6);
    let used = |ctx: Ctx| async move { ctx.note_client_used() };
    let idle = |_ctx: Ctx| async {};
    // Served, its client at work in every entry: only the sessions run out.
    let (err, e) = dies_after_each_step(served, used).await;
    assert!(
        err.to_string().starts_with(
            "gave up after 6 sessions (max_sessions is 6); of 6 entries cut, 6 made progress"
        ),
        "{err}"
    );
    assert_eq!(e.attempts, 6);
    // Served, no client: the deaths count in a row.
    let (err, e) = dies_after_each_step(served, idle).await;
    assert!(err.to_string().contains("(max_relaunches is 1)"), "{err}");
    assert_eq!(e.attempts, 2);
    // A command's client under `run`: its use is not progress.
    let (err, e) = dies_after_each_step(|o| o.max_relaunches(1), used).await;
    assert!(err.to_string().contains("(max_relaunches is 1)"), "{err}");
    assert_eq!(e.attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn page_failures_after_progress_start_the_budget_again() {
    let fake = Fake::new(&[Plan::PagesFail {
        after: Duration::from_secs(1),
        times: 6,
    }]);
    let (v, e) = run_fake(
        &fake,
        |o| o.max_page_recoveries(1),
        one_step_per_entry_until(7),
    )
    .await;
    assert_eq!(v.unwrap(), 7);
    assert_eq!((e.attempts, e.page_recoveries, e.relaunches), (7, 6, 0));
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

#[tokio::test(start_paused = true)]
async fn a_rotation_switches_at_a_checkpoint_before_the_predicted_death() {
    let (v, e, fake, rotated) =
        rotating(&[dies(20_000), Plan::Live], |o| o, first_entry_works_on).await;
    assert_eq!(v.unwrap(), 2);
    assert_eq!((e.rotations, e.relaunches, e.attempts), (1, 0, 2));
    assert_eq!(e.lost_work_ms, 0, "a rotation is not a death");
    assert_eq!(e.sessions, 2);
    // Leave by 18 s (20 s − 10 %). The task checkpoints every 500 ms: its last checkpoint
    // due by then is at 18 s (the next would be late). So the successor is launched a lead
    // (1 s) before, at 17 s, ready after its 100 ms restore. The task's checkpoint at
    // 18 s is the safe point: nothing to redo.
    let (attempt, age, lost, redone) = rotated[0];
    assert_eq!(attempt, 1);
    assert_eq!(age, Duration::from_millis(18_000));
    assert_eq!(lost, Duration::from_millis(10), "the capture's own time");
    assert_eq!(redone, Duration::ZERO);
    assert_eq!((e.redone_ms, e.max_redone_ms), (0, 0));
    let launches = fake.launches.lock().unwrap().clone();
    assert_eq!(launches[1], launches[0] + Duration::from_secs(17));
    assert_eq!(fake.launches.lock().unwrap().len(), 2);
    assert_eq!(fake.releases.load(Ordering::SeqCst), 2, "both released");
    // Once the switch is armed (the successor ready), captures read IndexedDB in full: the
    // safe point's checkpoint is resumed from at once, with no later one to make up for a
    // change Chromium reports late.
    let reads = fake.reads.lock().unwrap().clone();
    let armed = launches[1] + Duration::from_millis(100);
    let (before, after): (Vec<_>, Vec<_>) = reads.iter().partition(|(at, _)| *at < armed);
    assert!(
        before.iter().all(|(_, how)| *how == IdbReads::MayStand),
        "{before:?}"
    );
    assert!(
        !after.is_empty() && after.iter().all(|(_, how)| *how == IdbReads::InFull),
        "{after:?}"
    );
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
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(490)).await;
                ctx.checkpoint().await;
            }
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
    let (v, e, fake, rotated) = rotating(&[dies(20_000), Plan::Live], pick, |(), ctx| async move {
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
    // The first successor died at 17.105 s, after its restore; the second launched at
    // once, was restored by 17.205 s, and waited for the switch at 18 s.
    assert_eq!(rotated[0].1, Duration::from_millis(18_000));
    assert_eq!(fake.releases.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_successor_that_dies_during_the_switch_is_a_death_after_a_rotation() {
    let (v, e, fake, rotated) = rotating(
        &[
            dies(20_000),
            // Launched at 17 s, restored by 17.1 s; switched to at 18 s; dies during the
            // final restore.
            dies(1_050),
            Plan::Live,
        ],
        |o| o,
        |(), ctx| async move {
            if ctx.attempt() == 2 {
                assert!(ctx.resumed_from().is_some());
                return Ok(2);
            }
            work_with_checkpoints(&ctx).await
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
    // but at the switch it would be 9.7 s old (over a quarter of the lifetime). So it is
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
    // over. Its age is not a launch time: the lead stays 1 s. So the new browser's
    // successor is launched once, at 15 s of age (18 s − 2 s − 1 s), and switched to at
    // 17 s, not again and again.
    let plans = [dies(9_000), Plan::Live];
    let run = rotating(
        &plans,
        |o| o.standby(true),
        |(), ctx| async move {
            match ctx.attempt() {
                // 12 s of work, checkpointing on its own: more than the standby has left.
                2 => {
                    for _ in 0..24 {
                        tokio::time::sleep(Duration::from_millis(490)).await;
                        ctx.checkpoint().await;
                    }
                }
                1 => work_with_checkpoints(&ctx).await,
                _ => {}
            }
            Ok(ctx.attempt())
        },
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
async fn a_stale_checkpoint_is_followed_by_a_new_one_at_once() {
    // The task's checkpoint at 1 s is found stale at 2 s (the browser reported a change after
    // it): a new one is taken then, not at the periodic slot (10 s); the death at 5 s comes
    // after both.
    let fake = Fake::new(&[dies(5_000), Plan::Live]);
    let stale = fake.stale.clone();
    let (v, e) = run_fake(
        &fake,
        |o| o,
        move |(), ctx| {
            let stale = stale.clone();
            async move {
                if ctx.attempt() == 2 {
                    return Ok(ctx.attempt());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert!(ctx.checkpoint().await);
                tokio::time::sleep(Duration::from_secs(1)).await;
                stale.notify_one();
                std::future::pending().await
            }
        },
    )
    .await;
    assert_eq!(v.unwrap(), 2);
    assert_eq!(
        e.checkpoint_count, 2,
        "the task's and the one after it went stale"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_checkpoint_under_a_hold_takes_none_inside_it_and_keeps_the_periodic_slot() {
    // The task holds the automatic checkpoints from 1 s to 4 s; the newest checkpoint is
    // found stale at 2 s. No capture inside the hold; the periodic one still comes at 10 s.
    let fake = Fake::new(&[dies(11_000), Plan::Live]);
    let stale = fake.stale.clone();
    let start = Instant::now();
    let (v, _e) = run_fake(
        &fake,
        |o| o,
        move |(), ctx| {
            let stale = stale.clone();
            async move {
                if ctx.attempt() == 2 {
                    return Ok(ctx.attempt());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                let hold = ctx.hold_checkpoints();
                tokio::time::sleep(Duration::from_secs(1)).await;
                stale.notify_one();
                tokio::time::sleep(Duration::from_secs(2)).await;
                drop(hold);
                std::future::pending().await
            }
        },
    )
    .await;
    assert_eq!(v.unwrap(), 2);
    let started: Vec<_> = fake
        .reads
        .lock()
        .unwrap()
        .iter()
        .map(|(at, _)| at.duration_since(start))
        .collect();
    assert!(
        started
            .iter()
            .all(|at| *at < Duration::from_secs(1) || *at >= Duration::from_secs(4)),
        "{started:?}"
    );
    assert!(started.contains(&Duration::from_secs(10)), "{started:?}");
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

/// Durable runs (feature `durable`).
#[cfg(feature = "durable")]
mod durable_runs {
    use std::sync::atomic::AtomicBool;

    use super::*;

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

mod steps;
