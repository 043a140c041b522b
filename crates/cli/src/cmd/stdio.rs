//! `outlive serve --stdio`: the engine's side of a task that runs in the caller's process
//! (the TypeScript and Python packages), as JSON lines: entries and the end on stdout, the
//! task's outcome per entry on stdin. The protocol is in `docs/stdio.md`.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use outlive::{EntryStart, ErrorKind, Provider, RunError, WideEvent};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::RunOptionArgs;
use super::run::EXIT_INTERNAL;
use crate::sync::lock;

/// Exit status when the task failed (threw) with its browser alive.
pub const EXIT_TASK_FAILED: i32 = 1;

/// What the caller said on stdin: each entry's outcome by attempt, and whether it is gone.
#[derive(Debug, Clone, Default, PartialEq)]
struct Heard {
    /// `Ok` when the entry returned, else the message it threw with.
    outcomes: std::collections::BTreeMap<u32, Result<(), String>>,
    /// Stdin closed (the caller is gone) or a signal came: the run ends.
    gone: Option<String>,
}

/// One line of stdin.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Done {
        attempt: u32,
    },
    Failed {
        attempt: u32,
        #[serde(default)]
        error: String,
    },
}

/// Why an entry of the caller's task ended without returning.
#[derive(Debug)]
pub enum TaskEnded {
    /// The task threw; its message.
    Threw(String),
    /// The caller went away.
    Gone(String),
}

impl std::fmt::Display for TaskEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskEnded::Threw(m) | TaskEnded::Gone(m) => f.write_str(m),
        }
    }
}

/// Serves until the run ends; prints its end line and answers the exit status.
/// Options are validated by the run, so that the end line reports a bad one.
pub async fn serve(
    provider: &dyn Provider,
    args: &RunOptionArgs,
    metrics: Option<outlive::Metrics>,
) -> i32 {
    let event = Arc::new(Mutex::new(None::<WideEvent>));
    let slot = event.clone();
    let mut options = args.options_with(move |e| *lock(&slot) = Some(e.clone()));
    if let Some(metrics) = metrics {
        options = options.metrics(metrics);
    }
    let (said_tx, said_rx) = watch::channel(Heard::default());
    let said_tx = Arc::new(said_tx);
    // A thread, not a task: blocking reads of stdin end with the process.
    let reader = said_tx.clone();
    std::thread::spawn(move || read_stdin(&reader));
    let signals = tokio::spawn(async move {
        let sig = super::interrupted().await;
        gone(&said_tx, format!("outlive serve got signal {sig}"));
    });
    let ready = |e: &outlive::Endpoints| {
        emit(&json!({
            "type": "ready",
            "cdpUrl": e.cdp_url,
            "cdpHttp": e.cdp_http,
            "controlUrl": e.control_url,
        }));
    };
    let task = |start: EntryStart| entry(start, said_rx.clone());
    let result = outlive::serve_task(provider, options, ready, task).await;
    signals.abort();
    let event = lock(&event).take();
    let (line, code) = end_line(&result, event.as_ref());
    emit(&line);
    code
}

/// One entry: announced on stdout, then over when the caller says so for its attempt.
async fn entry(start: EntryStart, mut said: watch::Receiver<Heard>) -> Result<(), TaskEnded> {
    emit(&entry_line(&start));
    let attempt = start.attempt;
    let heard = said
        .wait_for(|h| h.outcomes.contains_key(&attempt) || h.gone.is_some())
        .await
        .map(|h| h.clone())
        .unwrap_or_default();
    match (heard.outcomes.get(&attempt), heard.gone) {
        (Some(Ok(())), _) => Ok(()),
        (Some(Err(error)), _) => Err(TaskEnded::Threw(error.clone())),
        (None, why) => Err(TaskEnded::Gone(
            why.unwrap_or_else(|| "outlive serve is ending".into()),
        )),
    }
}

/// The `entry` line: what the entry starts with.
fn entry_line(start: &EntryStart) -> Value {
    let resumed = start.resumed_from.as_ref().map(|r| {
        json!({
            "url": r.url,
            "checkpointAt": humantime::format_rfc3339_millis(r.checkpoint_at).to_string(),
        })
    });
    let progress = start
        .progress
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p).ok());
    json!({
        "type": "entry",
        "runId": start.run_id,
        "attempt": start.attempt,
        "resumedFrom": resumed,
        "progress": progress,
    })
}

/// The `end` line and the exit status, from how the run ended.
fn end_line(result: &Result<(), RunError<TaskEnded>>, event: Option<&WideEvent>) -> (Value, i32) {
    let event = event.map(|e| serde_json::from_str::<Value>(&e.to_json()).unwrap_or_default());
    let (outcome, code, message, option, status) = match result {
        Ok(()) => ("completed", None, None, None, 0),
        Err(RunError::Task(e)) => (
            "failed",
            Some("task_error"),
            Some(e.to_string()),
            None,
            EXIT_TASK_FAILED,
        ),
        Err(RunError::Outlive(e)) => {
            let status = match e.kind() {
                ErrorKind::GaveUp => outlive::EXIT_GAVE_UP,
                ErrorKind::InvalidOption => outlive::EXIT_USAGE,
                _ => EXIT_INTERNAL,
            };
            let outcome = if e.kind() == ErrorKind::GaveUp {
                "gave_up"
            } else {
                "failed"
            };
            (
                outcome,
                Some(e.code()),
                Some(e.to_string()),
                e.option(),
                status,
            )
        }
    };
    let line = json!({
        "type": "end",
        "outcome": outcome,
        "code": code,
        "message": message,
        "option": option,
        "event": event,
    });
    (line, status)
}

/// Reads the caller's lines until stdin closes.
fn read_stdin(said: &watch::Sender<Heard>) {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(Line::Done { attempt }) => heard(said, attempt, Ok(())),
            Ok(Line::Failed { attempt, error }) => heard(said, attempt, Err(error)),
            Err(e) => eprintln!(
                "outlive: ignored a line on stdin that is not the protocol's ({e}); see docs/stdio.md"
            ),
        }
    }
    gone(said, "the caller closed outlive serve's stdin".into());
}

/// Entry `attempt`'s outcome, the first said for it.
fn heard(said: &watch::Sender<Heard>, attempt: u32, outcome: Result<(), String>) {
    said.send_modify(|h| {
        h.outcomes.entry(attempt).or_insert(outcome);
    });
}

/// The caller is gone, for the first reason.
fn gone(said: &watch::Sender<Heard>, why: String) {
    said.send_modify(|h| {
        h.gone.get_or_insert(why);
    });
}

/// One line on stdout, flushed.
fn emit(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_lines_parse() {
        let l: Line = serde_json::from_str(r#"{"type":"done","attempt":2}"#).unwrap();
        assert!(matches!(l, Line::Done { attempt: 2 }));
        let l: Line = serde_json::from_str(r#"{"type":"failed","attempt":1,"error":"x"}"#).unwrap();
        assert!(matches!(l, Line::Failed { attempt: 1, error } if error == "x"));
        assert!(serde_json::from_str::<Line>(r#"{"type":"other"}"#).is_err());
    }

    #[test]
    fn an_outcome_outlasts_the_callers_exit() {
        let (tx, rx) = watch::channel(Heard::default());
        heard(&tx, 2, Ok(()));
        gone(&tx, "bye".into());
        heard(&tx, 2, Err("later".into()));
        gone(&tx, "again".into());
        let h = rx.borrow();
        assert_eq!(h.outcomes.get(&2), Some(&Ok(())));
        assert_eq!(h.gone.as_deref(), Some("bye"));
    }
}
