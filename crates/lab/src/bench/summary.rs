//! Plain-text summaries of the reports, and the timeline lanes drawn from them.

use outlive::Outcome;

use super::records::*;
use crate::stats::median;

/// The first run of each arm as timeline lanes, for the SVG picture.
pub fn timeline_runs(report: &SurvivalReport) -> Vec<crate::timeline::TimelineRun> {
    use crate::timeline::{Arm, SessionSpan, TimelineRun};
    let to_ms = |v: f64| v.max(0.0).round() as u64;
    [ArmKind::Baseline, ArmKind::Outlive]
        .into_iter()
        .filter_map(|arm| report.runs.iter().find(|r| r.arm == arm))
        .map(|r| TimelineRun {
            label: format!(
                "{} #{}",
                if r.arm == ArmKind::Baseline {
                    "baseline"
                } else {
                    "outlive"
                },
                r.index + 1
            ),
            arm: if r.arm == ArmKind::Baseline {
                Arm::Baseline
            } else {
                Arm::Outlive
            },
            total_ms: to_ms(r.total_ms),
            outcome: r.outcome,
            sessions: r
                .sessions_ms
                .iter()
                .map(|&(a, b)| SessionSpan {
                    start_ms: to_ms(a),
                    end_ms: to_ms(b),
                })
                .collect(),
            deaths: r.deaths.iter().map(|d| to_ms(d.at_ms)).collect(),
            checkpoints: r.checkpoints.iter().map(|c| to_ms(c.at_ms)).collect(),
            polls: r.polls_ms.iter().map(|&p| to_ms(p)).collect(),
            rotations: vec![],
            standby: vec![],
        })
        .collect()
}

/// A plain-text summary of both reports, for the terminal and the measurements README.
pub fn summary(survival: &SurvivalReport, micro: Option<&MicroReport>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    survival_header(&mut out, survival);
    outlive_lines(&mut out, survival);
    total_line(&mut out, survival);
    let _ = writeln!(
        out,
        "  leaks           {} sessions, {} Chromium processes left on the gateway",
        survival.sessions_left, survival.chromium_left
    );
    if let Some(m) = micro {
        out.push_str(&micro_summary(m));
    }
    out
}

/// The runs of one arm.
fn arm(survival: &SurvivalReport, k: ArmKind) -> impl Iterator<Item = &RunRecord> {
    survival.runs.iter().filter(move |r| r.arm == k)
}

/// The survival bench's set-up, and how many tasks of each arm completed.
fn survival_header(out: &mut String, survival: &SurvivalReport) {
    use std::fmt::Write;
    let arm = |k: ArmKind| arm(survival, k);
    let completed = |k: ArmKind| arm(k).filter(|r| r.outcome == Outcome::Completed).count();
    let n = survival.config.tasks;
    let _ = writeln!(
        out,
        "survival: {} tasks per arm, lifetime {:?} ±{:?}, death {}, {} polls every lifetime/30",
        n,
        survival.config.lifetime,
        survival.config.jitter,
        survival.config.death.as_str(),
        survival.config.polls
    );
    let _ = writeln!(
        out,
        "  completed       baseline {}/{n}   outlive {}/{n}",
        completed(ArmKind::Baseline),
        completed(ArmKind::Outlive)
    );
    let baseline_polls: Vec<f64> = arm(ArmKind::Baseline)
        .map(|r| r.polls_done as f64)
        .collect();
    let _ = writeln!(
        out,
        "  baseline polls  {:?} (of {})",
        baseline_polls, survival.config.polls
    );
}

/// What outlive's arm went through: relaunches, lost work, replacements, checkpoints.
fn outlive_lines(out: &mut String, survival: &SurvivalReport) {
    use std::fmt::Write;
    let arm = |k: ArmKind| arm(survival, k);
    let relaunches: u32 = arm(ArmKind::Outlive)
        .filter_map(|r| r.event.as_ref())
        .map(|e| e.relaunches)
        .sum();
    let lost: Vec<f64> = arm(ArmKind::Outlive)
        .filter_map(|r| r.event.as_ref())
        .map(|e| e.lost_work_ms as f64)
        .collect();
    let worst = arm(ArmKind::Outlive)
        .filter_map(|r| r.event.as_ref())
        .map(|e| e.max_lost_work_ms)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "  relaunches      {relaunches} (release failures: {})",
        arm(ArmKind::Outlive)
            .filter_map(|r| r.event.as_ref())
            .map(|e| e.release_failed)
            .sum::<u32>()
    );
    let _ = writeln!(
        out,
        "  lost work       median {:.0} ms per run, worst single death {worst} ms",
        median(&lost)
    );
    let replacements = |f: fn(&ReplaceRecord) -> f64| -> Vec<f64> {
        arm(ArmKind::Outlive)
            .flat_map(|r| r.replacements.iter().map(f))
            .collect()
    };
    let replaced = replacements(|x| x.replaced_in_ms);
    let _ = writeln!(
        out,
        "  replace time    median {:.0} ms (launch {:.0} + restore {:.0} + navigate {:.0}), n={}",
        median(&replaced),
        median(&replacements(|x| x.launch_ms)),
        median(&replacements(|x| x.restore_ms)),
        median(&replacements(|x| x.navigate_ms)),
        replaced.len()
    );
    let cps: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.checkpoints.iter().map(|c| c.took_ms))
        .collect();
    let bytes: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.checkpoints.iter().map(|c| c.bytes as f64))
        .collect();
    let _ = writeln!(
        out,
        "  checkpoint      median {:.1} ms, {:.0} bytes, n={}",
        median(&cps),
        median(&bytes),
        cps.len()
    );
}

/// outlive's total time against the baseline's pace.
fn total_line(out: &mut String, survival: &SurvivalReport) {
    use std::fmt::Write;
    let arm = |k: ArmKind| arm(survival, k);
    // The baseline's own pace: its polls per ms before it died, extrapolated to the full task.
    let paces: Vec<f64> = arm(ArmKind::Baseline)
        .filter(|r| r.polls_ms.len() >= 2)
        .map(|r| {
            let first = r.polls_ms[0];
            let last = *r.polls_ms.last().expect("two polls");
            first
                + (last - first) / (r.polls_ms.len() - 1) as f64
                    * (survival.config.polls - 1) as f64
        })
        .collect();
    let totals: Vec<f64> = arm(ArmKind::Outlive)
        .filter(|r| r.outcome == Outcome::Completed)
        .map(|r| r.total_ms)
        .collect();
    let (pace, total) = (median(&paces), median(&totals));
    let _ = writeln!(
        out,
        "  total time      outlive median {:.0} ms; baseline pace extrapolated {:.0} ms; ratio {:.3}",
        total,
        pace,
        total / pace
    );
}

/// A plain-text summary of the micro-measurements.
pub fn micro_summary(m: &MicroReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    {
        let _ = writeln!(out, "micro:");
        for c in &m.checkpoint {
            let _ = writeln!(
                out,
                "  checkpoint @ RTT {:>3.0} ms: median {:.1} ms ({}), {} bytes, n={}",
                c.rtt_ms,
                c.median_ms,
                c.median_over_rtt
                    .map_or("—".to_owned(), |r| format!("{r:.2} × RTT")),
                c.bytes,
                c.took_ms.len()
            );
        }
        let r = &m.recovery;
        let part = |page: bool, f: fn(&Replacement) -> f64| {
            median(
                &r.replacements
                    .iter()
                    .filter(|x| x.cause.is_page() == page)
                    .map(f)
                    .collect::<Vec<_>>(),
            )
        };
        let _ = writeln!(
            out,
            "  page recovery:   median {:.0} ms (fresh page {:.0} + restore {:.0} + navigate {:.0}) vs relaunch {:.0} ms (launch {:.0} + restore {:.0} + navigate {:.0}); ratio {:.2} (target ≤ 0.5), n={}+{}",
            r.page_median_ms,
            part(true, |x| x.page_or_launch_ms),
            part(true, |x| x.restore_ms),
            part(true, |x| x.navigate_ms),
            r.relaunch_median_ms,
            part(false, |x| x.page_or_launch_ms),
            part(false, |x| x.restore_ms),
            part(false, |x| x.navigate_ms),
            r.ratio,
            r.replacements.iter().filter(|x| x.cause.is_page()).count(),
            r.replacements.iter().filter(|x| !x.cause.is_page()).count(),
        );
        let _ = writeln!(
            out,
            "  page detection:  crash median {:.0} ms after Page.crash was sent; hung page median {:.0} ms after its call stalled (heartbeat {:.0} + {:.0} ms), n={}+{}",
            median(&r.crash_detected_ms),
            median(&r.hang_detected_ms),
            r.heartbeat_ms.0,
            r.heartbeat_ms.1,
            r.crash_detected_ms.len(),
            r.hang_detected_ms.len(),
        );
        for d in &m.detection {
            let _ = writeln!(
                out,
                "  detection {:>8}{}: median {:.0} ms after the kill call began (the call took {:.0} ms; {:+.1} ms after it returned), causes {:?}",
                d.mode.as_str(),
                if d.command_waiting {
                    " (command waiting)"
                } else {
                    ""
                },
                median(&d.latency_ms),
                median(&d.kill_call_ms),
                median(&d.after_kill_returned_ms),
                d.causes.iter().map(|c| c.as_str()).collect::<Vec<_>>()
            );
        }
    }
    out
}
