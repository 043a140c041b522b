//! Every death mode, observed from a raw websocket client.

mod support;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn close_on_schedule_while_get_still_says_active() {
    let lifetime = Duration::from_secs(2);
    let gw = support::start(
        gateway::Config::new()
            .lifetime(lifetime)
            .jitter(Duration::ZERO),
    )
    .await;
    let created = Instant::now();
    let session = gw.create().await;
    let mut ws = support::attach(&session.cdp_endpoint).await;

    support::expect_close(&mut ws, CloseCode::Away).await;
    assert!(
        created.elapsed() >= lifetime - Duration::from_millis(100),
        "{:?}",
        created.elapsed()
    );

    let view = gw.client().sessions().get(&session.id).await.expect("get");
    assert_eq!(
        view.status.as_deref(),
        Some("active"),
        "the control plane does not admit it"
    );
    assert_eq!(gw.census(), (0, 1, 0));
    gw.release(&session.id).await;
    gw.finish().await;
}

#[tokio::test]
async fn reset_by_the_chaos_api_with_the_mode_from_metadata() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw
        .create_with_metadata(json!({"chaos.death": "reset"}))
        .await;
    let mut ws = support::attach(&session.cdp_endpoint).await;

    let res = gw
        .request(
            Method::POST,
            &format!("/__chaos/sessions/{}/kill", session.id),
        )
        .send()
        .await
        .expect("kill request");
    let (status, body) = support::answer(res).await;
    assert_eq!((status, &body["death"]), (200, &json!("reset")), "{body}");

    match support::next_event(&mut ws).await {
        Some(Err(WsError::Io(e))) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        other => panic!("expected a TCP reset, got {other:?}"),
    }
    assert_eq!(gw.status().chromium_processes, 0);
    gw.release(&session.id).await;
    gw.finish().await;
}

#[tokio::test]
async fn silence_answers_nothing_and_keeps_the_socket_open() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw.create().await;
    let mut ws = support::attach(&session.cdp_endpoint).await;

    let applied = gw
        .kill(&session.id, gateway::DeathMode::Silence)
        .await
        .expect("kill");
    assert_eq!(applied, gateway::DeathMode::Silence);
    assert_eq!(gw.status().chromium_processes, 0);

    let cmd = json!({"id": 2, "method": "Browser.getVersion"}).to_string();
    ws.send(Message::Text(cmd.into()))
        .await
        .expect("the socket still takes writes");
    ws.send(Message::Ping(b"anyone?".to_vec().into()))
        .await
        .expect("ping");
    // No reply, no pong, no close frame, no FIN, no RST.
    let quiet = tokio::time::timeout(Duration::from_millis(1500), ws.next()).await;
    assert!(quiet.is_err(), "expected silence, got {:?}", quiet.unwrap());

    // Releasing the session finally ends the connection.
    gw.release(&session.id).await;
    match support::next_event(&mut ws).await {
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {}
        Some(Ok(other)) => panic!("nothing may be relayed after death, got {other:?}"),
    }
    gw.finish().await;
}

#[tokio::test]
async fn dead_on_arrival_closes_at_once_and_honest_get_admits_it() {
    let gw = support::start(gateway::Config::new().doa(1.0).honest(true)).await;
    let session = gw.create().await;
    assert_eq!(gw.census(), (0, 1, 0));

    let mut ws = support::connect(&session.cdp_endpoint).await;
    support::expect_close(&mut ws, CloseCode::Error).await;
    let view = gw.client().sessions().get(&session.id).await.expect("get");
    assert_eq!(view.status.as_deref(), Some("ended"));
    let err = gw
        .kill(&session.id, gateway::DeathMode::Close)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), gateway::ErrorKind::SessionEnded);

    // Not released: shutdown cleans it up.
    gw.finish().await;
}
