//! The report for people: [`rotation_summary`] and [`rotation_timeline`].

use super::chaos::{UNPLANNED, unplanned};
use super::targets::{max_of, runs_of, sessions, totals};
use outlive::Outcome;

use super::{
    RotationArm, RotationRecord, RotationReport, RotationRun, RotationTask, StepsRecord,
    UnplannedDeath,
};
use crate::stats::median;

/// The timeline's lanes: the short task's runs with an unplanned death (runs 1 and 2) of every
/// arm, then the long-step task's first three runs of every arm.
pub fn rotation_timeline(report: &RotationReport) -> Vec<crate::timeline::TimelineRun> {
    use crate::timeline::{Arm, SessionSpan, TimelineRun};
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
    let shown = |r: &RotationRun| match r.task {
        RotationTask::ShortPoll => (1..=2).contains(&r.index),
        RotationTask::LongStep => r.index < 3,
    };
    let mut lanes: Vec<&RotationRun> = report.runs.iter().filter(|r| shown(r)).collect();
    // Each task's runs by run, then arm.
    lanes.sort_by_key(|r| (r.task == RotationTask::LongStep, r.index));
    lanes
        .into_iter()
        .map(|r| TimelineRun {
            label: format!(
                "{} {} #{}",
                match r.task {
                    RotationTask::ShortPoll => "short",
                    RotationTask::LongStep => "long",
                },
                match r.arm {
                    RotationArm::Reactive => "reactive",
                    RotationArm::Rotation => "rotation",
                    RotationArm::RotationStandby => "rot+standby",
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
        write!(f, "{} ", self.task.name())?;
        match &self.steps {
            Some(s) => write!(
                f,
                "{:?} #{}: {} after {:.1} s, {}/{} steps, {} transfers",
                self.arm,
                self.index,
                self.outcome.as_str(),
                self.total_ms / 1000.0,
                s.done,
                s.expected,
                s.transfers
            )?,
            None => crate::bench::records::run_line(
                f,
                &self.arm,
                self.index,
                self.outcome,
                self.total_ms,
                self.polls_done,
            )?,
        }
        let (rotations, deaths) = (self.rotations.len(), self.deaths.len());
        write!(
            f,
            ", {rotations} rotations, {deaths} deaths, {} sessions, redone {} ms (max {} ms)",
            self.event.sessions, self.event.redone_ms, self.event.max_redone_ms
        )
    }
}

fn round_all(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.max(0.0).round() as u64).collect()
}

/// One arm of one task, as the summary states it.
fn arm_summary(
    out: &mut String,
    report: &RotationReport,
    task: RotationTask,
    arm: RotationArm,
    pace: Option<f64>,
) {
    use std::fmt::Write;
    let runs = runs_of(report, task, arm);
    let react = runs_of(report, task, RotationArm::Reactive);
    let completed = runs
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .count();
    let totals = totals(&runs);
    let sign_ins: u32 = runs.iter().map(|r| r.sign_ins).sum();
    let _ = writeln!(out, "  {arm:?}:");
    let _ = write!(
        out,
        "    completed {completed}/{}; sign-ins {sign_ins}; total median {:.0} ms ({:?}), {:.3} × reacting's",
        runs.len(),
        median(&totals),
        round_all(&totals),
        median(&totals) / median(&self::totals(&react)),
    );
    if let Some(pace) = pace {
        let ratios: Vec<f64> = runs.iter().map(|r| r.total_ms / pace).collect();
        let old_age: Vec<f64> = runs
            .iter()
            .filter(|r| !unplanned(r.index))
            .map(|r| r.total_ms / pace)
            .collect();
        let _ = write!(
            out,
            "; to the baseline pace {:.3} (per run {:?}; deaths of old age only: median {:.3})",
            median(&totals) / pace,
            ratios
                .iter()
                .map(|r| (r * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
            median(&old_age)
        );
    }
    let _ = writeln!(out);
    sessions_lines(out, &runs);
    rotations_line(out, &runs);
    deaths_line(out, &runs);
    steps_line(out, &runs);
    for r in runs.iter().filter(|r| r.outcome != Outcome::Completed) {
        let _ = writeln!(
            out,
            "    run #{} {}: {}",
            r.index,
            r.outcome.as_str(),
            r.error.as_deref().unwrap_or("")
        );
    }
}

/// An arm's sessions, relaunches, standbys and redone work, as the summary states them.
fn sessions_lines(out: &mut String, runs: &[&RotationRun]) {
    use std::fmt::Write;
    let sessions = self::sessions(runs);
    let relaunches: Vec<f64> = runs.iter().map(|r| r.event.relaunches as f64).collect();
    let standby: Vec<f64> = runs.iter().map(|r| r.event.standby_ms as f64).collect();
    let ready: Vec<f64> = runs.iter().map(|r| r.marks.standby.len() as f64).collect();
    let _ = writeln!(
        out,
        "    sessions per run median {:.0} (all: {:?}); relaunches per run {:?}; successors and standbys made ready per run {:?}; standby time per run median {:.0} ms",
        median(&sessions),
        round_all(&sessions),
        round_all(&relaunches),
        round_all(&ready),
        median(&standby)
    );
    let redone: Vec<f64> = runs.iter().map(|r| r.event.redone_ms as f64).collect();
    let max_redone: Vec<f64> = runs.iter().map(|r| r.event.max_redone_ms as f64).collect();
    let _ = writeln!(
        out,
        "    redoneMs per run median {:.0} ms ({:?}); maxRedoneMs worst {:.0} ms",
        median(&redone),
        round_all(&redone),
        max_of(&max_redone)
    );
}

/// An arm's rotations, as the summary states them.
fn rotations_line(out: &mut String, runs: &[&RotationRun]) {
    use std::fmt::Write;
    let rotations: Vec<&RotationRecord> = runs.iter().flat_map(|r| &r.rotations).collect();
    if !rotations.is_empty() {
        let pick = |f: fn(&RotationRecord) -> Option<f64>| -> Vec<f64> {
            rotations.iter().filter_map(|r| f(r)).collect()
        };
        let redone = pick(|r| Some(r.redone_ms));
        let _ = writeln!(
            out,
            "    rotations {}: redone median {:.1} ms (max {:.0}; all {:?}); lost work median {:.1} ms; stall median {:.0} ms (max {:.0}); browser left at age median {:.0} ms; successor age at the switch median {:.0} ms (max {:.0})",
            rotations.len(),
            median(&redone),
            max_of(&redone),
            round_all(&redone),
            median(&pick(|r| Some(r.lost_work_ms))),
            median(&pick(|r| Some(r.stall_ms))),
            max_of(&pick(|r| Some(r.stall_ms))),
            median(&pick(|r| Some(r.age_ms))),
            median(&pick(|r| r.successor_age_ms)),
            max_of(&pick(|r| r.successor_age_ms)),
        );
    } else {
        let _ = writeln!(out, "    rotations 0");
    }
}

/// An arm's unplanned deaths, as the summary states them.
fn deaths_line(out: &mut String, runs: &[&RotationRun]) {
    use std::fmt::Write;
    let deaths: Vec<&UnplannedDeath> = runs.iter().flat_map(|r| &r.deaths).collect();
    if !deaths.is_empty() {
        let causes: Vec<&str> = deaths.iter().map(|d| d.cause.as_str()).collect();
        let redone: Vec<f64> = deaths.iter().map(|d| d.redone_ms).collect();
        let _ = writeln!(
            out,
            "    deaths {} ({}): redone median {:.0} ms (max {:.0}; all {:?}); lost work median {:.0} ms; replace (entry gone → re-entered) median {:.0} ms; detection → re-entered median {:.0} ms",
            deaths.len(),
            causes.join(", "),
            median(&redone),
            max_of(&redone),
            round_all(&redone),
            median(&deaths.iter().map(|d| d.lost_work_ms).collect::<Vec<_>>()),
            median(&deaths.iter().map(|d| d.replace_ms).collect::<Vec<_>>()),
            median(&deaths.iter().map(|d| d.replaced_in_ms).collect::<Vec<_>>()),
        );
    } else {
        let _ = writeln!(out, "    deaths 0");
    }
}

/// An arm's steps (the transfer task's), as the summary states them.
fn steps_line(out: &mut String, runs: &[&RotationRun]) {
    use std::fmt::Write;
    let steps: Vec<&StepsRecord> = runs.iter().filter_map(|r| r.steps.as_ref()).collect();
    if !steps.is_empty() {
        let sum = |f: fn(&StepsRecord) -> u32| steps.iter().map(|s| f(s)).sum::<u32>();
        let twice = sum(|s| s.transfers) - sum(|s| s.distinct_transfers);
        let _ = writeln!(
            out,
            "    steps done {}/{}; transfers {} of {} expected, {} made twice; step starts {} ({} steps redone after a cut); recovered from the bank's record {}",
            sum(|s| s.done),
            sum(|s| s.expected),
            sum(|s| s.transfers),
            sum(|s| s.expected),
            twice,
            sum(|s| s.started),
            sum(|s| s.started).saturating_sub(sum(|s| s.done)),
            sum(|s| s.recovered),
        );
    }
}

/// The plain-text summary: per task and arm, the figures the targets are set on, then the
/// targets.
pub fn rotation_summary(report: &RotationReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let c = &report.config;
    let l = &report.long_step;
    let _ = writeln!(
        out,
        "rotation: lifetime {:?} ± {:?} ({} deaths), checkpoint every {:?}; unplanned deaths, the same in every arm: {UNPLANNED}",
        c.lifetime,
        c.jitter,
        c.death.as_str(),
        c.checkpoint_every
    );
    let _ = writeln!(
        out,
        "short-poll task: {} runs per arm, one run at a time, arms in turn; {} polls every {:?}, the poll count saved with ctx.checkpoint_with after each",
        c.tasks,
        c.polls,
        c.lifetime / 30,
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
        arm_summary(&mut out, report, RotationTask::ShortPoll, arm, Some(pace));
    }
    let _ = writeln!(
        out,
        "long-step task: {} runs per arm, the three arms side by side; sign in, then {} steps of {:.0} ms (the account page read every {:.0} ms), each ending in a transfer and ctx.checkpoint_with",
        l.runs, l.steps, l.step_ms, l.read_every_ms
    );
    for arm in RotationArm::ALL {
        arm_summary(&mut out, report, RotationTask::LongStep, arm, None);
    }
    let _ = writeln!(out, "targets:");
    for t in &report.targets {
        let _ = writeln!(
            out,
            "  {:<10} {:<15} {}: {:.1} against {:.1}: {}{}",
            t.task.name(),
            format!("{:?}", t.arm),
            t.what,
            t.measured,
            t.bound,
            if t.held { "held" } else { "NOT HELD" },
            t.note.map_or(String::new(), |n| format!(" ({n})"))
        );
    }
    let _ = writeln!(
        out,
        "leaks: {} sessions, {} Chromium processes left on the gateways",
        report.sessions_left, report.chromium_left
    );
    out
}
