//! `outlive-lab weather`: a bad network against a death, before and after, in one run.
//!
//! * **False deaths.** Under each weather (stalls of the gateway's relay, nothing dropped,
//!   no browser dies) the reconnecting agent works through `serve` for a few minutes. Every
//!   relaunch is a live browser taken for dead: false deaths per hour.
//! * **Detection latency.** On a calm gateway a raw-CDP client is attached through `serve`,
//!   with a call waiting or idle; the gateway kills the browser (close, reset, silence). The
//!   latency runs from the kill's return to the client seeing `serve` close its connection.
//!
//! Each arm runs once per build, the two builds alternating: `before`, another build's
//! `outlive` binary, and `after`, this binary's own `serve`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gateway::{DeathMode, Weather};
use rand::Rng;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::error::{Error, ErrorKind};
use crate::served::{AgentConfig, AgentScript, Build, Serve, bench_error, read_event, read_lines};
use crate::stats::median;
use crate::{create_out, write_json, write_text};
use outlive_bed::bed::{TestBed, dying};

/// The raw-CDP client of the latency arms.
const CLIENT: &str = include_str!("death_client.py");

/// Sessions live this long: in this benchmark only the bench's kills end a browser.
const LIFETIME: Duration = Duration::from_secs(6 * 3600);

/// `serve`'s log filter: its deaths, suspicions and stalls.
const LOG_FILTER: &str = "outlive=debug";

/// How long a client may take to be ready again, and a death to be seen, before the bench
/// gives up on that kill.
const WAIT_READY: Duration = Duration::from_secs(120);
const WAIT_CLOSED: Duration = Duration::from_secs(60);

/// A named weather, as `--weather` spells it: `calm`, `flows:HOLD/EVERY` or
/// `link:HOLD/EVERY` (durations as humantime reads them: `1.2s`, `500ms`).
#[derive(Debug, Clone, Serialize)]
pub struct Sky {
    /// As given.
    pub name: String,
    #[serde(skip)]
    weather: Weather,
}

impl Sky {
    /// The weather itself.
    pub fn weather(&self) -> Weather {
        self.weather
    }
}

impl std::str::FromStr for Sky {
    type Err = String;

    fn from_str(s: &str) -> Result<Sky, String> {
        let weather = match s.split_once(':') {
            None if s == "calm" => Weather::calm(),
            Some((kind, stall)) => {
                let (hold, every) = stall
                    .split_once('/')
                    .ok_or_else(|| format!("{s}: a stall is HOLD/EVERY"))?;
                let parse = |d: &str| humantime::parse_duration(d).map_err(|e| format!("{s}: {e}"));
                let (hold, every) = (parse(hold)?, parse(every)?);
                match kind {
                    "flows" => Weather::calm().flows(hold, every),
                    "link" => Weather::calm().link(hold, every),
                    _ => return Err(format!("{s}: calm, flows:HOLD/EVERY or link:HOLD/EVERY")),
                }
            }
            None => return Err(format!("{s}: calm, flows:HOLD/EVERY or link:HOLD/EVERY")),
        };
        gateway::Config::new()
            .weather(weather)
            .validate()
            .map_err(|e| e.to_string())?;
        Ok(Sky {
            name: s.to_owned(),
            weather,
        })
    }
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WeatherConfig {
    /// The command line, as run.
    pub command: String,
    /// The weathers of the false-death arms.
    pub skies: Vec<Sky>,
    /// How long the agent works in each false-death arm, minutes.
    pub minutes: f64,
    /// Kills per death kind and case, per build.
    pub kills: u32,
    /// The `outlive` binary of the build before.
    pub before: PathBuf,
    /// A Python with `websockets` (`scripts/clients` makes `target/clients/venv`).
    pub python: PathBuf,
}

/// One false-death arm: one weather, one build.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WeatherArm {
    /// The weather.
    pub sky: String,
    /// `before` or `after`.
    pub build: &'static str,
    /// How long the agent worked, s.
    pub seconds: f64,
    /// Browsers the agent worked in.
    pub browsers: u32,
    /// `relaunches` of `serve`'s wide event (`None`: no event).
    pub relaunches: Option<u64>,
    /// Relaunches per hour (the wide event's; the agent's if there is none).
    pub false_deaths_per_hour: f64,
    /// Evaluations the agent had answered (its last `ops` line).
    pub ops: u64,
    /// The gateway's stalls that held a frame.
    pub stalls_hit: u64,
    /// `serve`'s exit code after SIGTERM.
    pub exit_code: Option<i32>,
    /// `serve`'s wide event.
    pub event: serde_json::Value,
    /// `/proc/loadavg` (1, 5, 15 min) as `serve` started.
    pub load_start: [f64; 3],
    /// And after it stopped.
    pub load_end: [f64; 3],
    /// The agent's stderr (its errors: failed reconnects, calls past 15 s).
    pub agent_errors: Vec<String>,
    /// `serve`'s log (`RUST_LOG=outlive=debug`), under `--out`.
    pub log: String,
}

/// Whether a call waits when the browser dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Case {
    /// A `Runtime.evaluate` that never settles is in flight.
    Waiting,
    /// Connected and attached, nothing in flight.
    Idle,
}

impl Case {
    fn as_str(self) -> &'static str {
        match self {
            Case::Waiting => "waiting",
            Case::Idle => "idle",
        }
    }
}

/// One kill of the latency arms.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kill {
    /// `before` or `after`.
    pub build: &'static str,
    /// `close`, `reset` or `silence`.
    pub kind: &'static str,
    /// Whether a call waited.
    pub case: Case,
    /// Wall clock (unix s) the client said it was ready.
    pub ready_at: f64,
    /// When the kill was asked.
    pub kill_asked_at: f64,
    /// When the kill returned (Chromium gone).
    pub killed_at: f64,
    /// When the client saw its connection closed (`None`: not within 60 s).
    pub closed_at: Option<f64>,
    /// `closed_at − killed_at`, ms (negative: seen before the kill returned, which waits
    /// for Chromium's exit).
    pub latency_ms: Option<f64>,
    /// `closed_at − kill_asked_at`, ms.
    pub from_ask_ms: Option<f64>,
    /// Live sessions on the gateway at the kill (1 expected; the newest was killed).
    pub live_sessions: usize,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WeatherReport {
    /// Settings.
    pub config: WeatherConfig,
    /// CPUs of the machine.
    pub cpus: usize,
    /// When it started and ended (unix s).
    pub started_at: f64,
    /// When it ended.
    pub ended_at: f64,
    /// Every false-death arm, in the order run.
    pub arms: Vec<WeatherArm>,
    /// Every kill, in the order run.
    pub kills: Vec<Kill>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `/proc/loadavg`'s three averages (zeros if unreadable).
fn load() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut parts = text.split_whitespace().map(|p| p.parse().unwrap_or(0.0));
    [(); 3].map(|()| parts.next().unwrap_or(0.0))
}

/// The two builds, `before` first.
fn builds(config: &WeatherConfig) -> [(&'static str, Build); 2] {
    [
        ("before", Build::Binary(config.before.clone())),
        ("after", Build::This),
    ]
}

/// Runs every arm and writes `weather.json` (after each arm, so a cut run keeps what it
/// measured) and `weather-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when the bed, `serve` or a client cannot start, or a client is not
/// ready in time; [`ErrorKind::Write`] when the results cannot be written.
pub async fn run(config: &WeatherConfig, out: &Path) -> Result<WeatherReport, Error> {
    if !config.before.is_file() {
        return Err(bench_error(format!(
            "no build before at {}",
            config.before.display()
        )));
    }
    outlive_bed::setup::ensure_chromium()?;
    create_out(out)?;
    let dir = tempfile::tempdir().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let agent = AgentScript::write(dir.path())?;
    let client = dir.path().join("death_client.py");
    std::fs::write(&client, CLIENT).map_err(bench_error)?;
    let mut report = WeatherReport {
        config: config.clone(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        started_at: now(),
        ended_at: 0.0,
        arms: Vec::new(),
        kills: Vec::new(),
    };
    for sky in &config.skies {
        for (build, serve) in builds(config) {
            let arm = weather_arm(config, sky, (build, &serve), &agent, dir.path(), out).await?;
            println!(
                "  {:<16} {build:<6}: {} relaunches in {:.0} s ({:.1}/h), {} ops, {} stalls hit",
                arm.sky,
                arm.relaunches.unwrap_or(0),
                arm.seconds,
                arm.false_deaths_per_hour,
                arm.ops,
                arm.stalls_hit
            );
            report.arms.push(arm);
            write_json(out, "weather.json", &report)?;
        }
    }
    for kind in [DeathMode::Close, DeathMode::Reset, DeathMode::Silence] {
        for (build, serve) in builds(config) {
            let arm = Latency {
                config,
                build,
                serve: &serve,
                kind,
                client: &client,
                dir: dir.path(),
                out,
            };
            let kills = arm.run().await?;
            report.kills.extend(kills);
            write_json(out, "weather.json", &report)?;
        }
    }
    report.ended_at = now();
    write_json(out, "weather.json", &report)?;
    write_text(out, "weather-summary.txt", &summary(&report))?;
    Ok(report)
}

/// One weather, one build: the agent works through `serve` for `config.minutes`.
async fn weather_arm(
    config: &WeatherConfig,
    sky: &Sky,
    (build, serve): (&'static str, &Build),
    agent: &AgentScript,
    dir: &Path,
    out: &Path,
) -> Result<WeatherArm, Error> {
    let bed = TestBed::start(
        dying(LIFETIME, Duration::ZERO, DeathMode::Close)
            .max_sessions(3)
            .weather(sky.weather),
    )
    .await?;
    let event_file = dir.join("event.json");
    let _ = std::fs::remove_file(&event_file);
    let log = dir.join("serve.log");
    let load_start = load();
    let serve = Serve::start(serve, &bed, &event_file, Some((&log, LOG_FILTER))).await?;
    let agent_config = AgentConfig {
        python: config.python.clone(),
        screenshot_every: 0,
        ops_every: 10,
    };
    let mut child = agent.start(&agent_config, &serve.cdp_url)?;
    let errors = tokio::spawn(read_lines(child.stderr.take().expect("piped")));
    let duration = Duration::from_secs_f64(config.minutes * 60.0);
    let started = Instant::now();
    let (browsers, ops) = work(&mut child, duration, &sky.name, build).await;
    let seconds = started.elapsed().as_secs_f64();
    let _ = child.kill().await;
    let stalls_hit = bed.gateway().status().stalls_hit;
    let (exit_code, _) = serve.stop().await;
    let load_end = load();
    bed.shutdown().await?;
    let event = read_event(&event_file);
    let relaunches = event["relaunches"].as_u64();
    let deaths = relaunches.unwrap_or(u64::from(browsers.saturating_sub(1)));
    let log = keep_log(&log, out, &format!("{}-{build}", file_name(&sky.name)))?;
    Ok(WeatherArm {
        sky: sky.name.clone(),
        build,
        seconds,
        browsers,
        relaunches,
        false_deaths_per_hour: deaths as f64 / seconds * 3600.0,
        ops,
        stalls_hit,
        exit_code,
        event,
        load_start,
        load_end,
        agent_errors: errors.await.unwrap_or_default(),
        log,
    })
}

/// Copies `serve`'s log to `logs/serve-{name}.log` under `out`; its path there.
fn keep_log(log: &Path, out: &Path, name: &str) -> Result<String, Error> {
    let logs = out.join("logs");
    create_out(&logs)?;
    let name = format!("serve-{name}.log");
    std::fs::copy(log, logs.join(&name)).map_err(bench_error)?;
    Ok(format!("logs/{name}"))
}

/// `flows:1.2s/10s` as a file name: `flows-1.2s-10s`.
fn file_name(sky: &str) -> String {
    sky.replace([':', '/'], "-")
}

/// Reads the agent's lines for `duration`: the browsers it worked in, and its evaluations.
async fn work(agent: &mut Child, duration: Duration, sky: &str, build: &str) -> (u32, u64) {
    let mut lines = BufReader::new(agent.stdout.take().expect("piped")).lines();
    let (mut browsers, mut ops) = (0, 0);
    let end = Instant::now() + duration;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            () = tokio::time::sleep_until(end) => break,
        };
        let Ok(Some(line)) = line else {
            println!("  {sky} {build}: the agent exited");
            break;
        };
        if let Some(n) = line.strip_prefix("ops ").and_then(|n| n.parse().ok()) {
            ops = n;
        } else if let Some(n) = line.strip_prefix("browser ").and_then(|n| n.parse().ok()) {
            browsers = n;
            if n > 1 {
                println!("  {sky} {build}: the agent works in browser {n}");
            }
        }
    }
    (browsers, ops)
}

/// One death kind, one build: `config.kills` kills with a call waiting, then as many idle.
struct Latency<'a> {
    config: &'a WeatherConfig,
    build: &'static str,
    serve: &'a Build,
    kind: DeathMode,
    client: &'a Path,
    dir: &'a Path,
    out: &'a Path,
}

/// The latency client, and its stdout.
struct Client {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Client {
    fn start(python: &Path, script: &Path, cdp_url: &str, case: Case) -> Result<Client, Error> {
        let mut child = Command::new(python)
            .arg(script)
            .env("OUTLIVE_CDP_URL", cdp_url)
            .env("CASE", case.as_str())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(bench_error)?;
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Ok(Client { child, lines })
    }

    /// The time on the next line starting with `word`, within `limit`; `None` if none came.
    async fn next(&mut self, word: &str, limit: Duration) -> Option<f64> {
        let found = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if let Some(t) = line.strip_prefix(word).and_then(|t| t.trim().parse().ok()) {
                    return Some(t);
                }
            }
            None
        };
        tokio::time::timeout(limit, found).await.ok().flatten()
    }
}

impl Latency<'_> {
    async fn run(&self) -> Result<Vec<Kill>, Error> {
        let bed = TestBed::start(dying(LIFETIME, Duration::ZERO, DeathMode::Close).max_sessions(3))
            .await?;
        let event_file = self.dir.join("event.json");
        let log = self.dir.join("serve.log");
        let logged = Some((log.as_path(), LOG_FILTER));
        let serve = Serve::start(self.serve, &bed, &event_file, logged).await?;
        let mut kills = Vec::new();
        for case in [Case::Waiting, Case::Idle] {
            let mut client = None;
            for _ in 0..self.config.kills {
                if client.is_none() {
                    let python = &self.config.python;
                    client = Some(Client::start(python, self.client, &serve.cdp_url, case)?);
                }
                let c = client.as_mut().expect("started above");
                let kill = self.kill(c, bed.gateway(), case).await?;
                println!(
                    "  {} {:<7} {:<7}: {}",
                    self.build,
                    self.kind.as_str(),
                    case.as_str(),
                    kill.latency_ms
                        .map_or("not seen in 60 s".to_owned(), |ms| format!("{ms:.0} ms")),
                );
                if kill.latency_ms.is_none() {
                    // It may still hang on the dead browser: a new client for the next kill.
                    client = None;
                }
                kills.push(kill);
            }
            if let Some(mut c) = client {
                let _ = c.child.kill().await;
            }
        }
        let _ = serve.stop().await;
        bed.shutdown().await?;
        let name = format!("latency-{}-{}", self.kind.as_str(), self.build);
        keep_log(&log, self.out, &name)?;
        Ok(kills)
    }

    /// Waits for the client to be ready, waits a random 0.5–1.5 s (so the kill falls
    /// anywhere in the heartbeat's cycle), kills the newest live session and waits for the
    /// client to see its connection closed.
    async fn kill(
        &self,
        client: &mut Client,
        gw: &gateway::Gateway,
        case: Case,
    ) -> Result<Kill, Error> {
        let ready_at = client
            .next("ready ", WAIT_READY)
            .await
            .ok_or_else(|| bench_error("the latency client was not ready in 120 s"))?;
        let pause = rand::rng().random_range(500..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let live = gw.live_sessions();
        let id = live
            .last()
            .ok_or_else(|| bench_error("no live session to kill"))?;
        let kill_asked_at = now();
        gw.kill(id, self.kind)
            .await
            .map_err(|e| bench_error(format!("kill: {e}")))?;
        let killed_at = now();
        let closed_at = client.next("closed ", WAIT_CLOSED).await;
        Ok(Kill {
            build: self.build,
            kind: self.kind.as_str(),
            case,
            ready_at,
            kill_asked_at,
            killed_at,
            closed_at,
            latency_ms: closed_at.map(|c| (c - killed_at) * 1000.0),
            from_ask_ms: closed_at.map(|c| (c - kill_asked_at) * 1000.0),
            live_sessions: live.len(),
        })
    }
}

/// The latencies of one (build, kind, case), ms.
fn latencies(r: &WeatherReport, build: &str, kind: &str, case: Case) -> (Vec<f64>, usize) {
    let kills: Vec<&Kill> = r
        .kills
        .iter()
        .filter(|k| k.build == build && k.kind == kind && k.case == case)
        .collect();
    let seen = kills.iter().filter_map(|k| k.latency_ms).collect();
    (seen, kills.len())
}

/// The tables for people, with the command that made them.
pub fn summary(r: &WeatherReport) -> String {
    let mut out = format!(
        "{}\n\n{} CPUs; load average (1 min) {:.2} at the first arm's start, {:.2} at the last arm's end\n\n",
        r.config.command,
        r.cpus,
        r.arms.first().map_or(0.0, |a| a.load_start[0]),
        r.arms.last().map_or(0.0, |a| a.load_end[0]),
    );
    out.push_str(&format!(
        "False deaths under weather: the agent works through serve for {} min per arm; no browser dies.\n",
        r.config.minutes
    ));
    out.push_str(
        "weather           build   min  relaunches (agent)  per hour     ops  stalls hit  survived  longest ms  load start→end\n",
    );
    for a in &r.arms {
        let survived = a.event["stallsSurvived"]
            .as_u64()
            .map_or("-".to_owned(), |n| n.to_string());
        let longest = a.event["longestStallMs"]
            .as_u64()
            .map_or("-".to_owned(), |n| n.to_string());
        out.push_str(&format!(
            "{:<17} {:<6} {:>4.1}  {:>10} ({:>5})  {:>8.1}  {:>6}  {:>10}  {:>8}  {:>10}  {:.2}→{:.2}\n",
            a.sky,
            a.build,
            a.seconds / 60.0,
            a.relaunches.map_or("-".to_owned(), |n| n.to_string()),
            a.browsers.saturating_sub(1),
            a.false_deaths_per_hour,
            a.ops,
            a.stalls_hit,
            survived,
            longest,
            a.load_start[0],
            a.load_end[0],
        ));
    }
    out.push_str(
        "\nDetection latency, calm gateway: from the gateway's kill returning to the client seeing serve close its connection, ms\n",
    );
    out.push_str("kind     case      before median / max (n)     after median / max (n)\n");
    for kind in ["close", "reset", "silence"] {
        for case in [Case::Waiting, Case::Idle] {
            let cell = |build: &str| {
                let (seen, n) = latencies(r, build, kind, case);
                let max = seen.iter().copied().fold(f64::NAN, f64::max);
                let missed = n - seen.len();
                let missed = if missed > 0 {
                    format!(", {missed} unseen")
                } else {
                    String::new()
                };
                format!(
                    "{:>6.0} / {:>6.0} ({}{missed})",
                    median(&seen),
                    max,
                    seen.len()
                )
            };
            out.push_str(&format!(
                "{kind:<8} {:<8}  {:<26}  {}\n",
                case.as_str(),
                cell("before"),
                cell("after")
            ));
        }
    }
    out.push_str(
        "A negative latency: the client saw the close before the kill returned, which waits for Chromium's exit.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Sky;

    #[test]
    fn skies_parse_as_the_flag_spells_them() {
        let flows: Sky = "flows:1.2s/10s".parse().unwrap();
        let expected =
            gateway::Weather::calm().flows(Duration::from_millis(1200), Duration::from_secs(10));
        assert_eq!(
            (flows.name.as_str(), flows.weather()),
            ("flows:1.2s/10s", expected)
        );
        let link: Sky = "link:2s/15s".parse().unwrap();
        let expected =
            gateway::Weather::calm().link(Duration::from_secs(2), Duration::from_secs(15));
        assert_eq!(link.weather(), expected);
        assert_eq!(
            "calm".parse::<Sky>().unwrap().weather(),
            gateway::Weather::calm()
        );
        for bad in [
            "storm",
            "flows:1s",
            "flows:2s/1s",
            "rain:1s/2s",
            "flows:x/2s",
        ] {
            assert!(bad.parse::<Sky>().is_err(), "{bad}");
        }
    }
}
