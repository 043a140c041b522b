//! OpenTelemetry traces, received by a real OTLP/HTTP receiver: `clients/otlp_receiver.py`
//! decodes each `ExportTraceServiceRequest` with PyPI's `opentelemetry-proto` (installed by
//! `scripts/clients`) and prints every span as a JSON line.
//!
//! A demo run through deaths is one trace: its run span, an entry span per attempt, a death
//! event with its cause per death, and no secret anywhere in what was sent. A collector that
//! refuses connections, or answers slowly, changes nothing in the run. A durable run whose
//! worker was SIGKILLed and taken over by another is one trace across both workers (needs
//! `OUTLIVE_TEST_DATABASE_URL`, as the other `_pg` tests).

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// How long anything the tests wait for may take.
const BOUND: Duration = Duration::from_secs(60);

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The Python of `scripts/clients`, with `opentelemetry-proto`.
fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients/venv/bin/python");
    assert!(
        python.exists(),
        "the real clients are missing: run scripts/clients (scripts/test does)"
    );
    python
}

/// The receiver: a Python process, and the spans it printed so far.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Value>>>,
    /// The number of spans received, changed at each.
    count: watch::Receiver<usize>,
    raw: PathBuf,
    _reader: AbortOnDrop,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts it; `delay`: how long it holds each request before answering.
    async fn start(delay: Option<Duration>) -> Receiver {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.bin");
        let mut command = Command::new(python());
        command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/otlp_receiver.py"))
            .arg(&raw);
        if let Some(delay) = delay {
            command.arg("--delay").arg(delay.as_secs_f64().to_string());
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines
            .next_line()
            .await
            .unwrap()
            .expect("the receiver says where");
        let address = first
            .strip_prefix("listening ")
            .expect("listening HOST:PORT");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let (tx, count) = watch::channel(0);
        let kept = spans.clone();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let span: Value = serde_json::from_str(&line).expect("a span as JSON");
                kept.lock().unwrap().push(span);
                tx.send_modify(|n| *n += 1);
            }
        });
        Receiver {
            endpoint: format!("http://{address}"),
            spans,
            count,
            raw,
            _reader: AbortOnDrop(reader),
            _child: child,
            _dir: dir,
        }
    }

    /// The spans, once `done` holds for them (within [`BOUND`]).
    async fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut count = self.count.clone();
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if done(&spans) {
                return spans;
            }
            let more = tokio::time::timeout_at(deadline, count.changed()).await;
            assert!(
                matches!(more, Ok(Ok(()))),
                "waited {BOUND:?} for {what}; received:\n{}",
                spans
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }

    /// Every request body received, as bytes.
    fn raw(&self) -> Vec<u8> {
        std::fs::read(&self.raw).unwrap_or_default()
    }
}

/// `outlive demo` sending its traces to `endpoint`, exported every 100 ms.
fn demo(endpoint: &str, args: &[&str]) -> Command {
    let mut command = Command::new(support::outlive_bin());
    command
        .arg("demo")
        .args(args)
        .arg("--json")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `command` to its end (within [`BOUND`]): its wide event, from `--json`.
async fn finished(mut command: Command) -> Value {
    let out = tokio::time::timeout(BOUND, command.output())
        .await
        .expect("the demo ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().expect("the event")).unwrap()
}

fn named<'s>(spans: &'s [Value], name: &str) -> Vec<&'s Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// How long `span` was open.
fn duration(span: &Value) -> Duration {
    let (start, end) = (span["start_ns"].as_u64(), span["end_ns"].as_u64());
    Duration::from_nanos(end.unwrap().saturating_sub(start.unwrap()))
}

/// The value of attribute `key` of `span`.
fn attr<'s>(span: &'s Value, key: &str) -> &'s Value {
    &span["attributes"][key]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_through_deaths_is_one_trace_with_its_entries_and_deaths() {
    let receiver = Receiver::start(None).await;
    let args = ["--lifetime", "4s", "--task", "9s", "--death", "close"];
    let event = finished(demo(&receiver.endpoint, &args)).await;
    assert_eq!(event["outcome"], "completed", "{event}");
    let attempts = event["attempts"].as_u64().unwrap();
    assert!(attempts >= 2, "the run went through deaths: {event}");
    let spans = receiver
        .wait_for("the run's span", |s| !named(s, "outlive").is_empty())
        .await;

    let run = named(&spans, "outlive");
    assert_eq!(run.len(), 1, "one run span");
    let run = run[0];
    assert_eq!(run["service"], "outlive", "the default service name");
    assert_eq!(attr(run, "outcome"), "completed");
    assert_eq!(run["status"], 0, "no error status: {run}");
    assert_eq!(attr(run, "run_id"), &event["runId"]);
    assert_eq!(attr(run, "attempts").as_u64(), Some(attempts), "{run}");
    let trace = &run["trace_id"];
    for span in &spans {
        assert_eq!(&span["trace_id"], trace, "one trace: {span}");
    }

    // An entry span per attempt, each a child of the run's; how each ended.
    let mut entries = named(&spans, "entry");
    entries.sort_by_key(|e| attr(e, "attempt").as_u64());
    let numbers: Vec<u64> = entries
        .iter()
        .map(|e| attr(e, "attempt").as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=attempts).collect::<Vec<_>>());
    for entry in &entries {
        assert_eq!(entry["parent_span_id"], run["span_id"]);
    }
    let (last, cut) = entries.split_last().unwrap();
    assert_eq!(attr(last, "ended"), "returned");
    for entry in cut {
        assert_eq!(attr(entry, "ended"), "failed", "{entry}");
        assert!(attr(entry, "cause").is_string(), "{entry}");
        assert_eq!(entry["status"], 2, "an error status: {entry}");
    }
    assert_eq!(
        attr(entries[1], "resumed"),
        true,
        "restored from a checkpoint"
    );
    assert!(
        attr(entries[1], "progress_bytes").as_u64() > Some(0),
        "handed the progress saved: {}",
        entries[1]
    );

    // A death event per relaunch, with its cause; launches as events, checkpoints as spans.
    let deaths: Vec<&Value> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "browser died")
        .collect();
    assert_eq!(deaths.len() as u64, attempts - 1, "{run}");
    for death in &deaths {
        assert_eq!(attr(death, "cause"), "closed", "{death}");
        assert!(attr(death, "confirmed").is_string(), "{death}");
    }
    let launches: Vec<&Value> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "browser launched")
        .collect();
    assert!(
        launches.len() as u64 >= attempts,
        "a launch per browser: {run}"
    );
    assert!(launches.iter().all(|l| attr(l, "provider") == "solari"));
    assert!(
        launches
            .iter()
            .all(|l| attr(l, "took_ms").as_i64() > Some(0))
    );
    assert!(
        named(&spans, "checkpoint")
            .iter()
            .any(|c| attr(c, "bytes").as_u64() > Some(0)),
        "checkpoint spans with their size"
    );
    // A checkpoint span ends with its capture, not with the page (its watchers are in no
    // span).
    for checkpoint in named(&spans, "checkpoint") {
        let took = duration(checkpoint);
        assert!(took < Duration::from_secs(3), "{took:?}: {checkpoint}");
    }

    no_secret_in(&receiver.raw());
}

/// The secrets of the demo, searched by value and by shape in everything sent, as in
/// `demo_trace.rs`.
fn no_secret_in(raw: &[u8]) {
    assert!(!raw.is_empty());
    let text = String::from_utf8_lossy(raw);
    let defaults = aurora::Config::new();
    let shapes = [
        ("a session token", r"token=[A-Za-z0-9_\-]{6,}".to_owned()),
        (
            "a session cookie",
            r"aurora_(session|pending)=[0-9a-f]{16,}".to_owned(),
        ),
        ("the password", regex::escape(defaults.password())),
        ("the localStorage value", regex::escape(defaults.pref())),
        ("a CDP websocket URL", r"ws://[^\s]*devtools".to_owned()),
    ];
    for (what, shape) in shapes {
        let found = Regex::new(&shape).unwrap().find(&text);
        assert!(
            found.is_none(),
            "{what} was sent: {:?}",
            found.map(|m| m.as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_slow_changes_nothing_in_the_run() {
    let args = ["--lifetime", "3s", "--task", "4s", "--death", "close"];
    // Nothing listens on a port just let go.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let event = finished(demo(&refused, &args)).await;
    assert_eq!(event["outcome"], "completed", "{event}");

    // A collector that holds every request 30 s, an export timeout longer still, and a
    // queue of 4 (the spans past it dropped): the exit waits for it no longer than its flush
    // allows.
    let slow = Receiver::start(Some(Duration::from_secs(30))).await;
    let started = tokio::time::Instant::now();
    let mut command = demo(&slow.endpoint, &args);
    command
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "120000")
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "4")
        .env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2");
    let event = finished(command).await;
    assert_eq!(event["outcome"], "completed", "{event}");
    let run = Duration::from_millis(event["totalMs"].as_u64().unwrap());
    let after = started.elapsed().saturating_sub(run);
    assert!(
        after < outlive_cli::traces::FLUSH + Duration::from_secs(2),
        "the run took {run:?}; the process {after:?} more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_run_taken_over_after_a_kill_is_one_trace() {
    let receiver = Receiver::start(None).await;
    let jb = support::pg::JobsBed::start(None).await;
    let worker = |jb: &support::pg::JobsBed| {
        let mut command =
            support::pg::worker_command(&jb.db.url, &jb.bed, &jb.key, &["--concurrency", "1"]);
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
        support::pg::WorkerProcess::spawn(command)
    };
    let first = worker(&jb);
    let first_pid = first.pid();
    let run_id = support::pg::submit_bank(&jb.store, 80, 200).await;

    // The first worker made the trace's root and took a checkpoint: their spans are out.
    // (Its job and run spans never end: they are lost with it.)
    let from = |pid: u32, name: &'static str| {
        move |s: &Value| s["pid"].as_u64() == Some(u64::from(pid)) && s["name"] == name
    };
    let spans = receiver
        .wait_for("the first worker's root and checkpoint", |s| {
            s.iter().any(from(first_pid, "checkpoint")) && s.iter().any(from(first_pid, "run"))
        })
        .await;
    let trace = spans
        .iter()
        .find(|s| from(first_pid, "checkpoint")(s))
        .unwrap()["trace_id"]
        .clone();
    let mut first = first;
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();

    let second = worker(&jb);
    let second_pid = second.pid();
    support::pg::until(&jb.store, BOUND, "the run completed", |runs| {
        runs.iter()
            .any(|r| r.run_id == run_id && r.status == outlive_jobs::RunStatus::Completed)
    })
    .await;
    second.stop().await;
    let spans = receiver
        .wait_for("the second worker's job span", |s| {
            s.iter().any(from(second_pid, "job"))
        })
        .await;

    for span in &spans {
        assert_eq!(
            span["trace_id"], trace,
            "one trace across both workers: {span}"
        );
    }
    let job = spans.iter().find(|s| from(second_pid, "job")(s)).unwrap();
    assert_eq!(attr(job, "run_id"), run_id.as_str());
    assert_eq!(attr(job, "pickup"), 2);
    assert_eq!(attr(job, "ended"), "completed");
    let (stored,): (String,) =
        sqlx::query_as("SELECT traceparent FROM outlive_runs WHERE run_id = $1")
            .bind(&run_id)
            .fetch_one(jb.store.pool())
            .await
            .unwrap();
    // The root: the first worker's `run` span, ended at once; the row keeps its context,
    // which every pickup's `job` span is a child of (the first's is lost with its worker,
    // the takeover's is here).
    let roots: Vec<&Value> = spans.iter().filter(|s| s["name"] == "run").collect();
    assert_eq!(roots.len(), 1, "one root: {roots:?}");
    let root = roots[0];
    assert_eq!(root["pid"].as_u64(), Some(u64::from(first_pid)));
    assert_eq!(root["parent_span_id"], "", "a root: {root}");
    assert_eq!(attr(root, "run_id"), run_id.as_str());
    assert!(
        duration(root) < Duration::from_secs(1),
        "ended at once: {root}"
    );
    assert_eq!(stored.split('-').nth(2), root["span_id"].as_str());
    assert_eq!(
        job["parent_span_id"], root["span_id"],
        "the takeover's span is a child of the root"
    );
    let run = spans
        .iter()
        .find(|s| from(second_pid, "outlive")(s))
        .expect("its run span");
    assert_eq!(run["parent_span_id"], job["span_id"]);
    assert_eq!(attr(run, "outcome"), "completed");
    no_secret_in(&receiver.raw());

    let support::pg::JobsBed { db, store, bed, .. } = jb;
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
