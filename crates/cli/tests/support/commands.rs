//! Durable runs of a command task: the Python Playwright bank script declared with `outlive
//! worker --task`, on a [`JobsBed`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use outlive_jobs as jobs;
use outlive_jobs::ErrorKind;
use serde_json::Value;

use super::pg::{JobsBed, WorkerProcess, worker_command};

/// The Python with Playwright that `scripts/clients` installs.
pub fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients/venv/bin/python");
    let python = if python.exists() {
        python
    } else {
        // A shared target directory (CARGO_TARGET_DIR) holds the clients instead.
        std::env::var_os("CARGO_TARGET_DIR")
            .map(|d| Path::new(&d).join("clients/venv/bin/python"))
            .unwrap_or(python)
    };
    assert!(
        python.exists(),
        "the real clients are missing: run scripts/clients (scripts/test does)"
    );
    python
}

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

pub fn marker() -> String {
    format!("outlive-test-{}", uuid::Uuid::new_v4().simple())
}

/// A worker on `jb` (PostgreSQL at `database_url`) declaring the Playwright bank script as
/// task `bank-py`; the script's command line carries `marker`, its results go to `results`.
pub fn python_worker(
    jb: &JobsBed,
    database_url: &str,
    marker: &str,
    results: &Path,
    extra: &[&str],
) -> WorkerProcess {
    let task = format!(
        "bank-py={} {} {marker}",
        python().display(),
        script("bank_playwright.py").display()
    );
    let mut args = vec!["--concurrency", "1", "--task", &task];
    args.extend_from_slice(extra);
    let mut command = worker_command(database_url, &jb.bed, &jb.key, &args);
    let bank = jb.bed.bank().config();
    command
        .env("BANK_URL", jb.bed.bank().base_url())
        .env("BANK_USER", bank.username())
        .env("BANK_PASSWORD", bank.password())
        .env("BANK_TOTP_SECRET", bank.totp_secret().as_base32())
        .env("RESULT_DIR", results)
        .env_remove("POLLS")
        .env_remove("POLL_MS");
    WorkerProcess::spawn(command)
}

/// Submits a `bank-py` run once a worker has declared the task; answers its id.
pub async fn submit_python(jb: &JobsBed, input: &Value) -> String {
    let tasks = jobs::Tasks::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match jobs::submit(&jb.store, &tasks, "bank-py", input.clone()).await {
            Ok(id) => return id,
            Err(e) if matches!(e.kind(), ErrorKind::UnknownTask { .. }) => {
                assert!(std::time::Instant::now() < deadline, "never declared: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The `attempts_seen` of a bank script's `result.json`: `OUTLIVE_ATTEMPT` of every entry that
/// got as far as its first checkpoint, checked to be increasing.
pub fn attempts_seen(result: &Value) -> Vec<u64> {
    let seen: Vec<u64> = result["attempts_seen"]
        .as_array()
        .unwrap_or_else(|| panic!("no attempts_seen: {result}"))
        .iter()
        .map(|a| a.as_u64().unwrap())
        .collect();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    seen
}

/// Asserts that `run` was taken twice: first by `first`, whose part has no end it could write
/// (killed, or cut off from the database), then by the worker that completed it.
pub fn assert_taken_over(run: &outlive_jobs::RunRow, first: &str) {
    let parts: Vec<_> = run
        .history
        .iter()
        .map(|p| (p.pickup, p.worker.as_str(), p.ending.as_deref()))
        .collect();
    assert_eq!(
        parts,
        [
            (1, first, None),
            (2, run.worker.as_deref().unwrap(), Some("completed"))
        ],
        "{run:#?}"
    );
}
