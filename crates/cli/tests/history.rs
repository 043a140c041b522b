//! A durable run's history and its page. Real `outlive worker` processes on a real
//! PostgreSQL, browsers from the gateway, the Aurora Bank task. A run whose browser is killed
//! and whose worker is then SIGKILLed and taken over: `outlive runs --history --json` and
//! `outlive ui`'s page list the same events. A run with three deaths, its page opened in
//! headless Chromium: four session bars and three death marks in the live DOM
//! (`OUTLIVE_UI_SCREENSHOT=PATH` saves a screenshot). An unknown run id, `ui` on a database
//! without the tables, and a `--listen` address in use or off loopback: clear errors and
//! exit statuses. And `outlive run
//! --metrics`: its command reads `/` and its run's page while the run goes on.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use outlive::history::Step;
use outlive_jobs::{PgStore, RunEvent};
use support::pg::{JobsBed, kill_holder, submit_bank, until_completed};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Polls the run's history (every 100 ms, up to 60 s) until `done` holds; answers it.
async fn until_history(
    store: &PgStore,
    run_id: &str,
    what: &str,
    done: impl Fn(&[RunEvent]) -> bool,
) -> Vec<RunEvent> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = outlive_jobs::history(store, run_id).await.unwrap();
        if done(&events) {
            return events;
        }
        assert!(Instant::now() < deadline, "{what}: {events:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count(events: &[RunEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.step.kind() == kind).count()
}

/// Kills the gateway's one live session (the run's browser) with a close frame.
async fn kill_the_browser(gw: &gateway::Gateway) {
    let live = gw.live_sessions();
    assert_eq!(live.len(), 1, "one browser: the run's ({live:?})");
    gw.kill(&live[0], gateway::DeathMode::Close).await.unwrap();
}

/// Kills the run's browser once it is entered, `deaths` times, waiting each time for the
/// next entry; answers the history after the last death.
async fn kill_browsers(jb: &JobsBed, run_id: &str, deaths: usize) -> Vec<RunEvent> {
    let mut events = Vec::new();
    for n in 0..deaths {
        until_history(&jb.store, run_id, "an entry after the last death", |e| {
            count(e, "entered") > n && count(e, "checkpointed") > 0
        })
        .await;
        kill_the_browser(jb.bed.gateway()).await;
        events = until_history(&jb.store, run_id, "the death recorded", |e| {
            count(e, "died") > n
        })
        .await;
    }
    events
}

/// `outlive ui --listen 127.0.0.1:0` on `database_url`, and where its page is.
async fn start_ui(database_url: &str) -> (Child, String) {
    let mut child = Command::new(support::outlive_bin())
        .args(["ui", "--listen", "127.0.0.1:0"])
        .env("OUTLIVE_DATABASE_URL", database_url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), stderr.next_line())
        .await
        .expect("ui says where it listens")
        .unwrap()
        .expect("a line");
    let base = line
        .strip_prefix("outlive: runs at ")
        .unwrap_or_else(|| panic!("ui said {line:?}"))
        .trim_end_matches('/')
        .to_owned();
    (child, base)
}

/// `outlive ARGS` with the database; its exit status, stdout and stderr.
async fn outlive(database_url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(support::outlive_bin())
        .args(args)
        .env("OUTLIVE_DATABASE_URL", database_url)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// The page's events table: (seq, kind) of each row.
fn page_events(page: &str) -> Vec<(i64, String)> {
    let row = regex::Regex::new(r#"<tr data-seq="(\d+)" data-kind="([a-z_]+)">"#).unwrap();
    row.captures_iter(page)
        .map(|c| (c[1].parse().unwrap(), c[2].to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_page_agree_for_a_run_taken_over_after_a_sigkill() {
    let jb = JobsBed::start(None).await;
    let mut workers = vec![
        jb.worker(&["--concurrency", "1"]),
        jb.worker(&["--concurrency", "1"]),
    ];
    let run_id = submit_bank(&jb.store, 40, 150).await;

    // A browser death, then the worker holding the run killed with SIGKILL.
    kill_browsers(&jb, &run_id, 1).await;
    until_history(&jb.store, &run_id, "entered again", |e| {
        count(e, "entered") >= 2 && count(e, "checkpointed") >= 2
    })
    .await;
    let runs = outlive_jobs::runs(&jb.store).await.unwrap();
    let first = runs[0].worker.clone().expect("a worker holds it");
    kill_holder(&mut workers, &first).await;
    until_completed(&jb.store, Duration::from_secs(60)).await;
    // Its history's end is written once its end is saved.
    let events = until_history(&jb.store, &run_id, "the end in the history", |e| {
        count(e, "finished") > 0
    })
    .await;
    let kinds: Vec<&str> = events.iter().map(|e| e.step.kind()).collect();
    println!("{kinds:?}");
    assert_eq!(kinds.first(), Some(&"pickup"), "{kinds:?}");
    assert_eq!(count(&events, "takeover"), 1, "{kinds:?}");
    assert_eq!(count(&events, "died"), 1, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"finished"), "{kinds:?}");
    assert!(
        matches!(&events.last().unwrap().step, Step::Finished { outcome } if outcome == "completed")
    );
    // The bounded reads of the page: the first events, totals counted by the database.
    let (head, more) = outlive_jobs::history_first(&jb.store, &run_id, 3)
        .await
        .unwrap();
    assert_eq!((head.as_slice(), more), (&events[..3], true));
    let summary = outlive_jobs::run_summary(&jb.store, &run_id)
        .await
        .unwrap()
        .expect("the run");
    let entered = events.iter().filter_map(|e| match e.step {
        Step::Entered { attempt, .. } => Some(i64::from(attempt)),
        _ => None,
    });
    assert_eq!(
        (summary.attempts, summary.sessions as usize),
        (entered.max().unwrap(), count(&events, "launched"))
    );
    assert_eq!(
        outlive_jobs::recent_runs(&jb.store, 50).await.unwrap(),
        [summary]
    );
    let takeover = events.iter().find(|e| e.step == Step::Takeover).unwrap();
    assert_eq!(
        (takeover.pickup, takeover.worker.as_deref()),
        (Some(2), runs_worker(&jb).await.as_deref())
    );
    assert_ne!(takeover.worker.as_deref(), Some(first.as_str()));

    // The command's JSON lines are those events.
    let (status, stdout, stderr) =
        outlive(&jb.db.url, &["runs", "--history", &run_id, "--json"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let printed: Vec<(i64, String)> = stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["runId"], run_id.as_str());
            (
                v["seq"].as_i64().unwrap(),
                v["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let stored: Vec<(i64, String)> = events
        .iter()
        .map(|e| (e.seq, e.step.kind().to_owned()))
        .collect();
    assert_eq!(printed, stored);
    let (status, table, _) = outlive(&jb.db.url, &["runs", "--history", &run_id]).await;
    assert_eq!(status, Some(0));
    assert_eq!(
        table.lines().filter(|l| l.contains(" died ")).count(),
        1,
        "{table}"
    );

    // The page shows the same events, and marks the death and the takeover.
    let (_ui, base) = start_ui(&jb.db.url).await;
    let page = reqwest::get(format!("{base}/runs/{run_id}")).await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    let page = page.text().await.unwrap();
    assert_eq!(page_events(&page), printed);
    assert_eq!(page.matches("<g class=\"death\">").count(), 1);
    assert_eq!(page.matches("<g class=\"takeover\">").count(), 1);
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "a finished run's page stays"
    );
    let list = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(list.contains(&format!("href=\"/runs/{run_id}\"")), "{list}");
    // Nothing secret: no gateway key, no bank password, no URL of the bed.
    let bank = jb.bed.bank().config();
    for secret in [
        jb.bed.gateway().api_key(),
        bank.password(),
        &jb.bed.bank().base_url(),
    ] {
        assert!(!page.contains(secret) && !list.contains(secret) && !stdout.contains(secret));
    }
    assert_eq!(
        reqwest::get(format!("{base}/runs/no-such-run"))
            .await
            .unwrap()
            .status(),
        404
    );

    for w in workers {
        w.stop().await;
    }
    support::assert_gateway_clean(jb.bed.gateway()).await;
    let JobsBed { db, store, bed, .. } = jb;
    support::shutdown_released(bed).await;
    db.drop_now(store).await;
}

async fn runs_worker(jb: &JobsBed) -> Option<String> {
    outlive_jobs::runs(&jb.store).await.unwrap()[0]
        .worker
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_deaths_show_as_four_session_bars_in_chromium() {
    let jb = JobsBed::start(None).await;
    let worker = jb.worker(&["--concurrency", "1"]);
    let run_id = submit_bank(&jb.store, 40, 100).await;
    kill_browsers(&jb, &run_id, 3).await;
    until_completed(&jb.store, Duration::from_secs(60)).await;
    let events = outlive_jobs::history(&jb.store, &run_id).await.unwrap();
    assert_eq!((count(&events, "launched"), count(&events, "died")), (4, 3));
    let (_ui, base) = start_ui(&jb.db.url).await;

    // The page in headless Chromium: its live DOM, and a screenshot if asked for.
    let url = format!("{base}/runs/{run_id}");
    let shot = std::env::var_os("OUTLIVE_UI_SCREENSHOT");
    let outlive::Reported { result, .. } = outlive::outlive_with_event(
        &outlive::LocalChromium::new(),
        |page, _ctx| {
            let (url, shot) = (url.clone(), shot.clone());
            async move {
                page.goto(url.as_str()).await?;
                let count = |selector: &str| {
                    let js = format!("document.querySelectorAll('{selector}').length");
                    let page = page.clone();
                    async move {
                        let counted = page.evaluate(js).await?.into_value::<u64>();
                        counted.map_err(outlive::chromiumoxide::error::CdpError::from)
                    }
                };
                let counts = (count("svg .session").await?, count("svg .death").await?);
                if let Some(path) = shot {
                    let params = outlive::chromiumoxide::page::ScreenshotParams::builder().build();
                    let png = page.screenshot(params).await?;
                    std::fs::write(path, png).unwrap();
                }
                Ok::<_, outlive::chromiumoxide::error::CdpError>(counts)
            }
        },
        outlive::Options::new().viewport(1000, 640),
    )
    .await;
    assert_eq!(
        result.unwrap(),
        (4, 3),
        "four session bars, three death marks"
    );

    worker.stop().await;
    support::assert_gateway_clean(jb.bed.gateway()).await;
    let JobsBed { db, store, bed, .. } = jb;
    support::shutdown_released(bed).await;
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_run_and_a_bad_listen_address_are_clear_errors() {
    let db = support::pg::Scratch::create().await;
    // `ui` creates no table: on a database without them, it says what creates them.
    let (status, _, stderr) = outlive(&db.url, &["ui", "--listen", "127.0.0.1:0"]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("tables are missing (outlive_runs, outlive_run_events)")
            && stderr.contains("`outlive worker`"),
        "{stderr}"
    );

    let (status, _, stderr) = outlive(&db.url, &["runs", "--history", "no-such-run"]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("no run \"no-such-run\""), "{stderr}");
    assert!(stderr.contains("`outlive runs` lists them"), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, _, stderr) = outlive(&db.url, &["ui", "--listen", &addr]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("could not listen on {addr} for --listen")),
        "{stderr}"
    );
    assert!(stderr.contains("in use"), "{stderr}");

    let (status, _, stderr) = outlive(&db.url, &["ui", "--listen", "0.0.0.0:0"]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--public"),
        "{stderr}"
    );

    let store = PgStore::connect(&db.url).await.unwrap();
    db.drop_now(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_of_run_shows_its_run_while_it_goes_on() {
    let gw = support::fault_gateway(Duration::ZERO).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    // The command reads the pages once the run has entered it: the run is live then.
    let read = format!(
        "curl -sf http://127.0.0.1:{port}/ > {d}/list.html && \
         curl -sf http://127.0.0.1:{port}/runs/1 > {d}/run.html",
        d = dir.path().display()
    );
    let status = Command::new(support::outlive_bin())
        .args(["run", "--metrics", &format!("127.0.0.1:{port}")])
        .args(["--solari-url", gw.base_url(), "--", "sh", "-c", &read])
        .env("SOLARI_API_KEY", gw.api_key())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(status.success(), "{status}");
    let list = std::fs::read_to_string(dir.path().join("list.html")).unwrap();
    let run = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert!(
        list.contains("href=\"/runs/1\"") && list.contains("running"),
        "{list}"
    );
    assert!(
        run.contains("http-equiv=\"refresh\""),
        "a live run refreshes: {run}"
    );
    assert_eq!(run.matches("<rect class=\"session\"").count(), 1, "{run}");
    assert_eq!(
        page_events(&run)
            .iter()
            .map(|(_, k)| k.as_str())
            .collect::<Vec<_>>(),
        ["launched", "entered"]
    );
    assert!(
        !run.contains(gw.api_key()) && !run.contains("token"),
        "{run}"
    );
    support::finish_clean(gw).await;
}
