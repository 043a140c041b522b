//! Taps: the browser's events of some methods on one session, handed over as the relay reads
//! them, before it forwards them to chromiumoxide. The relay knows nothing of what they mean.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};

use async_tungstenite::tungstenite::Utf8Bytes;
use tokio::sync::mpsc;

use super::wire::{self, Inbound};

/// An event a tap hands over: the frame as the browser sent it.
#[derive(Debug, Clone)]
pub(crate) struct Tapped(Utf8Bytes);

impl Tapped {
    /// The frame's bytes (a JSON object).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

#[cfg(test)]
impl From<String> for Tapped {
    fn from(text: String) -> Self {
        Tapped(text.into())
    }
}

/// Where a tap's events come, in the order the browser sent them. Closes when the relay ends.
pub(crate) type Tap = mpsc::UnboundedReceiver<Tapped>;

/// The taps open on a relay, shared by its task and every `Calls`. `None` once the task has
/// ended (its taps then see their channel closed).
#[derive(Clone)]
pub(super) struct Taps(Arc<Mutex<Option<Vec<Entry>>>>);

/// One tap: whose events of which methods, and where they go.
struct Entry {
    session: String,
    methods: &'static [&'static str],
    tx: mpsc::UnboundedSender<Tapped>,
}

/// The part of a tapped event the relay reads to find its tap.
#[derive(serde::Deserialize)]
struct Session<'a> {
    #[serde(default, rename = "sessionId", borrow)]
    session_id: Option<Cow<'a, str>>,
}

impl Taps {
    /// Taps with none open yet.
    pub(super) fn open() -> Taps {
        Taps(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Vec<Entry>>> {
        crate::sync::lock(&self.0)
    }

    /// A tap of the events of `methods` on `session`. It replaces an earlier tap of the same
    /// session and methods, whose channel closes. `None` once the relay has ended.
    pub(super) fn tap(&self, session: String, methods: &'static [&'static str]) -> Option<Tap> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut taps = self.lock();
        let taps = taps.as_mut()?;
        taps.retain(|t| !(t.session == session && t.methods == methods));
        taps.push(Entry {
            session,
            methods,
            tx,
        });
        Some(rx)
    }

    /// Whether any tap is open (the relay reads no event for them otherwise). Taps whose
    /// receiver is gone are forgotten.
    pub(super) fn wanted(&self) -> bool {
        self.lock().as_mut().is_some_and(|taps| {
            taps.retain(|t| !t.tx.is_closed());
            !taps.is_empty()
        })
    }

    /// Hands the frame `text` to the taps of its session and method, if it is an event. One
    /// whose session cannot be read goes to every tap of its method: its reader decides.
    pub(super) fn feed(&self, text: &Utf8Bytes) {
        let bytes = text.as_bytes();
        let Inbound::Event(method) = wire::inbound(bytes) else {
            return;
        };
        let mut taps = self.lock();
        let Some(taps) = taps.as_mut() else {
            return;
        };
        let tapped = |t: &&Entry| t.methods.contains(&method.as_ref());
        if !taps.iter().any(|t| tapped(&t)) {
            return;
        }
        let session = serde_json::from_slice::<Session>(bytes).map(|s| s.session_id);
        for tap in taps.iter().filter(tapped) {
            let ours = match &session {
                Ok(session) => session.as_deref() == Some(tap.session.as_str()),
                Err(_) => true,
            };
            if ours {
                let _ = tap.tx.send(Tapped(text.clone()));
            }
        }
    }

    /// The relay's task ended: every tap sees its channel closed, and none is given out.
    pub(super) fn close(&self) {
        self.lock().take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGED: &[&str] = &["Test.changed", "Test.listed"];

    /// What `tap` holds now, as text.
    fn taken(tap: &mut Tap) -> Vec<String> {
        std::iter::from_fn(|| tap.try_recv().ok())
            .map(|t| String::from_utf8_lossy(t.bytes()).into_owned())
            .collect()
    }

    #[test]
    fn an_event_goes_to_the_tap_of_its_session_and_method() {
        let taps = Taps::open();
        assert!(!taps.wanted(), "nothing tapped");
        let mut s = taps.tap("S".into(), CHANGED).unwrap();
        let mut t = taps.tap("T".into(), CHANGED).unwrap();
        assert!(taps.wanted());
        let feed = |text: &str| taps.feed(&Utf8Bytes::from(text.to_owned()));
        let on_s = r#"{"method":"Test.changed","params":{"k":"a"},"sessionId":"S"}"#;
        feed(on_s);
        let listed = r#"{"method":"Test.listed","params":{},"sessionId":"T"}"#;
        feed(listed);
        // Not tapped: another method, a reply, the browser's own session.
        feed(r#"{"method":"Test.other","params":{},"sessionId":"S"}"#);
        feed(r#"{"id":3,"method":"Test.changed","params":{},"sessionId":"S"}"#);
        feed(r#"{"method":"Test.changed","params":{}}"#);
        assert_eq!(taken(&mut s), [on_s]);
        assert_eq!(taken(&mut t), [listed]);
        // One whose session cannot be read goes to every tap of its method.
        let unread = r#"{"method":"Test.changed","params":{},"sessionId":7}"#;
        feed(unread);
        assert_eq!(
            (taken(&mut s), taken(&mut t)),
            (vec![unread.into()], vec![unread.into()])
        );
    }

    #[tokio::test]
    async fn a_tap_closes_when_replaced_dropped_or_closed() {
        let taps = Taps::open();
        let mut first = taps.tap("S".into(), CHANGED).unwrap();
        let mut second = taps.tap("S".into(), CHANGED).unwrap();
        assert!(first.recv().await.is_none(), "replaced by the second");
        taps.close();
        assert!(second.recv().await.is_none(), "closed with the relay");
        assert!(taps.tap("S".into(), CHANGED).is_none());
        let dropped = Taps::open();
        drop(dropped.tap("S".into(), CHANGED));
        assert!(!dropped.wanted(), "a dropped tap is forgotten");
    }
}
