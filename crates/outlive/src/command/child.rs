//! The command's process: started in a process group of its own, so that one signal reaches
//! it and everything it started (Playwright's driver, a shell's children), and ended by its
//! owner — `SIGTERM`, then `SIGKILL` after the kill delay — however the owner lets go of it.

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
        Ok(Child {
            pgid: Pid::from_raw(pid as i32),
            exited,
            kill_after,
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

/// Resolves once a command's process is gone.
#[derive(Debug, Clone)]
pub(crate) struct Gone(watch::Receiver<Option<ExitStatus>>);

impl Gone {
    pub(crate) async fn wait(mut self) {
        let _ = self.0.wait_for(Option::is_some).await;
    }
}
