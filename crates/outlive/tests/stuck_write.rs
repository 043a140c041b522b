//! A half-open browser connection while the task sends a multi-MB command, end to end with
//! Chromium. A proxy in front of the browser stops reading (and forwarding) for good, so the
//! relay's write of the command fills the kernel buffers and never finishes. This provider
//! allows no second connection, so the relay must declare the silence once it has lasted the
//! unconfirmed allowance (5 s; `docs/deaths.md`). The task is re-entered on a
//! fresh browser. It is not left waiting on the write (and on chromiumoxide's 60 s request
//! timeout), as when the relay awaited its writes where it decides.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outlive::chromiumoxide::error::CdpError;
use outlive::{
    BoxFuture, CdpEndpoint, DeathCause, LocalBrowser, LocalChromium, Milestone, Provider, Session,
};
use tokio::sync::Notify;

const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a silence no second connection can confirm may last (`docs/deaths.md`).
const ALLOWANCE: Duration = Duration::from_secs(5);
/// What a loaded machine may add.
const TOLERANCE: Duration = Duration::from_secs(1);

/// Local Chromium browsers, each behind a proxy the test can freeze.
struct Freezable {
    chromium: LocalChromium,
    launches: AtomicUsize,
    /// The newest browser's freeze switch.
    freeze: Mutex<Option<Arc<Notify>>>,
    /// When the proxy stopped reading.
    frozen_at: Arc<Mutex<Option<Instant>>>,
}

impl Freezable {
    /// The newest browser's proxy stops reading and forwarding, for good.
    fn freeze(&self) {
        let switch = self.freeze.lock().unwrap().clone().expect("a browser");
        switch.notify_one();
    }
}

struct FrozenSession {
    endpoint: CdpEndpoint,
    browser: Option<LocalBrowser>,
    proxy: tokio::task::JoinHandle<()>,
}

impl Drop for FrozenSession {
    fn drop(&mut self) {
        self.proxy.abort();
    }
}

impl Session for FrozenSession {
    fn endpoint(&self) -> &CdpEndpoint {
        &self.endpoint
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        let browser = self.browser.take();
        Box::pin(async move {
            if let Some(b) = browser {
                b.close().await?;
            }
            Ok(())
        })
    }
}

impl Provider for Freezable {
    fn name(&self) -> &str {
        "freezable"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let browser = self.chromium.start().await?;
            let upstream = browser.endpoint().expose().to_owned();
            // A small receive buffer: the relay's writes fill the kernel buffers sooner.
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 << 10).unwrap();
            socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let listener = socket.listen(4).unwrap();
            let endpoint =
                CdpEndpoint::new(format!("ws://{}/proxy", listener.local_addr().unwrap()))?;
            let switch = Arc::new(Notify::new());
            *self.freeze.lock().unwrap() = Some(switch.clone());
            let proxy = tokio::spawn(proxy(listener, upstream, switch, self.frozen_at.clone()));
            self.launches.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(FrozenSession {
                endpoint,
                browser: Some(browser),
                proxy,
            }) as Box<dyn Session>)
        })
    }
}

/// Forwards frames both ways until `freeze`; from then on reads and writes nothing, holding
/// both sockets open.
async fn proxy(
    listener: tokio::net::TcpListener,
    upstream: String,
    freeze: Arc<Notify>,
    frozen_at: Arc<Mutex<Option<Instant>>>,
) {
    let held = support::proxy_until(listener, upstream, freeze.notified()).await;
    if held.is_some() {
        *frozen_at.lock().unwrap() = Some(Instant::now());
        std::future::pending::<()>().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_browser_during_a_multi_mb_command_is_silence_within_interval_plus_timeout() {
    let profiles = support::Profiles::new();
    let provider = Freezable {
        chromium: LocalChromium::new().profile_root(profiles.path()),
        launches: AtomicUsize::new(0),
        freeze: Mutex::new(None),
        frozen_at: Arc::default(),
    };
    let deaths: Arc<Mutex<Vec<(DeathCause, Instant)>>> = Arc::default();
    let seen = deaths.clone();
    let options = outlive::Options::new()
        .heartbeat_interval(INTERVAL)
        .heartbeat_timeout(TIMEOUT)
        .on_milestone(move |m| {
            if let Milestone::Died {
                cause, detected_at, ..
            } = m
            {
                seen.lock().unwrap().push((*cause, *detected_at));
            }
        });
    let run = outlive::outlive(
        &provider,
        |page, ctx| {
            let provider = &provider;
            async move {
                if ctx.attempt() == 1 {
                    page.evaluate("1").await?;
                    provider.freeze();
                    // A restore-sized command: 24 MiB, far more than the kernel buffers hold.
                    let big = format!("'{}'.length", "x".repeat(24 << 20));
                    page.evaluate(big).await?;
                    unreachable!("the browser never answers");
                }
                Ok::<_, CdpError>(ctx.attempt())
            }
        },
        options,
    );
    let attempts = tokio::time::timeout(Duration::from_secs(50), run)
        .await
        .expect("the run hung on the stuck write")
        .unwrap();
    assert_eq!(attempts, 2);
    assert_eq!(provider.launches.load(Ordering::SeqCst), 2);
    let (cause, detected_at) = deaths.lock().unwrap()[0];
    let frozen_at = provider.frozen_at.lock().unwrap().expect("frozen");
    let after = detected_at.saturating_duration_since(frozen_at);
    eprintln!("{cause:?} detected {after:?} after the proxy stopped reading");
    assert_eq!(cause, DeathCause::Silence);
    assert!(after <= ALLOWANCE + TOLERANCE, "{after:?}");
    profiles.assert_nothing_left();
}
