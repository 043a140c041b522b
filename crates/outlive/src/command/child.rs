//! The command's process, started in a process group of its own. One signal then reaches it
//! and everything it started (Playwright's driver, a shell's children). Its owner ends it
//! (`SIGTERM`, then `SIGKILL` after the kill delay) however it lets go of it. That holds even
//! when the owner is killed and no `Drop` runs (see [`Guard`]).

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::watch;

/// A running command. Dropping it ends the whole process group: `SIGTERM` at once, `SIGKILL`
/// `kill_after` later if anything of it is still there.
#[derive(Debug)]
pub(crate) struct Child {
    pgid: Pid,
    /// The exit status, once the process (the group's leader) is gone.
    exited: watch::Receiver<Option<ExitStatus>>,
    kill_after: Duration,
    /// Ends the group if this process dies first; `None` where no `sh` could be started.
    _guard: Option<Guard>,
}

impl Child {
    /// Starts `cmd` as the leader of a new process group.
    pub(crate) fn spawn(mut cmd: Command, kill_after: Duration) -> std::io::Result<Child> {
        cmd.process_group(0).kill_on_drop(false);
        let mut child = cmd.spawn()?;
        let pid = child.id().expect("a freshly spawned child has a pid");
        let (tx, exited) = watch::channel(None);
        // The reaper owns the tokio child: it publishes the status, so the zombie is reaped
        // whoever waits.
        tokio::spawn(async move {
            let status = child.wait().await.ok();
            let _ = tx.send(status);
        });
        let pgid = Pid::from_raw(pid as i32);
        let guard = Guard::spawn(pgid, kill_after)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no guard for the command (it needs a POSIX sh at /bin/sh): if this process is killed, the command may outlive it");
            })
            .ok();
        Ok(Child {
            pgid,
            exited,
            kill_after,
            _guard: guard,
        })
    }

    /// Waits for the process to exit. Cancel-safe.
    pub(crate) async fn wait(&self) -> Option<ExitStatus> {
        let mut exited = self.exited.clone();
        match exited.wait_for(Option::is_some).await {
            Ok(status) => *status,
            Err(_) => None,
        }
    }

    /// A handle that resolves once the process is gone, for whoever starts the next one.
    pub(crate) fn gone(&self) -> Gone {
        Gone(self.exited.clone())
    }

    /// Sends `signal` to the whole group; quiet if it is already gone.
    pub(crate) fn signal(&self, signal: Signal) {
        let _ = killpg(self.pgid, signal);
    }

    /// Ends the group now and waits until its leader is gone (`SIGTERM`, then `SIGKILL` after
    /// the kill delay).
    pub(crate) async fn terminate(self) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        let status = match tokio::time::timeout(self.kill_after, self.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.signal(Signal::SIGKILL);
                self.wait().await
            }
        };
        // Whatever of the group outlived its leader goes too.
        self.signal(Signal::SIGKILL);
        status
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.exited.borrow().is_some() {
            // The leader exited by itself; anything it left in its group goes with it.
            let _ = killpg(self.pgid, Signal::SIGKILL);
            return;
        }
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let (pgid, kill_after, mut exited) = (self.pgid, self.kill_after, self.exited.clone());
        // A thread, not a task: it must run even if the runtime is shutting down.
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + kill_after;
            while std::time::Instant::now() < deadline {
                if exited.borrow_and_update().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = killpg(pgid, Signal::SIGKILL);
        });
    }
}

/// A small `sh` that ends a command's process group when its owner (this process) is gone,
/// however it went (`SIGKILL`, the OOM killer), when no `Drop` can run. It reads a pipe whose
/// only write end this process holds (close-on-exec, so no other child inherits it). At
/// end-of-file it sends the group `SIGTERM`, then `SIGKILL` if anything of it is left after the
/// kill delay. Dropped (with its [`Child`], whose own ending signals the group), it is told to
/// stand down first, so the command never gets a second `SIGTERM` (which many runtimes read as
/// "quit now, skip the clean-up"). It runs in a process group of its own, so a signal to the
/// owner's group (Ctrl-C) does not stop it before it acts. A death of the owner between the
/// command's start and its guard's leaves the command unguarded.
#[derive(Debug)]
struct Guard {
    lifeline: std::os::fd::OwnedFd,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // A whole line: the guard's `read` succeeds and it exits (end-of-file alone: it acts).
        let _ = nix::unistd::write(&self.lifeline, b"stand down\n");
    }
}

/// The guard's script: `$1` the group, `$2` the kill delay in tenths of a second. Quiet, and
/// gone at once when told to stand down or when the group is gone.
const GUARD_SH: &str = r#"read _ && exit 0
kill -s TERM -- -"$1" 2>/dev/null || exit 0
i=0
while [ "$i" -lt "$2" ] && kill -s 0 -- -"$1" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -s KILL -- -"$1" 2>/dev/null
exit 0"#;

impl Guard {
    fn spawn(pgid: Pid, kill_after: Duration) -> std::io::Result<Guard> {
        use std::process::Stdio;
        let (reader, writer) = crate::provider::cloexec_pipe()?;
        // Within what `sh`'s arithmetic takes (a longer delay is as good as forever).
        let tenths = kill_after
            .as_millis()
            .div_ceil(100)
            .clamp(1, i32::MAX as u128);
        let mut guard = Command::new("/bin/sh")
            .args(["-c", GUARD_SH, "outlive-guard"])
            .arg(pgid.to_string())
            .arg(tenths.to_string())
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // It needs nothing of this process's environment (which may hold credentials).
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .process_group(0)
            .kill_on_drop(false)
            .spawn()?;
        // Reaped when it ends (after its command), so it leaves no zombie behind.
        tokio::spawn(async move {
            let _ = guard.wait().await;
        });
        Ok(Guard { lifeline: writer })
    }
}

/// Resolves once a command's process is gone.
#[derive(Debug, Clone)]
pub(crate) struct Gone(watch::Receiver<Option<ExitStatus>>);

impl Gone {
    pub(crate) async fn wait(mut self) {
        let _ = self.0.wait_for(Option::is_some).await;
    }
}
