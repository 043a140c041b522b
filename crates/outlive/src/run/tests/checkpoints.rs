//! Checkpoints: holds, captures shared by their callers, progress saved with them, stale
//! ones followed at once.

use super::*;

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
