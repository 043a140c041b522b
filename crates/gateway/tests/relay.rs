//! The CDP relay: real websocket, real Chromium, token checks, added latency, release.

mod support;

use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use solari_browser::CreateSessionOptions;

#[tokio::test]
async fn relays_cdp_with_latency_and_closes_on_release() {
    let rtt = Duration::from_millis(200);
    let gw = support::start(gateway::Config::new().rtt(rtt)).await;
    let client = support::client(&gw);
    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("create");
    let url = session.cdp_endpoint.clone();

    let (base, _token) = url.split_once("?token=").expect("token in the URL");
    assert_eq!(support::refused_status(base).await, 401, "missing token");
    assert_eq!(
        support::refused_status(&format!("{base}?token=nope")).await,
        401,
        "wrong token"
    );
    let unknown = format!(
        "ws://{}/cdp/00000000-0000-4000-8000-000000000000?token=x",
        gw.local_addr()
    );
    assert_eq!(
        support::refused_status(&unknown).await,
        404,
        "unknown session"
    );

    let mut ws = support::connect(&url).await;
    let started = Instant::now();
    let reply = support::cdp(&mut ws, 1, "Browser.getVersion").await;
    assert!(
        reply["result"]["product"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "{reply}"
    );
    assert!(
        started.elapsed() >= rtt,
        "rtt not applied: {:?}",
        started.elapsed()
    );
    assert_eq!(
        support::refused_status(&url).await,
        409,
        "one client per session"
    );

    client
        .sessions()
        .release(&session.id)
        .await
        .expect("release");
    match support::next_event(&mut ws).await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Away),
        other => panic!("expected a close frame on release, got {other:?}"),
    }
    assert!(
        support::next_event(&mut ws).await.is_none(),
        "then the connection ends"
    );
    assert_eq!(support::refused_status(&url).await, 410, "released");
    assert_eq!(gw.status().chromium_processes, 0);
    support::finish(gw).await;
}
