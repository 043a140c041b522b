//! A silent death while the task waits on a command is noticed within about a second, not at
//! the idle heartbeat's pace. The relay asks the browser as soon as nothing at all has come
//! from it for a few round trips while a command is in flight.
//!
//! The same holds for a program's call on its own connection through `serve`'s front: the
//! front tells the relay what waits.
//!
//! The heartbeat is set to 30 s + 30 s here, so the idle path alone would take a minute; the
//! tests pass only if the waiting path noticed.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures::StreamExt as _;
use gateway::DeathMode;
use outlive::DeathCause;
use outlive::chromiumoxide::error::CdpError;
use serde_json::{Value, json};
use std::time::Instant;

#[tokio::test]
async fn a_silent_death_during_a_waiting_command_is_noticed_fast() {
    let (gw, provider) = support::fault_bed(0).await;
    let (on_milestone, mut milestones) = support::milestones();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let options = support::quiet()
        .heartbeat_interval(Duration::from_secs(30))
        .heartbeat_timeout(Duration::from_secs(30))
        .on_milestone(on_milestone);
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (gw, provider, killed_at) = (&gw, &provider, killed_at.clone());
            async move {
                if ctx.attempt() > 1 {
                    return Ok::<_, CdpError>(ctx.attempt());
                }
                // A command that waits (a promise that never settles), then the connection goes
                // silent under it.
                let waiting = page.evaluate_expression("new Promise(() => {})");
                let kill = async {
                    // The command is on the wire once the page answers a later one.
                    page.evaluate_expression("1").await?;
                    gw.kill(&provider.newest(), DeathMode::Silence)
                        .await
                        .unwrap();
                    *killed_at.lock().unwrap() = Some(Instant::now());
                    Ok::<_, CdpError>(())
                };
                let (waited, killed) = tokio::join!(waiting, kill);
                killed?;
                waited?;
                unreachable!("the promise never settles");
            }
        },
        options,
    )
    .await;
    assert_eq!(result.unwrap(), 2);
    assert_eq!(event.relaunches, 1);
    let died = support::next_death(&mut milestones).await;
    assert_eq!(died.0, DeathCause::Silence);
    let killed_at = killed_at.lock().unwrap().expect("the kill returned");
    let noticed = died.1.saturating_duration_since(killed_at);
    eprintln!("silence noticed {noticed:?} after the kill returned");
    // ~0.85 s expected (quiet 250 ms + probe timeout 600 ms); the idle path would take 60 s.
    // The bound leaves room for a loaded machine without letting the idle path pass.
    assert!(
        noticed < Duration::from_secs(10),
        "noticed after {noticed:?}"
    );
    support::finish_clean(gw).await;
}

/// A raw CDP client of the front, as a program would be.
struct Program {
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    next: u64,
}

impl Program {
    async fn connect(url: &str) -> Program {
        let (ws, _) = async_tungstenite::tokio::connect_async(url).await.unwrap();
        Program { ws, next: 1 }
    }

    /// Sends `method`; answers its id.
    async fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> u64 {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).await.unwrap();
        id
    }

    /// Sends `method` and waits for its result.
    async fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        let id = self.send(method, params, session).await;
        while let Some(m) = self.ws.next().await {
            if let Message::Text(t) = m.unwrap() {
                let reply: Value = serde_json::from_str(t.as_str()).unwrap();
                if reply["id"].as_u64() == Some(id) {
                    assert!(reply.get("error").is_none(), "{method}: {reply}");
                    return reply["result"].clone();
                }
            }
        }
        panic!("the connection closed before {method} was answered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_death_while_a_programs_call_waits_is_noticed_fast() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (gw, provider) = support::fault_bed(0).await;
    let (on_milestone, mut milestones) = support::milestones();
    let options = support::quiet()
        .heartbeat_interval(Duration::from_secs(30))
        .heartbeat_timeout(Duration::from_secs(30))
        .on_milestone(on_milestone);
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ready = |e: &outlive::Endpoints| drop(url_tx.send(e.cdp_url.clone()));
    let served = outlive::serve(&provider, options, ready, async {
        let _ = stop_rx.await;
    });
    let program = async {
        let mut p = Program::connect(&url_rx.await.unwrap()).await;
        let targets = p.call("Target.getTargets", json!({}), None).await;
        let page = targets["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page")["targetId"]
            .clone();
        let attach = json!({ "targetId": page, "flatten": true });
        let attached = p.call("Target.attachToTarget", attach, None).await;
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        // A call that waits (a promise that never settles), on the wire once a later one is
        // answered; then the browser goes silent under it.
        let never = json!({ "expression": "new Promise(() => {})", "awaitPromise": true });
        p.send("Runtime.evaluate", never, Some(&session)).await;
        let one = json!({ "expression": "1" });
        p.call("Runtime.evaluate", one, Some(&session)).await;
        gw.kill(&provider.newest(), DeathMode::Silence)
            .await
            .unwrap();
        let killed_at = Instant::now();
        let died = support::next_death(&mut milestones).await;
        let _ = stop_tx.send(());
        (died, killed_at)
    };
    let (served, ((cause, detected_at), killed_at)) = tokio::join!(served, program);
    served.unwrap();
    assert_eq!(cause, DeathCause::Silence);
    let noticed = detected_at.saturating_duration_since(killed_at);
    eprintln!("silence under a program's call noticed {noticed:?} after the kill returned");
    // ~0.85 s expected; the idle path would take 60 s.
    assert!(
        noticed < Duration::from_secs(10),
        "noticed after {noticed:?}"
    );
    support::finish_clean(gw).await;
}
