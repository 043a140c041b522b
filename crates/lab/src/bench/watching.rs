//! `outlive-lab bench --watching-only`: what metrics and traces cost (issue 49). Each arm is
//! a child process (`outlive-lab watching-arm`).
//! The off arm has no subscriber and no registry, like `outlive run` without flags.
//! The on arm records into a Prometheus registry and exports every
//! span through the CLI's own OTLP/HTTP exporter, to a sink in this process on 127.0.0.1.
//! Both arms do the same work under `outlive::outlive` on the bed. It is 600
//! `Browser.getVersion` round trips and 60 screenshots (the relay). Then 100 checkpoints of
//! the bank's login page, with a changed localStorage key each time. Arms alternate, by round.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outlive::Options;
use outlive::chromiumoxide::cdp::browser_protocol::browser::GetVersionParams;
use outlive::chromiumoxide::page::ScreenshotParams;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::{create_out, write_json, write_text};
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use outlive_bed::bed::TestBed;

/// The works, by name.
pub const WORKS: [&str; 3] = ["round-trips", "screenshots", "checkpoints"];

const ROUND_TRIPS: u32 = 600;
const SHOTS: u32 = 60;
const CHECKPOINTS: u32 = 100;

/// One arm's run of one work.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArmRun {
    /// Round (arms alternate which goes first).
    pub round: u32,
    /// `off` or `on`.
    pub arm: String,
    /// One of [`WORKS`].
    pub work: String,
    /// Every step's time, ms.
    pub steps_ms: Vec<f64>,
    /// OTLP requests the sink received during the arm (0 when off).
    pub otlp_requests: u64,
    /// Their bytes.
    pub otlp_bytes: u64,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchingReport {
    /// Every arm's run.
    pub runs: Vec<ArmRun>,
}

fn bench_error(what: impl std::fmt::Display) -> Error {
    Error::with(ErrorKind::Bench, what.to_string())
}

/// What the OTLP sink received.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// An OTLP/HTTP sink on 127.0.0.1: reads each request whole, answers 200 with no body.
async fn sink() -> Result<(String, Arc<Received>, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(bench_error)?;
    let url = format!("http://{}", listener.local_addr().map_err(bench_error)?);
    let received = Arc::new(Received::default());
    let counts = received.clone();
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let _ = answer(socket, &counts).await;
            });
        }
    });
    Ok((url, received, task))
}

async fn answer(socket: tokio::net::TcpStream, counts: &Received) -> std::io::Result<()> {
    let mut socket = BufReader::new(socket);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if socket.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        socket.read_exact(&mut body).await?;
        counts.requests.fetch_add(1, Ordering::Relaxed);
        counts.bytes.fetch_add(length as u64, Ordering::Relaxed);
        socket
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
            .await?;
    }
}

/// Runs `rounds` rounds of every work, both arms; writes `watching.json` and
/// `watching-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when an arm fails.
pub async fn run(rounds: u32, out: &std::path::Path) -> Result<WatchingReport, Error> {
    create_out(out)?;
    let (url, received, sink_task) = sink().await?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        for work in WORKS {
            let arms = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for on in arms {
                let (requests, bytes) = (
                    received.requests.load(Ordering::Relaxed),
                    received.bytes.load(Ordering::Relaxed),
                );
                let steps_ms = arm(work, on.then_some(url.as_str())).await?;
                let run = ArmRun {
                    round,
                    arm: if on { "on" } else { "off" }.to_owned(),
                    work: work.to_owned(),
                    steps_ms,
                    otlp_requests: received.requests.load(Ordering::Relaxed) - requests,
                    otlp_bytes: received.bytes.load(Ordering::Relaxed) - bytes,
                };
                eprintln!(
                    "  round {round} {:<3} {work:<11} median {:>7.2} ms; {} OTLP requests",
                    run.arm,
                    median(&run.steps_ms),
                    run.otlp_requests
                );
                runs.push(run);
            }
        }
    }
    sink_task.abort();
    let report = WatchingReport { runs };
    write_json(out, "watching.json", &report)?;
    write_text(out, "watching-summary.txt", &summary(&report))?;
    Ok(report)
}

/// One arm in a child process: its steps' times.
async fn arm(work: &str, otlp: Option<&str>) -> Result<Vec<f64>, Error> {
    let exe = std::env::current_exe().map_err(bench_error)?;
    let mut command = tokio::process::Command::new(exe);
    command
        .args(["watching-arm", "--work", work])
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    if let Some(url) = otlp {
        command.arg("--on").env("OTEL_EXPORTER_OTLP_ENDPOINT", url);
    }
    let output = command.output().await.map_err(bench_error)?;
    if !output.status.success() {
        return Err(bench_error(format!(
            "the {work} arm failed: {}",
            output.status
        )));
    }
    serde_json::from_slice(&output.stdout).map_err(bench_error)
}

/// The child: with `on`, traces to the endpoint in the environment and a metrics registry.
/// Prints its steps' times as JSON on stdout.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when the bed, the exporter or the work fails.
pub async fn child(work: &str, on: bool) -> Result<(), Error> {
    use tracing_subscriber::layer::SubscriberExt;
    let mut options = Options::new().checkpoint_every(Duration::from_secs(3600));
    let mut registry = outlive::prometheus_client::registry::Registry::default();
    let traces = if on {
        options = options.metrics(outlive::Metrics::register(&mut registry));
        let traces = outlive_cli::traces::Traces::from_env()
            .map_err(bench_error)?
            .ok_or_else(|| bench_error("no OTLP endpoint for the on arm"))?;
        let subscriber = tracing_subscriber::registry().with(traces.layer());
        tracing::subscriber::set_global_default(subscriber).map_err(bench_error)?;
        Some(traces)
    } else {
        None
    };
    let bed = TestBed::start(outlive_bed::bed::until_killed(Duration::ZERO)).await?;
    let login = format!("{}/login", bed.bank().base_url());
    let provider = bed.provider();
    let work = work.to_owned();
    let steps = outlive::outlive(
        &provider,
        |page, ctx| {
            let (work, login) = (work.clone(), login.clone());
            async move { steps(&work, &page, &ctx, &login).await }
        },
        options,
    )
    .await
    .map_err(|e| bench_error(format!("the arm's run failed: {e}")))?;
    drop(traces);
    bed.shutdown().await?;
    println!("{}", serde_json::to_string(&steps).map_err(bench_error)?);
    Ok(())
}

/// The work itself, timed step by step.
async fn steps(
    work: &str,
    page: &outlive::Page,
    ctx: &outlive::Ctx,
    login: &str,
) -> Result<Vec<f64>, String> {
    let mut times = Vec::new();
    let timed = |started: Instant| started.elapsed().as_secs_f64() * 1000.0;
    match work {
        "round-trips" => {
            for _ in 0..ROUND_TRIPS {
                let started = Instant::now();
                page.execute(GetVersionParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                times.push(timed(started));
            }
        }
        "screenshots" => {
            page.goto(login).await.map_err(|e| e.to_string())?;
            for _ in 0..SHOTS {
                let started = Instant::now();
                page.screenshot(ScreenshotParams::builder().full_page(true).build())
                    .await
                    .map_err(|e| e.to_string())?;
                times.push(timed(started));
            }
        }
        _ => {
            page.goto(login).await.map_err(|e| e.to_string())?;
            for n in 0..CHECKPOINTS {
                let change = format!("localStorage.setItem('step', '{n}')");
                page.evaluate(change).await.map_err(|e| e.to_string())?;
                let started = Instant::now();
                if !ctx.checkpoint().await {
                    return Err(format!("checkpoint {n} was not taken"));
                }
                times.push(timed(started));
            }
        }
    }
    Ok(times)
}

/// Per work: each round's paired on/off ratio of medians, their median, and the ratio of the
/// pooled medians.
pub fn summary(r: &WatchingReport) -> String {
    let mut out = String::from("metrics and traces on (OTLP to a local sink) against off\n");
    for work in WORKS {
        let runs = |arm: &str| -> Vec<&ArmRun> {
            r.runs
                .iter()
                .filter(|x| x.work == work && x.arm == arm)
                .collect()
        };
        let (off, on) = (runs("off"), runs("on"));
        let paired: Vec<f64> = off
            .iter()
            .filter_map(|o| {
                let n = on.iter().find(|n| n.round == o.round)?;
                Some(median(&n.steps_ms) / median(&o.steps_ms))
            })
            .collect();
        let pooled = |runs: &[&ArmRun]| -> f64 {
            let all: Vec<f64> = runs
                .iter()
                .flat_map(|x| x.steps_ms.iter().copied())
                .collect();
            median(&all)
        };
        let requests: u64 = on.iter().map(|x| x.otlp_requests).sum();
        let bytes: u64 = on.iter().map(|x| x.otlp_bytes).sum();
        out.push_str(&format!(
            "{work}: off median {:.2} ms, on {:.2} ms, ratio {:.3}; per round {paired:.3?}, \
             median {:.3}; on sent {requests} OTLP requests, {bytes} bytes\n",
            pooled(&off),
            pooled(&on),
            pooled(&on) / pooled(&off),
            median(&paired),
        ));
    }
    out
}
