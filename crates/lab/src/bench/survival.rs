//! The survival benchmark: the same task on a plain browser session (baseline) and through
//! outlive, side by side on one test bed whose sessions die on schedule.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use outlive::chromiumoxide::Browser;
use outlive::chromiumoxide::handler::HandlerConfig;
use outlive::{Milestone, Options, Outcome};
use tokio::time::Instant;

use super::records::*;
use crate::error::Error;
use crate::sync::lock;
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{TestBed, dying};

/// Collects milestones into a run record.
#[derive(Default)]
struct Recorder {
    started: Option<Instant>,
    sessions: Vec<(f64, f64)>,
    open_session: Option<f64>,
    deaths: Vec<DeathRecord>,
    replacements: Vec<ReplaceRecord>,
    pending: ReplaceRecord,
    checkpoints: Vec<CheckpointRecord>,
}

impl Recorder {
    fn since(&self, t: Instant) -> f64 {
        ms(t.saturating_duration_since(self.started.expect("started")))
    }
}

impl Notes for Recorder {
    fn note(&mut self, m: &Milestone) {
        let now = Instant::now();
        match m {
            Milestone::Launched { took } => {
                self.open_session = Some(self.since(now) - ms(*took));
                self.pending = ReplaceRecord {
                    launch_ms: ms(*took),
                    ..ReplaceRecord::default()
                };
            }
            Milestone::Restored { restore, navigate } => {
                self.pending.restore_ms = ms(*restore);
                self.pending.navigate_ms = ms(*navigate);
            }
            Milestone::Entered {
                replaced_in: Some(r),
                ..
            } => {
                self.pending.replaced_in_ms = ms(*r);
                self.replacements.push(std::mem::take(&mut self.pending));
            }
            Milestone::Checkpointed { took, bytes } => self.checkpoints.push(CheckpointRecord {
                at_ms: self.since(now),
                took_ms: ms(*took),
                bytes: *bytes,
            }),
            Milestone::Died {
                cause,
                detected_at,
                lost_work,
                ..
            } => {
                let at = self.since(Instant::from_std(*detected_at));
                if let Some(start) = self.open_session.take() {
                    self.sessions.push((start, at));
                }
                self.deaths.push(DeathRecord {
                    at_ms: at,
                    cause: *cause,
                    lost_work_ms: ms(*lost_work),
                });
            }
            _ => {}
        }
    }
}

async fn run_outlive_arm(bed: &TestBed, config: &SurvivalConfig, index: u32) -> RunRecord {
    let recorder = Arc::new(Mutex::new(Recorder {
        started: Some(Instant::now()),
        ..Recorder::default()
    }));
    let (result, event, progress, started) =
        bank_outlive(bed, config, &bed.provider(), Options::new(), &recorder).await;
    let total = started.elapsed();
    let mut rec = std::mem::take(&mut *lock(&recorder));
    if let Some(start) = rec.open_session.take() {
        rec.sessions.push((start, ms(total)));
    }
    RunRecord {
        arm: ArmKind::Outlive,
        index,
        outcome: event.outcome,
        total_ms: ms(total),
        polls_done: progress.polls_done(),
        polls_ms: poll_times(&progress, started),
        sessions_ms: rec.sessions,
        deaths: rec.deaths,
        replacements: rec.replacements,
        checkpoints: rec.checkpoints,
        event: Some(event),
        sign_ins: progress.sign_ins(),
        error: result
            .err()
            .map(|e| outlive::redact::redact(&e.to_string(), outlive::Diagnostics::Safe)),
    }
}

fn failed_record(arm: ArmKind, index: u32, error: String) -> RunRecord {
    RunRecord {
        arm,
        index,
        outcome: Outcome::Failed,
        total_ms: 0.0,
        polls_done: 0,
        polls_ms: vec![],
        sessions_ms: vec![],
        deaths: vec![],
        replacements: vec![],
        checkpoints: vec![],
        event: None,
        sign_ins: 0,
        error: Some(error),
    }
}

pub(super) async fn run_baseline_arm(
    bed: &TestBed,
    config: &SurvivalConfig,
    index: u32,
) -> RunRecord {
    let started = Instant::now();
    let client = bed.client();
    let session = match client.sessions().create(Default::default()).await {
        Ok(s) => s,
        Err(e) => return failed_record(ArmKind::Baseline, index, e.to_string()),
    };
    let mut task = bed.task(config.polls, config.lifetime / 30);
    task.step_timeout = Duration::from_secs(10);
    let progress = BankProgress::default();
    let handler_config = HandlerConfig {
        request_timeout: Duration::from_secs(10),
        ..HandlerConfig::default()
    };
    let result: Result<u32, String> = async {
        let (browser, mut handler) =
            Browser::connect_with_config(session.cdp_endpoint.clone(), handler_config)
                .await
                .map_err(|e| e.to_string())?;
        let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
        let out = async {
            let page = browser
                .new_page("about:blank")
                .await
                .map_err(|e| e.to_string())?;
            task.run(&page, None, &progress, &|_| {})
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        pump.abort();
        out
    }
    .await;
    let total = started.elapsed();
    let _ = client.sessions().release(&session.id).await;
    RunRecord {
        arm: ArmKind::Baseline,
        index,
        outcome: if result.is_ok() {
            Outcome::Completed
        } else {
            Outcome::Failed
        },
        total_ms: ms(total),
        polls_done: progress.polls_done(),
        polls_ms: poll_times(&progress, started),
        sessions_ms: vec![(0.0, ms(total))],
        deaths: vec![],
        replacements: vec![],
        checkpoints: vec![],
        event: None,
        sign_ins: progress.sign_ins(),
        error: result
            .err()
            .map(|e| outlive::redact::redact(&e, outlive::Diagnostics::Safe)),
    }
}

/// The bench's test bed: sessions die as `config` says; room for four at once.
pub(super) async fn dying_bed(config: &SurvivalConfig) -> Result<TestBed, Error> {
    let gateway = dying(config.lifetime, config.jitter, config.death).max_sessions(4);
    Ok(TestBed::start(gateway).await?)
}

/// Runs both arms, `config.tasks` each, one baseline and one outlive task at a time side by
/// side, alternating which starts first. `on_run` sees each run as it finishes.
pub async fn survival(
    config: &SurvivalConfig,
    on_run: impl Fn(&RunRecord),
) -> Result<SurvivalReport, Error> {
    let bed = dying_bed(config).await?;
    let mut runs = Vec::new();
    for i in 0..config.tasks {
        let baseline = run_baseline_arm(&bed, config, i);
        let outlive = run_outlive_arm(&bed, config, i);
        let (a, b) = if i % 2 == 0 {
            futures::join!(baseline, outlive)
        } else {
            let (b, a) = futures::join!(outlive, baseline);
            (a, b)
        };
        on_run(&a);
        on_run(&b);
        runs.push(a);
        runs.push(b);
    }
    let status = bed.shutdown().await?;
    Ok(SurvivalReport {
        config: config.clone(),
        runs,
        sessions_left: status.live_sessions + status.dead_sessions,
        chromium_left: status.chromium_processes,
    })
}

/// When each successful poll happened, ms since `started`.
fn poll_times(progress: &BankProgress, started: Instant) -> Vec<f64> {
    progress
        .polls()
        .iter()
        .map(|p| ms(p.at.saturating_duration_since(started)))
        .collect()
}
