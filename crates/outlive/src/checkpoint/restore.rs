//! Restoring a checkpoint into a fresh page: its cookies through `Storage.setCookies`, its
//! storage through restore documents served by `Fetch` interception (per top origin, a document
//! embedding one iframe per cross-site origin captured under it, each running the restore
//! script, `js/restore.js`, on its own part). Over an earlier restore only what changed is
//! written, in place while the page still stands on that restore's document.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, EventRequestPaused, FulfillRequestParams, HeaderEntry, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use chromiumoxide::cdp::browser_protocol::storage::{ClearCookiesParams, SetCookiesParams};
use futures::StreamExt;
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::script::{CODEC_JS, cdp_error, evaluate, evaluate_now};
use super::{Checkpoint, FrameState, Part, StorageKey, StoredCookie, is_storable_origin};
use crate::error::{Error, ErrorKind};
use crate::relay::Calls;
use tokio_util::task::AbortOnDropHandle;

/// The restore script (see its header for what it takes and answers).
const RESTORE_JS: &str = include_str!("../js/restore.js");

/// How long a restore document waits for its cross-site iframes to report.
const CHILD_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest piece of restore data one CDP message carries. Chromium's cost per message
/// grows faster than its size: 1.2 MB in one `Runtime.evaluate` took 57 ms over the DevTools
/// pipe (73 ms over the websocket), the same in 8 pieces sent at once 22 ms (18 ms); a
/// 1.2 MB restore document costs the same again in `Fetch.fulfillRequest`.
const PIECE_BYTES: usize = 256 * 1024;

/// Where handed-over restore data is assembled, piece by piece, in a restore document's main
/// world (outlive's own document: no site's script runs there).
const HANDED: &str = "globalThis[Symbol.for('outlive.restore.data')]";

/// What a top-level restore document defines when its data is handed over after it loads:
/// the restore function, waiting for the data (its child documents' reports already heard).
const RUN: &str = "globalThis[Symbol.for('outlive.restore.run')]";

impl FrameState {
    /// The restore script's input for this frame. With `prior` (what an earlier restore put
    /// in this browser for the same storage key), a part with the same content is left out
    /// (`null`) and a Web Storage area that changed is sent as the items to set and remove.
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
        Zeroizing::new(format!(
            r#"{{"local":{},"session":{},"idb":{},"children":{children},"childTimeoutMs":{}}}"#,
            local.as_str(),
            session.as_str(),
            idb.as_str(),
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
/// data to be handed over (see [`hand_over`]).
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

/// Sends `data` into the page's main world as pieces of at most [`PIECE_BYTES`], all in
/// flight at once, each stored at its index in [`HANDED`] — where `guard` (a JavaScript
/// condition) holds, so nothing lands in a page that is not a restore document. Answers
/// whether every piece landed.
async fn hand_over(page: &Page, data: &str, guard: &str) -> Result<bool, Error> {
    let mut pieces = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let mut end = rest.len().min(PIECE_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&rest[..end]);
        rest = &rest[end..];
    }
    let n = pieces.len();
    let sends = pieces.into_iter().enumerate().map(|(i, piece)| {
        let literal = Zeroizing::new(serde_json::to_string(piece).expect("strings serialise"));
        // The expression moves into the command (chromiumoxide does not zero its own copies).
        let expression = format!(
            "({guard}) ? ((({HANDED} ??= Array({n}))[{i}] = {literal}), true) : false",
            literal = literal.as_str()
        );
        evaluate_now::<bool>(page, expression, "handing restore data over")
    });
    let landed = futures::future::try_join_all(sends).await?;
    Ok(landed.into_iter().all(|l| l))
}

/// The handed-over data, taken out of [`HANDED`] (which is emptied) and parsed. A failure
/// says so without V8's message, which quotes the text around the fault (the data is secret,
/// and a quote cut inside a surrogate pair is a reply chromiumoxide cannot read).
fn take_handed() -> String {
    format!(
        "(() => {{ const d = {HANDED}.join(''); {HANDED} = undefined;\
         try {{ return JSON.parse(d); }} catch (e) {{ throw new Error('the handed-over restore data did not parse'); }} }})()"
    )
}

/// Whether the page is a restore document of `top` (an earlier restore's, with nothing else
/// loaded since), as a JavaScript condition.
fn on_restore_document(top: &str) -> String {
    let top = serde_json::to_string(top).expect("strings serialise");
    format!("location.origin === {top} && location.pathname.startsWith('/__outlive_restore/')")
}

/// What a restore document reports.
#[derive(Deserialize)]
struct RestoreReport {
    errors: Vec<String>,
    /// Time spent in the page: Web Storage, IndexedDB, waiting for child documents.
    ms: serde_json::Value,
}

impl RestoreReport {
    /// How many writes failed, each named in a debug log.
    fn failed(&self) -> u64 {
        for error in &self.errors {
            tracing::debug!(error, "a restore write failed");
        }
        self.errors.len() as u64
    }
}

/// What the in-place write answers: `false` when the page is not on a restore document.
#[derive(Deserialize)]
#[serde(untagged)]
enum InPlace {
    NotThere(#[expect(dead_code, reason = "always false; only the variant matters")] bool),
    Written(RestoreReport),
}

/// A top-level restore document to load, and its data when too big to ride inside it (handed
/// over once it has loaded).
struct Load {
    url: String,
    /// The document's origin (the top origin it restores).
    top: String,
    handed: Option<Zeroizing<String>>,
}

/// The documents of one restore, by URL.
type Documents = HashMap<String, Zeroizing<String>>;

/// What a restore writes: per top origin with anything to write, the URL to load; every
/// document by its URL; and, over an earlier restore where only one top origin's own storage
/// changed, that origin and the data to write in place.
struct Plan {
    loads: Vec<Load>,
    documents: Documents,
    in_place: Option<(String, Zeroizing<String>)>,
}

/// Plans a restore (see [`Plan`]).
fn plan(checkpoint: &Checkpoint, prior: Option<&Checkpoint>) -> Plan {
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

/// Writes `data` into the page where it stands, if that is a restore document of `top` (an
/// earlier restore's, with nothing else loaded since): one round trip, no navigation. `None`
/// when the page is elsewhere.
async fn write_in_place(page: &Page, top: &str, data: &str) -> Result<Option<u64>, Error> {
    let guard = on_restore_document(top);
    let data = if data.len() > PIECE_BYTES {
        if !hand_over(page, data, &guard).await? {
            tracing::debug!("the page is not on a restore document; loading one");
            return Ok(None);
        }
        Zeroizing::new(take_handed())
    } else {
        let literal = Zeroizing::new(serde_json::to_string(data).expect("strings serialise"));
        Zeroizing::new(format!("JSON.parse({})", literal.as_str()))
    };
    let mut expression = Zeroizing::new(format!(
        "(() => {{ if (!({guard})) return false;\n\
         {CODEC_JS}\nreturn ({RESTORE_JS})({data}); }})()",
        data = data.as_str()
    ));
    let started = Instant::now();
    // Moved, not copied (it can hold megabytes); chromiumoxide does not zero its own copies.
    let answer = evaluate(
        page,
        std::mem::take(&mut *expression),
        None,
        "writing a restore in place",
    )
    .await?;
    match answer {
        InPlace::NotThere(_) => {
            tracing::debug!("the page is not on a restore document; loading one");
            Ok(None)
        }
        InPlace::Written(report) => {
            tracing::debug!(took = ?started.elapsed(), in_page = %report.ms, "restore written in place");
            Ok(Some(report.failed()))
        }
    }
}

/// Puts cookies and every storage key's state into a fresh page before any request reaches
/// a real site: each top origin is loaded with every request intercepted (`Fetch.enable`)
/// and answered with a restore document, which embeds the cross-site origins captured under
/// it. The page is left on the last restore document; the caller navigates to the URL.
/// Answers how many writes failed in the page (each named in a debug log).
///
/// With `prior` (what was restored into this browser before, with nothing else happening in it
/// since), only what changed is written: the cookies are replaced, and only top origins whose
/// storage differs get a document.
pub(crate) async fn restore(
    page: &Page,
    calls: &Calls,
    checkpoint: &Checkpoint,
    prior: Option<&Checkpoint>,
) -> Result<u64, Error> {
    let started = Instant::now();
    replace_cookies(page, checkpoint, prior).await?;
    // Copies of the values: zeroed when restore returns, like the checkpoint itself.
    let Plan {
        loads,
        documents,
        in_place,
    } = plan(checkpoint, prior);
    if loads.is_empty() {
        return Ok(0);
    }
    if let Some((top, data)) = in_place
        && let Some(failed) = write_in_place(page, &top, &data).await?
    {
        return Ok(failed);
    }
    let planned = started.elapsed();

    // Answers every paused request; owned, so it stops when restore returns.
    let _responder = serve_documents(page, documents).await?;

    let pattern = RequestPattern::builder()
        .url_pattern("*")
        .request_stage(RequestStage::Request)
        .build();
    page.execute(fetch::EnableParams::builder().pattern(pattern).build())
        .await
        .map_err(|e| cdp_error("Fetch.enable", e))?;
    let enabled = started.elapsed();
    let result = write_all(page, calls, &loads).await;
    let written = started.elapsed();
    let disabled = page.execute(fetch::DisableParams::default()).await;
    tracing::debug!(?planned, ?enabled, ?written, done = ?started.elapsed(), "restore phases");
    let failed = result?;
    disabled.map_err(|e| cdp_error("Fetch.disable", e))?;
    Ok(failed)
}

/// Replaces the page's cookies with the checkpoint's, unless `prior` already put the same ones
/// there.
async fn replace_cookies(
    page: &Page,
    checkpoint: &Checkpoint,
    prior: Option<&Checkpoint>,
) -> Result<(), Error> {
    let cookies_known = prior.is_some_and(|p| p.cookies == checkpoint.cookies);
    if prior.is_some_and(|p| !p.cookies.is_empty()) && !cookies_known {
        page.execute(ClearCookiesParams::default())
            .await
            .map_err(|e| cdp_error("Storage.clearCookies", e))?;
    }
    if !checkpoint.cookies.is_empty() && !cookies_known {
        let cookies = checkpoint
            .cookies
            .iter()
            .map(StoredCookie::to_param)
            .collect::<Vec<_>>();
        page.execute(SetCookiesParams::new(cookies))
            .await
            .map_err(|e| cdp_error("Storage.setCookies", e))?;
    }
    Ok(())
}

/// Starts answering every request the page pauses (`Fetch.requestPaused`) with its document
/// from `documents` (an empty one for any other URL); the task stops when the handle drops.
async fn serve_documents(
    page: &Page,
    documents: Documents,
) -> Result<AbortOnDropHandle<()>, Error> {
    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| cdp_error("listening for Fetch.requestPaused", e))?;
    let responder_page = page.clone();
    Ok(AbortOnDropHandle::new(crate::quiet::spawn(async move {
        while let Some(event) = paused.next().await {
            let key = url::Url::parse(&event.request.url)
                .map(|u| format!("{}{}", u.origin().ascii_serialization(), u.path()))
                .unwrap_or_default();
            let body = documents.get(&key).map_or("", |d| d.as_str());
            let t = Instant::now();
            let encoded = Zeroizing::new(BASE64.encode(body.as_bytes()));
            let fulfil = FulfillRequestParams::builder()
                .request_id(event.request_id.clone())
                .response_code(200)
                .response_header(HeaderEntry::new("Content-Type", "text/html; charset=utf-8"))
                .response_header(HeaderEntry::new("Cache-Control", "no-store"))
                .body(encoded.to_string())
                .build();
            if let Ok(fulfil) = fulfil {
                let _ = responder_page.execute(fulfil).await;
            }
            tracing::debug!(bytes = body.len(), took = ?t.elapsed(), "restore document served");
        }
    })))
}

/// How long the browser may take to answer a restore document's navigation.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Navigates the page to `url` and returns with the browser's own answer to `Page.navigate`,
/// sent through the relay — once the response is in, before the document has loaded
/// (chromiumoxide answers a `Page.navigate` only after the `load` of the page and every
/// frame). Commands sent after it reach the new document: DevTools holds them while the
/// navigation commits. Without a relay behind `calls` (a page connected directly), through
/// chromiumoxide.
async fn navigate_answered(page: &Page, calls: &Calls, url: &str) -> Result<(), Error> {
    #[derive(Deserialize)]
    struct Reply {
        result: Option<Navigated>,
        error: Option<Refused>,
    }
    #[derive(Deserialize)]
    struct Navigated {
        #[serde(rename = "errorText")]
        error_text: Option<String>,
    }
    #[derive(Deserialize)]
    struct Refused {
        message: String,
    }
    let failed = |why: &str| {
        Error::new(
            ErrorKind::Cdp,
            format!("loading a restore document failed: {why}"),
        )
    };
    // Asked before the call: a relay that dies during it is no reason to navigate again.
    if !calls.is_relayed() {
        page.goto(NavigateParams::new(url.to_owned()))
            .await
            .map_err(|e| cdp_error("loading a restore document", e))?;
        return Ok(());
    }
    let params = serde_json::json!({ "url": url });
    let session = page.session_id().as_ref().to_owned();
    let text = calls
        .call(session, "Page.navigate", params, COMMIT_TIMEOUT)
        .await
        .ok_or_else(|| {
            failed(&format!(
                "no answer within {COMMIT_TIMEOUT:?}, or the page or the browser died meanwhile"
            ))
        })?;
    let reply: Reply = serde_json::from_str(&text)
        .map_err(|e| failed("its answer did not decode").with_source(e))?;
    match (reply.result, reply.error) {
        (_, Some(Refused { message })) => Err(failed(&message)),
        (
            Some(Navigated {
                error_text: Some(e),
            }),
            None,
        ) => Err(failed(&e)),
        (Some(Navigated { error_text: None }), None) => Ok(()),
        (None, None) => Err(failed("the browser's answer held no result")),
    }
}

/// Loads each restore document and waits for its report. A document whose data is handed over
/// gets it as soon as the browser answers its navigation, not once it has loaded: its load
/// waits for its cross-site iframes (child restore documents, each starting a renderer of its
/// own), which meanwhile write their own parts.
async fn write_all(page: &Page, calls: &Calls, loads: &[Load]) -> Result<u64, Error> {
    let mut failed = 0;
    for Load { url, top, handed } in loads {
        let started = Instant::now();
        // When the navigation answered: its response in (handed over), loaded (data inside).
        let navigated;
        let report = match handed {
            Some(data) => {
                navigate_answered(page, calls, url).await?;
                navigated = started.elapsed();
                if !hand_over(page, data, &on_restore_document(top)).await? {
                    return Err(Error::new(
                        ErrorKind::Cdp,
                        "the page was not (or no longer) on the restore document when its data was handed over",
                    ));
                }
                // The document's own script defines the restore; it may still be parsing.
                let run = format!(
                    "(async () => {{ if (document.readyState === 'loading') \
                     await new Promise((r) => addEventListener('DOMContentLoaded', r, {{ once: true }}));\
                     return window.__outlive_restored = {RUN}({}); }})()",
                    take_handed()
                );
                evaluate_now(page, run, "running a restore document").await?
            }
            None => {
                page.goto(NavigateParams::new(url.clone()))
                    .await
                    .map_err(|e| cdp_error("loading a restore document", e))?;
                navigated = started.elapsed();
                let wait = "window.__outlive_restored".to_owned();
                evaluate::<RestoreReport>(page, wait, None, "waiting for a restore document")
                    .await?
            }
        };
        tracing::debug!(?navigated, written = ?started.elapsed(), in_page = %report.ms, "restore document done");
        failed += report.failed();
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{
        chromium_page, key, local, part, read_value, relayed_page,
    };

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

    /// Over an earlier restore still in the page, what changed is written where the page
    /// stands (no navigation); a page that went elsewhere gets a restore document again.
    #[tokio::test]
    async fn a_restore_over_an_earlier_one_is_written_in_place_while_the_page_is_there() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let calls = Calls::detached();
        let app = key("https://app.example", "https://app.example");
        let state = |local: &str| {
            let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
            cp.storage.insert(
                app.clone(),
                FrameState {
                    local: Some(Arc::new(Part {
                        hash: local.to_owned(),
                        json: local.to_owned(),
                        left_out: 0,
                    })),
                    session: part(r#"[["s","1"]]"#),
                    idb: None,
                },
            );
            cp
        };
        let read = r#"JSON.stringify([location.pathname, window.__mark ?? null,
            Object.entries(localStorage).sort(), sessionStorage.getItem('s')])"#;
        let first = state(r#"[["keep","1"],["step","1"],["gone","x"]]"#);
        assert_eq!(restore(&page, &calls, &first, None).await.unwrap(), 0);
        let _: serde_json::Value = read_value(&page, "window.__mark = 'still here'".into()).await;

        let second = state(r#"[["keep","1"],["step","2"]]"#);
        assert_eq!(
            restore(&page, &calls, &second, Some(&first)).await.unwrap(),
            0
        );
        let seen: String = read_value(&page, read.into()).await;
        assert_eq!(
            seen, r#"["/__outlive_restore/1","still here",[["keep","1"],["step","2"]],"1"]"#,
            "written in place: the document (and its mark) stayed"
        );

        page.goto("about:blank").await.unwrap();
        let third = state(r#"[["keep","1"],["step","3"]]"#);
        assert_eq!(
            restore(&page, &calls, &third, Some(&second)).await.unwrap(),
            0
        );
        let seen: String = read_value(&page, read.into()).await;
        assert_eq!(
            seen, r#"["/__outlive_restore/1",null,[["keep","1"],["step","3"]],"1"]"#,
            "a restore document was loaded again"
        );
    }

    /// A cross-site frame's restore document can finish before its parent's data has been
    /// handed over and its restore started: its report still counts (before, it was lost and
    /// the restore waited out the children's timeout and counted the frame as failed).
    #[tokio::test]
    async fn a_frame_that_reports_before_its_handed_over_parent_runs_is_heard() {
        // No relay: the restore document is loaded through chromiumoxide, which answers only
        // after the load of the page and its frame — so the frame has always reported first.
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let calls = Calls::detached();
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        let big = serde_json::json!([["blob", "x".repeat(3 * PIECE_BYTES)]]).to_string();
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(&big),
        );
        cp.storage.insert(
            key("https://app.example", "https://widget.example"),
            local(r#"[["token","w"]]"#),
        );
        assert!(plan(&cp, None).loads[0].handed.is_some(), "handed over");
        // The parent's restore starts only once its data has landed; the child, its data
        // inside, reports as soon as it has loaded and written.
        assert_eq!(
            restore(&page, &calls, &cp, None).await.unwrap(),
            0,
            "no frame failed"
        );
        let seen: serde_json::Value = read_value(
            &page,
            "(async () => [localStorage.getItem('blob').length, (await window.__outlive_restored).written])()".into(),
        )
        .await;
        assert_eq!(
            seen,
            serde_json::json!([3 * PIECE_BYTES, 2]),
            "the top's item and the frame's, both counted"
        );
    }

    /// Restore data bigger than one piece is handed over in pieces once its document has
    /// loaded — characters of every UTF-8 length across the pieces' edges, text that would end
    /// a `<script>`, an IndexedDB record beside the areas — and lands whole: into a fresh page, in place over an earlier restore, and
    /// through a document again once the page has gone elsewhere.
    #[tokio::test]
    async fn restore_data_bigger_than_a_piece_is_handed_over_and_lands_whole() {
        let (_chromium, relay, _browser, _pump, page) = relayed_page().await;
        let calls = relay.calls();
        let app = key("https://app.example", "https://app.example");
        let state = |tag: &str| {
            let items = serde_json::json!([
                ["a", "é".repeat(PIECE_BYTES / 3 + 1)],
                ["b", format!("{tag}{}", "😀€x".repeat(PIECE_BYTES / 4))],
                ["c", "</script><!-- \u{2028}"],
            ]);
            let json = items.to_string();
            let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
            // Its own hash per content, so the in-place restore sees what changed.
            let mut state = FrameState {
                local: Some(Arc::new(Part {
                    hash: json.clone(),
                    json,
                    left_out: 0,
                })),
                ..FrameState::default()
            };
            state.session = part(r#"[["s","1"]]"#);
            let db = format!(
                r#"[{{"name":"db","version":1,"stores":[{{"name":"s","keyPath":null,"autoIncrement":false,"indexes":[],"records":[["k","{tag}"]]}}]}}]"#
            );
            state.idb = Some(Arc::new(Part {
                hash: db.clone(),
                json: db,
                left_out: 0,
            }));
            cp.storage.insert(app.clone(), state);
            (cp, items)
        };
        let read = r#"(async () => JSON.stringify([location.pathname, window.__mark ?? null,
            [['a', localStorage.getItem('a')], ['b', localStorage.getItem('b')], ['c', localStorage.getItem('c')]],
            sessionStorage.getItem('s'), globalThis[Symbol.for('outlive.restore.data')] ?? null,
            await new Promise((resolve) => { const r = indexedDB.open('db');
              r.onsuccess = () => { const g = r.result.transaction('s').objectStore('s').get('k');
                g.onsuccess = () => { r.result.close(); resolve(g.result); }; }; })]))()"#;
        // Compared as values; a mismatch names where, not the megabyte.
        let check = |seen: String, items: &serde_json::Value, mark: Option<&str>, what: &str| {
            let seen: serde_json::Value = serde_json::from_str(&seen).unwrap();
            let tag = &items[1][1].as_str().unwrap()[..1];
            let expected = serde_json::json!(["/__outlive_restore/1", mark, items, "1", null, tag]);
            let (a, b) = (seen.to_string(), expected.to_string());
            let at = a.bytes().zip(b.bytes()).position(|(x, y)| x != y);
            assert!(
                a == b,
                "{what}: differs at byte {at:?} (lengths {} / {})",
                a.len(),
                b.len()
            );
        };

        let (first, items) = state("1");
        assert!(
            plan(&first, None).loads[0].handed.is_some(),
            "too big to ride inside"
        );
        assert_eq!(restore(&page, &calls, &first, None).await.unwrap(), 0);
        check(read_value(&page, read.into()).await, &items, None, "fresh");

        let _: serde_json::Value = read_value(&page, "window.__mark = 'here'".into()).await;
        let (second, items) = state("2");
        assert_eq!(
            restore(&page, &calls, &second, Some(&first)).await.unwrap(),
            0
        );
        check(
            read_value(&page, read.into()).await,
            &items,
            Some("here"),
            "in place",
        );

        page.goto("about:blank").await.unwrap();
        let (third, items) = state("3");
        assert_eq!(
            restore(&page, &calls, &third, Some(&second)).await.unwrap(),
            0
        );
        check(
            read_value(&page, read.into()).await,
            &items,
            None,
            "through a document again",
        );
    }
}
