//! A killed owner leaves no browser: `SIGKILL` of a process that launched local Chromium — an
//! `outlive run`, an `outlive worker` with its embedded gateway — ends every Chromium it
//! started within moments, through the browser's lifeline pipe, though no `Drop` runs; the
//! next start under the same temp directory removes the profile the dead owner left. A command
//! `outlive run` starts holds none of the lifeline's descriptors, and ends with its owner: its
//! guard (a small `sh` reading a pipe only the owner holds) ends the command's process group.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The live (not zombie) Chromium processes whose profile is under `dir`.
fn chromiums_under(dir: &Path) -> Vec<i32> {
    let marker = format!("--user-data-dir={}/", dir.display());
    procfs::process::all_processes()
        .unwrap()
        .flatten()
        .filter(|p| p.stat().is_ok_and(|s| !matches!(s.state, 'Z' | 'X')))
        .filter(|p| {
            p.cmdline()
                .is_ok_and(|c| c.iter().any(|a| a.starts_with(&marker)))
        })
        .map(|p| p.pid)
        .collect()
}

/// What the browser process (the one of `pids` that is no helper) has as fds 3 and 4: the
/// lifeline's two pipes, as `pipe:[inode]`.
fn lifeline_pipes(pids: &[i32]) -> Vec<String> {
    let browser = pids
        .iter()
        .map(|&pid| procfs::process::Process::new(pid).unwrap())
        .find(|p| {
            p.cmdline()
                .is_ok_and(|c| !c.iter().any(|a| a.starts_with("--type=")))
        })
        .expect("the browser process");
    [3, 4]
        .iter()
        .filter_map(|fd| std::fs::read_link(format!("/proc/{}/fd/{fd}", browser.pid)).ok())
        .map(|l| l.display().to_string())
        .filter(|l| l.starts_with("pipe:"))
        .collect()
}

/// Polls (every 20 ms) until `done`, for at most `within`; answers how long it took.
fn until(within: Duration, what: &str, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// The profile directories (`outlive-chromium-*`) under `dir`.
fn profiles(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("outlive-chromium-"))
        .collect()
}

fn sigkill(child: &Child) {
    kill(
        Pid::from_raw(child.id().expect("running") as i32),
        Signal::SIGKILL,
    )
    .unwrap();
}

#[tokio::test]
async fn a_sigkilled_outlive_run_leaves_no_chromium_nor_command_and_its_profile_is_swept_at_the_next_start()
 {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let w = work.display();
    // The command lists what its descriptors are, then waits for `done` (or its directory
    // gone, should the test fail); its guard should end it first.
    let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
        .env("TMPDIR", &root)
        .args(["run", "--", "sh", "-c"])
        .arg(format!(
            "echo $$ > {w}/pid; for f in /proc/$$/fd/*; do readlink \"$f\"; done > {w}/fds.tmp; mv {w}/fds.tmp {w}/fds; \
             while [ -d {w} ] && [ ! -f {w}/done ]; do sleep 0.05; done"
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until(Duration::from_secs(60), "the command starts", || {
        work.join("fds").exists()
    });
    let browsers = chromiums_under(&root);
    assert!(!browsers.is_empty(), "a Chromium runs for the command");
    // The lifeline is the browser's fds 3 and 4; the command holds neither pipe.
    let lifeline = lifeline_pipes(&browsers);
    assert_eq!(lifeline.len(), 2, "the browser has its lifeline");
    let fds = std::fs::read_to_string(work.join("fds")).unwrap();
    for pipe in &lifeline {
        assert!(
            !fds.lines().any(|l| l == pipe),
            "the command holds the lifeline {pipe}: {fds}"
        );
    }
    let command: i32 = std::fs::read_to_string(work.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    sigkill(&child);
    let killed = Instant::now();
    child.wait().await.unwrap();
    // Its guard reads end-of-file (were the command holding the pipe's write end, it never
    // would) and its SIGTERM ends the command.
    until(Duration::from_secs(10), "the command is gone", || {
        procfs::process::Process::new(command)
            .and_then(|p| p.stat())
            .map_or(true, |s| matches!(s.state, 'Z' | 'X'))
    });
    eprintln!("the command gone {:?} after the SIGKILL", killed.elapsed());
    until(Duration::from_secs(2), "its Chromium is gone", || {
        chromiums_under(&root).is_empty()
    });
    eprintln!("Chromium gone {:?} after the SIGKILL", killed.elapsed());
    std::fs::write(work.join("done"), "").unwrap();
    assert_eq!(profiles(&root).len(), 1, "no Drop ran: the profile is left");

    // The next start sweeps it (and removes its own at its end).
    let next = Command::new(env!("CARGO_BIN_EXE_outlive"))
        .env("TMPDIR", &root)
        .args(["run", "--", "true"])
        .stdout(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        next.status.success(),
        "{:?}: {}",
        next.status,
        String::from_utf8_lossy(&next.stderr)
    );
    assert_eq!(profiles(&root), Vec::<String>::new());
    support::assert_no_process(&work.display().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_leaves_none_of_its_gateways_chromiums() {
    let db = support::pg::Scratch::create().await;
    let store = outlive_jobs::PgStore::connect(&db.url).await.unwrap();
    outlive_jobs::setup(&store).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let key = support::pg::key_file(&tmp);
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();

    // No --solari-url: the worker runs its own gateway (and bank), whose browsers it launches.
    let mut worker = Command::new(env!("CARGO_BIN_EXE_outlive"))
        .env("TMPDIR", &root)
        .env("OUTLIVE_DATABASE_URL", &db.url)
        .env_remove("OUTLIVE_SEAL_KEY")
        .arg("worker")
        .arg("--key-file")
        .arg(&key)
        .args(["--concurrency", "2"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(worker.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the worker starts")
        .unwrap()
        .unwrap_or_default();
    assert!(ready.contains("taking runs"), "{ready}");
    for _ in 0..2 {
        support::pg::submit_bank(&store, 1_000, 200).await;
    }
    until(Duration::from_secs(60), "two browsers run", || {
        // Each browser is several processes; two profiles mean two browsers.
        !chromiums_under(&root).is_empty() && profiles(&root).len() >= 2
    });

    sigkill(&worker);
    worker.wait().await.unwrap();
    // They go within a few hundred ms; a loaded machine may take seconds to schedule them.
    let took = until(Duration::from_secs(15), "its Chromiums are gone", || {
        chromiums_under(&root).is_empty()
    });
    eprintln!("Chromiums gone {took:?} after the SIGKILL");
    db.drop_now(store).await;
}

#[tokio::test]
async fn sigterm_or_sigint_to_the_demo_ends_its_browsers_and_removes_their_profiles() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let demo = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .env("TMPDIR", root)
            .args(["demo", "--lifetime", "60s", "--task", "120s", "--json"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        until(Duration::from_secs(60), "the demo's browser runs", || {
            !chromiums_under(root).is_empty()
        });
        kill(Pid::from_raw(demo.id().unwrap() as i32), signal).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(10), demo.wait_with_output())
            .await
            .expect("the demo ends on the signal")
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(128 + signal as i32),
            "{signal}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Ended by the demo itself, not by the lifeline: the profiles are gone too. Its whole
        // process group was sent SIGKILL before it exited; a helper the kernel is still
        // tearing down (in the middle of a disk write, say) may outlive it by moments.
        until(
            Duration::from_secs(2),
            &format!("{signal}: its Chromiums are gone"),
            || chromiums_under(root).is_empty(),
        );
        assert_eq!(profiles(root), Vec::<String>::new(), "{signal}");
    }
}
