//! The CDP relay: real websocket, real Chromium, token checks, added latency, release.

mod support;

use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[tokio::test]
async fn relays_cdp_with_latency_and_closes_on_release() {
    let rtt = Duration::from_millis(200);
    // One connection per session here, so that a second one is refused (the default is 4).
    let gw = support::start(gateway::Config::new().rtt(rtt).connections_per_session(1)).await;
    let session = gw.create().await;
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
        "one client per session, as configured"
    );

    gw.release(&session.id).await;
    support::expect_close(&mut ws, CloseCode::Away).await;
    assert_eq!(support::refused_status(&url).await, 410, "released");
    assert_eq!(gw.status().chromium_processes, 0);
    gw.finish().await;
}

#[tokio::test]
async fn a_session_takes_several_clients_and_each_meets_its_death() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw.create().await;
    let url = session.cdp_endpoint.clone();
    let mut first = support::connect(&url).await;
    let mut second = support::connect(&url).await;
    for ws in [&mut first, &mut second] {
        let reply = support::cdp(ws, 1, "Browser.getVersion").await;
        assert!(reply["result"]["product"].is_string(), "{reply}");
    }
    gw.release(&session.id).await;
    support::expect_close(&mut first, CloseCode::Away).await;
    support::expect_close(&mut second, CloseCode::Away).await;
    gw.finish().await;
}
