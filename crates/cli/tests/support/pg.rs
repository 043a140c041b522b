//! A PostgreSQL database of a test's own.

use std::process::Stdio;
use std::time::Duration;

use outlive_bed::bed::TestBed;
use outlive_jobs::PgStore;
use outlive_testkit::ScratchDatabase;
use tokio::process::{Child, Command};

/// A database of the test's own, dropped by [`Scratch::drop_now`].
pub struct Scratch {
    db: ScratchDatabase,
    pub url: String,
}

impl Scratch {
    pub async fn create() -> Scratch {
        let db = ScratchDatabase::for_test().await;
        let url = db.url().to_owned();
        Scratch { db, url }
    }

    pub async fn drop_now(self, store: PgStore) {
        store.pool().close().await;
        self.db.drop_now().await.unwrap();
    }
}

/// `outlive worker` on `database_url`, with browsers from `bed`'s gateway, heartbeat 1 s × 3,
/// a checkpoint every 500 ms and `extra` arguments; stdout to nowhere, killed when dropped.
pub fn worker_command(
    database_url: &str,
    bed: &TestBed,
    key_file: &std::path::Path,
    extra: &[&str],
) -> Command {
    let mut command = Command::new(super::outlive_bin());
    command
        .args(["worker", "--solari-url"])
        .arg(bed.gateway().base_url())
        .arg("--bank-url")
        .arg(bed.bank().base_url())
        .arg("--key-file")
        .arg(key_file)
        .args(["--heartbeat", "1s", "--missed-heartbeats", "3"])
        .args(["--checkpoint-every", "500ms"])
        .args(extra)
        .env("OUTLIVE_DATABASE_URL", database_url)
        .env("SOLARI_API_KEY", bed.gateway().api_key())
        .env_remove("OUTLIVE_SEAL_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

/// One `outlive worker` process; killed when dropped.
pub struct WorkerProcess {
    pub child: Child,
}

impl WorkerProcess {
    pub fn start(db: &Scratch, bed: &TestBed, key_file: &std::path::Path, extra: &[&str]) -> Self {
        Self::spawn(worker_command(&db.url, bed, key_file, extra))
    }

    /// Starts `command` (from [`worker_command`], with whatever the test added).
    pub fn spawn(mut command: Command) -> Self {
        let child = command.spawn().expect("the outlive binary starts");
        WorkerProcess { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// SIGTERM, then waits for it to finish what it holds.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await;
    }
}

/// SIGKILLs the one of `workers` named `holder` (`outlive-PID-…`, as a run's row names its
/// worker) and waits for it to end.
pub async fn kill_holder(workers: &mut Vec<WorkerProcess>, holder: &str) {
    let victim = workers
        .iter()
        .position(|w| holder.starts_with(&format!("outlive-{}-", w.pid())))
        .expect("the worker is one of ours");
    let mut dead = workers.remove(victim);
    dead.child.start_kill().unwrap();
    dead.child.wait().await.unwrap();
}

/// Waits (up to `within`) until the only run has completed; answers the rows.
pub async fn until_completed(store: &PgStore, within: Duration) -> Vec<outlive_jobs::RunRow> {
    until(store, within, "the run completes", |r| {
        r[0].status == outlive_jobs::RunStatus::Completed
    })
    .await
}

pub fn key_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("seal.key");
    std::fs::write(&path, "42".repeat(32)).unwrap();
    path
}

/// Submits a run of the `bank` task: `polls` polls, `poll_every_ms` apart; answers its id.
pub async fn submit_bank(store: &PgStore, polls: u32, poll_every_ms: u64) -> String {
    let input = serde_json::json!({ "polls": polls, "poll_every_ms": poll_every_ms });
    outlive_jobs::submit(store, &outlive_bed::bank::tasks(None), "bank", input)
        .await
        .unwrap()
}

/// What the jobs tests start from: a scratch database set up for runs, a gateway whose sessions
/// live 300 s (at most `max_sessions` at once, the gateway's default when `None`), and a seal
/// key in a file.
pub struct JobsBed {
    pub db: Scratch,
    pub store: PgStore,
    pub bed: TestBed,
    pub key: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl JobsBed {
    pub async fn start(max_sessions: Option<usize>) -> JobsBed {
        let db = Scratch::create().await;
        let store = PgStore::connect(&db.url).await.unwrap();
        outlive_jobs::setup(&store).await.unwrap();
        let mut settings = outlive_bed::bed::dying(
            Duration::from_secs(300),
            Duration::ZERO,
            gateway::DeathMode::Close,
        );
        if let Some(n) = max_sessions {
            settings = settings.max_sessions(n);
        }
        let bed = TestBed::start(settings).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let key = key_file(&dir);
        JobsBed {
            db,
            store,
            bed,
            key,
            _dir: dir,
        }
    }

    /// An `outlive worker` on this bed, with `extra` arguments.
    pub fn worker(&self, extra: &[&str]) -> WorkerProcess {
        WorkerProcess::start(&self.db, &self.bed, &self.key, extra)
    }
}

/// Polls the runs table (every 100 ms, up to `within`) until `done` holds; answers the rows.
pub async fn until(
    store: &PgStore,
    within: Duration,
    what: &str,
    done: impl Fn(&[outlive_jobs::RunRow]) -> bool,
) -> Vec<outlive_jobs::RunRow> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let runs = outlive_jobs::runs(store).await.unwrap();
        if done(&runs) {
            return runs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {within:?}: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
