//! `outlive demo`: the bank task through outlive, on an embedded gateway whose sessions die
//! on schedule, against an embedded Aurora Bank — everything on 127.0.0.1.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::DeathMode;
use outlive::solari_browser::{Client, ClientOptions};
use outlive::{Options, Solari, WideEvent};

use crate::bank::{BankEvent, BankProgress, BankTask};

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Each browser session's lifetime.
    pub lifetime: Duration,
    /// ± jitter on the lifetime.
    pub jitter: Duration,
    /// How long the task's polling takes without deaths.
    pub task: Duration,
    /// How sessions die.
    pub death: DeathMode,
    /// Probability that a new browser is dead on arrival.
    pub doa: f64,
    /// outlive's automatic checkpoint interval.
    pub checkpoint_every: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            lifetime: Duration::from_secs(15),
            jitter: Duration::from_secs(2),
            task: Duration::from_secs(40),
            death: DeathMode::Mixed,
            doa: 0.0,
            checkpoint_every: Duration::from_secs(2),
        }
    }
}

/// What the demo saw.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// outlive's wide event.
    pub event: WideEvent,
    /// Successful polls.
    pub polls: u32,
    /// Sign-ins the task performed.
    pub sign_ins: u32,
    /// TOTP codes the bank accepted (1 if no relaunch lost the login).
    pub totps_accepted: u64,
    /// The gateway after the run: every session released, every Chromium gone.
    pub gateway_after: gateway::Status,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Aurora Bank did not start.
    #[error("Aurora Bank did not start")]
    Aurora(#[source] std::io::Error),
    /// The gateway did not start.
    #[error("the gateway did not start")]
    Gateway(#[source] gateway::Error),
    /// The Solari client rejected its options.
    #[error("the Solari client could not be built: {0}")]
    Client(String),
    /// The task failed or outlive gave up; the event says more.
    #[error("the run did not complete ({})", .event.outcome.as_str())]
    Run {
        /// The run's wide event.
        event: Box<WideEvent>,
    },
}

/// The task's polling plan for a config: a poll every lifetime/30, for `task`.
pub fn plan(config: &DemoConfig) -> (u32, Duration) {
    let every = config.lifetime / 30;
    let polls = (config.task.as_secs_f64() / every.as_secs_f64())
        .ceil()
        .max(1.0) as u32;
    (polls, every)
}

/// Something the demo shows as it happens.
#[derive(Debug, Clone)]
pub enum DemoEvent {
    /// A step of the task.
    Task(BankEvent),
    /// outlive noticed a browser death.
    Died {
        /// What gave it away.
        cause: outlive::DeathCause,
        /// Work lost by this death.
        lost_work: Duration,
    },
    /// A replacement browser was ready and restored.
    Replaced {
        /// From the death's detection to the task re-entered.
        took: Duration,
    },
    /// A launch failed (a browser dead on arrival, a refused create).
    LaunchFailed,
}

/// Runs the demo; `on_event` sees every step as it happens.
pub async fn run(
    config: &DemoConfig,
    on_event: impl Fn(DemoEvent) + Send + Sync + 'static,
) -> Result<DemoReport, DemoError> {
    let bank_config = aurora::Config::new();
    let bank = aurora::spawn(bank_config.clone())
        .await
        .map_err(DemoError::Aurora)?;
    let gw = gateway::spawn(
        gateway::Config::new()
            .lifetime(config.lifetime)
            .jitter(config.jitter)
            .death(config.death)
            .doa(config.doa),
    )
    .await
    .map_err(DemoError::Gateway)?;
    let client = Client::new(ClientOptions::new(gw.api_key(), gw.base_url()))
        .map_err(|e| DemoError::Client(e.to_string()))?;
    let provider = Solari::new(client);

    let (polls, every) = plan(config);
    let task = BankTask::new(bank.base_url(), &bank_config, polls, every);
    let progress = BankProgress::default();
    let event: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let slot = event.clone();
    let lifetimes = (config.task.as_secs_f64() / config.lifetime.as_secs_f64()).ceil() as u32;
    let options = Options::new()
        .checkpoint_every(config.checkpoint_every)
        .max_relaunches(lifetimes * 2 + 5)
        .relaunch_backoff(Duration::from_millis(500))
        .on_event(move |e| *slot.lock().expect("event slot") = Some(e.clone()));
    let on_event = Arc::new(on_event);
    let milestones = on_event.clone();
    let options = options.on_milestone(move |m| match m {
        outlive::Milestone::Died {
            cause, lost_work, ..
        }
        | outlive::Milestone::PageFailed {
            cause, lost_work, ..
        } => milestones(DemoEvent::Died {
            cause: *cause,
            lost_work: *lost_work,
        }),
        outlive::Milestone::Entered {
            replaced_in: Some(took),
            ..
        } => milestones(DemoEvent::Replaced { took: *took }),
        outlive::Milestone::LaunchFailed { .. } => milestones(DemoEvent::LaunchFailed),
        _ => {}
    });
    let on_task = move |e: BankEvent| on_event(DemoEvent::Task(e));

    let result = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, progress, on_task) = (&task, &progress, &on_task);
            async move { task.run(&page, Some(&ctx), progress, on_task).await }
        },
        options,
    )
    .await;

    let event = event
        .lock()
        .expect("event slot")
        .clone()
        .expect("outlive emits one event per run");
    let totps_accepted = bank.counters().totps_accepted;
    let gateway_after = gw.shutdown().await.map_err(DemoError::Gateway)?;
    let _ = bank.shutdown().await;
    match result {
        Ok(_) => Ok(DemoReport {
            event,
            polls: progress.polls_done(),
            sign_ins: progress.sign_ins(),
            totps_accepted,
            gateway_after,
        }),
        Err(_) => Err(DemoError::Run {
            event: Box::new(event),
        }),
    }
}
