//! The frames against tungstenite as the other end, over an in-memory pipe.

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::protocol::Role;
use async_tungstenite::tungstenite::{Bytes, Message};
use futures::StreamExt;
use tokio::io::DuplexStream;

use super::{Frame, Reader, STREAM_FROM, Spawned, Streamed, WriteError, Writer, unmask};

type Pipe = TokioAdapter<DuplexStream>;

fn pipe() -> (Pipe, Pipe) {
    pipe_of(1 << 16)
}

fn pipe_of(size: usize) -> (Pipe, Pipe) {
    let (a, b) = tokio::io::duplex(size);
    (TokioAdapter::new(a), TokioAdapter::new(b))
}

/// tungstenite at one end as `role`; outlive's reader at the other.
async fn tungstenite_and_reader(
    role: Role,
    streams: bool,
) -> (
    WebSocketStream<Pipe>,
    tokio::sync::mpsc::Receiver<Result<Frame, async_tungstenite::tungstenite::Error>>,
    tokio_util::task::AbortOnDropHandle<()>,
) {
    let (a, b) = pipe();
    let ws = WebSocketStream::from_raw_socket(a, role, None).await;
    let reader = Reader::spawn(b, streams);
    (ws, reader.frames, reader.task)
}

/// A reply of about `len` bytes whose payload is base64-like, with `extra` inside it.
fn big_reply(id: u64, len: usize, extra: &str) -> String {
    let data: String = (0..len).map(|i| (b'A' + (i % 26) as u8) as char).collect();
    format!(r#"{{"id":{id},"result":{{"data":"{data}{extra}"}},"sessionId":"S"}}"#)
}

async fn body(mut s: Streamed) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = s.body.recv().await {
        out.extend_from_slice(&chunk);
    }
    out
}

async fn whole(
    rx: &mut tokio::sync::mpsc::Receiver<Result<Frame, async_tungstenite::tungstenite::Error>>,
) -> Message {
    match rx.recv().await {
        Some(Ok(Frame::Whole(m))) => m,
        Some(Ok(Frame::Streamed(_) | Frame::Arrived(_))) => panic!("streamed, expected whole"),
        other => panic!("expected a message, got {:?}", other.map(|r| r.err())),
    }
}

#[tokio::test]
async fn a_clients_masked_messages_read_as_sent() {
    let (mut client, mut rx, _task) = tungstenite_and_reader(Role::Client, false).await;
    let long = "x".repeat(70_000);
    for m in [
        Message::text(r#"{"id":1,"method":"Page.enable"}"#),
        Message::text(long.clone()),
        Message::binary(vec![1u8, 2, 3]),
        Message::Ping(Bytes::from_static(b"hi")),
    ] {
        client.send(m.clone()).await.unwrap();
        assert_eq!(whole(&mut rx).await, m);
    }
    client.close(None).await.unwrap();
    assert!(matches!(whole(&mut rx).await, Message::Close(_)));
}

#[tokio::test]
async fn the_writers_frames_read_in_tungstenite() {
    for (role, masks) in [(Role::Server, true), (Role::Client, false)] {
        // Each frame is written whole before it is read: the pipe holds the largest.
        let (a, b) = pipe_of(1 << 20);
        let mut peer = WebSocketStream::from_raw_socket(a, role, None).await;
        let mut writer = Writer::new(b, masks);
        let long = "y".repeat(200_000);
        for m in [
            Message::text("{}"),
            Message::text("z".repeat(300)),
            Message::text(long.clone()),
            Message::binary(vec![9u8; 5]),
        ] {
            writer.send(Frame::Whole(m.clone())).await.unwrap();
            assert_eq!(peer.next().await.unwrap().unwrap(), m);
        }
    }
}

#[tokio::test]
async fn a_large_reply_to_the_client_streams_and_what_follows_comes_whole() {
    let (mut browser, mut rx, _task) = tungstenite_and_reader(Role::Server, true).await;
    let reply = big_reply(7, 1 << 20, "");
    let event = r#"{"method":"Page.loadEventFired","params":{}}"#;
    let sending = tokio::spawn(async move {
        browser.send(Message::text(reply.clone())).await.unwrap();
        browser.send(Message::text(event)).await.unwrap();
        (browser, reply)
    });
    let Some(Ok(Frame::Streamed(s))) = rx.recv().await else {
        panic!("the reply did not stream");
    };
    assert_eq!(crate::wire::reply_id(&s.head), Some(7));
    let len = s.len;
    let got = body(s).await;
    let (_browser, reply) = sending.await.unwrap();
    assert_eq!(len, reply.len() as u64);
    assert_eq!(got, reply.as_bytes());
    let Some(Ok(Frame::Arrived(head))) = rx.recv().await else {
        panic!("no word that the reply was read");
    };
    assert_eq!(crate::wire::reply_id(&head), Some(7));
    assert_eq!(whole(&mut rx).await, Message::text(event));
}

#[tokio::test]
async fn large_events_and_the_relays_own_replies_come_whole() {
    let (mut browser, mut rx, _task) = tungstenite_and_reader(Role::Server, true).await;
    let data = "Q".repeat(STREAM_FROM as usize);
    let event = format!(r#"{{"method":"Runtime.consoleAPICalled","params":{{"x":"{data}"}}}}"#);
    let own = big_reply(
        crate::relay::wire::OWN_ID_BASE + 1,
        STREAM_FROM as usize,
        "",
    );
    let spaced = format!(" {}", big_reply(3, STREAM_FROM as usize, ""));
    for text in [event, own, spaced] {
        browser.send(Message::text(text.clone())).await.unwrap();
        assert_eq!(whole(&mut rx).await, Message::text(text));
    }
}

#[tokio::test]
async fn a_streamed_reply_is_mended_and_keeps_its_length() {
    let (mut browser, mut rx, _task) = tungstenite_and_reader(Role::Server, true).await;
    let reply = big_reply(9, 600_000, r"\ud800 \ud83d\ude00 \\ud800");
    let mended = reply.replacen(r"\ud800 ", r"\ufffd ", 1);
    let sending = tokio::spawn(async move { browser.send(Message::text(reply)).await });
    let Some(Ok(Frame::Streamed(s))) = rx.recv().await else {
        panic!("the reply did not stream");
    };
    assert_eq!(s.len, mended.len() as u64);
    assert_eq!(String::from_utf8(body(s).await).unwrap(), mended);
    sending.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_streamed_reply_reaches_tungstenite_through_the_writer() {
    let (mut browser, mut rx, _task) = tungstenite_and_reader(Role::Server, true).await;
    let (a, b) = pipe();
    let mut client = WebSocketStream::from_raw_socket(a, Role::Client, None).await;
    let mut writer = Writer::new(b, false);
    let reply = big_reply(11, 3 << 20, "");
    let expected = reply.clone();
    tokio::spawn(async move { browser.send(Message::text(reply)).await });
    let frame = rx.recv().await.unwrap().unwrap();
    let writing = tokio::spawn(async move { writer.send(frame).await });
    assert_eq!(
        client.next().await.unwrap().unwrap(),
        Message::text(expected)
    );
    writing.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_socket_ending_inside_a_streamed_reply_ends_the_written_one() {
    let (a, b) = pipe();
    let reader = Reader::spawn(b, true);
    let mut rx_frames = reader.frames;
    let reply = big_reply(5, 500_000, "");
    let cut = 300_000;
    let mut raw = vec![0x81u8, 127];
    raw.extend_from_slice(&(reply.len() as u64).to_be_bytes());
    raw.extend_from_slice(&reply.as_bytes()[..cut]);
    let mut a = a.into_inner();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        a.write_all(&raw).await.unwrap();
        drop(a);
    });
    let Some(Ok(Frame::Streamed(s))) = rx_frames.recv().await else {
        panic!("the reply did not stream");
    };
    // The written frame's reader never reads: the pipe holds it all.
    let (c, d) = pipe_of(1 << 20);
    let mut writer = Writer::new(c, false);
    let written = writer.send(Frame::Streamed(s)).await;
    assert!(
        matches!(written, Err(WriteError::Cut)),
        "a short body must cut the write"
    );
    assert!(matches!(rx_frames.recv().await, Some(Err(_))));
    drop(d);
}

#[tokio::test]
async fn fragments_make_one_message() {
    let (a, b) = pipe();
    let Spawned {
        frames: mut rx,
        task: _task,
        ..
    } = Reader::spawn(b, true);
    let mut a = a.into_inner();
    // "he" (text, not final), a ping between, "llo" (continuation, final); unmasked.
    let raw = [&[0x01u8, 2][..], b"he", &[0x89, 0], &[0x80, 3], b"llo"].concat();
    use tokio::io::AsyncWriteExt;
    a.write_all(&raw).await.unwrap();
    assert_eq!(whole(&mut rx).await, Message::Ping(Bytes::new()));
    assert_eq!(whole(&mut rx).await, Message::text("hello"));
    drop(a);
    assert!(matches!(rx.recv().await, Some(Err(_))));
}

#[test]
fn unmasking_in_pieces_is_unmasking_whole() {
    let key = [0x12, 0x34, 0x56, 0x78];
    let data: Vec<u8> = (0..103u8).collect();
    let mut whole = data.clone();
    unmask(&mut whole, key, 0);
    for cut in [1usize, 2, 3, 5, 50, 101] {
        let mut pieces = data.clone();
        let (x, y) = pieces.split_at_mut(cut);
        unmask(x, key, 0);
        unmask(y, key, cut as u64);
        assert_eq!(pieces, whole, "cut at {cut}");
    }
    unmask(&mut whole, key, 0);
    assert_eq!(whole, data);
}

#[tokio::test]
async fn a_client_not_reading_a_streamed_reply_does_not_hold_back_the_browser() {
    let (mut browser, mut rx, _task) = tungstenite_and_reader(Role::Server, true).await;
    let reply = big_reply(8, 12 << 20, "");
    let answer = r#"{"id":1000000001,"result":{}}"#;
    let sending = tokio::spawn(async move {
        browser.send(Message::text(reply)).await.unwrap();
        browser.send(Message::text(answer)).await.unwrap();
        browser
    });
    let Some(Ok(Frame::Streamed(s))) = rx.recv().await else {
        panic!("the reply did not stream");
    };
    // Nobody takes the body, yet the reply is read to its end and what follows comes.
    assert!(matches!(rx.recv().await, Some(Ok(Frame::Arrived(_)))));
    assert_eq!(whole(&mut rx).await, Message::text(answer));
    let _browser = sending.await.unwrap();
    assert_eq!(body(s).await.len(), big_reply(8, 12 << 20, "").len());
}

/// A reply of about 300 kB, streamed raw; `broken` changes its bytes. Returns what of its body
/// came, and whether the reader then reported an error.
async fn stream_raw(broken: impl FnOnce(&mut Vec<u8>)) -> (usize, usize, bool) {
    let (a, b) = pipe_of(1 << 20);
    let Spawned {
        frames: mut rx,
        mut reading,
        task: _task,
    } = Reader::spawn(b, true);
    let mut reply = big_reply(4, 300_000, "").into_bytes();
    broken(&mut reply);
    let mut raw = vec![0x81u8, 127];
    raw.extend_from_slice(&(reply.len() as u64).to_be_bytes());
    raw.extend_from_slice(&reply);
    let mut a = a.into_inner();
    let sending = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        a.write_all(&raw).await.unwrap();
        a
    });
    let Some(Ok(Frame::Streamed(s))) = rx.recv().await else {
        panic!("the reply did not stream");
    };
    let body = body(s).await.len();
    let failed = matches!(rx.recv().await, Some(Err(_)));
    assert!(
        reading.borrow_and_update().is_none(),
        "the body is no more read"
    );
    drop(sending.await.unwrap());
    (body, reply.len(), failed)
}

#[tokio::test]
async fn a_streamed_reply_that_is_not_utf8_ends_short_with_an_error() {
    let (body, len, failed) = stream_raw(|r| r[200_000] = 0xff).await;
    assert!(body < len && failed, "{body} of {len}, failed: {failed}");
    // A character cut by the reply's end is caught before the last bytes go on.
    let (body, len, failed) = stream_raw(|r| *r.last_mut().unwrap() = 0xe2).await;
    assert!(body < len && failed, "{body} of {len}, failed: {failed}");
    let (body, len, failed) = stream_raw(|_| {}).await;
    assert!(body == len && !failed, "{body} of {len}, failed: {failed}");
}

mod utf8 {
    use proptest::prelude::*;

    use super::super::Utf8Check;

    /// Arbitrary bytes, or text with characters of every width.
    fn text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            ".{0,24}".prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #[test]
        fn checked_in_pieces_is_checked_whole(
            text in text(),
            cuts in proptest::collection::vec(0usize..96, 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            let mut check = Utf8Check::default();
            let mut at = 0;
            let mut ok = true;
            for cut in cuts.into_iter().chain([text.len()]) {
                ok &= check.push(&text[at..cut]).is_ok();
                at = cut;
            }
            ok &= check.finish().is_ok();
            prop_assert_eq!(ok, std::str::from_utf8(&text).is_ok());
        }
    }
}
