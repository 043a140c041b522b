//! Test support: a small two-origin web site, and a check that nothing of a run is left
//! behind. Also a provider whose browsers the test can kill: by SIGKILL, or by a websocket
//! close frame from a proxy in front of Chromium.
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
use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{BoxFuture, CdpEndpoint, LocalBrowser, LocalChromium, Provider, Session};
use outlive_testkit::{Served, serve};
use tokio::sync::{Notify, oneshot};

/// A web site on 127.0.0.1 that counts requests per path.
pub struct Site {
    pub base: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    _server: Served,
}

impl Site {
    /// Routes: `/login/:sid` sets an HttpOnly cookie `sid`; `/whoami` echoes the cookie
    /// header it received in `#cookie`; `/page/*` is a blank page; `/slow/:ms` answers after
    /// `ms` milliseconds.
    pub async fn start() -> Site {
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let app = Router::new()
            .route("/login/{sid}", get(login))
            .route("/whoami", get(whoami_page))
            .route("/page/{name}", get(page))
            .route("/slow/{ms}", get(slow))
            .layer(axum::middleware::from_fn_with_state(hits.clone(), count))
            .with_state(());
        let server = serve(app).await;
        Site {
            base: server.base.clone(),
            hits,
            _server: server,
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

async fn whoami_page(headers: HeaderMap) -> Html<String> {
    let cookie = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    Html(format!(
        "<title>whoami</title><pre id=\"cookie\">{cookie}</pre>"
    ))
}

/// A page whose response takes `ms` milliseconds: a slow server, not a hung page.
async fn slow(UrlPath(ms): UrlPath<u64>) -> Html<String> {
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    Html(format!("<title>slow</title><p id=\"name\">slow {ms}</p>"))
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

    fn newest(&self) -> Arc<Mutex<Live>> {
        self.live
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a browser was launched")
    }

    /// Ends the newest browser the way `how` says.
    pub fn kill(&self, how: Kill) {
        let live = self.newest();
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

    /// The newest browser's own CDP endpoint, bypassing outlive: for a second client.
    pub fn upstream(&self) -> String {
        let live = self.newest();
        let live = live.lock().unwrap();
        live.browser
            .as_ref()
            .expect("the browser is alive")
            .endpoint()
            .expose()
            .to_owned()
    }
}

/// A second CDP client on a browser — what another tool, the site or the provider would be:
/// it closes or crashes targets behind outlive's back.
pub struct SecondClient {
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    next_id: u64,
    /// Events read while waiting for replies.
    pub events: Vec<serde_json::Value>,
}

impl SecondClient {
    pub async fn connect(url: &str) -> SecondClient {
        let (ws, _) = async_tungstenite::tokio::connect_async(url).await.unwrap();
        SecondClient {
            ws,
            next_id: 1,
            events: Vec::new(),
        }
    }

    /// Sends a command and waits for its reply (events meanwhile are kept in `events`).
    pub async fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: Option<&str>,
    ) -> serde_json::Value {
        let id = self.send(method, params, session).await;
        loop {
            let m = self.next_message().await;
            if m["id"] == id {
                return m;
            }
            self.events.push(m);
        }
    }

    /// Sends a command without waiting for its reply (a crashing page never sends one).
    pub async fn send(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: Option<&str>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = serde_json::json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
        id
    }

    pub async fn next_message(&mut self) -> serde_json::Value {
        loop {
            match self
                .ws
                .next()
                .await
                .expect("the browser is connected")
                .unwrap()
            {
                Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                _ => continue,
            }
        }
    }

    /// Closes a target.
    pub async fn close_target(&mut self, target_id: &str) {
        let r = self
            .call(
                "Target.closeTarget",
                serde_json::json!({ "targetId": target_id }),
                None,
            )
            .await;
        assert!(r.get("error").is_none(), "closeTarget failed: {r}");
    }

    /// Crashes a page's renderer (what running out of memory does).
    pub async fn crash_target(&mut self, target_id: &str) {
        let r = self
            .call(
                "Target.attachToTarget",
                serde_json::json!({ "targetId": target_id, "flatten": true }),
                None,
            )
            .await;
        let session = r["result"]["sessionId"]
            .as_str()
            .expect("attached")
            .to_owned();
        self.send("Page.crash", serde_json::json!({}), Some(&session))
            .await;
    }

    /// Waits until a page target navigates to a URL containing `marker` and crashes it then
    /// (discovery must be on: `Target.setDiscoverTargets`).
    /// Crashes the first page target created after this call (other than `except`) the moment
    /// it is reported, before anything was done on it. Needs `Target.setDiscoverTargets`.
    pub async fn crash_next_page(&mut self, except: &str) {
        let target = loop {
            let m = self.next_message().await;
            let info = &m["params"]["targetInfo"];
            if m["method"] == "Target.targetCreated"
                && info["type"] == "page"
                && info["targetId"] != except
            {
                break info["targetId"].as_str().unwrap().to_owned();
            }
        };
        self.crash_target(&target).await;
    }

    pub async fn crash_page_at(&mut self, marker: &str) {
        let target = loop {
            let m = self.next_message().await;
            let info = &m["params"]["targetInfo"];
            if m["method"] == "Target.targetInfoChanged"
                && info["type"] == "page"
                && info["url"].as_str().is_some_and(|u| u.contains(marker))
            {
                break info["targetId"].as_str().unwrap().to_owned();
            }
        };
        self.crash_target(&target).await;
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
    let stop = async {
        let _ = close.await;
    };
    if let Some((mut client, _upstream)) = proxy_until(listener, upstream, stop).await {
        let frame = CloseFrame {
            code: CloseCode::Away,
            reason: "session ended".into(),
        };
        let _ = client.send(Message::Close(Some(frame))).await;
    }
}

/// The client side of a [`proxy_until`].
pub type ClientSocket = async_tungstenite::WebSocketStream<
    async_tungstenite::tokio::TokioAdapter<tokio::net::TcpStream>,
>;
/// The browser side of a [`proxy_until`].
pub type UpstreamSocket =
    async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

/// Accepts one client on `listener` and forwards its text and binary frames to and from
/// `upstream` until `stop` resolves: then both sockets, still open, are the answer. `None` if
/// either side failed or ended first.
pub async fn proxy_until(
    listener: tokio::net::TcpListener,
    upstream: String,
    stop: impl std::future::Future<Output = ()>,
) -> Option<(ClientSocket, UpstreamSocket)> {
    let (stream, _) = listener.accept().await.ok()?;
    let client = async_tungstenite::tokio::accept_async(stream).await.ok()?;
    let (up, _) = async_tungstenite::tokio::connect_async(upstream)
        .await
        .ok()?;
    let (mut c_tx, mut c_rx) = client.split();
    let (mut u_tx, mut u_rx) = up.split();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => {
                let client = ClientSocket::reunite(c_tx, c_rx).ok()?;
                return Some((client, UpstreamSocket::reunite(u_tx, u_rx).ok()?));
            }
            m = c_rx.next() => match m {
                Some(Ok(m)) if m.is_text() || m.is_binary() => u_tx.send(m).await.ok()?,
                Some(Ok(_)) => {}
                _ => return None,
            },
            m = u_rx.next() => match m {
                Some(Ok(m)) if m.is_text() || m.is_binary() => c_tx.send(m).await.ok()?,
                Some(Ok(_)) => {}
                _ => return None,
            },
        }
    }
}

/// What most tests start with: the site, a profile directory, and a provider of killable
/// browsers whose profiles go there.
pub async fn start() -> (Site, Profiles, Killable) {
    let (profiles, provider) = browsers();
    (Site::start().await, profiles, provider)
}

/// A profile directory, and a provider of killable browsers whose profiles go there.
pub fn browsers() -> (Profiles, Killable) {
    let profiles = Profiles::new();
    let provider = Killable::new(&profiles.path());
    (profiles, provider)
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
        let me = std::process::id() as i32;
        procfs::process::all_processes()
            .expect("/proc")
            .flatten()
            .filter(|p| p.pid() != me)
            .filter(|p| {
                p.cmdline()
                    .is_ok_and(|args| args.iter().any(|a| a.contains(&needle)))
            })
            // A zombie (or a process gone meanwhile) is not running.
            .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
            .map(|p| p.pid().to_string())
            .collect()
    }
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

/// Signs in on `site`: `/login/{sid}` sets the HttpOnly cookie `sid`, and localStorage `k`
/// gets `item`.
pub async fn sign_in(
    page: &outlive::Page,
    site: &Site,
    sid: &str,
    item: &str,
) -> Result<(), outlive::chromiumoxide::error::CdpError> {
    page.goto(NavigateParams::new(format!("{}/login/{sid}", site.base)))
        .await?;
    page.evaluate(format!("localStorage.setItem('k', {item:?})"))
        .await?;
    Ok(())
}

/// What `site` sees of the session [`sign_in`] made: the cookie header `/whoami` received,
/// and localStorage `k` (`MISSING` if unset).
pub async fn whoami(
    page: &outlive::Page,
    site: &Site,
) -> Result<(String, String), outlive::chromiumoxide::error::CdpError> {
    page.goto(NavigateParams::new(format!("{}/whoami", site.base)))
        .await?;
    let cookie = text(page, "#cookie").await?;
    let item: String = page
        .evaluate("localStorage.getItem('k') ?? 'MISSING'")
        .await?
        .into_value()?;
    Ok((cookie, item))
}
