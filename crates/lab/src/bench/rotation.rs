//! The rotation benchmark: two tasks, each in three arms on a gateway whose sessions die of
//! old age (lifetime ± jitter), with unplanned deaths mixed in. The arms: reactive (wait for
//! the death, relaunch), rotation (leave each browser at a safe point before its predicted
//! death) and rotation + standby (a spare browser ready for the unplanned ones).
//!
//! * The **short-poll** task: the bank task (sign in, then poll the account page every
//!   lifetime/30 until `polls` polls), saving its poll count with `ctx.checkpoint_with` after
//!   each poll, so its own checkpoints are a poll apart. Runs one at a time, the arms in turn;
//!   a plain session runs beside them, for the task's pace without outlive.
//! * The **long-step** task ([`super::wizard`]): sign in, then [`LONG_STEPS`] steps of half
//!   the lifetime, each ending in a non-idempotent transfer and `ctx.checkpoint_with`: its own
//!   checkpoints are half a life apart. Its three arms run side by side (it mostly waits), on a
//!   bed of their own.
//!
//! Unplanned deaths, the same in every arm and task ([`UNPLANNED`]). In runs 1 and 2 (mod 3)
//! the first session dies at 319/608 of the lifetime, like the one early Solari death among
//! seven measured. In runs 1 (mod 3) the second session is dead on arrival too (with a
//! standby, that session is the standby: it never reaches the task). Runs 0 (mod 3) meet
//! deaths of old age only: their ratio is rotation's own cost.
//!
//! The targets (issue "Rotation must never be worse than reacting"), per task, for each
//! rotation arm against reacting:
//!
//! * total time (median over runs) ≤ 1.00 × reacting's;
//! * sessions per run ≤ reacting's + 1;
//! * the work redone per rotation (`Milestone::Rotated.redone`), median, ≤ 50 ms on the short
//!   task and ≤ reacting's per death on the long one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::{Options, Outcome, Rotation, WideEvent};
use serde::Serialize;
use tokio::time::Instant;

mod chaos;
mod summary;
mod tape;
mod targets;

pub use chaos::UNPLANNED;
pub use summary::{rotation_summary, rotation_timeline};
pub use targets::targets;

use super::records::{ArmKind, SurvivalConfig, ms};
use super::wizard::{StepEvent, StepMark, WizardProgress, WizardTask};
use crate::error::Error;
use crate::sync::lock;
use chaos::Chaotic;
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::TestBed;
use tape::Tape;

/// Steps of the long-step task.
pub const LONG_STEPS: u32 = 3;
/// The short task's target for the work redone per rotation (median).
pub const SHORT_REDONE_TARGET_MS: f64 = 50.0;

/// The arms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RotationArm {
    /// Deaths are waited for, then replaced.
    Reactive,
    /// `Rotation::Expected(lifetime)`.
    Rotation,
    /// `Rotation::Expected(lifetime)` and `standby(true)`.
    RotationStandby,
}

impl RotationArm {
    const ALL: [RotationArm; 3] = [
        RotationArm::Reactive,
        RotationArm::Rotation,
        RotationArm::RotationStandby,
    ];

    fn options(self, lifetime: Duration) -> Options {
        match self {
            RotationArm::Reactive => Options::new(),
            RotationArm::Rotation => Options::new().rotation(Rotation::Expected(lifetime)),
            RotationArm::RotationStandby => Options::new()
                .rotation(Rotation::Expected(lifetime))
                .standby(true),
        }
    }

    fn name(self) -> &'static str {
        match self {
            RotationArm::Reactive => "reactive",
            RotationArm::Rotation => "rotation",
            RotationArm::RotationStandby => "rotation+standby",
        }
    }
}

/// The tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RotationTask {
    /// The bank task: a poll every lifetime/30, its count saved after each.
    ShortPoll,
    /// The wizard: steps of half the lifetime, each ending in a transfer and its count saved.
    LongStep,
}

impl RotationTask {
    const ALL: [RotationTask; 2] = [RotationTask::ShortPoll, RotationTask::LongStep];

    fn name(self) -> &'static str {
        match self {
            RotationTask::ShortPoll => "short-poll",
            RotationTask::LongStep => "long-step",
        }
    }
}

/// The long-step task's settings.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LongStepConfig {
    /// Runs per arm (the bench's `--tasks`).
    pub runs: u32,
    /// Steps per run.
    pub steps: u32,
    /// From a step's start to its transfer and checkpoint (half the lifetime).
    pub step_ms: f64,
    /// How often a step reads the account page while it waits.
    pub read_every_ms: f64,
}

/// One rotation.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RotationRecord {
    /// When the entry ended, ms since the run started.
    pub at_ms: f64,
    /// Age of the browser left.
    pub age_ms: f64,
    /// From the safe point's checkpoint to the entry's end.
    pub lost_work_ms: f64,
    /// From the task's own last checkpoint (or the entry's start) to the entry's end: what the
    /// next entry redoes (`Milestone::Rotated.redone`).
    pub redone_ms: f64,
    /// Entry ended → re-entered on the successor.
    pub stall_ms: f64,
    /// When the browser switched to started its launch, ms since the run started (as the
    /// newest `SuccessorReady` said).
    pub successor_born_ms: Option<f64>,
    /// Its age at the switch.
    pub successor_age_ms: Option<f64>,
}

/// One death (or page failure) the task saw.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnplannedDeath {
    /// When it was noted (after the grace), ms since the run started.
    pub at_ms: f64,
    /// What gave it away.
    pub cause: String,
    /// Age of the session that died, from its launch (approximate: as the tape saw it).
    pub session_age_ms: Option<f64>,
    /// Work lost.
    pub lost_work_ms: f64,
    /// Work the task redoes after it (`Milestone::Died.redone`).
    pub redone_ms: f64,
    /// Detection → re-entered (the dead entry's grace included).
    pub replaced_in_ms: f64,
    /// The dead entry gone (its grace over) → re-entered: what the task waits for its new
    /// browser (the rest of a launch, the restore, the navigation).
    pub replace_ms: f64,
}

/// The long-step task's steps and transfers in one run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepsRecord {
    /// Steps asked for.
    pub expected: u32,
    /// Steps done by the task's own count (its last checkpointed progress).
    pub done: u32,
    /// Step starts: more than `expected` when steps were cut and redone.
    pub started: u32,
    /// Steps a re-entry found already transferred although its checkpoint did not say so.
    pub recovered: u32,
    /// Transfers the bank recorded for this run.
    pub transfers: u32,
    /// Of which to distinct payees (one per step): `transfers − distinct` were made twice.
    pub distinct_transfers: u32,
    /// Every step event, in order.
    pub log: Vec<StepLogEntry>,
}

/// One step event of the long-step task.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepLogEntry {
    /// ms since the run started.
    pub at_ms: f64,
    /// The step, from 1.
    pub step: u32,
    /// The entry (`ctx.attempt()`).
    pub attempt: u32,
    /// What happened.
    pub event: StepEvent,
}

/// One run of one outlive arm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationRun {
    /// The task.
    pub task: RotationTask,
    /// The arm.
    pub arm: RotationArm,
    /// Index within the arm.
    pub index: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// The error that ended a failed run (redacted).
    pub error: Option<String>,
    /// Wall time.
    pub total_ms: f64,
    /// Successful polls (short-poll task).
    pub polls_done: u32,
    /// Steps and transfers (long-step task).
    pub steps: Option<StepsRecord>,
    /// TOTP sign-ins (1 when nothing was repeated).
    pub sign_ins: u32,
    /// Every rotation.
    pub rotations: Vec<RotationRecord>,
    /// Every death or page failure the task saw (none are planned).
    pub deaths: Vec<UnplannedDeath>,
    /// The wide event.
    pub event: WideEvent,
    /// What the timeline draws, ms since the run started.
    pub marks: Marks,
}

/// When things happened in one run, ms since its start.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Marks {
    /// The sessions serving the task, as (start, end).
    pub sessions: Vec<(f64, f64)>,
    /// Successors and standbys, from launched to taking over or being replaced.
    pub standby: Vec<(f64, f64)>,
    /// Rotations.
    pub rotations: Vec<f64>,
    /// Deaths detected.
    pub deaths: Vec<f64>,
    /// Checkpoints written.
    pub checkpoints: Vec<f64>,
    /// Successful polls (short-poll task) or steps done (long-step task).
    pub polls: Vec<f64>,
    /// Step starts (long-step task).
    pub step_starts: Vec<f64>,
}

/// One target, and whether it held.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The task.
    pub task: RotationTask,
    /// The rotation arm held to it.
    pub arm: RotationArm,
    /// What is compared.
    pub what: String,
    /// The arm's figure.
    pub measured: f64,
    /// The bound it must not exceed.
    pub bound: f64,
    /// `measured ≤ bound`.
    pub held: bool,
    /// Why a target does not bind this arm, if it does not.
    pub note: Option<&'static str>,
}

/// The whole rotation benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationReport {
    /// Settings (`death` is how sessions die of old age) of the short-poll task and the
    /// gateway.
    pub config: SurvivalConfig,
    /// The long-step task's settings.
    pub long_step: LongStepConfig,
    /// Every outlive run, in start order (the short-poll task's, then the long-step task's).
    pub runs: Vec<RotationRun>,
    /// The plain session's polls (ms since its start), per run: the short task's pace without
    /// outlive, up to its death.
    pub baseline_polls_ms: Vec<Vec<f64>>,
    /// The targets, per task and rotation arm.
    pub targets: Vec<Target>,
    /// Sessions the gateways still held at the end (must be 0).
    pub sessions_left: usize,
    /// Chromium processes the gateways still had at the end (must be 0).
    pub chromium_left: usize,
}

/// The run's options: the arm's, over the bench's, every milestone onto `tape`.
fn options_for(
    config: &SurvivalConfig,
    arm: RotationArm,
    tape: &Arc<Mutex<Tape>>,
) -> outlive::Options {
    let sink = tape.clone();
    config
        .options(arm.options(config.lifetime))
        .on_milestone(move |m| {
            use super::records::Notes;
            lock(&sink).note(m)
        })
}

fn take_tape(tape: &Mutex<Tape>) -> Tape {
    let mut tape = std::mem::replace(&mut *lock(tape), Tape::new());
    tape.finish();
    tape
}

/// The short-poll task once, in `arm`.
async fn run_short(
    bed: &TestBed,
    config: &SurvivalConfig,
    arm: RotationArm,
    index: u32,
) -> RotationRun {
    let provider = Chaotic::new(bed, index, config.lifetime);
    let tape = Arc::new(Mutex::new(Tape::new()));
    let mut task = bed.task(config.polls, config.lifetime / 30);
    // Its poll count saved with each poll: the task's own checkpoints, a poll apart.
    task.durable_progress = true;
    let progress = BankProgress::default();
    let started = Instant::now();
    let outlive::Reported { result, event } = task
        .outlive(&provider, &progress, options_for(config, arm, &tape))
        .await;
    let total_ms = ms(started.elapsed());
    let mut tape = take_tape(&tape);
    tape.marks.polls = progress
        .polls()
        .iter()
        .map(|p| ms(p.at.saturating_duration_since(started)))
        .collect();
    RotationRun {
        task: RotationTask::ShortPoll,
        arm,
        index,
        outcome: event.outcome,
        error: result.err().map(|e| redacted(&e)),
        total_ms,
        polls_done: progress.polls_done(),
        steps: None,
        sign_ins: progress.sign_ins(),
        rotations: tape.rotations,
        deaths: tape.deaths,
        event,
        marks: tape.marks,
    }
}

fn redacted(e: &dyn std::fmt::Display) -> String {
    outlive::redact::redact(&e.to_string(), outlive::Diagnostics::Safe)
}

/// The long-step task once, in `arm`.
async fn run_long(
    bed: &TestBed,
    config: &SurvivalConfig,
    long: &LongStepConfig,
    arm: RotationArm,
    index: u32,
) -> RotationRun {
    let provider = Chaotic::new(bed, index, config.lifetime);
    let tape = Arc::new(Mutex::new(Tape::new()));
    let payee = format!("long-{}-{index}-step-", arm.name());
    let task = WizardTask {
        bank: bed.task(0, Duration::ZERO),
        steps: long.steps,
        step: Duration::from_secs_f64(long.step_ms / 1000.0),
        read_every: Duration::from_secs_f64(long.read_every_ms / 1000.0),
        payee: payee.clone(),
    };
    let progress = WizardProgress::default();
    let started = Instant::now();
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (task, progress) = (&task, &progress);
            async move { task.run(&page, &ctx, progress).await }
        },
        options_for(config, arm, &tape),
    )
    .await;
    let total_ms = ms(started.elapsed());
    let mut tape = take_tape(&tape);
    let log = progress.log();
    let at = |e: StepEvent| -> Vec<f64> {
        log.iter()
            .filter(|m| m.event == e)
            .map(|m| ms(m.at.saturating_duration_since(started)))
            .collect()
    };
    tape.marks.polls = at(StepEvent::Done);
    tape.marks.step_starts = at(StepEvent::Started);
    let steps = steps_record(
        bed,
        long,
        &payee,
        &log,
        result.as_ref().ok().copied(),
        &tape,
        started,
    );
    RotationRun {
        task: RotationTask::LongStep,
        arm,
        index,
        outcome: event.outcome,
        error: result.as_ref().err().map(|e| redacted(e)),
        total_ms,
        polls_done: 0,
        steps: Some(steps),
        sign_ins: progress.sign_ins(),
        rotations: tape.rotations,
        deaths: tape.deaths,
        event,
        marks: tape.marks,
    }
}

/// What the long-step task did in one run: steps done (`finished`: what the task returned,
/// if it did), started and recovered. Also the transfers it made to `payee…` (distinct ones,
/// too: a step done twice shows as a repeat), and its log.
fn steps_record(
    bed: &TestBed,
    long: &LongStepConfig,
    payee: &str,
    log: &[StepMark],
    finished: Option<u32>,
    tape: &Tape,
    started: Instant,
) -> StepsRecord {
    let transfers: Vec<String> = bed
        .bank()
        .transfers()
        .into_iter()
        .filter(|t| t.to.starts_with(payee))
        .map(|t| t.to)
        .collect();
    let distinct: std::collections::BTreeSet<&String> = transfers.iter().collect();
    let done = log
        .iter()
        .filter(|m| matches!(m.event, StepEvent::Done | StepEvent::Recovered))
        .map(|m| m.step)
        .max()
        .unwrap_or(0);
    StepsRecord {
        expected: long.steps,
        done: finished.unwrap_or(done),
        started: tape.marks.step_starts.len() as u32,
        recovered: log
            .iter()
            .filter(|m| m.event == StepEvent::Recovered)
            .count() as u32,
        transfers: transfers.len() as u32,
        distinct_transfers: distinct.len() as u32,
        log: log
            .iter()
            .map(|m| StepLogEntry {
                at_ms: ms(m.at.saturating_duration_since(started)),
                step: m.step,
                attempt: m.attempt,
                event: m.event,
            })
            .collect(),
    }
}

/// Runs both tasks, `config.tasks` times per arm. The short-poll task first: its three arms
/// and a plain session one run at a time (so no arm's figures carry another's load on a small
/// machine), the arms in turn. Then the long-step task, on a bed of its own: its three arms
/// side by side (it mostly waits, and all three meet the same load). `on_run` sees each
/// outlive run as it finishes.
pub async fn rotation(
    config: &SurvivalConfig,
    on_run: impl Fn(&RotationRun),
) -> Result<RotationReport, Error> {
    let long = LongStepConfig {
        runs: config.tasks,
        steps: LONG_STEPS,
        step_ms: ms(config.lifetime / 2),
        read_every_ms: ms(config.lifetime / 20),
    };
    let bed = super::survival::dying_bed(config).await?;
    let mut runs = Vec::new();
    let mut baseline_polls_ms = Vec::new();
    for i in 0..config.tasks {
        for arm in RotationArm::ALL {
            let run = run_short(&bed, config, arm, i).await;
            on_run(&run);
            runs.push(run);
        }
        let baseline = super::survival::run_baseline_arm(&bed, config, i).await;
        debug_assert_eq!(baseline.arm, ArmKind::Baseline);
        baseline_polls_ms.push(baseline.polls_ms);
    }
    let status = bed.shutdown().await?;
    let (mut sessions_left, mut chromium_left) = (
        status.live_sessions + status.dead_sessions,
        status.chromium_processes,
    );
    // Three arms at once, each with up to a task's browser, a successor, a standby and one
    // on its way out.
    let bed = TestBed::start(
        outlive_bed::bed::dying(config.lifetime, config.jitter, config.death).max_sessions(12),
    )
    .await?;
    for i in 0..long.runs {
        let [a, b, c] = RotationArm::ALL;
        let (a, b, c) = futures::join!(
            run_long(&bed, config, &long, a, i),
            run_long(&bed, config, &long, b, i),
            run_long(&bed, config, &long, c, i),
        );
        for run in [a, b, c] {
            on_run(&run);
            runs.push(run);
        }
    }
    let status = bed.shutdown().await?;
    sessions_left += status.live_sessions + status.dead_sessions;
    chromium_left += status.chromium_processes;
    let mut report = RotationReport {
        config: config.clone(),
        long_step: long,
        runs,
        baseline_polls_ms,
        targets: Vec::new(),
        sessions_left,
        chromium_left,
    };
    report.targets = targets(&report);
    Ok(report)
}
