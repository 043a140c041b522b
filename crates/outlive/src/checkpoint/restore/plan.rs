//! What a restore writes where: from a checkpoint (and what an earlier restore wrote), the
//! restore documents' contents by URL and the data each top origin gets. No browser involved.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use zeroize::Zeroizing;

use super::script::{PIECE_BYTES, RESTORE_JS, RUN};
use crate::checkpoint::model::{Checkpoint, FrameState, Part, StorageKey, is_storable_origin};
use crate::checkpoint::script::CODEC_JS;

/// How long a restore document waits for its cross-site iframes to report.
const CHILD_TIMEOUT: Duration = Duration::from_secs(5);

impl FrameState {
    /// The restore script's input for this frame. With `prior` (what an earlier restore put
    /// in this browser for the same storage key), a part with the same content is left out
    /// (`null`). A Web Storage area that changed is sent as the items to set and remove.
    fn restore_data(&self, children: usize, prior: Option<&FrameState>) -> Zeroizing<String> {
        fn same(a: &Option<Arc<Part>>, b: &Option<Arc<Part>>) -> bool {
            matches!((a, b), (Some(a), Some(b)) if a.hash == b.hash)
        }
        let part = |now: &Option<Arc<Part>>, before: Option<&Option<Arc<Part>>>, area: bool| match (
            now, before,
        ) {
            (_, Some(b)) if same(now, b) => Zeroizing::new("null".to_owned()),
            (Some(n), Some(Some(b))) if area => {
                area_delta(&b.json, &n.json).unwrap_or_else(|| Zeroizing::new(n.json.clone()))
            }
            (Some(n), _) => Zeroizing::new(n.json.clone()),
            (None, _) => Zeroizing::new("null".to_owned()),
        };
        let local = part(&self.local, prior.map(|p| &p.local), true);
        let session = part(&self.session, prior.map(|p| &p.session), true);
        let idb = part(&self.idb, prior.map(|p| &p.idb), false);
        let caches = part(&self.caches, prior.map(|p| &p.caches), false);
        let files = part(&self.files, prior.map(|p| &p.files), false);
        Zeroizing::new(format!(
            r#"{{"local":{},"session":{},"idb":{},"caches":{},"files":{},"children":{children},"childTimeoutMs":{}}}"#,
            local.as_str(),
            session.as_str(),
            idb.as_str(),
            caches.as_str(),
            files.as_str(),
            CHILD_TIMEOUT.as_millis(),
        ))
    }
}

/// What turns a Web Storage area holding `before` (`[[key, value], …]`, as the capture
/// script serialises it) into `after`: `{"set": [[key, value], …], "remove": [key, …]}`,
/// built from slices of the two texts (no decoded copy of a value is made). `None` if either
/// does not parse.
fn area_delta(before: &str, after: &str) -> Option<Zeroizing<String>> {
    use serde_json::value::RawValue;
    type Items<'a> = Vec<(&'a RawValue, &'a RawValue)>;
    let before: Items = serde_json::from_str(before).ok()?;
    let after: Items = serde_json::from_str(after).ok()?;
    // Keys compare by their JSON text: the same serialiser wrote both.
    let old: HashMap<&str, &str> = before.iter().map(|(k, v)| (k.get(), v.get())).collect();
    let new: std::collections::HashSet<&str> = after.iter().map(|(k, _)| k.get()).collect();
    let mut out = Zeroizing::new(String::from(r#"{"set":["#));
    let mut first = true;
    for (k, v) in &after {
        if old.get(k.get()) != Some(&v.get()) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push('[');
            out.push_str(k.get());
            out.push(',');
            out.push_str(v.get());
            out.push(']');
        }
    }
    out.push_str(r#"],"remove":["#);
    first = true;
    for (k, _) in &before {
        if !new.contains(k.get()) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k.get());
        }
    }
    out.push_str("]}");
    Some(out)
}

/// A restore document: the codec and the restore script, then one iframe per child restore
/// document. With `data` the script runs on it at once; without, it waits as [`RUN`] for the
/// data to be handed over (see `write::hand_over`).
fn restore_document(data: Option<&str>, children: &[String]) -> Zeroizing<String> {
    let frames: String = children
        .iter()
        .map(|src| format!("<iframe src=\"{src}\"></iframe>"))
        .collect();
    let run = match data {
        Some(data) => {
            // The data goes in as a string for `JSON.parse`, never as an object literal
            // (where a `"__proto__"` key would set a prototype instead of a property).
            let literal = Zeroizing::new(serde_json::to_string(data).expect("strings serialise"));
            // Keep it inside the <script> element whatever it contains: `<\/` and `<\!` read
            // as `</` and `<!` in a string literal.
            let step = Zeroizing::new(literal.replace("</", "<\\/"));
            let data = Zeroizing::new(step.replace("<!--", "<\\!--"));
            Zeroizing::new(format!(
                "window.__outlive_restored=({RESTORE_JS})(JSON.parse({data}));",
                data = data.as_str()
            ))
        }
        // Evaluated now, so its children's reports are heard while the data is handed over.
        None => Zeroizing::new(format!("{RUN}={RESTORE_JS};")),
    };
    Zeroizing::new(format!(
        "<!doctype html><meta charset=\"utf-8\"><title>outlive restore</title><link rel=\"icon\" href=\"data:,\">\
         <script>(function(){{\n{CODEC_JS}\n{run}\n}})()</script>\
         <body>{frames}</body>",
        run = run.as_str()
    ))
}

/// A top-level restore document to load, and its data when too big to ride inside it (handed
/// over once it has loaded).
pub(super) struct Load {
    pub(super) url: String,
    /// The document's origin (the top origin it restores).
    pub(super) top: String,
    pub(super) handed: Option<Zeroizing<String>>,
}

/// The documents of one restore, by URL.
pub(super) type Documents = HashMap<String, Zeroizing<String>>;

/// What a restore writes: per top origin with anything to write, the URL to load; every
/// document by its URL. Over an earlier restore where only one top origin's own storage
/// changed: that origin and the data to write in place.
pub(super) struct Plan {
    pub(super) loads: Vec<Load>,
    pub(super) documents: Documents,
    pub(super) in_place: Option<(String, Zeroizing<String>)>,
}

/// Plans a restore (see [`Plan`]).
pub(super) fn plan(checkpoint: &Checkpoint, prior: Option<&Checkpoint>) -> Plan {
    let mut tops: BTreeMap<&str, (Option<&FrameState>, Vec<&StorageKey>)> = BTreeMap::new();
    // A top origin whose every storage key holds what `prior` already put in the page needs
    // no document.
    let mut changed = std::collections::BTreeSet::new();
    let mut frames_changed = false;
    for (key, state) in &checkpoint.storage {
        if state.is_empty() || !is_storable_origin(&key.top) || !is_storable_origin(&key.origin) {
            continue;
        }
        let known = prior
            .and_then(|p| p.storage.get(key))
            .is_some_and(|before| before.same_as(state));
        if !known {
            changed.insert(key.top.as_str());
            if !key.is_first_party() {
                frames_changed = true;
            }
        }
        let entry = tops.entry(key.top.as_str()).or_default();
        if key.is_first_party() {
            entry.0 = Some(state);
        } else {
            entry.1.push(key);
        }
    }
    let mut documents = Documents::new();
    let mut loads = Vec::new();
    let mut in_place = None;
    let mut n = 0;
    let mut url_of = |origin: &str| {
        n += 1;
        format!("{origin}/__outlive_restore/{n}")
    };
    for (top, (own, children)) in tops {
        if !changed.contains(top) {
            continue;
        }
        let mut child_urls = Vec::new();
        for key in children {
            let url = url_of(&key.origin);
            let before = prior.and_then(|p| p.storage.get(key));
            let data = checkpoint.storage[key].restore_data(0, before);
            documents.insert(url.clone(), restore_document(Some(&data), &[]));
            child_urls.push(url);
        }
        let before = prior.and_then(|p| p.storage.get(&StorageKey::first_party(top)));
        let own = own.cloned().unwrap_or_default();
        if prior.is_some() && !frames_changed && changed.len() == 1 {
            in_place = Some((top.to_owned(), own.restore_data(0, before)));
        }
        let data = own.restore_data(child_urls.len(), before);
        let url = url_of(top);
        let (document, handed) = if data.len() > PIECE_BYTES {
            (restore_document(None, &child_urls), Some(data))
        } else {
            (restore_document(Some(&data), &child_urls), None)
        };
        documents.insert(url.clone(), document);
        loads.push(Load {
            url,
            top: top.to_owned(),
            handed,
        });
    }
    Plan {
        loads,
        documents,
        in_place,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{key, local, part};
    use tokio::time::Instant;

    #[test]
    fn restore_document_cannot_be_broken_out_of() {
        let data =
            local(r#"[["k","</script><script>alert(1)</script><!--"]]"#).restore_data(0, None);
        let doc = restore_document(Some(&data), &[]);
        assert_eq!(doc.matches("</script>").count(), 1, "{}", doc.as_str());
        assert!(!doc.contains("<!--"), "{}", doc.as_str());
    }

    #[test]
    fn a_cross_site_frame_is_restored_inside_its_top_origin() {
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["a","1"]]"#),
        );
        cp.storage.insert(
            key("https://app.example", "https://widget.example"),
            local(r#"[["w","2"]]"#),
        );
        cp.storage.insert(
            key("https://other.example", "https://other.example"),
            local("[]"),
        );
        let Plan {
            loads,
            documents,
            in_place,
        } = plan(&cp, None);
        assert!(
            in_place.is_none(),
            "a fresh page is not on a restore document"
        );
        let urls: Vec<&str> = loads.iter().map(|l| l.url.as_str()).collect();
        assert_eq!(urls.len(), 1, "empty storage is not loaded: {urls:?}");
        assert!(
            loads[0]
                .url
                .starts_with("https://app.example/__outlive_restore/")
        );
        let top = &documents[&loads[0].url];
        let child = documents
            .keys()
            .find(|u| u.starts_with("https://widget.example/"))
            .expect("a document for the widget");
        assert!(top.contains(&format!("<iframe src=\"{child}\">")));
        assert!(top.contains(r#"\"children\":1"#));
        assert!(documents[child].contains(r#"[[\"w\",\"2\"]]"#));
    }

    #[test]
    fn over_an_earlier_restore_only_what_changed_is_written() {
        let idb = part(r#"[{"name":"db","version":1,"stores":[]}]"#);
        let app = key("https://app.example", "https://app.example");
        let mut prior = Checkpoint::at_url("https://app.example/", Instant::now());
        prior.storage.insert(
            app.clone(),
            FrameState {
                local: part(r#"[["big","xxxx"],["step","1"],["gone","x"]]"#),
                session: part(r#"[["s","1"]]"#),
                idb: idb.clone(),
                ..FrameState::default()
            },
        );
        let mut now = Checkpoint::at_url("https://app.example/", Instant::now());
        now.storage.insert(
            app.clone(),
            FrameState {
                // Same length, so the test's hash differs only by content: give it its own.
                local: Some(Arc::new(Part {
                    hash: "changed".into(),
                    json: r#"[["big","xxxx"],["step","2"],["new","\"q\""]]"#.into(),
                    left_out: 0,
                })),
                session: part(r#"[["s","1"]]"#),
                idb,
                ..FrameState::default()
            },
        );
        let Plan {
            loads,
            documents,
            in_place,
        } = plan(&now, Some(&prior));
        assert_eq!(loads.len(), 1);
        let (top, data) = in_place.expect("only the top origin's own storage changed");
        assert_eq!(top, "https://app.example");
        assert!(
            data.contains(r#""local":{"set":[["step","2"],["new","\"q\""]],"remove":["gone"]}"#),
            "{}",
            data.as_str()
        );
        let doc = documents[&loads[0].url].as_str();
        assert!(
            doc.contains(r#"\"local\":{\"set\":[[\"step\",\"2\"],[\"new\",\"\\\"q\\\"\"]],\"remove\":[\"gone\"]}"#),
            "{doc}"
        );
        assert!(doc.contains(r#"\"session\":null,\"idb\":null"#), "{doc}");
        assert!(
            !doc.contains("xxxx"),
            "the unchanged item is not sent again"
        );
        assert!(
            plan(&prior, Some(&prior)).loads.is_empty(),
            "nothing changed, nothing loaded"
        );
        // A cross-site frame's storage changed: its document must be loaded.
        let widget = key("https://app.example", "https://widget.example");
        let mut framed = Checkpoint::at_url("https://app.example/", Instant::now());
        framed.storage = prior.storage.clone();
        framed.storage.insert(widget, local(r#"[["w","2"]]"#));
        let Plan {
            loads, in_place, ..
        } = plan(&framed, Some(&prior));
        assert_eq!(loads.len(), 1);
        assert!(
            in_place.is_none(),
            "a frame's change goes through a document"
        );
    }
}
