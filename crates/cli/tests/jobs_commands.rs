//! Durable runs of tasks that are commands: `outlive worker --task NAME='CMD ARGS…'` runs a
//! real Python Playwright script (`clients/bank_playwright.py`, from `scripts/clients`)
//! against the Aurora Bank, with its input in `OUTLIVE_INPUT`. Its worker SIGKILLed mid-run,
//! another worker — on the same bank and gateway — finishes it: one sign-in in all, the
//! progress handed back, the attempts going on, the input intact. Bad declarations and inputs
//! are refused with the reason before anything is queued or launched.

mod support;

use std::time::Duration;

use outlive_cli::error::ErrorKind;
use outlive_cli::jobs;
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
        runs[0].status != "running" && runs[0].status != "queued"
    })
    .await;
    let run = &runs[0];
    println!("{run:#?}");
    assert_eq!(run.run_id, run_id);
    assert_eq!(run.status, "completed", "{run:#?}");
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
    let seen: Vec<u64> = result["attempts_seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_u64().unwrap())
        .collect();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let last = *seen.last().unwrap();
    assert!(last >= 2, "attempts continue across workers: {seen:?}");
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

    let tasks = outlive_cli::bank::tasks(None);
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
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outlive"))
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
