//! `outlive demo`: the bank task through outlive, on an embedded gateway whose sessions die
//! on schedule, against an embedded Aurora Bank — everything on 127.0.0.1.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use gateway::DeathMode;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use outlive::{Options, WideEvent};

use outlive_bed::bank::{BankEvent, BankProgress};
use outlive_bed::bed::{TestBed, dying};
use outlive_bed::setup::{self, ChromiumSetup};

use crate::error::Error;

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

/// `outlive demo`: checks for Chromium, then runs the demo with its intro, live console and
/// outro on stdout. With `json`, it prints only the wide event as JSON, also when the run did
/// not complete.
///
/// # Errors
///
/// What [`ensure_chromium`](outlive_bed::setup::ensure_chromium) and [`run`] report.
pub async fn run_in_terminal(config: &DemoConfig, json: bool) -> Result<DemoReport, Error> {
    if let ChromiumSetup::Installed(path) = setup::ensure_chromium()? {
        eprintln!("installed Chromium at {}", path.display());
    }
    if !json {
        println!("{}", intro(config));
    }
    let console = Console::new();
    let show = move |e: DemoEvent| {
        if !json {
            console.show(e);
        }
    };
    match run(config, show).await {
        Ok(report) => {
            if json {
                println!("{}", report.event.to_json());
            } else {
                println!("{}", outro(&report));
            }
            Ok(report)
        }
        Err(e) => {
            if let Some(event) = e.event() {
                println!("{}", event.to_json());
            }
            Err(e)
        }
    }
}

/// Runs the demo; `on_event` sees every step as it happens.
///
/// # Errors
///
/// [`ErrorKind::Bed`](crate::ErrorKind::Bed) if the test bed does not start, and
/// [`ErrorKind::Run`](crate::ErrorKind::Run) (with the run's
/// wide event) if the task failed or outlive gave up.
pub async fn run(
    config: &DemoConfig,
    on_event: impl Fn(DemoEvent) + Send + Sync + 'static,
) -> Result<DemoReport, Error> {
    let bed =
        TestBed::start(dying(config.lifetime, config.jitter, config.death).doa(config.doa)).await?;
    let provider = bed.provider();

    let (polls, every) = plan(config);
    let mut task = bed.task(polls, every);
    // Each poll saved with its checkpoint: a death redoes only what came after the last.
    task.durable_progress = true;
    let progress = BankProgress::default();
    let lifetimes = (config.task.as_secs_f64() / config.lifetime.as_secs_f64()).ceil() as u32;
    let options = Options::new()
        .checkpoint_every(config.checkpoint_every)
        .max_relaunches(lifetimes * 2 + 5)
        .relaunch_backoff(Duration::from_millis(500));
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

    let outlive::Reported { result, event } = task
        .outlive_watched(&provider, &progress, &on_task, options)
        .await;

    let totps_accepted = bed.bank().counters().totps_accepted;
    let gateway_after = bed.shutdown().await?;
    match result {
        Ok(_) => Ok(DemoReport {
            event,
            polls: progress.polls_done(),
            sign_ins: progress.sign_ins(),
            totps_accepted,
            gateway_after,
        }),
        Err(_) => Err(Error::run(event)),
    }
}

/// Shows the demo's events on stdout as they happen: a progress bar for the polls on a
/// terminal, plain lines otherwise.
pub struct Console {
    bar: ProgressBar,
    tty: bool,
}

impl Default for Console {
    fn default() -> Self {
        Console::new()
    }
}

impl Console {
    /// A console on stdout.
    pub fn new() -> Self {
        let tty = std::io::stdout().is_terminal();
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(
            ProgressStyle::with_template("  [{bar:40}] {pos}/{len} polls")
                .expect("a valid template")
                .progress_chars("█·"),
        );
        Console { bar, tty }
    }

    /// A line of text, above the progress bar if one is drawn.
    fn line(&self, text: &str) {
        if self.tty && !self.bar.is_finished() {
            self.bar.println(text);
        } else {
            println!("{text}");
        }
    }

    /// Shows one event.
    pub fn show(&self, event: DemoEvent) {
        match event {
            DemoEvent::Task(BankEvent::Entered { attempt: 1, .. }) => {
                self.line("▶ entry 1 on a fresh browser");
            }
            DemoEvent::Task(BankEvent::Entered { attempt, resumed }) => {
                let how = if resumed {
                    "checkpoint restored"
                } else {
                    "no checkpoint yet"
                };
                self.line(&format!("  entry {attempt} ({how})"));
            }
            DemoEvent::Task(BankEvent::SignedIn) => {
                self.line("  signed in with password + TOTP; checkpointed");
            }
            DemoEvent::Task(BankEvent::Polled { done, of }) => self.polled(done, of),
            DemoEvent::Died { cause, lost_work } => {
                let what = if cause.is_page() {
                    "page failed"
                } else {
                    "browser died"
                };
                self.line(&format!(
                    "✖ {what} ({}); {:.1} s of work since the last checkpoint lost",
                    death_wording(cause),
                    lost_work.as_secs_f64()
                ));
            }
            DemoEvent::Replaced { took } => self.line(&format!(
                "↻ replacement browser ready and restored in {} ms",
                took.as_millis()
            )),
            DemoEvent::LaunchFailed => {
                self.line("  a launch failed (dead on arrival?); retrying after the backoff");
            }
        }
    }

    /// Moves the bar on a terminal; a plain line every tenth of the task otherwise.
    fn polled(&self, done: u32, of: u32) {
        if self.tty {
            self.bar.set_length(u64::from(of));
            self.bar.set_position(u64::from(done));
            if done == of {
                self.bar.finish();
            }
        } else if done == of || done % of.div_ceil(10).max(1) == 0 {
            println!("  {done}/{of} polls");
        }
    }
}

/// How a death cause reads to people.
fn death_wording(cause: outlive::DeathCause) -> &'static str {
    use outlive::DeathCause;
    match cause {
        DeathCause::Closed => "close frame",
        DeathCause::Reset => "connection reset",
        DeathCause::Silence => "silent connection: no heartbeat answer",
        DeathCause::ProcessExit => "browser process exited",
        DeathCause::ProbeFailed => "no answer to a probe",
        DeathCause::PageCrashed => "renderer crashed",
        DeathCause::PageClosed => "page target closed",
        DeathCause::PageHung => "page stopped answering",
        _ => cause.as_str(),
    }
}

/// A death mode in words.
fn how_they_die(mode: DeathMode) -> &'static str {
    match mode {
        DeathMode::Close => "by closing their connection",
        DeathMode::Reset => "by a connection reset",
        DeathMode::Silence => "by going silent",
        DeathMode::Mixed => "by a close, a reset or silence, at random",
        DeathMode::Cycle => "by a close, a reset and silence in turn",
    }
}

/// What the demo is about to do, for people.
pub fn intro(config: &DemoConfig) -> String {
    let (polls, every) = plan(config);
    format!(
        "Aurora Bank task: sign in (password + TOTP), then {polls} polls every {every:?}.\n\
         Browser sessions live {:?} (±{:?}), then die {}; outlive keeps the task going.\n",
        config.lifetime,
        config.jitter,
        how_they_die(config.death)
    )
}

/// What the demo did, for people: the counts and the pretty-printed wide event.
pub fn outro(report: &DemoReport) -> String {
    format!(
        "\nCompleted: {} polls, {} sign-in(s), {} TOTP accepted by the bank.\n\
         Gateway after the run: {} live sessions, {} Chromium processes.\n\
         \nwide event:\n{}",
        report.polls,
        report.sign_ins,
        report.totps_accepted,
        report.gateway_after.live_sessions,
        report.gateway_after.chromium_processes,
        serde_json::to_string_pretty(&report.event).expect("a wide event serialises")
    )
}
