//! `outlive-lab bench --forms-only` (issue 48): what typed fields cost. A page with 200
//! filled fields is set against the same page with text in their place, in one run:
//!
//! * **checkpoints** — of each page with nothing changed since the last one, arms
//!   alternating round by round;
//! * **restores** — a death (gateway kill, close) after a checkpoint on each page: the
//!   relaunch's launch, restore and navigation (the fields put back) timed apart, and the
//!   fields checked to be back. The back/forward list is cut to the page before, so that
//!   its rebuild does not weigh in.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway::DeathMode;
use outlive::chromiumoxide::cdp::browser_protocol::page::ResetNavigationHistoryParams;
use outlive::{Milestone, Options};
use serde::Serialize;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::micro::killable_bed;
use super::records::ms;
use crate::error::Error;
use crate::served::bench_error;
use crate::stats::median;
use crate::sync::lock;
use crate::{create_out, write_json, write_text};

/// Fields on the form page: text inputs, textareas, selects, checkboxes and numbers.
const FIELDS: usize = 200;
/// The two pages, in the order of the first round.
const ARMS: [&str; 2] = ["form", "plain"];
/// The longest the bench waits for any one step.
const STEP: Duration = Duration::from_secs(90);

/// One arm's figures.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FormsArm {
    /// "form" or "plain".
    pub arm: String,
    /// Each measured checkpoint's time, ms.
    pub checkpoints_ms: Vec<f64>,
    /// Each measured checkpoint's size, bytes.
    pub checkpoint_bytes: Vec<usize>,
    /// Each relaunch: (launch, restore, navigation) ms.
    pub relaunches_ms: Vec<(f64, f64, f64)>,
}

/// The report: both arms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FormsReport {
    /// The arms, form first.
    pub arms: Vec<FormsArm>,
}

/// The form page, or with `plain` the same page with a text in each field's place.
fn page(plain: bool) -> String {
    let mut body = String::from("<!doctype html><meta charset=utf-8><title>forms</title><form>");
    for i in 0..FIELDS {
        let field = match (plain, i % 10) {
            (true, _) => format!("<span>value {i}</span>"),
            (false, 0) => format!("<textarea name=t{i}></textarea>"),
            (false, 1) => format!(
                "<select name=s{i}><option>a</option><option>b</option><option>c</option></select>"
            ),
            (false, 2) => format!("<input type=checkbox name=c{i}>"),
            (false, 3) => format!("<input type=number name=n{i}>"),
            (false, _) => format!("<input name=f{i}>"),
        };
        body.push_str(&format!("<p><label>Field {i} {field}</label></p>"));
    }
    body.push_str("</form>");
    body
}

/// Fills every field, as typing would (native setter, then `input` and `change`).
const FILL: &str = "(() => { let n = 0; for (const el of document.querySelectorAll('input, textarea, select')) { \
    if (el.type === 'checkbox') el.checked = true; \
    else if (el.tagName === 'SELECT') el.value = 'c'; \
    else if (el.type === 'number') el.value = String(n); \
    else el.value = 'typed text ' + n; \
    el.dispatchEvent(new Event('input', { bubbles: true })); \
    el.dispatchEvent(new Event('change', { bubbles: true })); n++; } return n; })()";

/// How many fields hold what [`FILL`] typed.
const FILLED: &str = "(() => { let n = 0, ok = 0; for (const el of document.querySelectorAll('input, textarea, select')) { \
    const want = el.type === 'checkbox' ? el.checked : el.tagName === 'SELECT' ? el.value === 'c' \
      : el.type === 'number' ? el.value === String(n) : el.value === 'typed text ' + n; \
    if (want) ok++; n++; } return ok; })()";

/// Serves both pages on 127.0.0.1; answers the base URL and the server's task.
async fn serve_pages() -> Result<(String, tokio::task::JoinHandle<()>), Error> {
    let app = axum::Router::new()
        .route(
            "/form",
            axum::routing::get(|| async { axum::response::Html(page(false)) }),
        )
        .route(
            "/plain",
            axum::routing::get(|| async { axum::response::Html(page(true)) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(bench_error)?;
    let base = format!("http://{}", listener.local_addr().map_err(bench_error)?);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((base, task))
}

/// Runs both arms: `rounds` rounds of `samples` checkpoints each, then `deaths` deaths per arm.
///
/// # Errors
///
/// [`crate::error::ErrorKind::Bench`] when the bed, the task or a step fails.
pub async fn run(
    rounds: u32,
    samples: u32,
    deaths: u32,
    out: &std::path::Path,
) -> Result<FormsReport, Error> {
    create_out(out)?;
    let (base, server) = serve_pages().await?;
    let (bed, provider) = killable_bed().await?;
    let seen: Arc<Mutex<Vec<Milestone>>> = Arc::default();
    let sink = seen.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(2 * deaths + 2)
        .on_milestone(move |m| lock(&sink).push(m.clone()));
    let (ready_tx, ready_rx) = unbounded_channel();
    let arms: Arc<Mutex<Vec<FormsArm>>> = Arc::new(Mutex::new(
        ARMS.iter()
            .map(|a| FormsArm {
                arm: (*a).to_owned(),
                ..FormsArm::default()
            })
            .collect(),
    ));
    let plan = Plan {
        base,
        rounds,
        samples,
        deaths,
        ready: ready_tx,
        step: Arc::default(),
        seen: seen.clone(),
        arms: arms.clone(),
    };
    let run = outlive::outlive(&provider, |page, ctx| plan.entry(page, ctx), options);
    let bench = drive(&bed, &provider, &seen, &arms, ready_rx);
    let (ran, report) = futures::join!(run, bench);
    server.abort();
    report?;
    ran.map_err(|e| bench_error(format!("the forms task failed: {e}")))?;
    bed.shutdown().await?;
    let report = FormsReport {
        arms: lock(&arms).clone(),
    };
    write_json(out, "forms.json", &report)?;
    write_text(out, "forms-summary.txt", &summary(&report))?;
    Ok(report)
}

/// The task's plan, shared by its entries: `step` counts the steps begun over all of them.
struct Plan {
    base: String,
    rounds: u32,
    samples: u32,
    deaths: u32,
    ready: UnboundedSender<Ready>,
    step: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Milestone>>>,
    arms: Arc<Mutex<Vec<FormsArm>>>,
}

/// The arm of step `i`: arms alternate which goes first, round by round.
fn arm_of(i: usize) -> usize {
    (i / 2 + i % 2) % 2
}

impl Plan {
    /// One entry: after a death, the restored page is checked first; then the next steps.
    async fn entry(&self, page: outlive::Page, ctx: outlive::Ctx) -> Result<(), String> {
        if ctx.attempt() > 1 {
            let arm = arm_of(self.step.load(Ordering::SeqCst) - 1);
            let filled = eval(&page, FILLED).await?;
            let _ = self.ready.send(Ready::Restored { arm, filled });
        }
        let measures = 2 * self.rounds as usize;
        let total = measures + 2 * self.deaths as usize;
        loop {
            let i = self.step.fetch_add(1, Ordering::SeqCst);
            if i >= total {
                let _ = self.ready.send(Ready::Done);
                return Ok(());
            }
            let arm = arm_of(i);
            let url = format!("{}/{}", self.base, ARMS[arm]);
            page.goto(url).await.map_err(|e| format!("goto: {e}"))?;
            if arm == 0 {
                eval(&page, FILL).await?;
            }
            if i >= measures {
                // A one-entry back/forward list, so that the restore is the page's own: the
                // rounds before left up to 25 entries, each a stub load on restore.
                let reset = ResetNavigationHistoryParams::default();
                page.execute(reset)
                    .await
                    .map_err(|e| format!("reset: {e}"))?;
            }
            ctx.checkpoint().await; // the first after the fill: it holds the fields
            if i >= measures {
                let _ = self.ready.send(Ready::Kill);
                std::future::pending::<()>().await;
            }
            let from = lock(&self.seen).len();
            for _ in 0..self.samples {
                ctx.checkpoint().await;
            }
            let mut arms = lock(&self.arms);
            for m in &lock(&self.seen)[from..] {
                if let Milestone::Checkpointed { took, bytes } = m {
                    arms[arm].checkpoints_ms.push(ms(*took));
                    arms[arm].checkpoint_bytes.push(*bytes);
                }
            }
        }
    }
}

/// `js`'s value, a count.
async fn eval(page: &outlive::Page, js: &str) -> Result<u32, String> {
    let value = page
        .evaluate(js)
        .await
        .map_err(|e| format!("evaluate: {e}"))?;
    value.into_value().map_err(|e| format!("evaluate: {e}"))
}

/// What the task tells the bench.
enum Ready {
    /// Checkpointed on its arm's page, fields filled: kill the browser now.
    Kill,
    /// Entered again on the restored page of `arm`, which holds `filled` typed fields.
    Restored { arm: usize, filled: u32 },
    /// Every step is done.
    Done,
}

/// The task's next word, within [`STEP`].
async fn next(ready: &mut UnboundedReceiver<Ready>) -> Option<Ready> {
    tokio::time::timeout(STEP, ready.recv())
        .await
        .ok()
        .flatten()
}

/// Kills the browser whenever the task asks, and times each relaunch from the milestones.
async fn drive(
    bed: &outlive_bed::bed::TestBed,
    provider: &outlive_bed::bed::Recording<outlive::Solari>,
    seen: &Mutex<Vec<Milestone>>,
    arms: &Mutex<Vec<FormsArm>>,
    mut ready: UnboundedReceiver<Ready>,
) -> Result<(), Error> {
    loop {
        match next(&mut ready).await {
            Some(Ready::Kill) => {}
            Some(Ready::Done) => return Ok(()),
            Some(Ready::Restored { .. }) => {
                return Err(bench_error("the task entered again with no death"));
            }
            None => return Err(bench_error(format!("the task said nothing in {STEP:?}"))),
        }
        let from = lock(seen).len();
        let id = provider
            .newest_session_id()
            .ok_or_else(|| bench_error("no session to kill"))?;
        bed.gateway()
            .kill(&id, DeathMode::Close)
            .await
            .map_err(|e| bench_error(format!("kill: {e}")))?;
        let Some(Ready::Restored { arm, filled }) = next(&mut ready).await else {
            return Err(bench_error("the task did not enter again after a death"));
        };
        let want = if arm == 0 { FIELDS as u32 } else { 0 };
        if filled != want {
            return Err(bench_error(format!(
                "{} fields of {want} came back on the {} page",
                filled, ARMS[arm]
            )));
        }
        let (mut launch, mut restored) = (None, None);
        for m in &lock(seen)[from..] {
            match m {
                Milestone::Launched { took } => launch = Some(ms(*took)),
                Milestone::Restored { restore, navigate } => {
                    restored = Some((ms(*restore), ms(*navigate)));
                }
                _ => {}
            }
        }
        let (Some(launch), Some((restore, navigate))) = (launch, restored) else {
            return Err(bench_error("a relaunch without its launch or restore"));
        };
        lock(arms)[arm]
            .relaunches_ms
            .push((launch, restore, navigate));
    }
}

/// The summary: medians per arm, and form against plain.
pub fn summary(report: &FormsReport) -> String {
    let mut text = format!("{FIELDS} filled fields (form) against the same page without (plain)\n");
    let med = |arm: &FormsArm, f: &dyn Fn(&(f64, f64, f64)) -> f64| {
        median(&arm.relaunches_ms.iter().map(f).collect::<Vec<_>>())
    };
    for arm in &report.arms {
        let bytes: Vec<f64> = arm.checkpoint_bytes.iter().map(|b| *b as f64).collect();
        text.push_str(&format!(
            "{:5}: checkpoint median {:.2} ms (n = {}, {:.0} bytes); relaunch n = {}: launch {:.0} ms, restore {:.0} ms, navigation {:.0} ms\n",
            arm.arm,
            median(&arm.checkpoints_ms),
            arm.checkpoints_ms.len(),
            median(&bytes),
            arm.relaunches_ms.len(),
            med(arm, &|r| r.0),
            med(arm, &|r| r.1),
            med(arm, &|r| r.2),
        ));
    }
    if let [form, plain] = report.arms.as_slice() {
        text.push_str(&format!(
            "checkpoint form / plain: {:.3}\n",
            median(&form.checkpoints_ms) / median(&plain.checkpoints_ms)
        ));
    }
    text
}
