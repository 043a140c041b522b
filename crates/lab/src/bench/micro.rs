//! The micro-measurements: checkpoint cost against RTT, death-detection latency per death
//! mode, and page recovery against a full relaunch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::DeathMode;
use outlive::{Cloud, DeathCause, Dialect, Milestone, Options, Provider, Solari};

use super::records::*;
use crate::error::Error;
use crate::stats::median;
use crate::sync::lock;
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{Recording, TestBed, until_killed};

/// `(took in ms, bytes)` of each checkpoint, oldest first.
pub(super) type Costs = Arc<Mutex<Vec<(f64, usize)>>>;

/// Options that checkpoint only when the task asks, and the costs of their checkpoints.
pub(super) fn measured_checkpoints() -> (Options, Costs) {
    let costs = Costs::default();
    let sink = costs.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .on_milestone(move |m| {
            if let Milestone::Checkpointed { took, bytes } = m {
                lock(&sink).push((ms(*took), *bytes));
            }
        });
    (options, costs)
}

/// A test bed whose sessions only die when killed, and a provider on it that remembers the
/// sessions it launched.
pub(super) async fn killable_bed() -> Result<(TestBed, Recording<Solari>), Error> {
    let bed = TestBed::start(until_killed(Duration::ZERO)).await?;
    let provider = Recording::new(bed.provider());
    Ok((bed, provider))
}

async fn checkpoint_cost(rtt: Duration, samples: u32) -> Result<CheckpointCost, Error> {
    let bed = TestBed::start(until_killed(rtt)).await?;
    let provider = bed.provider();
    let (options, costs) = measured_checkpoints();
    let reset = costs.clone();
    let task = bed.task(1, Duration::ZERO);
    let progress = BankProgress::default();
    let _ = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, progress, reset) = (&task, &progress, &reset);
            async move {
                task.run(&page, Some(&ctx), progress, &|_| {}).await?;
                lock(reset).clear(); // keep only the measured series
                for _ in 0..samples {
                    ctx.checkpoint().await;
                }
                Ok::<_, outlive_bed::bank::BankError>(())
            }
        },
        options,
    )
    .await;
    bed.shutdown().await?;
    let costs = lock(&costs).clone();
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

/// Kills the session `kills` times in `mode` while the task idles — or, with
/// `command_waiting`, while it waits on a command that never completes — and times each
/// detection.
pub(super) async fn detection(
    mode: DeathMode,
    kills: u32,
    heartbeat: (Duration, Duration),
    command_waiting: bool,
) -> Result<Detection, Error> {
    let (bed, provider) = killable_bed().await?;
    detection_on(bed, provider, mode, kills, heartbeat, command_waiting).await
}

/// [`detection`] through a cloud `dialect`'s API on the gateway (`/NAME`), not Solari's.
pub(super) async fn detection_through(
    dialect: Dialect,
    mode: DeathMode,
    kills: u32,
    heartbeat: (Duration, Duration),
    command_waiting: bool,
) -> Result<Detection, Error> {
    let bed = TestBed::start(until_killed(Duration::ZERO)).await?;
    let url = format!("{}/{}", bed.gateway().base_url(), dialect.name());
    let provider = Recording::new(Cloud::new(dialect, bed.gateway().api_key()).base_url(url));
    detection_on(bed, provider, mode, kills, heartbeat, command_waiting).await
}

async fn detection_on<P: Provider>(
    bed: TestBed,
    provider: Recording<P>,
    mode: DeathMode,
    kills: u32,
    heartbeat: (Duration, Duration),
    command_waiting: bool,
) -> Result<Detection, Error> {
    let (entered_tx, entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (died_tx, died_rx) =
        tokio::sync::mpsc::unbounded_channel::<(std::time::Instant, DeathCause)>();
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
                let _ = died_tx.send((*detected_at, *cause));
            }
            _ => {}
        });
    let done = Arc::new(tokio::sync::Notify::new());
    let finish = done.clone();
    let run = outlive::outlive(
        &provider,
        move |page, _ctx| {
            let finish = finish.clone();
            async move {
                let waiting = async {
                    if command_waiting {
                        page.evaluate_expression("new Promise(() => {})").await?;
                    }
                    std::future::pending::<()>().await;
                    Ok::<_, outlive::chromiumoxide::error::CdpError>(())
                };
                tokio::select! {
                    _ = finish.notified() => Ok(()),
                    r = waiting => r,
                }
            }
        },
        options,
    );
    let killer = async {
        let timed = kill_each_entry(&bed, &provider, mode, kills, entered_rx, died_rx).await;
        done.notify_waiters();
        timed
    };
    let (_, (latency_ms, kill_call_ms, after_kill_returned_ms, causes)) =
        futures::join!(run, killer);
    bed.shutdown().await?;
    Ok(Detection {
        mode,
        command_waiting,
        latency_ms,
        kill_call_ms,
        after_kill_returned_ms,
        causes,
    })
}

/// The detection timings of one case: latency, kill call, after the call returned, causes.
pub(super) type Timed = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<DeathCause>);

/// Kills the newest session `mode`'s way each time an entry begins, `kills` times, and times
/// how long outlive takes to report each death; then waits for the entry after the last.
pub(super) async fn kill_each_entry<P: Provider>(
    bed: &TestBed,
    provider: &Recording<P>,
    mode: DeathMode,
    kills: u32,
    mut entered_rx: tokio::sync::mpsc::UnboundedReceiver<()>,
    mut died_rx: tokio::sync::mpsc::UnboundedReceiver<(std::time::Instant, DeathCause)>,
) -> Timed {
    let mut latency = Vec::new();
    let mut kill_call = Vec::new();
    let mut after_return = Vec::new();
    let mut causes = Vec::new();
    for _ in 0..kills {
        if entered_rx.recv().await.is_none() {
            break;
        }
        let Some(id) = provider.newest_session_id() else {
            break;
        };
        let t0 = std::time::Instant::now();
        let _ = bed.gateway().kill(&id, mode).await;
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
    (latency, kill_call, after_return, causes)
}

/// What the next entry of the recovery run does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    /// Crash its own page's renderer (`Page.crash`): a page failure.
    CrashPage,
    /// Start an endless script, then make a call that stalls on it: a hung page.
    HangPage,
    /// Wait to be killed by the gateway (close frame): a browser death.
    AwaitKill,
    /// Return: the run is over.
    Finish,
}

/// When the task broke its page (crash sent, or hung call started), by which kind of break.
type Broke = Arc<Mutex<Option<(Next, std::time::Instant)>>>;

/// What the recovery run's milestones record: each replacement from a failure's detection to
/// the task re-entered, and how long each break took to be detected.
#[derive(Default)]
struct RecoveryRecorder {
    records: Arc<Mutex<Vec<Replacement>>>,
    /// The replacement under way.
    pending: Arc<Mutex<Option<Replacement>>>,
    broke: Broke,
    detections: Arc<Mutex<Vec<(Next, f64)>>>,
}

impl RecoveryRecorder {
    /// Records milestone `m`; each entry's attempt goes to `entered`.
    fn on(&self, m: &Milestone, entered: &tokio::sync::mpsc::UnboundedSender<u32>) {
        let mut p = lock(&self.pending);
        match m {
            Milestone::PageFailed {
                cause, detected_at, ..
            } => {
                if let Some((how, at)) = lock(&self.broke).take() {
                    lock(&self.detections)
                        .push((how, ms(detected_at.saturating_duration_since(at))));
                }
                *p = Some(Replacement::after(*cause));
            }
            Milestone::Died { cause, .. } => *p = Some(Replacement::after(*cause)),
            Milestone::PageRecovered { took } | Milestone::Launched { took } => {
                if let Some(p) = p.as_mut() {
                    p.page_or_launch_ms = ms(*took);
                }
            }
            Milestone::Restored { restore, navigate } => {
                if let Some(p) = p.as_mut() {
                    p.restore_ms = ms(*restore);
                    p.navigate_ms = ms(*navigate);
                }
            }
            Milestone::Entered {
                attempt,
                replaced_in,
                ..
            } => {
                if let (Some(r), Some(mut done)) = (replaced_in, p.take()) {
                    done.replaced_in_ms = ms(*r);
                    lock(&self.records).push(done);
                }
                let _ = entered.send(*attempt);
            }
            _ => {}
        }
    }

    /// The comparison the recorded run gives.
    fn comparison(
        &self,
        heartbeat: (Duration, Duration),
        event: outlive::WideEvent,
    ) -> RecoveryComparison {
        let replacements = lock(&self.records).clone();
        let of = |page: bool| -> Vec<f64> {
            replacements
                .iter()
                .filter(|r| r.cause.is_page() == page)
                .map(|r| r.replaced_in_ms)
                .collect()
        };
        let (page_median_ms, relaunch_median_ms) = (median(&of(true)), median(&of(false)));
        let detections = lock(&self.detections).clone();
        let detected = |how: Next| -> Vec<f64> {
            detections
                .iter()
                .filter(|(h, _)| *h == how)
                .map(|(_, d)| *d)
                .collect()
        };
        RecoveryComparison {
            replacements,
            page_median_ms,
            relaunch_median_ms,
            ratio: page_median_ms / relaunch_median_ms,
            crash_detected_ms: detected(Next::CrashPage),
            hang_detected_ms: detected(Next::HangPage),
            heartbeat_ms: (ms(heartbeat.0), ms(heartbeat.1)),
            event,
        }
    }
}

/// Breaks the page as `next` says, noting when in `broke`; answers the error of the call that
/// failed with it (like a real task, so neither arm waits out the grace), or `Ok` at the end.
async fn break_as_planned(
    page: &outlive::chromiumoxide::Page,
    next: Next,
    broke: &Broke,
) -> Result<(), outlive::chromiumoxide::error::CdpError> {
    use outlive::chromiumoxide::cdp::browser_protocol::page::CrashParams;
    match next {
        Next::CrashPage => {
            *lock(broke) = Some((next, std::time::Instant::now()));
            page.execute(CrashParams::default()).await?;
        }
        Next::HangPage => {
            page.evaluate("setTimeout(() => { for (;;) {} }, 0)")
                .await?;
            // Let the endless script start, then stall a call on it.
            tokio::time::sleep(Duration::from_millis(100)).await;
            *lock(broke) = Some((next, std::time::Instant::now()));
            page.evaluate("1").await?;
        }
        // Polls until the gateway's kill makes a call fail.
        Next::AwaitKill => loop {
            page.evaluate("1").await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        },
        Next::Finish => return Ok(()),
    }
    Err(outlive::chromiumoxide::error::CdpError::msg(
        "the page survived what should have broken it",
    ))
}

/// Alternates `samples` page crashes with `samples` browser deaths in one run of the signed-in
/// Aurora task, and measures each replacement from detection to re-entry with the checkpoint
/// restored (cookie, localStorage, the account page).
async fn recovery(samples: u32) -> Result<RecoveryComparison, Error> {
    let (bed, provider) = killable_bed().await?;
    // Entry 1 signs in; then crash, kill, hang, crash, kill, …; the last entry finishes.
    let mut plan: Vec<Next> = (0..samples)
        .flat_map(|_| [Next::CrashPage, Next::AwaitKill, Next::HangPage])
        .collect();
    plan.push(Next::Finish);
    let plan = Arc::new(plan);
    let recorder = Arc::new(RecoveryRecorder::default());
    let (entered_tx, mut entered_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let heartbeat = (Duration::from_secs(1), Duration::from_secs(2));
    let on = recorder.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(samples + 2)
        .max_page_recoveries(2 * samples + 2)
        .heartbeat_interval(heartbeat.0)
        .heartbeat_timeout(heartbeat.1)
        .on_milestone(move |m| on.on(m, &entered_tx));
    let task = bed.task(1, Duration::ZERO);
    let progress = BankProgress::default();
    let run = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (task, progress, plan, broke) = (&task, &progress, plan.clone(), &recorder.broke);
            async move {
                if ctx.attempt() == 1 {
                    task.run(&page, Some(&ctx), progress, &|_| {})
                        .await
                        .map_err(|e| outlive::chromiumoxide::error::CdpError::msg(e.to_string()))?;
                }
                let next = plan
                    .get(ctx.attempt() as usize - 1)
                    .copied()
                    .unwrap_or(Next::Finish);
                break_as_planned(&page, next, broke).await
            }
        },
        options,
    );
    let killer = async {
        while let Some(attempt) = entered_rx.recv().await {
            if plan.get(attempt as usize - 1) == Some(&Next::AwaitKill) {
                let id = provider.newest_session_id();
                if let Some(id) = id {
                    let _ = bed.gateway().kill(&id, DeathMode::Close).await;
                }
            }
        }
    };
    // The killer ends when the run (and its milestone sender) is gone.
    let (outlive::Reported { event, .. }, ()) = futures::join!(run, killer);
    bed.shutdown().await?;
    Ok(recorder.comparison(heartbeat, event))
}

/// Checkpoint cost at RTT 0/20/50 ms and detection latency for close, reset and silence.
pub async fn micro(samples: u32, kills: u32) -> Result<MicroReport, Error> {
    let mut checkpoint = Vec::new();
    for rtt in [0, 20, 50] {
        checkpoint.push(checkpoint_cost(Duration::from_millis(rtt), samples).await?);
    }
    let heartbeat = (Duration::from_secs(1), Duration::from_secs(2));
    let mut detection_runs = Vec::new();
    for mode in [DeathMode::Close, DeathMode::Reset, DeathMode::Silence] {
        detection_runs.push(detection(mode, kills, heartbeat, false).await?);
    }
    detection_runs.push(detection(DeathMode::Silence, kills, heartbeat, true).await?);
    let recovery = recovery(kills.max(5)).await?;
    Ok(MicroReport {
        checkpoint,
        detection: detection_runs,
        recovery,
        heartbeat_ms: (ms(heartbeat.0), ms(heartbeat.1)),
    })
}
