//! `outlive-lab soak --serve-for DURATION`: `outlive serve` left running for hours, as people
//! leave an agent's browser, under a client that reconnects and works while its sessions die
//! every few seconds. `serve`'s RSS, descriptors and threads are sampled as it goes; the
//! growth per 100 deaths after a warm-up is reported, and after SIGTERM the gateway must hold
//! no session and no Chromium.

use std::path::{Path, PathBuf};
use std::time::Duration;

use procfs::process::Process;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::time::Instant;

use super::{create_out, write_json, write_text};
use crate::error::{Error, ErrorKind};
use crate::served::{AgentConfig, AgentScript, Build, Serve, read_event, read_lines};
use outlive_bed::bed::{TestBed, dying};

/// What to run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServeSoakConfig {
    /// How long `serve` runs before its SIGTERM.
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Sessions die this long after their browser started (close, reset, silence in turn).
    #[serde(serialize_with = "secs")]
    pub lifetime: Duration,
    /// Growth is measured from this point on (allocators and caches settle first).
    #[serde(serialize_with = "secs")]
    pub warm_up: Duration,
    /// How often `serve` is sampled.
    #[serde(serialize_with = "secs")]
    pub every: Duration,
    /// The agent takes a full-page screenshot every this many evaluations (0: never).
    pub screenshot_every: u32,
    /// A Python with `websockets` (`scripts/clients` makes `target/clients/venv`).
    pub python: PathBuf,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// `serve` at one moment.
#[derive(Debug, Clone, Copy, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since `serve` printed its URLs.
    pub at_s: f64,
    /// Browsers the agent has worked in so far (deaths = browsers − 1).
    pub browsers: u32,
    /// `serve`'s resident memory, KiB.
    pub rss_kib: u64,
    /// `serve`'s open file descriptors.
    pub fds: usize,
    /// `serve`'s threads.
    pub threads: u64,
    /// The gateway's sessions (live + dead, unreleased).
    pub sessions: usize,
    /// The gateway's Chromium processes.
    pub chromium: usize,
}

/// Growth of one measure over the samples after the warm-up.
#[derive(Debug, Clone, Copy, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Growth {
    /// At the first sample after the warm-up.
    pub first: f64,
    /// At the last sample.
    pub last: f64,
    /// The least in between.
    pub min: f64,
    /// The most in between.
    pub max: f64,
    /// Least-squares slope against deaths, per 100 deaths.
    pub per_100_deaths: f64,
}

/// The soak's result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServeSoakReport {
    /// Settings.
    pub config: ServeSoakConfig,
    /// Deaths the agent saw (browsers it worked in − 1).
    pub deaths: u32,
    /// Deaths after the warm-up.
    pub deaths_after_warm_up: u32,
    /// `serve`'s resident memory after the warm-up, KiB.
    pub rss_kib: Growth,
    /// `serve`'s descriptors after the warm-up.
    pub fds: Growth,
    /// `serve`'s threads after the warm-up.
    pub threads: Growth,
    /// `serve`'s exit code after SIGTERM.
    pub exit_code: Option<i32>,
    /// How long it took to exit.
    pub exit_ms: u64,
    /// `serve`'s wide event (`--event-file`).
    pub event: serde_json::Value,
    /// Sessions the gateway held after `serve` exited (before it shut down).
    pub sessions_left: usize,
    /// Chromium processes alive then.
    pub chromium_left: usize,
    /// Lines the agent wrote to stderr (its errors, reconnects that failed).
    pub agent_errors: Vec<String>,
    /// Every sample, from `serve`'s start.
    pub samples: Vec<Sample>,
}

/// `serve` (pid) and the gateway now.
fn sample(pid: i32, at: Duration, browsers: u32, gw: &gateway::Gateway) -> Sample {
    let me = Process::new(pid).ok();
    let status = me.as_ref().and_then(|p| p.status().ok());
    let gw = gw.status();
    Sample {
        at_s: at.as_secs_f64(),
        browsers,
        rss_kib: status.as_ref().and_then(|s| s.vmrss).unwrap_or(0),
        fds: me.as_ref().and_then(|p| p.fd_count().ok()).unwrap_or(0),
        threads: status.map_or(0, |s| s.threads),
        sessions: gw.live_sessions + gw.dead_sessions,
        chromium: gw.chromium_processes,
    }
}

/// The growth of `measure` over `samples` (after the warm-up), against deaths.
fn growth(samples: &[Sample], measure: impl Fn(&Sample) -> f64) -> Growth {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Growth::default();
    };
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (f64::from(s.browsers), measure(s)))
        .collect();
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let values = points.iter().map(|p| p.1);
    Growth {
        first: measure(first),
        last: measure(last),
        min: values.clone().fold(f64::INFINITY, f64::min),
        max: values.fold(f64::NEG_INFINITY, f64::max),
        per_100_deaths: if sxx > 0.0 { 100.0 * sxy / sxx } else { 0.0 },
    }
}

/// Runs the soak, printing a line per sample, and writes `serve-soak.json` and
/// `serve-soak-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when the bed, `serve` or the agent cannot start;
/// [`ErrorKind::Write`] when the results cannot be written.
pub async fn run(config: &ServeSoakConfig, out: &Path) -> Result<ServeSoakReport, Error> {
    outlive_bed::setup::ensure_chromium()?;
    create_out(out)?;
    let dir = tempfile::tempdir().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let script = AgentScript::write(dir.path())?;
    let bed = TestBed::start(
        dying(config.lifetime, Duration::ZERO, gateway::DeathMode::Cycle).max_sessions(3),
    )
    .await?;
    let event_file = dir.path().join("event.json");
    let serve = Serve::start(&Build::This, &bed, &event_file, None).await?;
    let agent_config = AgentConfig {
        python: config.python.clone(),
        screenshot_every: config.screenshot_every,
        ops_every: 0,
    };
    let mut agent = script.start(&agent_config, &serve.cdp_url)?;
    let errors = tokio::spawn(read_lines(agent.stderr.take().expect("piped")));
    let samples = watch(config, &serve, &mut agent, bed.gateway()).await;
    let _ = agent.kill().await;
    let (exit_code, exit_took) = serve.stop().await;
    let left = bed.gateway().status();
    bed.shutdown().await?;
    let event = read_event(&event_file);
    let report = report(config, samples, (exit_code, exit_took), event, left, errors);
    let report = report.await;
    println!("{}", summary(&report));
    write_json(out, "serve-soak.json", &report)?;
    write_text(out, "serve-soak-summary.txt", &summary(&report))?;
    Ok(report)
}

/// Samples `serve` every `config.every` until `config.duration` is over, counting the
/// browsers the agent reports; stops early if either exits.
async fn watch(
    config: &ServeSoakConfig,
    serve: &Serve,
    agent: &mut Child,
    gw: &gateway::Gateway,
) -> Vec<Sample> {
    let started = Instant::now();
    let mut lines = BufReader::new(agent.stdout.take().expect("piped")).lines();
    let mut browsers = 0;
    let mut samples = vec![sample(serve.pid(), Duration::ZERO, 0, gw)];
    let mut tick = tokio::time::interval_at(started + config.every, config.every);
    while started.elapsed() < config.duration {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    if let Some(n) = line.strip_prefix("browser ").and_then(|n| n.parse().ok()) {
                        browsers = n;
                    }
                }
                _ => {
                    println!("the agent exited");
                    break;
                }
            },
            _ = tick.tick() => {
                let s = sample(serve.pid(), started.elapsed(), browsers, gw);
                println!(
                    "  {:>6.0} s: {} browsers, rss {} KiB, fds {}, threads {}, sessions {}, chromium {}",
                    s.at_s, s.browsers, s.rss_kib, s.fds, s.threads, s.sessions, s.chromium
                );
                samples.push(s);
                if s.rss_kib == 0 {
                    println!("serve exited");
                    break;
                }
            }
        }
    }
    samples
}

async fn report(
    config: &ServeSoakConfig,
    samples: Vec<Sample>,
    (exit_code, exit_took): (Option<i32>, Duration),
    event: serde_json::Value,
    left: gateway::Status,
    errors: tokio::task::JoinHandle<Vec<String>>,
) -> ServeSoakReport {
    let warm = config.warm_up.as_secs_f64();
    let after: Vec<Sample> = samples.iter().copied().filter(|s| s.at_s >= warm).collect();
    let deaths = samples.last().map_or(0, |s| s.browsers.saturating_sub(1));
    let deaths_after_warm_up = match (after.first(), after.last()) {
        (Some(a), Some(b)) => b.browsers - a.browsers,
        _ => 0,
    };
    ServeSoakReport {
        config: config.clone(),
        deaths,
        deaths_after_warm_up,
        rss_kib: growth(&after, |s| s.rss_kib as f64),
        fds: growth(&after, |s| s.fds as f64),
        threads: growth(&after, |s| s.threads as f64),
        exit_code,
        exit_ms: exit_took.as_millis() as u64,
        event,
        sessions_left: left.live_sessions + left.dead_sessions,
        chromium_left: left.chromium_processes,
        agent_errors: errors.await.unwrap_or_default(),
        samples,
    }
}

/// A few lines for people.
pub fn summary(r: &ServeSoakReport) -> String {
    let line = |name: &str, g: &Growth| {
        format!(
            "  {name:>8}: {:.0} → {:.0} (min {:.0}, max {:.0}); {:+.1} per 100 deaths",
            g.first, g.last, g.min, g.max, g.per_100_deaths
        )
    };
    let seconds = r.samples.last().map_or(0.0, |s| s.at_s);
    [
        format!(
            "serve soak: {:.0} s, {} deaths (one per {:.1} s; {} after the first {:.0} s), lifetime {:?}",
            seconds,
            r.deaths,
            seconds / f64::from(r.deaths.max(1)),
            r.deaths_after_warm_up,
            r.config.warm_up.as_secs_f64(),
            r.config.lifetime
        ),
        "after the warm-up:".to_owned(),
        line("rss KiB", &r.rss_kib),
        line("fds", &r.fds),
        line("threads", &r.threads),
        format!(
            "SIGTERM: exit code {:?} in {} ms; left on the gateway: {} sessions, {} Chromium processes",
            r.exit_code, r.exit_ms, r.sessions_left, r.chromium_left
        ),
        format!("agent errors: {}", r.agent_errors.len()),
    ]
    .join("\n")
}
