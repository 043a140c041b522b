//! `outlive-lab bench --silence-only`: a silent death while a call waits, side by side. The
//! same gateway kill (silence: the connection stays open, nothing more comes) lands while
//!
//! * **library** — the task's own command waits (`outlive::outlive`);
//! * **serve** — a program's call waits on its connection to `outlive::serve`'s front;
//! * **run** — the same program, started by `outlive::run_command`, as `outlive run` does;
//! * **steel**, **anchor**, **kernel** — library mode through each cloud dialect that lets a
//!   second connection confirm a silence (the gateway serves their APIs);
//! * **idle** — library mode, Solari, with no call waiting (the heartbeat's path).
//!
//! The waiting call is a `Runtime.evaluate` of a promise that never settles. The program says
//! it waits once a later call on the same session was answered, so the first is on the wire.
//! Arms alternate their order round by round.

use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures::StreamExt;
use gateway::DeathMode;
use outlive::{DeathCause, Dialect, Milestone, Options, Solari};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::micro::{Timed, detection, detection_through, kill_each_entry, killable_bed};
use super::records::{Detection, ms};
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use crate::{create_out, write_json, write_text};
use outlive_bed::bed::{Recording, TestBed};

/// The heartbeat of every arm: the micro-measurements' (idle silence is noticed in 3 s).
const HEARTBEAT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// The hidden command `run`'s arm starts as its program.
pub const PROGRAM_COMMAND: &str = "silence-program";

/// Every arm, in the order of the first round.
const ARMS: [&str; 7] = [
    "library", "serve", "run", "steel", "anchor", "kernel", "idle",
];

/// One arm's deaths in one round.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SilenceRun {
    /// Round (arms rotate which goes first).
    pub round: u32,
    /// `library`, `serve` or `run`.
    pub arm: &'static str,
    /// Each death's timings.
    pub detection: Detection,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SilenceReport {
    /// Heartbeat interval and timeout of every arm, ms.
    pub heartbeat_ms: (f64, f64),
    /// Every arm's run.
    pub runs: Vec<SilenceRun>,
}

fn bench_error(what: impl std::fmt::Display) -> Error {
    Error::with(ErrorKind::Bench, what.to_string())
}

/// Runs `rounds` rounds of `kills` deaths per arm; writes `silence.json` and
/// `silence-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when an arm fails or the bed does not start.
pub async fn run(rounds: u32, kills: u32, out: &std::path::Path) -> Result<SilenceReport, Error> {
    create_out(out)?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut arms = ARMS;
        arms.rotate_left(round as usize % ARMS.len());
        for arm in arms {
            let detection = arm_detection(arm, kills).await?;
            eprintln!(
                "  round {round} {arm:<7} noticed, median {:>6.1} ms after the kill call ({:.1} ms after it returned)",
                median(&detection.latency_ms),
                median(&detection.after_kill_returned_ms),
            );
            runs.push(SilenceRun {
                round,
                arm,
                detection,
            });
        }
    }
    let report = SilenceReport {
        heartbeat_ms: (ms(HEARTBEAT.0), ms(HEARTBEAT.1)),
        runs,
    };
    write_json(out, "silence.json", &report)?;
    write_text(out, "silence-summary.txt", &summary(&report))?;
    Ok(report)
}

/// One arm's detections of `kills` silent deaths.
async fn arm_detection(arm: &str, kills: u32) -> Result<Detection, Error> {
    let silence = DeathMode::Silence;
    match arm {
        "library" => detection(silence, kills, HEARTBEAT, true).await,
        "idle" => detection(silence, kills, HEARTBEAT, false).await,
        "serve" => serve_arm(kills).await,
        "run" => run_arm(kills).await,
        dialect => {
            let dialect = Dialect::named(dialect).ok_or_else(|| bench_error(dialect))?;
            detection_through(dialect, silence, kills, HEARTBEAT, true).await
        }
    }
}

/// Options for a served arm, and its killer (which they tell of each death).
fn options(kills: u32) -> (Options, Killer) {
    let (died_tx, died_rx) = unbounded_channel();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(kills + 2)
        .heartbeat_interval(HEARTBEAT.0)
        .heartbeat_timeout(HEARTBEAT.1)
        .on_milestone(move |m| {
            if let Milestone::Died {
                detected_at, cause, ..
            } = m
            {
                let _ = died_tx.send((*detected_at, *cause));
            }
        });
    (options, Killer { kills, died_rx })
}

/// A served arm's killer: `kills` silent deaths, each reported back on `died_rx`.
struct Killer {
    kills: u32,
    died_rx: UnboundedReceiver<(std::time::Instant, DeathCause)>,
}

impl Killer {
    /// Kills the browser silently each time the program says its call waits, while the arm
    /// runs (`ended`: the error of its ending first) and `aside`, which never ends, serves it.
    async fn kill_while(
        self,
        bed: &TestBed,
        provider: &Recording<Solari>,
        waiting_rx: UnboundedReceiver<()>,
        ended: impl Future<Output = Error>,
        aside: impl Future<Output = ()>,
    ) -> Result<Timed, Error> {
        let (kills, died_rx) = (self.kills, self.died_rx);
        let mode = DeathMode::Silence;
        tokio::select! {
            timed = kill_each_entry(bed, provider, mode, kills, waiting_rx, died_rx) => Ok(timed),
            e = ended => Err(e),
            () = aside => unreachable!("what serves the arm runs until dropped"),
        }
    }
}

/// `outlive::serve`, with the program in this process reconnecting after each death.
async fn serve_arm(kills: u32) -> Result<Detection, Error> {
    let (bed, provider) = killable_bed().await?;
    let (options, killer) = options(kills);
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (waiting_tx, waiting_rx) = unbounded_channel();
    let ready = |e: &outlive::Endpoints| drop(url_tx.send(e.cdp_url.clone()));
    let served = outlive::serve(&provider, options, ready, async {
        let _ = stop_rx.await;
    });
    let program = async {
        let Ok(url) = url_rx.await else {
            return std::future::pending::<()>().await;
        };
        // One connection per browser: each waits until its death cuts it.
        loop {
            match WaitingCall::open(&url).await {
                Ok(mut call) => {
                    let _ = waiting_tx.send(());
                    call.ended().await;
                }
                // Cut while it was being set up, or the front stopping: again, not hot.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    // Boxed: polled while the killer runs, then awaited to its end.
    let mut served = Box::pin(served);
    let ended = async { early("serve", (&mut served).await) };
    // The program (and its connection) is gone once this returns, so `serve` does not wait
    // for it to answer the close.
    let timed = killer
        .kill_while(&bed, &provider, waiting_rx, ended, program)
        .await?;
    let _ = stop_tx.send(());
    let served = served.await;
    served.map_err(|e| bench_error(format!("serve failed: {e}")))?;
    bed.shutdown().await?;
    Ok(detection_of(timed))
}

/// `outlive::run_command` with this binary's [`PROGRAM_COMMAND`] as the program: each
/// attempt up to `kills` leaves a call waiting and says so; the next one says so and exits.
async fn run_arm(kills: u32) -> Result<Detection, Error> {
    let (bed, provider) = killable_bed().await?;
    let (options, killer) = options(kills);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(bench_error)?;
    let at = listener.local_addr().map_err(bench_error)?;
    let exe = std::env::current_exe().map_err(bench_error)?;
    let command = outlive::Command::new(exe)
        .args([PROGRAM_COMMAND])
        .env(WAITING_ENV, at.to_string())
        .env(LAST_ENV, (kills + 1).to_string());
    let (waiting_tx, waiting_rx) = unbounded_channel();
    let run = outlive::run_command(&provider, &command, options, std::future::pending());
    // Boxed: polled while the killer runs, then awaited to its end.
    let mut run = Box::pin(run);
    let ended = async { early("run", (&mut run).await) };
    let notices = notices(listener, waiting_tx);
    let timed = killer
        .kill_while(&bed, &provider, waiting_rx, ended, notices)
        .await?;
    let ran = run.await;
    ran.map_err(|e| bench_error(format!("run failed: {e}")))?;
    bed.shutdown().await?;
    Ok(detection_of(timed))
}

/// `arm`'s run ended before the bench's last kill.
pub(super) fn early<E: std::fmt::Display>(
    arm: &str,
    ended: Result<(), outlive::RunError<E>>,
) -> Error {
    match ended {
        Ok(()) => bench_error(format!("{arm} ended before the last kill")),
        Err(e) => bench_error(format!("{arm} failed: {e}")),
    }
}

/// Each connection to `listener` is a program saying its call waits.
async fn notices(listener: tokio::net::TcpListener, waiting: UnboundedSender<()>) {
    loop {
        if listener.accept().await.is_ok() {
            let _ = waiting.send(());
        }
    }
}

fn detection_of((latency_ms, kill_call_ms, after_kill_returned_ms, causes): Timed) -> Detection {
    Detection {
        mode: DeathMode::Silence,
        command_waiting: true,
        latency_ms,
        kill_call_ms,
        after_kill_returned_ms,
        causes,
    }
}

/// Where the program tells the bench its call waits (an address to connect to).
const WAITING_ENV: &str = "OUTLIVE_LAB_WAITING";
/// The attempt at which the program only says so and exits.
const LAST_ENV: &str = "OUTLIVE_LAB_LAST_ATTEMPT";

/// The program `run`'s arm starts (`outlive-lab silence-program`): reads `OUTLIVE_CDP_URL` and
/// `OUTLIVE_ATTEMPT` as any program does, and the bench's two variables. `true` at the last
/// attempt (it only says its call waits); `false` once the browser's death cut its
/// connection under the waiting call, the expected end of every other attempt.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when a variable is missing, or the browser refuses or drops a call
/// before the waiting one is on the wire.
pub async fn program() -> Result<bool, Error> {
    let var = |name: &str| std::env::var(name).map_err(|_| bench_error(format!("${name} unset")));
    let url = var("OUTLIVE_CDP_URL")?;
    let attempt: u32 = var("OUTLIVE_ATTEMPT")?.parse().map_err(bench_error)?;
    let last: u32 = var(LAST_ENV)?.parse().map_err(bench_error)?;
    let waiting = var(WAITING_ENV)?;
    let mut call = WaitingCall::open(&url).await?;
    tokio::net::TcpStream::connect(waiting.as_str())
        .await
        .map_err(bench_error)?;
    if attempt >= last {
        return Ok(true);
    }
    call.ended().await;
    Ok(false)
}

/// A program's CDP connection with a call waiting on the page.
struct WaitingCall {
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    next: u64,
}

impl WaitingCall {
    /// Connects to `url`, attaches to the first page and leaves a call waiting on it; returns
    /// once a later call on the page was answered (so the first is on the wire).
    async fn open(url: &str) -> Result<WaitingCall, Error> {
        let (ws, _) = async_tungstenite::tokio::connect_async(url)
            .await
            .map_err(bench_error)?;
        let mut c = WaitingCall { ws, next: 1 };
        let targets = c.call("Target.getTargets", json!({}), None).await?;
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .map(|t| t["targetId"].clone())
            .ok_or_else(|| bench_error("no page to attach to"))?;
        let attach = json!({ "targetId": page, "flatten": true });
        let attached = c.call("Target.attachToTarget", attach, None).await?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| bench_error("no session"))?
            .to_owned();
        let never = json!({ "expression": "new Promise(() => {})", "awaitPromise": true });
        c.send("Runtime.evaluate", never, Some(&session)).await?;
        c.call(
            "Runtime.evaluate",
            json!({ "expression": "1" }),
            Some(&session),
        )
        .await?;
        Ok(c)
    }

    /// Sends `method`; its id.
    async fn send(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<u64, Error> {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .await
            .map_err(bench_error)?;
        Ok(id)
    }

    /// Sends `method` and waits for its result.
    async fn call(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, Error> {
        let id = self.send(method, params, session).await?;
        while let Some(m) = self.ws.next().await {
            let Message::Text(t) = m.map_err(bench_error)? else {
                continue;
            };
            let reply: Value = serde_json::from_str(t.as_str()).map_err(bench_error)?;
            if reply["id"].as_u64() == Some(id) {
                if let Some(e) = reply.get("error") {
                    return Err(bench_error(format!("{method}: {e}")));
                }
                return Ok(reply["result"].clone());
            }
        }
        Err(bench_error(format!(
            "the connection ended before {method} was answered"
        )))
    }

    /// Waits until the connection ends (the front cuts it when the browser dies).
    async fn ended(&mut self) {
        while let Some(Ok(_)) = self.ws.next().await {}
    }
}

/// Per arm: the median over every death of the latency from the kill call, and from its
/// return; the per-round medians.
pub fn summary(r: &SilenceReport) -> String {
    let mut out = format!(
        "A silent death (gateway kill, mode silence) while a call waits (idle: none waits); heartbeat {:.0} ms + {:.0} ms\n",
        r.heartbeat_ms.0, r.heartbeat_ms.1
    );
    for arm in ARMS {
        let runs: Vec<&SilenceRun> = r.runs.iter().filter(|x| x.arm == arm).collect();
        let all = |pick: fn(&Detection) -> &Vec<f64>| -> Vec<f64> {
            runs.iter()
                .flat_map(|x| pick(&x.detection).clone())
                .collect()
        };
        let latency = all(|d| &d.latency_ms);
        let after = all(|d| &d.after_kill_returned_ms);
        let rounds: Vec<f64> = runs
            .iter()
            .map(|x| median(&x.detection.latency_ms))
            .collect();
        let silence = runs
            .iter()
            .flat_map(|x| x.detection.causes.iter())
            .filter(|c| **c == DeathCause::Silence)
            .count();
        out.push_str(&format!(
            "{arm:<7}: noticed median {:.0} ms after the kill call ({:.0} ms after it returned), n = {}, {silence} seen as silence; per round {rounds:.0?} ms\n",
            median(&latency),
            median(&after),
            latency.len(),
        ));
    }
    out
}
