//! `outlive run -- CMD` with real foreign clients. A Python Playwright script and a Node
//! Puppeteer script sign in to Aurora Bank once, checkpoint their progress through the control
//! URL, and seed every kind of client-side state (the twosite app). They survive browser deaths
//! (through the gateway, over the Solari provider) and page crashes. The checks: one transfer,
//! a sign-in done again only when a death cut it before its checkpoint, every piece of state
//! back, `OUTLIVE_ATTEMPT` counting, nothing left behind.
//!
//! The clients come from `scripts/clients` (run by `scripts/test`): Playwright from PyPI in a
//! virtualenv, puppeteer-core from npm, under `target/clients/`.

mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

/// Polls of the bank scripts, 400 ms apart: at least 24 s of the script's own sleeping, so
/// that its sessions of 12 s die twice under it however fast the machine is.
const POLLS: u32 = 60;

/// The flags the bank scripts run with: sessions of 12 s, dying twice under the script.
const SURVIVE: [&str; 6] = [
    "--checkpoint-every",
    "1s",
    "--heartbeat",
    "500ms",
    "--max-relaunches",
    "20",
];

/// Where `scripts/clients` installs the clients.
fn clients() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients");
    assert!(
        dir.join("venv/bin/python").exists()
            && dir.join("node/node_modules/puppeteer-core").exists(),
        "the real clients are missing: run scripts/clients (scripts/test does)"
    );
    dir
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// One bed at a time: each test's sessions die on a fixed clock, and two clients with their
/// Chromium on 2 cores could not do a session's work before its death (seen in CI shape).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Aurora Bank, the twosite app and a gateway.
struct Bed {
    bank: aurora::Aurora,
    twosite: aurora::twosite::TwoSite,
    gateway: gateway::Gateway,
    bank_config: aurora::Config,
    /// Held until the bed is gone (dropped last).
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Bed {
    async fn start(gateway: gateway::Config) -> Bed {
        let turn = ONE_AT_A_TIME.lock().await;
        let bank_config = aurora::Config::new();
        Bed {
            bank: aurora::spawn(bank_config.clone()).await.unwrap(),
            twosite: aurora::twosite::spawn().await.unwrap(),
            gateway: gateway::spawn(gateway).await.unwrap(),
            bank_config,
            _turn: turn,
        }
    }

    /// `outlive run` over the gateway's Solari API with `flags`, running `cmd` with the bank's
    /// details in its environment; answers its exit code, stderr and result directory.
    async fn run(&self, flags: &[&str], cmd: &[impl AsRef<OsStr>], polls: u32) -> Outcome {
        self.run_shaped(flags, cmd, polls, "first").await
    }

    /// [`Bed::run`] with the scripts' `PAGE_SHAPE`: where they open the page they work in.
    async fn run_shaped(
        &self,
        flags: &[&str],
        cmd: &[impl AsRef<OsStr>],
        polls: u32,
        shape: &str,
    ) -> Outcome {
        let solari = [
            "--solari-url".to_owned(),
            self.gateway.base_url().to_owned(),
        ];
        self.run_via(&solari, &[], flags, cmd, polls, shape).await
    }

    /// [`Bed::run_shaped`] with browsers from the provider of `provider` flags, with `env`.
    async fn run_via(
        &self,
        provider: &[String],
        env: &[(&str, String)],
        flags: &[&str],
        cmd: &[impl AsRef<OsStr>],
        polls: u32,
        shape: &str,
    ) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .arg("run")
            .args(provider)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("--event-file")
            .arg(dir.path().join("event.json"))
            .args(flags)
            .arg("--")
            .args(cmd)
            .env("SOLARI_API_KEY", self.gateway.api_key())
            .env("BANK_URL", self.bank.base_url())
            .env("BANK_USER", self.bank_config.username())
            .env("BANK_PASSWORD", self.bank_config.password())
            .env(
                "BANK_TOTP_SECRET",
                self.bank_config.totp_secret().as_base32(),
            )
            .env("TWOSITE_URL", self.twosite.app_url())
            .env("POLLS", polls.to_string())
            .env("POLL_MS", "400")
            .env("RESULT_DIR", dir.path())
            .env("PAGE_SHAPE", shape)
            .kill_on_drop(true)
            .output();
        let Ok(out) = tokio::time::timeout(Duration::from_secs(240), out).await else {
            panic!(
                "outlive run did not end in 240 s; the entries saw:\n{}",
                records(dir.path())
            );
        };
        let out = out.unwrap();
        Outcome {
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            dir,
        }
    }

    async fn finish(self) {
        support::assert_gateway_clean(&self.gateway).await;
        let status = self.gateway.shutdown().await.unwrap();
        assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
        let _ = self.twosite.shutdown().await;
        let _ = self.bank.shutdown().await;
    }
}

/// The scripts' records in `dir`, for a failure message.
fn records(dir: &Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p.display(),
                std::fs::read_to_string(p).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    dir: tempfile::TempDir,
}

impl Outcome {
    fn json(&self, name: &str) -> Value {
        let path = self.dir.path().join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{}", path.display(), self.stderr));
        serde_json::from_str(&text).unwrap()
    }
}

/// A gateway whose sessions close `lifetime` after creation, room for three at once.
fn lasting(lifetime: Duration) -> gateway::Config {
    gateway::Config::new()
        .lifetime(lifetime)
        .jitter(Duration::ZERO)
        .max_sessions(3)
}

/// A gateway whose sessions die `lifetime` after creation the way `death` says, each page
/// crashing once 7 s after its session's creation.
fn dying(death: gateway::DeathMode, lifetime: Duration) -> gateway::Config {
    lasting(lifetime)
        .death(death)
        .page_fault(gateway::PageFault::Crash, Duration::from_secs(7))
}

/// What every client run must show: completed, through at least `deaths` browser deaths and
/// one page crash. One transfer and no needless sign-in in all. Every entry after the first
/// resumed with its progress and its state, and no process of the script left.
async fn assert_survived(bed: &Bed, run: &Outcome, polls: u32, deaths: u32, marker: &str) {
    assert_survived_in(bed, run, polls, deaths, marker, &[]).await;
}

/// [`assert_survived`], for a script that may lack the state named in `may_lack` after a
/// death: sessionStorage, for one that opens a new tab on each entry (a new tab has none, as in
/// any browser).
async fn assert_survived_in(
    bed: &Bed,
    run: &Outcome,
    polls: u32,
    deaths: u32,
    marker: &str,
    may_lack: &[&str],
) {
    assert_eq!(
        run.code,
        Some(0),
        "stderr:\n{}\nrecords:\n{}",
        run.stderr,
        records(run.dir.path())
    );
    let event = run.json("event.json");
    eprintln!("{event}");
    assert_eq!(event["outcome"], "completed", "{event}");
    assert!(
        event["relaunches"].as_u64().unwrap() >= u64::from(deaths),
        "{event}"
    );
    assert!(event["pageRecoveries"].as_u64().unwrap() >= 1, "{event}");
    let result = run.json("result.json");
    assert_eq!(result["polls"], polls, "{result}");
    let attempts = event["attempts"].as_u64().unwrap();
    let seen = support::commands::attempts_seen(&result);
    assert_eq!(seen.last(), Some(&attempts), "{result}");

    // One transfer, however many entries and wherever the deaths fall: the scripts save the
    // balance first and look at the bank before sending it again.
    let counters = bed.bank.counters();
    assert_eq!(counters.transfers, 1, "{counters:?}");

    // Which entry signs in depends on where the deaths fall (on a loaded machine the first
    // entry may not reach the TOTP before its page crashes). What must hold: an entry resumed
    // signed in never signs in again. A sign-in is done again only after one was cut
    // between its TOTP and the checkpoint after it (the session the bank granted died with
    // the browser before outlive saw it). Never by an entry that had a checkpoint to use.
    let mut cut_sign_ins = 0;
    for attempt in 1..=attempts {
        let name = format!("attempt-{attempt}.json");
        if !run.dir.path().join(&name).exists() {
            continue; // cut before it wrote anything
        }
        let a = run.json(&name);
        if a["signedInHere"] == true {
            assert_ne!(a["progressIn"]["signedIn"], true, "signed in again: {a}");
        } else if a["totpSent"] == true {
            cut_sign_ins += 1;
        }
        if attempt == 1 || a["progressIn"].is_null() {
            continue; // a death before the first checkpoint
        }
        assert!(a["resumedFromUrl"].is_string(), "{a}");
        for poll in a["polls"].as_array().into_iter().flatten() {
            assert_ne!(poll["pref"], "MISSING", "localStorage lost: {a}");
            assert_eq!(poll["broken"], false, "{a}");
        }
        if let Some(report) = a.get("twositeReport").filter(|r| !r.is_null()) {
            let report: aurora::twosite::Report = serde_json::from_value(report.clone()).unwrap();
            let mut missing = report.missing();
            missing.retain(|m| !may_lack.contains(m));
            assert_eq!(missing, Vec::<&str>::new(), "state lost: {a}");
        }
    }
    assert!(
        (1..=1 + cut_sign_ins).contains(&counters.totps_accepted),
        "{counters:?}, sign-ins cut after their TOTP: {cut_sign_ins}"
    );
    support::assert_no_process(marker);
}

fn marker() -> String {
    format!("outlive-test-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playwright_script_survives_deaths_and_a_page_crash() {
    playwright_shaped("first", &[]).await;
}

/// A provider's flags and environment, for a bed.
type ProviderFlags = fn(&Bed) -> (Vec<String>, Vec<(&'static str, String)>);

/// A Playwright script through deaths and a page crash, browsers from the provider that
/// `provider` names on `bed`'s gateway (its flags and environment).
async fn playwright_via(provider: ProviderFlags) {
    let bed = Bed::start(dying(gateway::DeathMode::Close, Duration::from_secs(12))).await;
    let marker = marker();
    let (flags, env) = provider(&bed);
    let cmd = playwright_cmd(&marker);
    let run = bed
        .run_via(&flags, &env, &SURVIVE, &cmd, POLLS, "first")
        .await;
    assert_survived(&bed, &run, POLLS, 2, &marker).await;
    let event = run.json("event.json");
    assert_eq!(event["releaseFailed"], 0, "{event}");
    support::assert_gateway_clean(&bed.gateway).await;
    let status = bed.gateway.status();
    assert_eq!(
        status.dead_sessions, 0,
        "every session released: {status:?}"
    );
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playwright_script_survives_deaths_on_a_provider_command_and_a_cloud() {
    let command = playwright_via(|bed| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/providers/solari.sh");
        let flags = vec!["--provider-cmd".to_owned(), script.display().to_string()];
        (
            flags,
            vec![("PROVIDER_URL", bed.gateway.base_url().to_owned())],
        )
    });
    let steel = playwright_via(|bed| {
        let url = format!("{}/steel", bed.gateway.base_url());
        let flags = ["--provider", "steel", "--provider-url", &url]
            .map(str::to_owned)
            .to_vec();
        (
            flags,
            vec![("STEEL_API_KEY", bed.gateway.api_key().to_owned())],
        )
    });
    tokio::join!(command, steel);
}

/// The Playwright script on every cloud's dialect, one after another (7 × about 45 s, so CI
/// runs Steel's above; the library's bank task covers every dialect in `providers.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "seven Playwright runs: cargo test --test run_clients -- --ignored"]
async fn a_playwright_script_survives_deaths_on_every_cloud() {
    macro_rules! via {
        ($name:literal, $key:literal) => {
            playwright_via(|bed| {
                let url = format!("{}/{}", bed.gateway.base_url(), $name);
                let flags = ["--provider", $name, "--provider-url", &url]
                    .map(str::to_owned)
                    .to_vec();
                (flags, vec![($key, bed.gateway.api_key().to_owned())])
            })
            .await
        };
    }
    via!("browserbase", "BROWSERBASE_API_KEY");
    via!("steel", "STEEL_API_KEY");
    via!("browserless", "BROWSERLESS_TOKEN");
    via!("hyperbrowser", "HYPERBROWSER_API_KEY");
    via!("anchor", "ANCHORBROWSER_API_KEY");
    via!("kernel", "KERNEL_API_KEY");
    via!("notte", "NOTTE_API_KEY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_puppeteer_script_survives_silent_deaths_and_a_page_crash() {
    let bed = Bed::start(dying(gateway::DeathMode::Silence, Duration::from_secs(12))).await;
    puppeteer_on(&bed, "first", &[]).await;
    bed.finish().await;
}

/// Runs the Puppeteer script shaped `shape` through deaths of every kind and a page crash.
async fn puppeteer_shaped(shape: &str, may_lack: &[&str]) {
    let bed = Bed::start(dying(gateway::DeathMode::Cycle, Duration::from_secs(12))).await;
    puppeteer_on(&bed, shape, may_lack).await;
    bed.finish().await;
}

/// Runs the Puppeteer script shaped `shape` on `bed` and checks it survived.
async fn puppeteer_on(bed: &Bed, shape: &str, may_lack: &[&str]) {
    let marker = marker();
    // Node resolves puppeteer-core from the script's own directory upwards.
    let copy = clients().join(format!("node/{marker}.mjs"));
    std::fs::copy(script("bank_puppeteer.mjs"), &copy).unwrap();
    let cmd = ["node", copy.to_str().unwrap()];
    let run = bed.run_shaped(&SURVIVE, &cmd, POLLS, shape).await;
    let _ = std::fs::remove_file(&copy);
    assert_survived_in(bed, &run, POLLS, 2, &marker, may_lack).await;
}

/// The Playwright bank script's command line, with `marker`.
fn playwright_cmd(marker: &str) -> [String; 3] {
    let python = clients().join("venv/bin/python");
    let bank = script("bank_playwright.py");
    let [python, bank] = [python, bank].map(|p| p.display().to_string());
    [python, bank, marker.to_owned()]
}

/// Runs the Playwright script shaped `shape` through deaths of every kind and a page crash.
async fn playwright_shaped(shape: &str, may_lack: &[&str]) {
    let bed = Bed::start(dying(gateway::DeathMode::Cycle, Duration::from_secs(12))).await;
    let marker = marker();
    let run = bed
        .run_shaped(&SURVIVE, &playwright_cmd(&marker), POLLS, shape)
        .await;
    assert_survived_in(&bed, &run, POLLS, 2, &marker, may_lack).await;
    bed.finish().await;
}

/// One test per script shape, each losing nothing but a new tab's sessionStorage.
macro_rules! shaped {
    ($($name:ident: $runner:ident($shape:literal);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $runner($shape, &["session"]).await;
        }
    )*};
}

shaped! {
    puppeteer_new_page_and_browser_close_keep_every_state: puppeteer_shaped("new");
    puppeteer_two_tabs_on_two_origins_keep_every_state: puppeteer_shaped("two_tabs");
    playwright_new_page_in_the_default_context_keeps_every_state: playwright_shaped("context_new_page");
    playwright_new_context_keeps_every_state: playwright_shaped("new_context");
    playwright_browser_new_page_keeps_every_state: playwright_shaped("browser_new_page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sees_nothing_of_outlive_across_checkpoints_and_a_restore() {
    let clients = clients();
    let bed = Bed::start(lasting(Duration::from_secs(7))).await;
    let marker = marker();
    let recorder = format!(
        "if [ \"$OUTLIVE_ATTEMPT\" = 1 ]; then exec sleep 300; fi; \
         NAV_URLS=\"$TWOSITE_URL $BANK_URL/login\" DURATION_MS=3000 exec {} {} {marker}",
        clients.join("venv/bin/python").display(),
        script("record_frames.py").display(),
    );
    // The first entry only lets periodic checkpoints be taken, then meets the death; the
    // recorder runs on the restored browser, with checkpoints every 300 ms and its own.
    let run = bed
        .run(
            &["--checkpoint-every", "300ms"],
            &["sh", "-c", &recorder],
            0,
        )
        .await;
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let frames = run.json("frames.json");
    let verdict = &frames["verdict"];
    assert_eq!(verdict["clean"], true, "{verdict}");
    let event = run.json("event.json");
    // At least one restore under the recorder; on a loaded machine its start-up can take it
    // past its own session's 7 s, and the next entry records again, on a restored browser too.
    assert_eq!(event["outcome"].as_str(), Some("completed"), "{event}");
    assert!(event["attempts"].as_u64().unwrap() >= 2, "{event}");
    assert!(event["checkpointCount"].as_u64().unwrap() >= 5, "{event}");
    support::assert_no_process(&marker);
    bed.finish().await;
}

/// `outlive serve` on the bed's gateway, and the URLs it printed.
struct Serving {
    child: tokio::process::Child,
    urls: std::collections::HashMap<String, String>,
}

impl Serving {
    async fn start(bed: &Bed, flags: &[&str]) -> Serving {
        use tokio::io::AsyncBufReadExt;
        let mut child = Command::new(env!("CARGO_BIN_EXE_outlive"))
            .args(["serve", "--checkpoint-every", "1s", "--heartbeat", "500ms"])
            .args(flags)
            .args(["--solari-url", bed.gateway.base_url()])
            .env("SOLARI_API_KEY", bed.gateway.api_key())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut urls = std::collections::HashMap::new();
        while urls.len() < 3 {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("serve prints its URLs");
            if let Some((k, v)) = line.split_once('=') {
                urls.insert(k.to_owned(), v.to_owned());
            }
        }
        Serving { child, urls }
    }

    /// Runs the client `name` against it and answers its result file `result`. When the client
    /// prints `checkpointed`, the test kills the session it works in: the death comes after
    /// the checkpoint however slow the machine.
    async fn client(&self, bed: &Bed, name: &str, result: &str) -> Value {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt};
        let dir = tempfile::tempdir().unwrap();
        let mut client = Command::new(clients().join("venv/bin/python"))
            .arg(script(name))
            .env("OUTLIVE_CDP_URL", &self.urls["OUTLIVE_CDP_URL"])
            .env("OUTLIVE_CONTROL_URL", &self.urls["OUTLIVE_CONTROL_URL"])
            .env("BANK_URL", bed.bank.base_url())
            .env("BANK_USER", bed.bank_config.username())
            .env("BANK_PASSWORD", bed.bank_config.password())
            .env(
                "BANK_TOTP_SECRET",
                bed.bank_config.totp_secret().as_base32(),
            )
            .env("TWOSITE_URL", bed.twosite.app_url())
            .env("RESULT_DIR", dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = client.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let mut lines = tokio::io::BufReader::new(client.stdout.take().unwrap()).lines();
        let run = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line == "checkpointed" {
                    // The oldest live session is the one serving the client; spares come later.
                    let id = bed.gateway.live_sessions().into_iter().next();
                    let id = id.expect("a live session serves the client");
                    bed.gateway
                        .kill(&id, gateway::DeathMode::Close)
                        .await
                        .unwrap();
                }
            }
            client.wait().await.unwrap()
        };
        let status = tokio::time::timeout(Duration::from_secs(150), run)
            .await
            .expect("the client ends");
        let stderr = stderr.await.unwrap();
        assert!(status.success(), "{stderr}");
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(result)).unwrap()).unwrap()
    }

    /// Runs the client `name` through `deaths` deaths and answers its result file `result`.
    /// At each of the first `deaths` `checkpointed` lines it prints, the session serving it is
    /// killed (close, reset and silence in turn). The client is told so on stdin (`killed`).
    async fn through_deaths(&self, bed: &Bed, name: &str, deaths: u32, result: &str) -> Value {
        self.shaped_through_deaths(bed, name, "first", deaths, result)
            .await
    }

    /// [`Self::through_deaths`] with the client's `PAGE_SHAPE`.
    async fn shaped_through_deaths(
        &self,
        bed: &Bed,
        name: &str,
        shape: &str,
        deaths: u32,
        result: &str,
    ) -> Value {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let mut client = if name.ends_with(".mjs") {
            // Beside its node_modules: ES modules resolve packages from their own path.
            let copy = clients().join("node").join(name);
            std::fs::copy(script(name), &copy).unwrap();
            let mut node = Command::new("node");
            node.arg(copy);
            node
        } else {
            let mut python = Command::new(clients().join("venv/bin/python"));
            python.arg(script(name));
            python
        };
        let mut client = client
            .env("OUTLIVE_CDP_URL", &self.urls["OUTLIVE_CDP_URL"])
            .env("OUTLIVE_CONTROL_URL", &self.urls["OUTLIVE_CONTROL_URL"])
            .env("BANK_URL", bed.bank.base_url())
            .env("BANK_USER", bed.bank_config.username())
            .env("BANK_PASSWORD", bed.bank_config.password())
            .env(
                "BANK_TOTP_SECRET",
                bed.bank_config.totp_secret().as_base32(),
            )
            .env("TWOSITE_URL", bed.twosite.app_url())
            .env(
                "MCP_CLI",
                clients().join("node/node_modules/@playwright/mcp/cli.js"),
            )
            .env("DEATHS", deaths.to_string())
            .env("PAGE_SHAPE", shape)
            .env(
                "NAV_URLS",
                format!("{} {}/login", bed.twosite.app_url(), bed.bank.base_url()),
            )
            .env("ANNOUNCE_CHECKPOINTS", "1")
            .env("DURATION_MS", "10000")
            .env("RESULT_DIR", dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = client.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let mut stdin = client.stdin.take().unwrap();
        let mut lines = tokio::io::BufReader::new(client.stdout.take().unwrap()).lines();
        let modes = [
            gateway::DeathMode::Close,
            gateway::DeathMode::Reset,
            gateway::DeathMode::Silence,
        ];
        let mut killed = std::collections::HashSet::new();
        let run = async {
            let mut n = 0;
            while let Some(line) = lines.next_line().await.unwrap() {
                if !line.starts_with("checkpointed") || n == deaths as usize {
                    continue;
                }
                // The oldest live session not killed yet serves the client (a silenced one
                // stays listed until outlive releases it).
                let live = bed.gateway.live_sessions();
                let id = live.into_iter().find(|s| !killed.contains(s));
                let id = id.expect("a live session serves the client");
                bed.gateway.kill(&id, modes[n % 3]).await.unwrap();
                killed.insert(id);
                n += 1;
                // A client that does not read its stdin is told nothing.
                let _ = stdin.write_all(b"killed\n").await;
            }
            (client.wait().await.unwrap(), n)
        };
        let (status, n) = tokio::time::timeout(Duration::from_secs(600), run)
            .await
            .expect("the client ends");
        let stderr = stderr.await.unwrap();
        assert!(status.success(), "{stderr}");
        assert_eq!(n, deaths as usize, "{stderr}");
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(result)).unwrap()).unwrap()
    }

    /// SIGTERM: it stops, exit 0.
    async fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops on SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_one_endpoint_across_a_death() {
    // Sessions outlast the test: it kills the first once the client has checkpointed.
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &["--reconnect-clients"]).await;
    let result = serve.client(&bed, "serve_client.py", "serve.json").await;
    assert_eq!(result["checkpointed"], true, "{result}");
    assert!(result["closedWith"].is_string(), "{result}");
    assert_eq!(result["pagesAfter"], 1, "{result}");
    assert_eq!(result["signedInAfter"], true, "{result}");
    assert_ne!(result["prefAfter"], "MISSING", "{result}");
    assert_eq!(bed.bank.counters().totps_accepted, 1);
    serve.stop().await;
    bed.finish().await;
}

/// A Playwright script connects once, with no reconnect code, and works through 20 deaths
/// of every kind. It keeps its Browser and Page and stays signed in (one TOTP in all). After
/// each death it finds its localStorage as checkpointed and the field it typed. It sees at
/// most one error per death, of the kind a navigation gives a call in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_a_playwright_client_through_twenty_deaths() {
    const DEATHS: u32 = 20;
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let result = serve
        .through_deaths(&bed, "serve_kept.py", DEATHS, "kept.json")
        .await;
    assert_eq!(result["connected"], true, "{result}");
    let errors = assert_kept(&bed, &result, DEATHS);
    eprintln!("errors in {DEATHS} deaths: {}", errors.len());
    serve.stop().await;
    bed.finish().await;
}

/// The same in a context the script makes (`browser.new_context()`): its page is reopened in
/// that context, made again with its cookies, and the script keeps both objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_a_playwright_client_in_a_context_it_made() {
    const DEATHS: u32 = 6;
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let result = serve
        .shaped_through_deaths(&bed, "serve_kept.py", "new_context", DEATHS, "kept.json")
        .await;
    assert_kept(&bed, &result, DEATHS);
    serve.stop().await;
    bed.finish().await;
}

/// The same in Node, with two tabs: each keeps its Page object, its sessionStorage and its
/// work (the bank's form, the twosite app with its cross-site iframe) through 20 deaths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_a_node_playwright_client_with_two_tabs() {
    const DEATHS: u32 = 20;
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let result = serve
        .through_deaths(&bed, "serve_kept_tabs.mjs", DEATHS, "kept_tabs.json")
        .await;
    assert_eq!(result["samePages"], true, "{result}");
    assert_eq!(result["sameContext"], true, "{result}");
    assert_eq!(result["connected"], true, "{result}");
    let rounds = result["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), DEATHS as usize + 1, "{result}");
    for (n, round) in rounds.iter().enumerate() {
        let (a, b) = (&round["a"], &round["b"]);
        assert_eq!(a["filled"], format!("round {n}"), "round {n}: {result}");
        assert_eq!(a["tab"], "A", "round {n}: {result}");
        let stored = (n > 0).then(|| (n - 1).to_string());
        assert_eq!(a["stored"], json!(stored), "round {n}: {result}");
        assert_eq!(b["tab"], "B", "round {n}: {result}");
        assert_eq!(b["widget"], 1, "round {n}: {result}");
    }
    let errors = assert_navigation_errors(&result, DEATHS);
    eprintln!("errors in {DEATHS} deaths: {}", errors.len());
    serve.stop().await;
    bed.finish().await;
}

/// The back/forward list comes back at each death under `serve`. A client connected once
/// goes Back twice and Forward twice after each of 3 deaths (close, reset, silence). It lands
/// where it did before them, through a `pushState` entry, with the same titles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_the_back_forward_list_through_deaths() {
    const DEATHS: u32 = 3;
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let result = serve
        .through_deaths(&bed, "serve_back_forward.py", DEATHS, "back_forward.json")
        .await;
    assert_eq!(result["connected"], true, "{result}");
    let (account, transfer) = ("Account · Aurora Bank", "Transfer · Aurora Bank");
    let expected = json!({
        "after": ["/transfer?step=2", transfer],
        "back1": ["/transfer", transfer],
        "back2": ["/account", account],
        "forward1": ["/transfer", transfer],
        "forward2": ["/transfer?step=2", transfer],
    });
    assert_eq!(result["before"], expected, "the live browser: {result}");
    let rounds = result["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), DEATHS as usize, "{result}");
    for (n, round) in rounds.iter().enumerate() {
        assert_eq!(round, &expected, "after death {}: {result}", n + 1);
    }
    assert_navigation_errors(&result, DEATHS);
    serve.stop().await;
    bed.finish().await;
}

/// Playwright MCP on `serve`, driven with its own tools through 3 deaths: each round's
/// navigate, snapshot, type and evaluate work, with at most one tool error per death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_playwright_mcp_through_three_deaths() {
    const DEATHS: u32 = 3;
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let result = serve
        .through_deaths(&bed, "serve_mcp.py", DEATHS, "mcp.json")
        .await;
    let rounds = result["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), DEATHS as usize + 1, "{result}");
    assert!(rounds.iter().all(|r| r["typed"] == true), "{result}");
    let errors = result["errors"].as_array().unwrap();
    for n in 0..=DEATHS {
        let of_round = errors.iter().filter(|e| e["round"] == n).count();
        assert!(of_round <= 1, "round {n}: {result}");
    }
    eprintln!("tool errors in {DEATHS} deaths: {}", errors.len());
    serve.stop().await;
    bed.finish().await;
}

/// Puppeteer `connect`, holding `pages()[0]`: its tab targets are not carried yet, so its
/// connection is closed at the death (the documented fallback, counted in the wide event),
/// and it finds its page restored when it connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_closes_puppeteer_at_a_death_and_it_finds_its_page_again() {
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("event.json");
    let serve = Serving::start(&bed, &["--event-file", event.to_str().unwrap()]).await;
    let result = serve
        .through_deaths(&bed, "serve_puppeteer.mjs", 1, "puppeteer.json")
        .await;
    assert_eq!(result["checkpointed"], true, "{result}");
    assert_eq!(result["disconnected"], true, "{result}");
    let url = result["urlAfter"].as_str().unwrap();
    assert!(url.starts_with(&bed.bank.url("/login")), "{result}");
    assert_eq!(result["markAfter"], "kept", "{result}");
    serve.stop().await;
    let event: Value = serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).unwrap();
    assert_eq!(event["clientFallbacks"]["tab_targets"], 1, "{event}");
    bed.finish().await;
}

/// A client whose swap fails after the restore left its page's load to it (a tab opened
/// after the last checkpoint is not reopened): its connection is closed, and outlive loads
/// the page itself. Connecting again, the client finds it at its URL with its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_loads_the_pages_a_failed_swap_left() {
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("event.json");
    let serve = Serving::start(&bed, &["--event-file", event.to_str().unwrap()]).await;
    let result = serve
        .through_deaths(&bed, "serve_late_tab.py", 1, "late_tab.json")
        .await;
    assert_eq!(result["checkpointed"], true, "{result}");
    assert!(result["closedWith"].is_string(), "{result}");
    let url = result["urlAfter"].as_str().unwrap();
    assert!(url.starts_with(&bed.bank.url("/transfer")), "{result}");
    assert_eq!(result["fieldAfter"], "typed before the death", "{result}");
    assert_eq!(result["markAfter"], "kept", "{result}");
    serve.stop().await;
    let event: Value = serde_json::from_str(&std::fs::read_to_string(&event).unwrap()).unwrap();
    assert_eq!(event["clientFallbacks"]["tab_not_reopened"], 1, "{event}");
    bed.finish().await;
}

/// What `serve_kept.py` recorded through `deaths` deaths: the same page to the end, signed in
/// throughout (one TOTP), and each round's fill done. After each death its localStorage is as
/// checkpointed and the field it typed is back. Answers the errors (see
/// [`assert_navigation_errors`]).
fn assert_kept(bed: &Bed, result: &Value, deaths: u32) -> Vec<Value> {
    assert_eq!(result["samePage"], true, "{result}");
    assert_eq!(result["pageClosed"], false, "{result}");
    let rounds = result["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), deaths as usize + 1, "{result}");
    for (n, round) in rounds.iter().enumerate() {
        let user = bed.bank_config.username();
        assert_eq!(round["user"], user, "round {n}: {result}");
        assert_eq!(round["filled"], format!("round {n}"), "round {n}: {result}");
        let stored = (n > 0).then(|| (n - 1).to_string());
        assert_eq!(round["stored"], json!(stored), "round {n}: {result}");
        // The field typed last round and never sent is back on the page as it was left.
        let left = (n > 0).then(|| format!("round {}", n - 1));
        assert_eq!(round["left"], json!(left), "round {n}: {result}");
    }
    assert_eq!(bed.bank.counters().totps_accepted, 1);
    assert_navigation_errors(result, deaths)
}

/// The errors a kept client recorded: at most one per round, each of the kind a navigation
/// gives a call in flight.
fn assert_navigation_errors(result: &Value, deaths: u32) -> Vec<Value> {
    let errors = result["errors"].as_array().unwrap().clone();
    for n in 0..=deaths {
        let of_round = errors.iter().filter(|e| e["round"] == n).count();
        assert!(of_round <= 1, "round {n}: {result}");
    }
    let navigation_kind = [
        "Execution context was destroyed",
        "net::ERR_ABORTED",
        "interrupted by another navigation",
        "Inspected target navigated or closed",
    ];
    for e in &errors {
        let message = e["error"].as_str().unwrap();
        assert!(
            navigation_kind.iter().any(|k| message.contains(k)),
            "not a navigation's error: {message}\n{result}"
        );
    }
    errors
}

/// A raw CDP client kept through three deaths sees nothing of outlive and no id it was not
/// given: no reply it did not ask for, no session, target or main frame but its page's, no
/// isolated world. Its navigation in flight at each death ends as a load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_carries_a_raw_client_that_sees_no_new_id() {
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let frames = serve
        .through_deaths(&bed, "record_frames.py", 3, "frames.json")
        .await;
    let verdict = &frames["verdict"];
    assert_eq!(verdict["clean"], true, "{verdict}");
    assert!(
        frames["checkpoints"].as_array().unwrap().len() > 3,
        "{verdict}"
    );
    serve.stop().await;
    bed.finish().await;
}

/// A client with two tabs reconnects after a death and finds both, the one it used last first,
/// each at its URL with its sessionStorage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reopens_every_tab_in_order_after_a_death() {
    // Sessions outlast the test: it kills the first once the client has checkpointed.
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &["--reconnect-clients"]).await;
    let result = serve.client(&bed, "serve_tabs.py", "tabs.json").await;
    assert_eq!(result["checkpointed"], true, "{result}");
    assert!(result["closedWith"].is_string(), "{result}");
    let before = result["before"].as_array().unwrap();
    assert_eq!(before.len(), 2, "{result}");
    // The second tab was used last: it comes first, then the bank's.
    let expected = [&before[1], &before[0]];
    let after: Vec<_> = result["after"].as_array().unwrap().iter().collect();
    assert_eq!(after, expected, "{result}");
    assert_eq!(result["signedInAfter"], true, "{result}");
    assert_eq!(bed.bank.counters().totps_accepted, 1);
    serve.stop().await;
    bed.finish().await;
}

/// Tab after tab, each with a cross-site iframe a little slower than the last: whichever
/// starts as outlive's own connection sets itself up on the tab loads like the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_loads_a_new_tab_whose_iframe_starts_as_outlive_attaches() {
    let bed = Bed::start(lasting(Duration::from_secs(600))).await;
    let serve = Serving::start(&bed, &[]).await;
    let tabs = serve.client(&bed, "serve_iframes.py", "iframes.json").await;
    let tabs = tabs.as_array().unwrap();
    assert!(tabs.len() >= 20, "{tabs:?}");
    let stuck: Vec<_> = tabs.iter().filter(|t| t["loaded"] != true).collect();
    assert!(stuck.is_empty(), "tabs that never loaded: {stuck:?}");
    serve.stop().await;
    bed.finish().await;
}
