//! The REST contract, driven by the unmodified `solari-browser` client (and raw HTTP where
//! the client cannot express the request).

mod support;

use reqwest::Method;
use serde_json::json;
use solari_browser::{CreateSessionOptions, ListSessionsOptions, SolariErrorCode};

fn other(code: &str) -> Option<SolariErrorCode> {
    Some(SolariErrorCode::Other(code.to_owned()))
}

#[tokio::test]
async fn solari_client_creates_gets_lists_and_releases() {
    let gw = support::start(gateway::Config::new().max_sessions(2)).await;
    let client = gw.client();

    let wrong = gw.client_with_key("wrong-key");
    let err = wrong
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(401), other("Unauthorized").as_ref())
    );

    let (a, b) = tokio::join!(gw.create_with_metadata(json!({"team": "x"})), gw.create(),);
    assert!(
        a.cdp_endpoint
            .starts_with(&format!("ws://{}/cdp/{}?token=", gw.local_addr(), a.id))
    );
    assert!(a.expires_at.ends_with('Z'), "{}", a.expires_at);
    assert_eq!(a.user_metadata.as_ref().unwrap()["team"], "x");
    assert_eq!(gw.status().live_sessions, 2);

    let err = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert_eq!(err.code(), Some(&SolariErrorCode::ConcurrencyLimitExceeded));

    let view = client.sessions().get(&a.id).await.expect("get");
    assert_eq!(view.id.as_deref(), Some(a.id.as_str()));
    assert_eq!(view.status.as_deref(), Some("active"));
    assert_eq!(view.cdp_endpoint.as_deref(), Some(a.cdp_endpoint.as_str()));

    let all = client
        .sessions()
        .list(ListSessionsOptions::default())
        .await
        .expect("list");
    assert_eq!(all.sessions.len(), 2);
    let mut filtered = ListSessionsOptions::default();
    filtered.metadata.insert("team".into(), "x".into());
    let page = client
        .sessions()
        .list(filtered)
        .await
        .expect("filtered list");
    assert_eq!(
        page.sessions
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        [a.id.as_str()]
    );

    gw.release(&b.id).await;
    client
        .sessions()
        .release(&b.id)
        .await
        .expect("release again is fine");
    let gone = client.sessions().get(&b.id).await.expect("get released");
    assert_eq!(gone.status.as_deref(), Some("released"));
    assert!(gone.cdp_endpoint.is_none());

    for bad in ["not-a-session", "00000000-0000-4000-8000-000000000000"] {
        let err = client.sessions().get(bad).await.unwrap_err();
        assert_eq!(err.status(), Some(404));
        assert_eq!(err.code(), Some(&SolariErrorCode::InvalidSessionId));
        let err = client.sessions().release(bad).await.unwrap_err();
        assert_eq!(err.code(), Some(&SolariErrorCode::InvalidSessionId));
    }

    gw.release(&a.id).await;
    gw.finish_idle().await;
}

#[tokio::test]
async fn raw_http_errors_and_idempotency() {
    let gw = support::start(gateway::Config::new().max_sessions(1)).await;
    let url = format!("{}/sessions", gw.base_url());
    let res = reqwest::Client::new().post(&url).send().await.unwrap();
    assert_eq!(
        support::answer_code(res).await,
        (401, json!("Unauthorized"))
    );

    let big = format!(
        "{{\"userMetadata\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(70 * 1024)
    );
    for (body, expected) in [
        ("{\"userMetadata\": ".to_owned(), (400, "InvalidJson")),
        (
            json!({ "timeoutSeconds": "soon" }).to_string(),
            (400, "ValidationError"),
        ),
        (big, (413, "PayloadTooLarge")),
    ] {
        let res = gw.request(Method::POST, "/sessions").body(body).send();
        let (status, code) = support::answer_code(res.await.unwrap()).await;
        assert_eq!((status, code), (expected.0, json!(expected.1)));
    }

    let (status, first) = gw.keyed_create("call-1").await;
    assert_eq!(status, 201);
    let (status, again) = gw.keyed_create("call-1").await;
    assert_eq!(status, 201, "answered from the first result, not 429");
    assert_eq!(first["sessionId"], again["sessionId"]);
    assert_eq!(gw.status().live_sessions, 1);

    gw.finish().await;
}
