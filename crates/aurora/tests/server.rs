//! The real server on 127.0.0.1:0, driven over HTTP.

mod support;

use aurora::{Config, Counters, Transfer};
use reqwest::StatusCode;
use support::{client, location, post_form, set_cookie, sign_in, text_of, wrong_code};

#[tokio::test]
async fn sign_in_with_totp_sets_an_http_only_session_cookie() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let client = client();

    let page = client.get(bank.url("/login")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    for id in ["username", "password", "submit"] {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "login page lacks #{id}"
        );
    }

    let response = post_form(
        &client,
        &bank.url("/login"),
        "username=alice&password=wonderland",
    )
    .await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/totp");
    let pending = set_cookie(&response, aurora::PENDING_COOKIE).expect("pending cookie");
    assert!(pending.contains("HttpOnly"), "{pending}");

    let html = client
        .get(bank.url("/totp"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("id=\"code\"") && html.contains("id=\"submit\""));

    let code = format!(
        "code={}",
        aurora::totp_now(aurora::DEFAULT_TOTP_SECRET).unwrap()
    );
    let response = post_form(&client, &bank.url("/totp"), &code).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/account?welcome=1");
    let session = set_cookie(&response, aurora::SESSION_COOKIE).expect("session cookie");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(session.contains(attribute), "{session} lacks {attribute}");
    }

    let html = client
        .get(bank.url("/account?welcome=1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&html, "balance").as_deref(), Some("1000.00"));
    assert!(html.contains("localStorage.setItem(key, fresh)"));
    assert!(
        html.contains(r#"var fresh = "aurora-dark";"#),
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
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let client = client();

    let response = post_form(&client, &bank.url("/login"), "username=alice&password=nope").await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&response, aurora::PENDING_COOKIE).is_none());
    assert!(text_of(&response.text().await.unwrap(), "error").is_some());
    let counters = bank.counters();
    assert_eq!((counters.sign_ins, counters.sign_ins_rejected), (0, 1));

    // A code without a password-accepted sign-in goes back to the login page, uncounted.
    let response = post_form(&client, &bank.url("/totp"), "code=123456").await;
    assert_eq!(location(&response), "/login");

    post_form(
        &client,
        &bank.url("/login"),
        "username=alice&password=wonderland",
    )
    .await;
    let wrong = format!("code={}", wrong_code(bank.config()));
    let response = post_form(&client, &bank.url("/totp"), &wrong).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&response, aurora::SESSION_COOKIE).is_none());
    assert!(text_of(&response.text().await.unwrap(), "error").is_some());

    let counters = bank.counters();
    assert_eq!((counters.sign_ins, counters.sign_ins_rejected), (1, 1));
    assert_eq!((counters.totps_accepted, counters.totps_rejected), (0, 1));
    assert_eq!(counters.sessions, 0);

    // The pending sign-in survives a wrong code; the right one still works.
    sign_in(&bank, &client).await;
    assert_eq!(bank.counters().totps_accepted, 1);
}

#[tokio::test]
async fn account_page_counts_polls_per_session() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let first = client();
    sign_in(&bank, &first).await;
    for expected in 1..=3 {
        let html = first
            .get(bank.url("/account"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(text_of(&html, "polls"), Some(expected.to_string()));
        assert!(
            text_of(&html, "server-time")
                .unwrap()
                .parse::<u64>()
                .is_ok()
        );
        assert!(
            html.contains("var fresh = null;"),
            "only a welcome writes the pref"
        );
    }

    let second = client();
    sign_in(&bank, &second).await;
    let html = second
        .get(bank.url("/account"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&html, "polls").as_deref(), Some("1"));

    let served: Counters = first
        .get(bank.url("/__counters"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, bank.counters());
    assert_eq!((served.polls_served, served.sessions), (4, 2));
}

#[tokio::test]
async fn welcome_writes_the_pref_once_per_session() {
    let bank = aurora::spawn(Config::new().with_pref("</script>"))
        .await
        .unwrap();
    let client = client();
    sign_in(&bank, &client).await;
    let welcome = bank.url("/account?welcome=1");
    let html = client
        .get(&welcome)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains(r#"var fresh = "\u003c/script>";"#), "{html}");
    let html = client
        .get(&welcome)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("var fresh = null;"));
}

#[tokio::test]
async fn a_transfer_posted_twice_is_recorded_twice() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let client = client();
    sign_in(&bank, &client).await;

    let html = client
        .get(bank.url("/transfer"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for id in ["to", "amount", "submit"] {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "transfer page lacks #{id}"
        );
    }
    for _ in 0..2 {
        let response = post_form(&client, &bank.url("/transfer"), "to=bob&amount=2500").await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&response), "/account");
    }

    let listed: Vec<Transfer> = client
        .get(bank.url("/__transfers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, bank.transfers());
    let summary: Vec<_> = listed
        .iter()
        .map(|t| (t.id, t.to.as_str(), t.amount_cents))
        .collect();
    assert_eq!(summary, [(1, "bob", 2500), (2, "bob", 2500)]);
    assert_eq!(bank.counters().transfers, 2);
    let html = client
        .get(bank.url("/account"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&html, "balance").as_deref(), Some("950.00"));

    let response = post_form(&client, &bank.url("/transfer"), "to=bob&amount=100000").await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bank.counters().transfers, 2);
}

#[tokio::test]
async fn unauthenticated_requests_are_sent_to_login() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let client = client();
    for path in ["/account", "/transfer", "/totp", "/"] {
        let response = client.get(bank.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
        let expected = if path == "/" { "/account" } else { "/login" };
        assert_eq!(location(&response), expected, "{path}");
    }
    let forged = client
        .get(bank.url("/account"))
        .header("cookie", "aurora_session=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(location(&forged), "/login");

    let response = post_form(&client, &bank.url("/transfer"), "to=mallory&amount=1").await;
    assert_eq!(location(&response), "/login");
    assert_eq!(bank.counters(), Counters::default());
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let body = format!(
        "username=alice&password={}",
        "x".repeat(aurora::MAX_BODY_BYTES)
    );
    let response = post_form(&client(), &bank.url("/login"), &body).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(bank.counters().sign_ins_rejected, 0);
}

#[tokio::test]
async fn malformed_forms_are_refused_with_400() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let client = client();
    let response = post_form(&client, &bank.url("/login"), "username=alice").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(text_of(&response.text().await.unwrap(), "error").is_some());

    sign_in(&bank, &client).await;
    for body in [
        "to=bob&amount=abc",
        "to=bob&amount=-5",
        "to=bob&amount=0",
        "to=%20&amount=5",
        "amount=5",
        "\u{0}\u{ff}=&&=",
    ] {
        let response = post_form(&client, &bank.url("/transfer"), body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body:?}");
    }
    let response = client
        .post(bank.url("/transfer"))
        .body("to=bob&amount=5")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(bank.counters().transfers, 0);
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let bank = aurora::spawn(Config::new()).await.unwrap();
    let addr = bank.addr();
    assert_eq!(bank.base_url(), format!("http://{addr}"));
    // A keep-alive connection must not hold shutdown up.
    let client = client();
    client.get(bank.url("/login")).send().await.unwrap();
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
    let counters: Counters = client()
        .get(format!("http://{addr}/__counters"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counters, Counters::default());
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
