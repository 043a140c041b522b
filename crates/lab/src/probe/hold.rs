//! Holding a session's websocket idle until it dies: [`hold`] and its heartbeat.

use std::time::Duration;

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::ConnectStream;
use async_tungstenite::tungstenite::{Error as WsError, Message};
use futures::StreamExt;
use outlive::Diagnostics;
use outlive::redact::redact;
use outlive::wire;
use tokio::time::{Instant, MissedTickBehavior};

use super::Cause;

/// How long a new session has to answer its first heartbeat (later ones get one interval).
const OPENING_TIMEOUT: Duration = Duration::from_secs(30);

/// The end of a hold.
pub(super) enum Held {
    Died { cause: Cause, at: Instant },
    Alive,
}

/// A heartbeat awaiting its reply.
#[derive(Debug, Clone, Copy)]
struct Beat {
    id: u64,
    sent: Instant,
    /// Past this, with no reply, the session is silent.
    deadline: Instant,
}

/// Holds the websocket idle, heartbeating, until the session dies or `until` passes. The
/// websocket is dropped on return.
///
/// Each heartbeat must be answered before the next is due, except the first. That one is part
/// of opening the session: a browser just launched (and the provider's relay reaching it) may
/// take longer than one interval to answer anything, and that is not a death.
pub(super) async fn hold(
    mut ws: WebSocketStream<ConnectStream>,
    heartbeat: Duration,
    until: Instant,
) -> Held {
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let give_up = tokio::time::sleep_until(until);
    tokio::pin!(give_up);
    let mut next_id: u64 = 0;
    let mut pending: Option<Beat> = None;
    loop {
        tokio::select! {
            biased;
            message = ws.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if pending.is_some_and(|beat| wire::reply_id(text.as_bytes()) == Some(beat.id)) {
                        pending = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None => return Held::Died { cause: Cause::Close, at: Instant::now() },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Held::Died { cause: read_error_cause(&e), at: Instant::now() },
            },
            due = tick.tick() => {
                match pending {
                    Some(beat) if due >= beat.deadline => {
                        return Held::Died { cause: Cause::Silence, at: beat.sent };
                    }
                    // The first reply has longer; send nothing more until it comes.
                    Some(_) => continue,
                    None => {}
                }
                next_id += 1;
                let reply_within = if next_id == 1 { OPENING_TIMEOUT.max(heartbeat) } else { heartbeat };
                let beat = Beat { id: next_id, sent: due, deadline: due + reply_within };
                let text = wire::version_request(next_id);
                match tokio::time::timeout(heartbeat, ws.send(Message::Text(text.into()))).await {
                    Ok(Ok(())) => pending = Some(beat),
                    // A peer that stops reading fills the socket; that is silence too.
                    Err(_) => return Held::Died { cause: Cause::Silence, at: beat.sent },
                    Ok(Err(e)) => return Held::Died { cause: read_error_cause(&e), at: Instant::now() },
                }
            }
            _ = &mut give_up => return Held::Alive,
        }
    }
}

/// A websocket error after the handshake: the end of the close handshake is a close, any
/// other failure a reset.
fn read_error_cause(e: &WsError) -> Cause {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => Cause::Close,
        _ => Cause::Reset,
    }
}

/// A handshake error fit for a log line. tungstenite's `Display` shows only the status of an
/// HTTP refusal (not the response, which can echo the request). A URL in the text (an
/// unreachable endpoint, token and all) is cut to scheme and host.
pub(super) fn handshake_error(e: &WsError) -> String {
    redact(&e.to_string(), Diagnostics::Safe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_tungstenite::tokio::connect_async;

    /// What the scripted CDP peer does with heartbeat `id`.
    #[derive(Clone, Copy)]
    enum Peer {
        Reply(Duration),
        Close,
        Ignore,
    }

    /// A websocket peer on 127.0.0.1 that treats each heartbeat as `script` says, and the
    /// probe's websocket to it.
    async fn scripted(script: fn(u64) -> Peer) -> WebSocketStream<ConnectStream> {
        use async_tungstenite::tungstenite::protocol::CloseFrame;
        use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = async_tungstenite::tokio::accept_async(tcp).await.unwrap();
            while let Some(Ok(message)) = ws.next().await {
                // The heartbeat's id, as a browser reads a command.
                let command: Option<serde_json::Value> =
                    serde_json::from_slice(&message.into_data()).ok();
                let Some(id) = command.and_then(|c| c["id"].as_u64()) else {
                    continue;
                };
                match script(id) {
                    Peer::Reply(after) => {
                        tokio::time::sleep(after).await;
                        let reply = format!(r#"{{"id":{id},"result":{{"product":"Fake"}}}}"#);
                        let _ = ws.send(Message::Text(reply.into())).await;
                    }
                    Peer::Close => {
                        let frame = CloseFrame {
                            code: CloseCode::Away,
                            reason: "gone".into(),
                        };
                        let _ = ws.close(Some(frame)).await;
                    }
                    Peer::Ignore => {}
                }
            }
        });
        connect_async(url).await.unwrap().0
    }

    fn ms_since(start: Instant, held: &Held) -> (Cause, Option<u64>) {
        match held {
            Held::Died { cause, at } => (*cause, Some(at.duration_since(start).as_millis() as u64)),
            Held::Alive => (Cause::Alive, None),
        }
    }

    #[tokio::test]
    async fn a_slow_first_reply_is_not_silence_but_a_later_one_is() {
        let ws = scripted(|id| match id {
            1 => Peer::Reply(Duration::from_millis(350)),
            2..=4 => Peer::Reply(Duration::ZERO),
            _ => Peer::Ignore,
        })
        .await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(100),
            start + Duration::from_secs(10),
        )
        .await;
        // Beat 1 at 0 is answered at 350 ms; beats 2-4 at 400-600 ms are answered; beat 5,
        // sent at 700 ms, is not: silence, dated when beat 5 was sent.
        let (cause, at) = ms_since(start, &held);
        assert_eq!(cause, Cause::Silence);
        assert!((650..=900).contains(&at.unwrap()), "{at:?}");
    }

    #[tokio::test]
    async fn a_close_frame_is_a_close() {
        let ws = scripted(|id| {
            if id < 3 {
                Peer::Reply(Duration::ZERO)
            } else {
                Peer::Close
            }
        })
        .await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(50),
            start + Duration::from_secs(10),
        )
        .await;
        let (cause, at) = ms_since(start, &held);
        assert_eq!(cause, Cause::Close);
        assert!((100..=400).contains(&at.unwrap()), "{at:?}");
    }

    #[tokio::test]
    async fn a_session_answering_to_the_end_is_alive() {
        let ws = scripted(|_| Peer::Reply(Duration::ZERO)).await;
        let start = Instant::now();
        let held = hold(
            ws,
            Duration::from_millis(50),
            start + Duration::from_millis(400),
        )
        .await;
        assert_eq!(ms_since(start, &held), (Cause::Alive, None));
        assert!(start.elapsed() >= Duration::from_millis(400));
    }

    #[test]
    fn errors_after_the_handshake_are_closes_or_resets() {
        assert_eq!(read_error_cause(&WsError::ConnectionClosed), Cause::Close);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(read_error_cause(&WsError::Io(reset)), Cause::Reset);
    }
}
