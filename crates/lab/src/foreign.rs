//! The foreign-client benchmark (`outlive-lab bench --foreign-only`): a Playwright (Python) script
//! connected straight to a gateway session against the same script under `outlive run`, side
//! by side in one run, round by round:
//!
//! * **pace** — 40 page loads: the script's wall time (process start to exit) and its work;
//! * **screenshots** — 60 full-page screenshots;
//! * **screencast** — 30 s of `Page.startScreencast` of a 60 fps animation, every 4th frame:
//!   frames received;
//! * **replace** — under `outlive run` on a gateway whose sessions die every 8 s: the death
//!   detected → the next entry's process started → its client connected (the script's own
//!   start-up in between). Next to it, library mode's replace time on the same gateway (the
//!   bank task, death detected → re-entered).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use outlive::{Command, Milestone, Options, Provider};
use serde::Serialize;
use serde_json::Value;

use super::{create_out, write_json, write_text};
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use crate::sync::lock;
use outlive_bed::bed::TestBed;

const SCRIPT: &str = include_str!("foreign_client.py");

/// What to run.
#[derive(Debug, Clone)]
pub struct ForeignConfig {
    /// A Python with Playwright installed (`scripts/clients` makes `target/clients/venv`).
    pub python: PathBuf,
    /// Rounds (each runs every phase once per arm).
    pub rounds: u32,
    /// Where `foreign.json` and `foreign-summary.txt` go.
    pub out: PathBuf,
}

/// One run of the script.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptRun {
    /// `direct` or `outlive`.
    pub arm: &'static str,
    /// The phase.
    pub phase: String,
    /// Process spawned → exited (for `outlive`: the whole `run_command`, browser launch
    /// included for neither arm: the direct arm's session is created before the clock starts,
    /// the outlive arm's launch is subtracted).
    pub wall_ms: f64,
    /// The script's own timing of its work (after connecting).
    pub work_ms: f64,
    /// Screencast frames received.
    pub frames: Option<u64>,
}

/// One death in the replace phase.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// Death detected → the next entry's process started.
    pub to_process_ms: f64,
    /// Death detected → its client connected to the restored browser.
    pub to_connected_ms: f64,
    /// The script's start-up: process started → connected.
    pub startup_ms: f64,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForeignReport {
    /// Every script run.
    pub runs: Vec<ScriptRun>,
    /// Every death of the replace phase.
    pub replacements: Vec<Replacement>,
    /// Library mode on the same gateway: death detected → re-entered, per death.
    pub library_replace_ms: Vec<f64>,
}

/// Runs the benchmark; writes `foreign.json` and `foreign-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when a script fails or the bed does not start.
pub async fn run(config: &ForeignConfig) -> Result<ForeignReport, Error> {
    create_out(&config.out)?;
    let script = tempfile::Builder::new()
        .suffix(".py")
        .tempfile()
        .map_err(|e| Error::with(ErrorKind::Bench, e))?;
    std::fs::write(script.path(), SCRIPT).map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let mut runs = Vec::new();
    {
        let bed = TestBed::start(outlive_bed::bed::until_killed(Duration::ZERO)).await?;
        for round in 0..config.rounds {
            for phase in ["pace", "screenshots", "screencast"] {
                // Alternate which arm goes first.
                let arms = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for through_outlive in arms {
                    let run = if through_outlive {
                        outlive_arm(&bed, config, script.path(), phase).await?
                    } else {
                        direct_arm(&bed, config, script.path(), phase).await?
                    };
                    eprintln!(
                        "  {} {:<11} wall {:>7.0} ms, work {:>7.0} ms{}",
                        run.arm,
                        run.phase,
                        run.wall_ms,
                        run.work_ms,
                        run.frames
                            .map(|f| format!(", {f} frames"))
                            .unwrap_or_default()
                    );
                    runs.push(run);
                }
            }
        }
        bed.shutdown().await?;
    }
    let (replacements, library_replace_ms) = replace_phase(config, script.path()).await?;
    let report = ForeignReport {
        runs,
        replacements,
        library_replace_ms,
    };
    write_json(&config.out, "foreign.json", &report)?;
    write_text(&config.out, "foreign-summary.txt", &summary(&report))?;
    Ok(report)
}

fn bench_error(what: impl std::fmt::Display) -> Error {
    Error::with(ErrorKind::Bench, what.to_string())
}

/// The script's records from `file`, one JSON per line.
fn records(file: &Path) -> Result<Vec<Value>, Error> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::with(ErrorKind::Bench, e))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

fn script_command(
    config: &ForeignConfig,
    script: &Path,
    bed: &TestBed,
    phase: &str,
    result: &Path,
) -> Command {
    Command::new(&config.python)
        .args([script])
        .env("BANK_URL", bed.bank().base_url())
        .env("PHASE", phase)
        .env("RESULT", result)
}

async fn direct_arm(
    bed: &TestBed,
    config: &ForeignConfig,
    script: &Path,
    phase: &str,
) -> Result<ScriptRun, Error> {
    let session = bed.provider().launch().await.map_err(bench_error)?;
    let result = tempfile::NamedTempFile::new().map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let started = std::time::Instant::now();
    let status = tokio::process::Command::new(&config.python)
        .arg(script)
        .env("BANK_URL", bed.bank().base_url())
        .env("PHASE", phase)
        .env("RESULT", result.path())
        .env("OUTLIVE_CDP_URL", session.endpoint().expose())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let wall = started.elapsed();
    let _ = session.release().await;
    if !status.success() {
        return Err(bench_error(format!(
            "the direct {phase} script failed: {status}"
        )));
    }
    script_run("direct", phase, wall, result.path())
}

async fn outlive_arm(
    bed: &TestBed,
    config: &ForeignConfig,
    script: &Path,
    phase: &str,
) -> Result<ScriptRun, Error> {
    let result = tempfile::NamedTempFile::new().map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let entered = Arc::new(Mutex::new(None));
    let slot = entered.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(5))
        .on_milestone(move |m| {
            if let Milestone::Entered { .. } = m {
                lock(&slot).get_or_insert(std::time::Instant::now());
            }
        });
    let command = script_command(config, script, bed, phase, result.path());
    outlive::run_command(&bed.provider(), &command, options, std::future::pending())
        .await
        .map_err(|e| bench_error(format!("the {phase} script under outlive failed: {e}")))?;
    let ended = std::time::Instant::now();
    // From the entry (the browser launched and ready, the program about to start) to the end.
    let from = lock(&entered).ok_or_else(|| bench_error("never entered"))?;
    script_run("outlive", phase, ended - from, result.path())
}

fn script_run(
    arm: &'static str,
    phase: &str,
    wall: Duration,
    result: &Path,
) -> Result<ScriptRun, Error> {
    let record = records(result)?
        .pop()
        .ok_or_else(|| bench_error(format!("the {phase} script reported nothing")))?;
    Ok(ScriptRun {
        arm,
        phase: phase.to_owned(),
        wall_ms: wall.as_secs_f64() * 1000.0,
        work_ms: record["workMs"].as_f64().unwrap_or(f64::NAN),
        frames: record["frames"].as_u64(),
    })
}

/// Wall-clock milliseconds of `at` (a std `Instant` in the past).
fn epoch_ms(at: std::time::Instant) -> f64 {
    let ago = at.elapsed();
    (SystemTime::now() - ago)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// The script under outlive on a gateway whose sessions die every 8 s, through three deaths;
/// then the bank task in library mode on the same gateway.
async fn replace_phase(
    config: &ForeignConfig,
    script: &Path,
) -> Result<(Vec<Replacement>, Vec<f64>), Error> {
    let dying = outlive_bed::bed::dying(
        Duration::from_secs(8),
        Duration::ZERO,
        gateway::DeathMode::Close,
    )
    .max_sessions(3);
    let bed = TestBed::start(dying).await?;
    let result = tempfile::NamedTempFile::new().map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let deaths = Arc::new(Mutex::new(Vec::new()));
    let slot = deaths.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(2))
        .max_relaunches(10)
        .on_milestone(move |m| {
            if let Milestone::Died { detected_at, .. } = m {
                lock(&slot).push(epoch_ms(*detected_at));
            }
        });
    let command =
        script_command(config, script, &bed, "replace", result.path()).env("LAST_ATTEMPT", "4");
    outlive::run_command(&bed.provider(), &command, options, std::future::pending())
        .await
        .map_err(|e| bench_error(format!("the replace script under outlive failed: {e}")))?;
    let entries = records(result.path())?;
    let deaths = lock(&deaths).clone();
    let mut replacements = Vec::new();
    for (death, entry) in deaths.iter().zip(entries.iter().skip(1)) {
        let (started, connected) = (
            entry["startedMs"].as_f64().unwrap_or(f64::NAN),
            entry["connectedMs"].as_f64().unwrap_or(f64::NAN),
        );
        replacements.push(Replacement {
            to_process_ms: started - death,
            to_connected_ms: connected - death,
            startup_ms: connected - started,
        });
    }

    // Library mode, same gateway: the bank task through the same deaths.
    let replaced = Arc::new(Mutex::new(Vec::new()));
    let slot = replaced.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(2))
        .max_relaunches(10)
        .on_milestone(move |m| {
            if let Milestone::Entered {
                replaced_in: Some(d),
                ..
            } = m
            {
                lock(&slot).push(d.as_secs_f64() * 1000.0);
            }
        });
    let task = bed.task(40, Duration::from_millis(500));
    let outlive::Reported { result: r, .. } = task
        .outlive(
            &bed.provider(),
            &outlive_bed::bank::BankProgress::default(),
            options,
        )
        .await;
    r.map_err(|e| bench_error(format!("the library task failed: {e}")))?;
    bed.shutdown().await?;
    let library = lock(&replaced).clone();
    Ok((replacements, library))
}

fn medians(report: &ForeignReport, arm: &str, phase: &str, pick: fn(&ScriptRun) -> f64) -> f64 {
    let v: Vec<f64> = report
        .runs
        .iter()
        .filter(|r| r.arm == arm && r.phase == phase)
        .map(pick)
        .collect();
    median(&v)
}

/// The summary, with each target and whether it held.
pub fn summary(r: &ForeignReport) -> String {
    let mut s = String::from(
        "Foreign client (Playwright 1.65, Python) straight to a gateway session vs under `outlive run` (same gateway, same machine, alternating)\n\n",
    );
    for (phase, target) in [("pace", 1.02), ("screenshots", 1.03)] {
        let (d, o) = (
            medians(r, "direct", phase, |x| x.wall_ms),
            medians(r, "outlive", phase, |x| x.wall_ms),
        );
        let (dw, ow) = (
            medians(r, "direct", phase, |x| x.work_ms),
            medians(r, "outlive", phase, |x| x.work_ms),
        );
        s += &format!(
            "{phase:<12} wall median direct {d:.0} ms, outlive {o:.0} ms: {:.3} x (target <= {target}: {}); work {dw:.0} / {ow:.0} ms: {:.3} x\n",
            o / d,
            if o / d <= target { "held" } else { "NOT held" },
            ow / dw,
        );
    }
    let frames = |arm| medians(r, arm, "screencast", |x| x.frames.unwrap_or(0) as f64);
    let (fd, fo) = (frames("direct"), frames("outlive"));
    s += &format!(
        "screencast   frames in 30 s (about 15 fps offered): median direct {fd:.0}, outlive {fo:.0} (target: no more dropped than direct: {})\n",
        if fo >= fd { "held" } else { "NOT held" }
    );
    let pick =
        |f: fn(&Replacement) -> f64| median(&r.replacements.iter().map(f).collect::<Vec<_>>());
    s += &format!(
        "replace      death detected -> next process started median {:.0} ms, -> its client connected {:.0} ms (its own start-up {:.0} ms); library mode on the same gateway: death -> re-entered {:.0} ms (n = {}, {})\n",
        pick(|x| x.to_process_ms),
        pick(|x| x.to_connected_ms),
        pick(|x| x.startup_ms),
        median(&r.library_replace_ms),
        r.replacements.len(),
        r.library_replace_ms.len(),
    );
    s
}
