//! `outlive serve --metrics`: through a browser death of each kind (close, reset, silence),
//! `/metrics` counts what the gateway saw. Deaths by cause equal the kills, sessions started
//! equal the sessions the gateway created, and the relaunch histogram counts every relaunch.
//! The text passes `promtool check metrics`, and a real Prometheus scrapes it.
//!
//! Needs Debian's `prometheus` package (`promtool` and `prometheus`; `scripts/test` installs
//! it).

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use gateway::DeathMode;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a death, or a scrape, may take to show.
const BOUND: Duration = Duration::from_secs(90);

/// `outlive serve` with `--metrics 127.0.0.1:0`, and where its metrics are.
struct Serving {
    child: Child,
    metrics: String,
    dir: tempfile::TempDir,
}

impl Serving {
    async fn start(gw: &gateway::Gateway) -> Serving {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["serve", "--checkpoint-every", "1s", "--heartbeat", "500ms"])
            .args(["--max-relaunches", "10", "--metrics", "127.0.0.1:0"])
            .args(["--solari-url", gw.base_url()])
            .arg("--event-file")
            .arg(dir.path().join("event.json"))
            .env("SOLARI_API_KEY", gw.api_key())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("serve.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Ready once it printed its three URLs; it said where its metrics are before.
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        for _ in 0..3 {
            stdout
                .next_line()
                .await
                .unwrap()
                .expect("serve prints its URLs");
        }
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
        let metrics = log
            .lines()
            .find_map(|l| l.strip_prefix("outlive: metrics at "))
            .unwrap_or_else(|| panic!("serve says where its metrics are; it said {log:?}"))
            .to_owned();
        Serving {
            child,
            metrics,
            dir,
        }
    }

    /// What serve said on stderr so far (its log, with `RUST_LOG`).
    fn log(&self) -> String {
        log(&self.dir.path().join("serve.log"))
    }

    /// `/metrics` as a scraper that asks for nothing in particular gets it (Prometheus text).
    async fn scrape(&self) -> String {
        let answer = reqwest::get(&self.metrics).await.unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
        answer.text().await.unwrap()
    }

    /// Scrapes until `done` holds for the text, within [`BOUND`].
    async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let text = self.scrape().await;
            if done(&text) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "waited {BOUND:?} for {what}; the metrics:\n{text}\nserve said:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM: it stops, exit 0; answers its wide event.
    async fn stop(mut self) -> serde_json::Value {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops on SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0), "{}", self.log());
        let event = std::fs::read_to_string(self.dir.path().join("event.json")).unwrap();
        serde_json::from_str(&event).unwrap()
    }
}

/// The value of the sample `series` (name and labels, as written) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// Sessions the gateway created, as its own API lists them.
async fn sessions_created(gw: &gateway::Gateway) -> usize {
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/sessions?limit=100", gw.base_url()))
        .bearer_auth(gw.api_key())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["sessions"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_metrics_count_what_the_gateway_saw() {
    // Sessions outlast the test: only its kills end them.
    let gw = gateway::spawn(
        gateway::Config::new()
            .lifetime(Duration::from_secs(600))
            .jitter(Duration::ZERO)
            .max_sessions(3),
    )
    .await
    .unwrap();
    let serve = Serving::start(&gw).await;
    let kills = [
        (DeathMode::Close, "closed"),
        (DeathMode::Reset, "reset"),
        (DeathMode::Silence, "silence"),
    ];
    let mut checkpoints = 0.0;
    for (done, (mode, cause)) in kills.into_iter().enumerate() {
        // The task is back on a browser, and has checkpointed there, before the next kill: a
        // kill during a launch would be a failed launch, not a death.
        let relaunched = done as f64;
        let text = serve
            .wait_for("the browser to serve", |t| {
                sample(t, "outlive_sessions_live") == Some(1.0)
                    && sample(t, "outlive_relaunch_duration_seconds_count") == Some(relaunched)
                    && sample(t, "outlive_checkpoint_bytes_count") > Some(checkpoints)
            })
            .await;
        checkpoints = sample(&text, "outlive_checkpoint_bytes_count").unwrap();
        let live = gw.live_sessions();
        assert_eq!(live.len(), 1, "one session serves, no spare");
        assert_eq!(gw.kill(&live[0], mode).await.unwrap(), mode);
        let series = format!("outlive_deaths_total{{cause=\"{cause}\"}}");
        serve
            .wait_for(&series, |t| sample(t, &series) == Some(1.0))
            .await;
    }
    let text = serve
        .wait_for("the third relaunch", |t| {
            sample(t, "outlive_relaunch_duration_seconds_count") == Some(3.0)
                && sample(t, "outlive_sessions_live") == Some(1.0)
        })
        .await;
    promtool_check(&text).await;
    let deaths: f64 = text
        .lines()
        .filter(|l| l.starts_with("outlive_deaths_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(deaths, 3.0, "one death per kill:\n{text}");
    let started = sample(&text, "outlive_sessions_started_total{provider=\"solari\"}");
    assert_eq!(started, Some(sessions_created(&gw).await as f64), "{text}");
    assert_eq!(started, Some(4.0), "{text}");
    assert!(
        sample(&text, "outlive_checkpoint_bytes_count").unwrap() >= 1.0,
        "{text}"
    );

    let prometheus = Prometheus::start(&serve.metrics).await;
    let scraped = prometheus.wait_for("sum(outlive_deaths_total)", 3.0).await;
    assert_eq!(scraped, 3.0);
    drop(prometheus);

    let event = serve.stop().await;
    assert_eq!(event["relaunches"], 3, "{event}");
    assert_eq!(event["sessions"], 4, "{event}");
    support::assert_gateway_clean(&gw).await;
    let status = gw.shutdown().await.unwrap();
    assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
}

/// `promtool check metrics` on `text`: it parses, and passes the linter.
async fn promtool_check(text: &str) {
    use tokio::io::AsyncWriteExt;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("promtool: apt-get install -y prometheus (scripts/test does)");
    let mut stdin = promtool.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = promtool.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A real Prometheus scraping one target every second, on loopback, its data in a temporary
/// directory. Killed when dropped.
struct Prometheus {
    child: Child,
    api: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    async fn start(target: &str) -> Prometheus {
        let target = target
            .strip_prefix("http://")
            .and_then(|t| t.strip_suffix("/metrics"))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: outlive\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus: apt-get install -y prometheus (scripts/test does)");
        Prometheus {
            child,
            api: format!("http://127.0.0.1:{port}/api/v1/query"),
            dir,
        }
    }

    /// Queries `query` until its one value is `want`, within [`BOUND`]: Prometheus up,
    /// scraped, the sample stored.
    async fn wait_for(&self, query: &str, want: f64) -> f64 {
        let deadline = tokio::time::Instant::now() + BOUND;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            if let Some(value) = self.query(query, &mut last).await {
                if value == want {
                    return value;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "Prometheus did not answer {query} = {want} within {BOUND:?}; last: {last}\n{}",
            log(&self.dir.path().join("prometheus.log"))
        );
    }

    /// The query's one value, if Prometheus answers one; `last` keeps what it said.
    async fn query(&self, query: &str, last: &mut String) -> Option<f64> {
        let answer = reqwest::Client::new()
            .get(&self.api)
            .query(&[("query", query)])
            .send()
            .await
            .ok()?;
        *last = answer.text().await.ok()?;
        let answer: serde_json::Value = serde_json::from_str(last).ok()?;
        answer["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // kill_on_drop would too; this names the pid it ends.
        let _ = self.child.start_kill();
    }
}

/// The end of Prometheus' log, for a failure message.
fn log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A port free on loopback now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// An address off loopback without `--metrics-public`, or one in use, stops `run`, `serve` and
/// `worker` at start, with a message that says what to change.
#[tokio::test]
async fn a_bad_metrics_address_stops_the_command_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = taken.local_addr().unwrap().to_string();
    let cdp = ["--cdp-url", "ws://127.0.0.1:9/devtools/browser/x"];
    let worker = ["worker", "--database-url", "postgres://127.0.0.1:9/none"];
    let cases: [(Vec<&str>, String); 4] = [
        (
            [&["serve", "--metrics", "0.0.0.0:0"][..], &cdp].concat(),
            "0.0.0.0 is not a loopback address".to_owned(),
        ),
        (
            [&["serve", "--metrics", &in_use][..], &cdp].concat(),
            format!("could not listen on {in_use} for --metrics: "),
        ),
        (
            [&["run", "--metrics", &in_use][..], &cdp, &["--", "true"]].concat(),
            format!("could not listen on {in_use} for --metrics: "),
        ),
        (
            [&worker[..], &["--metrics", "0.0.0.0:0"]].concat(),
            "add --metrics-public".to_owned(),
        ),
    ];
    for (args, says) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(&args)
            .env("OUTLIVE_SEAL_KEY", "ab".repeat(32))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(stderr.contains(&says), "{args:?}: {stderr}");
    }
}
