//! Durable runs as jobs, end to end: real `outlive worker` processes taking runs from a real
//! PostgreSQL queue (apalis), browsers from the gateway through the Solari provider, the
//! Aurora Bank task. A worker killed with SIGKILL mid-run loses its run to another worker,
//! which releases the session the dead one held and resumes the run from the sealed
//! checkpoint without a second sign-in. Two workers share
//! twelve runs under a cluster-wide limit of three sessions. A run taken too often (its workers
//! died under it) is failed without a browser.

mod support;

use outlive_jobs::RunStatus;
use std::time::Duration;

use support::pg::{JobsBed, kill_holder, submit_bank, until, until_completed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_worker_is_killed_is_finished_by_another_without_a_second_sign_in() {
    let jb = JobsBed::start(None).await;
    let mut workers = vec![
        jb.worker(&["--concurrency", "1"]),
        jb.worker(&["--concurrency", "1"]),
    ];
    let JobsBed { db, store, bed, .. } = jb;
    let run_id = submit_bank(&store, 40, 200).await;

    // Signed in, and a few polls saved with the checkpoints.
    let runs = until(
        &store,
        Duration::from_secs(60),
        "a worker is polling",
        |_| bed.bank().counters().polls_served >= 6,
    )
    .await;
    assert_eq!(bed.bank().counters().totps_accepted, 1);
    let first = runs[0].worker.clone().expect("a worker took it");
    // The row records the session the worker holds (its id, never a token).
    let held: serde_json::Value =
        sqlx::query_scalar("SELECT held_sessions FROM outlive_runs WHERE run_id = $1")
            .bind(&run_id)
            .fetch_one(store.pool())
            .await
            .unwrap();
    let held_id = held[0]["id"]
        .as_str()
        .expect("a session recorded")
        .to_owned();
    assert_eq!(held[0]["provider"], "solari", "{held}");
    assert!(!held.to_string().contains("token"), "{held}");
    kill_holder(&mut workers, &first).await;
    let polls_at_kill = bed.bank().counters().polls_served;

    // Once the run is taken over, the dead worker's session is released within a heartbeat.
    until(
        &store,
        Duration::from_secs(60),
        "the run is taken over",
        |runs| runs[0].pickups == 2,
    )
    .await;
    let taken = tokio::time::Instant::now();
    loop {
        let view = bed.client().sessions().get(&held_id).await.unwrap();
        if view.status.as_deref() == Some("released") {
            break;
        }
        assert!(
            taken.elapsed() < Duration::from_secs(1),
            "the dead worker's session is still {:?} a heartbeat (1 s) after the takeover",
            view.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let runs = until_completed(&store, Duration::from_secs(90)).await;
    let run = &runs[0];
    println!("{run:#?}");
    assert_eq!(run.run_id, run_id);
    assert_eq!(
        run.pickups, 2,
        "taken twice: by the killed worker and by the other"
    );
    assert_ne!(run.worker.as_deref(), Some(first.as_str()));
    assert_eq!(run.result.as_ref().unwrap()["polls"], 40);
    assert_eq!(
        bed.bank().counters().totps_accepted,
        1,
        "signed in once, across both workers"
    );
    assert_eq!(run.result.as_ref().unwrap()["signInsLastEntry"], 0);
    let event = run.event.as_ref().expect("the wide event is stored");
    assert_eq!(event["runId"], run_id.as_str());
    assert!(
        event["attempts"].as_u64().unwrap() >= 2,
        "entries continue across workers: {event}"
    );
    // The second worker went on from the checkpoint, not from the start: at most the polls
    // after the last checkpoint were done again.
    let served = bed.bank().counters().polls_served;
    assert!(
        served < polls_at_kill + 40,
        "served {served}, {polls_at_kill} before the kill"
    );

    assert_eq!(event["takeoverReleased"], 1, "{event}");
    assert_eq!(event["takeoverReleaseFailed"], 0, "{event}");

    for w in workers {
        w.stop().await;
    }
    // The killed worker's session was released by the one that took over: nothing is left.
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_released(bed).await;
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_twelve_runs_under_a_limit_of_three_sessions() {
    let jb = JobsBed::start(Some(12)).await;
    // Each worker would run three at once; together they may hold three sessions.
    let extra = ["--concurrency", "3", "--max-sessions", "3"];
    let workers = [jb.worker(&extra), jb.worker(&extra)];
    let JobsBed { db, store, bed, .. } = jb;
    for _ in 0..12 {
        submit_bank(&store, 4, 100).await;
    }
    let runs = until(
        &store,
        Duration::from_secs(240),
        "all twelve complete",
        |runs| runs.iter().all(|r| r.status == RunStatus::Completed),
    )
    .await;
    assert_eq!(runs.len(), 12);
    let workers_used: std::collections::BTreeSet<_> =
        runs.iter().filter_map(|r| r.worker.clone()).collect();
    println!("runs per worker: {workers_used:?}");
    let peak = bed.gateway().status().peak_sessions;
    assert!(peak <= 3, "the gateway saw {peak} sessions at once");
    assert!(peak >= 2, "runs did overlap (peak {peak})");
    for w in workers {
        w.stop().await;
    }
    // Every session released by its worker.
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_taken_too_often_is_failed_without_a_browser() {
    let jb = JobsBed::start(None).await;
    let run_id = submit_bank(&jb.store, 4, 100).await;
    // As if two workers had died under it already.
    sqlx::query("UPDATE outlive_runs SET pickups = 2 WHERE run_id = $1")
        .bind(&run_id)
        .execute(jb.store.pool())
        .await
        .unwrap();
    let worker = jb.worker(&["--max-pickups", "2"]);
    let JobsBed { db, store, bed, .. } = jb;

    let runs = until(
        &store,
        Duration::from_secs(60),
        "the run is failed",
        |runs| runs[0].status != RunStatus::Queued && runs[0].status != RunStatus::Running,
    )
    .await;
    let run = &runs[0];
    println!("{run:#?}");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.pickups, 3);
    let error = run.error.as_deref().unwrap();
    assert!(
        error.contains("taken 3 times") && error.contains("max_pickups is 2"),
        "{error}"
    );
    assert_eq!(bed.gateway().status().peak_sessions, 0, "no browser for it");
    assert_eq!(bed.bank().counters().totps_accepted, 0);

    // The worker goes on taking runs.
    submit_bank(&store, 2, 100).await;
    let runs = until(
        &store,
        Duration::from_secs(90),
        "the next run completes",
        |runs| runs.iter().any(|r| r.status == RunStatus::Completed),
    )
    .await;
    assert_eq!(runs.len(), 2);
    worker.stop().await;
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
