//! `outlive`: demo, gateway.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use outlive_cli::bank::BankEvent;
use outlive_cli::demo::{self, DemoConfig, DemoEvent};

#[derive(Parser)]
#[command(
    name = "outlive",
    version,
    about = "Make a browser task outlive its browser"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Aurora Bank task through outlive on an embedded gateway whose sessions die.
    Demo {
        /// Lifetime of each browser session.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// How long the task's polling takes without deaths.
        #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
        task: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "mixed")]
        death: gateway::DeathMode,
        /// Probability that a new browser is dead on arrival.
        #[arg(long, default_value_t = 0.0)]
        doa: f64,
        /// Print only the wide event, as JSON, as the last line.
        #[arg(long)]
        json: bool,
    },
    /// The survival benchmark (baseline against outlive) and the micro-measurements; writes
    /// raw JSON and a summary under --out.
    Bench {
        /// Tasks per arm.
        #[arg(long, default_value_t = 5)]
        tasks: u32,
        /// Session lifetime (tasks need 1.2 lifetimes of polling).
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "close")]
        death: gateway::DeathMode,
        /// Where the raw data and the summary go.
        #[arg(long, default_value = "docs/measurements")]
        out: std::path::PathBuf,
        /// Skip the survival benchmark.
        #[arg(long)]
        micro_only: bool,
        /// Skip the micro-measurements.
        #[arg(long)]
        survival_only: bool,
        /// Checkpoints per RTT setting.
        #[arg(long, default_value_t = 20)]
        samples: u32,
        /// Kills per death mode for the detection latency.
        #[arg(long, default_value_t = 5)]
        kills: u32,
    },
    /// Measure how long a provider's sessions really live: create, hold idle, note when the
    /// connection dies, repeat. Without --base-url, probes an embedded gateway.
    Probe {
        /// A Solari-compatible API base URL (e.g. `https://api.solari.example`).
        #[arg(long, requires = "api_key")]
        base_url: Option<String>,
        /// The API key (or set SOLARI_API_KEY).
        #[arg(long, env = "SOLARI_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// Sessions to hold, one after another.
        #[arg(long, default_value_t = 3)]
        sessions: u32,
        /// Give up waiting for a death after this long.
        #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
        max_hold: Duration,
        /// CDP heartbeat interval (a heartbeat unanswered for this long is a silent death).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        heartbeat: Duration,
        /// Lifetime of the embedded gateway's sessions (without --base-url).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
    },
    /// Many short runs with random deaths of every mode, then a leak audit (sessions,
    /// processes, temp profiles, file descriptors, memory); writes docs/measurements/soak.json.
    Soak {
        /// Runs in total.
        #[arg(long, default_value_t = 200)]
        runs: u32,
        /// Runs at once.
        #[arg(long, default_value_t = 2)]
        concurrency: u32,
        /// Session lifetime (deaths at lifetime ± lifetime/2).
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// Where soak.json goes.
        #[arg(long, default_value = "docs/measurements")]
        out: std::path::PathBuf,
    },
    /// Run a Solari-compatible gateway whose sessions die on schedule, until Ctrl-C.
    Gateway {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: std::net::SocketAddr,
        /// The API key clients must send.
        #[arg(long, default_value = "test-key")]
        api_key: String,
        /// Lifetime of each session.
        #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
        lifetime: Duration,
        /// ± jitter on the lifetime.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        jitter: Duration,
        /// How sessions die: close, reset, silence or mixed.
        #[arg(long, default_value = "close")]
        death: gateway::DeathMode,
        /// Probability that a new browser is dead on arrival.
        #[arg(long, default_value_t = 0.0)]
        doa: f64,
        /// Answer `ended` for dead sessions instead of `active`.
        #[arg(long)]
        honest: bool,
        /// Added round-trip time per CDP message.
        #[arg(long, default_value = "0ms", value_parser = humantime::parse_duration)]
        rtt: Duration,
        /// Concurrent sessions allowed.
        #[arg(long, default_value_t = 2)]
        max_sessions: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        if !matches!(cli.command, Command::Gateway { .. }) {
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .init();
        }
    }
    match cli.command {
        Command::Demo {
            lifetime,
            task,
            death,
            doa,
            json,
        } => {
            run_demo(
                DemoConfig {
                    lifetime,
                    task,
                    death,
                    doa,
                    ..DemoConfig::default()
                },
                json,
            )
            .await
        }
        Command::Bench {
            tasks,
            lifetime,
            death,
            out,
            micro_only,
            survival_only,
            samples,
            kills,
        } => {
            let config = outlive_cli::bench::SurvivalConfig {
                tasks,
                lifetime,
                death,
                checkpoint_every: lifetime / 20,
                ..Default::default()
            };
            run_bench(config, out, !micro_only, !survival_only, samples, kills).await
        }
        Command::Soak {
            runs,
            concurrency,
            lifetime,
            out,
        } => run_soak(runs, concurrency, lifetime, out).await,
        Command::Probe {
            base_url,
            api_key,
            sessions,
            max_hold,
            heartbeat,
            lifetime,
        } => run_probe(base_url, api_key, sessions, max_hold, heartbeat, lifetime).await,
        Command::Gateway {
            listen,
            api_key,
            lifetime,
            jitter,
            death,
            doa,
            honest,
            rtt,
            max_sessions,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info".into()),
                )
                .init();
            let config = gateway::Config::new()
                .api_key(api_key)
                .lifetime(lifetime)
                .jitter(jitter)
                .death(death)
                .doa(doa)
                .honest(honest)
                .rtt(rtt)
                .max_sessions(max_sessions);
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("could not listen on {listen}"))?;
            println!("gateway listening on http://{}", listener.local_addr()?);
            gateway::serve(listener, config, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the gateway failed")?;
            Ok(())
        }
    }
}

async fn run_demo(config: DemoConfig, json: bool) -> anyhow::Result<()> {
    if let outlive_cli::setup::ChromiumSetup::Installed(path) =
        outlive_cli::setup::ensure_chromium()?
    {
        eprintln!("installed Chromium at {}", path.display());
    }
    let (polls, every) = demo::plan(&config);
    if !json {
        println!(
            "Aurora Bank task: sign in (password + TOTP), then {polls} polls every {every:?}.\n\
             Browser sessions live {:?} (±{:?}) and die by {}; outlive keeps the task going.\n",
            config.lifetime, config.jitter, config.death
        );
    }
    let render = move |e: DemoEvent| {
        if json {
            return;
        }
        let mut out = std::io::stdout().lock();
        match e {
            DemoEvent::Task(BankEvent::Entered { attempt: 1, .. }) => {
                let _ = writeln!(out, "▶ entry 1 on a fresh browser");
            }
            DemoEvent::Task(BankEvent::Entered { attempt, resumed }) => {
                let how = if resumed {
                    "checkpoint restored"
                } else {
                    "no checkpoint yet"
                };
                let _ = writeln!(out, "  entry {attempt} ({how})");
            }
            DemoEvent::Task(BankEvent::SignedIn) => {
                let _ = writeln!(out, "  signed in with password + TOTP; checkpointed");
            }
            DemoEvent::Task(BankEvent::Polled { done, of }) => {
                let width = 40;
                let filled = (done as usize * width) / of.max(1) as usize;
                let _ = write!(
                    out,
                    "\r  [{}{}] {done}/{of} polls",
                    "█".repeat(filled),
                    "·".repeat(width - filled)
                );
                if done == of {
                    let _ = writeln!(out);
                }
            }
            DemoEvent::Died { cause, lost_work } => {
                let how = match cause {
                    outlive::DeathCause::Closed => "close frame",
                    outlive::DeathCause::Reset => "connection reset",
                    outlive::DeathCause::Silence => "silent connection: no heartbeat answer",
                    outlive::DeathCause::ProcessExit => "browser process exited",
                    outlive::DeathCause::ProbeFailed => "no answer to a probe",
                    outlive::DeathCause::PageCrashed => "renderer crashed",
                    outlive::DeathCause::PageClosed => "page target closed",
                    outlive::DeathCause::PageHung => "page stopped answering",
                    _ => cause.as_str(),
                };
                let what = if cause.is_page() {
                    "page failed"
                } else {
                    "browser died"
                };
                let _ = writeln!(
                    out,
                    "\n✖ {what} ({how}); {:.1} s of work since the last checkpoint lost",
                    lost_work.as_secs_f64()
                );
            }
            DemoEvent::Replaced { took } => {
                let _ = writeln!(
                    out,
                    "↻ replacement browser ready and restored in {} ms",
                    took.as_millis()
                );
            }
            DemoEvent::LaunchFailed => {
                let _ = writeln!(
                    out,
                    "  a launch failed (dead on arrival?); retrying after the backoff"
                );
            }
        }
        let _ = out.flush();
    };
    match demo::run(&config, render).await {
        Ok(report) => {
            if json {
                println!("{}", report.event.to_json());
            } else {
                println!(
                    "\nCompleted: {} polls, {} sign-in(s), {} TOTP accepted by the bank.",
                    report.polls, report.sign_ins, report.totps_accepted
                );
                println!(
                    "Gateway after the run: {} live sessions, {} Chromium processes.",
                    report.gateway_after.live_sessions, report.gateway_after.chromium_processes
                );
                println!(
                    "\nwide event:\n{}",
                    serde_json::to_string_pretty(&report.event)?
                );
            }
            Ok(())
        }
        Err(demo::DemoError::Run { event }) => {
            println!("{}", event.to_json());
            anyhow::bail!("the demo run did not complete: {}", event.outcome.as_str())
        }
        Err(e) => Err(e.into()),
    }
}

async fn run_bench(
    config: outlive_cli::bench::SurvivalConfig,
    out: std::path::PathBuf,
    survival: bool,
    micro: bool,
    samples: u32,
    kills: u32,
) -> anyhow::Result<()> {
    use outlive_cli::bench;
    std::fs::create_dir_all(&out).with_context(|| format!("could not create {}", out.display()))?;
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let path = out.join(name);
        std::fs::write(&path, text)
            .with_context(|| format!("could not write {}", path.display()))?;
        println!("wrote {}", path.display());
        Ok(())
    };
    let survival_report = if survival {
        println!(
            "survival: {} tasks per arm, lifetime {:?}; this takes a few minutes",
            config.tasks, config.lifetime
        );
        let report = bench::survival(&config, |r| {
            println!(
                "  {:?} #{}: {} after {:.1} s, {} polls",
                r.arm,
                r.index,
                r.outcome,
                r.total_ms / 1000.0,
                r.polls_done
            )
        })
        .await?;
        write("survival.json", &serde_json::to_string_pretty(&report)?)?;
        write(
            "timeline.svg",
            &outlive_cli::timeline::render(&bench::timeline_runs(&report)),
        )?;
        Some(report)
    } else {
        None
    };
    let micro_report = if micro {
        println!(
            "micro: checkpoint cost at RTT 0/20/50 ms, detection latency per death mode, page recovery against a relaunch"
        );
        let report = bench::micro(samples, kills).await?;
        write("micro.json", &serde_json::to_string_pretty(&report)?)?;
        Some(report)
    } else {
        None
    };
    if let Some(s) = &survival_report {
        let text = bench::summary(s, micro_report.as_ref());
        println!("\n{text}");
        write("summary.txt", &text)?;
    } else if let Some(m) = &micro_report {
        let text = bench::micro_summary(m);
        println!("\n{text}");
        write("micro-summary.txt", &text)?;
    }
    Ok(())
}

async fn run_probe(
    base_url: Option<String>,
    api_key: Option<String>,
    sessions: u32,
    max_hold: Duration,
    heartbeat: Duration,
    lifetime: Duration,
) -> anyhow::Result<()> {
    use outlive_cli::probe::{self, ProbeConfig};
    // Without a provider, probe an embedded gateway (which needs Chromium).
    let embedded = match base_url {
        Some(_) => None,
        None => {
            outlive_cli::setup::ensure_chromium()?;
            Some(
                gateway::spawn(
                    gateway::Config::new()
                        .lifetime(lifetime)
                        .jitter(lifetime / 10),
                )
                .await
                .context("the embedded gateway did not start")?,
            )
        }
    };
    let (url, key) = match (&embedded, base_url, api_key) {
        (Some(gw), _, _) => (gw.base_url().to_owned(), gw.api_key().to_owned()),
        (None, Some(url), Some(key)) => (url, key),
        _ => anyhow::bail!("--base-url needs --api-key (or SOLARI_API_KEY)"),
    };
    let mut config = ProbeConfig::new(url, key);
    config.sessions = sessions;
    config.max_hold = max_hold;
    config.heartbeat = heartbeat;
    println!(
        "probing {} sessions, one after another (heartbeat {heartbeat:?})",
        sessions
    );
    let samples = probe::probe(&config, |s| {
        let lifetime = s.lifetime_ms.map_or("still alive".to_owned(), |ms| {
            format!("{:.1} s", ms as f64 / 1000.0)
        });
        let said = s.control_plane_said.as_deref().unwrap_or("?");
        println!(
            "  session {}: {lifetime}, {} (control plane said: {said})",
            s.session + 1,
            s.cause
        );
    })
    .await?;
    println!("{}", probe::summary(&samples));
    if let Some(gw) = embedded {
        gw.shutdown()
            .await
            .context("the embedded gateway did not stop cleanly")?;
    }
    Ok(())
}

async fn run_soak(
    runs: u32,
    concurrency: u32,
    lifetime: Duration,
    out: std::path::PathBuf,
) -> anyhow::Result<()> {
    use outlive_cli::soak::{self, SoakConfig};
    outlive_cli::setup::ensure_chromium()?;
    let config = SoakConfig {
        runs,
        concurrency,
        lifetime,
        ..SoakConfig::default()
    };
    println!(
        "soak: {runs} runs, {concurrency} at once, sessions live {lifetime:?} ± half, deaths of every mode"
    );
    let report = soak::soak(&config, |n, e| {
        if n % 10 == 0 || e.outcome != outlive::Outcome::Completed {
            println!(
                "  run {n}: {} ({} relaunches)",
                e.outcome.as_str(),
                e.relaunches
            );
        }
    })
    .await?;
    std::fs::create_dir_all(&out)?;
    let path = out.join("soak.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!(
        "completed {} · gave up {} · failed {} · relaunches {} · release failures {} · extra sign-ins {}",
        report.completed,
        report.gave_up,
        report.failed,
        report.relaunches,
        report.release_failed,
        report.extra_sign_ins
    );
    for (label, f) in [
        ("before", report.before),
        ("after 20 runs", report.after_20),
        ("end", report.end),
    ] {
        println!(
            "  {label:>14}: rss {} KiB, fds {}, chromium {}, temp profiles {}, /tmp singletons {}",
            f.rss_kib, f.fds, f.chromium_processes, f.temp_profiles, f.tmp_singletons
        );
    }
    println!("  sessions left on the gateway: {}", report.sessions_left);
    println!("wrote {}", path.display());
    Ok(())
}
