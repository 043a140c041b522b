//! Shared by the end-to-end tests: a gateway + a small site on 127.0.0.1, a provider that
//! remembers the session ids it launched, milestone plumbing and quick runs.
#![allow(dead_code)]

pub mod commands;
pub mod partition;
pub mod pg;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use outlive::chromiumoxide::error::CdpError;
use outlive::solari_browser::{Client, ClientOptions, CreateSessionOptions};
use outlive::{
    BoxFuture, CdpEndpoint, Milestone, Options, Provider, Session, Solari, SolariLaunch,
};
use outlive_testkit::{Served, serve};
use tokio::sync::{Notify, mpsc};

/// A site that sets an HttpOnly cookie, and has a page whose load the test can hold and see.
pub struct Site {
    pub base: String,
    /// Notified each time `/slow` is requested.
    pub slow_hit: Arc<Notify>,
    pub slow_hits: Arc<AtomicU32>,
    _server: Served,
}

#[derive(Clone)]
struct SiteState {
    slow_hit: Arc<Notify>,
    slow_hits: Arc<AtomicU32>,
}

impl Site {
    pub async fn start() -> Site {
        let state = SiteState {
            slow_hit: Arc::default(),
            slow_hits: Arc::default(),
        };
        let app = Router::new()
            .route("/login/{sid}", get(login))
            .route("/page/{name}", get(page))
            .route("/slow", get(slow))
            .with_state(state.clone());
        let server = serve(app).await;
        Site {
            base: server.base.clone(),
            slow_hit: state.slow_hit,
            slow_hits: state.slow_hits,
            _server: server,
        }
    }
}

async fn login(Path(sid): Path<String>) -> impl IntoResponse {
    (
        [(
            header::SET_COOKIE,
            format!("sid={sid}; HttpOnly; Path=/; SameSite=Lax"),
        )],
        Html("<title>in</title>"),
    )
}

async fn page(Path(name): Path<String>) -> Html<String> {
    Html(format!("<title>{name}</title><p id=\"name\">{name}</p>"))
}

/// The first request is held for a while (long enough for the test to kill the browser
/// mid-navigation); later ones answer at once.
async fn slow(State(state): State<SiteState>) -> Html<&'static str> {
    let n = state.slow_hits.fetch_add(1, Ordering::SeqCst);
    state.slow_hit.notify_waiters();
    if n == 0 {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    Html("<title>slow</title><p id=\"name\">slow</p>")
}

/// A Solari provider on the gateway that remembers the ids of the sessions it launched, and
/// can make its first `doa_first` sessions dead on arrival.
pub struct Tracked {
    normal: Solari,
    doa: Solari,
    pub doa_first: u32,
    pub launches: AtomicU32,
    pub ids: Mutex<Vec<String>>,
}

pub fn client(gw: &gateway::Gateway) -> Client {
    Client::new(ClientOptions::new(gw.api_key(), gw.base_url())).unwrap()
}

/// The bearer token in a Solari CDP endpoint's query.
pub fn token(endpoint: &CdpEndpoint) -> String {
    let url = url::Url::parse(endpoint.expose()).unwrap();
    url.query_pairs()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .expect("a Solari CDP endpoint carries a token")
}

pub fn with_metadata(gw: &gateway::Gateway, meta: serde_json::Value) -> Solari {
    let map = meta.as_object().unwrap().clone();
    Solari::new(client(gw))
        .launch_options(SolariLaunch::new().create(CreateSessionOptions::new().user_metadata(map)))
}

impl Tracked {
    pub fn new(gw: &gateway::Gateway, doa_first: u32) -> Tracked {
        Tracked {
            normal: Solari::new(client(gw)),
            doa: with_metadata(gw, serde_json::json!({"chaos.death": "doa"})),
            doa_first,
            launches: AtomicU32::new(0),
            ids: Mutex::default(),
        }
    }

    pub fn newest(&self) -> String {
        self.ids
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a session was launched")
    }
}

impl Provider for Tracked {
    fn name(&self) -> &str {
        "tracked"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let n = self.launches.fetch_add(1, Ordering::SeqCst);
            let inner = if n < self.doa_first {
                &self.doa
            } else {
                &self.normal
            };
            let s = inner.launch().await?;
            if let Some(id) = outlive_bed::bed::session_id(s.endpoint()) {
                self.ids.lock().unwrap().push(id.to_owned());
            }
            Ok(s)
        })
    }
}

/// Milestones as a stream the test can wait on.
pub fn milestones() -> (
    impl Fn(&Milestone) + Send + Sync + 'static,
    mpsc::UnboundedReceiver<Milestone>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (move |m: &Milestone| drop(tx.send(m.clone())), rx)
}

/// Polls of [`bank_run`], 100 ms apart: 7.5 s of work, more than two 3 s lifetimes.
pub const BANK_POLLS: u32 = 75;

/// The bank task of [`BANK_POLLS`] through `provider` on `bed`, checkpointing every 500 ms:
/// its result, wide event and sign-ins. A survival run, not an efficiency one: on a loaded
/// 2-core machine a launch can take most of a 3 s lifetime, so the budget is generous.
pub async fn bank_run(
    bed: &outlive_bed::bed::TestBed,
    provider: &impl Provider,
) -> (
    Result<u32, String>,
    outlive::WideEvent,
    outlive_bed::bank::BankProgress,
) {
    let task = bed.task(BANK_POLLS, Duration::from_millis(100));
    let progress = outlive_bed::bank::BankProgress::default();
    let options = Options::new()
        .checkpoint_every(Duration::from_millis(500))
        .max_relaunches(40)
        .relaunch_backoff(Duration::from_millis(200));
    let outlive::Reported { result, event } = task.outlive(provider, &progress, options).await;
    (result.map_err(|e| e.to_string()), event, progress)
}

/// The bank task of `polls` polls, 100 ms apart, through `provider` on `bed` with `options`
/// and a checkpoint every 500 ms; `act` runs each time a poll in `at` is done (where the test
/// kills or faults the browser). The run's report and the task's progress.
pub async fn bank_run_acting<P: Provider>(
    bed: &outlive_bed::bed::TestBed,
    provider: &P,
    polls: u32,
    at: &'static [u32],
    options: Options,
    mut act: impl AsyncFnMut(),
) -> (
    outlive::Reported<u32, outlive_bed::bank::BankError>,
    outlive_bed::bank::BankProgress,
) {
    let task = bed.task(polls, Duration::from_millis(100));
    let progress = outlive_bed::bank::BankProgress::default();
    let (on_event, mut signals) = signal_at_polls(at);
    let options = options.checkpoint_every(Duration::from_millis(500));
    let run = task.outlive_watched(provider, &progress, &on_event, options);
    let acting = async {
        while signals.recv().await.is_some() {
            act().await;
        }
    };
    let reported = tokio::select! {
        reported = run => reported,
        () = acting => unreachable!("the sender lives as long as the run"),
    };
    (reported, progress)
}

/// A bank task's event handler that sends on the channel when a poll in `polls` is done:
/// where a test kills or faults the browser.
pub fn signal_at_polls(
    polls: &'static [u32],
) -> (
    impl Fn(outlive_bed::bank::BankEvent) + Send + Sync,
    mpsc::UnboundedReceiver<()>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let on_event = move |e: outlive_bed::bank::BankEvent| {
        if let outlive_bed::bank::BankEvent::Polled { done, .. } = e {
            if polls.contains(&done) {
                let _ = tx.send(());
            }
        }
    };
    (on_event, rx)
}

/// The next `Died` milestone on `rx`: its cause and when it was detected.
pub async fn next_death(
    rx: &mut mpsc::UnboundedReceiver<Milestone>,
) -> (outlive::DeathCause, std::time::Instant) {
    loop {
        if let Milestone::Died {
            cause, detected_at, ..
        } = rx.recv().await.expect("a death milestone")
        {
            return (cause, detected_at);
        }
    }
}

/// Shuts `bed` down and asserts it left no session and no Chromium process.
pub async fn shutdown_clean(bed: outlive_bed::bed::TestBed) {
    let status = bed.shutdown().await.unwrap();
    assert_eq!((status.live_sessions, status.chromium_processes), (0, 0));
}

/// Shuts `bed` down and asserts every session was released and no Chromium is left.
pub async fn shutdown_released(bed: outlive_bed::bed::TestBed) {
    let s = bed.shutdown().await.unwrap();
    let left = (s.live_sessions, s.dead_sessions, s.chromium_processes);
    assert_eq!(left, (0, 0, 0), "sessions or Chromium left: {s:?}");
}

/// Waits (bounded) until the gateway holds no live session and no Chromium process.
pub async fn assert_gateway_clean(gw: &gateway::Gateway) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = gw.status();
        if s.live_sessions == 0 && s.chromium_processes == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gateway not clean: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gateway whose sessions live long enough that only the test kills them, with `rtt`
/// added per CDP message.
pub async fn fault_gateway(rtt: Duration) -> gateway::Gateway {
    gateway::spawn(outlive_bed::bed::until_killed(rtt))
        .await
        .unwrap()
}

/// A [`fault_gateway`] without added RTT, and a [`Tracked`] provider on it whose first
/// `doa_first` sessions are dead on arrival.
pub async fn fault_bed(doa_first: u32) -> (gateway::Gateway, Tracked) {
    let gw = fault_gateway(Duration::ZERO).await;
    let provider = Tracked::new(&gw, doa_first);
    (gw, provider)
}

/// Waits until the gateway is clean (see [`assert_gateway_clean`]), then shuts it down.
pub async fn finish_clean(gw: gateway::Gateway) {
    assert_gateway_clean(&gw).await;
    gw.shutdown().await.unwrap();
}

/// Options without automatic checkpoints and with a short relaunch backoff.
pub fn quiet() -> Options {
    Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .relaunch_backoff(Duration::from_millis(100))
}

/// Runs a task that returns `value` at once; returns its result and the run's wide event.
pub async fn run_instant<T: Clone>(
    provider: &Tracked,
    value: T,
    options: Options,
) -> outlive::Reported<T, CdpError> {
    outlive::outlive_with_event(
        provider,
        |_page, _ctx| {
            let value = value.clone();
            async move { Ok::<_, CdpError>(value) }
        },
        options,
    )
    .await
}

/// The `outlive` binary to run: `$OUTLIVE_TEST_BIN` when set (a copy of this checkout's
/// build, for checkouts that share one target directory and rebuild the binary under each
/// other's tests), else the one Cargo built for these tests.
pub fn outlive_bin() -> std::path::PathBuf {
    std::env::var_os("OUTLIVE_TEST_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_outlive").into())
}

/// The pids of the live processes whose command line mentions `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    procfs::process::all_processes()
        .unwrap()
        .flatten()
        .filter(|p| {
            p.cmdline()
                .is_ok_and(|c| c.iter().any(|a| a.contains(marker)))
        })
        .map(|p| p.pid)
        .collect()
}

/// Waits (up to 5 s) until no process whose command line mentions `marker` is alive; panics
/// with the pids left otherwise.
pub fn assert_no_process(marker: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
