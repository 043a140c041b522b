//! `outlive-lab bench --carry-only`: a browser death under a working client (issue 51). The
//! same gateway kill (close), after a checkpoint, on Aurora Bank's account page, in
//!
//! * **library** — `outlive::outlive`, a Rust task: death noticed → task re-entered;
//! * **carried** — `outlive::serve`, a Playwright client connected once: death noticed →
//!   `ClientCarried`, and the client's failed calls;
//! * **reconnect** — `serve` with `carry_clients(false)`, the client reconnecting by itself:
//!   its failed calls, and death noticed → its first successful call.
//!
//! Arms alternate their order round by round. The client is `carry_client.py`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use gateway::DeathMode;
use outlive::{Milestone, Options, Solari};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::micro::killable_bed;
use super::records::ms;
use super::silence::early;
use crate::error::{Error, ErrorKind};
use crate::served::bench_error;
use crate::stats::{median, percentile};
use crate::{create_out, write_json, write_text};
use outlive_bed::bank::{BankError, BankTask};
use outlive_bed::bed::{Recording, TestBed};

const CLIENT: &str = include_str!("../carry_client.py");
const BANK_LOGIN: &str = include_str!("../../../cli/tests/clients/bank_login.py");

/// The heartbeat of every arm: the micro-measurements'.
const HEARTBEAT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(2));

/// The longest the bench waits for any one step before it calls the arm failed.
const STEP: Duration = Duration::from_secs(90);

/// Every arm, in the order of the first round.
const ARMS: [&str; 3] = ["library", "carried", "reconnect"];

/// One death.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CarryDeath {
    /// The gateway's kill call, ms.
    pub kill_call_ms: f64,
    /// The kill call's start → `Died.detected_at`, ms.
    pub noticed_ms: f64,
    /// `Died.detected_at` → the page usable again, the arm's figure, ms. Library: the task
    /// re-entered; carried: `ClientCarried.at`; reconnect: `first_ok_ms`.
    pub usable_ms: Option<f64>,
    /// `Died.detected_at` → the next entry (`Entered.replaced_in`), ms.
    pub entered_ms: Option<f64>,
    /// `Died.detected_at` → `ClientCarried.at`, ms.
    pub carried_ms: Option<f64>,
    /// `Died.detected_at` → the client's first successful page call after it, ms: the
    /// client's wall clock at the call's end against the bench's at the detection.
    pub first_ok_ms: Option<f64>,
    /// The client's failed page calls from the kill until it worked again.
    pub failed_calls: Option<u32>,
    /// Their errors, first lines.
    pub errors: Vec<String>,
    /// The client's connects in that span.
    pub connects: Option<u32>,
    /// The detection, seconds since the Unix epoch.
    #[serde(skip)]
    detected_wall: f64,
}

/// One arm's deaths in one round.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CarryRun {
    /// Round (arms rotate which goes first).
    pub round: u32,
    /// `library`, `carried` or `reconnect`.
    pub arm: &'static str,
    /// Each death.
    pub deaths: Vec<CarryDeath>,
}

/// The whole benchmark.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CarryReport {
    /// Heartbeat interval and timeout of every arm, ms.
    pub heartbeat_ms: (f64, f64),
    /// Every arm's run.
    pub runs: Vec<CarryRun>,
}

/// Runs `rounds` rounds of `kills` deaths per arm, the client on `python`; writes
/// `carry.json` and `carry-summary.txt` under `out`.
///
/// # Errors
///
/// [`ErrorKind::Bench`] when an arm fails or the bed does not start.
pub async fn run(python: &Path, rounds: u32, kills: u32, out: &Path) -> Result<CarryReport, Error> {
    create_out(out)?;
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut arms = ARMS;
        arms.rotate_left(round as usize % ARMS.len());
        for arm in arms {
            let deaths = match arm {
                "library" => library_arm(kills).await?,
                "carried" => served_arm(python, kills, true).await?,
                _ => served_arm(python, kills, false).await?,
            };
            let usable: Vec<f64> = deaths.iter().filter_map(|d| d.usable_ms).collect();
            let failed: u32 = deaths.iter().filter_map(|d| d.failed_calls).sum();
            eprintln!(
                "  round {round} {arm:<9} usable again, median {:>6.0} ms after the death was noticed; {failed} failed client calls in {} deaths",
                median(&usable),
                deaths.len(),
            );
            runs.push(CarryRun { round, arm, deaths });
        }
    }
    let report = CarryReport {
        heartbeat_ms: (ms(HEARTBEAT.0), ms(HEARTBEAT.1)),
        runs,
    };
    write_json(out, "carry.json", &report)?;
    write_text(out, "carry-summary.txt", &summary(&report))?;
    Ok(report)
}

/// A milestone the bench waits on.
enum Seen {
    Checkpointed,
    Died(Instant),
    Entered(Option<Duration>),
    Carried(Instant),
}

/// The same options for every arm, and the milestones they report.
fn options(kills: u32) -> (Options, Feed) {
    let (tx, rx) = unbounded_channel();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .max_relaunches(kills + 2)
        .heartbeat_interval(HEARTBEAT.0)
        .heartbeat_timeout(HEARTBEAT.1)
        .on_milestone(move |m| {
            let seen = match m {
                Milestone::Checkpointed { .. } => Seen::Checkpointed,
                Milestone::Died { detected_at, .. } => Seen::Died(*detected_at),
                Milestone::Entered { replaced_in, .. } => Seen::Entered(*replaced_in),
                Milestone::ClientCarried { at, .. } => Seen::Carried(*at),
                _ => return,
            };
            let _ = tx.send(seen);
        });
    (options, Feed(rx))
}

/// The milestones of one arm, in the order they were reported.
struct Feed(UnboundedReceiver<Seen>);

impl Feed {
    /// The next milestone `pick` takes, skipping the others.
    async fn next<T>(&mut self, what: &str, pick: impl Fn(&Seen) -> Option<T>) -> Result<T, Error> {
        let found = async {
            while let Some(seen) = self.0.recv().await {
                if let Some(t) = pick(&seen) {
                    return Some(t);
                }
            }
            None
        };
        match tokio::time::timeout(STEP, found).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(bench_error(format!("the run ended before {what}"))),
            Err(_) => Err(bench_error(format!("no {what} in {STEP:?}"))),
        }
    }

    async fn checkpointed(&mut self) -> Result<(), Error> {
        let pick = |s: &Seen| matches!(s, Seen::Checkpointed).then_some(());
        self.next("checkpoint", pick).await
    }

    async fn died(&mut self) -> Result<Instant, Error> {
        let pick = |s: &Seen| {
            if let Seen::Died(at) = s {
                Some(*at)
            } else {
                None
            }
        };
        self.next("death", pick).await
    }

    /// The entry after a death (its `replaced_in`) and, with `carry`, the client carried, in
    /// either order.
    async fn recovered(
        &mut self,
        carry: bool,
    ) -> Result<(Option<Duration>, Option<Instant>), Error> {
        let (mut entered, mut carried) = (None, None);
        while entered.is_none() || (carry && carried.is_none()) {
            let pick = |s: &Seen| match s {
                Seen::Entered(r) => Some((Some(*r), None)),
                Seen::Carried(at) => Some((None, Some(*at))),
                _ => None,
            };
            let (e, c) = self.next("entry or carried client", pick).await?;
            entered = entered.or(e);
            carried = carried.or(c);
        }
        Ok((entered.flatten(), carried))
    }
}

/// `at` on the wall clock, seconds since the Unix epoch.
fn wall(at: Instant) -> f64 {
    let (now, epoch) = (Instant::now(), SystemTime::now());
    let secs = epoch
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    secs - now.saturating_duration_since(at).as_secs_f64()
}

/// Kills the newest session (close); the death's record so far.
async fn kill(
    bed: &TestBed,
    provider: &Recording<Solari>,
    feed: &mut Feed,
) -> Result<CarryDeath, Error> {
    let id = provider
        .newest_session_id()
        .ok_or_else(|| bench_error("no session to kill"))?;
    let t0 = Instant::now();
    bed.gateway()
        .kill(&id, DeathMode::Close)
        .await
        .map_err(|e| bench_error(format!("kill: {e}")))?;
    let kill_call_ms = ms(t0.elapsed());
    let at = feed.died().await?;
    Ok(CarryDeath {
        kill_call_ms,
        noticed_ms: ms(at.saturating_duration_since(t0)),
        detected_wall: wall(at),
        ..CarryDeath::default()
    })
}

/// `outlive::outlive` with a Rust task that signs in, then goes to the account page, reads
/// it, evaluates and checkpoints, over and over; killed after a checkpoint, `kills` times.
async fn library_arm(kills: u32) -> Result<Vec<CarryDeath>, Error> {
    let (bed, provider) = killable_bed().await?;
    let (options, mut feed) = options(kills);
    let task = bed.task(1, Duration::ZERO);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let run = outlive::outlive(
        &provider,
        |page, ctx| {
            let (task, mut stop) = (&task, stop_rx.clone());
            async move {
                if ctx.attempt() == 1 {
                    sign_in_through_forms(task, &page).await?;
                }
                let work = keep_working(task, &page, &ctx);
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => Ok(()),
                    r = work => r,
                }
            }
        },
        options,
    );
    let killer = async {
        let deaths = library_kills(&bed, &provider, kills, &mut feed).await;
        let _ = stop_tx.send(true);
        deaths
    };
    let (ran, deaths) = futures::join!(run, killer);
    let deaths = deaths?;
    ran.map_err(|e| bench_error(format!("the library task failed: {e}")))?;
    bed.shutdown().await?;
    Ok(deaths)
}

/// Signs in as `bank_login.py` does, through the bank's forms, so that the page's
/// back/forward list is the client's (login, TOTP, account) and each restore rebuilds as
/// many entries as the served arms'.
async fn sign_in_through_forms(task: &BankTask, page: &outlive::Page) -> Result<(), BankError> {
    task.goto(page, "/login").await?;
    let quoted = |s: &str| serde_json::to_string(s).expect("strings serialise");
    let fill = format!(
        "document.querySelector('#username').value = {}; \
         document.querySelector('#password').value = {}; true",
        quoted(&task.username),
        quoted(&task.password)
    );
    submit(task, page, "submit the password", &fill, "/totp").await?;
    let code = task.totp.current_code();
    let fill = format!(
        "document.querySelector('#code').value = {}; true",
        quoted(&code)
    );
    submit(task, page, "submit the TOTP", &fill, "/account").await
}

/// Fills the page's form with `fill`, clicks its submit button and waits until the page
/// that answers it, at `path`, has loaded.
async fn submit(
    task: &BankTask,
    page: &outlive::Page,
    what: &'static str,
    fill: &str,
    path: &str,
) -> Result<(), BankError> {
    use futures::StreamExt;
    use outlive::chromiumoxide::cdp::browser_protocol::page::EventLoadEventFired;
    let failed =
        |e: outlive::chromiumoxide::error::CdpError| BankError::Unexpected(format!("{what}: {e}"));
    let mut loaded = page
        .event_listener::<EventLoadEventFired>()
        .await
        .map_err(failed)?;
    let _: bool = task.eval(page, what, fill).await?;
    // The click answers before the form's navigation starts; the load after it is the next
    // page's.
    let _: bool = task
        .eval(
            page,
            what,
            "document.querySelector('#submit').click(), true",
        )
        .await?;
    let arrived = async {
        while loaded.next().await.is_some() {
            let at: String = task.eval(page, what, "location.pathname").await?;
            if at == path {
                return Ok(());
            }
        }
        Err(BankError::Unexpected(format!("{what}: the page closed")))
    };
    tokio::time::timeout(STEP, arrived)
        .await
        .map_err(|_| BankError::Unexpected(format!("{what}: no {path} within {STEP:?}")))?
}

/// The library task's rounds, as the client's: the account page, its user, an evaluation,
/// then a checkpoint.
async fn keep_working(
    task: &BankTask,
    page: &outlive::Page,
    ctx: &outlive::Ctx,
) -> Result<(), BankError> {
    loop {
        task.goto(page, "/account").await?;
        let _: String = task.eval(page, "read", USER).await?;
        let _: String = task.eval(page, "evaluate", EVALUATE).await?;
        ctx.checkpoint().await;
    }
}

/// The client's `page.text_content("#user")`, in the library task.
const USER: &str = "document.querySelector('#user').textContent";
/// The client's `page.evaluate(…)`, in the library task.
const EVALUATE: &str = "document.title + localStorage.length";

async fn library_kills(
    bed: &TestBed,
    provider: &Recording<Solari>,
    kills: u32,
    feed: &mut Feed,
) -> Result<Vec<CarryDeath>, Error> {
    let mut deaths = Vec::new();
    for _ in 0..kills {
        feed.checkpointed().await?;
        let mut death = kill(bed, provider, feed).await?;
        let entered = feed.recovered(false).await?.0.map(ms);
        (death.entered_ms, death.usable_ms) = (entered, entered);
        deaths.push(death);
    }
    Ok(deaths)
}

/// `outlive::serve` and the client, `carry` saying whether the front carries it through the
/// deaths or it reconnects by itself; killed after the client's checkpoints, `kills` times.
async fn served_arm(python: &Path, kills: u32, carry: bool) -> Result<Vec<CarryDeath>, Error> {
    let (bed, provider) = killable_bed().await?;
    let (options, mut feed) = options(kills);
    let options = options.carry_clients(carry);
    let (urls_tx, urls_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ready = |e: &outlive::Endpoints| drop(urls_tx.send(e.clone()));
    let served = outlive::serve(&provider, options, ready, async {
        let _ = stop_rx.await;
    });
    // Boxed: polled while the client works, then awaited to its end.
    let mut served = Box::pin(served);
    let work = async {
        let urls = urls_rx
            .await
            .map_err(|_| bench_error("serve gave no URLs"))?;
        let mut client = Client::start(python, &urls, &bed, carry)?;
        let kills = Kills {
            bed: &bed,
            provider: &provider,
            kills,
            carry,
        };
        kills.run(&mut feed, &mut client).await
    };
    let deaths = tokio::select! {
        deaths = work => deaths?,
        ended = &mut served => return Err(early("serve", ended)),
    };
    let _ = stop_tx.send(());
    let served = served.await;
    served.map_err(|e| bench_error(format!("serve failed: {e}")))?;
    bed.shutdown().await?;
    Ok(deaths)
}

/// A served arm's kills.
struct Kills<'a> {
    bed: &'a TestBed,
    provider: &'a Recording<Solari>,
    kills: u32,
    carry: bool,
}

impl Kills<'_> {
    /// Kills after a checkpoint the client made once it worked again, `kills` times; each
    /// death's record is complete once the client worked after it.
    async fn run(&self, feed: &mut Feed, client: &mut Client) -> Result<Vec<CarryDeath>, Error> {
        let mut deaths: Vec<CarryDeath> = Vec::new();
        let mut since = 0.0;
        for n in 0..=self.kills {
            let lines = client.worked_since(since).await?;
            if let Some(death) = deaths.last_mut() {
                death.account(&lines, self.carry);
            }
            if n == self.kills {
                break;
            }
            let mut death = kill(self.bed, self.provider, feed).await?;
            let (entered, carried) = feed.recovered(self.carry).await?;
            death.entered_ms = entered.map(ms);
            death.carried_ms = carried.map(|at| (wall(at) - death.detected_wall) * 1000.0);
            since = wall(Instant::now());
            deaths.push(death);
        }
        Ok(deaths)
    }
}

impl CarryDeath {
    /// Fills in what the client's `lines` since the kill say.
    fn account(&mut self, lines: &[Line], carried: bool) {
        let failed: Vec<String> = lines
            .iter()
            .filter_map(|l| match l {
                Line::Call {
                    ok: false, error, ..
                } => Some(error.clone()),
                _ => None,
            })
            .collect();
        let first_ok = lines.iter().find_map(|l| match l {
            Line::Call { ok: true, t, .. } if *t > self.detected_wall => Some(*t),
            _ => None,
        });
        self.first_ok_ms = first_ok.map(|t| (t - self.detected_wall) * 1000.0);
        self.failed_calls = Some(failed.len() as u32);
        self.errors = failed;
        let connects = lines
            .iter()
            .filter(|l| matches!(l, Line::Connected))
            .count();
        self.connects = Some(connects as u32);
        self.usable_ms = if carried {
            self.carried_ms
        } else {
            self.first_ok_ms
        };
    }
}

/// What the client printed.
enum Line {
    Call {
        ok: bool,
        /// Its end, seconds since the Unix epoch.
        t: f64,
        error: String,
    },
    Checkpointed,
    Connected,
    Fatal(String),
}

impl Line {
    fn parse(text: &str) -> Option<Line> {
        let v: Value = serde_json::from_str(text).ok()?;
        let t = |key: &str| v[key].as_f64();
        if v.get("call").is_some() {
            return Some(Line::Call {
                ok: v["ok"].as_bool()?,
                t: t("t")?,
                error: v["error"].as_str().unwrap_or_default().to_owned(),
            });
        }
        if v.get("checkpointed").is_some() {
            return Some(Line::Checkpointed);
        }
        if v.get("connected").is_some() {
            return Some(Line::Connected);
        }
        v["fatal"].as_str().map(|f| Line::Fatal(f.to_owned()))
    }
}

/// The Playwright client, and what it prints.
struct Client {
    _child: tokio::process::Child,
    lines: UnboundedReceiver<Line>,
    _dir: tempfile::TempDir,
}

impl Client {
    /// Starts `carry_client.py` (beside `bank_login.py`) on `urls`; `RECONNECT=1` unless
    /// `carried`.
    fn start(
        python: &Path,
        urls: &outlive::Endpoints,
        bed: &TestBed,
        carried: bool,
    ) -> Result<Client, Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::with(ErrorKind::TempDir, e))?;
        let script: PathBuf = dir.path().join("carry_client.py");
        let write = |name: &Path, text: &str| std::fs::write(name, text);
        write(&script, CLIENT)
            .and_then(|()| write(&dir.path().join("bank_login.py"), BANK_LOGIN))
            .map_err(|e| bench_error(e.to_string()))?;
        let task = bed.task(1, Duration::ZERO);
        let mut child = tokio::process::Command::new(python)
            .arg(&script)
            .env("OUTLIVE_CDP_URL", &urls.cdp_url)
            .env("OUTLIVE_CONTROL_URL", &urls.control_url)
            .env("BANK_URL", &task.base_url)
            .env("BANK_USER", &task.username)
            .env("BANK_PASSWORD", &task.password)
            .env("BANK_TOTP_SECRET", task.totp.as_base32())
            .env("RECONNECT", if carried { "0" } else { "1" })
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| bench_error(format!("{}: {e}", python.display())))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(text)) = out.next_line().await {
                if let Some(line) = Line::parse(&text) {
                    let _ = tx.send(line);
                }
            }
        });
        Ok(Client {
            _child: child,
            lines,
            _dir: dir,
        })
    }

    /// The lines up to a checkpoint after a successful call that ended after `since` (wall
    /// clock, s).
    async fn worked_since(&mut self, since: f64) -> Result<Vec<Line>, Error> {
        let read = async {
            let (mut lines, mut worked) = (Vec::new(), false);
            while let Some(line) = self.lines.recv().await {
                match &line {
                    Line::Call { ok: true, t, .. } if *t > since => worked = true,
                    Line::Checkpointed if worked => return Ok(lines),
                    Line::Fatal(f) => return Err(bench_error(format!("the client: {f}"))),
                    _ => {}
                }
                lines.push(line);
            }
            Err(bench_error("the client exited"))
        };
        tokio::time::timeout(STEP, read)
            .await
            .map_err(|_| bench_error(format!("the client did not work again in {STEP:?}")))?
    }
}

/// Per arm: the median and p90 of death noticed → usable again, and failed client calls per
/// death; the ratio of each served arm to library mode.
pub fn summary(r: &CarryReport) -> String {
    let mut out = format!(
        "A browser death (gateway kill, close) after a checkpoint, Aurora Bank's account page; heartbeat {:.0} ms + {:.0} ms\n",
        r.heartbeat_ms.0, r.heartbeat_ms.1
    );
    let deaths = |arm: &str| -> Vec<&CarryDeath> {
        r.runs
            .iter()
            .filter(|x| x.arm == arm)
            .flat_map(|x| &x.deaths)
            .collect()
    };
    let of = |arm: &str, pick: fn(&CarryDeath) -> Option<f64>| -> Vec<f64> {
        deaths(arm).into_iter().filter_map(pick).collect()
    };
    let library = median(&of("library", |d| d.usable_ms));
    for arm in ARMS {
        let usable = of(arm, |d| d.usable_ms);
        let first_ok = of(arm, |d| d.first_ok_ms);
        let failed = of(arm, |d| d.failed_calls.map(f64::from));
        let entered = of(arm, |d| d.entered_ms);
        out.push_str(&format!(
            "{arm:<9}: usable again median {:.0} ms, p90 {:.0} ms (n = {}; × {:.2} library's median); entered median {:.0} ms",
            median(&usable),
            percentile(&usable, 90),
            usable.len(),
            median(&usable) / library,
            median(&entered),
        ));
        if !failed.is_empty() {
            out.push_str(&format!(
                "; client's first successful call median {:.0} ms, p90 {:.0} ms; failed client calls per death {:.2} (max {:.0})",
                median(&first_ok),
                percentile(&first_ok, 90),
                failed.iter().sum::<f64>() / failed.len() as f64,
                failed.iter().copied().fold(0.0, f64::max),
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{CarryDeath, Line};

    #[test]
    fn a_death_is_accounted_from_the_client_lines_after_it() {
        let lines: Vec<Line> = [
            r#"{"call": "goto", "ok": true, "t": 99.5}"#,
            r#"{"checkpointed": 99.6}"#,
            r#"{"call": "goto", "ok": false, "t": 100.2, "error": "Page.goto: closed"}"#,
            r#"{"connected": 100.6}"#,
            r#"{"call": "goto", "ok": true, "t": 100.75}"#,
            "not json",
        ]
        .iter()
        .filter_map(|l| Line::parse(l))
        .collect();
        assert_eq!(lines.len(), 5);
        let mut death = CarryDeath {
            detected_wall: 100.0,
            carried_ms: Some(600.0),
            ..CarryDeath::default()
        };
        death.account(&lines, false);
        assert_eq!(death.failed_calls, Some(1));
        assert_eq!(death.errors, ["Page.goto: closed"]);
        assert_eq!(death.connects, Some(1));
        assert_eq!(death.first_ok_ms, Some(750.0));
        assert_eq!(death.usable_ms, death.first_ok_ms);
        death.account(&lines, true);
        assert_eq!(death.usable_ms, Some(600.0));
    }
}
