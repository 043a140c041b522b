//! Control-plane faults, seen through the unmodified `solari-browser` client (and raw HTTP for
//! the chaos route and the `Idempotency-Key` cases).

mod support;

use std::time::{Duration, Instant};

use gateway::{DeleteFault, FaultCounters, Gateway};
use serde_json::{Value, json};
use solari_browser::{Client, ClientOptions, CreateSessionOptions, SolariErrorCode};

fn client_with(gw: &Gateway, options: impl FnOnce(ClientOptions) -> ClientOptions) -> Client {
    Client::new(options(
        ClientOptions::new(gw.api_key(), gw.base_url()).backoff_ms(50),
    ))
    .expect("client")
}

fn counters(creates_faulted: u64, deletes_faulted: u64) -> FaultCounters {
    let mut c = FaultCounters::default();
    c.creates_faulted = creates_faulted;
    c.deletes_faulted = deletes_faulted;
    c
}

/// `(live, dead, chromium processes)`.
fn census(gw: &Gateway) -> (usize, usize, usize) {
    let s = gw.status();
    (s.live_sessions, s.dead_sessions, s.chromium_processes)
}

/// Waits (bounded) until no Chromium this gateway started is alive.
async fn no_chromium_left(gw: &Gateway) {
    let gone = tokio::time::timeout(support::SOON, async {
        while gw.status().chromium_processes > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{:?}", gw.status());
}

#[tokio::test]
async fn unhealthy_creates_then_success_without_client_retries() {
    let gw = support::start(gateway::Config::new()).await;
    let client = client_with(&gw, |o| o.max_attempts(1));
    gw.fail_creates(2, 503).expect("a 503 is a fault");

    for _ in 0..2 {
        let err = client
            .sessions()
            .create(CreateSessionOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(503), "{err}");
        assert_eq!(err.code(), Some(&SolariErrorCode::BrowserUnhealthy));
        assert_eq!(census(&gw), (0, 0, 0), "no browser for a faulted create");
    }
    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("the third create succeeds");
    assert_eq!(gw.status().live_sessions, 1);
    assert_eq!(gw.fault_counters(), counters(2, 0));

    client
        .sessions()
        .release(&session.id)
        .await
        .expect("release");
    support::finish(gw).await;
}

#[tokio::test]
async fn the_clients_own_retries_absorb_unhealthy_creates() {
    let gw = support::start(gateway::Config::new()).await;
    // The client retries 503 itself, with the same Idempotency-Key on every attempt.
    let client = client_with(&gw, |o| o.max_attempts(3));
    gw.fail_creates(2, 503).expect("fault");

    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("the third attempt creates: no fault was replayed for the key");
    assert_eq!(gw.fault_counters(), counters(2, 0));
    assert_eq!(census(&gw).0, 1, "exactly one session");

    client
        .sessions()
        .release(&session.id)
        .await
        .expect("release");
    support::finish(gw).await;
}

#[tokio::test]
async fn concurrency_limit_fault_is_not_retried_by_the_client() {
    let gw = support::start(gateway::Config::new()).await;
    let client = client_with(&gw, |o| o.max_attempts(3));
    gw.fail_creates(1, 429).expect("fault");

    let err = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429), "{err}");
    assert_eq!(err.code(), Some(&SolariErrorCode::ConcurrencyLimitExceeded));
    assert_eq!(
        gw.fault_counters(),
        counters(1, 0),
        "one request, one fault"
    );
    assert_eq!(census(&gw), (0, 0, 0));
    support::finish(gw).await;
}

#[tokio::test]
async fn a_faulted_keyed_create_is_neither_recorded_nor_replayed() {
    let gw = support::start(gateway::Config::new()).await;
    gw.fail_creates(1, 503).expect("fault");
    let http = reqwest::Client::new();
    let keyed = || {
        http.post(format!("{}/sessions", gw.base_url()))
            .bearer_auth(gw.api_key())
            .header("Idempotency-Key", "call-1")
            .header("Content-Length", "0")
            .send()
    };

    let faulted = keyed().await.expect("answer");
    assert_eq!(faulted.status().as_u16(), 503);
    assert_eq!(
        faulted.json::<Value>().await.expect("JSON")["code"],
        "BrowserUnhealthy"
    );
    let created = keyed().await.expect("answer");
    assert_eq!(created.status().as_u16(), 201, "the retry creates");
    let created: Value = created.json().await.expect("JSON");
    let replayed: Value = keyed().await.expect("answer").json().await.expect("JSON");
    assert_eq!(created["sessionId"], replayed["sessionId"], "then replays");
    assert_eq!(census(&gw).0, 1);
    support::finish(gw).await;
}

#[tokio::test]
async fn delete_500_kills_the_browser_but_leaves_the_session_unreleased() {
    let gw = support::start(gateway::Config::new()).await;
    let client = support::client(&gw);
    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("create");
    gw.fail_deletes(Some(1), DeleteFault::Status(500))
        .expect("fault");

    let err = client.sessions().release(&session.id).await.unwrap_err();
    assert_eq!(err.status(), Some(500), "{err}");
    assert_eq!(
        err.code(),
        Some(&SolariErrorCode::Other("InternalError".into()))
    );
    assert_eq!(census(&gw), (0, 1, 0), "dead, unreleased, no Chromium");
    assert_eq!(gw.fault_counters(), counters(0, 1));
    let view = client.sessions().get(&session.id).await.expect("get");
    assert_eq!(view.status.as_deref(), Some("active"), "not released");

    client
        .sessions()
        .release(&session.id)
        .await
        .expect("the next delete is not faulted");
    assert_eq!(census(&gw), (0, 0, 0));
    support::finish(gw).await;
}

#[tokio::test]
async fn a_hung_delete_times_the_client_out_and_shutdown_is_prompt() {
    let gw = support::start(gateway::Config::new()).await;
    let client = client_with(&gw, |o| o.timeout_ms(1000).max_attempts(1));
    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("create");
    gw.fail_deletes(None, DeleteFault::Hang).expect("fault");

    let started = Instant::now();
    let err = client.sessions().release(&session.id).await.unwrap_err();
    assert_eq!(err.status(), None, "no answer, a timeout: {err}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    no_chromium_left(&gw).await;
    assert_eq!(census(&gw), (0, 1, 0));

    // Still hanging: a second delete is faulted too.
    let pending = tokio::spawn({
        let client = client_with(&gw, |o| o.timeout_ms(60_000).max_attempts(1));
        let id = session.id.clone();
        async move { client.sessions().release(&id).await }
    });
    tokio::time::timeout(support::SOON, async {
        while gw.fault_counters().deletes_faulted < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second delete arrives");

    let started = Instant::now();
    let status = gw.shutdown().await.expect("no task panicked");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert_eq!(status, gateway::Status::default());
    let outcome = tokio::time::timeout(support::SOON, pending)
        .await
        .expect("the hung request ends with the gateway")
        .expect("no panic");
    assert!(outcome.is_err(), "the hung delete was never answered 2xx");
}

#[tokio::test]
async fn one_hung_delete_is_absorbed_by_the_clients_retry() {
    let gw = support::start(gateway::Config::new()).await;
    let client = client_with(&gw, |o| o.timeout_ms(1000).max_attempts(2));
    let session = client
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .expect("create");
    gw.fail_deletes(Some(1), DeleteFault::Hang).expect("fault");

    client
        .sessions()
        .release(&session.id)
        .await
        .expect("the retry after the timeout releases");
    assert_eq!(gw.fault_counters(), counters(0, 1));
    assert_eq!(census(&gw), (0, 0, 0));
    support::finish(gw).await;
}

#[tokio::test]
async fn faults_route_sets_clears_and_validates() {
    let gw = support::start(gateway::Config::new()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/__chaos/faults", gw.base_url());
    let post = |body: String| http.post(&url).bearer_auth(gw.api_key()).body(body).send();
    async fn answer(res: reqwest::Response) -> (u16, Value) {
        let status = res.status().as_u16();
        (status, res.json().await.expect("JSON"))
    }

    let res = http.post(&url).body("{}").send().await.expect("answer");
    assert_eq!(res.status().as_u16(), 401, "bearer auth like the rest");

    let (status, body) = answer(
        post(
            json!({
                "creates": {"count": 2, "status": 503},
                "deletes": {"count": 1, "status": 500},
            })
            .to_string(),
        )
        .await
        .expect("answer"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "creates": {"remaining": 2, "status": 503},
            "deletes": {"remaining": 1, "status": 500},
            "createsFaulted": 0,
            "deletesFaulted": 0,
        })
    );

    let (status, body) = answer(
        post(json!({"clear": true, "deletes": {"hang": true}}).to_string())
            .await
            .expect("answer"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["creates"], Value::Null, "cleared");
    assert_eq!(body["deletes"], json!({"remaining": null, "hang": true}));

    for (bad, code) in [
        ("{\"creates\":", "InvalidJson"),
        ("[]", "ValidationError"),
        (
            r#"{"creates": {"count": 1, "status": 200}}"#,
            "ValidationError",
        ),
        (r#"{"creates": {"count": 1}}"#, "ValidationError"),
        (
            r#"{"deletes": {"status": 500, "hang": true}}"#,
            "ValidationError",
        ),
        (r#"{"deletes": {}}"#, "ValidationError"),
        (r#"{"delete": {"hang": true}}"#, "ValidationError"),
        (
            r#"{"clear": true, "creates": {"count": -1, "status": 503}}"#,
            "ValidationError",
        ),
    ] {
        let (status, body) = answer(post(bad.to_owned()).await.expect("answer")).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!(code)),
            "{bad}: {body}"
        );
    }
    let (_, body) = answer(
        http.get(&url)
            .bearer_auth(gw.api_key())
            .send()
            .await
            .expect("answer"),
    )
    .await;
    assert_eq!(
        body["deletes"],
        json!({"remaining": null, "hang": true}),
        "a refused body changes nothing"
    );

    // Set over REST, seen by the official client.
    post(json!({"clear": true, "creates": {"count": 1, "status": 429}}).to_string())
        .await
        .expect("answer");
    let err = support::client(&gw)
        .sessions()
        .create(CreateSessionOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SolariErrorCode::ConcurrencyLimitExceeded));
    assert_eq!(gw.fault_counters(), counters(1, 0));

    assert_eq!(
        gw.fail_creates(1, 302).unwrap_err().kind(),
        gateway::ErrorKind::InvalidFault
    );
    assert_eq!(
        gw.fail_deletes(None, DeleteFault::Status(99))
            .unwrap_err()
            .kind(),
        gateway::ErrorKind::InvalidFault
    );
    support::finish(gw).await;
}
