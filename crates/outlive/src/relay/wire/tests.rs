//! The sniffer against serde: any valid CDP frame, in any key order, with any escaping and
//! whitespace, reads the same; nothing panics on any input.

use proptest::prelude::*;
use serde_json::Value;

use super::*;

/// What serde reads (its failure reads as nothing).
fn serde_head(bytes: &[u8]) -> Head<'_> {
    serde_json::from_slice(bytes).unwrap_or_default()
}

/// [`inbound`] as serde would answer it.
fn serde_inbound(bytes: &[u8]) -> Inbound<'_> {
    Inbound::of(serde_head(bytes))
}

/// Writes JSON with the escaping and whitespace `style` picks, byte by byte (cycled).
struct Writer<'s> {
    style: &'s [u8],
    next: usize,
    out: String,
}

impl Writer<'_> {
    fn pick(&mut self) -> u8 {
        if self.style.is_empty() {
            return 0;
        }
        let b = self.style[self.next % self.style.len()];
        self.next += 1;
        b
    }

    fn space(&mut self) {
        let n = self.pick() % 4;
        for _ in 0..n.saturating_sub(1) {
            let c = [' ', '\t', '\n', '\r'][usize::from(self.pick() % 4)];
            self.out.push(c);
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            let how = self.pick() % 3;
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                '\r' => Some("\\r"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                _ => None,
            };
            let must = matches!(c, '"' | '\\') || (c as u32) < 0x20;
            match (how, short) {
                (0, _) if !must => self.out.push(c),
                (1, Some(s)) => self.out.push_str(s),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, v: &Value) {
        self.space();
        match v {
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Value::Object(map) => {
                let pairs: Vec<_> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                self.object(&pairs);
            }
            other => self.out.push_str(&other.to_string()),
        }
        self.space();
    }

    fn object(&mut self, pairs: &[(String, Value)]) {
        self.out.push('{');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.space();
            self.string(k);
            self.space();
            self.out.push(':');
            self.value(v);
        }
        self.space();
        self.out.push('}');
    }
}

/// `pairs` as a JSON object, in their order, written the way `style` says.
fn write(pairs: &[(String, Value)], style: &[u8]) -> String {
    let mut w = Writer {
        style,
        next: 0,
        out: String::new(),
    };
    w.space();
    w.object(pairs);
    w.space();
    w.out
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z.]{0,24}",
        any::<String>(),
        "[\"\\\\/\\n\\t\\u{0}-\\u{1f}é€😀a]{0,12}",
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", serde_json::Number::from_f64)
            .prop_map(Value::Number),
        any_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any_text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys a frame may carry besides the three, never one of them.
fn other_key() -> impl Strategy<Value = String> {
    any_text().prop_filter("not a head key", |k| {
        !matches!(k.as_str(), "id" | "method" | "sessionId")
    })
}

/// A command as a client sends it: id, method, maybe a session, maybe params, maybe more.
fn command() -> impl Strategy<Value = Vec<(String, Value)>> {
    (
        any::<u64>(),
        any_text(),
        proptest::option::of(any_text()),
        proptest::option::of(any_json()),
        proptest::option::of((other_key(), any_json())),
    )
        .prop_map(|(id, method, session, params, extra)| {
            let mut pairs = vec![
                ("id".into(), Value::from(id)),
                ("method".into(), method.into()),
            ];
            if let Some(s) = session {
                pairs.push(("sessionId".into(), s.into()));
            }
            if let Some(p) = params {
                pairs.push(("params".into(), p));
            }
            if let Some((k, v)) = extra.filter(|(k, _)| k != "params") {
                pairs.push((k, v));
            }
            pairs
        })
        .prop_shuffle()
}

/// A frame as the browser sends it: a reply (id, result or error, maybe a session) or an
/// event (method, maybe params, maybe a session).
fn browser_frame() -> impl Strategy<Value = Vec<(String, Value)>> {
    let reply = (
        any::<u64>(),
        any::<bool>(),
        any_json(),
        proptest::option::of(any_text()),
    )
        .prop_map(|(id, ok, body, session)| {
            let key = if ok { "result" } else { "error" };
            let mut pairs = vec![("id".to_owned(), Value::from(id)), (key.to_owned(), body)];
            if let Some(s) = session {
                pairs.push(("sessionId".into(), s.into()));
            }
            pairs
        });
    let event = (
        prop_oneof![
            any_text(),
            prop::sample::select(PAGE_EVENTS.to_vec()).prop_map(String::from)
        ],
        proptest::option::of(any_json()),
        proptest::option::of(any_text()),
    )
        .prop_map(|(method, params, session)| {
            let mut pairs = vec![("method".to_owned(), Value::from(method))];
            if let Some(p) = params {
                pairs.push(("params".into(), p));
            }
            if let Some(s) = session {
                pairs.push(("sessionId".into(), s.into()));
            }
            pairs
        });
    prop_oneof![reply, event].prop_shuffle()
}

/// Any object with distinct keys, the three among them or not, their values of any type.
fn any_object() -> impl Strategy<Value = Vec<(String, Value)>> {
    let key = prop_oneof![
        Just("id".to_owned()),
        Just("method".to_owned()),
        Just("sessionId".to_owned()),
        other_key(),
    ];
    let value = prop_oneof![
        any::<u64>().prop_map(Value::from),
        any_text().prop_map(Value::from),
        any_json(),
    ];
    prop::collection::btree_map(key, value, 0..6)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn a_command_reads_as_serde_reads_it(pairs in command(), style in prop::collection::vec(any::<u8>(), 0..32)) {
        let text = write(&pairs, &style);
        prop_assert!(serde_json::from_str::<Value>(&text).is_ok(), "valid JSON: {text}");
        let expected = serde_head(text.as_bytes());
        prop_assert!(expected.id.is_some());
        prop_assert_eq!(Head::of(text.as_bytes()), expected, "{}", text);
        fuzz_one(text.as_bytes());
    }

    #[test]
    fn a_browser_frame_reads_as_serde_reads_it(pairs in browser_frame(), style in prop::collection::vec(any::<u8>(), 0..32)) {
        let text = write(&pairs, &style);
        prop_assert_eq!(inbound(text.as_bytes()), serde_inbound(text.as_bytes()), "{}", text);
        prop_assert_eq!(Head::of(text.as_bytes()), serde_head(text.as_bytes()), "{}", text);
        prop_assert_eq!(reply_id(text.as_bytes()), serde_head(text.as_bytes()).id, "{}", text);
        fuzz_one(text.as_bytes());
    }

    #[test]
    fn any_object_reads_as_serde_reads_it(pairs in any_object(), style in prop::collection::vec(any::<u8>(), 0..32)) {
        let text = write(&pairs, &style);
        prop_assert_eq!(Head::of(text.as_bytes()), serde_head(text.as_bytes()), "{}", text);
        fuzz_one(text.as_bytes());
    }

    #[test]
    fn nothing_panics(bytes in prop::collection::vec(any::<u8>(), 0..256), text in any::<String>()) {
        fuzz_one(&bytes);
        fuzz_one(text.as_bytes());
        // A valid frame cut anywhere, even inside a character.
        let frame = format!(r#"{{"method":"Page.frameNavigated{text}","sessionId":"é😀","params":{{}}}}"#);
        for end in 0..frame.len() {
            let cut = &frame.as_bytes()[..end];
            if let Inbound::Event(m) = inbound(cut) {
                let _ = page_event(&m, cut);
            }
            fuzz_one(cut);
        }
    }
}

#[test]
fn a_method_with_a_character_across_byte_40_does_not_panic() {
    // The old sniffer sliced the text after `{"method":"` at byte 40, inside the `é` here.
    let method = format!("{}é{}", "M".repeat(39), "é".repeat(4));
    let text = format!(r#"{{"method":"{method}","params":{{}}}}"#);
    assert!(!text.is_char_boundary(r#"{"method":""#.len() + 40));
    assert_eq!(
        inbound(text.as_bytes()),
        Inbound::Event(method.as_str().into())
    );
    assert_eq!(
        Head::of(text.as_bytes()).method.as_deref(),
        Some(method.as_str())
    );
    assert!(page_event(&method, text.as_bytes()).is_none());
}

#[test]
fn reads_the_common_shapes() {
    let head = Head::of(
        br#"{"id":12,"method":"Runtime.evaluate","sessionId":"AB","params":{"expression":"\"}"}}"#,
    );
    assert_eq!(head.id, Some(12));
    assert_eq!(head.method.as_deref(), Some("Runtime.evaluate"));
    assert_eq!(head.session_id.as_deref(), Some("AB"));
    assert_eq!(
        inbound(br#"{"id":1900000003,"result":{}}"#),
        Inbound::Reply(1_900_000_003)
    );
    // Re-serialised by a proxy, with the id last.
    assert_eq!(
        inbound(br#"{"result":{"product":"Chrome","x":[1,{"id":2}]},"id":1900000007}"#),
        Inbound::Reply(1_900_000_007)
    );
    assert_eq!(
        inbound(br#"{"method":"Page.loadEventFired","params":{"id":3}}"#),
        Inbound::Event("Page.loadEventFired".into())
    );
    // Escaped keys and values are decoded.
    assert_eq!(inbound(br#"{"\u0069d":7}"#), Inbound::Reply(7));
    assert_eq!(
        Head::of(br#"{"sessionId":"a\u00e9","id":1}"#)
            .session_id
            .as_deref(),
        Some("a\u{e9}")
    );
    // What serde refuses reads as nothing.
    for bad in [
        &br#"{"id":"#[..],
        br#"{"id":-1}"#,
        br#"{"id":1.5}"#,
        br#"{"id":"1"}"#,
        br#"{"id":1,"id":2}"#,
        br#"{"method":5}"#,
        b"[1]",
        b"",
        br#"{"id":1} x"#,
        br#"{"id":18446744073709551616}"#,
    ] {
        assert_eq!(
            Head::of(bad),
            serde_head(bad),
            "{}",
            String::from_utf8_lossy(bad)
        );
        assert_eq!(
            Head::of(bad),
            Head::default(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(
        Head::of(br#"{"id":18446744073709551615}"#).id,
        Some(u64::MAX)
    );
    assert_eq!(
        Head::of(br#"{"id":0,"method":null}"#),
        Head {
            id: Some(0),
            ..Head::default()
        }
    );
}

#[test]
fn a_page_event_is_parsed_only_when_the_relay_acts_on_it() {
    let crash = br#"{"method":"Inspector.targetCrashed","params":{},"sessionId":"S"}"#;
    let Inbound::Event(m) = inbound(crash) else {
        panic!("an event")
    };
    let e = page_event(&m, crash).expect("parsed");
    assert_eq!(e.session_id.as_deref(), Some("S"));
    let other = br#"{"method":"Network.dataReceived","params":{}}"#;
    assert!(page_event("Network.dataReceived", other).is_none());
}
