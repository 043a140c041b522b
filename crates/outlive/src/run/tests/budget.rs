//! The budget: deaths and page failures in a row, progress that starts them again, lost work
//! and the backoff, `max_sessions`.

use super::*;

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
    dies_after_each_step_on(false, tweak, step).await
}

/// [`dies_after_each_step`], on a backend whose client's use is progress when `served`.
async fn dies_after_each_step_on<S, Fut>(
    served: bool,
    tweak: impl FnOnce(Options) -> Options,
    step: S,
) -> (RunError<String>, WideEvent)
where
    S: Fn(Ctx) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let mut fake = Fake::new(&[dies(1_000); 40]);
    Arc::get_mut(&mut fake).expect("fresh").served = served;
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
    let served = |o: Options| o.max_relaunches(1).max_sessions(6);
    let used = |ctx: Ctx| async move { ctx.note_client_used() };
    let idle = |_ctx: Ctx| async {};
    // Served, its client at work in every entry: only the sessions run out.
    let (err, e) = dies_after_each_step_on(true, served, used).await;
    assert!(
        err.to_string().starts_with(
            "gave up after 6 sessions (max_sessions is 6); of 6 entries cut, 6 made progress"
        ),
        "{err}"
    );
    assert_eq!(e.attempts, 6);
    // Served, no client: the deaths count in a row.
    let (err, e) = dies_after_each_step_on(true, served, idle).await;
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
