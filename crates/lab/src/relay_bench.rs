//! `outlive-lab bench --relay-only`: what the library's relay costs on bulk traffic. The same
//! chromiumoxide takes 60 full-page screenshots connected straight to a gateway session, and
//! as a task under `outlive::outlive` (through the relay); arms alternate, several rounds.
//! Two pages: the bank's login page (a small PNG, the case) and a 1280 × 1600 canvas of
//! noise (a multi-MB reply each). Back-to-back login shots lock to the compositor's frames and
//! fall in two modes a frame apart, so the login page is also shot after random pauses.

use std::time::Duration;

use futures::StreamExt;
use outlive::chromiumoxide::cdp::browser_protocol::browser::GetVersionParams;
use outlive::chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use outlive::chromiumoxide::handler::HandlerConfig;
use outlive::chromiumoxide::page::ScreenshotParams;
use outlive::chromiumoxide::{Browser, Page};
use outlive::{Options, Provider};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;

use super::{create_out, write_json, write_text};
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use outlive_bed::bed::TestBed;

/// Screenshots per arm and page.
const SHOTS: u32 = 60;

/// A page of noise: every pixel random, so its PNG does not compress (about 8 MB of base64).
const NOISE: &str = "data:text/html,<body style=margin:0><canvas id=c width=1280 height=1600></canvas><script>const c=document.getElementById('c').getContext('2d');const d=c.createImageData(1280,1600);crypto.getRandomValues(new Uint8Array(d.data.buffer).subarray(0,65536));for(let i=0;i<d.data.length;i+=65536)crypto.getRandomValues(d.data.subarray(i,i+65536));for(let i=3;i<d.data.length;i+=4)d.data[i]=255;c.putImageData(d,0,0)</script>";

/// The longest random pause before a paced shot: a compositor frame and a bit.
const PACE_MS: u64 = 20;

/// `Browser.getVersion` calls per arm and round: what the relay adds to a small command.
const ROUND_TRIPS: u32 = 600;

/// One arm's screenshots of one page.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShotRun {
    /// Round (arms alternate which goes first).
    pub round: u32,
    /// `direct` or `outlive`.
    pub arm: &'static str,
    /// `login`, `login-paced`, `noise` or `version` (round trips).
    pub page: &'static str,
    /// Every screenshot's (or round trip's) time, ms.
    pub shots_ms: Vec<f64>,
    /// The size of the last screenshot's PNG, bytes.
    pub png_bytes: usize,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelayReport {
    /// Every arm's run.
    pub runs: Vec<ShotRun>,
}

fn bench_error(what: impl std::fmt::Display) -> Error {
    Error::with(ErrorKind::Bench, what.to_string())
}

/// Runs the benchmark for `rounds`; writes `relay.json` and `relay-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when an arm fails or the bed does not start.
pub async fn run(rounds: u32, out: &std::path::Path) -> Result<RelayReport, Error> {
    create_out(out)?;
    let bed = TestBed::start(outlive_bed::bed::until_killed(Duration::ZERO)).await?;
    let login = format!("{}/login", bed.bank().base_url());
    let mut runs = Vec::new();
    for round in 0..rounds {
        for (page, work) in [
            ("login", Work::shots(&login, None)),
            ("login-paced", Work::shots(&login, Some(u64::from(round)))),
            ("noise", Work::shots(NOISE, None)),
            ("version", Work::RoundTrips),
        ] {
            let arms = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for through_outlive in arms {
                let (shots_ms, png_bytes) = if through_outlive {
                    outlive_arm(&bed, &work).await?
                } else {
                    direct_arm(&bed, &work).await?
                };
                let run = ShotRun {
                    round,
                    arm: if through_outlive { "outlive" } else { "direct" },
                    page,
                    shots_ms,
                    png_bytes,
                };
                eprintln!(
                    "  round {round} {:<7} {page:<11} median {:>6.1} ms ({} bytes)",
                    run.arm,
                    median(&run.shots_ms),
                    run.png_bytes
                );
                runs.push(run);
            }
        }
    }
    bed.shutdown().await?;
    let report = RelayReport { runs };
    write_json(out, "relay.json", &report)?;
    write_text(out, "relay-summary.txt", &summary(&report))?;
    Ok(report)
}

/// What an arm times.
#[derive(Clone)]
enum Work {
    /// Full-page screenshots of the page at `url`; with a seed, each after a random pause
    /// (the same pauses in both arms of a round).
    Shots { url: String, pace: Option<u64> },
    /// `Browser.getVersion` calls.
    RoundTrips,
}

impl Work {
    fn shots(url: &str, pace: Option<u64>) -> Work {
        Work::Shots {
            url: url.to_owned(),
            pace,
        }
    }
}

/// Does `work` on `page`; each step's time, and the last screenshot's size (0 without one).
async fn shoot(page: &Page, work: &Work) -> Result<(Vec<f64>, usize), String> {
    let mut times = Vec::new();
    let Work::Shots { url, pace } = work else {
        for _ in 0..ROUND_TRIPS {
            let started = Instant::now();
            page.execute(GetVersionParams::default())
                .await
                .map_err(|e| e.to_string())?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        return Ok((times, 0));
    };
    let viewport = SetDeviceMetricsOverrideParams::new(1280, 800, 1.0, false);
    page.execute(viewport).await.map_err(|e| e.to_string())?;
    page.goto(url.as_str()).await.map_err(|e| e.to_string())?;
    let mut size = 0;
    let mut pauses = pace.map(rand::rngs::StdRng::seed_from_u64);
    for _ in 0..SHOTS {
        if let Some(rng) = pauses.as_mut() {
            let pause = Duration::from_micros(rng.random_range(0..PACE_MS * 1000));
            tokio::time::sleep(pause).await;
        }
        let started = Instant::now();
        let png = page
            .screenshot(ScreenshotParams::builder().full_page(true).build())
            .await
            .map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        size = png.len();
    }
    Ok((times, size))
}

async fn direct_arm(bed: &TestBed, work: &Work) -> Result<(Vec<f64>, usize), Error> {
    let session = bed.provider().launch().await.map_err(bench_error)?;
    let result = async {
        let (browser, mut handler) =
            Browser::connect_with_config(session.endpoint().expose(), HandlerConfig::default())
                .await
                .map_err(|e| e.to_string())?;
        let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
        let page = browser
            .new_page("about:blank")
            .await
            .map_err(|e| e.to_string());
        let shots = match page {
            Ok(page) => shoot(&page, work).await,
            Err(e) => Err(e),
        };
        pump.abort();
        shots
    }
    .await;
    let _ = session.release().await;
    result.map_err(|e| bench_error(format!("the direct arm failed: {e}")))
}

async fn outlive_arm(bed: &TestBed, work: &Work) -> Result<(Vec<f64>, usize), Error> {
    let provider = bed.provider();
    // No periodic checkpoint lands among the screenshots: the relay alone is measured.
    let options = Options::new().checkpoint_every(Duration::from_secs(3600));
    let work = work.clone();
    outlive::outlive(
        &provider,
        |page, _ctx| {
            let work = work.clone();
            async move { shoot(&page, &work).await }
        },
        options,
    )
    .await
    .map_err(|e| bench_error(format!("the outlive arm failed: {e}")))
}

/// Per page: each arm's median per round; the paired ratio of each round (its arms ran back
/// to back) and their median; and the ratio of each arm's median over all its shots. The
/// ratio of the round medians' medians would mix rounds, and the machine drifts between them.
pub fn summary(r: &RelayReport) -> String {
    let mut out = format!("{SHOTS} full-page screenshots per arm, page and round\n");
    for page in ["login", "login-paced", "noise", "version"] {
        let runs = |arm: &str| -> Vec<&ShotRun> {
            r.runs
                .iter()
                .filter(|x| x.page == page && x.arm == arm)
                .collect()
        };
        let (direct, outlive) = (runs("direct"), runs("outlive"));
        let medians =
            |runs: &[&ShotRun]| -> Vec<f64> { runs.iter().map(|x| median(&x.shots_ms)).collect() };
        let (direct_m, outlive_m) = (medians(&direct), medians(&outlive));
        let paired: Vec<f64> = direct
            .iter()
            .filter_map(|d| {
                let o = outlive.iter().find(|o| o.round == d.round)?;
                Some(median(&o.shots_ms) / median(&d.shots_ms))
            })
            .collect();
        let pooled = |runs: &[&ShotRun]| -> f64 {
            let all: Vec<f64> = runs
                .iter()
                .flat_map(|x| x.shots_ms.iter().copied())
                .collect();
            median(&all)
        };
        let (direct_all, outlive_all) = (pooled(&direct), pooled(&outlive));
        let bytes = r
            .runs
            .iter()
            .find(|x| x.page == page)
            .map_or(0, |x| x.png_bytes);
        let what = if page == "version" {
            format!("{ROUND_TRIPS} Browser.getVersion calls")
        } else {
            format!("{bytes} bytes of PNG")
        };
        out.push_str(&format!(
            "{page} ({what}): direct {direct_m:.1?} ms, outlive {outlive_m:.1?} ms\n  \
             outlive/direct per round {paired:.3?}, median {:.3}\n  \
             all shots: direct median {direct_all:.1} ms, outlive {outlive_all:.1} ms, ratio {:.3}\n",
            median(&paired),
            outlive_all / direct_all,
        ));
    }
    out
}
