//! A provider that is a program (`ProviderCommand`, `--provider-cmd`): a shell script fronting
//! the gateway carries the bank task through deaths, every session released; one that states
//! its sessions' lifetime has them rotated ahead of their death with no rotation asked for;
//! one that fails, prints garbage or hangs is a clear error, and nothing of it is left running.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use outlive::{ErrorKind, Provider, ProviderCommand, WideEvent};
use outlive_bed::bed::TestBed;
use support::BANK_POLLS as POLLS;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/providers")
        .join(name)
}

/// The bank task through `provider` on `bed`; every session released afterwards.
async fn bank_through(bed: &TestBed, provider: &impl Provider) -> WideEvent {
    let (result, event, progress) = support::bank_run(bed, provider).await;
    eprintln!("{}", event.to_json());
    assert_eq!(result, Ok(POLLS));
    assert_eq!(event.release_failed, 0, "{}", event.to_json());
    assert_eq!(bed.bank().counters().totps_accepted, 1, "one sign-in");
    assert_eq!(progress.sign_ins(), 1);
    support::assert_gateway_clean(bed.gateway()).await;
    let status = bed.gateway().status();
    assert_eq!(
        status.dead_sessions, 0,
        "every session released: {status:?}"
    );
    event
}

/// The shell-script provider of `tests/providers/solari.sh`, on `bed`'s gateway.
fn solari_script(bed: &TestBed) -> ProviderCommand {
    ProviderCommand::new(script("solari.sh"))
        .env("PROVIDER_URL", bed.gateway().base_url())
        .env("SOLARI_API_KEY", bed.gateway().api_key())
}

/// The survival runs go one at a time: each relaunches Chromium every few seconds.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn bed(lifetime: Duration) -> TestBed {
    TestBed::start(outlive_bed::bed::dying(
        lifetime,
        Duration::ZERO,
        gateway::DeathMode::Close,
    ))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_script_provider_outlives_deaths() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let bed = bed(Duration::from_secs(3)).await;
    // The script states no lifetime: outlive reacts to each death.
    let event = bank_through(&bed, &solari_script(&bed)).await;
    assert!(event.relaunches >= 2, "{}", event.to_json());
    assert_eq!(event.rotations, 0);
    assert_eq!(event.sessions, event.relaunches + 1, "{}", event.to_json());
    support::shutdown_clean(bed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifetime_the_provider_states_is_rotated_ahead_of_with_no_rotation_asked() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Only the 6 s each session asks for (and the script states) ends one.
    let bed = bed(Duration::from_secs(600)).await;
    let provider = solari_script(&bed).env("LIFETIME_MS", "6000");
    let event = bank_through(&bed, &provider).await;
    assert!(event.rotations >= 1, "{}", event.to_json());
    support::shutdown_clean(bed).await;
}

/// A script at `path` with `body` (after `#!/bin/sh`), executable.
fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn alive(pid: i32) -> bool {
    // Zombies count as gone: a reaped-later child is no longer running.
    procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .is_ok_and(|s| s.state != 'Z')
}

#[tokio::test]
async fn a_failing_garbled_or_hung_provider_command_is_a_clear_error_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let cases = [
        (
            "fails.sh",
            "echo 'could not reach the API: token=sk_live_abcdefghijklmnop' >&2; exit 3".to_owned(),
            "exit status: 3",
        ),
        (
            "garbage.sh",
            "echo 'hello, world'".to_owned(),
            "not the JSON expected",
        ),
        (
            "hangs.sh",
            format!(
                "sleep 300 & echo $! >> {p}; echo $$ >> {p}; wait",
                p = pids.display()
            ),
            "did not finish launching a browser within",
        ),
    ];
    for (name, body, says) in cases {
        let path = write_script(dir.path(), name, &body);
        let provider = ProviderCommand::new(&path).launch_timeout(Duration::from_secs(2));
        let started = std::time::Instant::now();
        let e = match provider.launch().await {
            Ok(_) => panic!("{name} launched"),
            Err(e) => e,
        };
        let message = e.to_string();
        eprintln!("{name}: {message}");
        assert_eq!(e.kind(), ErrorKind::Launch, "{message}");
        assert!(
            message.contains(path.to_str().unwrap()),
            "names the command: {message}"
        );
        assert!(message.contains(says), "{message}");
        assert!(
            !message.contains("sk_live_abcdefghijklmnop"),
            "redacted: {message}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "bounded: {message}"
        );
    }
    let stderr = "could not reach the API";
    let failed = ProviderCommand::new(dir.path().join("fails.sh"));
    let message = failed.launch().await.err().unwrap().to_string();
    assert!(message.contains(stderr), "carries the stderr: {message}");
    // The hung script and the child it started are gone.
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
