//! The Chromium behind each session: launched through outlive's [`LocalChromium`], and
//! counted by process group so that a leak shows up in [`Status`](crate::Status).

use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use outlive::{LocalBrowser, LocalChromium};
use procfs::process::ProcState;

/// Every process group this gateway started, until the group is empty and its leader reaped.
#[derive(Debug, Default)]
pub(crate) struct Processes {
    groups: Mutex<Vec<Group>>,
}

#[derive(Debug)]
struct Group {
    pgid: u32,
    /// The leader has been waited for. Until then its pid (= the group id) cannot be reused,
    /// so signalling the group cannot hit an unrelated process.
    reaped: bool,
}

impl Processes {
    fn track(&self, pgid: u32) {
        lock(&self.groups).push(Group {
            pgid,
            reaped: false,
        });
    }

    fn mark_reaped(&self, pgid: u32) {
        for g in lock(&self.groups).iter_mut().filter(|g| g.pgid == pgid) {
            g.reaped = true;
        }
    }

    /// Live (non-zombie) processes in the groups this gateway started. Groups that are empty
    /// and whose leader was reaped are forgotten.
    pub(crate) fn alive(&self) -> usize {
        let mut groups = lock(&self.groups);
        if groups.is_empty() {
            return 0;
        }
        let pgids: Vec<u32> = groups.iter().map(|g| g.pgid).collect();
        let members = live_members(&pgids);
        groups.retain(|g| !g.reaped || members.contains(&g.pgid));
        members.len()
    }

    /// Waits until no process of group `pgid` is alive (SIGKILLed helpers may outlive their
    /// leader's reaping by a moment), for at most `limit`.
    ///
    /// If the leader exited on its own, `LocalBrowser` no longer signals the group, so helpers
    /// still in it are killed here. That is safe: a group id with live members cannot have
    /// been reused.
    async fn wait_gone(&self, pgid: u32, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while !live_members(&[pgid]).is_empty() && tokio::time::Instant::now() < deadline {
            let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Sends `SIGKILL` to every group whose leader has not been reaped yet. Synchronous, for
    /// `Drop`; the owners of the processes reap them afterwards.
    pub(crate) fn kill_unreaped(&self) {
        for g in lock(&self.groups).iter().filter(|g| !g.reaped) {
            let _ = killpg(Pid::from_raw(g.pgid as i32), Signal::SIGKILL);
        }
    }
}

/// The process group of every live (not zombie) process whose group is one of `pgids`: one
/// entry per process. (The gateway runs where Chromium runs: Linux, with `/proc`.)
fn live_members(pgids: &[u32]) -> Vec<u32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok()) // none: it exited meanwhile
        .filter(|s| {
            !matches!(
                ProcState::from_char(s.state),
                Some(ProcState::Zombie | ProcState::Dead)
            )
        })
        .filter_map(|s| u32::try_from(s.pgrp).ok())
        .filter(|pgrp| pgids.contains(pgrp))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One running Chromium, tracked in [`Processes`]. Dropping it kills the process group.
#[derive(Debug)]
pub(crate) struct Browser {
    inner: Option<LocalBrowser>,
    pgid: u32,
    processes: Arc<Processes>,
}

impl Browser {
    /// Starts one headless Chromium.
    pub(crate) async fn launch(
        launcher: &LocalChromium,
        processes: &Arc<Processes>,
    ) -> Result<Self, outlive::Error> {
        let inner = launcher.start().await?;
        let pgid = inner.pid();
        processes.track(pgid);
        Ok(Self {
            inner: Some(inner),
            pgid,
            processes: processes.clone(),
        })
    }

    /// The browser's own DevTools websocket URL (a capability: never logged).
    pub(crate) fn endpoint(&self) -> String {
        self.inner
            .as_ref()
            .map(|b| b.endpoint().expose().to_owned())
            .unwrap_or_default()
    }

    /// Resolves when the browser process exits on its own (or was killed).
    pub(crate) async fn exited(&mut self) {
        match self.inner.as_mut() {
            Some(b) => b.wait_exit().await,
            None => std::future::pending().await,
        }
    }

    /// Kills the process group, reaps the browser, removes its profile, and returns once no
    /// process of the group is alive.
    pub(crate) async fn close(mut self) {
        if let Some(b) = self.inner.take() {
            if let Err(e) = b.close().await {
                tracing::warn!(error = %e, pgid = self.pgid, "chromium profile not removed");
            }
            self.processes.mark_reaped(self.pgid);
            self.processes
                .wait_gone(self.pgid, std::time::Duration::from_secs(2))
                .await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(b) = self.inner.take() {
            // LocalBrowser's Drop kills the group and reaps the leader.
            drop(b);
            self.processes.mark_reaped(self.pgid);
        }
    }
}
