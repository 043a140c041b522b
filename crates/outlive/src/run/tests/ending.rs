//! How an entry ends: within the grace, with an error after a death, with the task's error.

use super::*;

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
