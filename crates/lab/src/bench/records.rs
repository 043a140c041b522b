//! The benchmark's serialisable records: settings, runs, reports.

use std::time::Duration;

use crate::sync::lock;
use gateway::DeathMode;
use outlive::{DeathCause, Outcome, WideEvent};
use serde::Serialize;

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

impl SurvivalConfig {
    /// `base` with this benchmark's checkpoint interval and a relaunch budget no run meets.
    pub fn options(&self, base: outlive::Options) -> outlive::Options {
        base.checkpoint_every(self.checkpoint_every)
            .max_relaunches(10)
    }
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

/// A cause by its stable name (`closed`, `page_crashed`, …), as outlive logs it.
fn cause_name<S: serde::Serializer>(c: &DeathCause, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.as_str())
}

fn cause_names<S: serde::Serializer>(cs: &[DeathCause], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(cs.iter().map(|c| c.as_str()))
}

/// What turns a run's milestones into a record.
pub(crate) trait Notes: Send + 'static {
    fn note(&mut self, m: &outlive::Milestone);
}

/// The bank task, once, through outlive on `provider` with `options` (over the config's),
/// every milestone noted into `notes`: answers the result, the event, the task's progress and
/// when the run started.
pub(crate) async fn bank_outlive<P: outlive::Provider + ?Sized, N: Notes>(
    bed: &outlive_bed::bed::TestBed,
    config: &SurvivalConfig,
    provider: &P,
    options: outlive::Options,
    notes: &std::sync::Arc<std::sync::Mutex<N>>,
) -> (
    Result<u32, outlive::RunError<outlive_bed::bank::BankError>>,
    WideEvent,
    outlive_bed::bank::BankProgress,
    tokio::time::Instant,
) {
    let task = bed.task(config.polls, config.lifetime / 30);
    let progress = outlive_bed::bank::BankProgress::default();
    let sink = notes.clone();
    let started = tokio::time::Instant::now();
    let outlive::Reported { result, event } = task
        .outlive(
            provider,
            &progress,
            config
                .options(options)
                .on_milestone(move |m| lock(&sink).note(m)),
        )
        .await;
    (result, event, progress, started)
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One death, as outlive saw it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeathRecord {
    /// When it was detected, ms since the run started.
    pub at_ms: f64,
    /// What gave it away.
    #[serde(serialize_with = "cause_name")]
    pub cause: DeathCause,
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
    /// How the run ended.
    pub outcome: Outcome,
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

/// One line for people: `Outlive #2: completed after 31.4 s, 36 polls`.
impl std::fmt::Display for RunRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        run_line(
            f,
            &self.arm,
            self.index,
            self.outcome,
            self.total_ms,
            self.polls_done,
        )
    }
}

/// `{arm:?} #{index}: {outcome} after {s} s, {polls} polls`, the start of every run's line.
pub(crate) fn run_line(
    f: &mut std::fmt::Formatter<'_>,
    arm: &dyn std::fmt::Debug,
    index: u32,
    outcome: Outcome,
    total_ms: f64,
    polls: u32,
) -> std::fmt::Result {
    write!(
        f,
        "{arm:?} #{index}: {} after {:.1} s, {polls} polls",
        outcome.as_str(),
        total_ms / 1000.0
    )
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
    #[serde(serialize_with = "death_name")]
    pub mode: DeathMode,
    /// The task was waiting on a command (a promise that never settles) when the session
    /// died, rather than idle.
    pub command_waiting: bool,
    /// From the gateway's kill call to outlive's detection, per kill.
    pub latency_ms: Vec<f64>,
    /// How long the gateway's kill call itself took (Chromium killed, then the client told).
    pub kill_call_ms: Vec<f64>,
    /// From the kill call's return to outlive's detection (negative: detected before the
    /// call returned). The gateway cuts the connection as the last step of a kill, so this
    /// bounds the latency from the cut itself.
    pub after_kill_returned_ms: Vec<f64>,
    /// What outlive saw.
    #[serde(serialize_with = "cause_names")]
    pub causes: Vec<DeathCause>,
}

/// One replacement: from the failure's detection to the task re-entered with the checkpoint
/// restored.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// A page failure (a fresh page in the same browser) or a browser death.
    #[serde(serialize_with = "cause_name")]
    pub cause: DeathCause,
    /// Detection → re-entered (`Entered.replaced_in`).
    pub replaced_in_ms: f64,
    /// Detection → fresh page open (page recovery) or launch time (relaunch).
    pub page_or_launch_ms: f64,
    /// Cookies and localStorage put in place.
    pub restore_ms: f64,
    /// The resume navigation.
    pub navigate_ms: f64,
}

impl Replacement {
    /// A replacement after a failure of `cause`, its times still to come.
    pub fn after(cause: DeathCause) -> Self {
        Replacement {
            cause,
            replaced_in_ms: 0.0,
            page_or_launch_ms: 0.0,
            restore_ms: 0.0,
            navigate_ms: 0.0,
        }
    }
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
    /// From the task's `Page.crash` call to outlive's detection of the crash (Chromium's own
    /// time to kill the renderer and report it included).
    pub crash_detected_ms: Vec<f64>,
    /// From the moment a task command stalled on a hung page (an endless script) to outlive's
    /// detection: the target is heartbeat interval + timeout.
    pub hang_detected_ms: Vec<f64>,
    /// Heartbeat interval and timeout of this run.
    pub heartbeat_ms: (f64, f64),
    /// The run's wide event.
    pub event: WideEvent,
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
