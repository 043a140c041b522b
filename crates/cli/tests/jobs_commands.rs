//! Durable runs of tasks that are commands: `outlive worker --task NAME='CMD ARGS…'` runs a
//! real Python Playwright script (`clients/bank_playwright.py`, from `scripts/clients`)
//! against the Aurora Bank, with its input in `OUTLIVE_INPUT`. Its worker SIGKILLed mid-run,
//! another worker — on the same bank and gateway — finishes it: one sign-in in all, the
//! progress handed back, the attempts going on, the input intact. Bad declarations and inputs
//! are refused with the reason before anything is queued or launched.

mod support;

use outlive_jobs::RunStatus;
use std::time::Duration;

use outlive_jobs as jobs;
use outlive_jobs::ErrorKind;
use serde_json::json;
use support::commands::{marker, python_worker, read_json, submit_python};
use support::pg::{JobsBed, until, worker_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_task_whose_worker_is_killed_is_finished_by_another() {
    let jb = JobsBed::start(None).await;
    let results = tempfile::tempdir().unwrap();
    let (marker_a, marker_b) = (marker(), marker());
    let mut workers = vec![
        (
            python_worker(&jb, &jb.db.url, &marker_a, results.path(), &[]),
            marker_a,
        ),
        (
            python_worker(&jb, &jb.db.url, &marker_b, results.path(), &[]),
            marker_b,
        ),
    ];
    let input = json!({ "polls": 16, "poll_ms": 300, "note": "ünïcödé \" and 'quotes'" });
    let run_id = submit_python(&jb, &input).await;
    let (bank, store) = (jb.bed.bank(), &jb.store);

    // Signed in, and polling (each poll checkpointed with its progress).
    let runs = until(store, Duration::from_secs(90), "the script polls", |_| {
        bank.counters().polls_served >= 4
    })
    .await;
    assert_eq!(bank.counters().totps_accepted, 1);
    let first = runs[0].worker.clone().expect("a worker took it");
    let victim = workers
        .iter()
        .position(|(w, _)| first.starts_with(&format!("outlive-{}-", w.pid())))
        .expect("the worker is one of ours");
    let (mut dead, dead_marker) = workers.remove(victim);
    dead.child.start_kill().unwrap(); // SIGKILL
    dead.child.wait().await.unwrap();

    let runs = until(store, Duration::from_secs(120), "the run ends", |runs| {
        runs[0].status != RunStatus::Running && runs[0].status != RunStatus::Queued
    })
    .await;
    let run = &runs[0];
    println!("{run:#?}");
    assert_eq!(run.run_id, run_id);
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!(run.pickups, 2);
    assert_ne!(run.worker.as_deref(), Some(first.as_str()));
    assert_eq!(run.result, Some(json!({ "exitCode": 0 })));
    assert_eq!(
        bank.counters().totps_accepted,
        1,
        "signed in once, across both workers"
    );

    let result = read_json(&results.path().join("result.json"));
    assert_eq!(result["input"], input, "the input intact: {result}");
    assert_eq!(result["polls"], 16, "{result}");
    let seen = support::commands::attempts_seen(&result);
    let last = *seen.last().unwrap();
    assert!(last >= 2, "attempts continue across workers: {seen:?}");
    // Each worker's part: the killed one could not say how it ended.
    support::commands::assert_taken_over(run, &first);
    assert_eq!(run.history[1].event, run.event);
    let event = run.event.as_ref().expect("the wide event is stored");
    assert_eq!(event["attempts"].as_u64(), Some(last), "{event}");
    // The entry on the second worker started from the first one's progress.
    let taken = read_json(&results.path().join(format!("attempt-{last}.json")));
    assert_eq!(taken["signedInHere"], false, "{taken}");
    assert_eq!(taken["progressIn"]["signedIn"], true, "{taken}");
    assert!(
        taken["progressIn"]["polls"].as_u64().unwrap() >= 1,
        "{taken}"
    );
    assert_eq!(taken["input"], input);

    // The killed worker's script lost its endpoint with it, and ended.
    support::assert_no_process(&dead_marker);
    for (w, m) in workers {
        w.stop().await;
        support::assert_no_process(&m);
    }
    let JobsBed { db, store, bed, .. } = jb;
    // The killed worker could not release its session; the gateway's shutdown ends it.
    let status = bed.shutdown().await.unwrap();
    assert_eq!(status.chromium_processes, 0);
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_declarations_and_inputs_are_refused_with_the_reason() {
    let jb = JobsBed::start(None).await;
    // A worker whose --task cannot be parsed or found does not start, and says which.
    for (declaration, says) in [
        ("broken=sh -c 'unclosed", "\"broken\" cannot be declared"),
        ("gone=/no/such/program --x", "no such executable"),
        ("missing=outlive-no-such-program-xyz", "command not found"),
        ("bank=sh -c true", "declared twice"),
    ] {
        let out = worker_command(&jb.db.url, &jb.bed, &jb.key, &["--task", declaration])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{declaration}: {stderr}");
        assert!(stderr.contains(says), "{declaration}: {stderr}");
    }
    let declared: i64 = sqlx::query_scalar("SELECT count(*) FROM outlive_tasks")
        .fetch_one(jb.store.pool())
        .await
        .unwrap();
    assert_eq!(declared, 0, "no refused worker declared anything");

    let tasks = outlive_bed::bank::tasks(None);
    // An unknown name, a Rust task's input that does not fit, an input over the cap.
    let e = jobs::submit(&jb.store, &tasks, "nope", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::UnknownTask { .. }), "{e:?}");
    assert!(e.to_string().contains("bank"), "{e}");
    let e = jobs::submit(&jb.store, &tasks, "bank", json!({ "polls": "many" }))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Input { .. }), "{e:?}");
    let big = json!({ "blob": "x".repeat(jobs::MAX_INPUT_BYTES) });
    let e = jobs::submit(&jb.store, &tasks, "bank", big.clone())
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Input { .. }), "{e:?}");
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(source.contains("over the cap"), "{source}");

    // A declared command task: any JSON under the cap, nothing over it.
    let results = tempfile::tempdir().unwrap();
    let worker = python_worker(&jb, &jb.db.url, &marker(), results.path(), &[]);
    submit_python(&jb, &json!({ "polls": 1 })).await;
    let e = jobs::submit(&jb.store, &jobs::Tasks::new(), "bank-py", big)
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Input { .. }), "{e:?}");
    worker.stop().await;

    // Not JSON, through the command: refused before connecting.
    let out = tokio::process::Command::new(support::outlive_bin())
        .args(["submit", "bank-py", "--input", "{not json"])
        .env("OUTLIVE_DATABASE_URL", &jb.db.url)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));

    let runs = jobs::runs(&jb.store).await.unwrap();
    assert_eq!(runs.len(), 1, "only the good run was queued: {runs:#?}");
    let JobsBed { db, store, bed, .. } = jb;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_push_leaves_no_row() {
    let jb = JobsBed::start(None).await;
    let tasks = outlive_bed::bank::tasks(None);
    // Every new job refused by the queue's table: the run's row goes with it.
    sqlx::query("ALTER TABLE apalis.jobs ADD CONSTRAINT refuse_all CHECK (false) NOT VALID")
        .execute(jb.store.pool())
        .await
        .unwrap();
    let e = jobs::submit(&jb.store, &tasks, "bank", json!({ "polls": 1 }))
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Database { .. }), "{e:?}");
    assert!(jobs::runs(&jb.store).await.unwrap().is_empty());
    sqlx::query("ALTER TABLE apalis.jobs DROP CONSTRAINT refuse_all")
        .execute(jb.store.pool())
        .await
        .unwrap();
    jobs::submit(&jb.store, &tasks, "bank", json!({ "polls": 1 }))
        .await
        .unwrap();
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM apalis.jobs")
        .fetch_one(jb.store.pool())
        .await
        .unwrap();
    assert_eq!((jobs::runs(&jb.store).await.unwrap().len(), queued), (1, 1));
    let JobsBed { db, store, bed, .. } = jb;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_is_never_taken_or_is_stopped_by_its_worker() {
    let jb = JobsBed::start(None).await;
    let results = tempfile::tempdir().unwrap();
    let marker = marker();
    let (bank, gateway, store) = (jb.bed.bank(), jb.bed.gateway(), &jb.store);
    // Declared as a worker declares it, with no worker running: the run waits in the queue.
    sqlx::query("INSERT INTO outlive_tasks (name) VALUES ('bank-py')")
        .execute(store.pool())
        .await
        .unwrap();
    let queued = submit_python(&jb, &json!({ "polls": 1 })).await;
    let runs = jobs::runs(store).await.unwrap();
    assert_eq!(
        (runs[0].status, runs[0].pickups),
        (RunStatus::Queued, 0),
        "{runs:#?}"
    );
    assert_eq!(
        jobs::cancel(store, &queued).await.unwrap(),
        jobs::Cancelled::Queued
    );
    let e = jobs::cancel(store, &queued).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::RunOver { .. }), "{e}");
    let e = jobs::cancel(store, "no-such-run").await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::NoSuchRun { .. }), "{e}");

    // A long run, cancelled while it polls: its worker ends the script and releases the
    // browser within a heartbeat and a half; the status stays `cancelled`.
    let worker = python_worker(&jb, &jb.db.url, &marker, results.path(), &[]);
    let running = submit_python(&jb, &json!({ "polls": 500, "poll_ms": 200 })).await;
    until(store, Duration::from_secs(90), "the script polls", |_| {
        bank.counters().polls_served >= 2
    })
    .await;
    let out = tokio::process::Command::new(support::outlive_bin())
        .args(["cancel", &running])
        .env("OUTLIVE_DATABASE_URL", &jb.db.url)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cancelled_at = std::time::Instant::now();
    let worker_pid = worker.pid() as i32;
    loop {
        let script_gone = support::processes_with(&marker)
            .iter()
            .all(|p| *p == worker_pid);
        if script_gone && gateway.status().live_sessions == 0 {
            break;
        }
        assert!(
            cancelled_at.elapsed() < Duration::from_secs(10),
            "stopped within 10 s: {:?}",
            gateway.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("stopped {:?} after the cancel", cancelled_at.elapsed());
    assert!(cancelled_at.elapsed() < Duration::from_millis(2500));

    // The worker goes on: the next run completes, and neither cancelled one changed.
    let next = submit_python(&jb, &json!({ "polls": 1 })).await;
    let runs = until(
        store,
        Duration::from_secs(90),
        "the next run completes",
        |runs| {
            runs.iter()
                .any(|r| r.run_id == next && r.status == RunStatus::Completed)
        },
    )
    .await;
    let by_id = |id: &str| runs.iter().find(|r| r.run_id == id).unwrap().clone();
    assert_eq!(
        (by_id(&queued).status, by_id(&queued).pickups),
        (RunStatus::Cancelled, 0),
        "never taken"
    );
    assert_eq!(
        (by_id(&running).status, by_id(&running).pickups),
        (RunStatus::Cancelled, 1)
    );
    assert!(by_id(&running).result.is_none());
    let stopped = &by_id(&running).history;
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].ending.as_deref(), Some("cancelled"));
    assert!(stopped[0].ended_at_ms.is_some());
    assert!(by_id(&queued).history.is_empty());
    worker.stop().await;
    support::assert_no_process(&marker);
    let JobsBed { db, store, bed, .. } = jb;
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
