//! Control-plane faults, seen through the unmodified `solari-browser` client (and raw HTTP for
//! the chaos route and the `Idempotency-Key` cases).

mod support;

use std::time::{Duration, Instant};

use gateway::{DeleteFault, FaultCounters};
use reqwest::Method;
use serde_json::{Value, json};
use solari_browser::{CreateSessionOptions, SolariErrorCode};

fn counters(creates_faulted: u64, deletes_faulted: u64) -> FaultCounters {
    let mut c = FaultCounters::default();
    c.creates_faulted = creates_faulted;
    c.deletes_faulted = deletes_faulted;
    c
}

#[tokio::test]
async fn create_faults_against_the_clients_own_retries() {
    struct Case {
        what: &'static str,
        /// `(count, status)` of the create fault.
        fault: (u32, u16),
        /// The client's attempts per create (it retries 503, with the same Idempotency-Key).
        attempts: u32,
        /// Each create in turn: `Ok` or the error's status and code.
        creates: Vec<Result<(), (u16, SolariErrorCode)>>,
    }
    let unhealthy = || Err((503, SolariErrorCode::BrowserUnhealthy));
    let cases = [
        Case {
            what: "unhealthy creates, then a success, without client retries",
            fault: (2, 503),
            attempts: 1,
            creates: vec![unhealthy(), unhealthy(), Ok(())],
        },
        Case {
            what: "the client's own retries absorb unhealthy creates",
            fault: (2, 503),
            attempts: 3,
            creates: vec![Ok(())],
        },
        Case {
            what: "a concurrency-limit fault is not retried by the client",
            fault: (1, 429),
            attempts: 3,
            creates: vec![Err((429, SolariErrorCode::ConcurrencyLimitExceeded))],
        },
    ];
    for case in cases {
        let what = case.what;
        let gw = support::start(gateway::Config::new()).await;
        let client = gw.client_with(|o| o.max_attempts(case.attempts));
        gw.fail_creates(case.fault.0, case.fault.1).expect(what);
        for expected in &case.creates {
            let created = client.sessions().create(CreateSessionOptions::new()).await;
            match (created, expected) {
                (Ok(session), Ok(())) => {
                    assert_eq!(gw.census().0, 1, "{what}: exactly one session");
                    gw.release(&session.id).await;
                }
                (Err(err), Err((status, code))) => {
                    assert_eq!((err.status(), err.code()), (Some(*status), Some(code)));
                    assert_eq!(gw.census(), (0, 0, 0), "{what}: no browser for a fault");
                }
                (created, _) => panic!("{what}: expected {expected:?}, got {created:?}"),
            }
        }
        assert_eq!(
            gw.fault_counters(),
            counters(case.fault.0.into(), 0),
            "{what}"
        );
        gw.finish().await;
    }
}

#[tokio::test]
async fn a_faulted_keyed_create_is_neither_recorded_nor_replayed() {
    let gw = support::start(gateway::Config::new()).await;
    gw.fail_creates(1, 503).expect("fault");

    let (status, faulted) = gw.keyed_create("call-1").await;
    assert_eq!(
        (status, &faulted["code"]),
        (503, &json!("BrowserUnhealthy"))
    );
    let (status, created) = gw.keyed_create("call-1").await;
    assert_eq!(status, 201, "the retry creates");
    let (_, replayed) = gw.keyed_create("call-1").await;
    assert_eq!(created["sessionId"], replayed["sessionId"], "then replays");
    assert_eq!(gw.census().0, 1);
    gw.finish().await;
}

#[tokio::test]
async fn delete_500_kills_the_browser_but_leaves_the_session_unreleased() {
    let gw = support::start(gateway::Config::new()).await;
    let client = gw.client();
    let session = gw.create().await;
    gw.fail_deletes(Some(1), DeleteFault::Status(500))
        .expect("fault");

    let err = client.sessions().release(&session.id).await.unwrap_err();
    assert_eq!(err.status(), Some(500), "{err}");
    assert_eq!(
        err.code(),
        Some(&SolariErrorCode::Other("InternalError".into()))
    );
    assert_eq!(gw.census(), (0, 1, 0), "dead, unreleased, no Chromium");
    assert_eq!(gw.fault_counters(), counters(0, 1));
    let view = client.sessions().get(&session.id).await.expect("get");
    assert_eq!(view.status.as_deref(), Some("active"), "not released");

    gw.release(&session.id).await; // the next delete is not faulted
    gw.finish_idle().await;
}

#[tokio::test]
async fn a_hung_delete_times_the_client_out_and_shutdown_is_prompt() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw.create().await;
    gw.fail_deletes(None, DeleteFault::Hang).expect("fault");

    let client = gw.client_with(|o| o.timeout_ms(1000).max_attempts(1));
    let started = Instant::now();
    let err = client.sessions().release(&session.id).await.unwrap_err();
    assert_eq!(err.status(), None, "no answer, a timeout: {err}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    support::eventually("no Chromium left", || gw.status().chromium_processes == 0).await;
    assert_eq!(gw.census(), (0, 1, 0));

    // Still hanging: a second delete is faulted too.
    let pending = tokio::spawn({
        let client = gw.client_with(|o| o.timeout_ms(60_000).max_attempts(1));
        let id = session.id.clone();
        async move { client.sessions().release(&id).await }
    });
    support::eventually("the second delete arrives", || {
        gw.fault_counters().deletes_faulted >= 2
    })
    .await;

    let started = Instant::now();
    gw.finish().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    let outcome = tokio::time::timeout(support::SOON, pending)
        .await
        .expect("the hung request ends with the gateway")
        .expect("no panic");
    assert!(outcome.is_err(), "the hung delete was never answered 2xx");
}

#[tokio::test]
async fn one_hung_delete_is_absorbed_by_the_clients_retry() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw.create().await;
    gw.fail_deletes(Some(1), DeleteFault::Hang).expect("fault");

    gw.client_with(|o| o.timeout_ms(1000).max_attempts(2))
        .sessions()
        .release(&session.id)
        .await
        .expect("the retry after the timeout releases");
    assert_eq!(gw.fault_counters(), counters(0, 1));
    gw.finish_idle().await;
}

async fn post_faults(gw: &support::TestGateway, body: Value) -> (u16, Value) {
    let res = gw.request(Method::POST, "/__chaos/faults").json(&body);
    support::answer(res.send().await.expect("answer")).await
}

#[tokio::test]
async fn faults_route_sets_clears_and_validates() {
    let gw = support::start(gateway::Config::new()).await;

    let res = reqwest::Client::new()
        .post(format!("{}/__chaos/faults", gw.base_url()))
        .body("{}")
        .send()
        .await
        .expect("answer");
    assert_eq!(res.status().as_u16(), 401, "bearer auth like the rest");

    let (status, body) = post_faults(
        &gw,
        json!({
            "creates": {"count": 2, "status": 503},
            "deletes": {"count": 1, "status": 500},
        }),
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

    let (status, body) = post_faults(&gw, json!({"clear": true, "deletes": {"hang": true}})).await;
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
        let res = gw.request(Method::POST, "/__chaos/faults").body(bad);
        let (status, code_got) = support::answer_code(res.send().await.expect("answer")).await;
        assert_eq!((status, code_got), (400, json!(code)), "{bad}");
    }
    let res = gw.request(Method::GET, "/__chaos/faults").send().await;
    let (_, body) = support::answer(res.expect("answer")).await;
    assert_eq!(
        body["deletes"],
        json!({"remaining": null, "hang": true}),
        "a refused body changes nothing"
    );

    // Set over REST, seen by the official client.
    post_faults(
        &gw,
        json!({"clear": true, "creates": {"count": 1, "status": 429}}),
    )
    .await;
    let err = gw
        .client()
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
    gw.finish().await;
}
