//! What the checkpoint tests share: parts, storage keys and frame states to build checkpoints
//! from, and a page in a local Chromium to run scripts in.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use futures::StreamExt;

use super::model::{Checkpoint, FrameState, Part, StorageKey};
use super::script::evaluate_params;
use crate::relay::OwnCall;
use tokio_util::task::AbortOnDropHandle;

/// A part holding `json`, its hash made from its length (give parts of the same length
/// hashes of their own).
pub(super) fn part(json: &str) -> Option<Arc<Part>> {
    Some(Arc::new(Part {
        hash: format!("h{}", json.len()),
        json: json.to_owned(),
        left_out: 0,
    }))
}

/// The storage key of `origin` under `top`.
pub(super) fn key(top: &str, origin: &str) -> StorageKey {
    StorageKey {
        top: top.into(),
        origin: origin.into(),
    }
}

/// A frame state with only localStorage, holding `json`.
pub(super) fn local(json: &str) -> FrameState {
    FrameState {
        local: part(json),
        ..FrameState::default()
    }
}

/// A local Chromium, up.
async fn local_chromium() -> crate::LocalBrowser {
    crate::LocalChromium::new()
        .start()
        .await
        .expect("Chromium starts")
}

/// A page with a local Chromium behind it, owned by the returned guards.
pub(super) async fn chromium_page() -> (
    crate::LocalBrowser,
    chromiumoxide::Browser,
    AbortOnDropHandle<()>,
    Page,
) {
    let chromium = local_chromium().await;
    let (browser, pump, page) = connect_page(chromium.endpoint().expose()).await;
    (chromium, browser, pump, page)
}

/// A page in a local Chromium reached through outlive's relay, which sees (and arms) its
/// out-of-process frames; owned by the returned guards.
pub(super) async fn relayed_page() -> (
    crate::LocalBrowser,
    crate::relay::Relay,
    chromiumoxide::Browser,
    AbortOnDropHandle<()>,
    Page,
) {
    let chromium = local_chromium().await;
    let heartbeat = crate::relay::Heartbeat {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
    };
    let mut relay = crate::relay::Relay::start(
        chromium.endpoint(),
        heartbeat,
        crate::dialogs::Dialogs::Dismiss,
        Duration::from_secs(10),
        Default::default(),
    )
    .await
    .expect("the relay starts");
    let (browser, pump, page) = connect_page(relay.client_url()).await;
    relay.watch_page(
        page.target_id().as_ref().to_owned(),
        page.session_id().as_ref().to_owned(),
    );
    (chromium, relay, browser, pump, page)
}

/// A chromiumoxide client on the browser at `url`, its handler pumped, and a blank page.
pub(super) async fn connect_page(
    url: &str,
) -> (chromiumoxide::Browser, AbortOnDropHandle<()>, Page) {
    let (browser, mut handler) = chromiumoxide::Browser::connect(url.to_owned())
        .await
        .expect("connects");
    let pump = AbortOnDropHandle::new(tokio::spawn(async move {
        while handler.next().await.is_some() {}
    }));
    let page = browser.new_page("about:blank").await.expect("a page");
    (browser, pump, page)
}

/// What `expression` answers in `page`.
pub(super) async fn read_value<T: serde::de::DeserializeOwned>(
    page: &Page,
    expression: String,
) -> T {
    let eval = evaluate_params(expression, None).unwrap();
    page.evaluate_expression(eval)
        .await
        .expect("the check runs")
        .into_value()
        .expect("the check answers")
}

/// A local server whose `/top{n}` embeds `http://localhost:{port}/frame{n}` — another site
/// than the page's `127.0.0.1`, so an out-of-process frame — and whose every other path is a
/// new document; its port, and the guard that stops it.
pub(super) async fn two_site_server() -> (u16, AbortOnDropHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| async move {
        let path = uri.path().to_owned();
        axum::response::Html(match path.strip_prefix("/top") {
            Some(n) => format!("<iframe src=\"http://localhost:{port}/frame{n}\"></iframe>"),
            None => format!("<title>{path}</title>"),
        })
    });
    let server = AbortOnDropHandle::new(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }));
    (port, server)
}

/// What `expression` answers in the out-of-process frame of `session`.
pub(super) async fn frame_value(
    calls: &crate::relay::Calls,
    session: &str,
    expression: &str,
) -> serde_json::Value {
    let params = serde_json::json!({
        "expression": expression,
        "awaitPromise": true,
        "returnByValue": true,
    });
    let call = OwnCall {
        session: session.to_owned(),
        method: "Runtime.evaluate",
        params,
    };
    let text = calls
        .call(call, Duration::from_secs(10))
        .await
        .expect("the frame answers");
    let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
    reply["result"]["result"]["value"].clone()
}

/// The session of the page's one out-of-process frame, once it is another than `old`.
pub(super) async fn the_frame(
    page: &chromiumoxide::Page,
    calls: &crate::relay::Calls,
    old: Option<&str>,
) -> String {
    for _ in 0..500 {
        let frames = calls.frame_sessions(page.session_id().as_ref()).await;
        if let [one] = frames.as_slice()
            && Some(one.session.as_str()) != old
        {
            return one.session.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the page did not get one new out-of-process frame within 10 s");
}

/// A local site (127.0.0.1) whose every path is a new document; `/csp/…` ones forbid
/// WebAssembly (and every script but DevTools'), as a strict site's CSP does.
pub(super) async fn site() -> (String, AbortOnDropHandle<()>) {
    use axum::response::IntoResponse;
    let app = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
        let page = axum::response::Html(format!("<title>{}</title>", uri.path()));
        if uri.path().starts_with("/csp/") {
            ([("content-security-policy", "script-src 'none'")], page).into_response()
        } else {
            page.into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, AbortOnDropHandle::new(server))
}

/// The state of the first storage key `cp` holds.
pub(super) fn first(cp: &Checkpoint) -> &FrameState {
    cp.storage.values().next().expect("a storage key")
}

/// A script that fills the page's storage afresh: four 64 KiB items (each ending in
/// `lone`) in localStorage, four in sessionStorage, one 4 KiB IndexedDB record.
pub(super) fn seed(lone: &str) -> String {
    format!(
        "(async () => {{
          localStorage.clear(); sessionStorage.clear();
          for (let i = 0; i < 4; i++) {{
            localStorage.setItem('l' + i, 'a'.repeat(65536) + '{lone}');
            sessionStorage.setItem('s' + i, 'b'.repeat(65536));
          }}
          await new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
            r.onupgradeneeded = () => r.result.createObjectStore('s');
            r.onerror = () => reject(r.error);
            r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
              tx.objectStore('s').put('c'.repeat(4096), 'k');
              tx.onabort = () => reject(tx.error);
              tx.oncomplete = () => {{ r.result.close(); resolve(); }}; }}; }});
          return 1;
        }})()"
    )
}

/// One change to each kind of storage [`seed`] fills (localStorage, sessionStorage,
/// IndexedDB), a single character each, marked `az`, `bz`, `cz`; `{lone}` as in the seed.
pub(super) const CHANGES: [&str; 3] = [
    "(localStorage.setItem('l2', 'a'.repeat(65535) + 'z' + '{lone}'), 1)",
    "(sessionStorage.setItem('s3', 'b'.repeat(65535) + 'z'), 1)",
    "new Promise((resolve, reject) => { const r = indexedDB.open('db', 1);
      r.onerror = () => reject(r.error);
      r.onsuccess = () => { const tx = r.result.transaction('s', 'readwrite');
        tx.objectStore('s').put('c'.repeat(4095) + 'z', 'k');
        tx.onabort = () => reject(tx.error);
        tx.oncomplete = () => { r.result.close(); resolve(1); }; }; })",
];

/// Whether `now` reused the part `before` held (it crossed the wire as a hash), for
/// localStorage, sessionStorage and IndexedDB in turn.
pub(super) fn reused(before: &Checkpoint, now: &Checkpoint) -> [bool; 3] {
    let (a, b) = (first(before), first(now));
    let same = |x: &Option<Arc<Part>>, y: &Option<Arc<Part>>| match (x, y) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        _ => false,
    };
    [
        same(&a.local, &b.local),
        same(&a.session, &b.session),
        same(&a.idb, &b.idb),
    ]
}
