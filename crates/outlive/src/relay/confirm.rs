//! The second path: a short-lived websocket to the same endpoint that asks a silent browser
//! whether it lives, so that a stalled connection is not taken for a dead browser.
//!
//! One `Target.getTargets`: an answer that lists a target of this browser means it lives (a
//! provider that put a new browser behind the URL lists none of them). A refusal (no listener;
//! HTTP 403, 404 or 410), a close or a reset means it is gone. Anything else, or nothing in
//! time, says nothing. The endpoint's URL, a secret, is never logged.

use std::time::Duration;

use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt as _;

use super::death::Confirmation;
use super::watchdog::Answer;
use crate::endpoint::CdpEndpoint;

/// The largest message the check reads: a target list, not a screenshot. Garbage larger than
/// this ends the check as inconclusive.
const MAX_MESSAGE: usize = 4 << 20;

/// The id of the check's one command.
const ASK_ID: u64 = 1;

/// Asks the browser at `endpoint`, within `limit`: alive if it answers and knows `target`
/// (any answer, when no target is known yet).
pub(super) async fn ask(endpoint: &CdpEndpoint, target: Option<&str>, limit: Duration) -> Answer {
    match tokio::time::timeout(limit, ask_unbounded(endpoint, target)).await {
        Ok(answer) => answer,
        Err(_) => Answer::Inconclusive,
    }
}

async fn ask_unbounded(endpoint: &CdpEndpoint, target: Option<&str>) -> Answer {
    let mut ws = match crate::websocket::connect_with(endpoint, MAX_MESSAGE).await {
        Ok(ws) => ws,
        Err(e) => return refused(&e),
    };
    let ask = serde_json::json!({"id": ASK_ID, "method": "Target.getTargets"}).to_string();
    if let Err(e) = ws.send(Message::text(ask)).await {
        return ended(&e);
    }
    let answer = loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => match reply(text.as_str(), target) {
                Some(answer) => break answer,
                None => continue,
            },
            Some(Ok(Message::Close(_))) | None => break Answer::Dead(Confirmation::Close),
            Some(Ok(_)) => continue,
            Some(Err(e)) => break ended(&e),
        }
    };
    // Closed after its answer; the close handshake is not waited for.
    let _ = tokio::time::timeout(Duration::from_millis(100), ws.close(None)).await;
    answer
}

/// What a failed connect says: refused or closed means gone, anything else nothing.
fn refused(e: &WsError) -> Answer {
    match e {
        WsError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            Answer::Dead(Confirmation::Refused)
        }
        WsError::Http(resp) if matches!(resp.status().as_u16(), 403 | 404 | 410) => {
            Answer::Dead(Confirmation::Refused)
        }
        other => ended(other),
    }
}

/// What an error on an open connection says.
fn ended(e: &WsError) -> Answer {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => Answer::Dead(Confirmation::Close),
        WsError::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted => {
                Answer::Dead(Confirmation::Reset)
            }
            std::io::ErrorKind::UnexpectedEof => Answer::Dead(Confirmation::Close),
            _ => Answer::Inconclusive,
        },
        _ => Answer::Inconclusive,
    }
}

/// The answer in a message, if it is the reply to the check: alive when it lists `target`
/// (or any reply, with no target to look for), refused when it lists others only. A reply
/// with an error (a proxy that forbids the method) still shows a live browser.
fn reply(text: &str, target: Option<&str>) -> Option<Answer> {
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Option<u64>,
        result: Option<Targets>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Targets {
        target_infos: Vec<TargetInfo>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TargetInfo {
        target_id: String,
    }
    let reply: Reply = serde_json::from_str(text).ok()?;
    if reply.id != Some(ASK_ID) {
        return None;
    }
    let (Some(target), Some(targets)) = (target, reply.result) else {
        return Some(Answer::Alive);
    };
    let known = targets.target_infos.iter().any(|t| t.target_id == target);
    Some(if known {
        Answer::Alive
    } else {
        Answer::Dead(Confirmation::Refused)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    const LIMIT: Duration = Duration::from_millis(500);

    /// A server on loopback that answers every connection's request with `answer` (nothing
    /// at all if empty) and then holds it open; its endpoint.
    async fn server(answer: &'static [u8]) -> (CdpEndpoint, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                if !answer.is_empty() {
                    let _ = socket.write_all(answer).await;
                }
                held.push(socket);
            }
        });
        let url = format!("ws://127.0.0.1:{port}/devtools/browser/x?token=s3cret");
        (CdpEndpoint::new(url).unwrap(), task)
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let endpoint = CdpEndpoint::new(format!("ws://127.0.0.1:{port}/x")).unwrap();
        let answer = ask(&endpoint, None, LIMIT).await;
        assert_eq!(answer, Answer::Dead(Confirmation::Refused));
    }

    #[tokio::test]
    async fn gone_statuses_are_refused_and_others_say_nothing() {
        for (status, expected) in [
            (
                &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"[..],
                Answer::Dead(Confirmation::Refused),
            ),
            (
                &b"HTTP/1.1 410 Gone\r\ncontent-length: 0\r\n\r\n"[..],
                Answer::Dead(Confirmation::Refused),
            ),
            (
                &b"HTTP/1.1 409 Conflict\r\ncontent-length: 0\r\n\r\n"[..],
                Answer::Inconclusive,
            ),
            (
                &b"HTTP/1.1 503 Busy\r\ncontent-length: 0\r\n\r\n"[..],
                Answer::Inconclusive,
            ),
        ] {
            let (endpoint, _server) = server(status).await;
            assert_eq!(ask(&endpoint, None, LIMIT).await, expected);
        }
    }

    #[tokio::test]
    async fn silence_and_garbage_say_nothing_within_the_limit() {
        for answer in [&b""[..], &b"\x00\xffgarbage that is no HTTP\r\n\r\n"[..]] {
            let (endpoint, _server) = server(answer).await;
            let started = std::time::Instant::now();
            assert_eq!(ask(&endpoint, None, LIMIT).await, Answer::Inconclusive);
            assert!(
                started.elapsed() < LIMIT * 3,
                "bounded: {:?}",
                started.elapsed()
            );
        }
    }

    #[tokio::test]
    async fn a_live_chromium_answers_with_its_targets() {
        let browser = crate::LocalChromium::new()
            .start()
            .await
            .expect("Chromium starts");
        let endpoint = browser.endpoint().clone();
        assert_eq!(
            ask(&endpoint, None, Duration::from_secs(5)).await,
            Answer::Alive
        );
        let unknown = ask(&endpoint, Some("NOT-A-TARGET"), Duration::from_secs(5)).await;
        assert_eq!(unknown, Answer::Dead(Confirmation::Refused));
        browser.close().await.unwrap();
    }

    #[test]
    fn a_reply_listing_the_target_is_alive_and_one_without_it_a_new_browser() {
        let listed = r#"{"id":1,"result":{"targetInfos":[{"targetId":"A","type":"page"}]}}"#;
        assert_eq!(reply(listed, Some("A")), Some(Answer::Alive));
        assert_eq!(
            reply(listed, Some("B")),
            Some(Answer::Dead(Confirmation::Refused))
        );
        assert_eq!(reply(listed, None), Some(Answer::Alive));
    }

    #[test]
    fn other_messages_and_garbage_are_not_the_answer() {
        assert_eq!(reply(r#"{"id":2,"result":{}}"#, None), None);
        assert_eq!(reply(r#"{"method":"Target.targetCreated"}"#, None), None);
        assert_eq!(reply("not json", Some("A")), None);
        let error = r#"{"id":1,"error":{"code":-32601,"message":"not allowed"}}"#;
        assert_eq!(reply(error, Some("A")), Some(Answer::Alive));
    }
}
