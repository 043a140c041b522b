//! Test support: a small two-origin web site, a provider whose browsers the test can kill
//! (by SIGKILL, or by a websocket close frame from a proxy in front of Chromium), and a
//! check that nothing of a run is left behind.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::CloseFrame;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use futures::StreamExt;
use outlive::{BoxFuture, CdpEndpoint, LocalBrowser, LocalChromium, Provider, Session};
use tokio::sync::{Notify, oneshot};

/// A web site on 127.0.0.1 that counts requests per path.
pub struct Site {
    pub base: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    _stop: oneshot::Sender<()>,
}

impl Site {
    /// Routes: `/login/:sid` sets an HttpOnly cookie `sid`; `/whoami` echoes the cookie
    /// header it received in `#cookie`; `/page/*` is a blank page.
    pub async fn start() -> Site {
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let app = Router::new()
            .route("/login/{sid}", get(login))
            .route("/whoami", get(whoami))
            .route("/page/{name}", get(page))
            .layer(axum::middleware::from_fn_with_state(hits.clone(), count))
            .with_state(());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Site {
            base,
            hits,
            _stop: tx,
        }
    }

    pub fn hits(&self, path_prefix: &str) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p.starts_with(path_prefix))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn hit_paths(&self) -> Vec<(String, usize)> {
        let mut v: Vec<_> = self
            .hits
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    }

    pub fn total_hits(&self) -> usize {
        self.hits(" ") + self.hits("/")
    }
}

async fn count(
    State(hits): State<Arc<Mutex<HashMap<String, usize>>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    *hits
        .lock()
        .unwrap()
        .entry(req.uri().path().to_owned())
        .or_default() += 1;
    next.run(req).await
}

async fn login(UrlPath(sid): UrlPath<String>) -> impl IntoResponse {
    (
        [(
            header::SET_COOKIE,
            format!("sid={sid}; HttpOnly; Path=/; SameSite=Lax"),
        )],
        Html("<title>logged in</title><p>ok</p>"),
    )
}

async fn whoami(headers: HeaderMap) -> Html<String> {
    let cookie = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    Html(format!(
        "<title>whoami</title><pre id=\"cookie\">{cookie}</pre>"
    ))
}

async fn page(UrlPath(name): UrlPath<String>) -> Html<String> {
    Html(format!("<title>{name}</title><p id=\"name\">{name}</p>"))
}

/// How the test ends the current browser.
#[derive(Debug, Clone, Copy)]
pub enum Kill {
    /// SIGKILL of the Chromium process group.
    Sigkill,
    /// A websocket close frame to outlive from the proxy in front of Chromium, which is then
    /// killed.
    CloseFrame,
}

struct Live {
    browser: Option<LocalBrowser>,
    close: Option<oneshot::Sender<()>>,
}

/// A provider of local Chromium browsers behind a proxy the test controls.
#[derive(Clone)]
pub struct Killable {
    chromium: LocalChromium,
    pub launches: Arc<AtomicUsize>,
    live: Arc<Mutex<Vec<Arc<Mutex<Live>>>>>,
    launched: Arc<Notify>,
}

impl Killable {
    pub fn new(profile_root: &Path) -> Killable {
        Killable {
            chromium: LocalChromium::new().profile_root(profile_root),
            launches: Arc::default(),
            live: Arc::default(),
            launched: Arc::default(),
        }
    }

    /// Ends the newest browser the way `how` says.
    pub fn kill(&self, how: Kill) {
        let live = self
            .live
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a browser was launched");
        let mut live = live.lock().unwrap();
        if let Kill::CloseFrame = how {
            if let Some(tx) = live.close.take() {
                let _ = tx.send(());
            }
        }
        if let Some(b) = live.browser.as_mut() {
            b.kill();
        }
    }
}

struct KillableSession {
    endpoint: CdpEndpoint,
    live: Arc<Mutex<Live>>,
    _proxy: tokio::task::JoinHandle<()>,
}

impl Drop for KillableSession {
    fn drop(&mut self) {
        self._proxy.abort();
        // Dropping the LocalBrowser kills it, on every path (release, or the run dropped).
        let browser = self.live.lock().unwrap().browser.take();
        drop(browser);
    }
}

impl Provider for Killable {
    fn name(&self) -> &str {
        "killable"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let browser = self.chromium.start().await?;
            let upstream = browser.endpoint().expose().to_owned();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint =
                CdpEndpoint::new(format!("ws://{}/proxy", listener.local_addr().unwrap()))?;
            let (close_tx, close_rx) = oneshot::channel();
            let proxy = tokio::spawn(proxy(listener, upstream, close_rx));
            let live = Arc::new(Mutex::new(Live {
                browser: Some(browser),
                close: Some(close_tx),
            }));
            self.live.lock().unwrap().push(live.clone());
            self.launches.fetch_add(1, Ordering::SeqCst);
            self.launched.notify_waiters();
            Ok(Box::new(KillableSession {
                endpoint,
                live,
                _proxy: proxy,
            }) as Box<dyn Session>)
        })
    }
}

impl Session for KillableSession {
    fn endpoint(&self) -> &CdpEndpoint {
        &self.endpoint
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        let browser = self.live.lock().unwrap().browser.take();
        drop(self);
        Box::pin(async move {
            if let Some(b) = browser {
                b.close().await?;
            }
            Ok(())
        })
    }
}

async fn proxy(listener: tokio::net::TcpListener, upstream: String, close: oneshot::Receiver<()>) {
    let Ok((stream, _)) = listener.accept().await else {
        return;
    };
    let Ok(client) = async_tungstenite::tokio::accept_async(stream).await else {
        return;
    };
    let Ok((up, _)) = async_tungstenite::tokio::connect_async(upstream).await else {
        return;
    };
    let (mut c_tx, mut c_rx) = client.split();
    let (mut u_tx, mut u_rx) = up.split();
    let mut close = close;
    loop {
        tokio::select! {
            _ = &mut close => {
                let _ = c_tx.send(Message::Close(Some(CloseFrame { code: CloseCode::Away, reason: "session ended".into() }))).await;
                return;
            }
            m = c_rx.next() => match m {
                Some(Ok(m)) if m.is_text() || m.is_binary() => { if u_tx.send(m).await.is_err() { return } }
                Some(Ok(_)) => {}
                _ => return,
            },
            m = u_rx.next() => match m {
                Some(Ok(m)) if m.is_text() || m.is_binary() => { if c_tx.send(m).await.is_err() { return } }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

/// A temp directory for Chromium profiles, and the leak check.
pub struct Profiles {
    pub dir: tempfile::TempDir,
}

impl Profiles {
    pub fn new() -> Profiles {
        Profiles {
            dir: tempfile::Builder::new()
                .prefix("outlive-test-")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// Panics if a Chromium process of these profiles is alive or a profile dir remains.
    ///
    /// outlive sends SIGKILL before it returns; the kernel finishes the deaths on its own
    /// schedule, so processes get a bounded few seconds to disappear.
    pub fn assert_nothing_left(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.live_processes().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let alive = self.live_processes();
        assert!(
            alive.is_empty(),
            "Chromium processes left behind: {alive:?}"
        );
        let left: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "profiles left behind: {left:?}");
    }

    fn live_processes(&self) -> Vec<String> {
        let needle = self.dir.path().to_string_lossy().into_owned();
        let me = std::process::id().to_string();
        let mut alive = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.chars().all(|c| c.is_ascii_digit()) || name == me {
                continue;
            }
            if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
                let cmd = String::from_utf8_lossy(&cmd);
                if cmd.contains(&needle) && !is_zombie(&entry.path()) {
                    alive.push(name);
                }
            }
        }
        alive
    }
}

fn is_zombie(proc_dir: &Path) -> bool {
    std::fs::read_to_string(proc_dir.join("stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Reads the text of the first element matching `selector`.
pub async fn text(
    page: &outlive::Page,
    selector: &str,
) -> Result<String, outlive::chromiumoxide::error::CdpError> {
    page.evaluate(format!(
        "document.querySelector({selector:?})?.textContent ?? ''"
    ))
    .await?
    .into_value::<String>()
    .map_err(Into::into)
}
