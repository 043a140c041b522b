//! [`ProviderCommand`]: a provider in any language. A program prints one JSON line,
//! `{"cdpUrl": …, "id": …, "lifetimeMs"?: …}`, to launch a browser; run again with
//! `release ID`, it releases that session. Each run is bounded by a timeout, runs in a
//! process group of its own, and that group is killed when the run ends, however it ends.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::contract::{BoxFuture, ByIdSession, Provider, Session};
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};
use crate::redact::{Diagnostics, redact, redact_tail};

/// How much of the end of a program's stderr is scrubbed; the error keeps the last
/// [`crate::redact::MAX_LEN`] characters of it (the end is where the reason usually is).
const STDERR_SCRUBBED: usize = 16 * 1024;

/// A provider that is a program: `PROG ARGS…` launches, `PROG ARGS… release ID` releases.
///
/// Launch prints one JSON line on stdout (the last non-empty line counts, so a program may log
/// before it), exits 0, and within [`launch_timeout`](Self::launch_timeout):
///
/// ```text
/// {"cdpUrl": "wss://…", "id": "the session's id", "lifetimeMs": 600000}
/// ```
///
/// `lifetimeMs` is optional: given, rotation leaves each browser before it (see
/// [`Session::lifetime`]). Release exits 0 once the session is gone. A failure of either is an
/// error naming the program, with the end of its stderr, redacted. Whatever the program
/// started is killed when it exits: a helper that must outlive it must leave its process
/// group (`setsid`).
///
/// ```no_run
/// let provider = outlive::ProviderCommand::new("./my-provider.sh").args(["--region", "eu"]);
/// ```
#[derive(Debug, Clone)]
pub struct ProviderCommand {
    inner: Arc<Program>,
}

#[derive(Clone)]
struct Program {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    launch_timeout: Duration,
    release_timeout: Duration,
}

impl ProviderCommand {
    /// Runs `program` (found on `PATH` as `execve` would) to launch and release browsers.
    pub fn new(program: impl Into<OsString>) -> Self {
        ProviderCommand {
            inner: Arc::new(Program {
                program: program.into(),
                args: Vec::new(),
                env: Vec::new(),
                launch_timeout: Duration::from_secs(120),
                release_timeout: Duration::from_secs(30),
            }),
        }
    }

    /// Arguments before the launch (none) or `release ID`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Arc::make_mut(&mut self.inner)
            .args
            .extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets `key` to `value` in the program's environment (it inherits this process's).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        Arc::make_mut(&mut self.inner)
            .env
            .push((key.into(), value.into()));
        self
    }

    /// The program, as given.
    pub fn program(&self) -> &std::ffi::OsStr {
        &self.inner.program
    }
}

impl ProviderCommand {
    /// How long a launch may take before the program is killed and the launch fails.
    ///
    /// # Default
    ///
    /// 120 s.
    pub fn launch_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.inner).launch_timeout = timeout;
        self
    }

    /// How long a release may take before the program is killed and the release fails.
    ///
    /// # Default
    ///
    /// 30 s.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.inner).release_timeout = timeout;
        self
    }
}

// Neither the arguments nor the environment's values: either may hold a key.
impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(k, _)| k).collect();
        f.debug_struct("ProviderCommand")
            .field("program", &self.name())
            .field("env", &env)
            .field("launch_timeout", &self.launch_timeout)
            .field("release_timeout", &self.release_timeout)
            .finish_non_exhaustive()
    }
}

/// What a launch prints.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Launched {
    cdp_url: String,
    id: String,
    #[serde(default)]
    lifetime_ms: Option<u64>,
}

/// How one run of the program went wrong.
enum Failure {
    Spawn(std::io::Error),
    Exit(std::process::ExitStatus, String),
    Timeout(Duration),
}

impl Program {
    /// The program's name for errors (not its arguments), redacted.
    fn name(&self) -> String {
        let program = self.program.to_string_lossy();
        redact(&program, Diagnostics::Safe)
    }

    /// Runs the program with `extra` arguments after its own, within `timeout`; answers its
    /// stdout. Its process group is killed when this returns or is dropped.
    async fn run(&self, extra: &[&str], timeout: Duration) -> Result<Vec<u8>, Failure> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .args(extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().map_err(Failure::Spawn)?;
        let _group = child.id().map(Group);
        match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Err(_) => Err(Failure::Timeout(timeout)),
            Ok(Err(e)) => Err(Failure::Spawn(e)),
            Ok(Ok(out)) if out.status.success() => Ok(out.stdout),
            Ok(Ok(out)) => Err(Failure::Exit(out.status, stderr_tail(&out.stderr))),
        }
    }

    /// The error of a failed run, of `kind`, while doing `what` (`launching`, …).
    fn error(&self, kind: ErrorKind, what: &str, failure: Failure) -> Error {
        let name = self.name();
        let message = match failure {
            Failure::Spawn(e) => format!(
                "the provider command `{name}` could not be run {what}: {e}; check that it \
                 exists and is executable"
            ),
            Failure::Exit(status, stderr) => format!(
                "the provider command `{name}` failed {what} ({status}); its stderr: {stderr}"
            ),
            Failure::Timeout(t) => format!(
                "the provider command `{name}` did not finish {what} within {t:?}: it was \
                 killed, with everything it started"
            ),
        };
        Error::new(kind, message)
    }

    async fn launch(self: &Arc<Self>) -> Result<ByIdSession<ProviderCommand>, Error> {
        let stdout = self
            .run(&[], self.launch_timeout)
            .await
            .map_err(|f| self.error(ErrorKind::Launch, "launching a browser", f))?;
        let launched = parse_launched(&stdout).map_err(|why| {
            Error::new(
                ErrorKind::Launch,
                format!(
                    "the provider command `{}` exited 0 but {why}; print one line \
                     {{\"cdpUrl\": \"ws://…\", \"id\": \"…\", \"lifetimeMs\": 600000}} (lifetimeMs \
                     optional)",
                    self.name()
                ),
            )
        })?;
        let mut session = ByIdSession::new(
            ProviderCommand {
                inner: self.clone(),
            },
            launched.id,
            launched.lifetime_ms.map(Duration::from_millis),
        );
        // From here the session exists: a bad URL drops it, and the drop releases it.
        session.endpoint = Some(CdpEndpoint::new(launched.cdp_url)?);
        Ok(session)
    }

    async fn release(&self, id: &str) -> Result<(), Error> {
        self.run(&["release", id], self.release_timeout)
            .await
            .map(drop)
            .map_err(|f| {
                self.error(
                    ErrorKind::Release,
                    &format!("releasing session {}", redact(id, Diagnostics::Safe)),
                    f,
                )
            })
    }
}

/// The launch's JSON line, or why there is none (never quoting it: it holds a URL's token).
fn parse_launched(stdout: &[u8]) -> Result<Launched, String> {
    let text = String::from_utf8_lossy(stdout);
    let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Err("printed nothing".to_owned());
    };
    let launched: Launched = serde_json::from_str(line.trim()).map_err(|e| {
        format!(
            "its last line is not the JSON expected ({})",
            redact(&e.to_string(), Diagnostics::Safe)
        )
    })?;
    if launched.id.is_empty() {
        return Err("printed an empty `id`".to_owned());
    }
    Ok(launched)
}

/// The end of a program's stderr, redacted, on one line.
fn stderr_tail(stderr: &[u8]) -> String {
    // Scrub a bounded end, wider than what is kept, so a secret is seen whole before the cut.
    let from = stderr.len().saturating_sub(STDERR_SCRUBBED);
    let text = String::from_utf8_lossy(&stderr[from..]);
    let text = text.trim();
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    redact_tail(&text.replace('\n', " | "), Diagnostics::Safe)
}

/// A process group, killed when dropped (a no-op once it is empty).
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.0) else {
            return;
        };
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl Provider for ProviderCommand {
    fn name(&self) -> &str {
        "command"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
        Box::pin(async move {
            let session = self.inner.launch().await?;
            Ok(Box::new(session) as Box<dyn Session>)
        })
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), Error>> {
        let id = id.to_owned();
        Box::pin(async move { self.inner.release(&id).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_is_the_launch() {
        let l = parse_launched(b"starting\n{\"cdpUrl\":\"ws://h/x\",\"id\":\"a\"}\n\n").unwrap();
        assert_eq!((l.id.as_str(), l.lifetime_ms), ("a", None));
        let l = parse_launched(br#"{"cdpUrl":"ws://h/x","id":"b","lifetimeMs":5000}"#).unwrap();
        assert_eq!(l.lifetime_ms, Some(5000));
        for bad in [
            &b""[..],
            b"garbage",
            br#"{"cdpUrl":"ws://h/x"}"#,
            br#"{"cdpUrl":"ws://h/x","id":""}"#,
        ] {
            assert!(
                parse_launched(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // The reason never quotes the line (it may hold a token).
        let why = parse_launched(br#"{"cdpUrl":"ws://h/?token=s3cret"}"#)
            .err()
            .unwrap();
        assert!(!why.contains("s3cret"), "{why}");
    }

    #[test]
    fn stderr_is_cut_to_its_end() {
        let long = "x".repeat(50_000) + "\napi_key=sk_live_0123456789\nthe reason";
        let tail = stderr_tail(long.as_bytes());
        assert!(tail.ends_with("api_key=[redacted] | the reason"), "{tail}");
        assert!(tail.starts_with('…'), "{tail}");
        assert_eq!(tail.chars().count(), crate::redact::MAX_LEN);
        assert_eq!(stderr_tail(b"  \n"), "(empty)");
    }
}
