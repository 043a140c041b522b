//! Network weather is not death. The gateway stalls each connection on its own schedule for
//! 1.2 s, 3 s or 10 s, or the whole link for 2 s. Through that, a task in the library, a
//! Playwright client of `outlive serve` and one under `outlive run` work on: no relaunch, no
//! page recovery, one entry. Their calls are only slower.
//!
//! Each client evaluates in its page every 100 ms and stops once enough of its calls met a
//! stall (took half the hold or more), so the weather provably reached its own connection; the
//! gateway's `stalls_hit` agrees. A death would cut the connection: the library's task would
//! be entered again, a Playwright client's call would raise.
//!
//! The relay's own connection is the task's in the library, so the library's task waits
//! through the relay's stalls: the wide event counts them in `stallsSurvived`. Under `serve`
//! and `run` the client has a connection of its own, on its own schedule: the relay meets a
//! flow stall only by chance, so only the link's stalls (which hold every connection while the
//! client's calls wait) must show there.

mod support;

use std::process::Stdio;
use std::time::Duration;

use outlive::Options;
use outlive::chromiumoxide::error::CdpError;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where the client works: the library's task, a client of `serve`, a command under `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Library,
    Serve,
    Run,
}

/// A network weather and how many of its stalls a client must meet.
#[derive(Debug, Clone, Copy)]
struct Sky {
    hold: Duration,
    every: Duration,
    /// The whole link, not each connection on its own.
    link: bool,
    /// Calls slowed by a stall that the client waits for.
    stalls: u32,
}

impl Sky {
    const fn flows(hold_ms: u64, every_ms: u64, stalls: u32) -> Sky {
        Sky {
            hold: Duration::from_millis(hold_ms),
            every: Duration::from_millis(every_ms),
            link: false,
            stalls,
        }
    }

    const fn link(hold_ms: u64, every_ms: u64, stalls: u32) -> Sky {
        Sky {
            link: true,
            ..Sky::flows(hold_ms, every_ms, stalls)
        }
    }

    fn weather(self) -> gateway::Weather {
        let calm = gateway::Weather::calm();
        if self.link {
            calm.link(self.hold, self.every)
        } else {
            calm.flows(self.hold, self.every)
        }
    }

    /// A call this slow met a stall: one sent in the first half of a hold waits out the rest.
    fn slow(self) -> Duration {
        self.hold / 2
    }

    /// How long a client works at most: its `stalls` stalls come within `stalls + 1` periods
    /// of its connection opening (the first at a random phase), with room for a loaded machine.
    fn deadline(self) -> Duration {
        self.every * (self.stalls + 1) + self.hold + Duration::from_secs(15)
    }

    /// Whether the relay's own connection must have met a stall while a call waited.
    fn relay_meets_a_stall(self, mode: Mode) -> bool {
        mode == Mode::Library || self.link
    }
}

const FLOWS_1200MS: Sky = Sky::flows(1200, 4000, 2);
const FLOWS_3S: Sky = Sky::flows(3000, 7000, 2);
const FLOWS_10S: Sky = Sky::flows(10_000, 13_000, 1);
const LINK_2S: Sky = Sky::link(2000, 5000, 2);

/// What the client did: its calls, the times of those a stall slowed, its longest.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Work {
    calls: u32,
    slow_ms: Vec<u64>,
    longest_ms: u64,
}

impl Work {
    fn record(&mut self, took: Duration, sky: Sky) {
        self.calls += 1;
        let ms = took.as_millis() as u64;
        self.longest_ms = self.longest_ms.max(ms);
        if took >= sky.slow() {
            self.slow_ms.push(ms);
        }
    }

    fn done(&self, sky: Sky) -> bool {
        self.slow_ms.len() >= sky.stalls as usize
    }
}

/// What a scenario saw: the client's work, the run's wide event (as JSON), and the logs of the
/// `outlive` process (empty in the library).
struct Seen {
    work: Work,
    event: Value,
    logs: String,
}

/// A gateway whose sessions outlive the test, under `sky`.
async fn gateway_under(sky: Sky) -> gateway::Gateway {
    let config = gateway::Config::new()
        .lifetime(Duration::from_secs(3600))
        .jitter(Duration::ZERO)
        .max_sessions(3)
        .weather(sky.weather());
    gateway::spawn(config).await.unwrap()
}

/// The client works in `mode` through `sky`; checks that the weather reached it and that it
/// cost no browser and no page.
async fn scenario(mode: Mode, sky: Sky) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let gw = gateway_under(sky).await;
    let started = Instant::now();
    let seen = match mode {
        Mode::Library => library(&gw, sky).await,
        Mode::Serve => serve(&gw, sky).await,
        Mode::Run => run(&gw, sky).await,
    };
    let Seen { work, event, logs } = seen;
    let status = gw.status();
    eprintln!(
        "{mode:?} through {sky:?}: {:?}, {work:?}, stalls hit {}\n{event}",
        started.elapsed(),
        status.stalls_hit
    );
    let context = || format!("{work:?}\n{status:?}\n{event}\n{logs}");
    assert!(work.done(sky), "too few calls met a stall: {}", context());
    assert!(status.stalls_hit >= u64::from(sky.stalls), "{}", context());
    assert_eq!(event["outcome"], "completed", "{}", context());
    assert_eq!(event["relaunches"], 0, "a false death: {}", context());
    assert_eq!(
        event["pageRecoveries"],
        0,
        "a false page failure: {}",
        context()
    );
    assert_eq!(event["attempts"], 1, "{}", context());
    assert_eq!(
        event["deathsConfirmedBy"],
        serde_json::json!({}),
        "{}",
        context()
    );
    if sky.relay_meets_a_stall(mode) {
        let survived = event["stallsSurvived"].as_u64().unwrap();
        assert!(survived >= 1, "no stall survived: {}", context());
        let longest = Duration::from_millis(event["longestStallMs"].as_u64().unwrap());
        assert!(longest >= sky.slow(), "{}", context());
    }
    support::finish_clean(gw).await;
}

/// The library's task evaluates in its page until enough calls met a stall.
async fn library(gw: &gateway::Gateway, sky: Sky) -> Seen {
    let provider = outlive::Solari::new(support::client(gw));
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &provider,
        move |page, _ctx| async move {
            let deadline = Instant::now() + sky.deadline();
            let mut work = Work::default();
            while !work.done(sky) && Instant::now() < deadline {
                let started = Instant::now();
                page.evaluate_expression("1 + 1").await?;
                work.record(started.elapsed(), sky);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok::<_, CdpError>(work)
        },
        Options::new(),
    )
    .await;
    let event = serde_json::to_value(&event).unwrap();
    let work = result.unwrap_or_else(|e| panic!("{e}\n{event}"));
    Seen {
        work,
        event,
        logs: String::new(),
    }
}

/// The Playwright client's command line.
fn client_argv() -> [std::path::PathBuf; 2] {
    [
        support::commands::python(),
        support::commands::script("weather_client.py"),
    ]
}

/// The environment that tells the Playwright client how to work through `sky` and where to
/// write its result.
fn client_env(sky: Sky, result: &std::path::Path) -> [(&'static str, String); 4] {
    [
        ("STALLS", sky.stalls.to_string()),
        ("SLOW_MS", sky.slow().as_millis().to_string()),
        ("DEADLINE_S", sky.deadline().as_secs().to_string()),
        ("RESULT", result.display().to_string()),
    ]
}

/// An `outlive` subcommand on the gateway's Solari API, with debug logs and its wide event
/// written into `dir`.
fn outlive_command(gw: &gateway::Gateway, subcommand: &str, dir: &std::path::Path) -> Command {
    let mut command = Command::new(support::outlive_bin());
    command
        .arg(subcommand)
        .args(["--solari-url", gw.base_url()])
        .arg("--event-file")
        .arg(dir.join("event.json"))
        .env("SOLARI_API_KEY", gw.api_key())
        .env("RUST_LOG", "outlive=debug")
        .kill_on_drop(true);
    command
}

fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path, logs: &str) -> T {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}\nlogs:\n{logs}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// How long past its deadline a client (and `outlive` around it) may take to end.
const ENDING: Duration = Duration::from_secs(60);

/// A Playwright client of `outlive serve`, connected once.
async fn serve(gw: &gateway::Gateway, sky: Sky) -> Seen {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(outlive_command(gw, "serve", dir.path())).await;
    let result = dir.path().join("work.json");
    let [python, script] = client_argv();
    let client = Command::new(python)
        .arg(script)
        .envs(client_env(sky, &result))
        .env("OUTLIVE_CDP_URL", &serve.cdp_url)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(sky.deadline() + ENDING, client.wait_with_output()).await;
    let logs = serve.stop().await;
    let out = out.expect("the client ends").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let logs = format!("client:\n{stderr}\nserve:\n{logs}");
    assert!(out.status.success(), "the client failed:\n{logs}");
    Seen {
        work: read_json(&result, &logs),
        event: read_json(&dir.path().join("event.json"), &logs),
        logs,
    }
}

/// The Playwright client as `outlive run`'s command.
async fn run(gw: &gateway::Gateway, sky: Sky) -> Seen {
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("work.json");
    let out = outlive_command(gw, "run", dir.path())
        .envs(client_env(sky, &result))
        .arg("--")
        .args(client_argv())
        .output();
    let out = tokio::time::timeout(sky.deadline() + ENDING, out)
        .await
        .expect("outlive run ends")
        .unwrap();
    let logs = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "outlive run failed:\n{logs}");
    Seen {
        work: read_json(&result, &logs),
        event: read_json(&dir.path().join("event.json"), &logs),
        logs,
    }
}

/// `outlive serve`, running: its CDP URL, and its stderr read as it comes.
struct Serve {
    child: Child,
    cdp_url: String,
    stderr: JoinHandle<String>,
    /// Its stdout, kept open: a closed pipe would end it on its next line.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Serve {
    /// Starts `command` and waits for the CDP URL it prints.
    async fn start(mut command: Command) -> Serve {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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
            let line = lines.next_line().await.unwrap();
            let line = line.expect("serve prints its URLs");
            if let Some(url) = line.strip_prefix("OUTLIVE_CDP_URL=") {
                break url.to_owned();
            }
        };
        Serve {
            child,
            cdp_url,
            stderr,
            _stdout: lines,
        }
    }

    /// SIGTERM: it exits 0 after writing its wide event. Answers its stderr.
    async fn stop(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops on SIGTERM")
            .unwrap();
        let stderr = self.stderr.await.unwrap();
        assert_eq!(status.code(), Some(0), "serve:\n{stderr}");
        stderr
    }
}

/// A test per client and weather.
macro_rules! weather {
    ($($name:ident: $mode:ident, $sky:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            scenario(Mode::$mode, $sky).await;
        }
    )*};
}

weather! {
    library_through_flow_stalls_of_1200ms: Library, FLOWS_1200MS;
    library_through_flow_stalls_of_3s: Library, FLOWS_3S;
    library_through_flow_stalls_of_10s: Library, FLOWS_10S;
    library_through_link_stalls_of_2s: Library, LINK_2S;
    serve_through_flow_stalls_of_1200ms: Serve, FLOWS_1200MS;
    serve_through_flow_stalls_of_3s: Serve, FLOWS_3S;
    serve_through_flow_stalls_of_10s: Serve, FLOWS_10S;
    serve_through_link_stalls_of_2s: Serve, LINK_2S;
    run_through_flow_stalls_of_1200ms: Run, FLOWS_1200MS;
    run_through_flow_stalls_of_3s: Run, FLOWS_3S;
    run_through_flow_stalls_of_10s: Run, FLOWS_10S;
    run_through_link_stalls_of_2s: Run, LINK_2S;
}
