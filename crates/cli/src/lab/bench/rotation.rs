//! The rotation benchmark: the same bank task, in turn on one gateway whose sessions die
//! of old age (lifetime ± jitter), with unplanned deaths mixed in: reactive (outlive as it
//! was: wait for the death, relaunch), rotation (leave each browser at a safe point before its
//! predicted death) and rotation + standby (a spare browser ready for the unplanned ones). A
//! plain session runs beside them, for the task's pace without outlive.
//!
//! Unplanned deaths, the same in every arm ([`UNPLANNED`]): in runs 1 and 2 (mod 3) the first
//! session dies at 319/608 of the lifetime, like the one early Solari death among seven
//! measured; in runs 1 (mod 3) the second session is dead on arrival too (with a standby, that
//! session is the standby: it never reaches the task). Runs 0 (mod 3) meet deaths of old age
//! only: their ratio is rotation's own cost.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::solari_browser::CreateSessionOptions;
use outlive::{
    BoxFuture, Milestone, Options, Outcome, Provider, Rotation, Session, Solari, SolariLaunch,
    WideEvent,
};
use serde::Serialize;
use tokio::time::Instant;

use super::records::{ArmKind, SurvivalConfig, ms};
use crate::bed::TestBed;
use crate::error::Error;
use crate::stats::median;

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
}

/// One rotation.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RotationRecord {
    /// Age of the browser left.
    pub age_ms: f64,
    /// From the safe point's checkpoint to the entry's end (work the next entry may repeat).
    pub lost_work_ms: f64,
    /// Entry ended → re-entered on the successor.
    pub stall_ms: f64,
}

/// One death the task saw.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnplannedDeath {
    /// What gave it away.
    pub cause: String,
    /// Work lost.
    pub lost_work_ms: f64,
    /// Detection → re-entered (the dead entry's grace included).
    pub replaced_in_ms: f64,
    /// The dead entry gone (its grace over) → re-entered: what the task waits for its new
    /// browser (the rest of a launch, the restore, the navigation).
    pub replace_ms: f64,
}

/// One run of one outlive arm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationRun {
    /// The arm.
    pub arm: RotationArm,
    /// Index within the arm.
    pub index: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Wall time.
    pub total_ms: f64,
    /// Successful polls.
    pub polls_done: u32,
    /// TOTP sign-ins (1 when nothing was repeated).
    pub sign_ins: u32,
    /// Every rotation.
    pub rotations: Vec<RotationRecord>,
    /// Every death the task saw (none are planned).
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
    /// Successful polls.
    pub polls: Vec<f64>,
}

/// The whole rotation benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationReport {
    /// Settings (`death` is how sessions die of old age).
    pub config: SurvivalConfig,
    /// Every outlive run, in start order.
    pub runs: Vec<RotationRun>,
    /// The plain session's polls (ms since its start), per run: the task's pace without
    /// outlive, up to its death.
    pub baseline_polls_ms: Vec<Vec<f64>>,
    /// Sessions the gateway still held at the end (must be 0).
    pub sessions_left: usize,
    /// Chromium processes the gateway still had at the end (must be 0).
    pub chromium_left: usize,
}

/// The unplanned deaths, as the summary states them.
pub const UNPLANNED: &str = "runs 1 and 2 mod 3: the first session dies at 319/608 of the lifetime; runs 1 mod 3: the second session is dead on arrival";

/// Whether run `index` meets unplanned deaths (else only deaths of old age).
fn unplanned(index: u32) -> bool {
    index % 3 != 0
}

/// A Solari provider whose sessions die early or on arrival on the gateway's chaos metadata,
/// by launch number.
struct Chaotic {
    normal: Solari,
    doa: Solari,
    early: Solari,
    launches: AtomicU32,
    /// Launch numbers (from 0) dead on arrival / dying early.
    doa_at: Option<u32>,
    early_at: Option<u32>,
}

impl Chaotic {
    fn new(bed: &TestBed, index: u32, lifetime: Duration) -> Chaotic {
        let with = |meta: serde_json::Value| {
            let map = meta.as_object().cloned().unwrap_or_default();
            Solari::new(bed.client().clone()).launch_options(
                SolariLaunch::new().create(CreateSessionOptions::new().user_metadata(map)),
            )
        };
        let early_ms = lifetime.as_millis() as u64 * 319 / 608;
        Chaotic {
            normal: bed.provider(),
            doa: with(serde_json::json!({"chaos.death": "doa"})),
            early: with(serde_json::json!({"chaos.lifetimeMs": early_ms})),
            launches: AtomicU32::new(0),
            doa_at: (index % 3 == 1).then_some(1),
            early_at: unplanned(index).then_some(0),
        }
    }
}

impl Provider for Chaotic {
    fn name(&self) -> &str {
        "solari (bench chaos)"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        let n = self.launches.fetch_add(1, Ordering::SeqCst);
        if Some(n) == self.doa_at {
            self.doa.launch()
        } else if Some(n) == self.early_at {
            self.early.launch()
        } else {
            self.normal.launch()
        }
    }
}

/// Milestones into rotation and death records.
struct Tape {
    started: Instant,
    rotations: Vec<RotationRecord>,
    deaths: Vec<UnplannedDeath>,
    /// What the next `Entered` replaces: a rotation (true) or a death (false).
    next: Option<bool>,
    /// When the last `Died` was noted (after the grace).
    died_at: Option<Instant>,
    marks: Marks,
    primary: Option<f64>,
    standby: Option<f64>,
}

impl Tape {
    fn new() -> Tape {
        Tape {
            started: Instant::now(),
            rotations: Vec::new(),
            deaths: Vec::new(),
            next: None,
            died_at: None,
            marks: Marks::default(),
            primary: None,
            standby: None,
        }
    }

    fn at(&self, d: Duration) -> f64 {
        ms(self.started.elapsed().saturating_sub(d))
    }

    fn close_primary(&mut self, at: f64) {
        if let Some(start) = self.primary.take() {
            self.marks.sessions.push((start, at));
        }
    }

    fn close_standby(&mut self, at: f64) {
        if let Some(start) = self.standby.take() {
            self.marks.standby.push((start, at.max(start)));
        }
    }

    /// Closes whatever is open at the end of the run.
    fn finish(&mut self) {
        let now = self.at(Duration::ZERO);
        self.close_primary(now);
        self.close_standby(now);
    }
}

impl super::records::Notes for Tape {
    fn note(&mut self, m: &Milestone) {
        let now = self.at(Duration::ZERO);
        match m {
            Milestone::Launched { took } => {
                if self.standby.is_some() && self.primary.is_none() {
                    // The standby took over from a dead browser.
                    self.close_standby(now);
                    self.primary = Some(now);
                } else if self.primary.is_none() {
                    self.primary = Some(self.at(*took));
                }
            }
            Milestone::SuccessorReady { took, .. } => {
                // One successor at a time: a new one means the old one was let go.
                let born = self.at(*took);
                self.close_standby(born);
                self.standby = Some(born);
            }
            Milestone::Checkpointed { .. } => self.marks.checkpoints.push(now),
            Milestone::Rotated { age, lost_work, .. } => {
                self.marks.rotations.push(now);
                self.close_primary(now);
                self.close_standby(now);
                self.primary = Some(now);
                self.rotations.push(RotationRecord {
                    age_ms: ms(*age),
                    lost_work_ms: ms(*lost_work),
                    stall_ms: 0.0,
                });
                self.next = Some(true);
            }
            Milestone::Died {
                cause, lost_work, ..
            } => {
                self.marks.deaths.push(now);
                self.close_primary(now);
                self.died_at = Some(Instant::now());
                self.deaths.push(UnplannedDeath {
                    cause: cause.as_str().to_owned(),
                    lost_work_ms: ms(*lost_work),
                    replaced_in_ms: 0.0,
                    replace_ms: 0.0,
                });
                self.next = Some(false);
            }
            Milestone::Entered {
                replaced_in: Some(r),
                ..
            } => match self.next.take() {
                Some(true) => {
                    if let Some(last) = self.rotations.last_mut() {
                        last.stall_ms = ms(*r);
                    }
                }
                Some(false) => {
                    let replace = self.died_at.take().map_or(0.0, |d| ms(d.elapsed()));
                    if let Some(last) = self.deaths.last_mut() {
                        last.replaced_in_ms = ms(*r);
                        last.replace_ms = replace;
                    }
                }
                None => {}
            },
            _ => {}
        }
    }
}

async fn run_arm(
    bed: &TestBed,
    config: &SurvivalConfig,
    arm: RotationArm,
    index: u32,
) -> RotationRun {
    let provider = Chaotic::new(bed, index, config.lifetime);
    let tape = Arc::new(Mutex::new(Tape::new()));
    let (_, event, progress, started) =
        super::records::bank_outlive(bed, config, &provider, arm.options(config.lifetime), &tape)
            .await;
    let mut tape = std::mem::replace(&mut *tape.lock().expect("tape"), Tape::new());
    tape.finish();
    tape.marks.polls = progress
        .polls()
        .iter()
        .map(|p| ms(p.at.saturating_duration_since(started)))
        .collect();
    RotationRun {
        arm,
        index,
        outcome: event.outcome,
        total_ms: ms(started.elapsed()),
        polls_done: progress.polls_done(),
        sign_ins: progress.sign_ins(),
        rotations: tape.rotations,
        deaths: tape.deaths,
        event,
        marks: tape.marks,
    }
}

/// Runs the three arms and a plain session, `config.tasks` times, one run at a time (so no
/// arm's figures carry another's load on a small machine), the arms in turn. `on_run` sees
/// each outlive run as it finishes.
pub async fn rotation(
    config: &SurvivalConfig,
    on_run: impl Fn(&RotationRun),
) -> Result<RotationReport, Error> {
    let bed = super::survival::dying_bed(config).await?;
    let mut runs = Vec::new();
    let mut baseline_polls_ms = Vec::new();
    for i in 0..config.tasks {
        for arm in RotationArm::ALL {
            let run = run_arm(&bed, config, arm, i).await;
            on_run(&run);
            runs.push(run);
        }
        let baseline = super::survival::run_baseline_arm(&bed, config, i).await;
        debug_assert_eq!(baseline.arm, ArmKind::Baseline);
        baseline_polls_ms.push(baseline.polls_ms);
    }
    let status = bed.shutdown().await?;
    Ok(RotationReport {
        config: config.clone(),
        runs,
        baseline_polls_ms,
        sessions_left: status.live_sessions + status.dead_sessions,
        chromium_left: status.chromium_processes,
    })
}

/// The timeline's lanes: every arm's runs with an unplanned death (runs 1 and 2), by run.
pub fn rotation_timeline(report: &RotationReport) -> Vec<crate::lab::timeline::TimelineRun> {
    use crate::lab::timeline::{Arm, SessionSpan, TimelineRun};
    let to_ms = |v: f64| v.max(0.0).round() as u64;
    let spans = |v: &[(f64, f64)]| {
        v.iter()
            .map(|&(a, b)| SessionSpan {
                start_ms: to_ms(a),
                end_ms: to_ms(b),
            })
            .collect()
    };
    let times = |v: &[f64]| v.iter().map(|&t| to_ms(t)).collect();
    report
        .runs
        .iter()
        .filter(|r| (1..=2).contains(&r.index))
        .map(|r| TimelineRun {
            label: format!(
                "{} #{}",
                match r.arm {
                    RotationArm::Reactive => "reactive",
                    RotationArm::Rotation => "rotation",
                    RotationArm::RotationStandby => "rotation+standby",
                },
                r.index + 1
            ),
            arm: Arm::Outlive,
            total_ms: to_ms(r.total_ms),
            outcome: r.outcome,
            sessions: spans(&r.marks.sessions),
            deaths: times(&r.marks.deaths),
            checkpoints: times(&r.marks.checkpoints),
            polls: times(&r.marks.polls),
            rotations: times(&r.marks.rotations),
            standby: spans(&r.marks.standby),
        })
        .collect()
}

/// One line for people.
impl std::fmt::Display for RotationRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        super::records::run_line(
            f,
            &self.arm,
            self.index,
            self.outcome,
            self.total_ms,
            self.polls_done,
        )?;
        let (rotations, deaths) = (self.rotations.len(), self.deaths.len());
        write!(
            f,
            ", {rotations} rotations, {deaths} deaths, {} sessions",
            self.event.sessions
        )
    }
}

/// The plain-text summary: per arm, the figures the targets are set on.
pub fn rotation_summary(report: &RotationReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let c = &report.config;
    let _ = writeln!(
        out,
        "rotation: {} tasks per arm, one run at a time, arms in turn, lifetime {:?} ± {:?} ({} deaths), {} polls every {:?}, checkpoint every {:?}; unplanned: {UNPLANNED}",
        c.tasks,
        c.lifetime,
        c.jitter,
        c.death.as_str(),
        c.polls,
        c.lifetime / 30,
        c.checkpoint_every
    );
    // The plain session's pace, extrapolated to the whole task (as in the survival summary).
    let paces: Vec<f64> = report
        .baseline_polls_ms
        .iter()
        .filter(|p| p.len() >= 2)
        .map(|p| {
            let (first, last) = (p[0], p[p.len() - 1]);
            first + (last - first) / (p.len() - 1) as f64 * (c.polls - 1) as f64
        })
        .collect();
    let pace = median(&paces);
    let _ = writeln!(
        out,
        "  baseline pace   {pace:.0} ms for the whole task (median of {} plain sessions, extrapolated from their polls before they died)",
        paces.len()
    );
    for arm in RotationArm::ALL {
        let runs: Vec<&RotationRun> = report.runs.iter().filter(|r| r.arm == arm).collect();
        let completed = runs
            .iter()
            .filter(|r| r.outcome == Outcome::Completed)
            .count();
        let totals: Vec<f64> = runs.iter().map(|r| r.total_ms).collect();
        let rotations: Vec<&RotationRecord> = runs.iter().flat_map(|r| &r.rotations).collect();
        let lost: Vec<f64> = rotations.iter().map(|r| r.lost_work_ms).collect();
        let stall: Vec<f64> = rotations.iter().map(|r| r.stall_ms).collect();
        let deaths: Vec<&UnplannedDeath> = runs.iter().flat_map(|r| &r.deaths).collect();
        let replaced_in: Vec<f64> = deaths.iter().map(|d| d.replaced_in_ms).collect();
        let replace: Vec<f64> = deaths.iter().map(|d| d.replace_ms).collect();
        let death_lost: Vec<f64> = deaths.iter().map(|d| d.lost_work_ms).collect();
        let sessions: Vec<f64> = runs.iter().map(|r| r.event.sessions as f64).collect();
        let standby: Vec<f64> = runs.iter().map(|r| r.event.standby_ms as f64).collect();
        let sign_ins: u32 = runs.iter().map(|r| r.sign_ins).sum();
        let _ = writeln!(out, "  {arm:?}:");
        let _ = writeln!(
            out,
            "    completed {completed}/{}; sign-ins {sign_ins}; total median {:.0} ms, ratio to the baseline pace {:.3}",
            runs.len(),
            median(&totals),
            median(&totals) / pace
        );
        let ratios = |planned_only: bool| -> Vec<f64> {
            runs.iter()
                .filter(|r| !planned_only || !unplanned(r.index))
                .map(|r| r.total_ms / pace)
                .collect()
        };
        let _ = writeln!(
            out,
            "    ratio per run {:?}; runs with deaths of old age only: median {:.3}",
            ratios(false)
                .iter()
                .map(|r| (r * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
            median(&ratios(true))
        );
        let _ = writeln!(
            out,
            "    rotations {}: lost work median {:.1} ms (max {:.1}), stall median {:.0} ms (max {:.0})",
            rotations.len(),
            median(&lost),
            lost.iter().copied().fold(0.0, f64::max),
            median(&stall),
            stall.iter().copied().fold(0.0, f64::max)
        );
        let causes: Vec<&str> = deaths.iter().map(|d| d.cause.as_str()).collect();
        let _ = writeln!(
            out,
            "    deaths {} ({}): replace (entry gone → re-entered) median {:.0} ms; detection → re-entered median {:.0} ms (grace included); lost work median {:.0} ms",
            deaths.len(),
            causes.join(", "),
            median(&replace),
            median(&replaced_in),
            median(&death_lost)
        );
        let _ = writeln!(
            out,
            "    sessions per run median {:.0} (all: {:?}); standby time per run median {:.0} ms",
            median(&sessions),
            sessions.iter().map(|s| *s as u32).collect::<Vec<_>>(),
            median(&standby)
        );
    }
    let _ = writeln!(
        out,
        "  leaks           {} sessions, {} Chromium processes left on the gateway",
        report.sessions_left, report.chromium_left
    );
    out
}
