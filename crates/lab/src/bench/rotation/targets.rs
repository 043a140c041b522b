//! The issue's [`targets`]: each rotation arm against reacting.

use super::{
    RotationArm, RotationReport, RotationRun, RotationTask, SHORT_REDONE_TARGET_MS, Target,
};
use crate::stats::median;

/// The runs of `task` in `arm`.
pub(super) fn runs_of(
    report: &RotationReport,
    task: RotationTask,
    arm: RotationArm,
) -> Vec<&RotationRun> {
    report
        .runs
        .iter()
        .filter(|r| r.task == task && r.arm == arm)
        .collect()
}

fn rotation_redone(runs: &[&RotationRun]) -> Vec<f64> {
    runs.iter()
        .flat_map(|r| r.rotations.iter().map(|x| x.redone_ms))
        .collect()
}

fn death_redone(runs: &[&RotationRun]) -> Vec<f64> {
    runs.iter()
        .flat_map(|r| r.deaths.iter().map(|x| x.redone_ms))
        .collect()
}

/// The largest of `v` (0 when empty).
pub(super) fn max_of(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

pub(super) fn totals(runs: &[&RotationRun]) -> Vec<f64> {
    runs.iter().map(|r| r.total_ms).collect()
}

pub(super) fn sessions(runs: &[&RotationRun]) -> Vec<f64> {
    runs.iter().map(|r| r.event.sessions as f64).collect()
}

/// The targets, per task and rotation arm, against reacting.
pub fn targets(report: &RotationReport) -> Vec<Target> {
    let mut out = Vec::new();
    for task in RotationTask::ALL {
        let react = runs_of(report, task, RotationArm::Reactive);
        if react.is_empty() {
            continue;
        }
        for arm in [RotationArm::Rotation, RotationArm::RotationStandby] {
            let runs = runs_of(report, task, arm);
            let mut target = |what: String, measured: f64, bound: f64| {
                let note = (arm == RotationArm::RotationStandby && what.starts_with("sessions"))
                    .then_some(
                        "informational: a standby costs sessions by design (two per rotation)",
                    );
                out.push(Target {
                    task,
                    arm,
                    what,
                    measured,
                    bound,
                    held: measured <= bound,
                    note,
                })
            };
            target(
                "total time, median over runs (ms) ≤ 1.00 × reacting's".into(),
                median(&totals(&runs)),
                median(&totals(&react)),
            );
            target(
                "sessions per run, median ≤ reacting's + 1".into(),
                median(&sessions(&runs)),
                median(&sessions(&react)) + 1.0,
            );
            // Run by run, against reacting's run with the same unplanned deaths.
            let worst = runs
                .iter()
                .filter_map(|r| {
                    react
                        .iter()
                        .find(|x| x.index == r.index)
                        .map(|x| r.event.sessions as f64 - x.event.sessions as f64)
                })
                .fold(f64::NEG_INFINITY, f64::max);
            target(
                "sessions per run, worst run − reacting's same run ≤ 1".into(),
                worst,
                1.0,
            );
            let (what, bound) = match task {
                RotationTask::ShortPoll => (
                    format!("redone per rotation, median (ms) ≤ {SHORT_REDONE_TARGET_MS:.0} ms"),
                    SHORT_REDONE_TARGET_MS,
                ),
                RotationTask::LongStep => (
                    "redone per rotation, median (ms) ≤ reacting's per death".into(),
                    median(&death_redone(&react)),
                ),
            };
            target(what, median(&rotation_redone(&runs)), bound);
            out.push(Target {
                task,
                arm,
                what: "redone per rotation, worst (ms) ≤ reacting's worst death".into(),
                measured: max_of(&rotation_redone(&runs)),
                bound: max_of(&death_redone(&react)),
                held: max_of(&rotation_redone(&runs)) <= max_of(&death_redone(&react)),
                note: Some("informational: not one of the issue's targets"),
            });
        }
    }
    out
}
