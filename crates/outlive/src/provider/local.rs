//! [`LocalChromium`]: the embedded default provider, a headless Chromium child process.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use super::contract::{BoxFuture, Provider, Session};
use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};

/// Where Chromium is looked for when `$CHROME` is not set, in order.
const CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
];

/// What every temporary profile directory's name starts with (`outlive-chromium-XXXXXX`).
const PROFILE_PREFIX: &str = "outlive-chromium-";

/// The file in a profile directory that its owner holds locked for as long as it lives.
const OWNER_LOCK: &str = "owner.lock";

/// Flags every launch gets: headless, and quiet on a machine with a closed network.
const BASE_ARGS: &[&str] = &[
    "--headless",
    "--remote-debugging-port=0",
    // The lifeline (fds 3 and 4, see `Lifeline`): Chromium closes itself when fd 3 reads EOF.
    "--remote-debugging-pipe",
    "--remote-debugging-address=127.0.0.1",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    // The crash handler leaves the process group (setsid), out of reach of one kill.
    "--disable-crash-reporter",
    "--disable-breakpad",
    "--password-store=basic",
    "--use-mock-keychain",
];

/// Launches headless Chromium on this machine, one process (group) and one temporary
/// profile per session.
///
/// ```no_run
/// # async fn demo() -> Result<(), outlive::Error> {
/// let provider = outlive::LocalChromium::new();
/// let browser = provider.start().await?; // a LocalBrowser; dropping it kills Chromium
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LocalChromium {
    executable: Option<PathBuf>,
    args: Vec<String>,
    profile_root: Option<PathBuf>,
    launch_timeout: Duration,
}

impl Default for LocalChromium {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalChromium {
    /// A provider with the defaults below.
    pub fn new() -> Self {
        Self {
            executable: None,
            args: Vec::new(),
            profile_root: None,
            launch_timeout: Duration::from_secs(30),
        }
    }

    /// The Chromium (or Chrome) binary to run.
    ///
    /// # Default
    ///
    /// `$CHROME` if set, else the first of `/usr/bin/chromium`, `/usr/bin/chromium-browser`,
    /// `/usr/bin/google-chrome`, `/usr/bin/google-chrome-stable` that exists.
    pub fn executable(mut self, path: impl Into<PathBuf>) -> Self {
        self.executable = Some(path.into());
        self
    }

    /// One more command-line flag for every launch (e.g. `--lang=de`).
    ///
    /// # Default
    ///
    /// Only the built-in flags: headless, no GPU, no background networking, and
    /// `--no-sandbox` when running as root.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The directory the temporary profiles are created in.
    ///
    /// # Default
    ///
    /// The system temp dir (`$TMPDIR` or `/tmp`).
    pub fn profile_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.profile_root = Some(dir.into());
        self
    }

    /// How long a launch may take until Chromium prints its DevTools endpoint.
    ///
    /// # Default
    ///
    /// 30 s.
    pub fn launch_timeout(mut self, timeout: Duration) -> Self {
        self.launch_timeout = timeout;
        self
    }

    /// The binary a launch would run.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Launch`] naming what was tried and how to install Chromium.
    pub fn resolve_executable(&self) -> Result<PathBuf, Error> {
        if let Some(path) = &self.executable {
            return if path.is_file() {
                Ok(path.clone())
            } else {
                Err(Error::new(
                    ErrorKind::Launch,
                    format!(
                        "no Chromium at {} (set by LocalChromium::executable)",
                        path.display()
                    ),
                ))
            };
        }
        if let Some(path) = std::env::var_os("CHROME").filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(Error::new(
                    ErrorKind::Launch,
                    format!("no Chromium at {} (set by $CHROME)", path.display()),
                ))
            };
        }
        CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Launch,
                    format!(
                        "Chromium not found (looked at $CHROME and {}); install it with \
                         `apt-get install -y chromium` or point $CHROME at a Chrome binary",
                        CANDIDATES.join(", ")
                    ),
                )
            })
    }

    /// Starts one headless Chromium and waits for its DevTools endpoint.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Launch`] if the binary is missing, exits early, or does not print its
    /// endpoint within the launch timeout; [`ErrorKind::Io`] if no temp profile can be made.
    /// Whatever was started is killed and removed before the error is returned.
    pub async fn start(&self) -> Result<LocalBrowser, Error> {
        let exe = self.resolve_executable()?;
        let root = self.profile_root.clone().unwrap_or_else(std::env::temp_dir);
        sweep_once(&root).await;
        let (profile, owner) = make_profile(&root)?;
        let mut cmd = self.command(&exe, profile.path());
        let lifeline = Lifeline::attach(&mut cmd).map_err(|e| {
            Error::new(
                ErrorKind::Launch,
                "could not make the pipe that ends Chromium with this process",
            )
            .with_source(e)
        })?;

        let spawned = cmd.spawn();
        // The command holds the browser's ends of the lifeline: this process must not.
        drop(cmd);
        let mut child = spawned.map_err(|e| {
            Error::new(
                ErrorKind::Launch,
                format!("could not start {}", exe.display()),
            )
            .with_source(e)
        })?;
        let pid = child.id().unwrap_or(0);
        let stderr = child.stderr.take().expect("stderr is piped");
        // The reaper owns the child: it waits for the exit and publishes it. It ends by itself
        // once the process is gone, which `LocalBrowser`'s drop makes sure of.
        let (exited_tx, exited) = watch::channel(false);
        crate::quiet::spawn_detached(async move {
            let _ = child.wait().await;
            let _ = exited_tx.send(true);
        });

        // From here on, the browser owns the process: an early return kills it.
        let mut browser = LocalBrowser {
            pgid: Pid::from_raw(pid as i32),
            profile: Some(profile),
            endpoint: None,
            exited,
            drain: None,
            _lifeline: lifeline,
            _owner: owner,
        };
        let mut lines = BufReader::new(stderr).lines();
        let url = self.endpoint_line(&mut lines).await?;
        browser.endpoint = Some(CdpEndpoint::new(url)?);
        // Keep draining stderr so Chromium never blocks on a full pipe; the task ends at EOF,
        // when the process exits, or when the browser is dropped.
        browser.drain = Some(crate::quiet::spawn_detached(async move {
            while let Ok(Some(_)) = lines.next_line().await {}
        }));
        tracing::debug!(pid, profile = %browser.profile_dir().display(), "chromium started");
        Ok(browser)
    }

    /// The command line of one launch whose profile and `TMPDIR` live under `dir`.
    fn command(&self, exe: &Path, dir: &Path) -> Command {
        let mut cmd = Command::new(exe);
        cmd.args(BASE_ARGS)
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .env("TMPDIR", dir.join("tmp"));
        if nix::unistd::geteuid().is_root() {
            cmd.arg("--no-sandbox");
        }
        cmd.args(&self.args)
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so one signal ends the browser and every helper it forked.
            .process_group(0);
        cmd
    }

    /// Reads Chromium's stderr until it prints its DevTools endpoint, within the launch
    /// timeout; answers the endpoint's URL.
    async fn endpoint_line(
        &self,
        lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    ) -> Result<String, Error> {
        let mut tail: Vec<String> = Vec::new();
        let found = tokio::time::timeout(self.launch_timeout, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    return Some(url.trim().to_owned());
                }
                if tail.len() == 5 {
                    tail.remove(0);
                }
                tail.push(line);
            }
            None
        })
        .await;
        match found {
            Ok(Some(url)) => Ok(url),
            Ok(None) => Err(Error::new(
                ErrorKind::Launch,
                format!(
                    "Chromium exited before it printed its DevTools endpoint; its last output: {}",
                    crate::redact::redact(&tail.join(" | "), crate::Diagnostics::Safe)
                ),
            )),
            Err(_) => Err(Error::new(
                ErrorKind::Launch,
                format!(
                    "Chromium did not print its DevTools endpoint within {:?}",
                    self.launch_timeout
                ),
            )),
        }
    }
}

/// A fresh temporary directory under `root` for one browser — its profile (`profile/`) and its
/// own `TMPDIR` (`tmp/`: Chromium puts its process-singleton socket in a fresh
/// `$TMPDIR/org.chromium.*` directory that only a clean exit removes, so a killed browser
/// would leave one behind in /tmp for every death) — claimed by this process.
fn make_profile(root: &Path) -> Result<(tempfile::TempDir, Flock<File>), Error> {
    let io = |what: &'static str| {
        move |e: std::io::Error| Error::new(ErrorKind::Io, what).with_source(e)
    };
    let profile = tempfile::Builder::new()
        .prefix(PROFILE_PREFIX)
        .tempdir_in(root)
        .map_err(io("could not create a temporary Chromium profile"))?;
    let owner =
        claim(profile.path()).map_err(io("could not lock the temporary Chromium profile"))?;
    for dir in ["profile", "tmp"] {
        std::fs::create_dir(profile.path().join(dir))
            .map_err(io("could not create a temporary Chromium profile"))?;
    }
    Ok((profile, owner))
}

impl Provider for LocalChromium {
    fn name(&self) -> &str {
        "local"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
        Box::pin(async move { Ok(Box::new(self.start().await?) as Box<dyn Session>) })
    }
}

/// The pipe that ties a browser's life to this process's: Chromium's DevTools pipe
/// (`--remote-debugging-pipe`, its fds 3 and 4), whose far ends only this value holds.
/// Nothing is sent over it — outlive speaks to the browser over its websocket — but when
/// fd 3 reads end-of-file Chromium closes itself, helpers and all (`CloseBrowserSoon` in
/// Chromium's `devtools_pipe_handler.cc`). That happens when this value is dropped, and
/// when this process dies however it dies: the kernel closes its descriptors even after a
/// `SIGKILL` or the OOM killer, when no `Drop` runs.
///
/// All four descriptors are created close-on-exec; only the browser's two are made
/// inheritable, in the browser's own child process, so no other program this process
/// starts (a command `outlive run` serves) ever holds them.
#[derive(Debug)]
struct Lifeline {
    _to_browser: OwnedFd,
    _from_browser: OwnedFd,
}

impl Lifeline {
    /// Makes the pipes and hands the browser's ends to `cmd` as its fds 3 and 4.
    fn attach(cmd: &mut Command) -> std::io::Result<Lifeline> {
        let (browser_reads, to_browser) = cloexec_pipe()?;
        let (from_browser, browser_writes) = cloexec_pipe()?;
        cmd.fd_mappings(vec![
            FdMapping {
                parent_fd: browser_reads,
                child_fd: 3,
            },
            FdMapping {
                parent_fd: browser_writes,
                child_fd: 4,
            },
        ])
        .map_err(std::io::Error::other)?;
        Ok(Lifeline {
            _to_browser: to_browser,
            _from_browser: from_browser,
        })
    }
}

/// A pipe whose both ends are close-on-exec from their creation (`pipe2`), so no process this
/// one starts meanwhile on another thread inherits them.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) fn cloexec_pipe() -> nix::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
}

/// A pipe made close-on-exec right after its creation (no `pipe2` here): a process another
/// thread starts in between could inherit it, and hold a browser alive as long as it lives.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(crate) fn cloexec_pipe() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    let (read, write) = nix::unistd::pipe()?;
    for fd in [&read, &write] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    Ok((read, write))
}

/// Locks `dir`'s owner file for as long as the returned file is open. The lock is taken on a
/// staging name and then renamed into place, so a sweeper never finds an owner file that is
/// not locked yet.
fn claim(dir: &Path) -> std::io::Result<Flock<File>> {
    let staging = dir.join(format!("{OWNER_LOCK}.new"));
    let file = lock(File::create(&staging)?)?;
    std::fs::rename(&staging, dir.join(OWNER_LOCK))?;
    Ok(file)
}

/// An exclusive `flock` on `file`, without waiting: `WouldBlock` while another holds it.
fn lock(file: File) -> std::io::Result<Flock<File>> {
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| errno.into())
}

/// Sweeps `root` once per process: the first launch under a profile root removes what dead
/// owners left there.
async fn sweep_once(root: &Path) {
    static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    {
        let mut swept = crate::sync::lock(&SWEPT);
        if swept.iter().any(|r| r == root) {
            return;
        }
        swept.push(root.to_owned());
    }
    let root = root.to_owned();
    let removed = tokio::task::spawn_blocking(move || sweep_stale_profiles(&root))
        .await
        .unwrap_or(0);
    if removed > 0 {
        tracing::info!(
            removed,
            "removed temporary Chromium profiles left by dead owners"
        );
    }
}

/// Removes the profile directories under `root` whose owner is gone: their owner file's lock
/// can be taken, which the kernel allows only once the process holding it has ended (however
/// it ended). Directories without an owner file (being created, or made by an older outlive)
/// are left alone. Returns how many were removed.
pub(crate) fn sweep_stale_profiles(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let is_profile = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PROFILE_PREFIX));
        if !is_profile || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        let Ok(owner) = File::open(dir.join(OWNER_LOCK)) else {
            continue;
        };
        // Held: its owner lives. Taken: its owner is dead, and the lock keeps a second
        // sweeper from racing this one until the directory is gone.
        if lock(owner).is_ok() && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A running local Chromium: its process group, its lifeline and its temporary profile.
///
/// Dropping it kills the whole process group with `SIGKILL`, reaps the browser process and
/// removes the profile directory. If this process dies without running any `Drop` (`SIGKILL`,
/// the OOM killer), the browser still ends within moments, through its lifeline pipe, and
/// the profile is removed by the next [`LocalChromium::start`] under the same profile root.
#[derive(Debug)]
pub struct LocalBrowser {
    pgid: Pid,
    profile: Option<tempfile::TempDir>,
    endpoint: Option<CdpEndpoint>,
    exited: watch::Receiver<bool>,
    drain: Option<tokio::task::JoinHandle<()>>,
    _lifeline: Lifeline,
    /// Declared last: the owner lock is let go only after the profile is gone.
    _owner: Flock<File>,
}

impl LocalBrowser {
    /// The browser's DevTools websocket endpoint.
    pub fn endpoint(&self) -> &CdpEndpoint {
        self.endpoint
            .as_ref()
            .expect("set before the browser is handed out")
    }

    /// The browser process's id (also its process-group id).
    pub fn pid(&self) -> u32 {
        self.pgid.as_raw() as u32
    }

    /// The browser's temporary directory (its profile and its `TMPDIR`), removed when the
    /// browser is closed.
    pub fn profile_dir(&self) -> &Path {
        self.profile
            .as_ref()
            .map(|p| p.path())
            .unwrap_or(Path::new(""))
    }

    /// Resolves when the browser process has exited (for whatever reason).
    pub async fn wait_exit(&mut self) {
        let _ = self.exited.wait_for(|exited| *exited).await;
    }

    /// Whether the browser process has exited.
    pub fn has_exited(&self) -> bool {
        *self.exited.borrow()
    }

    /// Sends `SIGKILL` to the whole process group, without waiting.
    ///
    /// Also after the browser process itself has exited: its helpers may still be alive, and
    /// a group id cannot be reused while any member lives.
    pub fn kill(&mut self) {
        if self.pgid.as_raw() > 0 && self.profile.is_some() {
            // ESRCH (the group is gone) is the only expected failure and is fine.
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }

    /// Kills the browser, waits for it to exit, and removes its profile.
    pub async fn close(mut self) -> Result<(), Error> {
        self.kill();
        self.wait_exit().await;
        self.remove_profile()
    }

    fn remove_profile(&mut self) -> Result<(), Error> {
        match self.profile.take() {
            Some(dir) => {
                let path = dir.path().to_owned();
                dir.close().map_err(|e| {
                    Error::new(
                        ErrorKind::Release,
                        format!("could not remove the Chromium profile {}", path.display()),
                    )
                    .with_source(e)
                })
            }
            None => Ok(()),
        }
    }
}

impl Drop for LocalBrowser {
    fn drop(&mut self) {
        self.kill();
        if let Some(drain) = self.drain.take() {
            drain.abort();
        }
        // A SIGKILLed process runs no more user code, so the profile can go now; retry in case
        // a file operation that was already in the kernel lands after the first pass.
        if let Some(dir) = self.profile.take() {
            let path = dir.keep();
            for _ in 0..20 {
                match std::fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Session for LocalBrowser {
    fn endpoint(&self) -> &CdpEndpoint {
        LocalBrowser::endpoint(self)
    }

    fn exited(&self) -> BoxFuture<'static, ()> {
        let mut exited = self.exited.clone();
        Box::pin(async move {
            let _ = exited.wait_for(|e| *e).await;
        })
    }

    fn pid(&self) -> Option<u32> {
        Some(LocalBrowser::pid(self))
    }

    fn second_connection(&self) -> bool {
        true
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move { (*self).close().await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(root: &Path, name: &str) -> PathBuf {
        let dir = root.join(format!("{PROFILE_PREFIX}{name}"));
        std::fs::create_dir_all(dir.join("profile")).unwrap();
        dir
    }

    #[test]
    fn the_sweep_removes_only_profiles_whose_owner_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let live = profile(root.path(), "live");
        let held = claim(&live).unwrap();
        let dead = profile(root.path(), "dead");
        drop(claim(&dead).unwrap());
        // No owner file: being created, or an older outlive's. Not ours to judge.
        let unowned = profile(root.path(), "unowned");
        let other = root.path().join("something-else");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(OWNER_LOCK), "").unwrap();

        assert_eq!(sweep_stale_profiles(root.path()), 1);
        assert!(live.exists() && !dead.exists() && unowned.exists() && other.exists());

        drop(held);
        assert_eq!(sweep_stale_profiles(root.path()), 1);
        assert!(!live.exists());
    }

    #[test]
    fn the_owner_file_is_never_seen_unlocked() {
        let root = tempfile::tempdir().unwrap();
        let dir = profile(root.path(), "x");
        let _held = claim(&dir).unwrap();
        assert!(!dir.join(format!("{OWNER_LOCK}.new")).exists());
        let f = File::open(dir.join(OWNER_LOCK)).unwrap();
        assert!(lock(f).is_err(), "locked under its final name");
    }
}
