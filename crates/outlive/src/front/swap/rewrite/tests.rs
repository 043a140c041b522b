//! The rewriter on frames as Chrome and Playwright write them, and against a reference that
//! walks the same table over `serde_json::Value`, on any frame of any method.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::ids::{IdMaps, Way};
use super::super::schema::{COMMANDS, EVENTS};
use super::*;

/// The maps after one swap: the client's `T1`/`S1`/`C1` are the new browser's `t2`/`s2`/`c2`;
/// contexts up to 10 were shown.
fn swapped() -> IdMaps {
    let mut maps = IdMaps::default();
    maps.toward(Way::ToClient)
        .number(Kind::ExecutionContext, 10, None);
    maps.swapped();
    maps.bind(Kind::Target, "T1", "t2");
    maps.bind(Kind::Session, "S1", "s2");
    maps.bind(Kind::BrowserContext, "C1", "c2");
    maps
}

fn up(maps: &mut IdMaps, frame: &str) -> String {
    to_browser(frame, &mut maps.toward(Way::ToBrowser)).unwrap_or_else(|| frame.to_owned())
}

fn down(maps: &mut IdMaps, frame: &str, method: Option<&'static str>) -> String {
    to_client(frame, |_| method, &mut maps.toward(Way::ToClient))
        .unwrap_or_else(|| frame.to_owned())
}

#[test]
fn a_command_gets_the_browser_ids() {
    let mut maps = swapped();
    let navigate = r#"{"id":12,"method":"Page.navigate","params":{"url":"https://bank.test/T1","frameId":"T1","referrer":"S1"},"sessionId":"S1"}"#;
    assert_eq!(
        up(&mut maps, navigate),
        r#"{"id":12,"method":"Page.navigate","params":{"url":"https://bank.test/T1","frameId":"t2","referrer":"S1"},"sessionId":"s2"}"#,
        "ids only where the table says: never the url or referrer"
    );
    let evaluate = r#"{"id":13,"method":"Runtime.evaluate","params":{"expression":"1","contextId":12,"returnByValue":true},"sessionId":"S1"}"#;
    assert_eq!(
        up(&mut maps, evaluate),
        r#"{"id":13,"method":"Runtime.evaluate","params":{"expression":"1","contextId":2,"returnByValue":true},"sessionId":"s2"}"#
    );
    // Playwright's order, with whitespace, and an unknown (new) target left as it is.
    let create = r#"{ "id": 3, "method": "Target.attachToTarget", "params": { "targetId": "NEWTAB", "flatten": true } }"#;
    assert_eq!(up(&mut maps, create), create);
    let grant = r#"{"id":4,"method":"Browser.grantPermissions","params":{"permissions":["geolocation"],"origin":"https://a.test","browserContextId":"C1"}}"#;
    assert_eq!(
        up(&mut maps, grant),
        grant.replace(r#""browserContextId":"C1""#, r#""browserContextId":"c2""#)
    );
}

#[test]
fn events_get_the_client_ids() {
    let mut maps = swapped();
    let attached = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"s2","targetInfo":{"targetId":"t2","type":"page","title":"","url":"about:blank","attached":true,"canAccessOpener":false,"browserContextId":"c2"},"waitingForDebugger":true}}"#;
    assert_eq!(
        down(&mut maps, attached, None),
        r#"{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page","title":"","url":"about:blank","attached":true,"canAccessOpener":false,"browserContextId":"C1"},"waitingForDebugger":true}}"#
    );
    let created = r#"{"method":"Runtime.executionContextCreated","params":{"context":{"id":1,"origin":"https://bank.test","name":"","uniqueId":"-5.-7","auxData":{"isDefault":true,"type":"default","frameId":"t2"}}},"sessionId":"s2"}"#;
    assert_eq!(
        down(&mut maps, created, None),
        r#"{"method":"Runtime.executionContextCreated","params":{"context":{"id":11,"origin":"https://bank.test","name":"","uniqueId":"-5.-7","auxData":{"isDefault":true,"type":"default","frameId":"T1"}}},"sessionId":"S1"}"#
    );
    // A child frame is renewed: its id passes, its parent (the main frame) is mapped.
    let navigated = r#"{"method":"Page.frameNavigated","params":{"frame":{"id":"CHILD","parentId":"t2","loaderId":"L","url":"https://x.test/","securityOrigin":"https://x.test","mimeType":"text/html"},"type":"Navigation"},"sessionId":"s2"}"#;
    assert_eq!(
        down(&mut maps, navigated, None),
        navigated
            .replace(r#""parentId":"t2""#, r#""parentId":"T1""#)
            .replace(r#""sessionId":"s2""#, r#""sessionId":"S1""#)
    );
    // No id in the table for this event: only the envelope.
    let load = r#"{"method":"Page.loadEventFired","params":{"timestamp":1.5},"sessionId":"s2"}"#;
    assert_eq!(
        down(&mut maps, load, None),
        r#"{"method":"Page.loadEventFired","params":{"timestamp":1.5},"sessionId":"S1"}"#
    );
}

#[test]
fn replies_follow_their_command() {
    let mut maps = swapped();
    let tree = r#"{"id":5,"result":{"frameTree":{"frame":{"id":"t2","loaderId":"L","url":"https://bank.test/","domainAndRegistry":"bank.test","securityOrigin":"https://bank.test","mimeType":"text/html","adFrameStatus":{"adFrameType":"none"},"secureContextType":"Secure","crossOriginIsolatedContextType":"NotIsolated","gatedAPIFeatures":[]},"childFrames":[{"frame":{"id":"KID","parentId":"t2","loaderId":"L2","url":"about:blank"}}]}},"sessionId":"s2"}"#;
    let expected = tree
        .replace(r#"{"id":"t2""#, r#"{"id":"T1""#)
        .replace(r#""parentId":"t2""#, r#""parentId":"T1""#)
        .replace(r#""sessionId":"s2""#, r#""sessionId":"S1""#);
    assert_eq!(down(&mut maps, tree, Some("Page.getFrameTree")), expected);
    // The same frame answering another command: only the envelope.
    let other = down(&mut maps, tree, Some("Page.captureScreenshot"));
    assert_eq!(
        other,
        tree.replace(r#""sessionId":"s2""#, r#""sessionId":"S1""#)
    );
    // An error reply carries no id but its session.
    let error = r#"{"id":6,"error":{"code":-32000,"message":"No frame with given id found"},"sessionId":"s2"}"#;
    assert_eq!(
        down(&mut maps, error, Some("Page.navigate")),
        error.replace("s2", "S1")
    );
    // A script added on the new browser gets a name the client never had.
    let added = r#"{"id":7,"result":{"identifier":"1"},"sessionId":"s2"}"#;
    assert_eq!(
        down(
            &mut maps,
            added,
            Some("Page.addScriptToEvaluateOnNewDocument")
        ),
        r#"{"id":7,"result":{"identifier":"1"},"sessionId":"S1"}"#,
        "the client was given no script on S1, so \"1\" is free"
    );
}

#[test]
fn escaped_keys_and_ids_are_read_as_serde_reads_them() {
    let mut maps = swapped();
    let frame = r#"{"id":1,"method":"Page.navigate","params":{"fr\u0061meId":"\u00541","url":"x"},"sessi\u006fnId":"S\u0031"}"#;
    assert_eq!(
        up(&mut maps, frame),
        r#"{"id":1,"method":"Page.navigate","params":{"fr\u0061meId":"t2","url":"x"},"sessi\u006fnId":"s2"}"#
    );
}

#[test]
fn lone_surrogates_pass_untouched() {
    let mut maps = swapped();
    let frame = r#"{"method":"Runtime.consoleAPICalled","params":{"type":"log","args":[{"type":"string","value":"\ud800 half"}],"executionContextId":3,"timestamp":1,"stackTrace":{"callFrames":[]},"\udc00":"T1"},"sessionId":"s2"}"#;
    assert_eq!(
        down(&mut maps, frame, None),
        frame
            .replace(r#""executionContextId":3"#, r#""executionContextId":13"#)
            .replace(r#""sessionId":"s2""#, r#""sessionId":"S1""#)
    );
}

#[test]
fn identity_maps_change_nothing() {
    let mut maps = IdMaps::default();
    let frame = r#"{"method":"Target.attachedToTarget","params":{"sessionId":"A","targetInfo":{"targetId":"B","type":"page","title":"","url":"","attached":true,"canAccessOpener":false,"browserContextId":"C"},"waitingForDebugger":false},"sessionId":"D"}"#;
    assert_eq!(
        to_client(frame, |_| None, &mut maps.toward(Way::ToClient)),
        None
    );
    assert_eq!(to_browser(frame, &mut maps.toward(Way::ToBrowser)), None);
}

#[test]
fn broken_frames_are_left_alone() {
    let mut maps = swapped();
    for frame in [
        "",
        "[]",
        r#"{"id":1,"method":"Page.navigate","params":{"frameId":"T1""#,
        r#"{"id":1,"method":"Page.navigate","params":{"frameId":"T1"},"sessionId":"S1""#,
        r#"{"id":1,"method":"Page.navigate","params":{"frameId":"T1",},"sessionId":"S1"}"#,
    ] {
        assert_eq!(
            to_browser(frame, &mut maps.toward(Way::ToBrowser)),
            None,
            "{frame}"
        );
    }
}

#[test]
fn members_are_found_at_the_top_level_only() {
    let frame = r#"{"id":1, "params" : {"result":2}, "result":{"a":[1,"}"]},"x":3}"#;
    assert_eq!(member(frame, "result"), Some(r#"{"a":[1,"}"]}"#));
    assert_eq!(member(frame, "params"), Some(r#"{"result":2}"#));
    assert_eq!(member(frame, "x"), Some("3"));
    assert_eq!(member(frame, "missing"), None);
    assert_eq!(member("{}", "x"), None);
    assert_eq!(member(r#"{"x":"#, "x"), None);
}

/// A stateless translation: known ids from a table, contexts offset.
struct Fixed {
    ids: HashMap<String, String>,
    offset: i64,
}

impl Translate for Fixed {
    fn text(&mut self, _: Kind, id: &str, _: Option<&str>) -> Option<String> {
        self.ids.get(id).cloned()
    }

    fn number(&mut self, kind: Kind, id: i64, _: Option<&str>) -> Option<i64> {
        (kind == Kind::ExecutionContext).then(|| id + self.offset)
    }
}

impl Fixed {
    fn forth() -> Fixed {
        let ids = (0..4).map(|i| (format!("c{i}"), format!("b{i}"))).collect();
        Fixed { ids, offset: -100 }
    }

    fn back() -> Fixed {
        let ids = (0..4).map(|i| (format!("b{i}"), format!("c{i}"))).collect();
        Fixed { ids, offset: 100 }
    }
}

/// The rewrite the table means, over a `Value`.
fn reference(v: &mut Value, shape: &Shape, t: &mut Fixed) {
    match (v, shape) {
        (Value::Array(items), _) => items.iter_mut().for_each(|i| reference(i, shape, t)),
        (Value::Object(map), Shape::Obj(fields)) => {
            for field in *fields {
                if let Some(inner) = map.get_mut(field.name) {
                    reference(inner, &field.shape, t);
                }
            }
        }
        (Value::String(s), Shape::Id(kind)) => {
            if let Some(new) = t.text(*kind, s, None) {
                *s = new;
            }
        }
        (Value::Number(n), Shape::Id(kind)) => {
            if let Some(new) = n.as_i64().and_then(|n| t.number(*kind, n, None)) {
                *n = new.into();
            }
        }
        _ => {}
    }
}

/// Draws from `choices`, cycled.
struct Draw<'c> {
    choices: &'c [u8],
    next: usize,
}

impl Draw<'_> {
    fn pick(&mut self, n: u8) -> u8 {
        let c = self
            .choices
            .get(self.next % self.choices.len().max(1))
            .copied();
        self.next += 1;
        c.unwrap_or(0) % n
    }

    /// An id-looking string: the client's or nobody's.
    fn token(&mut self) -> String {
        let who = ["c", "u"][usize::from(self.pick(2))];
        format!("{who}{}", self.pick(5))
    }

    /// A value of `shape`, sometimes in an array, with fields the table does not name (that
    /// look like ids, and hold objects with id-named fields).
    fn value(&mut self, shape: &Shape, depth: u8) -> Value {
        let one = match shape {
            Shape::Id(Kind::ExecutionContext) => json!(i64::from(self.pick(50))),
            Shape::Id(_) => json!(self.token()),
            Shape::Obj(fields) => {
                let mut map = serde_json::Map::new();
                for field in *fields {
                    let nested = matches!(field.shape, Shape::Obj(_));
                    if self.pick(3) > 0 && (depth < 3 || !nested) {
                        map.insert(field.name.into(), self.value(&field.shape, depth + 1));
                    }
                }
                if self.pick(2) == 0 {
                    map.insert("url".into(), json!(self.token()));
                    map.insert("other".into(), json!({"frameId": self.token(), "n": 3}));
                }
                Value::Object(map)
            }
        };
        match self.pick(4) {
            0 if depth < 4 => json!([one, self.value(shape, depth + 1)]),
            _ => one,
        }
    }
}

/// `v` as JSON, each ASCII letter of each string escaped where `draw` says.
fn write(v: &Value, draw: &mut Draw<'_>, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    'a'..='z' | 'A'..='Z' if draw.pick(4) == 0 => {
                        out.push_str(&format!("\\u{:04x}", c as u32));
                    }
                    _ => out.push(c), // ids, names and methods: nothing to escape
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(if draw.pick(2) == 0 { "," } else { " , " });
                }
                write(item, draw, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(&Value::from(k.as_str()), draw, out);
                out.push_str(if draw.pick(2) == 0 { ":" } else { " :\n" });
                write(item, draw, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A command or event of the table, with `choices` drawn into it, written with escapes.
fn frame(event: bool, index: usize, choices: &[u8]) -> (String, &'static [Field]) {
    let (method, fields) = if event {
        let (m, f) = EVENTS[index % EVENTS.len()];
        (m, f)
    } else {
        let (m, method) = &COMMANDS[index % COMMANDS.len()];
        (*m, method.params)
    };
    let mut draw = Draw { choices, next: 0 };
    let params = draw.value(&Shape::Obj(fields), 0);
    let session = draw.token();
    let v = json!({"id": 1, "method": method, "params": params, "sessionId": session});
    let mut text = String::new();
    write(&v, &mut draw, &mut text);
    (text, fields)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn splices_what_the_reference_rewrites(
        event in any::<bool>(),
        index in 0usize..200,
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let (text, fields) = frame(event, index, &choices);
        let mut expected: Value = serde_json::from_str(&text).expect("valid JSON");
        let mut t = Fixed::forth();
        reference(&mut expected["params"], &Shape::Obj(fields), &mut t);
        if let Some(new) = expected["sessionId"].as_str().and_then(|s| t.text(Kind::Session, s, None)) {
            expected["sessionId"] = json!(new);
        }
        let session = serde_json::from_str::<Value>(&text).expect("valid")["sessionId"]
            .as_str()
            .map(str::to_owned);
        let new_session = session.as_deref().and_then(|s| t.text(Kind::Session, s, None));
        let out = rewrite(&text, "params", fields, session.as_deref(), new_session.as_deref(), &mut t);
        let got: Value = serde_json::from_str(out.as_deref().unwrap_or(&text)).expect("still JSON");
        prop_assert_eq!(&got, &expected, "{}", text);
        // And back: the client's frame again (as values: a mapped id loses its escapes).
        let out = out.unwrap_or_else(|| text.clone());
        let mut back = Fixed::back();
        let session = got["sessionId"].as_str().map(str::to_owned);
        let new_session = session.as_deref().and_then(|s| back.text(Kind::Session, s, None));
        let again = rewrite(&out, "params", fields, None, new_session.as_deref(), &mut back);
        let again: Value = serde_json::from_str(again.as_deref().unwrap_or(&out)).expect("JSON");
        prop_assert_eq!(again, serde_json::from_str::<Value>(&text).expect("valid"));
    }

    #[test]
    fn no_byte_moves_when_no_id_is_known(
        event in any::<bool>(),
        index in 0usize..200,
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let (text, fields) = frame(event, index, &choices);
        let mut none = Fixed { ids: HashMap::new(), offset: 0 };
        let out = rewrite(&text, "params", fields, None, None, &mut none);
        // Offset 0 still "rewrites" a context to itself: the same bytes.
        prop_assert_eq!(out.unwrap_or_else(|| text.clone()), text);
    }

    #[test]
    fn no_input_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        let mut maps = swapped();
        let _ = to_browser(&text, &mut maps.toward(Way::ToBrowser));
        let _ = to_client(&text, |_| Some("Page.getFrameTree"), &mut maps.toward(Way::ToClient));
    }
}

/// Real traffic: `rewrite/chromium.frames`, `>` what a Playwright-like client sent and `<`
/// what Chromium answered. Taken as the new browser's, with every token the client was
/// given paired with a client name, and contexts offset: no browser token reaches the
/// client, and the client's commands, in its names, become the recorded ones byte for byte.
#[test]
fn chromium_frames_take_the_client_ids_and_back() {
    let lines: Vec<(char, &str)> = include_str!("chromium.frames")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(dir, frame)| dir.chars().next().map(|d| (d, frame)))
        .collect();
    let sent: HashMap<u64, (String, &str)> = lines
        .iter()
        .filter(|(d, _)| *d == '>')
        .filter_map(|(_, f)| {
            let head = Head::of(f.as_bytes());
            Some((head.id?, (head.method?.into_owned(), *f)))
        })
        .collect();
    let tokens = kept_tokens(&lines);
    assert!(
        tokens.len() >= 4,
        "targets, sessions and contexts: {tokens:?}"
    );
    let mut maps = IdMaps::default();
    maps.toward(Way::ToClient)
        .number(Kind::ExecutionContext, 1000, None);
    maps.swapped();
    let client = |token: &str| format!("K-{token}");
    for (token, kind) in &tokens {
        maps.bind(*kind, &client(token), token);
    }
    let mut received = 0;
    for (_, frame) in lines.iter().filter(|(d, _)| *d == '<') {
        let out = to_client(
            frame,
            |id| sent.get(&id).map(|(m, _)| m.as_str()),
            &mut maps.toward(Way::ToClient),
        );
        let out = out.as_deref().unwrap_or(frame);
        for token in tokens.keys() {
            assert!(
                !out.contains(&format!("\"{token}\"")),
                "{token} reaches the client: {out}"
            );
        }
        received += 1;
    }
    assert!(received > 20);
    for (_, frame) in sent.values() {
        let mut theirs = frame.to_string();
        for token in tokens.keys() {
            theirs = theirs.replace(&format!("\"{token}\""), &format!("\"{}\"", client(token)));
        }
        theirs = offset_contexts(&theirs, 1000);
        let back = to_browser(&theirs, &mut maps.toward(Way::ToBrowser));
        assert_eq!(back.as_deref().unwrap_or(&theirs), *frame);
    }
}

/// The tokens of kept kinds Chromium gave the client: targets, sessions, browser contexts.
fn kept_tokens(lines: &[(char, &str)]) -> HashMap<String, Kind> {
    let mut tokens = HashMap::new();
    for (_, frame) in lines.iter().filter(|(d, _)| *d == '<') {
        let Ok(v) = serde_json::from_str::<Value>(frame) else {
            continue;
        };
        let body = if v["params"].is_object() {
            &v["params"]
        } else {
            &v["result"]
        };
        let mut add = |v: &Value, kind| {
            if let Some(s) = v.as_str() {
                tokens.insert(s.to_owned(), kind);
            }
        };
        add(&body["sessionId"], Kind::Session);
        add(&body["targetId"], Kind::Target);
        add(&body["browserContextId"], Kind::BrowserContext);
        add(&body["targetInfo"]["targetId"], Kind::Target);
        add(
            &body["targetInfo"]["browserContextId"],
            Kind::BrowserContext,
        );
        for info in body["targetInfos"].as_array().into_iter().flatten() {
            add(&info["targetId"], Kind::Target);
            add(&info["browserContextId"], Kind::BrowserContext);
        }
    }
    tokens
}

/// `frame` with each `"contextId":N` (and `executionContextId`) raised by `offset`.
fn offset_contexts(frame: &str, offset: i64) -> String {
    let mut out = frame.to_owned();
    for key in ["\"contextId\":", "\"executionContextId\":"] {
        if let Some(at) = out.find(key) {
            let start = at + key.len();
            let end = start
                + out[start..]
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(0);
            if let Ok(n) = out[start..end].parse::<i64>() {
                out.replace_range(start..end, &(n + offset).to_string());
            }
        }
    }
    out
}

/// Records `rewrite/chromium.frames` from the Chromium on this machine: what a
/// Playwright-like client sends to attach, set up and navigate a page (with an iframe) in a
/// browser context of its own. Run: `cargo test -p outlive --lib capture_chromium -- --ignored`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "launches Chromium; refreshes rewrite/chromium.frames"]
async fn capture_chromium_frames() {
    let browser = crate::LocalChromium::new().start().await.expect("Chromium");
    let url = browser.endpoint().expose().to_owned();
    let (ws, _) = async_tungstenite::tokio::connect_async(url)
        .await
        .expect("connect");
    let mut r = Recorder {
        ws,
        lines: Vec::new(),
        next: 0,
    };
    let run = async {
        r.call(None, "Browser.getVersion", json!({})).await;
        let attach = json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true});
        r.call(None, "Target.setAutoAttach", attach.clone()).await;
        let context = r.call(None, "Target.createBrowserContext", json!({})).await;
        let context = context["browserContextId"].clone();
        let created = r
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": context}),
            )
            .await;
        let target = created["targetId"].clone();
        let attached = r
            .event(|v| {
                v["method"] == "Target.attachedToTarget"
                    && v["params"]["targetInfo"]["targetId"] == target
            })
            .await;
        let session = attached["params"]["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        let s = Some(session.as_str());
        r.call(s, "Page.enable", json!({})).await;
        r.call(s, "Page.getFrameTree", json!({})).await;
        r.call(s, "Log.enable", json!({})).await;
        r.call(
            s,
            "Page.setLifecycleEventsEnabled",
            json!({"enabled": true}),
        )
        .await;
        r.call(s, "Runtime.enable", json!({})).await;
        let world = json!({"source": "", "worldName": "__utility_world__"});
        r.call(s, "Page.addScriptToEvaluateOnNewDocument", world)
            .await;
        r.call(s, "Network.enable", json!({})).await;
        r.call(s, "Target.setAutoAttach", attach).await;
        r.call(s, "Runtime.runIfWaitingForDebugger", json!({}))
            .await;
        let page = "data:text/html,<title>one</title><iframe srcdoc='<b>child</b>'></iframe>";
        r.call(s, "Page.navigate", json!({"url": page, "frameId": target}))
            .await;
        r.event(|v| v["method"] == "Page.loadEventFired").await;
        let main = r
            .event(|v| {
                v["method"] == "Runtime.executionContextCreated"
                    && v["params"]["context"]["auxData"]["isDefault"] == true
                    && v["params"]["context"]["auxData"]["frameId"] == target
            })
            .await;
        let main = main["params"]["context"]["id"].clone();
        r.call(
            s,
            "Runtime.evaluate",
            json!({"expression": "1 + 1", "contextId": main}),
        )
        .await;
        r.call(s, "Page.getFrameTree", json!({})).await;
        r.call(
            s,
            "Page.createIsolatedWorld",
            json!({"frameId": target, "worldName": "w"}),
        )
        .await;
        r.call(None, "Target.getTargets", json!({})).await;
        r.call(None, "Target.closeTarget", json!({"targetId": target}))
            .await;
        r.event(|v| v["method"] == "Target.detachedFromTarget")
            .await;
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("Chromium answers within 30 s");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/front/swap/rewrite/chromium.frames");
    std::fs::write(path, r.lines.join("\n") + "\n").expect("write chromium.frames");
}

/// A raw CDP client that writes down every frame.
struct Recorder {
    ws: async_tungstenite::WebSocketStream<async_tungstenite::tokio::ConnectStream>,
    lines: Vec<String>,
    next: u64,
}

impl Recorder {
    /// Sends `method` and answers its result, recording everything on the way.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next += 1;
        let mut frame = json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = session {
            frame["sessionId"] = json!(s);
        }
        let text = frame.to_string();
        self.lines.push(format!("> {text}"));
        self.ws.send(text.into()).await.expect("send");
        let id = self.next;
        let reply = self.event(|v| v["id"] == id).await;
        assert!(reply["error"].is_null(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// Reads until a frame matches `wanted`: the latest recorded, or a new one.
    async fn event(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        use futures::StreamExt;
        let seen = self.lines.iter().rev().filter_map(|l| l.strip_prefix("< "));
        if let Some(v) = seen
            .filter_map(|f| serde_json::from_str(f).ok())
            .find(|v| wanted(v))
        {
            return v;
        }
        loop {
            let message = self.ws.next().await.expect("open").expect("a frame");
            let Ok(text) = message.into_text() else {
                continue;
            };
            self.lines.push(format!("< {text}"));
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                if wanted(&v) {
                    return v;
                }
            }
        }
    }
}
