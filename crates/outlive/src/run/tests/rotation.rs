//! Rotations and standbys: the switch at a safe point, successors and standbys that die, age.

use super::*;

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
    // Once the switch is armed (the successor ready), captures read the databases in full: the
    // safe point's checkpoint is resumed from at once, with no later one to make up for a
    // change Chromium reports late.
    let reads = fake.reads.lock().unwrap().clone();
    let armed = launches[1] + Duration::from_millis(100);
    let (before, after): (Vec<_>, Vec<_>) = reads.iter().partition(|(at, _)| *at < armed);
    assert!(
        before.iter().all(|(_, how)| *how == DeepReads::MayStand),
        "{before:?}"
    );
    assert!(
        !after.is_empty() && after.iter().all(|(_, how)| *how == DeepReads::InFull),
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
