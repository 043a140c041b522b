//! `outlive serve` as a child of the lab, and the reconnecting agent that works through it:
//! what the serve soak and the weather benchmark share.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::binary::outlive_binary;
use crate::error::{Error, ErrorKind};
use outlive_bed::bed::TestBed;

/// The reconnecting raw-CDP agent the `serve_long` test uses too.
const AGENT: &str = include_str!("../../cli/tests/clients/serve_agent.py");

/// Which `serve` to start.
#[derive(Debug, Clone)]
pub enum Build {
    /// This build's `outlive` binary ([`outlive_binary`]).
    This,
    /// Another build's `outlive` binary (`outlive serve`, the same flags).
    Binary(PathBuf),
}

impl Build {
    fn command(&self) -> Result<Command, Error> {
        let exe = match self {
            Build::This => outlive_binary()?,
            Build::Binary(path) => path.clone(),
        };
        Ok(Command::new(exe))
    }
}

/// `outlive serve` as a child, with its stdout drained.
pub struct Serve {
    child: Child,
    /// The CDP URL it printed.
    pub cdp_url: String,
}

impl Serve {
    /// Starts `build`'s `serve` on `bed`'s gateway, writing its wide event to `event_file`;
    /// its stderr goes to `log` (with `RUST_LOG=log_filter`), or nowhere.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Bench`] when there is no `outlive` binary, or it cannot start or exits
    /// before printing its URLs.
    pub async fn start(
        build: &Build,
        bed: &TestBed,
        event_file: &Path,
        log: Option<(&Path, &str)>,
    ) -> Result<Serve, Error> {
        let gw = bed.gateway();
        let mut command = build.command()?;
        command
            .args(["serve", "--solari-url", gw.base_url(), "--event-file"])
            .arg(event_file)
            // The default (100) caps a whole run; an endpoint left running meets more.
            .args(["--max-sessions", "1000000"])
            .env("SOLARI_API_KEY", gw.api_key())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match log {
            Some((path, filter)) => {
                let file = std::fs::File::create(path).map_err(bench_error)?;
                command
                    .stderr(file)
                    .env("RUST_LOG", filter)
                    .env("NO_COLOR", "1");
            }
            None => {
                command.stderr(Stdio::null()).env_remove("RUST_LOG");
            }
        }
        let mut child = command.spawn().map_err(bench_error)?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let cdp_url = loop {
            match lines.next_line().await.map_err(bench_error)? {
                Some(line) => {
                    if let Some(url) = line.strip_prefix("OUTLIVE_CDP_URL=") {
                        break url.to_owned();
                    }
                }
                None => return Err(bench_error("serve exited before printing its URLs")),
            }
        };
        // Its stdout stays open and read: a closed pipe would end it on its next line.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Serve { child, cdp_url })
    }

    /// Its process id (0 once it was reaped).
    pub fn pid(&self) -> i32 {
        self.child.id().map_or(0, |p| p as i32)
    }

    /// SIGTERM; its exit code and how long it took, at most a minute.
    pub async fn stop(mut self) -> (Option<i32>, Duration) {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let asked = Instant::now();
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        (
            status.ok().and_then(Result::ok).and_then(|s| s.code()),
            asked.elapsed(),
        )
    }
}

/// Reads a wide event `serve` wrote (`--event-file`); `null` when there is none.
pub fn read_event(path: &Path) -> serde_json::Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

pub(crate) fn bench_error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::with(ErrorKind::Bench, e)
}

/// How the agent works.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// A Python with `websockets` (`scripts/clients` makes `target/clients/venv`).
    pub python: PathBuf,
    /// A full-page screenshot every this many evaluations (0: never).
    pub screenshot_every: u32,
    /// An `ops N` line every this many evaluations (0: never).
    pub ops_every: u32,
}

/// The agent's script, written into a directory of the caller's.
pub struct AgentScript(PathBuf);

impl AgentScript {
    /// Writes the agent into `dir`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Bench`] when it cannot be written.
    pub fn write(dir: &Path) -> Result<AgentScript, Error> {
        let path = dir.join("serve_agent.py");
        std::fs::write(&path, AGENT).map_err(bench_error)?;
        Ok(AgentScript(path))
    }

    /// Starts the agent on `cdp_url`, reconnecting and working until killed; it prints
    /// `browser N` per browser (and `ops N`, if asked), its errors on stderr.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Bench`] when Python cannot start.
    pub fn start(&self, config: &AgentConfig, cdp_url: &str) -> Result<Child, Error> {
        Command::new(&config.python)
            .arg(&self.0)
            .env("OUTLIVE_CDP_URL", cdp_url)
            .env("BROWSERS", "0")
            .env("SCREENSHOT_EVERY", config.screenshot_every.to_string())
            .env("OPS_EVERY", config.ops_every.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(bench_error)
    }
}

/// Every line `from` gives until it ends.
pub async fn read_lines(from: impl tokio::io::AsyncRead + Unpin) -> Vec<String> {
    let mut lines = BufReader::new(from).lines();
    let mut all = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        all.push(line);
    }
    all
}
