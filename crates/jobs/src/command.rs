//! Tasks that are commands: `outlive worker --task NAME='CMD ARGS…'`. The queue carries only
//! the task's name and its input, never a command line, so writing to the database is not
//! running code on the workers. Each worker runs what it was started with, exactly as
//! `outlive run -- CMD` does ([`outlive::run_command`]), with the input in `OUTLIVE_INPUT`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::{Command, Options, Provider, RunError, WideEvent};
use tokio::sync::watch;

use crate::error::{Error, ErrorKind};
use crate::finish::{Finished, stopped};
use crate::sync::lock;

/// The most bytes a run's input may take, as JSON. Commands get it in one environment variable
/// (`OUTLIVE_INPUT`), and Linux refuses to start a program with one over 128 KiB; a task with
/// more to read should take a reference (a URL, a key) instead.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

/// Parses a task declaration, `NAME=CMD ARGS…`: the name (1 to 64 of `A-Z a-z 0-9 _ . -`),
/// then the command line, split as a POSIX shell would split it (quotes, backslashes; no
/// variables, globs or pipes: for those, declare `sh -c '…'`). The program must be found
/// now, as `execve` would find it.
///
/// # Errors
///
/// [`ErrorKind::InvalidTask`] naming the task and what is wrong.
pub fn parse_task(declaration: &str) -> Result<(String, Command), Error> {
    let invalid = |name: &str, reason: String| {
        Error::new(ErrorKind::InvalidTask {
            name: name.to_owned(),
            reason,
        })
    };
    let Some((name, line)) = declaration.split_once('=') else {
        return Err(invalid(
            declaration,
            "write it as NAME='CMD ARGS…' (no `=` found)".to_owned(),
        ));
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(plain) {
        return Err(invalid(
            name,
            "a task name is 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`".to_owned(),
        ));
    }
    let words = shlex::split(line).ok_or_else(|| {
        invalid(
            name,
            "its command line does not parse (an unclosed quote or a trailing backslash?)"
                .to_owned(),
        )
    })?;
    let Some((program, args)) = words.split_first() else {
        return Err(invalid(name, "its command line is empty".to_owned()));
    };
    let command = Command::new(program).args(args);
    command
        .find_program()
        .map_err(|why| invalid(name, format!("{program}: {why}")))?;
    Ok((name.to_owned(), command))
}

/// Runs `command` as a durable run's task: `OUTLIVE_INPUT` set to `input`, everything else as
/// `outlive run` does it. `stop` ends it (the program's group gets `SIGTERM`, then `SIGKILL`
/// after `kill_after`; every browser is released).
pub(super) async fn run(
    command: &Command,
    input: &serde_json::Value,
    provider: Arc<dyn Provider>,
    options: Options,
    kill_after: Duration,
    stop: watch::Receiver<bool>,
) -> Finished {
    let event: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let slot = event.clone();
    let options = options.on_event(move |e| {
        *lock(&slot) = Some(e.clone());
    });
    let command = command
        .clone()
        .env("OUTLIVE_INPUT", input.to_string())
        .kill_after(kill_after);
    let ran = outlive::run_command(provider.as_ref(), &command, options, async {
        stopped(stop).await;
        15
    })
    .await;
    let result = match ran {
        Ok(()) => Ok(serde_json::json!({ "exitCode": 0 })),
        Err(RunError::Task(failed)) => Err(failed.to_string()),
        Err(RunError::Outlive(e)) => Err(e.to_string()),
    };
    let event = lock(&event).take();
    Finished { result, event }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_is_refused_naming_the_task_and_why() {
        for (declaration, name, says) in [
            ("no-equals-sign", "no-equals-sign", "NAME='CMD"),
            ("=sh -c true", "", "task name"),
            ("bad name=sh", "bad name", "task name"),
            ("t=", "t", "empty"),
            ("t=sh -c 'unclosed", "t", "does not parse"),
            (
                "t=outlive-no-such-program-xyz --flag",
                "t",
                "command not found",
            ),
            ("t=/no/such/dir/prog", "t", "no such executable"),
        ] {
            let e = parse_task(declaration).expect_err(declaration);
            assert!(
                matches!(e.kind(), ErrorKind::InvalidTask { name: n, .. } if n == name),
                "{declaration}: {e:?}"
            );
            assert!(e.to_string().contains(says), "{declaration}: {e}");
        }
    }

    #[test]
    fn a_declaration_is_split_as_a_shell_would() {
        let (name, command) = parse_task(r#"py.task-1=sh -c 'echo "a b"' x\ y"#).unwrap();
        assert_eq!(name, "py.task-1");
        assert_eq!(command.program(), "sh");
        let debug = format!("{command:?}");
        assert!(
            debug.contains(r#""echo \"a b\"""#) && debug.contains(r#""x y""#),
            "{debug}"
        );
    }
}
