//! A command as a task: any program, in any language, driving the browser over CDP.
//!
//! [`run_command`] runs the program against a browser outlive owns; when the browser (or its
//! page) fails, outlive closes the program's CDP connection at once, lets the program exit by
//! itself within the grace, else ends its process group (`SIGTERM`, then `SIGKILL` after
//! [`Command::kill_after`]), replaces the browser, restores the checkpoint, and runs the
//! program again with `OUTLIVE_ATTEMPT` + 1. [`serve`] serves the same endpoint with no
//! program, for clients that reconnect by themselves.
//!
//! The program reaches the browser through the front (see `front`): a loopback endpoint that
//! stays at one address for the whole run while browsers come and go. Its own CDP connection
//! is separate from outlive's (Chromium keeps replies, events and sessions per connection), and
//! the isolated worlds outlive's connection creates are held back from it; so the program sees
//! nothing of outlive. This needs a provider whose browsers accept a second CDP connection
//! (local Chromium, Browserless, Browserbase, Steel do; a provider that allows only one
//! refuses the program's).

mod child;
mod filter;
mod front;

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime};

use chromiumoxide::Page;
use tokio::sync::watch;

pub use front::MAX_PROGRESS_BYTES;

use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, RunError};
use crate::options::Options;
use crate::provider::Provider;
use child::{Child, Gone};
use front::Front;

/// The exit status `outlive run` uses when it gave up (`EX_TEMPFAIL`).
pub const EXIT_GAVE_UP: i32 = 75;
/// The exit status for bad options (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// The exit status when the command could not be started (as a shell's).
pub const EXIT_NOT_FOUND: i32 = 127;

/// A program to run as a task, with its arguments and extra environment.
#[derive(Debug, Clone)]
pub struct Command {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    kill_after: Duration,
}

impl Command {
    /// Runs `program` (looked up on `PATH` when it has no slash), with the environment of this
    /// process plus the `OUTLIVE_*` variables.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            kill_after: Duration::from_secs(5),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the program.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// How long the program has to exit after `SIGTERM` before its process group gets
    /// `SIGKILL` (default 5 s).
    pub fn kill_after(mut self, d: Duration) -> Self {
        self.kill_after = d;
        self
    }

    /// The program.
    pub fn program(&self) -> &OsStr {
        &self.program
    }
}

/// Why a command's run failed on the command's side (the browser lived).
#[derive(Debug)]
#[non_exhaustive]
pub enum CommandFailed {
    /// The program exited with this non-zero code while its browser was alive.
    Exited(i32),
    /// The program was killed by this signal while its browser was alive.
    Signalled(i32),
    /// The program could not be started.
    Spawn(std::io::Error),
    /// The run was stopped (`stop` resolved with this signal); the program was ended.
    Stopped(i32),
}

impl CommandFailed {
    /// The exit status a shell would report: the code, 128 + the signal, 127 when the
    /// program could not be started.
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandFailed::Exited(code) => *code,
            CommandFailed::Signalled(sig) | CommandFailed::Stopped(sig) => 128 + sig,
            CommandFailed::Spawn(_) => EXIT_NOT_FOUND,
        }
    }
}

impl std::fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandFailed::Exited(code) => write!(f, "the command exited with status {code}"),
            CommandFailed::Signalled(sig) => write!(f, "the command was killed by signal {sig}"),
            CommandFailed::Spawn(e) => write!(f, "the command could not be started: {e}"),
            CommandFailed::Stopped(sig) => write!(f, "the run was stopped by signal {sig}"),
        }
    }
}

impl std::error::Error for CommandFailed {}

/// The URLs a client of [`serve`] uses.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// `ws://127.0.0.1:PORT/devtools/browser/<id>`: the browser-level CDP websocket.
    pub cdp_url: String,
    /// `http://127.0.0.1:PORT`: answers `GET /json/version`.
    pub cdp_http: String,
    /// `http://127.0.0.1:PORT/<token>`: `POST …/checkpoint`, `…/hold`, `…/release`.
    pub control_url: String,
}

impl Endpoints {
    fn of(front: &Front) -> Self {
        Endpoints {
            cdp_url: front.cdp_url(),
            cdp_http: front.http_url(),
            control_url: front.control_url(),
        }
    }
}

/// Runs `command` as the task: each entry starts it with the `OUTLIVE_*` environment (see the
/// README's table) and waits for it to exit. `Ok(())` when it exits 0.
///
/// `stop` (a signal number, e.g. from `SIGTERM`) ends the run: the program's process group
/// gets that signal, then `SIGKILL` after the kill delay; the run fails with
/// [`CommandFailed::Stopped`]. Every browser is released on every path.
///
/// # Errors
///
/// [`RunError::Task`] with [`CommandFailed`] when the program failed with its browser alive
/// (never retried); [`RunError::Outlive`] when the run gave up or an option was invalid.
pub async fn run_command<P>(
    provider: &P,
    command: &Command,
    options: Options,
    stop: impl Future<Output = i32>,
) -> Result<(), RunError<CommandFailed>>
where
    P: Provider + ?Sized,
{
    let front = Front::start(options.navigation_timeout)
        .await
        .map_err(|e| RunError::Outlive(listen_error(e)))?;
    let endpoints = Endpoints::of(&front);
    let (stop_tx, stop_rx) = watch::channel(None::<i32>);
    let previous = std::sync::Mutex::new(None::<Gone>);
    let run = crate::outlive(
        provider,
        |page, ctx| {
            let (front, endpoints, previous) = (&front, &endpoints, &previous);
            let stop = stop_rx.clone();
            async move { entry(front, endpoints, command, previous, page, ctx, stop).await }
        },
        options,
    );
    let mut run = std::pin::pin!(run);
    tokio::select! {
        r = &mut run => return r,
        sig = stop => { stop_tx.send_replace(Some(sig)); }
    }
    run.await
}

/// Serves the browser at [`Endpoints`] until `stop` resolves: on a death, the client
/// connections are closed, the browser replaced and restored, and served again at the same
/// URLs. `ready` is called once with the URLs, before the first browser is launched.
///
/// # Errors
///
/// [`RunError::Outlive`] when the run gave up or an option was invalid.
pub async fn serve<P>(
    provider: &P,
    options: Options,
    ready: impl FnOnce(&Endpoints),
    stop: impl Future<Output = ()>,
) -> Result<(), RunError<std::convert::Infallible>>
where
    P: Provider + ?Sized,
{
    let front = Front::start(options.navigation_timeout)
        .await
        .map_err(|e| RunError::Outlive(listen_error(e)))?;
    ready(&Endpoints::of(&front));
    let (stop_tx, stop_rx) = watch::channel(false);
    let run = crate::outlive(
        provider,
        |page, ctx| {
            let front = &front;
            let mut stop = stop_rx.clone();
            async move {
                let Some(endpoint) = ctx.link().endpoint.clone() else {
                    return Ok(());
                };
                only_this_page(&endpoint, page.target_id().as_ref()).await;
                let _served = front.serve(endpoint, ctx.clone());
                let _ = stop.wait_for(|s| *s).await;
                Ok(())
            }
        },
        options,
    );
    let mut run = std::pin::pin!(run);
    tokio::select! {
        r = &mut run => return r,
        () = stop => { stop_tx.send_replace(true); }
    }
    run.await
}

fn listen_error(e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        "could not listen on 127.0.0.1 for the command's CDP endpoint",
    )
    .with_source(e)
}

/// One entry: the browser served to the program, the program run until it exits (or the
/// entry is dropped, which ends it).
async fn entry(
    front: &Front,
    endpoints: &Endpoints,
    command: &Command,
    previous: &std::sync::Mutex<Option<Gone>>,
    page: Page,
    ctx: Ctx,
    mut stop: watch::Receiver<Option<i32>>,
) -> Result<(), CommandFailed> {
    // At most one program alive: the last entry's is gone before this one starts.
    let gone = previous.lock().expect("previous poisoned").take();
    if let Some(gone) = gone {
        gone.wait().await;
    }
    if let Some(sig) = *stop.borrow() {
        return Err(CommandFailed::Stopped(sig));
    }
    let Some(endpoint) = ctx.link().endpoint.clone() else {
        return Err(CommandFailed::Spawn(std::io::Error::other(
            "this browser has no CDP endpoint to serve",
        )));
    };
    only_this_page(&endpoint, page.target_id().as_ref()).await;
    let served = front.serve(endpoint, ctx.clone());
    let child = Child::spawn(process(command, endpoints, &ctx), command.kill_after)
        .map_err(CommandFailed::Spawn)?;
    *previous.lock().expect("previous poisoned") = Some(child.gone());
    tracing::info!(attempt = ctx.attempt(), "command started");

    let status = tokio::select! {
        status = child.wait() => status,
        () = ctx.retired() => {
            // The browser or page failed (or the task moves to a successor): the program's
            // connection is closed now, so its pending calls fail; it may still exit by
            // itself within the grace, after which this entry is dropped and it is ended.
            served.stop();
            child.wait().await
        }
        Ok(sig) = stop.wait_for(Option::is_some) => {
            let sig = (*sig).unwrap_or(15);
            served.stop();
            if let Ok(s) = nix::sys::signal::Signal::try_from(sig) {
                child.signal(s);
            }
            let kill_after = command.kill_after;
            if tokio::time::timeout(kill_after, child.wait()).await.is_err() {
                child.terminate().await;
            }
            return Err(CommandFailed::Stopped(sig));
        }
    };
    drop(served);
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(failure(s)),
        None => Err(CommandFailed::Signalled(9)),
    }
}

fn failure(status: ExitStatus) -> CommandFailed {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => CommandFailed::Exited(code),
        (None, Some(sig)) => CommandFailed::Signalled(sig),
        (None, None) => CommandFailed::Exited(1),
    }
}

/// The program with its `OUTLIVE_*` environment.
fn process(command: &Command, endpoints: &Endpoints, ctx: &Ctx) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .env("OUTLIVE_CDP_URL", &endpoints.cdp_url)
        .env("OUTLIVE_CDP_HTTP", &endpoints.cdp_http)
        .env("OUTLIVE_CONTROL_URL", &endpoints.control_url)
        .env("OUTLIVE_ATTEMPT", ctx.attempt().to_string())
        .env("OUTLIVE_RUN_ID", &ctx.link().run_id)
        .env_remove("OUTLIVE_RESUMED_FROM_URL")
        .env_remove("OUTLIVE_RESUMED_FROM_AT")
        .env_remove("OUTLIVE_PROGRESS");
    if let Some(r) = ctx.resumed_from() {
        cmd.env("OUTLIVE_RESUMED_FROM_URL", &r.url)
            .env("OUTLIVE_RESUMED_FROM_AT", rfc3339(r.checkpoint_at));
    }
    if let Some(p) = ctx.progress_json() {
        cmd.env("OUTLIVE_PROGRESS", p);
    }
    cmd.stdin(std::process::Stdio::inherit());
    cmd
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Closes every page but the task's, so the program finds exactly one (a browser starts with
/// a tab of its own; outlive opened another). Best effort: a page left over only means the
/// program sees two.
async fn only_this_page(endpoint: &crate::CdpEndpoint, keep: &str) {
    let closed = tokio::time::timeout(Duration::from_secs(5), close_others(endpoint, keep)).await;
    if !matches!(closed, Ok(Ok(()))) {
        tracing::debug!("could not close the browser's other pages");
    }
}

async fn close_others(endpoint: &crate::CdpEndpoint, keep: &str) -> Result<(), Error> {
    use async_tungstenite::tungstenite::Message;
    use futures::StreamExt;
    let cdp = |e| Error::new(ErrorKind::Cdp, "the browser's other pages").with_source(e);
    let (mut ws, _) = async_tungstenite::tokio::connect_async(endpoint.expose())
        .await
        .map_err(cdp)?;
    ws.send(Message::text(r#"{"id":1,"method":"Target.getTargets"}"#))
        .await
        .map_err(cdp)?;
    let mut pending = 0u32;
    let mut next_id = 2u64;
    while let Some(m) = ws.next().await {
        let Ok(Message::Text(t)) = m else { break };
        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap_or_default();
        match v["id"].as_u64() {
            Some(1) => {
                for target in v["result"]["targetInfos"].as_array().into_iter().flatten() {
                    let id = target["targetId"].as_str().unwrap_or_default();
                    if target["type"] == "page" && id != keep {
                        let close = serde_json::json!({"id": next_id, "method": "Target.closeTarget", "params": {"targetId": id}});
                        next_id += 1;
                        pending += 1;
                        ws.send(Message::text(close.to_string()))
                            .await
                            .map_err(cdp)?;
                    }
                }
                if pending == 0 {
                    break;
                }
            }
            Some(_) => {
                pending -= 1;
                if pending == 0 {
                    break;
                }
            }
            None => {}
        }
    }
    let _ = ws.close(None).await;
    Ok(())
}
