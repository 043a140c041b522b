//! Page faults: a session's pages crash or close, on demand or on schedule, while its browser
//! and the client's relay connection live on. Observed from a raw CDP client on the relay.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use futures::StreamExt;
use gateway::{Config, ErrorKind, Gateway, PageFault};
use reqwest::Method;
use serde_json::{Value, json};
use solari_browser::Session;
use support::Cdp;

/// Connects through the relay with target discovery on; returns the client and the page
/// targets the browser reported (the one it starts with).
async fn discovering(session: &Session) -> (Cdp, HashSet<String>) {
    let mut cdp = Cdp::connect(&session.cdp_endpoint).await;
    cdp.call("Target.setDiscoverTargets", json!({ "discover": true }))
        .await;
    let pages = page_targets(&cdp);
    (cdp, pages)
}

/// The page targets announced by the `Target.targetCreated` events kept so far.
/// A gateway with the default config and one session; a connection to it that discovers
/// targets; and a page it opened (target id, CDP session id).
async fn a_session_with_a_page() -> (support::TestGateway, Session, Cdp, (String, String)) {
    let gw = support::start(Config::new()).await;
    let session = gw.create().await;
    let (mut cdp, _) = discovering(&session).await;
    let page = cdp.open_page().await;
    (gw, session, cdp, page)
}

fn page_targets(cdp: &Cdp) -> HashSet<String> {
    cdp.kept("Target.targetCreated")
        .iter()
        .filter(|e| e["params"]["targetInfo"]["type"] == "page")
        .filter_map(|e| e["params"]["targetInfo"]["targetId"].as_str())
        .map(str::to_owned)
        .collect()
}

fn target_is(target: &str) -> impl Fn(&Value) -> bool + '_ {
    move |m| m["params"]["targetId"] == target
}

/// `(live, dead, relay clients)`, and whether any Chromium process is alive.
/// Has the gateway fault the pages of `session` with `fault`, and checks that it hit every
/// one of `pages`.
async fn fault_every_page(
    gw: &Gateway,
    session: &Session,
    fault: PageFault,
    pages: &HashSet<String>,
) {
    let hit = gw.fail_page(&session.id, fault).await.expect("fail_page");
    assert_eq!(hit, pages.len(), "every page hit by {fault}");
}

fn census_with_relays(gw: &Gateway) -> (usize, usize, usize, bool) {
    let s = gw.status();
    (
        s.live_sessions,
        s.dead_sessions,
        s.relay_clients,
        s.chromium_processes > 0,
    )
}

#[tokio::test]
async fn crash_on_demand_kills_the_pages_not_the_browser() {
    let (gw, session, mut cdp, (page, page_session)) = a_session_with_a_page().await;
    cdp.call_on(Some(&page_session), "Inspector.enable", json!({}))
        .await;
    let pages = page_targets(&cdp);
    assert!(pages.contains(&page) && pages.len() >= 2, "{pages:?}");

    fault_every_page(&gw, &session, PageFault::Crash, &pages).await;
    cdp.event("Target.targetCrashed", target_is(&page)).await;
    cdp.event("Inspector.targetCrashed", |m| {
        m["sessionId"] == page_session
    })
    .await;

    // Same connection, same browser: the session is alive.
    cdp.assert_browser_answers().await;
    assert_eq!(census_with_relays(&gw), (1, 0, 1, true));

    // A crashed page stays, dead: crashing again hits nothing and is no failure.
    let again = gw
        .fail_page(&session.id, PageFault::Crash)
        .await
        .expect("crash again");
    assert_eq!(again, 0);
    // The browser still makes working pages.
    let (_, fresh) = cdp.open_page().await;
    let two = cdp
        .call_on(
            Some(&fresh),
            "Runtime.evaluate",
            json!({ "expression": "1 + 1" }),
        )
        .await;
    assert_eq!(two["result"]["value"], 2, "{two}");

    drop(cdp);
    gw.release(&session.id).await;
    gw.finish().await;
}

#[tokio::test]
async fn close_on_demand_destroys_the_pages_not_the_browser() {
    let (gw, session, mut cdp, (page, page_session)) = a_session_with_a_page().await;
    let pages = page_targets(&cdp);

    fault_every_page(&gw, &session, PageFault::Close, &pages).await;
    cdp.event("Target.targetDestroyed", target_is(&page)).await;
    cdp.event("Target.detachedFromTarget", |m| {
        m["params"]["sessionId"] == page_session
    })
    .await;

    cdp.assert_browser_answers().await;
    let left = cdp.call("Target.getTargets", json!({})).await;
    let left_pages = left["targetInfos"]
        .as_array()
        .expect("targetInfos")
        .iter()
        .filter(|t| t["type"] == "page")
        .count();
    assert_eq!(left_pages, 0, "{left}");
    assert_eq!(census_with_relays(&gw), (1, 0, 1, true));
    // With no page left, the browser still makes one.
    cdp.open_page().await;

    drop(cdp);
    gw.finish().await; // shutdown releases the session
}

#[tokio::test]
async fn crash_on_schedule_then_death_on_schedule() {
    let fault_after = Duration::from_secs(1);
    let lifetime = Duration::from_secs(4);
    let gw = support::start(
        Config::new()
            .lifetime(lifetime)
            .jitter(Duration::ZERO)
            .page_fault(PageFault::Crash, fault_after),
    )
    .await;
    let created = Instant::now();
    let session = gw.create().await;
    // Discovery first, so the crash of the page the browser starts with is seen even on a
    // machine too slow to open a page of its own before the fault.
    let (mut cdp, initial) = discovering(&session).await;
    assert!(!initial.is_empty(), "the browser starts with a page");
    let (page, _) = cdp.open_page().await;
    let opened_in_time = created.elapsed() < fault_after;

    // No call: the gateway does it on schedule.
    let crashed = cdp
        .event("Target.targetCrashed", |m| {
            m["params"]["targetId"]
                .as_str()
                .is_some_and(|t| initial.contains(t))
        })
        .await;
    assert!(
        created.elapsed() >= fault_after - Duration::from_millis(100),
        "crashed too early ({:?}): {crashed}",
        created.elapsed()
    );
    if opened_in_time {
        cdp.event("Target.targetCrashed", target_is(&page)).await;
    }
    cdp.assert_browser_answers().await;
    assert_eq!(census_with_relays(&gw), (1, 0, 1, true));

    // The death keeps its own schedule.
    let closed = tokio::time::timeout(support::SOON, async {
        loop {
            match cdp.ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => {} // events of the crash
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("the session dies in time");
    assert_eq!(closed.map(|f| f.code), Some(CloseCode::Away));
    assert!(
        created.elapsed() >= lifetime - Duration::from_millis(100),
        "{:?}",
        created.elapsed()
    );
    assert_eq!(gw.census(), (0, 1, 0));
    gw.finish().await;
}

#[tokio::test]
async fn metadata_schedules_a_close_for_one_session() {
    let gw = support::start(Config::new()).await;
    let session = gw
        .create_with_metadata(json!({ "chaos.pageFault": "close", "chaos.pageFaultAfterMs": 1000 }))
        .await;
    let (mut cdp, initial) = discovering(&session).await;
    let first = initial.iter().next().expect("a page").clone();
    cdp.event("Target.targetDestroyed", target_is(&first)).await;
    cdp.assert_browser_answers().await;
    assert_eq!(census_with_relays(&gw), (1, 0, 1, true));
    drop(cdp);
    gw.finish().await;
}

#[tokio::test]
async fn bad_page_fault_metadata_and_config_are_refused() {
    let gw = support::start(Config::new()).await;
    for (metadata, key) in [
        (json!({ "chaos.pageFault": "explode" }), "chaos.pageFault"),
        (json!({ "chaos.pageFault": 3 }), "chaos.pageFault"),
        (
            json!({ "chaos.pageFault": "crash", "chaos.pageFaultAfterMs": -5 }),
            "chaos.pageFaultAfterMs",
        ),
        (
            json!({ "chaos.pageFault": "crash", "chaos.pageFaultAfterMs": "10" }),
            "chaos.pageFaultAfterMs",
        ),
        // Half a schedule, and none configured to complete it.
        (
            json!({ "chaos.pageFault": "crash" }),
            "chaos.pageFaultAfterMs",
        ),
        (json!({ "chaos.pageFaultAfterMs": 10 }), "chaos.pageFault"),
    ] {
        let res = gw
            .request(Method::POST, "/sessions")
            .json(&json!({ "userMetadata": metadata }))
            .send()
            .await
            .expect("an answer");
        let (status, body) = support::answer(res).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!("ValidationError")),
            "{metadata}: {body}"
        );
        let message = body["error"].as_str().expect("a message");
        assert!(message.contains(key), "{metadata}: {message}");
    }
    gw.finish_idle().await;

    for config in [
        Config::new().page_fault(PageFault::Crash, Duration::ZERO),
        Config::new()
            .lifetime(Duration::from_secs(5))
            .jitter(Duration::ZERO)
            .page_fault(PageFault::Close, Duration::from_secs(5)),
    ] {
        let err = gateway::spawn(config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.option(), Some("page_fault"), "{err}");
    }
}

#[tokio::test]
async fn fail_page_refuses_unknown_and_ended_sessions() {
    let gw = support::start(Config::new()).await;
    for id in ["00000000-0000-4000-8000-000000000000", "not-a-session"] {
        let err = gw.fail_page(id, PageFault::Crash).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownSession, "{id}: {err}");
    }
    let session = gw.create().await;
    let token = session
        .cdp_endpoint
        .split_once("?token=")
        .expect("token")
        .1
        .to_owned();
    gw.kill(&session.id, gateway::DeathMode::Close)
        .await
        .expect("kill");
    let err = gw
        .fail_page(&session.id, PageFault::Close)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionEnded, "{err}");
    assert!(!format!("{err} {err:?}").contains(&token), "{err:?}");
    gw.finish().await;
}

#[tokio::test]
async fn pending_page_faults_end_with_their_sessions() {
    let gw = support::start(
        Config::new()
            .lifetime(Duration::from_secs(60))
            .page_fault(PageFault::Crash, Duration::from_secs(30)),
    )
    .await;
    let (a, b) = tokio::join!(gw.create(), gw.create());
    let mut cdp = Cdp::connect(&a.cdp_endpoint).await;
    cdp.assert_browser_answers().await;
    gw.release(&b.id).await;
    let s = gw.status();
    assert_eq!((s.live_sessions, s.dead_sessions), (1, 0));

    // Nothing waits for the faults still scheduled: shutdown is prompt and leaves nothing.
    let started = Instant::now();
    tokio::time::timeout(support::SOON, gw.finish())
        .await
        .expect("shutdown in time");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(cdp);
}
