//! What the checkpoint tests share: parts, storage keys and frame states to build checkpoints
//! from, and a page in a local Chromium to run scripts in.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use futures::StreamExt;

use super::script::evaluate_params;
use super::{FrameState, Part, StorageKey};
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
        crate::options::Dialogs::Dismiss,
        Duration::from_secs(10),
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
