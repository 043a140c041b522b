//! `outlive serve --stdio`, the protocol the TypeScript and Python packages speak
//! (docs/stdio.md), driven line by line over the gateway. Entries are announced with their
//! attempt and resume point; the task's outcome comes from stdin (a stale attempt's is
//! ignored). Each end of a run has its wide event, its exit status and nothing left: completed,
//! the task's failure, gave up, a bad option before any launch, the caller gone.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// `outlive serve --stdio` on the gateway, its stdout read line by line.
struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Served {
    fn start(gw: &gateway::Gateway, flags: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["serve", "--stdio", "--solari-url", gw.base_url()])
            .args(flags)
            .env("SOLARI_API_KEY", gw.api_key())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Served {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The next line, which must be of `kind`.
    async fn next(&mut self, kind: &str) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no `{kind}` line in 60 s"))
            .unwrap()
            .unwrap_or_else(|| panic!("stdout closed before a `{kind}` line"));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], kind, "{v}");
        v
    }

    async fn say(&mut self, line: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    async fn exit_code(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        status.expect("exited").unwrap().code()
    }
}

/// `POST url` with a JSON body, as a client of the control URL; answers the reply's JSON.
async fn post(url: &str, body: &str) -> Value {
    use tokio::io::AsyncReadExt;
    let url = url::Url::parse(url).unwrap();
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        url.path(),
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (_, json) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(json).unwrap()
}

fn gateway_config(lifetime: Duration) -> gateway::Config {
    gateway::Config::new()
        .lifetime(lifetime)
        .jitter(Duration::ZERO)
        .max_sessions(3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_from_ready_to_end_on_every_path() {
    let gw = gateway::spawn(gateway_config(Duration::from_secs(4)))
        .await
        .unwrap();

    // A bad option: refused by the run, before any launch, with the option's name.
    let mut s = Served::start(&gw, &["--checkpoint-every", "0s"]);
    s.next("ready").await;
    let end = s.next("end").await;
    assert_eq!(
        (&end["code"], &end["option"]),
        (&json!("invalid_option"), &json!("checkpoint_every"))
    );
    assert_eq!(end["event"]["attempts"], 0, "{end}");
    assert_eq!(s.exit_code().await, Some(outlive::EXIT_USAGE));
    assert_eq!(gw.status().peak_sessions, 0, "nothing launched");

    // Completed after a death: entry 2 resumes; a stale attempt's outcome is ignored.
    let mut s = Served::start(&gw, &[]);
    let ready = s.next("ready").await;
    let control = ready["controlUrl"].as_str().unwrap().to_owned();
    let first = s.next("entry").await;
    assert_eq!(
        (&first["attempt"], &first["resumedFrom"]),
        (&json!(1), &Value::Null)
    );
    let checkpointed = post(&format!("{control}/checkpoint"), r#"{"step":1}"#).await;
    assert_eq!(checkpointed["checkpointed"], true);
    let second = s.next("entry").await; // the session died at 4 s
    assert_eq!(second["attempt"], 2, "{second}");
    assert_eq!(second["progress"], json!({"step": 1}));
    assert!(
        second["resumedFrom"]["checkpointAt"].is_string(),
        "{second}"
    );
    s.say(json!({"type": "failed", "attempt": 1, "error": "stale"}))
        .await;
    s.say(json!({"type": "done", "attempt": 2})).await;
    let end = s.next("end").await;
    assert_eq!(
        (&end["outcome"], &end["code"]),
        (&json!("completed"), &Value::Null)
    );
    assert_eq!(end["event"]["attempts"], 2, "{end}");
    assert!(end["event"]["relaunches"].as_u64() >= Some(1), "{end}");
    assert_eq!(s.exit_code().await, Some(0));

    // The task threw with its browser alive: the run fails with its message.
    let mut s = Served::start(&gw, &[]);
    s.next("ready").await;
    s.next("entry").await;
    s.say(json!({"type": "failed", "attempt": 1, "error": "TypeError: boom"}))
        .await;
    let end = s.next("end").await;
    assert_eq!(
        (&end["outcome"], &end["code"]),
        (&json!("failed"), &json!("task_error"))
    );
    assert_eq!(end["event"]["error"], "TypeError: boom", "{end}");
    assert_eq!(s.exit_code().await, Some(1));

    // No relaunch allowed: the first death gives up.
    let mut s = Served::start(&gw, &["--max-relaunches", "0"]);
    s.next("ready").await;
    s.next("entry").await;
    let end = s.next("end").await;
    assert_eq!(
        (&end["outcome"], &end["code"]),
        (&json!("gave_up"), &json!("gave_up"))
    );
    assert_eq!(end["event"]["outcome"], "gave_up");
    assert_eq!(s.exit_code().await, Some(outlive::EXIT_GAVE_UP));

    // The caller is gone (stdin closed): the run ends, its browser released.
    let mut s = Served::start(&gw, &[]);
    s.next("ready").await;
    s.next("entry").await;
    drop(s.stdin.take());
    let end = s.next("end").await;
    assert_eq!(end["outcome"], "failed", "{end}");
    assert_eq!(s.exit_code().await, Some(1));

    support::assert_gateway_clean(&gw).await;
    let status = gw.shutdown().await.unwrap();
    assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
}
