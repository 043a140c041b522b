//! Rotation never worse than reacting: tasks whose steps between their own checkpoints are a
//! large part of a browser's life. Every browser dies `LIFE` after its launch (300 ms);
//! restores take 100 ms, captures 10 ms.

use super::*;

/// A browser's life once launched.
const LIFE: Duration = Duration::from_secs(20);
/// A launch.
const LAUNCH: Duration = Duration::from_millis(300);

/// Browsers that all die `LIFE` after their launch.
fn mortal(n: usize) -> Arc<Fake> {
    Fake::with_launch_cost(&vec![Plan::DieAfter(LIFE); n], LAUNCH)
}

/// A task of `steps` steps of `step` each, checkpointing its count after each
/// (`checkpoint_with`) and resuming from the count it saved.
fn stepping(
    steps: u32,
    step: Duration,
) -> impl FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>> {
    move |(), ctx| {
        async move {
            let mut done: u32 = ctx.progress().map_err(|e| e.to_string())?.unwrap_or(0);
            while done < steps {
                tokio::time::sleep(step).await;
                done += 1;
                ctx.checkpoint_with(&done).await;
            }
            Ok(done)
        }
        .boxed()
    }
}

/// Runs `task` reacting and rotating (lifetime declared), each on fresh mortal browsers,
/// capped at 10 minutes of (paused) time; answers both events and results.
async fn both<F>(
    task: impl Fn() -> F,
    tweak: impl Fn(Options) -> Options,
) -> [(Result<u32, RunError<String>>, WideEvent); 2]
where
    F: FnMut((), Ctx) -> BoxFuture<'static, Result<u32, String>>,
{
    let mut out = Vec::new();
    for rotation in [crate::Rotation::Off, crate::Rotation::Expected(LIFE)] {
        let fake = mortal(64);
        let run = run_fake(
            &fake,
            |o| {
                tweak(
                    o.checkpoint_every(Duration::from_secs(2))
                        .rotation(rotation),
                )
            },
            task(),
        );
        let (v, e) = tokio::time::timeout(Duration::from_secs(600), run)
            .await
            .expect("the run ends: no livelock");
        assert_eq!(
            fake.releases.load(Ordering::SeqCst),
            fake.launches.lock().unwrap().len() as u32,
            "every browser released"
        );
        out.push((v, e));
    }
    out.try_into().map_err(|_| ()).expect("two runs")
}

/// Rotation completed, with no more sessions than reacting + 1 and no more time.
fn never_worse(react: &WideEvent, rotate: &WideEvent) {
    assert_eq!(react.outcome, Outcome::Completed, "{}", react.to_json());
    assert_eq!(rotate.outcome, Outcome::Completed, "{}", rotate.to_json());
    assert!(
        rotate.sessions <= react.sessions + 1,
        "sessions: rotating {}, reacting {}",
        rotate.sessions,
        react.sessions
    );
    assert!(
        rotate.total_ms <= react.total_ms,
        "time: rotating {} ms, reacting {} ms",
        rotate.total_ms,
        react.total_ms
    );
}

#[tokio::test(start_paused = true)]
async fn steps_of_half_a_life_rotate_at_the_tasks_own_checkpoints() {
    let [(v0, react), (v1, rotate)] = both(|| stepping(4, LIFE / 2), |o| o).await;
    assert_eq!((v0.unwrap(), v1.unwrap()), (4, 4));
    never_worse(&react, &rotate);
    // Reacting: each browser does one step (the second would end after its death) and the
    // death cuts the next one almost whole: 3 deaths. Entry 1 starts at 0.3 s and checkpoints
    // at 10.31 s; its browser dies at 20.3 s (9.99 s redone). Each later entry starts 400 ms
    // after the death (grace 250 ms, the rest of the launch 50 ms, restore 100 ms) and its
    // browser dies 9.91 s after its own checkpoint.
    assert_eq!((react.relaunches, react.rotations), (2, 0));
    assert_eq!(react.redone_ms, 9_990 + 9_890);
    assert_eq!(react.max_redone_ms, 9_990);
    // Rotating: the first entry learns the cadence at its first checkpoint (10.31 s), too
    // late for a successor to be ready then. The successor launched at once is ready at
    // 10.71 s, and the automatic checkpoint then is the safe point (0.41 s redone). Every
    // later browser is left at the task's own checkpoint: nothing redone. The last is left
    // at the task's last checkpoint, just before it would have returned. Outlive cannot know
    // it was the last: one session more than reacting, the bound.
    assert_eq!((rotate.relaunches, rotate.rotations), (0, 4));
    assert_eq!(rotate.redone_ms, 410);
    assert_eq!(rotate.max_redone_ms, 410);
    assert_eq!((react.sessions, rotate.sessions), (4, 5));
}

#[tokio::test(start_paused = true)]
async fn steps_of_four_fifths_of_a_life_rotate_at_the_tasks_own_checkpoints() {
    let [(v0, react), (v1, rotate)] = both(|| stepping(4, LIFE * 4 / 5), |o| o).await;
    assert_eq!((v0.unwrap(), v1.unwrap()), (4, 4));
    never_worse(&react, &rotate);
    assert_eq!((react.relaunches, react.rotations), (3, 0));
    assert_eq!((rotate.relaunches, rotate.rotations), (0, 4));
    // Reacting: deaths 3.99 s and 3.89 s after the own checkpoints.
    assert_eq!(react.redone_ms, 3_990 + 2 * 3_890);
    // Rotating: only the first rotation (the cadence learned at its first checkpoint, 16.31
    // s, the successor ready 400 ms later) redoes anything.
    assert_eq!((rotate.redone_ms, rotate.max_redone_ms), (410, 410));
}

#[tokio::test(start_paused = true)]
async fn the_livelock_of_short_lives_and_long_steps_is_gone() {
    // The wizard: 5 steps of 2.5 s, a checkpoint after each, browsers that die 5 s
    // after launch, automatic checkpoints every 2 s. Rotation used to switch at every
    // automatic checkpoint and re-enter the step from its start on a successor already old:
    // no step was ever done.
    let life = Duration::from_secs(5);
    let mut out = Vec::new();
    for rotation in [crate::Rotation::Off, crate::Rotation::Expected(life)] {
        let fake = Fake::with_launch_cost(&vec![Plan::DieAfter(life); 64], LAUNCH);
        let run = run_fake(
            &fake,
            |o| {
                o.checkpoint_every(Duration::from_secs(2))
                    .rotation(rotation)
                    .max_relaunches(20)
            },
            stepping(5, Duration::from_millis(2_500)),
        );
        let (v, e) = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the run ends within 120 s");
        assert_eq!(v.unwrap(), 5);
        out.push(e);
    }
    never_worse(&out[0], &out[1]);
}

#[tokio::test(start_paused = true)]
async fn steps_longer_than_a_life_give_up_like_reacting_without_extra_sessions() {
    // Steps of 1.2 lives never finish: reacting gives up after max_relaunches deaths;
    // rotating must too, bounded, with at most one more session.
    for rotation in [crate::Rotation::Expected(LIFE), crate::Rotation::Learned] {
        let mut events = Vec::new();
        for rotation in [crate::Rotation::Off, rotation] {
            let fake = mortal(64);
            let run = run_fake(
                &fake,
                |o| {
                    o.checkpoint_every(Duration::from_secs(2))
                        .rotation(rotation)
                },
                stepping(3, LIFE * 6 / 5),
            );
            let (v, e) = tokio::time::timeout(Duration::from_secs(3_600), run)
                .await
                .expect("bounded");
            assert_eq!(v.unwrap_err().outlive().unwrap().kind(), ErrorKind::GaveUp);
            events.push(e);
        }
        let (react, rotate) = (&events[0], &events[1]);
        assert!(
            rotate.sessions <= react.sessions + 1,
            "{rotation:?}: rotating {}, reacting {}",
            rotate.to_json(),
            react.to_json()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_with_only_automatic_checkpoints_completes_and_is_bounded() {
    // Progress kept in the caller's scope, no checkpoint of its own: 50 s of work in 1 s
    // units on 20 s lives.
    let run_with = |rotation, total: u32| async move {
        let done = Arc::new(AtomicU32::new(0));
        let fake = mortal(64);
        let (v, e) = run_fake(
            &fake,
            |o| {
                o.checkpoint_every(Duration::from_secs(2))
                    .rotation(rotation)
            },
            move |(), _ctx| {
                let done = done.clone();
                async move {
                    while done.load(Ordering::SeqCst) < total {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(done.load(Ordering::SeqCst))
                }
                .boxed()
            },
        )
        .await;
        (v, e)
    };
    let (v0, react) = run_with(crate::Rotation::Off, 50).await;
    let (v1, rotate) = run_with(crate::Rotation::Expected(LIFE), 50).await;
    assert_eq!((v0.unwrap(), v1.unwrap()), (50, 50));
    // Its first checkpoint is waited for until the first entry ends (a death). From then
    // on an automatic checkpoint may be the safe point, on every other browser. A rotation
    // without progress of the task's own counts as a failure, and the next browser reacts.
    assert_eq!((rotate.relaunches, rotate.rotations), (1, 1));
    assert!(rotate.sessions <= react.sessions + 1);
    // Every cut redoes the whole entry, by the task's own account: entry 1 (20 s), entry
    // 2 from 20.7 s to the rotation at 36.31 s.
    assert_eq!(rotate.redone_ms, 20_000 + 15_610);
    // Within a unit of work (cut in flight, either way) of reacting.
    assert!(rotate.total_ms <= react.total_ms + 1_000);
    // Work that never ends: rotations without progress count toward max_relaunches.
    let (v, e) = tokio::time::timeout(
        Duration::from_secs(3_600),
        run_with(crate::Rotation::Expected(LIFE), u32::MAX),
    )
    .await
    .expect("bounded");
    assert_eq!(v.unwrap_err().outlive().unwrap().kind(), ErrorKind::GaveUp);
    assert!(e.sessions <= 7, "{}", e.to_json());
}
