//! `outlive bench --tabs-only`: what a checkpoint of the whole browser costs a program with
//! three tabs on three origins, each holding 1 MiB of unchanged localStorage, against one
//! such tab. The program is chromiumoxide connected to `serve_task`'s endpoint, as a program
//! under `outlive run` connects; it asks for each checkpoint through the control URL. The
//! cost is the capture's own time (`Milestone::Checkpointed`). Arms alternate, several rounds.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use outlive::chromiumoxide::Browser;
use outlive::chromiumoxide::handler::HandlerConfig;
use outlive::{Endpoints, Milestone, Options};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{create_out, write_json, write_text};
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use crate::sync::lock;
use outlive_bed::bed::{TestBed, until_killed};

/// 16 localStorage items of 64 Ki characters: 1 MiB.
const SEED_LOCAL_1MIB: &str = "(() => { for (let i = 0; i < 16; i++) localStorage.setItem('blob' + i, String(i % 10).repeat(65536)); return true; })()";

/// The RTTs the gateway adds.
const RTTS: [Duration; 2] = [Duration::ZERO, Duration::from_millis(20)];

/// One arm's checkpoints in one round.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TabsRun {
    /// Round (arms alternate which goes first).
    pub round: u32,
    /// The program's tabs, each on its own origin.
    pub tabs: usize,
    /// The RTT the gateway adds, ms.
    pub added_rtt_ms: f64,
    /// Each unchanged checkpoint's capture time, ms (the first, full one left out).
    pub checkpoints_ms: Vec<f64>,
    /// The last checkpoint's size, bytes.
    pub bytes: usize,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TabsReport {
    /// Unchanged checkpoints per run.
    pub samples: u32,
    /// Every arm's run.
    pub runs: Vec<TabsRun>,
}

fn bench_error(what: impl std::fmt::Display) -> Error {
    Error::with(ErrorKind::Bench, what.to_string())
}

/// Runs `rounds` of both arms at each RTT; writes `tabs.json` and `tabs-summary.txt` under
/// `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when an arm fails or a server does not start.
pub async fn run(rounds: u32, samples: u32, out: &std::path::Path) -> Result<TabsReport, Error> {
    create_out(out)?;
    let mut sites = Vec::new();
    for _ in 0..3 {
        let bank = aurora::spawn(aurora::Config::new())
            .await
            .map_err(bench_error)?;
        sites.push(bank);
    }
    let urls: Vec<String> = sites
        .iter()
        .map(|s| format!("{}/login", s.base_url()))
        .collect();
    let mut runs = Vec::new();
    for rtt in RTTS {
        let bed = TestBed::start(until_killed(rtt)).await?;
        for round in 0..rounds {
            let arms = if round % 2 == 0 { [1, 3] } else { [3, 1] };
            for tabs in arms {
                let (checkpoints_ms, bytes) = arm(&bed, &urls[..tabs], samples).await?;
                let run = TabsRun {
                    round,
                    tabs,
                    added_rtt_ms: rtt.as_secs_f64() * 1000.0,
                    checkpoints_ms,
                    bytes,
                };
                println!(
                    "  rtt +{:.0} ms, round {round}, {tabs} tab(s): median {:.2} ms, {} bytes",
                    run.added_rtt_ms,
                    median(&run.checkpoints_ms),
                    run.bytes
                );
                runs.push(run);
            }
        }
        bed.shutdown().await?;
    }
    for site in sites {
        site.shutdown().await.map_err(bench_error)?;
    }
    let report = TabsReport { samples, runs };
    write_json(out, "tabs.json", &report)?;
    write_text(out, "tabs-summary.txt", &summary(&report))?;
    Ok(report)
}

/// One run: a program opens a tab at each of `urls`, fills its localStorage, then asks for
/// `samples` + 1 checkpoints. The capture times of all but the first, and the last's size.
async fn arm(bed: &TestBed, urls: &[String], samples: u32) -> Result<(Vec<f64>, usize), Error> {
    let costs = Arc::new(Mutex::new(Vec::new()));
    let sink = costs.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .on_milestone(move |m| {
            if let Milestone::Checkpointed { took, bytes } = m {
                let ms = took.as_secs_f64() * 1000.0;
                lock(&sink).push((ms, *bytes));
            }
        });
    let endpoints = OnceLock::new();
    let ready = |e: &Endpoints| {
        let _ = endpoints.set(e.clone());
    };
    let provider = bed.provider();
    let task = |_| {
        let (endpoints, costs) = (&endpoints, &costs);
        async move {
            let e: &Endpoints = endpoints.get().ok_or("no endpoints")?;
            program(e, urls, samples, costs).await
        }
    };
    outlive::serve_task(&provider, options, ready, task)
        .await
        .map_err(|e| bench_error(format!("the {}-tab arm failed: {e}", urls.len())))?;
    let costs = lock(&costs).clone();
    let measured = costs.get(1..).unwrap_or_default();
    let bytes = measured.last().map_or(0, |c| c.1);
    Ok((measured.iter().map(|c| c.0).collect(), bytes))
}

type Costs = Arc<Mutex<Vec<(f64, usize)>>>;

/// The program: its tabs, their storage, then the checkpoints it asks for.
async fn program(
    e: &Endpoints,
    urls: &[String],
    samples: u32,
    costs: &Costs,
) -> Result<(), String> {
    let (browser, mut handler) = Browser::connect_with_config(&e.cdp_url, HandlerConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
    let result = async {
        let mut pages = Vec::new();
        for url in urls {
            let page = browser
                .new_page(url.as_str())
                .await
                .map_err(|e| e.to_string())?;
            let _: bool = page
                .evaluate_expression(SEED_LOCAL_1MIB)
                .await
                .and_then(|r| r.into_value().map_err(Into::into))
                .map_err(|e| e.to_string())?;
            pages.push(page);
        }
        for n in 0..=samples {
            checkpoint(&e.control_url).await?;
            let got = lock(costs).len();
            if got != n as usize + 1 {
                return Err(format!("checkpoint {n} was not taken ({got} so far)"));
            }
        }
        Ok(())
    }
    .await;
    pump.abort();
    result
}

/// `POST <control>/checkpoint`, answered once the capture is done.
async fn checkpoint(control_url: &str) -> Result<(), String> {
    let rest = control_url
        .strip_prefix("http://")
        .ok_or("the control URL is not http")?;
    let (host, token) = rest.split_once('/').ok_or("the control URL has no token")?;
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!(
        "POST /{token}/checkpoint HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    if !answer.starts_with("HTTP/1.1 200") || !answer.contains("\"checkpointed\":true") {
        return Err(format!("the checkpoint was refused: {answer}"));
    }
    Ok(())
}

/// Per RTT: each arm's median per round, and the ratio of the medians over all rounds.
pub fn summary(r: &TabsReport) -> String {
    let mut out = format!(
        "{} unchanged checkpoints per arm and round; 1 MiB of localStorage per tab, each tab on its own origin\n",
        r.samples
    );
    for rtt in RTTS {
        let rtt_ms = rtt.as_secs_f64() * 1000.0;
        let of = |tabs: usize| -> Vec<f64> {
            r.runs
                .iter()
                .filter(|x| x.tabs == tabs && x.added_rtt_ms == rtt_ms)
                .map(|x| median(&x.checkpoints_ms))
                .collect()
        };
        let (one, three) = (of(1), of(3));
        let ratio = median(&three) / median(&one);
        out.push_str(&format!(
            "rtt +{rtt_ms:.0} ms: one tab {one:.2?} ms, three tabs {three:.2?} ms; ratio of medians {ratio:.2}\n"
        ));
    }
    out
}
