//! The relay's reading of CDP frames, on bytes: what a message is (its `id`, `method` and
//! `sessionId`), never what it carries; and the messages the relay writes itself.
//!
//! The sniffer walks the top level of the JSON object and skips every other value
//! structurally (strings, with their escapes, and nested brackets). It scans only up to the
//! keys it wants, never allocates for an unescaped key or value, and slices only at the ASCII
//! quotes it found. Escaped keys and values (`"\u0069d"`) are decoded with serde, so the answer
//! is serde's (property-tested in `wire/tests.rs` on any valid frame, key order and escaping).
//! Two readings stop as early as they can: [`Head::of`] and [`inbound`]. The few events the
//! relay acts on ([`PAGE_EVENTS`]) are then parsed with serde ([`page_event`]); they are small.

use std::borrow::Cow;

use async_tungstenite::tungstenite::{Message, Utf8Bytes};

/// Message ids at and above this are the relay's own; chromiumoxide counts up from 0.
pub(super) const OWN_ID_BASE: u64 = 1_900_000_000;

/// What a CDP message is, without what it carries: its id, method and session.
#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Head<'a> {
    pub id: Option<u64>,
    #[serde(borrow)]
    pub method: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    pub session_id: Option<Cow<'a, str>>,
}

impl<'a> Head<'a> {
    /// The three keys, as serde reads them into this struct (all `None` where serde fails).
    /// The scan stops once all three have been seen. For the client's commands: chromiumoxide
    /// writes `id`, `method`, `sessionId`, then `params`, so a multi-MB command is read in
    /// O(1). A command without a session is scanned to its end.
    pub(crate) fn of(bytes: &'a [u8]) -> Head<'a> {
        scan_head(bytes, Until::All).unwrap_or_default()
    }
}

/// What a message from the browser is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Inbound<'a> {
    /// A reply to the command with this id.
    Reply(u64),
    /// An event.
    Event(Cow<'a, str>),
    /// Neither (not an object, or neither key).
    Other,
}

impl<'a> Inbound<'a> {
    /// What a message with this head is: a reply if it has an `id`, else an event if it has a
    /// `method`.
    fn of(head: Head<'a>) -> Inbound<'a> {
        match head {
            Head { id: Some(id), .. } => Inbound::Reply(id),
            Head {
                method: Some(method),
                ..
            } => Inbound::Event(method),
            _ => Inbound::Other,
        }
    }
}

/// Reads a message from the browser: the first of `id` and `method` decides. A frame carrying
/// an `id` is a reply, one carrying a `method` an event; CDP never sends both. Chromium writes
/// it first: O(1) for every reply, however large its result.
pub(super) fn inbound(bytes: &[u8]) -> Inbound<'_> {
    Inbound::of(scan_head(bytes, Until::IdOrMethod).unwrap_or_default())
}

/// The id of the command `frame` answers, if it is a CDP reply from the browser (a JSON object
/// whose `id`, an unsigned integer, comes before any `method`).
///
/// Reads the frame's bytes only as far as that key, so a large reply costs nothing more.
///
/// ```
/// assert_eq!(outlive::wire::reply_id(br#"{"id":7,"result":{}}"#), Some(7));
/// assert_eq!(outlive::wire::reply_id(br#"{"method":"Page.loadEventFired"}"#), None);
/// ```
pub fn reply_id(frame: &[u8]) -> Option<u64> {
    match inbound(frame) {
        Inbound::Reply(id) => Some(id),
        _ => None,
    }
}

/// Whether command `method` may keep the browser from answering anything else for a while:
/// it makes a multi-MB reply. Measured on a 2560 × 3200 page: `Browser.getVersion` waits out
/// `Page.captureScreenshot` (1.1–1.3 s) and up to 0.5 s of `Page.printToPDF` (33 MB each);
/// `Page.captureSnapshot` (MHTML) answers as much.
pub(crate) fn keeps_browser_busy(method: &str) -> bool {
    matches!(
        method,
        "Page.captureScreenshot" | "Page.printToPDF" | "Page.captureSnapshot"
    )
}

/// The command `Browser.getVersion` with this id: the cheapest sign of life a browser gives.
pub fn version_request(id: u64) -> String {
    format!(r#"{{"id":{id},"method":"Browser.getVersion"}}"#)
}

/// The fuzz target's check (`fuzz/fuzz_targets/wire.rs`, its corpus replayed by
/// `tests/wire_corpus.rs`): no input makes the sniffer panic, and any JSON object serde reads
/// reads the same to the sniffer. Panics where it does not.
#[doc(hidden)]
pub fn fuzz_one(frame: &[u8]) {
    let head = Head::of(frame);
    let first = inbound(frame);
    if let Inbound::Event(method) = &first {
        let _ = page_event(method, frame);
    }
    // Mending moves no byte and touches only what serde refuses to read.
    if let Some(mended) = mend_lone_surrogates(frame) {
        assert_eq!(mended.len(), frame.len());
        assert!(
            serde_json::from_slice::<serde_json::Value>(frame).is_err(),
            "mended a frame serde reads: {}",
            String::from_utf8_lossy(frame)
        );
    }
    let is_object = frame.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{');
    // serde also reads `[id, method, sessionId]` into a struct; a CDP frame is an object.
    let Some(expected) = serde_json::from_slice::<Head>(frame)
        .ok()
        .filter(|_| is_object)
    else {
        return;
    };
    let text = String::from_utf8_lossy(frame);
    assert_eq!(head, expected, "the head of {text}");
    // CDP never sends both keys; with both, the sniffer's first-read one decides.
    if expected.id.is_none() || expected.method.is_none() {
        assert_eq!(first, Inbound::of(expected), "the kind of {text}");
    }
}

/// The events about a page target or its main frame: the only ones the relay acts on.
pub(super) const PAGE_EVENTS: [&str; 13] = [
    "Inspector.targetCrashed",
    "Network.responseReceived",
    "Target.targetCreated",
    "Page.javascriptDialogOpening",
    "Page.javascriptDialogClosed",
    "Target.targetCrashed",
    "Target.attachedToTarget",
    "Target.targetDestroyed",
    "Target.detachedFromTarget",
    "Page.frameRequestedNavigation",
    "Page.frameStartedNavigating",
    "Page.frameNavigated",
    "Page.frameStoppedLoading",
];

/// An event about a page target or its main frame.
#[derive(Debug, serde::Deserialize)]
pub(super) struct PageEvent {
    pub method: String,
    #[serde(default, rename = "sessionId")]
    pub session_id: Option<String>,
    #[serde(default)]
    pub params: PageEventParams,
}

/// The parts of a [`PageEvent`]'s params the relay reads.
#[derive(Debug, serde::Deserialize, Default)]
pub(super) struct PageEventParams {
    #[serde(default, rename = "targetId")]
    pub target_id: Option<String>,
    #[serde(default, rename = "sessionId")]
    pub session_id: Option<String>,
    #[serde(default, rename = "frameId")]
    pub frame_id: Option<String>,
    #[serde(default)]
    pub frame: Option<FrameInfo>,
    #[serde(default, rename = "targetInfo")]
    pub target_info: Option<TargetInfo>,
    /// `Network.responseReceived`'s resource type (`Document` for a navigation's response).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// `Target.attachedToTarget`: the target waits for this session to let it run.
    #[serde(default, rename = "waitingForDebugger")]
    pub waiting_for_debugger: bool,
}

/// `params.targetInfo` of a target event.
#[derive(Debug, serde::Deserialize)]
pub(super) struct TargetInfo {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, rename = "targetId")]
    pub target_id: Option<String>,
}

/// `params.frame` of a navigation event.
#[derive(Debug, serde::Deserialize)]
pub(super) struct FrameInfo {
    pub id: String,
    #[serde(default, rename = "parentId")]
    pub parent_id: Option<String>,
}

/// Parses the event `bytes` (whose method is `method`) if it is one of [`PAGE_EVENTS`].
pub(super) fn page_event(method: &str, bytes: &[u8]) -> Option<PageEvent> {
    if !PAGE_EVENTS.contains(&method) {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// How far [`scan_head`] reads.
#[derive(Clone, Copy)]
enum Until {
    /// Until all three keys were seen (or the object ends).
    All,
    /// Until an `id` or a `method` was read.
    IdOrMethod,
}

/// Which of the [`Head`] keys a key is.
enum Key {
    Id,
    Method,
    Session,
    Other,
}

/// Walks the top-level keys of the object in `bytes`. `None` where serde would fail on the
/// part read: not an object, a key of [`Head`] twice, a value of the wrong type, bad syntax
/// around the keys, or (when read to the end) anything after the object.
fn scan_head(bytes: &[u8], until: Until) -> Option<Head<'_>> {
    let mut s = Scan::new(bytes);
    let mut head = Head::default();
    let mut seen = [false; 3];
    s.eat(b'{')?;
    s.ws();
    if s.peek()? == b'}' {
        s.at += 1;
        return s.at_end().then_some(head);
    }
    loop {
        s.ws();
        let key = s.string()?;
        s.eat(b':')?;
        s.ws();
        let slot = match key.key()? {
            Key::Id => 0,
            Key::Method => 1,
            Key::Session => 2,
            Key::Other => {
                s.skip_value()?;
                3
            }
        };
        if slot < 3 {
            if std::mem::replace(&mut seen[slot], true) {
                return None; // serde: duplicate field
            }
            match slot {
                0 => head.id = s.id()?,
                1 => head.method = s.text_or_null()?,
                _ => head.session_id = s.text_or_null()?,
            }
        }
        let done = match until {
            Until::All => seen.iter().all(|&x| x),
            Until::IdOrMethod => head.id.is_some() || head.method.is_some(),
        };
        if done {
            return Some(head);
        }
        s.ws();
        match s.peek()? {
            b',' => s.at += 1,
            b'}' => {
                s.at += 1;
                return s.at_end().then_some(head);
            }
            _ => return None,
        }
    }
}

/// A cursor over a JSON text (also the front's id rewriter's, `front/swap/rewrite.rs`).
pub(crate) struct Scan<'a> {
    b: &'a [u8],
    /// The offset of the next byte to read.
    pub(crate) at: usize,
}

/// A JSON string as it stands in the text: quotes included.
pub(crate) struct Str<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Str<'a> {
    /// The string's value, as serde decodes it.
    pub(crate) fn text(&self) -> Option<Cow<'a, str>> {
        if self.escaped {
            return serde_json::from_slice::<String>(self.raw)
                .ok()
                .map(Cow::Owned);
        }
        // Between two ASCII quotes: always whole characters.
        let inner = &self.raw[1..self.raw.len() - 1];
        if inner.iter().any(|&c| c < 0x20) {
            return None; // serde refuses raw control characters in strings
        }
        std::str::from_utf8(inner).ok().map(Cow::Borrowed)
    }

    fn key(&self) -> Option<Key> {
        let key = self.text()?;
        Some(match key.as_ref() {
            "id" => Key::Id,
            "method" => Key::Method,
            "sessionId" => Key::Session,
            _ => Key::Other,
        })
    }
}

impl<'a> Scan<'a> {
    /// A cursor at the start of `b`.
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Scan { b, at: 0 }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    pub(crate) fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    pub(crate) fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left.
    fn at_end(&mut self) -> bool {
        self.ws();
        self.at >= self.b.len()
    }

    /// The string at the cursor.
    pub(crate) fn string(&mut self) -> Option<Str<'a>> {
        let start = self.at;
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        let mut escaped = false;
        loop {
            let rest = self.b.get(self.at..)?;
            self.at += rest.iter().position(|&c| c == b'"' || c == b'\\')?;
            if self.b[self.at] == b'\\' {
                escaped = true;
                self.at += 2; // the escaped character is never the closing quote
                continue;
            }
            self.at += 1;
            return Some(Str {
                raw: &self.b[start..self.at],
                escaped,
            });
        }
    }

    /// A token that is not a string, object or array: a number, `true`, `false`, `null`.
    pub(crate) fn scalar(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        while let Some(c) = self.peek() {
            if matches!(
                c,
                b',' | b'}' | b']' | b':' | b'"' | b'{' | b'[' | b' ' | b'\t' | b'\n' | b'\r'
            ) {
                break;
            }
            self.at += 1;
        }
        (self.at > start).then(|| &self.b[start..self.at])
    }

    /// Steps over the value at the cursor, by its structure only.
    pub(crate) fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => self.skip_nested(),
            _ => self.scalar().map(drop),
        }
    }

    fn skip_nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            let rest = self.b.get(self.at..)?;
            self.at += rest
                .iter()
                .position(|&c| matches!(c, b'"' | b'{' | b'[' | b'}' | b']'))?;
            match self.b[self.at] {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                _ => {
                    depth = depth.checked_sub(1)?;
                    self.at += 1;
                    if depth == 0 {
                        return Some(());
                    }
                }
            }
        }
    }

    /// An `id` value: a `u64` or `null`, as serde reads an `Option<u64>`.
    fn id(&mut self) -> Option<Option<u64>> {
        let token = self.scalar()?;
        if token.len() <= 19 && token[0] != b'0' && token.iter().all(u8::is_ascii_digit) {
            // The common case, without serde: at most 19 digits always fit.
            let n = token.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            return Some(Some(n));
        }
        serde_json::from_slice::<Option<u64>>(token).ok()
    }

    /// A `method` or `sessionId` value: a string or `null`.
    fn text_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.peek()? == b'"' {
            return self.string()?.text().map(Some);
        }
        (self.scalar()? == b"null").then_some(None)
    }
}

/// outlive's own account of the wire, for debugging: direction, size, id, method, session —
/// never a payload (see `quiet`).
pub(super) fn trace(direction: &'static str, bytes: &[u8]) {
    if tracing::enabled!(target: "outlive::wire", tracing::Level::TRACE) {
        let head = Head::of(bytes);
        tracing::trace!(
            target: "outlive::wire",
            direction,
            bytes = bytes.len(),
            id = head.id,
            method = head.method.as_deref(),
            session = head.session_id.as_deref(),
            "cdp frame"
        );
    }
}

/// Asks the browser for a sign of life.
pub(super) fn probe_message(id: u64) -> Message {
    Message::Text(version_request(id).into())
}

/// Asks the page's main thread for a constant: a hung page cannot answer.
pub(super) fn page_probe_message(id: u64, session: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "sessionId": session,
        "method": "Runtime.evaluate",
        "params": { "expression": "0", "returnByValue": true },
    });
    Message::Text(body.to_string().into())
}

/// Crashes a hung page's renderer (handled on the renderer's IO thread, so it works while the
/// main thread is stuck).
pub(super) fn crash_message(id: u64, session: &str) -> Message {
    let body = serde_json::json!({ "id": id, "sessionId": session, "method": "Page.crash" });
    Message::Text(body.to_string().into())
}

/// Closes a target, at the browser level (its own session may be gone).
pub(super) fn close_target_message(id: u64, target: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "method": "Target.closeTarget",
        "params": { "targetId": target },
    });
    Message::Text(body.to_string().into())
}

/// Attaches the relay to every new page at the browser level, each waiting for it to run.
pub(super) fn hold_new_pages_message(id: u64) -> Message {
    let body = serde_json::json!({
        "id": id,
        "method": "Target.setAutoAttach",
        "params": {
            "autoAttach": true,
            "waitForDebuggerOnStart": true,
            "flatten": true,
            "filter": [{ "type": "page" }],
        },
    });
    Message::Text(body.to_string().into())
}

/// chromiumoxide's auto-attach on its page `session`, as chromiumoxide sets it.
pub(super) fn auto_attach_message(id: u64, session: &str) -> Message {
    call_message(
        id,
        session,
        "Target.setAutoAttach",
        serde_json::json!({ "autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true }),
    )
}

/// The empty result of command `id` on `session`, for chromiumoxide.
pub(super) fn empty_reply(id: u64, session: &str) -> Message {
    let body = serde_json::json!({ "id": id, "result": {}, "sessionId": session });
    Message::Text(body.to_string().into())
}

/// Detaches the relay's own `session` (its target runs on if it waited for it).
pub(super) fn detach_message(id: u64, session: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "method": "Target.detachFromTarget",
        "params": { "sessionId": session },
    });
    Message::Text(body.to_string().into())
}

/// A command of outlive's own on `session`.
pub(super) fn call_message(
    id: u64,
    session: &str,
    method: &str,
    params: serde_json::Value,
) -> Message {
    let body =
        serde_json::json!({ "id": id, "sessionId": session, "method": method, "params": params });
    Message::Text(body.to_string().into())
}

/// Registers `source` to run as each document of `session`'s target starts.
pub(super) fn add_script_message(id: u64, session: &str, source: &str) -> Message {
    call_message(
        id,
        session,
        "Page.addScriptToEvaluateOnNewDocument",
        serde_json::json!({ "source": source }),
    )
}

/// Outlive's answer to the JavaScript dialog open on `session`.
pub(super) fn dialog_message(id: u64, session: &str, accept: bool) -> Message {
    call_message(
        id,
        session,
        "Page.handleJavaScriptDialog",
        serde_json::json!({ "accept": accept }),
    )
}

/// The error answer outlive gives chromiumoxide for a command on a failed page.
pub(super) fn page_error(id: u64, session: &str, why: &str) -> Message {
    let body = serde_json::json!({
        "id": id,
        "sessionId": session,
        "error": {
            "code": -32000,
            "message": format!("outlive: {why}; the task is re-entered on a fresh page"),
        },
    });
    Message::Text(body.to_string().into())
}

/// A browser's text message as chromiumoxide can read it: a lone surrogate's escape, which
/// serde_json refuses (chromiumoxide would drop the message, and a dropped reply leaves its
/// command waiting forever), becomes `\ufffd` (see [`mend_lone_surrogates`]).
pub(super) fn for_chromiumoxide(text: Utf8Bytes) -> Message {
    match mend_lone_surrogates(text.as_bytes()).map(Utf8Bytes::try_from) {
        Some(Ok(mended)) => {
            tracing::debug!("a lone UTF-16 surrogate in a browser message, sent on as U+FFFD");
            Message::Text(mended)
        }
        // Only ASCII replaced ASCII, so the text stays UTF-8; were it not, the original goes.
        Some(Err(_)) | None => Message::Text(text),
    }
}

mod surrogates;

pub(crate) use surrogates::Mender;
pub use surrogates::mend_lone_surrogates;

#[cfg(test)]
mod tests;
