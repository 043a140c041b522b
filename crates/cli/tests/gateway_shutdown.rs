//! `outlive gateway` ends every session's Chromium before it exits on SIGINT. Killed helpers
//! whose parent died first are reparented to init as zombies, for init to reap: those are dead
//! and do not count. (Its own test binary: it scans `/proc` for the gateway's descendants.)

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use outlive::solari_browser::{Client, ClientOptions, CreateSessionOptions};
use procfs::process::{ProcState, Process};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const API_KEY: &str = "shutdown-test-key";
/// Upper bound for starting the gateway, and for its orderly exit.
const SOON: Duration = Duration::from_secs(30);

/// A process is identified by its pid and start time, so a reused pid is not mistaken for it.
type Identity = (i32, u64);

/// The `outlive gateway` child, and the Chromium processes seen under it. Dropping it kills
/// whatever is left, so a failing test leaves nothing behind either.
struct GatewayProcess {
    child: Child,
    /// Chromium processes (by identity) and their process groups, as last seen.
    chromium: HashMap<Identity, i32>,
}

impl GatewayProcess {
    /// Starts the binary on a free port and returns it with its base URL.
    async fn start() -> (Self, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["gateway", "--listen", "127.0.0.1:0", "--api-key", API_KEY])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("outlive gateway starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let base_url = tokio::time::timeout(SOON, async {
            while let Some(line) = lines.next_line().await.expect("stdout") {
                if let Some(url) = line.strip_prefix("gateway listening on ") {
                    return url.trim().to_owned();
                }
            }
            panic!("the gateway exited before it said where it listens");
        })
        .await
        .expect("the gateway says where it listens in time");
        // Keep reading, so that the gateway never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let gateway = Self {
            child,
            chromium: HashMap::new(),
        };
        (gateway, base_url)
    }

    fn pid(&self) -> i32 {
        self.child.id().expect("still running") as i32
    }

    /// Records every process now descended from the gateway: its browsers and their helpers.
    fn record_descendants(&mut self) {
        let stats: Vec<_> = procfs::process::all_processes()
            .expect("/proc")
            .flatten()
            .filter_map(|p| p.stat().ok())
            .collect();
        let parent: HashMap<i32, i32> = stats.iter().map(|s| (s.pid, s.ppid)).collect();
        let gateway = self.pid();
        let descends = |mut pid: i32| {
            while let Some(&ppid) = parent.get(&pid) {
                if ppid == gateway {
                    return true;
                }
                pid = ppid;
            }
            false
        };
        for s in stats.iter().filter(|s| descends(s.pid)) {
            self.chromium.insert((s.pid, s.starttime), s.pgrp);
        }
    }

    /// The recorded Chromium processes still alive (zombies excepted), and any other live
    /// member of their process groups.
    fn survivors(&self) -> Vec<i32> {
        let groups: Vec<i32> = self.chromium.values().copied().collect();
        let mut out: Vec<i32> = procfs::process::all_processes()
            .expect("/proc")
            .flatten()
            .filter_map(|p| p.stat().ok())
            .filter(|s| {
                !matches!(
                    ProcState::from_char(s.state),
                    Some(ProcState::Zombie | ProcState::Dead)
                )
            })
            .filter(|s| {
                groups.contains(&s.pgrp) || self.chromium.contains_key(&(s.pid, s.starttime))
            })
            .map(|s| s.pid)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let mut groups: Vec<i32> = self.chromium.values().copied().collect();
        groups.sort_unstable();
        groups.dedup();
        for pgid in groups {
            // Only groups that still have a recorded member: a group id cannot be reused
            // while a member lives.
            let recorded_member_alive = self.chromium.iter().any(|(&(pid, start), &g)| {
                g == pgid
                    && Process::new(pid)
                        .and_then(|p| p.stat())
                        .is_ok_and(|s| s.starttime == start)
            });
            if recorded_member_alive {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

#[tokio::test]
async fn sigint_ends_every_chromium_before_the_gateway_exits() {
    let (mut gateway, base_url) = GatewayProcess::start().await;
    let client = Client::new(ClientOptions::new(API_KEY, &base_url)).expect("client");

    // A create answers once its browser printed its DevTools endpoint: the browser is up.
    for _ in 0..2 {
        client
            .sessions()
            .create(CreateSessionOptions::new())
            .await
            .expect("create");
    }
    gateway.record_descendants();
    let leaders = gateway
        .chromium
        .iter()
        .filter(|((pid, _), pgid)| pid == *pgid)
        .count();
    assert_eq!(
        leaders, 2,
        "one Chromium per session: {:?}",
        gateway.chromium
    );

    kill(Pid::from_raw(gateway.pid()), Signal::SIGINT).expect("SIGINT");
    let status = tokio::time::timeout(SOON, gateway.child.wait())
        .await
        .expect("the gateway exits in time")
        .expect("wait");
    let survivors = gateway.survivors();
    assert!(status.success(), "{status}");
    assert!(
        survivors.is_empty(),
        "{} of {} Chromium processes outlived the gateway: {survivors:?}",
        survivors.len(),
        gateway.chromium.len()
    );
}
