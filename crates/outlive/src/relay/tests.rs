//! The relay end to end over loopback sockets, without Chromium. An upstream written here
//! accepts the relay's websocket and answers a few frames. Then it stops reading its socket for
//! good (a half-open browser), or reads it slowly (a slow link). Meanwhile a raw websocket
//! client in place of chromiumoxide sends a multi-MB command through the relay.

use std::pin::Pin;
use std::task::{Context, Poll};

use async_tungstenite::tungstenite::Message;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::calls::Waiting;
use super::*;
use crate::dialogs::Dialogs;
use crate::endpoint::CdpEndpoint;

const HEARTBEAT: Heartbeat = Heartbeat {
    interval: Duration::from_millis(500),
    timeout: Duration::from_millis(1000),
};
/// The multi-MB command: far more than the kernel buffers between relay and upstream hold.
const BIG: usize = 24 << 20;
/// What a loaded machine may add to a detection: 2.07 s against a 2.0 s bound was seen at a
/// load of 10 on 2 cores. Still well short of the 5 s allowance a missed heartbeat would take.
const TOLERANCE: Duration = Duration::from_millis(1000);

/// How the upstream behaves.
#[derive(Clone, Copy)]
enum Upstream {
    /// Answers the client's commands and the relay's probes until it has answered this many
    /// client commands, then stops reading (and writing) for good.
    StopsAfterCommands(usize),
    /// Answers only the relay's own probes, and stops for good after answering the first.
    StopsAfterHeartbeat,
    /// Answers everything, reading its socket 64 KiB per 10 ms (about 4 MB/s measured).
    Slow,
    /// Answers everything; the relay's own commands with a string holding a lone surrogate's
    /// escape, as Chromium writes one.
    LoneSurrogate,
    /// Answers everything. Before each reply to command `id` of the client, in the same
    /// write, it sends a `Test.changed` event naming `k{id}` on session `S` and one on session
    /// `T`. That is as Chromium, as a rule, sends a commit's event before its completion's
    /// reply. Before the reply to command 150, a `Test.listed` event has a number as its session.
    EventFirst,
    /// Answers the relay's probes; to the client's first command it starts a 1 MiB reply,
    /// sends 300 KiB of it, and closes its socket.
    DiesInsideAReply,
}

/// A fake browser on 127.0.0.1 (with a small receive buffer, so the relay's writes fill the
/// kernel buffers quickly). Reports the moment it stopped.
async fn upstream(how: Upstream) -> (CdpEndpoint, oneshot::Receiver<Instant>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(4).unwrap();
    let url = format!(
        "ws://{}/devtools/browser/fake",
        listener.local_addr().unwrap()
    );
    let (stopped_tx, stopped) = oneshot::channel();
    tokio::spawn(serve(listener, how, stopped_tx));
    (CdpEndpoint::new(url).unwrap(), stopped)
}

/// The fake browser's one connection, answered as `how` says; `stopped` told when it stops.
async fn serve(
    listener: tokio::net::TcpListener,
    how: Upstream,
    stopped: oneshot::Sender<Instant>,
) {
    let mut stopped = Some(stopped);
    let (stream, _) = listener.accept().await.unwrap();
    // One browser connection: a second one, asking whether it lives, is refused.
    drop(listener);
    let stream = Throttled {
        inner: stream,
        pause: None,
        slow: matches!(how, Upstream::Slow),
    };
    let mut ws = async_tungstenite::tokio::accept_async_with_config(
        stream,
        Some(crate::websocket::config()),
    )
    .await
    .unwrap();
    let mut commands = 0;
    while let Some(Ok(m)) = ws.next().await {
        let Message::Text(text) = m else { continue };
        let Some(id) = wire::Head::of(text.as_bytes()).id else {
            continue;
        };
        let own = id >= wire::OWN_ID_BASE;
        if !own && matches!(how, Upstream::StopsAfterHeartbeat) {
            continue;
        }
        if !own && matches!(how, Upstream::DiesInsideAReply) {
            start_a_reply(ws.get_mut().get_mut(), id).await;
            let _ = stopped.take().map(|tx| tx.send(Instant::now()));
            return;
        }
        if !own && matches!(how, Upstream::EventFirst) {
            events_before(&mut ws, id).await;
        }
        ws.send(Message::Text(reply(how, own, id).into()))
            .await
            .unwrap();
        commands += usize::from(!own);
        let stop = match how {
            Upstream::StopsAfterCommands(n) => commands == n,
            Upstream::StopsAfterHeartbeat => own,
            Upstream::Slow
            | Upstream::LoneSurrogate
            | Upstream::EventFirst
            | Upstream::DiesInsideAReply => false,
        };
        if stop {
            if let Some(tx) = stopped.take() {
                let _ = tx.send(Instant::now());
            }
            // Holds the socket open, never reading it again.
            std::future::pending::<()>().await;
        }
    }
}

/// The events [`Upstream::EventFirst`] sends before its reply to `id`, in the same write.
async fn events_before<S>(ws: &mut S, id: u64)
where
    S: futures::Sink<Message> + Unpin,
    S::Error: std::fmt::Debug,
{
    if id == 150 {
        let event = r#"{"method":"Test.listed","params":{},"sessionId":7}"#;
        ws.feed(Message::Text(event.into())).await.unwrap();
    }
    for session in ["S", "T"] {
        let event = format!(
            r#"{{"method":"Test.changed","params":{{"key":"k{id}"}},"sessionId":"{session}"}}"#
        );
        ws.feed(Message::Text(event.into())).await.unwrap();
    }
}

/// The fake browser's reply to command `id` (`own`: one of the relay's).
fn reply(how: Upstream, own: bool, id: u64) -> String {
    if own && matches!(how, Upstream::LoneSurrogate) {
        format!(r#"{{"id":{id},"result":{{"result":{{"type":"string","value":"a\ud800b"}}}}}}"#)
    } else {
        format!(r#"{{"id":{id},"result":{{}}}}"#)
    }
}

/// Writes the first 300 KiB of a 1 MiB reply to `id`, raw.
async fn start_a_reply(socket: &mut Throttled, id: u64) {
    use tokio::io::AsyncWriteExt;
    let mut raw = vec![0x81u8, 127];
    raw.extend_from_slice(&(1u64 << 20).to_be_bytes());
    raw.extend_from_slice(format!(r#"{{"id":{id},"result":{{"data":""#).as_bytes());
    raw.resize(300 << 10, b'A');
    socket.inner.write_all(&raw).await.unwrap();
}

/// The upstream's socket, read 64 KiB per 10 ms when `slow`.
struct Throttled {
    inner: TcpStream,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    slow: bool,
}

impl AsyncRead for Throttled {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.slow {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        if let Some(pause) = self.pause.as_mut() {
            futures::ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let room = buf.remaining().min(64 << 10);
        let mut small = ReadBuf::new(buf.initialize_unfilled_to(room));
        futures::ready!(Pin::new(&mut self.inner).poll_read(cx, &mut small))?;
        let n = small.filled().len();
        buf.advance(n);
        self.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(10))));
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Throttled {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type ClientWs = async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>;

/// The relay in front of `endpoint`, and a raw client connected to it.
async fn relay_and_client(endpoint: &CdpEndpoint) -> (Relay, ClientWs) {
    let relay = Relay::start(
        endpoint,
        HEARTBEAT,
        Dialogs::Dismiss,
        Duration::from_secs(5),
        LinkWatch {
            second_connection: true,
            ..LinkWatch::default()
        },
    )
    .await
    .unwrap();
    let (client, _) = async_tungstenite::tokio::connect_async(relay.client_url())
        .await
        .unwrap();
    (relay, client)
}

fn command(id: u64, payload: usize) -> Message {
    let text = format!(
        r#"{{"id":{id},"method":"Runtime.evaluate","sessionId":"S","params":{{"expression":"'{}'"}}}}"#,
        "x".repeat(payload)
    );
    Message::Text(text.into())
}

/// Sends command `id` and waits for its reply.
async fn call(client: &mut ClientWs, id: u64) {
    client.send(command(id, 16)).await.unwrap();
    loop {
        match client.next().await {
            Some(Ok(Message::Text(t))) if wire::Head::of(t.as_bytes()).id == Some(id) => return,
            Some(Ok(_)) => {}
            other => panic!("no reply to {id}: {other:?}"),
        }
    }
}

/// Sends the multi-MB command (without waiting for the relay to read it all), then waits
/// for the relay's verdict; returns the death and how long after `stopped` it came.
async fn big_command_then_death(
    relay: &mut Relay,
    client: ClientWs,
    stopped: Instant,
) -> (Death, Duration) {
    let (mut tx, mut rx) = client.split();
    let send = tokio::spawn(async move {
        let _ = tx.send(command(99, BIG)).await;
        tx
    });
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
    let death = tokio::time::timeout(Duration::from_secs(30), relay.died())
        .await
        .expect("the relay noticed nothing in 30 s");
    send.abort();
    drain.abort();
    (death, death.at.saturating_duration_since(stopped))
}

#[tokio::test]
async fn a_half_open_upstream_during_a_multi_mb_command_is_silence_within_interval_plus_timeout() {
    // The waiting path is armed (two replies measured the round trip).
    let (endpoint, stopped) = upstream(Upstream::StopsAfterCommands(2)).await;
    let (mut relay, mut client) = relay_and_client(&endpoint).await;
    call(&mut client, 1).await;
    call(&mut client, 2).await;
    let stopped = stopped.await.unwrap();
    let (death, after) = big_command_then_death(&mut relay, client, stopped).await;
    eprintln!("waiting path: silence {after:?} after the upstream stopped reading");
    assert_eq!(death.cause, DeathCause::Silence);
    assert!(
        after <= HEARTBEAT.interval + HEARTBEAT.timeout + TOLERANCE,
        "{after:?}"
    );
}

#[tokio::test]
async fn a_half_open_upstream_during_a_multi_mb_command_is_noticed_by_the_heartbeat_alone() {
    // No command was ever answered, so only the idle heartbeat watches.
    let (endpoint, stopped) = upstream(Upstream::StopsAfterHeartbeat).await;
    let (mut relay, client) = relay_and_client(&endpoint).await;
    let stopped = stopped.await.unwrap();
    let (death, after) = big_command_then_death(&mut relay, client, stopped).await;
    eprintln!("heartbeat path: silence {after:?} after the upstream stopped reading");
    assert_eq!(death.cause, DeathCause::Silence);
    let bound = HEARTBEAT.interval + HEARTBEAT.timeout;
    assert!(after + Duration::from_millis(100) >= bound, "{after:?}");
    assert!(after <= bound + TOLERANCE, "{after:?}");
}

#[tokio::test]
async fn a_multi_mb_command_over_a_slow_link_is_not_silence() {
    let (endpoint, _) = upstream(Upstream::Slow).await;
    let (relay, mut client) = relay_and_client(&endpoint).await;
    call(&mut client, 1).await;
    call(&mut client, 2).await;
    let sent = Instant::now();
    client.send(command(3, BIG)).await.unwrap();
    // The reply comes once the upstream has read all of it, slowly.
    loop {
        match tokio::time::timeout(Duration::from_secs(30), client.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if wire::Head::of(t.as_bytes()).id == Some(3) => break,
            Ok(Some(Ok(_))) => {}
            other => panic!(
                "no reply to the big command: {other:?} (death: {:?})",
                relay.death()
            ),
        }
    }
    let took = sent.elapsed();
    eprintln!("slow link: the multi-MB command took {took:?}");
    assert!(
        took > HEARTBEAT.interval + HEARTBEAT.timeout,
        "the link was not slow enough to show anything: {took:?}"
    );
    assert_eq!(relay.death(), None);
    // Probes queued behind the command were answered after it: still alive a while later.
    call(&mut client, 4).await;
    tokio::time::sleep(HEARTBEAT.interval + HEARTBEAT.timeout).await;
    assert_eq!(relay.death(), None);
}

/// A browser whose socket ends inside a large reply to the client, as the relay streams it
/// on, is a death: the client's cut frame does not pass for the client leaving.
#[tokio::test]
async fn a_browser_gone_inside_a_streamed_reply_is_a_death() {
    let (endpoint, stopped) = upstream(Upstream::DiesInsideAReply).await;
    let (mut relay, mut client) = relay_and_client(&endpoint).await;
    client.send(command(1, 16)).await.unwrap();
    let death = tokio::time::timeout(Duration::from_secs(30), relay.died())
        .await
        .expect("the relay noticed nothing in 30 s");
    stopped.await.expect("the upstream stopped");
    assert_eq!(death.cause, DeathCause::Reset);
    // The client's connection ends without a whole reply to its command.
    while let Some(Ok(m)) = client.next().await {
        assert!(
            !matches!(&m, Message::Text(t) if wire::Head::of(t.as_bytes()).id == Some(1)),
            "the cut reply reached the client whole"
        );
    }
}

/// The relay's own calls (outlive reading a cross-site frame's storage) are read with serde
/// as chromiumoxide's are: a lone surrogate's escape in their reply comes back as U+FFFD, not
/// as a reply nobody can parse.
#[tokio::test]
async fn an_own_calls_reply_with_a_lone_surrogate_is_mended() {
    let (endpoint, _stopped) = upstream(Upstream::LoneSurrogate).await;
    let (relay, _client) = relay_and_client(&endpoint).await;
    let text = relay
        .calls()
        .call(
            OwnCall {
                session: "S".to_owned(),
                method: "Runtime.evaluate",
                params: serde_json::json!({ "expression": "'a\\ud800b'" }),
            },
            Duration::from_secs(10),
        )
        .await
        .expect("the call is answered");
    let reply: serde_json::Value = serde_json::from_str(&text).expect("serde reads the reply");
    assert_eq!(reply["result"]["result"]["value"], "a\u{FFFD}b", "{text}");
}

/// A call left unanswered holds the next one back until the browser answers it, the relay
/// gives up on it, or it is older than the retry span.
#[tokio::test(start_paused = true)]
async fn an_unanswered_call_holds_the_next_back_until_answered_or_old() {
    let retry_after = Duration::from_secs(30);
    let waiting = |reply| Waiting {
        sent: Instant::now(),
        reply,
    };
    let (_browser, reply) = oneshot::channel::<String>();
    let mut unanswered = waiting(reply);
    assert!(unanswered.holds(retry_after));
    tokio::time::advance(retry_after).await;
    assert!(!unanswered.holds(retry_after), "asked again once old");

    let (browser, reply) = oneshot::channel();
    let mut answered = waiting(reply);
    browser.send("{}".to_owned()).unwrap();
    assert!(!answered.holds(retry_after), "answered");

    let (relay, reply) = oneshot::channel::<String>();
    let mut given_up = waiting(reply);
    drop(relay);
    assert!(!given_up.holds(retry_after), "the relay dropped it");
}

/// The relay hands a tapped event to the tap of its session as it reads it, before it
/// forwards the reply the browser sent after it. By the time the client has that reply, the
/// event is there to take (chromiumoxide's own listeners could be behind). Another session's
/// events are not handed over; one whose session cannot be read goes to every tap of its
/// method. The channel closes with the relay, and none is given out after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tapped_event_is_handed_over_before_the_reply_after_it() {
    const METHODS: &[&str] = &["Test.changed", "Test.listed"];
    let (endpoint, _) = upstream(Upstream::EventFirst).await;
    let (relay, mut client) = relay_and_client(&endpoint).await;
    let calls = relay.calls();
    call(&mut client, 1).await;
    let mut tap = calls
        .tap("S".to_owned(), METHODS)
        .expect("a relay is behind the calls");
    let next = |tap: &mut Tap| tap.try_recv().ok().map(|t| tapped_key(&t));
    assert_eq!(next(&mut tap), None, "nothing before it was asked for");
    for id in 2..200 {
        call(&mut client, id).await;
        if id == 150 {
            assert_eq!(
                next(&mut tap),
                Some(String::new()),
                "an event whose session cannot be read"
            );
        }
        assert_eq!(
            next(&mut tap),
            Some(format!("k{id}")),
            "the event before reply {id} is there as the reply is"
        );
        assert_eq!(next(&mut tap), None, "session T's is not");
    }
    let mut second = calls.tap("S".to_owned(), METHODS).unwrap();
    assert!(tap.recv().await.is_none(), "replaced by the second tap");
    call(&mut client, 200).await;
    assert_eq!(next(&mut second), Some("k200".to_owned()));
    drop(relay);
    assert!(second.recv().await.is_none(), "closed with the relay");
    assert!(calls.tap("S".to_owned(), METHODS).is_none());
}

/// The `key` a tapped test event names; empty if none.
fn tapped_key(tapped: &Tapped) -> String {
    let event: serde_json::Value = serde_json::from_slice(tapped.bytes()).unwrap();
    event["params"]["key"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
