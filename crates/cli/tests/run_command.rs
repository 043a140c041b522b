//! `outlive run -- CMD` as a command line: exit statuses, signals, bad input and the control
//! URL, on local Chromium. (The clients surviving deaths: `run_clients.rs`.)

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// `outlive run` with its temp directory (and so its Chromium profiles) under `tmp`.
fn outlive(tmp: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outlive"));
    cmd.env("TMPDIR", tmp).kill_on_drop(true);
    cmd
}

mod support;

/// No process whose command line mentions `marker` (a Chromium's profile lives under the
/// test's temp directory; a command carries the directory in its arguments).
fn assert_nothing_left(marker: &Path) {
    support::assert_no_process(marker.to_str().unwrap());
}

async fn status(mut cmd: Command) -> (Option<i32>, String) {
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("outlive ends")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_command_that_fails_with_its_browser_alive_is_not_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let event = tmp.path().join("event.json");
    let mut cmd = outlive(tmp.path());
    cmd.arg("run").arg("--event-file").arg(&event).args([
        "--",
        "sh",
        "-c",
        "test -n \"$OUTLIVE_CDP_URL\" && exit 3",
    ]);
    let (code, stderr) = status(cmd).await;
    assert_eq!(code, Some(3), "{stderr}");
    let e: Value = serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).unwrap();
    assert_eq!(
        (e["outcome"].as_str(), e["attempts"].as_u64()),
        (Some("failed"), Some(1))
    );
    assert!(
        stderr.contains("outlive: failed"),
        "the summary line: {stderr}"
    );
    assert_nothing_left(tmp.path());
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_launched() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, expected, says) in [
        (vec!["run"], 64, "--"),
        (vec!["run", "--"], 64, "CMD"),
        (
            vec!["run", "--", "no-such-command-outlive"],
            127,
            "command not found",
        ),
        (
            vec!["run", "--", "/no/such/file"],
            127,
            "no such executable",
        ),
        (
            vec!["run", "--no-such-flag", "--", "true"],
            64,
            "--no-such-flag",
        ),
        (
            vec!["run", "--rotate", "sometimes", "--", "true"],
            64,
            "expected:",
        ),
        (
            vec!["run", "--max-relaunches", "5000", "--", "true"],
            64,
            "max_relaunches",
        ),
        (
            vec!["run", "--cdp-url", "http://x/", "--", "true"],
            64,
            "ws://",
        ),
    ] {
        let mut cmd = outlive(tmp.path());
        cmd.args(&args);
        let (code, stderr) = status(cmd).await;
        assert_eq!(code, Some(expected), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
    }
    // Nothing was launched: no profile was made.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// A command that writes its environment to `dir/env`, then waits for `dir/done`.
fn waiting(dir: &Path) -> Vec<String> {
    let d = dir.display();
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "env > {d}/env.tmp && mv {d}/env.tmp {d}/env; while [ ! -f {d}/done ]; do sleep 0.05; done"
        ),
    ]
}

/// Waits for the command's environment file; answers its `OUTLIVE_*` variables.
async fn command_env(dir: &Path, child: &mut Child) -> std::collections::HashMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("env")) {
            return text
                .lines()
                .filter_map(|l| l.split_once('='))
                .filter(|(k, _)| k.starts_with("OUTLIVE_"))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "outlive ended before the command started"
        );
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One raw HTTP/1.1 request to 127.0.0.1:`port`; answers the status and the body.
async fn http(port: u16, request: String) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

fn post(host: &str, path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn get(host: &str, path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
}

#[tokio::test]
async fn the_control_url_and_the_endpoint_answer_and_refuse_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let event = tmp.path().join("event.json");
    let mut cmd = outlive(tmp.path());
    cmd.arg("run")
        .arg("--event-file")
        .arg(&event)
        .arg("--")
        .args(waiting(tmp.path()));
    let mut child = cmd.spawn().unwrap();
    let env = command_env(tmp.path(), &mut child).await;
    for var in [
        "OUTLIVE_CDP_URL",
        "OUTLIVE_CDP_HTTP",
        "OUTLIVE_CONTROL_URL",
        "OUTLIVE_ATTEMPT",
        "OUTLIVE_RUN_ID",
    ] {
        assert!(env.contains_key(var), "{var} missing: {env:?}");
    }
    assert_eq!(env["OUTLIVE_ATTEMPT"], "1");
    assert!(!env.contains_key("OUTLIVE_PROGRESS") && !env.contains_key("OUTLIVE_RESUMED_FROM_URL"));
    let control = url::Url::parse(&env["OUTLIVE_CONTROL_URL"]).unwrap();
    let port = control.port().unwrap();
    let host = format!("127.0.0.1:{port}");
    let token_path = control.path().to_owned();
    assert!(
        !token_path.ends_with('/') && token_path.len() > 20,
        "{token_path}"
    );

    // Discovery, as Chromium answers it.
    let (code, body) = http(port, get(&host, "/json/version", "")).await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["webSocketDebuggerUrl"], env["OUTLIVE_CDP_URL"]);
    assert_eq!(http(port, get(&host, "/json/version/", "")).await.0, 200);

    // Checkpoints with progress, holds.
    let cp = format!("{token_path}/checkpoint");
    let (code, body) = http(port, post(&host, &cp, r#"{"step": 1, "note": "é"}"#)).await;
    assert_eq!((code, body.as_str()), (200, r#"{"checkpointed":true}"#));
    assert_eq!(
        http(port, post(&host, &cp, "")).await.0,
        200,
        "no progress is fine"
    );
    let (code, body) = http(port, post(&host, &format!("{token_path}/hold"), "")).await;
    assert_eq!((code, body.as_str()), (200, r#"{"held":1}"#));
    let release = format!("{token_path}/release");
    assert_eq!(
        http(port, post(&host, &release, "")).await,
        (200, r#"{"held":0}"#.into())
    );
    let (code, body) = http(port, post(&host, &release, "")).await;
    assert_eq!(code, 409, "{body}");

    // Refused, with the reason, and the run goes on.
    let cases = [
        (
            post(&host, "/0123456789abcdef0123456789abcdef/checkpoint", "{}"),
            404,
            "no such path",
        ),
        (
            post(&host, &format!("{token_path}/nap"), ""),
            404,
            "unknown control action",
        ),
        (post(&host, &cp, "{not json"), 400, "not JSON"),
        (
            post(
                &host,
                &cp,
                &format!("\"{}\"", "x".repeat(outlive::MAX_PROGRESS_BYTES)),
            ),
            413,
            "bytes",
        ),
        (get(&host, &cp, ""), 405, "POST"),
        (
            get(&host, "/json/version", "Origin: https://evil.example\r\n"),
            403,
            "Origin",
        ),
        (get("evil.example:80", "/json/version", ""), 403, "Host"),
        (
            get(&format!("localhost:{}", port + 1), "/json/version", ""),
            403,
            "Host",
        ),
        (
            get(
                &host,
                url::Url::parse(&env["OUTLIVE_CDP_URL"]).unwrap().path(),
                "Origin: http://127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            ),
            403,
            "Origin",
        ),
        (
            get(
                &host,
                "/devtools/browser/not-the-id",
                "Upgrade: websocket\r\n",
            ),
            404,
            "no such path",
        ),
    ];
    for (request, expected, says) in cases {
        let (code, body) = http(port, request.clone()).await;
        assert_eq!(code, expected, "{request}\n{body}");
        assert!(body.contains(says), "{request}: {body} should say {says}");
    }
    assert_eq!(
        http(port, post(&host, &cp, "[1,2]")).await.0,
        200,
        "still running"
    );

    std::fs::write(tmp.path().join("done"), "").unwrap();
    let code = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap()
        .code();
    assert_eq!(code, Some(0));
    let e: Value = serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).unwrap();
    assert_eq!(e["outcome"], "completed");
    assert!(e["checkpointCount"].as_u64().unwrap() >= 3, "{e}");
    assert_nothing_left(tmp.path());
}

#[tokio::test]
async fn sigterm_ends_the_command_and_the_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display();
    let mut cmd = outlive(tmp.path());
    // The command ignores SIGTERM (and so does its child): only the SIGKILL after
    // --kill-after ends it.
    cmd.args(["run", "--kill-after", "2s", "--", "sh", "-c"])
        .arg(format!(
            "trap '' TERM; env > {d}/env.tmp && mv {d}/env.tmp {d}/env; sleep 300 & wait; sleep 300"
        ));
    let mut child = cmd.spawn().unwrap();
    command_env(tmp.path(), &mut child).await;
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let code = tokio::time::timeout(Duration::from_secs(7), child.wait())
        .await
        .expect("exits within --kill-after + 5 s")
        .unwrap()
        .code();
    assert_eq!(code, Some(143));
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "the kill delay was given"
    );
    assert_nothing_left(tmp.path());
}

/// Posts the same progress to the control URL on every entry, notes each attempt whose
/// checkpoint was written in `sys.argv[1]/saved`, then sleeps until its browser dies. A
/// program started early gets 503 until its browser is served: it asks again.
const SAME_PROGRESS: &str = r#"
import json, os, sys, time, urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
request = urllib.request.Request(
    os.environ["OUTLIVE_CONTROL_URL"] + "/checkpoint",
    data=json.dumps({"step": "signed in"}).encode(),
    headers={"Content-Type": "application/json"},
    method="POST",
)
while True:
    try:
        reply = json.load(opener.open(request, timeout=30))
        break
    except urllib.error.HTTPError as e:
        if e.code != 503:
            raise
        time.sleep(0.1)
if reply.get("checkpointed"):
    with open(os.path.join(sys.argv[1], "saved"), "a") as f:
        f.write(os.environ["OUTLIVE_ATTEMPT"] + "\n")
time.sleep(600)
"#;

#[tokio::test]
async fn the_same_progress_on_every_entry_gives_up_after_max_relaunches() {
    // Sessions die 8 s after creation: time to launch, post, and sleep in each.
    let gw = gateway::spawn(
        gateway::Config::new()
            .lifetime(Duration::from_secs(8))
            .jitter(Duration::ZERO)
            .max_sessions(3),
    )
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let event = tmp.path().join("event.json");
    let mut cmd = outlive(tmp.path());
    cmd.arg("run")
        .args(["--solari-url", gw.base_url()])
        .env("SOLARI_API_KEY", gw.api_key())
        .arg("--event-file")
        .arg(&event)
        .args([
            "--max-relaunches",
            "2",
            "--",
            "python3",
            "-c",
            SAME_PROGRESS,
        ])
        .arg(tmp.path());
    let started = Instant::now();
    let (code, stderr) = status(cmd).await;
    assert_eq!(code, Some(75), "{stderr}");
    assert!(
        stderr.contains(
            "gave up after 3 browser failures in a row without progress (max_relaunches is 2)"
        ),
        "{stderr}"
    );
    // Three deaths in a row: the first entry's save was new, the later ones the same again.
    let e: Value = serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).unwrap();
    assert_eq!(
        (e["outcome"].as_str(), e["attempts"].as_u64()),
        (Some("gave_up"), Some(3))
    );
    let saved = std::fs::read_to_string(tmp.path().join("saved")).unwrap_or_default();
    assert!(
        saved.lines().any(|a| a != "1"),
        "a later entry saved the same progress: {saved:?}\n{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    support::assert_gateway_clean(&gw).await;
    let status = gw.shutdown().await.unwrap();
    assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
    assert_nothing_left(tmp.path());
}
