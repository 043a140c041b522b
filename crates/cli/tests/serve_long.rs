//! `outlive serve` with its default budget over sessions that die every few seconds (by close,
//! reset and silence in turn). Under an agent that reconnects and works, it is still serving
//! after 50 deaths. With no client at all, it gives up after `max_relaunches` + 1 deaths and
//! says which limit it hit.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Deaths the agent must see under `serve`.
const DEATHS: u32 = 50;

/// A gateway whose sessions die `lifetime` after their browser started, by close, reset and
/// silence in turn.
fn dying_every(lifetime: Duration) -> gateway::Config {
    gateway::Config::new()
        .lifetime(lifetime)
        .jitter(Duration::ZERO)
        .death(gateway::DeathMode::Cycle)
        .max_sessions(3)
}

/// The Python of `scripts/clients`, with `websockets`.
fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients/venv/bin/python");
    assert!(
        python.exists(),
        "the real clients are missing: run scripts/clients (scripts/test does)"
    );
    python
}

/// `outlive serve` on the gateway, with its default budget.
struct Serve {
    child: Child,
    cdp_url: String,
    /// All of its stderr, once it exits.
    stderr: JoinHandle<String>,
    /// Holds `event.json`, the wide event it writes when it stops.
    dir: tempfile::TempDir,
    /// Its stdout, kept open: a closed pipe would kill it on its next line.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Serve {
    /// Starts it and waits for its URLs.
    async fn start(gw: &gateway::Gateway) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["serve", "--heartbeat", "500ms"])
            .args(["--solari-url", gw.base_url()])
            .arg("--event-file")
            .arg(dir.path().join("event.json"))
            .env("SOLARI_API_KEY", gw.api_key())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut all = String::new();
            let _ = err.read_to_string(&mut all).await;
            all
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let cdp_url = loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("serve prints its URLs");
            if let Some(url) = line.strip_prefix("OUTLIVE_CDP_URL=") {
                break url.to_owned();
            }
        };
        Serve {
            child,
            cdp_url,
            stderr,
            dir,
            _stdout: lines,
        }
    }

    /// Panics if it has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("serve exited ({status}) while serving");
        }
    }

    /// Waits at most `limit` for it to exit; answers its exit code and stderr.
    async fn exit(mut self, limit: Duration) -> (Option<i32>, String, Value) {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("serve exits")
            .unwrap();
        let stderr = self.stderr.await.unwrap();
        let path = self.dir.path().join("event.json");
        let event = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{stderr}", path.display()));
        (status.code(), stderr, serde_json::from_str(&event).unwrap())
    }

    /// SIGTERM, then [`Serve::exit`].
    async fn stop(self) -> (Option<i32>, String, Value) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.exit(Duration::from_secs(30)).await
    }
}

/// The run options `outlive serve` takes when given no flag.
fn default_options() -> outlive_cli::cmd::RunOptionArgs {
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        options: outlive_cli::cmd::RunOptionArgs,
    }
    <Flags as clap::Parser>::parse_from(["outlive"]).options
}

/// Checks that the gateway released every session and Chromium, then stops it.
async fn finish(gw: gateway::Gateway) {
    support::assert_gateway_clean(&gw).await;
    let status = gw.shutdown().await.unwrap();
    assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_outlives_fifty_deaths_under_a_working_agent() {
    let python = python();
    let started = std::time::Instant::now();
    let gw = gateway::spawn(dying_every(Duration::from_secs(2)))
        .await
        .unwrap();
    let mut serve = Serve::start(&gw).await;
    let mut agent = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/serve_agent.py"))
        .env("OUTLIVE_CDP_URL", &serve.cdp_url)
        .env("BROWSERS", (DEATHS + 1).to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let mut browsers = 0;
    let worked = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            browsers = line
                .strip_prefix("browser ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected line from the agent: {line}"));
            serve.assert_running();
        }
        agent.wait().await.unwrap()
    };
    let status = tokio::time::timeout(Duration::from_secs(400), worked)
        .await
        .unwrap_or_else(|_| panic!("the agent worked in {browsers} browsers only"));
    assert!(status.success(), "{status}");
    assert_eq!(browsers, DEATHS + 1);
    serve.assert_running();
    eprintln!("{DEATHS} deaths in {:.0?}", started.elapsed());

    let (code, stderr, event) = serve.stop().await;
    assert_eq!(code, Some(0), "stderr:\n{stderr}");
    assert!(
        event["relaunches"].as_u64().unwrap() >= u64::from(DEATHS),
        "{event}"
    );
    finish(gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_client_gives_up_after_max_relaunches() {
    let max_relaunches = default_options().max_relaunches;
    let gw = gateway::spawn(dying_every(Duration::from_secs(1)))
        .await
        .unwrap();
    let serve = Serve::start(&gw).await;
    let (code, stderr, event) = serve.exit(Duration::from_secs(120)).await;
    assert_eq!(code, Some(outlive::EXIT_GAVE_UP), "stderr:\n{stderr}");
    let limit = format!(
        "gave up after {} browser failures in a row without progress (max_relaunches is {max_relaunches})",
        max_relaunches + 1
    );
    assert!(stderr.contains(&limit), "stderr:\n{stderr}");
    assert_eq!(
        event["relaunches"].as_u64(),
        Some(u64::from(max_relaunches)),
        "{event}"
    );
    finish(gw).await;
}
