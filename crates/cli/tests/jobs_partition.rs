//! Exactly one worker per run. A worker running a Python Playwright task (the Aurora Bank
//! script: sign in, poll, one transfer half-way) is cut off from PostgreSQL mid-run by a TCP
//! proxy that stops forwarding. It stops the task (its script ended, its browser released)
//! within its self-stop deadline, before its lease lapses. Another worker claims the run only
//! after the lease it last renewed has lapsed, and finishes it. Aurora's transfer log and
//! sign-ins show no step done twice, and the gateway never held two sessions at once. Once
//! the partition heals the cut-off worker's late writes are refused by their fencing token.

mod support;

use outlive_jobs::RunStatus;
use std::time::{Duration, Instant};

use outlive::CheckpointStore;
use outlive_jobs::FencedStore;
use serde_json::json;
use support::commands::{marker, python_worker, read_json, submit_python};
use support::partition::Partition;
use support::pg::{JobsBed, until};

/// The workers' heartbeat × missed heartbeats (`worker_command`: 1 s × 3): a run's lease.
const TAKEOVER: Duration = Duration::from_secs(3);
/// Unrenewed this long (heartbeat × (missed − 1)), a worker stops the task, and has half a
/// heartbeat to end it.
const SELF_STOP: Duration = Duration::from_millis(2500);

/// Polls `check` every 20 ms, up to `within`; answers when it first held, else panics with
/// `what` and `state()`.
async fn when(
    within: Duration,
    what: &str,
    check: impl Fn() -> bool,
    state: impl Fn() -> String,
) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?}: {}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_postgres_stops_its_run_before_another_takes_it() {
    let jb = JobsBed::start(None).await;
    let upstream = {
        let url = url::Url::parse(&jb.db.url).unwrap();
        let host = url.host_str().unwrap().to_owned();
        tokio::net::lookup_host((host, url.port().unwrap_or(5432)))
            .await
            .unwrap()
            .next()
            .unwrap()
    };
    let proxy = Partition::start(upstream).await;
    let results = tempfile::tempdir().unwrap();
    let (marker_a, marker_b) = (marker(), marker());
    let cut_off = python_worker(&jb, &proxy.url(&jb.db.url), &marker_a, results.path(), &[]);
    let input = json!({ "polls": 30, "poll_ms": 250 });
    let run_id = submit_python(&jb, &input).await;
    let (bank, gateway, store) = (jb.bed.bank(), jb.bed.gateway(), &jb.store);

    // The cut-off worker has the run, signed in and polling, before the transfer.
    until(store, Duration::from_secs(90), "the script polls", |_| {
        bank.counters().polls_served >= 3
    })
    .await;
    assert_eq!(
        bank.counters().transfers,
        0,
        "the cut comes before the transfer"
    );
    let other = python_worker(&jb, &jb.db.url, &marker_b, results.path(), &[]);
    let live_workers = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM apalis.workers WHERE last_seen > now() - interval '2 seconds'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    while live_workers().await < 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    proxy.cut();
    let cut_at = Instant::now();
    // The lease the cut-off worker renewed last: nothing can renew it now.
    let (lease_until, first): (f64, String) = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM lease_until)::float8, worker FROM outlive_runs WHERE run_id = $1",
    )
    .bind(&run_id)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(first.starts_with(&format!("outlive-{}-", cut_off.pid())));

    // It stops the task: its script gone, its browser released.
    // (The worker's own command line carries the marker too, in its --task.)
    let worker_pid = cut_off.pid() as i32;
    let stopped_at = when(
        Duration::from_secs(15),
        "the cut-off worker stops its task",
        || {
            gateway.status().live_sessions == 0
                && support::processes_with(&marker_a)
                    .iter()
                    .all(|p| *p == worker_pid)
        },
        || {
            format!(
                "{:?}, {:?}, its script's pids {:?}",
                gateway.status(),
                bank.counters(),
                support::processes_with(&marker_a)
            )
        },
    )
    .await;
    let stopped_in = stopped_at - cut_at;
    println!("stopped {stopped_in:?} after the cut");
    assert!(
        stopped_in <= SELF_STOP + Duration::from_millis(300),
        "stopped {stopped_in:?} after the cut"
    );

    // The other worker claims it, only once that lease lapsed.
    let runs = until(
        store,
        Duration::from_secs(30),
        "the other worker claims it",
        |runs| runs[0].pickups == 2,
    )
    .await;
    let claimed_at = Instant::now();
    assert!(claimed_at > stopped_at);
    let (claimed,): (f64,) = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM updated_at)::float8 FROM outlive_runs WHERE run_id = $1",
    )
    .bind(&run_id)
    .fetch_one(store.pool())
    .await
    .unwrap();
    println!(
        "claimed {:.3} s after the cut-off lease lapsed; {:?} after the cut",
        claimed - lease_until,
        claimed_at - cut_at
    );
    assert!(claimed >= lease_until, "claimed before the lease lapsed");
    assert_ne!(runs[0].worker.as_deref(), Some(first.as_str()));
    assert!(TAKEOVER > SELF_STOP);

    // Once the other worker has saved a checkpoint, the partition heals: the cut-off worker's
    // writes held in the proxy arrive late, and are refused.
    let newer = || async {
        sqlx::query_scalar::<_, i32>("SELECT attempt FROM outlive_checkpoints WHERE run_id = $1")
            .bind(&run_id)
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    while newer().await < 2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.heal();
    let late = FencedStore::new(store.clone(), 1)
        .save(&run_id, 99, b"late".to_vec())
        .await
        .expect_err("a checkpoint of pickup 1 is refused");
    assert!(
        late.to_string().contains("no longer holds the run"),
        "{late}"
    );

    let runs = until(store, Duration::from_secs(120), "the run ends", |runs| {
        runs[0].status != RunStatus::Running
    })
    .await;
    let run = &runs[0];
    println!("{run:#?}");
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.pickups, 2);
    assert_ne!(run.worker.as_deref(), Some(first.as_str()));
    assert!(
        newer().await >= 2,
        "the checkpoint row is the second worker's"
    );
    // The cut-off worker's part has no end it could write.
    support::commands::assert_taken_over(run, &first);
    let result = read_json(&results.path().join("result.json"));
    assert_eq!((&result["polls"], &result["input"]), (&json!(30), &input));

    // No step done twice, never two entries alive at once.
    let transfers = bank.transfers();
    assert_eq!(transfers.len(), 1, "{transfers:?}");
    assert_eq!(bank.counters().totps_accepted, 1);
    assert_eq!(
        gateway.status().peak_sessions,
        1,
        "the run never had two browsers"
    );

    for w in [cut_off, other] {
        w.stop().await;
    }
    support::assert_no_process(&marker_a);
    support::assert_no_process(&marker_b);
    drop(proxy);
    let JobsBed { db, store, bed, .. } = jb;
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
