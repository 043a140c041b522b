//! `outlive-lab bench`: the survival benchmark (baseline against outlive, side by side) and the
//! micro-measurements (checkpoint cost against RTT, death-detection latency, replace time).
//!
//! Everything runs on 127.0.0.1: an embedded gateway whose sessions die on schedule and an
//! embedded Aurora Bank. Raw data is returned as serialisable records; [`run`] writes them
//! under an output directory (`docs/measurements/` for the command).
//!
//! * [`records`] — the serialisable settings, runs and reports;
//! * `survival` — the two arms and [`survival()`];
//! * [`rotation`] — reactive against rotation against rotation + standby, on a short-poll task
//!   and a long-step one (`wizard`);
//! * `micro` — checkpoint cost, detection latency and page recovery: [`micro()`];
//! * [`silence`] — a silent death under a waiting call: library mode, `serve` and `run`;
//! * [`carry`] — a death under a working client: library mode, `serve` carrying the client,
//!   and `serve` closing its connection;
//! * [`watching`] — metrics and traces on against off;
//! * `summary` — [`summary()`], [`micro_summary()`] and [`timeline_runs()`].

use std::path::PathBuf;

use super::{create_out, timeline, write_json, write_text};
use crate::error::Error;

pub mod carry;
pub mod durable;
pub mod forms;
mod micro;
pub mod records;
pub mod rotation;
pub mod silence;
pub mod storage;
mod summary;
mod survival;
pub mod watching;
pub mod wizard;

pub use micro::micro;
pub use records::*;
pub use summary::{micro_summary, summary, timeline_runs};
pub use survival::survival;

/// What `outlive-lab bench` measures, and where the results go.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// The survival benchmark's settings; `None` skips it.
    pub survival: Option<SurvivalConfig>,
    /// The rotation benchmark's settings (reactive, rotation, rotation + standby); `None`
    /// skips it.
    pub rotation: Option<SurvivalConfig>,
    /// The micro-measurements' settings; `None` skips them.
    pub micro: Option<MicroConfig>,
    /// Samples of the storage figures (`storage.json`, `storage-summary.txt`); `None` skips
    /// them.
    pub storage: Option<u32>,
    /// The durable-mode figures (`durable.json`, `durable-summary.txt`): PostgreSQL to
    /// create a database in, and runs per throughput measurement; `None` skips them.
    pub durable: Option<(String, u32)>,
    /// The directory for the raw JSON, the timeline and the summary.
    pub out: PathBuf,
}

/// How much the micro-measurements sample.
#[derive(Debug, Clone, Copy)]
pub struct MicroConfig {
    /// Checkpoints per RTT setting.
    pub samples: u32,
    /// Kills per death mode for the detection latency.
    pub kills: u32,
}

/// `outlive-lab bench`: runs what `plan` asks for, printing progress. It writes
/// `survival.json` and `timeline.svg`, `micro.json`, and `summary.txt` (or
/// `micro-summary.txt` without the survival benchmark) under `plan.out`.
///
/// # Errors
///
/// Whatever [`survival()`] or [`micro()`] report, and [`ErrorKind::Write`] if the output
/// directory or a result cannot be written.
///
/// [`ErrorKind::Write`]: crate::ErrorKind::Write
pub async fn run(plan: &BenchPlan) -> Result<(), Error> {
    let out = &plan.out;
    create_out(out)?;
    let survival_report = match &plan.survival {
        Some(config) => {
            println!(
                "survival: {} tasks per arm, lifetime {:?}; this takes a few minutes",
                config.tasks, config.lifetime
            );
            let report = survival(config, |r| println!("  {r}")).await?;
            write_json(out, "survival.json", &report)?;
            write_text(
                out,
                "timeline.svg",
                &timeline::render(&timeline_runs(&report)),
            )?;
            Some(report)
        }
        None => None,
    };
    if let Some(config) = &plan.rotation {
        println!(
            "rotation: {} runs per arm (reactive, rotation, rotation + standby) of the short-poll task in turn, with a plain session, then of the long-step task side by side, lifetime {:?}; this takes about three minutes per run",
            config.tasks, config.lifetime
        );
        let report = rotation::rotation(config, |r| println!("  {r}")).await?;
        write_json(out, "rotation.json", &report)?;
        write_text(
            out,
            "rotation-timeline.svg",
            &timeline::render(&rotation::rotation_timeline(&report)),
        )?;
        let text = rotation::rotation_summary(&report);
        println!("\n{text}");
        write_text(out, "rotation-summary.txt", &text)?;
    }
    let micro_report = match plan.micro {
        Some(MicroConfig { samples, kills }) => {
            println!(
                "micro: checkpoint cost at RTT 0/20/50 ms, detection latency per death mode, page recovery against a relaunch"
            );
            let report = micro(samples, kills).await?;
            write_json(out, "micro.json", &report)?;
            Some(report)
        }
        None => None,
    };
    if let Some(samples) = plan.storage {
        println!(
            "storage: checkpoints with 1 MiB of unchanged localStorage (and 1000 IndexedDB records) against a small one, and of the realistic two-site page on each new document; restores of both and of it"
        );
        let stored = storage::storage(samples).await?;
        write_json(out, "storage.json", &stored)?;
        let text = storage::storage_summary(&stored);
        println!("\n{text}");
        write_text(out, "storage-summary.txt", &text)?;
    }
    if let Some((database_url, runs)) = &plan.durable {
        println!(
            "durable: checkpoints in memory and in PostgreSQL, then {runs} runs through the queue with 1 and 2 workers, and {} runs with {} workers under --max-sessions {}",
            durable::SCALE.runs,
            durable::SCALE.workers,
            durable::SCALE.max_sessions.unwrap_or(0)
        );
        let report = durable::durable(database_url, *runs).await?;
        write_json(out, "durable.json", &report)?;
        let text = durable::durable_summary(&report);
        println!("\n{text}");
        write_text(out, "durable-summary.txt", &text)?;
    }
    let (name, text) = match (&survival_report, &micro_report) {
        (Some(s), m) => ("summary.txt", summary(s, m.as_ref())),
        (None, Some(m)) => ("micro-summary.txt", micro_summary(m)),
        (None, None) => return Ok(()),
    };
    println!("\n{text}");
    write_text(out, name, &text)
}
