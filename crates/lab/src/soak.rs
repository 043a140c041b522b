//! `outlive-lab soak`: many short runs with random deaths of every mode, then a leak audit —
//! sessions, Chromium processes, temp profiles, file descriptors and memory, measured.

use std::path::Path;
use std::time::Duration;

use gateway::DeathMode;
use outlive::{Options, WideEvent};
use procfs::process::Process;
use serde::Serialize;
use tokio::time::Instant;

use super::{create_out, write_json};
use crate::error::{Error, ErrorKind};
use outlive::Solari;
use outlive_bed::bank::{BankProgress, BankTask};
use outlive_bed::bed::{TestBed, dying};

/// Soak settings.
#[derive(Debug, Clone, Serialize)]
pub struct SoakConfig {
    /// Runs in total.
    pub runs: u32,
    /// Runs at once (the gateway's session limit is this + 1, for replacements).
    pub concurrency: u32,
    /// Session lifetime; deaths come at lifetime ± lifetime/2.
    #[serde(serialize_with = "ms")]
    pub lifetime: Duration,
    /// Probability a browser is dead on arrival.
    pub doa: f64,
    /// Polls per task (every 100 ms).
    pub polls: u32,
    /// outlive's relaunch budget per run.
    pub max_relaunches: u32,
    /// outlive's heartbeat interval (silence is detected within interval + timeout).
    #[serde(serialize_with = "ms")]
    pub heartbeat_interval: Duration,
    /// outlive's heartbeat timeout.
    #[serde(serialize_with = "ms")]
    pub heartbeat_timeout: Duration,
    /// The task saves its poll count with a checkpoint after each poll (`checkpoint_with`);
    /// without, it keeps it only with the caller and relies on the periodic checkpoints.
    pub progress_checkpoints: bool,
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            runs: 200,
            concurrency: 2,
            lifetime: Duration::from_secs(2),
            doa: 0.1,
            polls: 15,
            max_relaunches: 12,
            heartbeat_interval: Duration::from_millis(250),
            heartbeat_timeout: Duration::from_millis(500),
            progress_checkpoints: true,
        }
    }
}

/// What the machine looked like at one point of the soak.
#[derive(Debug, Clone, Copy, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Footprint {
    /// Runs finished so far.
    pub after_runs: u32,
    /// Resident memory of this process, KiB.
    pub rss_kib: u64,
    /// Open file descriptors of this process.
    pub fds: usize,
    /// Chromium processes alive with a profile under the soak's profile directory.
    pub chromium_processes: usize,
    /// Profile directories left under the soak's profile directory.
    pub temp_profiles: usize,
    /// `org.chromium.*` process-singleton directories in the system temp dir (Chromium
    /// leaves one there when it is killed, unless its TMPDIR points elsewhere).
    pub tmp_singletons: usize,
}

/// The soak's result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SoakReport {
    /// Settings.
    pub config: SoakConfig,
    /// Runs per outcome.
    pub completed: u32,
    /// Runs that gave up (budget exhausted).
    pub gave_up: u32,
    /// Runs that failed otherwise (a task error): must be 0.
    pub failed: u32,
    /// Relaunches over all runs.
    pub relaunches: u32,
    /// Release failures over all runs: must be 0.
    pub release_failed: u32,
    /// TOTP sign-ins beyond one per run (a login lost across a relaunch): must be 0.
    pub extra_sign_ins: u32,
    /// Wall time.
    pub total_ms: u64,
    /// Before the first run.
    pub before: Footprint,
    /// After the first 20 runs.
    pub after_20: Footprint,
    /// At the end, after the gateway shut down.
    pub end: Footprint,
    /// Sessions the gateway still held at the end.
    pub sessions_left: usize,
    /// Every run's wide event.
    pub events: Vec<WideEvent>,
}

impl SoakReport {
    /// A few lines for people: the counts, then the footprint before, after 20 runs and at
    /// the end.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "completed {} · gave up {} · failed {} · relaunches {} · release failures {} · extra sign-ins {}",
            self.completed,
            self.gave_up,
            self.failed,
            self.relaunches,
            self.release_failed,
            self.extra_sign_ins
        );
        for (label, f) in [
            ("before", self.before),
            ("after 20 runs", self.after_20),
            ("end", self.end),
        ] {
            let _ = write!(
                out,
                "\n  {label:>14}: rss {} KiB, fds {}, chromium {}, temp profiles {}, /tmp singletons {}",
                f.rss_kib, f.fds, f.chromium_processes, f.temp_profiles, f.tmp_singletons
            );
        }
        let _ = write!(
            out,
            "\n  sessions left on the gateway: {}",
            self.sessions_left
        );
        out
    }
}

/// Measures this process, and the Chromium processes and profiles under `profiles`, now.
pub fn footprint(after_runs: u32, profiles: &std::path::Path) -> Footprint {
    let needle = profiles.to_string_lossy().into_owned();
    let me = Process::myself().ok();
    let rss_kib = me
        .as_ref()
        .and_then(|p| p.status().ok())
        .and_then(|s| s.vmrss)
        .unwrap_or(0);
    let fds = me.as_ref().and_then(|p| p.fd_count().ok()).unwrap_or(0);
    let my_pid = std::process::id() as i32;
    let chromium_processes = procfs::process::all_processes()
        .map(|all| {
            all.flatten()
                .filter(|p| p.pid() != my_pid)
                .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
                .filter(|p| {
                    p.cmdline()
                        .is_ok_and(|args| args.iter().any(|a| a.contains(&needle)))
                })
                .count()
        })
        .unwrap_or(0);
    let temp_profiles = std::fs::read_dir(profiles).map(|d| d.count()).unwrap_or(0);
    let tmp_singletons = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("org.chromium."))
                .count()
        })
        .unwrap_or(0);
    Footprint {
        after_runs,
        rss_kib,
        fds,
        chromium_processes,
        temp_profiles,
        tmp_singletons,
    }
}

/// `outlive-lab soak`: checks for Chromium, runs the soak printing every tenth run and every
/// run that did not complete, prints the summary and writes `soak.json` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bed`] if Chromium is missing and cannot be installed; whatever [`soak()`]
/// reports; [`ErrorKind::Write`] if `out` or the report cannot be written.
pub async fn run(config: &SoakConfig, out: &Path) -> Result<SoakReport, Error> {
    outlive_bed::setup::ensure_chromium()?;
    create_out(out)?;
    println!(
        "soak: {} runs, {} at once, sessions live {:?} ± half, deaths of every mode",
        config.runs, config.concurrency, config.lifetime
    );
    let report = soak(config, |n, e| {
        if n % 10 == 0 || e.outcome != outlive::Outcome::Completed {
            println!(
                "  run {n}: {} ({} relaunches)",
                e.outcome.as_str(),
                e.relaunches
            );
        }
    })
    .await?;
    println!("{}", report.summary());
    write_json(out, "soak.json", &report)?;
    Ok(report)
}

/// One run of the bank task under outlive with the soak's options: its wide event, and how
/// many times it signed in more than once (a death between a sign-in and its checkpoint).
async fn one_run(provider: &Solari, task: &BankTask, config: &SoakConfig) -> (WideEvent, u32) {
    let progress = BankProgress::default();
    let outlive::Reported { result: _, event } = task
        .outlive(
            provider,
            &progress,
            Options::new()
                .checkpoint_every(Duration::from_millis(300))
                .max_relaunches(config.max_relaunches)
                .heartbeat_interval(config.heartbeat_interval)
                .heartbeat_timeout(config.heartbeat_timeout)
                .relaunch_backoff(Duration::from_millis(100)),
        )
        .await;
    (event, progress.sign_ins().saturating_sub(1))
}

/// Runs the soak; `on_run` sees each run's event as it finishes.
pub async fn soak(
    config: &SoakConfig,
    on_run: impl Fn(u32, &WideEvent),
) -> Result<SoakReport, Error> {
    // The gateway's Chromium profiles go into a directory of the soak's own, so the audit
    // counts only what this soak started.
    let profiles = tempfile::Builder::new()
        .prefix("outlive-soak-")
        .tempdir()
        .map_err(|e| Error::with(ErrorKind::TempDir, e))?;
    let before = footprint(0, profiles.path());
    let started = Instant::now();
    let bed = TestBed::start(
        dying(config.lifetime, config.lifetime / 2, DeathMode::Mixed)
            .doa(config.doa)
            .max_sessions(config.concurrency as usize + 1)
            .chromium(outlive::LocalChromium::new().profile_root(profiles.path())),
    )
    .await?;
    let provider = bed.provider();
    // Each poll is saved with the checkpoint (`ctx.checkpoint_with`), as the README tells a
    // task to keep its steps: a death after a poll starts `max_relaunches` again.
    let mut task = bed.task(config.polls, Duration::from_millis(100));
    task.durable_progress = config.progress_checkpoints;

    let mut events = Vec::new();
    let mut extra_sign_ins = 0;
    let mut after_20 = Footprint::default();
    let mut next = 0u32;
    let mut running = futures::stream::FuturesUnordered::new();
    loop {
        while next < config.runs && running.len() < config.concurrency as usize {
            running.push(one_run(&provider, &task, config));
            next += 1;
        }
        let Some((event, extra)) = futures::StreamExt::next(&mut running).await else {
            break;
        };
        extra_sign_ins += extra;
        events.push(event);
        let finished = events.len() as u32;
        on_run(finished, &events[events.len() - 1]);
        if finished == 20 {
            after_20 = footprint(20, profiles.path());
        }
    }
    let status = bed.shutdown().await?;
    let finished = events.len() as u32;
    let count = |o: outlive::Outcome| events.iter().filter(|e| e.outcome == o).count() as u32;
    Ok(SoakReport {
        config: config.clone(),
        completed: count(outlive::Outcome::Completed),
        gave_up: count(outlive::Outcome::GaveUp),
        failed: count(outlive::Outcome::Failed),
        relaunches: events.iter().map(|e| e.relaunches).sum(),
        release_failed: events.iter().map(|e| e.release_failed).sum(),
        extra_sign_ins,
        total_ms: started.elapsed().as_millis() as u64,
        before,
        after_20,
        end: footprint(finished, profiles.path()),
        sessions_left: status.live_sessions + status.dead_sessions,
        events,
    })
}
