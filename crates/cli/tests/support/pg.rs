//! A PostgreSQL database of a test's own.

use std::process::Stdio;
use std::time::Duration;

use outlive_cli::bed::TestBed;
use outlive_cli::durable::PgStore;
use tokio::process::{Child, Command};

/// A database of the test's own, dropped by [`Scratch::drop_now`].
pub struct Scratch {
    admin: sqlx::PgPool,
    name: String,
    pub url: String,
}

impl Scratch {
    pub async fn create() -> Scratch {
        let base = std::env::var("OUTLIVE_TEST_DATABASE_URL").expect(
            "OUTLIVE_TEST_DATABASE_URL: run the tests through scripts/test (it starts a local \
             PostgreSQL with scripts/postgres), or point it at a database you may create \
             databases in",
        );
        let admin = sqlx::PgPool::connect(&base)
            .await
            .expect("PostgreSQL reachable at OUTLIVE_TEST_DATABASE_URL");
        let name = format!("outlive_test_{}", uuid::Uuid::new_v4().simple());
        // The name is ours (a UUID), never input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
        let mut url = url::Url::parse(&base).unwrap();
        url.set_path(&name);
        Scratch {
            admin,
            name,
            url: url.to_string(),
        }
    }

    pub async fn drop_now(self, store: PgStore) {
        store.pool().close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await
        .unwrap();
    }
}

/// One `outlive worker` process; killed when dropped.
pub struct WorkerProcess {
    pub child: Child,
}

impl WorkerProcess {
    pub fn start(db: &Scratch, bed: &TestBed, key_file: &std::path::Path, extra: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["worker", "--solari-url"])
            .arg(bed.gateway().base_url())
            .arg("--bank-url")
            .arg(bed.bank().base_url())
            .arg("--key-file")
            .arg(key_file)
            .args(["--heartbeat", "1s", "--missed-heartbeats", "3"])
            .args(["--checkpoint-every", "500ms"])
            .args(extra)
            .env("OUTLIVE_DATABASE_URL", &db.url)
            .env("SOLARI_API_KEY", bed.gateway().api_key())
            .env_remove("OUTLIVE_SEAL_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the outlive binary starts");
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

pub fn key_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("seal.key");
    std::fs::write(&path, "42".repeat(32)).unwrap();
    path
}
