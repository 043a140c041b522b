//! `outlive bench`: the survival benchmark (baseline against outlive, side by side) and the
//! micro-measurements (checkpoint cost against RTT, death-detection latency, replace time).
//!
//! Everything runs on 127.0.0.1: an embedded gateway whose sessions die on schedule and an
//! embedded Aurora Bank. Raw data is returned as serialisable records; the binary writes
//! them under `docs/measurements/`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use gateway::DeathMode;
use outlive::chromiumoxide::Browser;
use outlive::chromiumoxide::handler::HandlerConfig;
use outlive::solari_browser::{Client, ClientOptions};
use outlive::{BoxFuture, Milestone, Options, Provider, Session, Solari, WideEvent};
use serde::Serialize;
use tokio::time::Instant;

use crate::bank::{BankProgress, BankTask};

/// Which arm a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    /// The same task with plain chromiumoxide.
    Baseline,
    /// The task through outlive.
    Outlive,
}

/// Survival benchmark settings.
#[derive(Debug, Clone, Serialize)]
pub struct SurvivalConfig {
    /// Tasks per arm.
    pub tasks: u32,
    /// Session lifetime.
    #[serde(with = "millis")]
    pub lifetime: Duration,
    /// ± jitter on the lifetime.
    #[serde(with = "millis")]
    pub jitter: Duration,
    /// How sessions die.
    #[serde(serialize_with = "death_name")]
    pub death: DeathMode,
    /// Polls that finish a task (the reference: 36, one every lifetime/30 → 1.2 lifetimes).
    pub polls: u32,
    /// outlive's checkpoint interval (the reference: 30 s on a 600 s session → lifetime/20).
    #[serde(with = "millis")]
    pub checkpoint_every: Duration,
}

impl Default for SurvivalConfig {
    fn default() -> Self {
        let lifetime = Duration::from_secs(20);
        SurvivalConfig {
            tasks: 5,
            lifetime,
            jitter: Duration::from_secs(1),
            death: DeathMode::Close,
            polls: 36,
            checkpoint_every: lifetime / 20,
        }
    }
}

mod millis {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

fn death_name<S: serde::Serializer>(d: &DeathMode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.as_str())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One death, as outlive saw it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeathRecord {
    /// When it was detected, ms since the run started.
    pub at_ms: f64,
    /// What gave it away.
    pub cause: String,
    /// Work lost, by the wide event's definition.
    pub lost_work_ms: f64,
}

/// One replacement browser, broken down.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplaceRecord {
    /// Provider launch + CDP connection.
    pub launch_ms: f64,
    /// Cookies + localStorage put in place.
    pub restore_ms: f64,
    /// Navigation to the checkpoint URL.
    pub navigate_ms: f64,
    /// From the death's detection to the task re-entered.
    pub replaced_in_ms: f64,
}

/// One checkpoint.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRecord {
    /// ms since the run started.
    pub at_ms: f64,
    /// Capture time.
    pub took_ms: f64,
    /// Size of the captured state.
    pub bytes: usize,
}

/// One task run of either arm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The arm.
    pub arm: ArmKind,
    /// Index within the arm.
    pub index: u32,
    /// `completed`, `failed` or `gave_up`.
    pub outcome: String,
    /// Wall time of the run.
    pub total_ms: f64,
    /// Successful polls.
    pub polls_done: u32,
    /// ms since start of each successful poll.
    pub polls_ms: Vec<f64>,
    /// Browser sessions, as (start, end) ms since start.
    pub sessions_ms: Vec<(f64, f64)>,
    /// Deaths outlive detected.
    pub deaths: Vec<DeathRecord>,
    /// Replacement browsers.
    pub replacements: Vec<ReplaceRecord>,
    /// Checkpoints written.
    pub checkpoints: Vec<CheckpointRecord>,
    /// outlive's wide event (outlive arm only).
    pub event: Option<WideEvent>,
    /// TOTP sign-ins the task performed.
    pub sign_ins: u32,
    /// The error that ended a failed run (redacted).
    pub error: Option<String>,
}

/// The whole survival benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SurvivalReport {
    /// Settings.
    pub config: SurvivalConfig,
    /// Every run of both arms, in start order.
    pub runs: Vec<RunRecord>,
    /// Sessions the gateway still held at the end (must be 0).
    pub sessions_left: usize,
    /// Chromium processes the gateway still had at the end (must be 0).
    pub chromium_left: usize,
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Aurora Bank did not start.
    #[error("Aurora Bank did not start")]
    Aurora(#[source] std::io::Error),
    /// The gateway did not start or stop cleanly.
    #[error("the gateway failed")]
    Gateway(#[source] gateway::Error),
    /// The Solari client could not be built.
    #[error("the Solari client could not be built: {0}")]
    Client(String),
}

struct Bed {
    bank: aurora::Aurora,
    bank_config: aurora::Config,
    gw: gateway::Gateway,
}

async fn bed(config: gateway::Config) -> Result<Bed, BenchError> {
    let bank_config = aurora::Config::new();
    let bank = aurora::spawn(bank_config.clone())
        .await
        .map_err(BenchError::Aurora)?;
    let gw = gateway::spawn(config).await.map_err(BenchError::Gateway)?;
    Ok(Bed {
        bank,
        bank_config,
        gw,
    })
}

fn client(gw: &gateway::Gateway) -> Result<Client, BenchError> {
    Client::new(ClientOptions::new(gw.api_key(), gw.base_url()))
        .map_err(|e| BenchError::Client(e.to_string()))
}

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
                    cause: cause.as_str().to_owned(),
                    lost_work_ms: ms(*lost_work),
                });
            }
            _ => {}
        }
    }
}

async fn run_outlive_arm(bed: &Bed, config: &SurvivalConfig, index: u32) -> RunRecord {
    let provider = match client(&bed.gw) {
        Ok(c) => Solari::new(c),
        Err(e) => return failed_record(ArmKind::Outlive, index, e.to_string()),
    };
    let task = BankTask::new(
        bed.bank.base_url(),
        &bed.bank_config,
        config.polls,
        config.lifetime / 30,
    );
    let progress = BankProgress::default();
    let recorder = Arc::new(Mutex::new(Recorder {
        started: Some(Instant::now()),
        ..Recorder::default()
    }));
    let event: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let (rec, slot) = (recorder.clone(), event.clone());
    let started = Instant::now();
    let result = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, progress) = (&task, &progress);
            async move { task.run(&page, Some(&ctx), progress, &|_| {}).await }
        },
        Options::new()
            .checkpoint_every(config.checkpoint_every)
            .max_relaunches(10)
            .on_milestone(move |m| rec.lock().expect("recorder").note(m))
            .on_event(move |e| *slot.lock().expect("event") = Some(e.clone())),
    )
    .await;
    let total = started.elapsed();
    let event = event.lock().expect("event").clone();
    let mut rec = std::mem::take(&mut *recorder.lock().expect("recorder"));
    if let Some(start) = rec.open_session.take() {
        rec.sessions.push((start, ms(total)));
    }
    RunRecord {
        arm: ArmKind::Outlive,
        index,
        outcome: event
            .as_ref()
            .map_or("failed", |e| e.outcome.as_str())
            .to_owned(),
        total_ms: ms(total),
        polls_done: progress.polls_done(),
        polls_ms: progress
            .polls()
            .iter()
            .map(|p| ms(p.at.saturating_duration_since(started)))
            .collect(),
        sessions_ms: rec.sessions,
        deaths: rec.deaths,
        replacements: rec.replacements,
        checkpoints: rec.checkpoints,
        event,
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
        outcome: "failed".into(),
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

async fn run_baseline_arm(bed: &Bed, config: &SurvivalConfig, index: u32) -> RunRecord {
    let started = Instant::now();
    let client = match client(&bed.gw) {
        Ok(c) => c,
        Err(e) => return failed_record(ArmKind::Baseline, index, e.to_string()),
    };
    let session = match client.sessions().create(Default::default()).await {
        Ok(s) => s,
        Err(e) => return failed_record(ArmKind::Baseline, index, e.to_string()),
    };
    let mut task = BankTask::new(
        bed.bank.base_url(),
        &bed.bank_config,
        config.polls,
        config.lifetime / 30,
    );
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
            "completed"
        } else {
            "failed"
        }
        .into(),
        total_ms: ms(total),
        polls_done: progress.polls_done(),
        polls_ms: progress
            .polls()
            .iter()
            .map(|p| ms(p.at.saturating_duration_since(started)))
            .collect(),
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

/// Runs both arms, `config.tasks` each, one baseline and one outlive task at a time side by
/// side, alternating which starts first. `on_run` sees each run as it finishes.
pub async fn survival(
    config: &SurvivalConfig,
    on_run: impl Fn(&RunRecord),
) -> Result<SurvivalReport, BenchError> {
    let bed = bed(gateway::Config::new()
        .lifetime(config.lifetime)
        .jitter(config.jitter)
        .death(config.death)
        .max_sessions(4))
    .await?;
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
    let status = bed.gw.shutdown().await.map_err(BenchError::Gateway)?;
    let _ = bed.bank.shutdown().await;
    Ok(SurvivalReport {
        config: config.clone(),
        runs,
        sessions_left: status.live_sessions + status.dead_sessions,
        chromium_left: status.chromium_processes,
    })
}

/// Checkpoint cost at one injected RTT.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointCost {
    /// The gateway's added round-trip time per CDP message.
    pub rtt_ms: f64,
    /// Every capture's duration.
    pub took_ms: Vec<f64>,
    /// Median capture.
    pub median_ms: f64,
    /// Median as a multiple of the RTT (when the RTT is not zero).
    pub median_over_rtt: Option<f64>,
    /// Size of the captured state (the Aurora session: cookie + localStorage + URL).
    pub bytes: usize,
}

/// Detection latency for one death mode.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detection {
    /// How the gateway killed the session.
    pub mode: String,
    /// From the gateway's kill call to outlive's detection, per kill.
    pub latency_ms: Vec<f64>,
    /// How long the gateway's kill call itself took (Chromium killed, then the client told).
    pub kill_call_ms: Vec<f64>,
    /// From the kill call's return to outlive's detection (negative: detected before the
    /// call returned). The gateway cuts the connection as the last step of a kill, so this
    /// bounds the latency from the cut itself.
    pub after_kill_returned_ms: Vec<f64>,
    /// What outlive saw.
    pub causes: Vec<String>,
}

/// One replacement: from the failure's detection to the task re-entered with the checkpoint
/// restored.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// `page_crashed` (a fresh page in the same browser) or a browser death's cause.
    pub cause: String,
    /// Detection → re-entered (`Entered.replaced_in`).
    pub replaced_in_ms: f64,
    /// Detection → fresh page open (page recovery) or launch time (relaunch).
    pub page_or_launch_ms: f64,
    /// Cookies and localStorage put in place.
    pub restore_ms: f64,
    /// The resume navigation.
    pub navigate_ms: f64,
}

/// Page recovery against a full relaunch, alternating in one run on one gateway.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryComparison {
    /// Every replacement, in order.
    pub replacements: Vec<Replacement>,
    /// Median replace time of the page recoveries.
    pub page_median_ms: f64,
    /// Median replace time of the relaunches.
    pub relaunch_median_ms: f64,
    /// `page_median_ms / relaunch_median_ms` (target ≤ 0.5).
    pub ratio: f64,
    /// The run's wide event.
    pub event: Option<WideEvent>,
}

/// The micro-measurements.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MicroReport {
    /// Checkpoint cost at RTT 0, 20 and 50 ms.
    pub checkpoint: Vec<CheckpointCost>,
    /// Detection latency per death mode.
    pub detection: Vec<Detection>,
    /// Page recovery against a relaunch.
    pub recovery: RecoveryComparison,
    /// outlive's heartbeat interval and timeout during the detection runs.
    pub heartbeat_ms: (f64, f64),
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Remembers the session ids the provider handed out (parsed from the endpoint path).
struct Tracking {
    inner: Solari,
    ids: Arc<Mutex<Vec<String>>>,
}

impl Provider for Tracking {
    fn name(&self) -> &str {
        "solari"
    }
    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let s = self.inner.launch().await?;
            if let Some(id) = s
                .endpoint()
                .expose()
                .split("/cdp/")
                .nth(1)
                .and_then(|r| r.split('?').next())
            {
                self.ids.lock().expect("ids").push(id.to_owned());
            }
            Ok(s)
        })
    }
}

async fn checkpoint_cost(rtt: Duration, samples: u32) -> Result<CheckpointCost, BenchError> {
    let bed = bed(gateway::Config::new()
        .lifetime(Duration::from_secs(600))
        .jitter(Duration::ZERO)
        .rtt(rtt))
    .await?;
    let provider = Solari::new(client(&bed.gw)?);
    let costs: Arc<Mutex<Vec<(f64, usize)>>> = Arc::default();
    let (sink, reset) = (costs.clone(), costs.clone());
    let task = BankTask::new(bed.bank.base_url(), &bed.bank_config, 1, Duration::ZERO);
    let progress = BankProgress::default();
    let _ = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, progress, reset) = (&task, &progress, &reset);
            async move {
                task.run(&page, Some(&ctx), progress, &|_| {}).await?;
                reset.lock().expect("costs").clear(); // keep only the measured series
                for _ in 0..samples {
                    ctx.checkpoint().await;
                }
                Ok::<_, crate::bank::BankError>(())
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_secs(3600))
            .on_milestone(move |m| {
                if let Milestone::Checkpointed { took, bytes } = m {
                    sink.lock().expect("costs").push((ms(*took), *bytes));
                }
            }),
    )
    .await;
    bed.gw.shutdown().await.map_err(BenchError::Gateway)?;
    let costs = costs.lock().expect("costs").clone();
    let took: Vec<f64> = costs.iter().map(|c| c.0).collect();
    let med = median(&took);
    Ok(CheckpointCost {
        rtt_ms: ms(rtt),
        median_ms: med,
        median_over_rtt: (!rtt.is_zero()).then(|| med / ms(rtt)),
        bytes: costs.last().map_or(0, |c| c.1),
        took_ms: took,
    })
}

async fn detection(
    mode: DeathMode,
    kills: u32,
    heartbeat: (Duration, Duration),
) -> Result<Detection, BenchError> {
    let bed = bed(gateway::Config::new()
        .lifetime(Duration::from_secs(600))
        .jitter(Duration::ZERO))
    .await?;
    let ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let provider = Tracking {
        inner: Solari::new(client(&bed.gw)?),
        ids: ids.clone(),
    };
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (died_tx, mut died_rx) =
        tokio::sync::mpsc::unbounded_channel::<(std::time::Instant, String)>();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(kills + 2)
        .heartbeat_interval(heartbeat.0)
        .heartbeat_timeout(heartbeat.1)
        .on_milestone(move |m| match m {
            Milestone::Entered { .. } => {
                let _ = entered_tx.send(());
            }
            Milestone::Died {
                detected_at, cause, ..
            } => {
                let _ = died_tx.send((*detected_at, cause.as_str().to_owned()));
            }
            _ => {}
        });
    let done = Arc::new(tokio::sync::Notify::new());
    let finish = done.clone();
    let run = outlive::outlive(
        &provider,
        move |_page, _ctx| {
            let finish = finish.clone();
            async move {
                finish.notified().await;
                Ok::<_, std::convert::Infallible>(())
            }
        },
        options,
    );
    let killer = async {
        let mut latency = Vec::new();
        let mut kill_call = Vec::new();
        let mut after_return = Vec::new();
        let mut causes = Vec::new();
        for _ in 0..kills {
            if entered_rx.recv().await.is_none() {
                break;
            }
            let Some(id) = ids.lock().expect("ids").last().cloned() else {
                break;
            };
            let t0 = std::time::Instant::now();
            let _ = bed.gw.kill(&id, mode).await;
            let returned = std::time::Instant::now();
            kill_call.push(ms(returned - t0));
            let Some((at, cause)) = died_rx.recv().await else {
                break;
            };
            latency.push(ms(at.saturating_duration_since(t0)));
            after_return.push(if at >= returned {
                ms(at - returned)
            } else {
                -ms(returned - at)
            });
            causes.push(cause);
        }
        let _ = entered_rx.recv().await;
        done.notify_waiters();
        (latency, kill_call, after_return, causes)
    };
    let (_, (latency_ms, kill_call_ms, after_kill_returned_ms, causes)) =
        futures::join!(run, killer);
    bed.gw.shutdown().await.map_err(BenchError::Gateway)?;
    Ok(Detection {
        mode: mode.as_str().to_owned(),
        latency_ms,
        kill_call_ms,
        after_kill_returned_ms,
        causes,
    })
}

/// What the next entry of the recovery run does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    /// Crash its own page's renderer (`Page.crash`): a page failure.
    CrashPage,
    /// Wait to be killed by the gateway (close frame): a browser death.
    AwaitKill,
    /// Return: the run is over.
    Finish,
}

/// Alternates `samples` page crashes with `samples` browser deaths in one run of the signed-in
/// Aurora task, and measures each replacement from detection to re-entry with the checkpoint
/// restored (cookie, localStorage, the account page).
async fn recovery(samples: u32) -> Result<RecoveryComparison, BenchError> {
    use outlive::chromiumoxide::cdp::browser_protocol::page::CrashParams;
    let bed = bed(gateway::Config::new()
        .lifetime(Duration::from_secs(600))
        .jitter(Duration::ZERO))
    .await?;
    let ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let provider = Tracking {
        inner: Solari::new(client(&bed.gw)?),
        ids: ids.clone(),
    };
    // Entry 1 signs in; then crash, kill, crash, kill, …; the last entry finishes.
    let mut plan: Vec<Next> = (0..samples)
        .flat_map(|_| [Next::CrashPage, Next::AwaitKill])
        .collect();
    plan.push(Next::Finish);
    let plan = Arc::new(plan);
    let records: Arc<Mutex<Vec<Replacement>>> = Arc::default();
    let pending: Arc<Mutex<Replacement>> = Arc::default();
    let event: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let (sink, slot) = (records.clone(), event.clone());
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(samples + 2)
        .max_page_recoveries(samples + 2)
        .on_event(move |e| *slot.lock().expect("event") = Some(e.clone()))
        .on_milestone(move |m| {
            let mut p = pending.lock().expect("pending");
            match m {
                Milestone::PageFailed { cause, .. } | Milestone::Died { cause, .. } => {
                    *p = Replacement {
                        cause: cause.as_str().to_owned(),
                        ..Replacement::default()
                    };
                }
                Milestone::PageRecovered { took } => p.page_or_launch_ms = ms(*took),
                Milestone::Launched { took } => p.page_or_launch_ms = ms(*took),
                Milestone::Restored { restore, navigate } => {
                    p.restore_ms = ms(*restore);
                    p.navigate_ms = ms(*navigate);
                }
                Milestone::Entered {
                    attempt,
                    replaced_in,
                    ..
                } => {
                    if let Some(r) = replaced_in {
                        p.replaced_in_ms = ms(*r);
                        sink.lock().expect("records").push(std::mem::take(&mut *p));
                    }
                    let _ = entered_tx.send(*attempt);
                }
                _ => {}
            }
        });
    let task = BankTask::new(bed.bank.base_url(), &bed.bank_config, 1, Duration::ZERO);
    let progress = BankProgress::default();
    let run = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, progress, plan) = (&task, &progress, plan.clone());
            async move {
                if ctx.attempt() == 1 {
                    task.run(&page, Some(&ctx), progress, &|_| {}).await?;
                }
                match plan
                    .get(ctx.attempt() as usize - 1)
                    .copied()
                    .unwrap_or(Next::Finish)
                {
                    Next::CrashPage => {
                        let _ = page.execute(CrashParams::default()).await;
                        std::future::pending::<()>().await;
                    }
                    Next::AwaitKill => std::future::pending::<()>().await,
                    Next::Finish => {}
                }
                Ok::<_, crate::bank::BankError>(())
            }
        },
        options,
    );
    let killer = async {
        while let Some(attempt) = entered_rx.recv().await {
            if plan.get(attempt as usize - 1) == Some(&Next::AwaitKill) {
                let id = ids.lock().expect("ids").last().cloned();
                if let Some(id) = id {
                    let _ = bed.gw.kill(&id, DeathMode::Close).await;
                }
            }
        }
    };
    // The killer ends when the run (and its milestone sender) is gone.
    let (_, ()) = futures::join!(run, killer);
    bed.gw.shutdown().await.map_err(BenchError::Gateway)?;
    let replacements = records.lock().expect("records").clone();
    let of = |page: bool| -> Vec<f64> {
        replacements
            .iter()
            .filter(|r| r.cause.starts_with("page_") == page)
            .map(|r| r.replaced_in_ms)
            .collect()
    };
    let (page_median_ms, relaunch_median_ms) = (median(&of(true)), median(&of(false)));
    let event = event.lock().expect("event").clone();
    Ok(RecoveryComparison {
        replacements,
        page_median_ms,
        relaunch_median_ms,
        ratio: page_median_ms / relaunch_median_ms,
        event,
    })
}

/// Checkpoint cost at RTT 0/20/50 ms and detection latency for close, reset and silence.
pub async fn micro(samples: u32, kills: u32) -> Result<MicroReport, BenchError> {
    let mut checkpoint = Vec::new();
    for rtt in [0, 20, 50] {
        checkpoint.push(checkpoint_cost(Duration::from_millis(rtt), samples).await?);
    }
    let heartbeat = (Duration::from_secs(1), Duration::from_secs(2));
    let mut detection_runs = Vec::new();
    for mode in [DeathMode::Close, DeathMode::Reset, DeathMode::Silence] {
        detection_runs.push(detection(mode, kills, heartbeat).await?);
    }
    let recovery = recovery(kills.max(5)).await?;
    Ok(MicroReport {
        checkpoint,
        detection: detection_runs,
        recovery,
        heartbeat_ms: (ms(heartbeat.0), ms(heartbeat.1)),
    })
}

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
            outcome: r.outcome.clone(),
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
        })
        .collect()
}

/// A plain-text summary of both reports, for the terminal and the measurements README.
pub fn summary(survival: &SurvivalReport, micro: Option<&MicroReport>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let arm = |k: ArmKind| survival.runs.iter().filter(move |r| r.arm == k);
    let completed = |k: ArmKind| arm(k).filter(|r| r.outcome == "completed").count();
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
    let replaced: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.replacements.iter().map(|x| x.replaced_in_ms))
        .collect();
    let launch: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.replacements.iter().map(|x| x.launch_ms))
        .collect();
    let restore: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.replacements.iter().map(|x| x.restore_ms))
        .collect();
    let navigate: Vec<f64> = arm(ArmKind::Outlive)
        .flat_map(|r| r.replacements.iter().map(|x| x.navigate_ms))
        .collect();
    let _ = writeln!(
        out,
        "  replace time    median {:.0} ms (launch {:.0} + restore {:.0} + navigate {:.0}), n={}",
        median(&replaced),
        median(&launch),
        median(&restore),
        median(&navigate),
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
        .filter(|r| r.outcome == "completed")
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
                    .filter(|x| x.cause.starts_with("page_") == page)
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
            r.replacements
                .iter()
                .filter(|x| x.cause.starts_with("page_"))
                .count(),
            r.replacements
                .iter()
                .filter(|x| !x.cause.starts_with("page_"))
                .count(),
        );
        for d in &m.detection {
            let _ = writeln!(
                out,
                "  detection {:>8}: median {:.0} ms after the kill call began (the call took {:.0} ms; {:+.1} ms after it returned), causes {:?}",
                d.mode,
                median(&d.latency_ms),
                median(&d.kill_call_ms),
                median(&d.after_kill_returned_ms),
                d.causes
            );
        }
    }
    out
}
