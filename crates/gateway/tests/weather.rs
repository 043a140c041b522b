//! Network weather on the relay, seen from raw websocket clients sending `Browser.getVersion`
//! every 50 ms; and a late connection to a dead session, closed rather than held.

mod support;

use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use futures::StreamExt;
use gateway::{Config, DeathMode, ErrorKind, Weather};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use support::{SOON, Ws};

/// How often a probe asks the browser.
const PERIOD: Duration = Duration::from_millis(50);
/// How much shorter than the hold a gap may look (timer and scheduling noise).
const SLACK: Duration = Duration::from_millis(50);
const HOLD: Duration = Duration::from_millis(600);
const EVERY: Duration = Duration::from_secs(2);

/// A gap in one connection's replies: the last reply before it and the first after.
#[derive(Debug, Clone, Copy)]
struct Gap {
    from: Instant,
    to: Instant,
}

impl Gap {
    fn overlaps(&self, other: &Gap) -> bool {
        self.from < other.to && other.from < self.to
    }
}

/// A raw CDP client in its own task: `Browser.getVersion` every [`PERIOD`], each gap in the
/// replies at least `min` long reported as it ends.
struct Probe {
    gaps: mpsc::UnboundedReceiver<Gap>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<(u64, Vec<u64>)>,
}

impl Probe {
    fn start(ws: Ws, min: Duration) -> Self {
        let (gaps_tx, gaps) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(ping(ws, min, gaps_tx, stop_rx));
        Self { gaps, stop, task }
    }

    /// The next gap this probe sees.
    async fn gap(&mut self) -> Gap {
        self.gaps.recv().await.expect("the probe runs")
    }

    /// Stops asking, waits for every reply, and checks that each command was answered once,
    /// in order: nothing held was lost.
    async fn stop(self) {
        let _ = self.stop.send(());
        let (sent, replies) = self.task.await.expect("the probe did not panic");
        assert!(sent > 0);
        assert_eq!(
            replies,
            (1..=sent).collect::<Vec<_>>(),
            "every reply, in order"
        );
    }
}

/// The probe's task: returns how many commands it sent and the ids of the replies, in order
/// of arrival.
async fn ping(
    ws: Ws,
    min: Duration,
    gaps: mpsc::UnboundedSender<Gap>,
    mut stop: oneshot::Receiver<()>,
) -> (u64, Vec<u64>) {
    let (mut tx, mut rx) = ws.split();
    let mut tick = tokio::time::interval(PERIOD);
    let (mut sent, mut replies, mut last) = (0, Vec::new(), None::<Instant>);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                sent += 1;
                let cmd = json!({"id": sent, "method": "Browser.getVersion"}).to_string();
                tx.send(Message::Text(cmd.into())).await.expect("send");
            }
            msg = rx.next() => {
                let Some(id) = reply_id(msg) else { continue };
                let now = Instant::now();
                if let Some(from) = last.filter(|from| now - *from >= min) {
                    let _ = gaps.send(Gap { from, to: now });
                }
                last = Some(now);
                replies.push(id);
            }
        }
    }
    while (replies.len() as u64) < sent {
        let msg = timeout(SOON, rx.next()).await.expect("every reply in time");
        replies.extend(reply_id(msg));
    }
    (sent, replies)
}

/// The id of a CDP reply; `None` for other frames. Panics if the connection ends.
fn reply_id(msg: Option<Result<Message, async_tungstenite::tungstenite::Error>>) -> Option<u64> {
    match msg.expect("connection open").expect("no websocket error") {
        Message::Text(text) => {
            let v: Value = serde_json::from_str(text.as_str()).expect("CDP JSON");
            assert!(v.get("error").is_none(), "{v}");
            v["id"].as_u64()
        }
        Message::Close(frame) => panic!("closed: {frame:?}"),
        _ => None,
    }
}

/// `stallsHit` from `GET /__chaos/status`.
async fn stalls_hit_over_rest(gw: &support::TestGateway) -> u64 {
    let res = gw.request(Method::GET, "/__chaos/status").send().await;
    let (status, body) = support::answer(res.expect("an answer")).await;
    assert_eq!(status, 200, "{body}");
    body["stallsHit"].as_u64().expect("stallsHit")
}

#[tokio::test]
async fn a_flow_stall_holds_the_replies_and_loses_none() {
    let weather = Weather::calm().flows(HOLD, EVERY);
    let gw = support::start(Config::new().weather(weather)).await;
    let session = gw.create().await;
    let mut probe = Probe::start(support::connect(&session.cdp_endpoint).await, HOLD - SLACK);

    // The first stall starts within a period of the connection; the second, a period later.
    let gap = timeout(EVERY * 2 + HOLD + SLACK, probe.gap())
        .await
        .expect("a stall held the replies");
    assert!(gap.to - gap.from >= HOLD - SLACK, "{gap:?}");
    probe.stop().await;

    assert!(gw.status().stalls_hit >= 1, "{:?}", gw.status());
    assert!(stalls_hit_over_rest(&gw).await >= 1);
    gw.release(&session.id).await;
    gw.finish().await;
}

#[tokio::test]
async fn a_link_stall_holds_every_connection_at_once() {
    let weather = Weather::calm().link(HOLD, EVERY);
    let gw = support::start(Config::new().weather(weather)).await;
    let (a, b) = (gw.create().await, gw.create().await);
    let mut probe_a = Probe::start(support::connect(&a.cdp_endpoint).await, HOLD - SLACK);
    let mut probe_b = Probe::start(support::connect(&b.cdp_endpoint).await, HOLD - SLACK);

    // Gaps from both until two overlap (a probe may have started mid-stall and missed one).
    let overlapping = timeout(EVERY * 3, async {
        let (mut seen_a, mut seen_b) = (Vec::<Gap>::new(), Vec::<Gap>::new());
        loop {
            tokio::select! {
                gap = probe_a.gap() => seen_a.push(gap),
                gap = probe_b.gap() => seen_b.push(gap),
            }
            let pair = seen_a
                .iter()
                .find_map(|a| seen_b.iter().find(|b| a.overlaps(b)).map(|b| (*a, *b)));
            if let Some(pair) = pair {
                return pair;
            }
        }
    })
    .await;
    let (gap_a, gap_b) = overlapping.expect("both connections stalled together");
    assert!(gap_a.to - gap_a.from >= HOLD - SLACK, "{gap_a:?}");
    assert!(gap_b.to - gap_b.from >= HOLD - SLACK, "{gap_b:?}");
    probe_a.stop().await;
    probe_b.stop().await;

    assert!(gw.status().stalls_hit >= 1, "{:?}", gw.status());
    gw.release(&a.id).await;
    gw.release(&b.id).await;
    gw.finish().await;
}

/// The next event is a close frame `1011` saying the browser is unreachable, within 5 s.
async fn expect_unreachable(ws: &mut Ws) {
    let event = timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("closed promptly, not held");
    match event {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(frame.code, CloseCode::Error);
            assert_eq!(frame.reason.as_str(), "the browser is unreachable");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert!(support::next_event(ws).await.is_none(), "then it ends");
}

#[tokio::test]
async fn a_late_connection_to_a_silent_death_is_closed_while_the_first_stays_silent() {
    let gw = support::start(Config::new()).await;
    let session = gw.create().await;
    let mut first = support::attach(&session.cdp_endpoint).await;
    gw.kill(&session.id, DeathMode::Silence)
        .await
        .expect("kill");
    let cmd = json!({"id": 2, "method": "Browser.getVersion"}).to_string();
    first.send(Message::Text(cmd.into())).await.expect("send");
    first
        .send(Message::Ping(b"anyone?".to_vec().into()))
        .await
        .expect("ping");

    let mut late = support::connect(&session.cdp_endpoint).await;
    expect_unreachable(&mut late).await;

    // Anything sent to the first since the death would be waiting here already.
    let quiet = timeout(Duration::from_millis(500), first.next()).await;
    assert!(quiet.is_err(), "expected silence, got {:?}", quiet.unwrap());
    gw.release(&session.id).await;
    match support::next_event(&mut first).await {
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {}
        Some(Ok(other)) => panic!("nothing may be relayed after death, got {other:?}"),
    }
    gw.finish().await;
}

#[tokio::test]
async fn a_late_connection_to_any_dead_session_is_closed_unreachable() {
    let gw = support::start(Config::new()).await;
    for mode in [DeathMode::Close, DeathMode::Reset] {
        let session = gw.create().await;
        gw.kill(&session.id, mode).await.expect("kill");
        let mut late = support::connect(&session.cdp_endpoint).await;
        expect_unreachable(&mut late).await;
        gw.release(&session.id).await;
    }
    gw.finish_idle().await;
}

#[tokio::test]
async fn invalid_weather_is_refused_naming_it() {
    let second = Duration::from_secs(1);
    for (weather, part) in [
        (Weather::calm().flows(second, second), "flows"),
        (Weather::calm().link(second * 3, second), "link"),
        (Weather::calm().flows(Duration::ZERO, second), "flows"),
        (Weather::calm().link(second, Duration::ZERO), "link"),
    ] {
        let err = gateway::spawn(Config::new().weather(weather))
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.option(), Some("weather"));
        assert!(err.to_string().contains(part), "{err}");
    }
}
