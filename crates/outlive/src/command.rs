//! A command as a task: any program, in any language, driving the browser over CDP.
//!
//! [`run_command`] runs the program against a browser outlive owns. When the browser (or its
//! page) fails, outlive closes the program's CDP connection at once and lets it exit within the
//! grace, else ends its process group (`SIGTERM`, then `SIGKILL` after [`Command::kill_after`]).
//! Then it replaces the browser, restores the checkpoint, and runs the program again with
//! `OUTLIVE_ATTEMPT` + 1. [`serve`] serves the same endpoint with no program, for clients that
//! reconnect by themselves. The program connects through the front (see `front`), a loopback
//! endpoint at one address for the whole run, on a CDP connection of its own. The provider's
//! browsers must accept a second one. How it stays invisible: `docs/run-and-serve.md`.

mod child;
mod pages;

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chromiumoxide::Page;
use tokio::sync::watch;

use crate::browser::CdpBackend;
use crate::ctx::{Ctx, ResumedFrom};
use crate::error::{Error, ErrorKind, RunError};
use crate::front::{Client, Front};
use crate::options::Options;
use crate::provider::Provider;
use crate::sync::lock;
use child::{Child, Gone};

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

    /// Finds the program as `execve` would: a path with a slash as is, else the first
    /// executable file of that name on `PATH`. Lets a caller refuse a missing program before
    /// anything is launched.
    ///
    /// # Errors
    ///
    /// Why not, in a few words: "empty command", "no such executable file" (a path),
    /// "command not found" (a name).
    pub fn find_program(&self) -> Result<std::path::PathBuf, &'static str> {
        use std::os::unix::fs::PermissionsExt;
        use std::path::Path;
        let program = Path::new(&self.program);
        let executable = |p: &Path| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.as_os_str().is_empty() {
            return Err("empty command");
        }
        if program.components().count() > 1 || program.is_absolute() {
            return if executable(program) {
                Ok(program.to_owned())
            } else {
                Err("no such executable file")
            };
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
            .ok_or("command not found")
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
    let client = Client::of_a_command();
    let front = start_front(&options, &client).await?;
    let endpoints = Endpoints::of(&front);
    let (stop_tx, stop_rx) = watch::channel(None::<i32>);
    let programs = Programs::default();
    let run = outlive_for(
        provider,
        client,
        |page, ctx| {
            let (front, endpoints, programs) = (&front, &endpoints, &programs);
            let stop = stop_rx.clone();
            async move { entry(front, endpoints, command, programs, page, ctx, stop).await }
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
/// A browser a client sent a command to counts as progress for the budget (agents that
/// reconnect by themselves never call the control URL), so `max_relaunches` counts deaths
/// in a row with no client at work; `max_sessions` caps the whole run.
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
    let client = Client::served();
    let usage = client.usage.clone();
    let front = start_front(&options, &client).await?;
    ready(&Endpoints::of(&front));
    let (stop_tx, stop_rx) = watch::channel(false);
    let run = outlive_for(
        provider,
        client,
        |page, ctx| {
            let (front, usage) = (&front, &usage);
            let mut stop = stop_rx.clone();
            async move {
                let Some(endpoint) = ctx.link().endpoint.clone() else {
                    return Ok(());
                };
                // The task's page and the client's tabs reopened after it.
                let mut keep = usage.tab_order(endpoint.expose());
                keep.push(page.target_id().as_ref().to_owned());
                pages::only_these(&endpoint, &keep).await;
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

/// Serves the browser at [`Endpoints`] to a task running in another process (a TypeScript
/// or Python program that connects its own client), and runs the task's side of the run
/// loop through `task`. `ready` is called once with the URLs, before the first browser is
/// launched.
///
/// For each entry, once its browser is restored and served, `task` is called with what the
/// entry starts with; the future it returns stands for that entry of the foreign task:
/// `Ok(())` when the task returned, `Err` when it threw. An `Err` while the browser or page
/// failed is that failure (a relaunch, and `task` again with the next attempt); otherwise it
/// ends the run with [`RunError::Task`]. Budgets are those of [`run_command`].
///
/// # Errors
///
/// [`RunError::Task`] with the task's error; [`RunError::Outlive`] when the run gave up or an
/// option was invalid (before anything is launched).
pub async fn serve_task<P, F, Fut, E>(
    provider: &P,
    options: Options,
    ready: impl FnOnce(&Endpoints),
    task: F,
) -> Result<(), RunError<E>>
where
    P: Provider + ?Sized,
    F: FnMut(EntryStart) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let client = Client::of_a_command();
    let front = start_front(&options, &client).await?;
    ready(&Endpoints::of(&front));
    // Called by one entry at a time, once its browser is served.
    let task = std::sync::Mutex::new(task);
    outlive_for(
        provider,
        client,
        |page, ctx| {
            let (front, task) = (&front, &task);
            async move {
                // Every real backend has an endpoint; without one, the client finds no browser.
                let mut _served = None;
                if let Some(endpoint) = ctx.link().endpoint.clone() {
                    pages::only_these(&endpoint, &[page.target_id().as_ref().to_owned()]).await;
                    _served = Some(front.serve(endpoint, ctx.clone()));
                }
                let entry = (lock(task))(EntryStart::of(&ctx));
                entry.await
            }
        },
        options,
    )
    .await
}

/// [`crate::outlive()`] for a task that serves its browser to `client`: the backend knows
/// the client, so the capture reads what it does and its use may count as progress.
async fn outlive_for<P, F, Fut, T, E>(
    provider: &P,
    client: Client,
    task: F,
    options: Options,
) -> Result<T, RunError<E>>
where
    P: Provider + ?Sized,
    F: FnMut(Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let backend = CdpBackend::new(provider).with_client(client);
    crate::quiet::quietly(crate::run::run(&backend, task, &options)).await
}

/// The front for `client`, listening; a client waits for a browser up to the navigation cap.
async fn start_front<E>(options: &Options, client: &Client) -> Result<Front, RunError<E>> {
    let carry = options.carry_clients && client.usage.reopens_tabs();
    Front::start(options.navigation_timeout, client.usage.clone(), carry)
        .await
        .map_err(|e| {
            let why = "could not listen on 127.0.0.1 for the command's CDP endpoint";
            RunError::Outlive(Error::new(ErrorKind::Io, why).with_source(e))
        })
}

/// What an entry of a task in another process starts with: a program's `OUTLIVE_*`
/// variables, or what [`serve_task`] hands its task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryStart {
    /// The run's random id.
    pub run_id: String,
    /// 1 on the first entry, 2 after the first relaunch (or page recovery, or rotation), …
    pub attempt: u32,
    /// The checkpoint restored into this entry's browser, if any.
    pub resumed_from: Option<ResumedFrom>,
    /// The progress the newest checkpoint holds (JSON), if any.
    pub progress: Option<String>,
}

impl EntryStart {
    fn of(ctx: &Ctx) -> EntryStart {
        EntryStart {
            run_id: ctx.link().run_id.clone(),
            attempt: ctx.attempt(),
            resumed_from: ctx.resumed_from().cloned(),
            progress: ctx.progress_json().map(str::to_owned),
        }
    }

    /// What the entry after `ctx`'s will start with, if `ctx`'s is cut now.
    fn after(ctx: &Ctx) -> EntryStart {
        let (resumed_from, progress) = ctx.next_resume();
        EntryStart {
            run_id: ctx.link().run_id.clone(),
            attempt: ctx.attempt() + 1,
            resumed_from,
            progress: progress.map(|p| p.as_str().to_owned()),
        }
    }
}

/// The run's programs: the last one started (gone before the next starts), and the next one,
/// started early.
#[derive(Default)]
struct Programs {
    last: std::sync::Mutex<Option<Gone>>,
    /// Started as soon as a cut entry's program was gone, for the entry expected next: its
    /// start-up (an interpreter, a driver) overlaps the replacement browser's launch and
    /// restore; its client waits at the endpoint for the browser to be served.
    early: Arc<std::sync::Mutex<Option<(EntryStart, Child)>>>,
    /// The task starting it, owned: it ends with the run.
    starter: std::sync::Mutex<Option<tokio_util::task::AbortOnDropHandle<()>>>,
}

impl Programs {
    /// The program for `start`: the one started early if it was started for exactly that,
    /// else a fresh one, once the last is gone.
    async fn take(
        &self,
        command: &Command,
        endpoints: &Endpoints,
        start: &EntryStart,
    ) -> std::io::Result<Child> {
        let early = lock(&self.early).take();
        match early {
            Some((s, child)) if &s == start => {
                *lock(&self.last) = Some(child.gone());
                return Ok(child);
            }
            Some((_, child)) => drop(child.terminate().await),
            None => {}
        }
        lock(&self.starter).take();
        let last = lock(&self.last).take();
        if let Some(gone) = last {
            gone.wait().await;
        }
        let child = Child::spawn(process(command, endpoints, start), command.kill_after)?;
        *lock(&self.last) = Some(child.gone());
        Ok(child)
    }

    /// After `ctx`'s entry was cut: once its program is gone, starts the next one early.
    fn start_next(&self, command: &Command, endpoints: &Endpoints, ctx: &Ctx) {
        let start = EntryStart::after(ctx);
        let last = lock(&self.last).clone();
        let (cmd, kill_after) = (process(command, endpoints, &start), command.kill_after);
        let early = self.early.clone();
        let task = crate::quiet::spawn(async move {
            if let Some(gone) = last {
                gone.wait().await;
            }
            if let Ok(child) = Child::spawn(cmd, kill_after) {
                tracing::debug!(attempt = start.attempt, "the next command started early");
                *lock(&early) = Some((start, child));
            }
        });
        *lock(&self.starter) = Some(tokio_util::task::AbortOnDropHandle::new(task));
    }
}

/// One entry: the browser served to the program, the program run until it exits (or the
/// entry is dropped, which ends it).
async fn entry(
    front: &Front,
    endpoints: &Endpoints,
    command: &Command,
    programs: &Programs,
    page: Page,
    ctx: Ctx,
    mut stop: watch::Receiver<Option<i32>>,
) -> Result<(), CommandFailed> {
    if let Some(sig) = *stop.borrow() {
        return Err(CommandFailed::Stopped(sig));
    }
    let Some(endpoint) = ctx.link().endpoint.clone() else {
        return Err(CommandFailed::Spawn(std::io::Error::other(
            "this browser has no CDP endpoint to serve",
        )));
    };
    pages::only_these(&endpoint, &[page.target_id().as_ref().to_owned()]).await;
    let served = front.serve(endpoint, ctx.clone());
    // At most one program alive: the last entry's is gone before this one starts.
    let child = programs
        .take(command, endpoints, &EntryStart::of(&ctx))
        .await
        .map_err(CommandFailed::Spawn)?;
    tracing::info!(attempt = ctx.attempt(), "command started");

    let status = tokio::select! {
        status = child.wait() => status,
        () = ctx.retired() => {
            // The browser or page failed (or the task moves to a successor): the program's
            // connection is closed now, so its pending calls fail. It may still exit by
            // itself within the grace, after which this entry is dropped and it is ended.
            // The next entry's program starts as soon as this one is gone.
            served.stop();
            programs.start_next(command, endpoints, &ctx);
            child.wait().await
        }
        // The watch's guard is let go of at once: held across an await, it would make the
        // run a future that cannot move between threads.
        Ok(sig) = async { stop.wait_for(Option::is_some).await.map(|s| (*s).unwrap_or(15)) } => {
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
fn process(
    command: &Command,
    endpoints: &Endpoints,
    start: &EntryStart,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .env("OUTLIVE_CDP_URL", &endpoints.cdp_url)
        .env("OUTLIVE_CDP_HTTP", &endpoints.cdp_http)
        .env("OUTLIVE_CONTROL_URL", &endpoints.control_url)
        .env("OUTLIVE_ATTEMPT", start.attempt.to_string())
        .env("OUTLIVE_RUN_ID", &start.run_id)
        .env_remove("OUTLIVE_RESUMED_FROM_URL")
        .env_remove("OUTLIVE_RESUMED_FROM_AT")
        .env_remove("OUTLIVE_PROGRESS");
    if let Some(r) = &start.resumed_from {
        cmd.env("OUTLIVE_RESUMED_FROM_URL", &r.url)
            .env("OUTLIVE_RESUMED_FROM_AT", rfc3339(r.checkpoint_at));
    }
    if let Some(p) = &start.progress {
        cmd.env("OUTLIVE_PROGRESS", p);
    }
    cmd.stdin(std::process::Stdio::inherit());
    cmd
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}
