//! The REST contract, driven by the unmodified `solari-browser` client (and raw HTTP where
//! the client cannot express the request).

mod support;

use serde_json::{Map, Value, json};
use solari_browser::{CreateSessionOptions, ListSessionsOptions, SolariErrorCode};

fn other(code: &str) -> Option<SolariErrorCode> {
    Some(SolariErrorCode::Other(code.to_owned()))
}

#[tokio::test]
async fn solari_client_creates_gets_lists_and_releases() {
    let gw = support::start(gateway::Config::new().max_sessions(2)).await;
    let client = support::client(&gw);

    let wrong = support::client_with_key(&gw, "wrong-key");
    let err = wrong
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(401), other("Unauthorized").as_ref())
    );

    let mut team = Map::new();
    team.insert("team".into(), json!("x"));
    let sessions = client.sessions();
    let (a, b) = tokio::join!(
        sessions.create(CreateSessionOptions::new().user_metadata(team)),
        sessions.create(CreateSessionOptions::new()),
    );
    let (a, b) = (a.expect("first create"), b.expect("second create"));
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

    client.sessions().release(&b.id).await.expect("release");
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

    client.sessions().release(&a.id).await.expect("release");
    let status = gw.status();
    assert_eq!(
        (
            status.live_sessions,
            status.dead_sessions,
            status.chromium_processes
        ),
        (0, 0, 0)
    );
    support::finish(gw).await;
}

#[tokio::test]
async fn raw_http_errors_and_idempotency() {
    let gw = support::start(gateway::Config::new().max_sessions(1)).await;
    let http = reqwest::Client::new();
    let url = format!("{}/sessions", gw.base_url());
    let bearer = format!("Bearer {}", gw.api_key());

    async fn code(res: reqwest::Response) -> (u16, Value) {
        let status = res.status().as_u16();
        (
            status,
            res.json::<Value>().await.expect("JSON error body")["code"].clone(),
        )
    }

    let res = http.post(&url).send().await.unwrap();
    assert_eq!(code(res).await, (401, json!("Unauthorized")));

    let res = http
        .post(&url)
        .header("Authorization", &bearer)
        .body("{\"userMetadata\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(code(res).await, (400, json!("InvalidJson")));

    let res = http
        .post(&url)
        .header("Authorization", &bearer)
        .body(json!({ "timeoutSeconds": "soon" }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(code(res).await, (400, json!("ValidationError")));

    let big = format!(
        "{{\"userMetadata\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(70 * 1024)
    );
    let res = http
        .post(&url)
        .header("Authorization", &bearer)
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(code(res).await, (413, json!("PayloadTooLarge")));

    let keyed = || {
        http.post(&url)
            .header("Authorization", &bearer)
            .header("Idempotency-Key", "call-1")
            .header("Content-Length", "0")
            .send()
    };
    let first = keyed().await.unwrap();
    assert_eq!(first.status().as_u16(), 201);
    let first: Value = first.json().await.unwrap();
    let again = keyed().await.unwrap();
    assert_eq!(
        again.status().as_u16(),
        201,
        "answered from the first result, not 429"
    );
    let again: Value = again.json().await.unwrap();
    assert_eq!(first["sessionId"], again["sessionId"]);
    assert_eq!(gw.status().live_sessions, 1);

    support::finish(gw).await;
}
