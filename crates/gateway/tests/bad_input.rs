//! Bad input of every kind is refused with a clear 4xx: never a 5xx, never a panic, never a
//! browser started or left behind. Raw TCP where an HTTP client would tidy the request up.

mod support;

use std::net::SocketAddr;

use gateway::Gateway;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_BODY: usize = 64 * 1024;

/// Sends `request` exactly as given and returns the answer's status and body, or `None` if
/// the connection closed without an answer. Requests carry `Connection: close`, so the
/// gateway ends the connection after its answer.
async fn raw(addr: SocketAddr, request: &[u8]) -> Option<(u16, String)> {
    send(addr, request, false).await
}

/// As [`raw`], then the client stops sending (a request cut short): hyper takes the
/// half-close for a client that went away.
async fn raw_cut_short(addr: SocketAddr, request: &[u8]) -> Option<(u16, String)> {
    send(addr, request, true).await
}

async fn send(addr: SocketAddr, request: &[u8], half_close: bool) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    if half_close {
        stream.shutdown().await.expect("half-close");
    }
    let mut answer = Vec::new();
    tokio::time::timeout(support::SOON, stream.read_to_end(&mut answer))
        .await
        .expect("the gateway answers or closes in time")
        .ok()?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// A request for `method target` with the API key and `extra` header lines.
fn request(gw: &Gateway, method: &str, target: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\nContent-Length: {}\r\n{extra}\r\n",
        gw.local_addr(),
        gw.api_key(),
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The `code` of a JSON error body.
fn code(body: &str) -> Value {
    serde_json::from_str::<Value>(body).map_or(Value::Null, |v| v["code"].clone())
}

#[tokio::test]
async fn malformed_json_bodies_are_400() {
    let gw = support::start(gateway::Config::new()).await;
    let deep = format!("{{\"userMetadata\":{{\"a\":{}}}}}", "[".repeat(20_000));
    let cases: Vec<(&[u8], &str)> = vec![
        (b"{", "InvalidJson"),
        (b"{\"timeoutSeconds\": }", "InvalidJson"),
        (b"nul", "InvalidJson"),
        (b"\xff\xfe{}", "InvalidJson"),
        (b"{} {}", "InvalidJson"),
        (b"{\"a\":1,}", "InvalidJson"),
        (deep.as_bytes(), "InvalidJson"),
        (b"\"a string\"", "ValidationError"),
        (b"123", "ValidationError"),
        (b"{\"userMetadata\": []}", "ValidationError"),
        (b"{\"timeoutSeconds\": -5}", "ValidationError"),
        (b"{\"timeoutSeconds\": 1e99}", "ValidationError"),
        (b"{\"timeoutSeconds\": 5}", "ValidationError"),
        (
            b"{\"userMetadata\": {\"chaos.death\": \"explode\"}}",
            "ValidationError",
        ),
    ];
    for (body, expected) in &cases {
        for target in ["/sessions", "/__chaos/faults"] {
            let (status, answer) = raw(gw.local_addr(), &request(&gw, "POST", target, "", body))
                .await
                .expect("an answer");
            let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
            assert_eq!(status, 400, "{target} {shown}: {answer}");
            if target == "/sessions" {
                assert_eq!(code(&answer), json!(expected), "{shown}: {answer}");
            }
        }
    }
    let (status, answer) = raw(
        gw.local_addr(),
        &request(&gw, "POST", "/sessions", "Idempotency-Key: \u{e9}\r\n", b""),
    )
    .await
    .expect("an answer");
    assert_eq!((status, code(&answer)), (400, json!("ValidationError")));
    assert_eq!(gw.census(), (0, 0, 0), "no browser for a refused create");
    gw.finish().await;
}

#[tokio::test]
async fn bodies_over_64_kib_are_413() {
    let gw = support::start(gateway::Config::new()).await;
    let addr = gw.local_addr();
    let big = format!(
        "{{\"userMetadata\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(MAX_BODY)
    );
    for target in ["/sessions", "/__chaos/faults"] {
        let (status, answer) = raw(addr, &request(&gw, "POST", target, "", big.as_bytes()))
            .await
            .expect("an answer");
        assert_eq!(
            (status, code(&answer)),
            (413, json!("PayloadTooLarge")),
            "{target}"
        );
    }

    // Chunked, so the size is only known once read.
    let mut chunked = format!(
        "POST /sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
        gw.api_key()
    );
    for _ in 0..17 {
        chunked.push_str(&format!("1000\r\n{}\r\n", " ".repeat(0x1000)));
    }
    chunked.push_str("0\r\n\r\n");
    let (status, answer) = raw(addr, chunked.as_bytes()).await.expect("an answer");
    assert_eq!(
        (status, code(&answer)),
        (413, json!("PayloadTooLarge")),
        "chunked"
    );

    // A length announced but never sent is refused from the header alone.
    let announced = format!(
        "POST /sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\nContent-Length: 10000000000\r\n\r\n{{",
        gw.api_key()
    );
    let (status, answer) = raw(addr, announced.as_bytes()).await.expect("an answer");
    assert_eq!(
        (status, code(&answer)),
        (413, json!("PayloadTooLarge")),
        "announced"
    );

    // The limit is inclusive: exactly 64 KiB is read.
    let mut exact = b"{\"clear\": true}".to_vec();
    exact.resize(MAX_BODY, b' ');
    let (status, answer) = raw(addr, &request(&gw, "POST", "/__chaos/faults", "", &exact))
        .await
        .expect("an answer");
    assert_eq!(status, 200, "{answer}");
    exact.push(b' ');
    let (status, _) = raw(addr, &request(&gw, "POST", "/__chaos/faults", "", &exact))
        .await
        .expect("an answer");
    assert_eq!(status, 413);

    gw.finish_idle().await;
}

#[tokio::test]
async fn ids_with_path_tricks_are_404_on_every_route() {
    let gw = support::start(gateway::Config::new()).await;
    let session = gw.create().await;
    let id = &session.id;
    let uuid = id.replace('-', "");
    let long = "a".repeat(32 * 1024);
    let tricks: Vec<String> = vec![
        "..%2F..".into(),
        "..%2f..%2f__chaos%2fstatus".into(),
        "%2e%2e".into(),
        "..".into(),
        "%00".into(),
        format!("{id}%00"),
        format!("{id}%2F.."),
        format!("%7B{id}%7D"),
        format!("urn:uuid:{id}"),
        uuid,
        "%FF%FE".into(),
        "%E2%9C%93".into(),
        "caf%C3%A9%F0%9F%A6%80".into(),
        "%20".into(),
        long,
    ];
    let ws_headers = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
                      Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    for trick in &tricks {
        let shown = &trick[..trick.len().min(40)];
        let token = session.cdp_endpoint.split_once("?token=").expect("token").1;
        for (method, target, extra) in [
            ("GET", format!("/sessions/{trick}"), ""),
            ("DELETE", format!("/sessions/{trick}"), ""),
            ("POST", format!("/__chaos/sessions/{trick}/kill"), ""),
            ("GET", format!("/cdp/{trick}?token={token}"), ""),
            ("GET", format!("/cdp/{trick}?token={token}"), ws_headers),
        ] {
            // With the websocket headers the request says both `Connection: close` and `Upgrade`.
            let req = request(&gw, method, &target, extra, b"");
            let (status, answer) = raw(gw.local_addr(), &req).await.expect("an answer");
            assert_eq!(status, 404, "{method} {shown}: {answer}");
            assert!(
                matches!(
                    code(&answer).as_str(),
                    Some("InvalidSessionId" | "NotFound")
                ),
                "{method} {shown}: {answer}"
            );
        }
    }

    // Raw bytes the request line may not carry, and an id longer than any URI: refused by
    // the HTTP layer itself, still a 4xx.
    let unicode = request(&gw, "GET", "/sessions/caf\u{e9}", "", b"");
    let huge = request(
        &gw,
        "GET",
        &format!("/sessions/{}", "a".repeat(70_000)),
        "",
        b"",
    );
    for (what, req) in [("raw unicode", unicode), ("a 70 KB id", huge)] {
        let (status, _) = raw(gw.local_addr(), &req).await.expect("an answer");
        assert!((400..500).contains(&status), "{what}: {status}");
    }

    // None of it reached the real session.
    assert_eq!(gw.census().0, 1, "the session is still live");
    drop(support::attach(&session.cdp_endpoint).await);
    gw.release(id).await;
    gw.finish_idle().await;
}

#[tokio::test]
async fn the_relay_refuses_bad_tokens_and_plain_gets_before_upgrading() {
    let gw = support::start(gateway::Config::new()).await;
    let (a, b) = tokio::join!(gw.create(), gw.create());
    let (a_base, a_token) = a.cdp_endpoint.split_once("?token=").expect("token");
    let (b_base, b_token) = b.cdp_endpoint.split_once("?token=").expect("token");

    for (what, url) in [
        ("missing token", a_base.to_owned()),
        ("empty token", format!("{a_base}?token=")),
        ("wrong token", format!("{a_base}?token=nope")),
        ("B's token on A", format!("{a_base}?token={b_token}")),
        ("A's token on B", format!("{b_base}?token={a_token}")),
        (
            "a token and a half",
            format!("{a_base}?token={a_token}{a_token}"),
        ),
        (
            "the token twice",
            format!("{a_base}?token={a_token}&token={a_token}"),
        ),
    ] {
        assert_eq!(support::refused_status(&url).await, 401, "{what}");
        assert_eq!(gw.census().0, 2, "{what}");
    }

    // Not a websocket at all: a clear 4xx, token checks first.
    let http = &reqwest::Client::new();
    let plain = |url: String| async move {
        let res = http.get(url.replace("ws://", "http://")).send().await;
        support::answer_code(res.expect("answer")).await
    };
    assert_eq!(
        plain(a.cdp_endpoint.clone()).await,
        (400, json!("NotAWebSocket"))
    );
    assert_eq!(
        plain(format!("{a_base}?token={b_token}")).await,
        (401, json!("Unauthorized"))
    );
    let res = http.post(a.cdp_endpoint.replace("ws://", "http://")).send();
    assert_eq!(
        support::answer_code(res.await.expect("answer")).await,
        (405, json!("MethodNotAllowed"))
    );
    let path = a
        .cdp_endpoint
        .split_once(&gw.local_addr().to_string())
        .expect("path")
        .1;
    let old_version = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\
         Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        gw.local_addr()
    );
    let (status, answer) = raw(gw.local_addr(), old_version.as_bytes())
        .await
        .expect("an answer");
    assert_eq!((status, code(&answer)), (400, json!("NotAWebSocket")));

    // The refusals held no relay slot: both sessions still take their one client.
    for session in [&a, &b] {
        drop(support::attach(&session.cdp_endpoint).await);
    }
    assert_eq!((gw.census().0, gw.census().1), (2, 0));
    for session in [&a, &b] {
        gw.release(&session.id).await;
    }
    gw.finish_idle().await;
}

#[tokio::test]
async fn garbage_on_the_wire_is_refused_without_a_panic() {
    let gw = support::start(gateway::Config::new()).await;
    let addr = gw.local_addr();

    let (status, _) = raw(addr, b"GARBAGE\r\n\r\n").await.expect("an answer");
    assert_eq!(status, 400);
    // Half a request, then the client goes away: nothing to answer, nothing to break.
    let half = raw_cut_short(addr, b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Len").await;
    assert!(
        half.as_ref().is_none_or(|(s, _)| (400..500).contains(s)),
        "{half:?}"
    );
    let full = request(&gw, "POST", "/sessions", "", b"{}");
    // Content-Length 2, but one byte sent.
    let short_body = raw_cut_short(addr, &full[..full.len() - 1]).await;
    assert!(
        short_body
            .as_ref()
            .is_none_or(|(s, _)| (400..500).contains(s)),
        "{short_body:?}"
    );

    let huge_header = request(
        &gw,
        "GET",
        "/sessions",
        &format!("X-Pad: {}\r\n", "x".repeat(500_000)),
        b"",
    );
    let (status, _) = raw(addr, &huge_header).await.expect("an answer");
    // hyper enforces its header-size limit on what it has buffered when it parses, which
    // depends on how the bytes arrive: a 500 KB header is refused (431) or, when it arrived
    // whole, served. Either is an answer without a panic, which is the point here.
    assert!(matches!(status, 200 | 431), "{status}");

    let non_utf8_key = [
        &b"GET /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n"[..],
        b"Connection: close\r\n\r\n",
    ]
    .concat();
    let (status, answer) = raw(addr, &non_utf8_key).await.expect("an answer");
    assert_eq!((status, code(&answer)), (401, json!("Unauthorized")));

    for (method, target, expected, want) in [
        ("PUT", "/sessions", 405, "MethodNotAllowed"),
        ("PATCH", "/__chaos/faults", 405, "MethodNotAllowed"),
        ("GET", "/sessions?limit=%FF", 400, "ValidationError"),
        ("GET", "/sessions?limit=0", 400, "ValidationError"),
        ("GET", "/sessions?cursor=-1", 400, "ValidationError"),
        ("GET", "/sessions?q=%00", 400, "ValidationError"),
        ("GET", "/nowhere/..%2F..", 404, "NotFound"),
    ] {
        let (status, answer) = raw(addr, &request(&gw, method, target, "", b""))
            .await
            .expect("an answer");
        assert_eq!(
            (status, code(&answer)),
            (expected, json!(want)),
            "{method} {target}"
        );
    }

    gw.finish_idle().await;
}
