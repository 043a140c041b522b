//! `outlive`: the command. Parses arguments with clap and calls `outlive_cli`: `demo`, `probe`
//! and `gateway` are the product; `bench` and `soak` are the lab (`outlive_cli::lab`).

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use outlive_cli::demo::{self, DemoConfig, DemoEvent};
use outlive_cli::lab::{bench, soak, timeline};
use outlive_cli::probe::{self, ProbeConfig};
use outlive_cli::setup::{self, ChromiumSetup};

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
        /// Page chaos: crash (`crash`) or close (`close`) every page of each session, once,
        /// `--page-fault-after` its creation; the browser lives on.
        #[arg(long, requires = "page_fault_after")]
        page_fault: Option<gateway::PageFault>,
        /// When the page fault strikes (must be shorter than the lifetime).
        #[arg(long, value_parser = humantime::parse_duration, requires = "page_fault")]
        page_fault_after: Option<Duration>,
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
            let config = bench::SurvivalConfig {
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
            page_fault,
            page_fault_after,
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
            let config = match (page_fault, page_fault_after) {
                (Some(fault), Some(after)) => config.page_fault(fault, after),
                _ => config,
            };
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
    if let ChromiumSetup::Installed(path) = setup::ensure_chromium()? {
        eprintln!("installed Chromium at {}", path.display());
    }
    if !json {
        println!("{}", demo::intro(&config));
    }
    let console = demo::Console::new();
    let show = move |e: DemoEvent| {
        if !json {
            console.show(e);
        }
    };
    match demo::run(&config, show).await {
        Ok(report) if json => println!("{}", report.event.to_json()),
        Ok(report) => println!("{}", demo::outro(&report)),
        Err(e) => {
            let Some(event) = e.event() else {
                return Err(e.into());
            };
            println!("{}", event.to_json());
            anyhow::bail!("the demo run did not complete: {}", event.outcome.as_str())
        }
    }
    Ok(())
}

async fn run_bench(
    config: bench::SurvivalConfig,
    out: std::path::PathBuf,
    survival: bool,
    micro: bool,
    samples: u32,
    kills: u32,
) -> anyhow::Result<()> {
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
        let report = bench::survival(&config, |r| println!("  {r}")).await?;
        write("survival.json", &serde_json::to_string_pretty(&report)?)?;
        write(
            "timeline.svg",
            &timeline::render(&bench::timeline_runs(&report)),
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
    // Without a provider, probe an embedded gateway (which needs Chromium).
    let embedded = match base_url {
        Some(_) => None,
        None => {
            setup::ensure_chromium()?;
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
    let samples = probe::probe(&config, |s| println!("  {s}")).await?;
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
    setup::ensure_chromium()?;
    let config = soak::SoakConfig {
        runs,
        concurrency,
        lifetime,
        ..soak::SoakConfig::default()
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
    println!("{}", report.summary());
    println!("wrote {}", path.display());
    Ok(())
}
