//! The real server on 127.0.0.1:0, driven over HTTP.

mod support;

use aurora::{Config, Counters, Transfer};
use reqwest::StatusCode;
use support::{Visitor, start, wrong_code};

#[tokio::test]
async fn sign_in_with_totp_sets_an_http_only_session_cookie() {
    let (bank, visitor) = start(Config::new()).await;

    let page = visitor.get("/login").await;
    assert_eq!(page.status, StatusCode::OK);
    page.assert_ids(&["username", "password", "submit"]);

    let response = visitor.login("alice", "wonderland").await;
    assert_eq!(response.status, StatusCode::SEE_OTHER);
    assert_eq!(response.location(), "/totp");
    let pending = response
        .set_cookie(aurora::PENDING_COOKIE)
        .expect("pending cookie");
    assert!(pending.contains("HttpOnly"), "{pending}");

    visitor.get("/totp").await.assert_ids(&["code", "submit"]);

    let code = aurora::totp_now(aurora::DEFAULT_TOTP_SECRET).unwrap();
    let response = visitor.totp(&code).await;
    assert_eq!(response.status, StatusCode::SEE_OTHER);
    assert_eq!(response.location(), "/account?welcome=1");
    let session = response
        .set_cookie(aurora::SESSION_COOKIE)
        .expect("session cookie");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(session.contains(attribute), "{session} lacks {attribute}");
    }

    let page = visitor.get("/account?welcome=1").await;
    assert_eq!(page.text_of("balance").as_deref(), Some("1000.00"));
    assert!(page.contains("localStorage.setItem(key, fresh)"));
    assert!(
        page.contains(r#"var fresh = "aurora-dark";"#),
        "welcome writes the pref"
    );

    let counters = bank.counters();
    assert_eq!(
        (
            counters.sign_ins,
            counters.totps_accepted,
            counters.sessions
        ),
        (1, 1, 1)
    );
    bank.shutdown().await.unwrap();
}

#[tokio::test]
async fn wrong_password_and_wrong_totp_are_rejected_and_counted() {
    let (bank, visitor) = start(Config::new()).await;

    let response = visitor.login("alice", "nope").await;
    response.assert_refused(StatusCode::UNAUTHORIZED);
    assert!(response.set_cookie(aurora::PENDING_COOKIE).is_none());
    let counters = bank.counters();
    assert_eq!((counters.sign_ins, counters.sign_ins_rejected), (0, 1));

    // A code without a password-accepted sign-in goes back to the login page, uncounted.
    assert_eq!(visitor.totp("123456").await.location(), "/login");

    visitor.login("alice", "wonderland").await;
    let response = visitor.totp(&wrong_code(bank.config())).await;
    response.assert_refused(StatusCode::UNAUTHORIZED);
    assert!(response.set_cookie(aurora::SESSION_COOKIE).is_none());

    let counters = bank.counters();
    assert_eq!((counters.sign_ins, counters.sign_ins_rejected), (1, 1));
    assert_eq!((counters.totps_accepted, counters.totps_rejected), (0, 1));
    assert_eq!(counters.sessions, 0);

    // The pending sign-in survives a wrong code; the right one still works.
    visitor.sign_in().await;
    assert_eq!(bank.counters().totps_accepted, 1);
}

#[tokio::test]
async fn account_page_counts_polls_per_session() {
    let (bank, first) = start(Config::new()).await;
    first.sign_in().await;
    for expected in 1..=3 {
        let page = first.get("/account").await;
        assert_eq!(page.text_of("polls"), Some(expected.to_string()));
        let server_time = page.text_of("server-time").unwrap();
        assert!(server_time.parse::<u64>().is_ok(), "{server_time}");
        assert!(
            page.contains("var fresh = null;"),
            "only a welcome writes the pref"
        );
    }

    let second = Visitor::new(&bank);
    second.sign_in().await;
    let page = second.get("/account").await;
    assert_eq!(page.text_of("polls").as_deref(), Some("1"));

    let served: Counters = first.get("/__counters").await.json();
    assert_eq!(served, bank.counters());
    assert_eq!((served.polls_served, served.sessions), (4, 2));
}

#[tokio::test]
async fn welcome_writes_the_pref_once_per_session() {
    let (_bank, visitor) = start(Config::new().with_pref("</script>")).await;
    visitor.sign_in().await;
    let page = visitor.get("/account?welcome=1").await;
    assert!(
        page.contains(r#"var fresh = "\u003c/script>";"#),
        "{}",
        page.body
    );
    let page = visitor.get("/account?welcome=1").await;
    assert!(page.contains("var fresh = null;"));
}

#[tokio::test]
async fn a_transfer_posted_twice_is_recorded_twice() {
    let (bank, visitor) = start(Config::new()).await;
    visitor.sign_in().await;

    let page = visitor.get("/transfer").await;
    page.assert_ids(&["to", "amount", "submit"]);
    for _ in 0..2 {
        let response = visitor.post_form("/transfer", "to=bob&amount=2500").await;
        assert_eq!(response.status, StatusCode::SEE_OTHER);
        assert_eq!(response.location(), "/account");
    }

    let listed: Vec<Transfer> = visitor.get("/__transfers").await.json();
    assert_eq!(listed, bank.transfers());
    let summary: Vec<_> = listed
        .iter()
        .map(|t| (t.id, t.to.as_str(), t.amount_cents))
        .collect();
    assert_eq!(summary, [(1, "bob", 2500), (2, "bob", 2500)]);
    assert_eq!(bank.counters().transfers, 2);
    let page = visitor.get("/account").await;
    assert_eq!(page.text_of("balance").as_deref(), Some("950.00"));

    let response = visitor.post_form("/transfer", "to=bob&amount=100000").await;
    assert_eq!(response.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bank.counters().transfers, 2);
}

#[tokio::test]
async fn unauthenticated_requests_are_sent_to_login() {
    let (bank, visitor) = start(Config::new()).await;
    for (path, expected) in [
        ("/account", "/login"),
        ("/transfer", "/login"),
        ("/totp", "/login"),
        ("/", "/account"),
    ] {
        let response = visitor.get(path).await;
        assert_eq!(response.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(response.location(), expected, "{path}");
    }
    let forged = visitor
        .get_with_cookie("/account", "aurora_session=forged")
        .await;
    assert_eq!(forged.location(), "/login");

    let response = visitor.post_form("/transfer", "to=mallory&amount=1").await;
    assert_eq!(response.location(), "/login");
    assert_eq!(bank.counters(), Counters::default());
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413() {
    let (bank, visitor) = start(Config::new()).await;
    let password = "x".repeat(aurora::MAX_BODY_BYTES);
    let response = visitor.login("alice", &password).await;
    assert_eq!(response.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(bank.counters().sign_ins_rejected, 0);
}

#[tokio::test]
async fn malformed_forms_are_refused_with_400() {
    let (bank, visitor) = start(Config::new()).await;
    let response = visitor.post_form("/login", "username=alice").await;
    response.assert_refused(StatusCode::BAD_REQUEST);

    visitor.sign_in().await;
    for body in [
        "to=bob&amount=abc",
        "to=bob&amount=-5",
        "to=bob&amount=0",
        "to=%20&amount=5",
        "amount=5",
        "\u{0}\u{ff}=&&=",
    ] {
        let response = visitor.post_form("/transfer", body).await;
        assert_eq!(response.status, StatusCode::BAD_REQUEST, "{body:?}");
    }
    let response = visitor.post_untyped("/transfer", "to=bob&amount=5").await;
    assert_eq!(response.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(bank.counters().transfers, 0);
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let (bank, visitor) = start(Config::new()).await;
    let addr = bank.addr();
    assert_eq!(bank.base_url(), format!("http://{addr}"));
    // A keep-alive connection must not hold shutdown up.
    visitor.get("/login").await;
    bank.shutdown().await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn serve_runs_on_a_caller_bound_listener() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(aurora::serve(listener, Config::new(), async move {
        let _ = stopped.await;
    }));
    let visitor = Visitor::at(format!("http://{addr}"), Config::new());
    let counters: Counters = visitor.get("/__counters").await.json();
    assert_eq!(counters, Counters::default());
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
