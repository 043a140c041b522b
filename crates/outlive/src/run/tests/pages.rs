//! Page failures: recovered on a fresh page in the same browser, or by a relaunch.

use super::*;

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
