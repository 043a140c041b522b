//! The page as the user left it: typed form fields and scroll positions (`js/page_state.js`).
//! The script lives in chromiumoxide's utility world, an isolated world the page cannot see,
//! in every frame. A capture reads it beside the storage read, in the same round trip. An
//! unchanged page answers its last hash: no DOM walk, nothing but the hash on the wire. After
//! the resume navigation, [`apply`] puts it back before the task or client gets the page.
//! Field values are user data: held as a [`Part`] (zeroed on drop, sealed when durable).

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::CreateIsolatedWorldParams;
use chromiumoxide::handler::frame::UTILITY_WORLD_NAME;
use serde::Deserialize;
use zeroize::Zeroizing;

use super::cache::PartCache;
use super::model::Part;
use super::script::{cdp_error, evaluate_params};
use crate::error::{Error, ErrorKind};

/// The page script (see its header).
const PAGE_JS: &str = include_str!("../js/page_state.js");

/// Where a document keeps the installed script, in the utility world.
const INSTALLED: &str = "globalThis[Symbol.for('outlive.page')]";

/// The most fields one page's state holds; more are left out and counted.
pub(crate) const MAX_FIELDS: usize = 2_000;

/// The most value bytes (JSON text) one page's state holds; fields past it are left out and
/// counted. A huge textarea is one such field.
pub(crate) const MAX_BYTES: usize = 256 << 10;

/// How long putting the state back may retry while the page lays itself out.
const APPLY_WITHIN: Duration = Duration::from_secs(1);

/// What the page's documents run as they start, in the utility world of every frame: the
/// watcher installed, so the first read on a document is a call, not the script.
pub(crate) fn on_new_document() -> String {
    format!("{PAGE_JS};")
}

/// The caps a read keeps to, as the script takes them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caps {
    pub(super) fields: usize,
    pub(super) bytes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            fields: MAX_FIELDS,
            bytes: MAX_BYTES,
        }
    }
}

/// A read as the script sends it: without `data` when its hash was among the known ones.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRead {
    hash: String,
    data: Option<String>,
    #[serde(default)]
    left_out: u64,
    /// The back/forward list's sign (see `back_forward`); `None` where the page has none.
    #[serde(default)]
    nav: Option<String>,
}

impl Drop for RawRead {
    fn drop(&mut self) {
        if let Some(d) = &mut self.data {
            zeroize::Zeroize::zeroize(d);
        }
    }
}

/// What putting a page's state back did.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Applied {
    /// Fields set.
    pub(crate) restored: u64,
    /// Fields the page had filled by itself since it loaded: left as they were.
    pub(crate) left_alone: u64,
    /// Fields and scroll positions with no match in the page (within the bound).
    pub(crate) unmatched: u64,
}

/// What a read answers: the page state, and the back/forward list's sign.
#[derive(Default)]
pub(super) struct Read {
    /// `None` where it could not be read.
    pub(super) state: Option<Arc<Part>>,
    /// Moves with every navigation of the tab (see `back_forward`); `None` where unknown.
    pub(super) nav: Option<String>,
}

/// Reads the page state of `page`'s top frame and its same-origin frames; `None` where it
/// could not be read (logged at debug, never the values). The part comes from `cache` when the
/// page answered only its hash.
#[cfg(test)]
pub(super) async fn read(page: &Page, cache: &PartCache, caps: Caps) -> Option<Arc<Part>> {
    read_with_sign(page, cache, caps).await.state
}

/// Reads the page state as `read` does, with the back/forward list's sign the page answered
/// beside it.
pub(super) async fn read_with_sign(page: &Page, cache: &PartCache, caps: Caps) -> Read {
    let known = serde_json::to_string(&cache.known()).expect("strings serialise");
    let caps = serde_json::json!({ "maxFields": caps.fields, "maxBytes": caps.bytes });
    let call = format!("read({known}, {caps})");
    let raw: RawRead = match call_installed(page, &call).await {
        Ok(raw) => raw,
        Err(e) => {
            tracing::debug!(error = %e, "the page state could not be read");
            return Read::default();
        }
    };
    let state = match raw.data.as_ref() {
        Some(json) => Some(Arc::new(Part {
            hash: raw.hash.clone(),
            json: json.clone(),
            left_out: raw.left_out,
        })),
        None => {
            let held = cache.get(&raw.hash);
            if held.is_none() {
                tracing::debug!(
                    "the page reported its state unchanged; outlive no longer holds it"
                );
            }
            held
        }
    };
    Read {
        state,
        nav: raw.nav.clone(),
    }
}

/// Puts `state` back into `page`'s top frame and its same-origin frames, retrying while the
/// page lays itself out, within [`APPLY_WITHIN`]. A failed call counts as nothing restored.
pub(crate) async fn apply(page: &Page, state: &Part) -> Applied {
    let data = Zeroizing::new(serde_json::to_string(&state.json).expect("a string serialises"));
    let opts = serde_json::json!({ "withinMs": APPLY_WITHIN.as_millis() as u64 });
    let call = Zeroizing::new(format!("apply({}, {opts})", data.as_str()));
    // The bound is the script's; this one only guards against a page that never answers.
    let applied = tokio::time::timeout(APPLY_WITHIN * 3, call_installed(page, &call)).await;
    match applied {
        Ok(Ok(applied)) => applied,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "the page state could not be put back");
            Applied::default()
        }
        Err(_) => {
            tracing::debug!("putting the page state back did not end in time");
            Applied::default()
        }
    }
}

/// The whole script applying `state`, as one expression that answers a promise: for a
/// caller with a connection of its own (the front, after a swap's load). User data: zeroed.
pub(crate) fn apply_expression(state: &Part) -> Zeroizing<String> {
    let data = Zeroizing::new(serde_json::to_string(&state.json).expect("a string serialises"));
    let opts = serde_json::json!({ "withinMs": APPLY_WITHIN.as_millis() as u64 });
    Zeroizing::new(format!("({PAGE_JS}).apply({}, {opts})", data.as_str()))
}

/// Calls `call` (`read(…)`, `apply(…)`) on the installed script in the top frame's utility
/// world: where it is installed already (one round trip), else with the whole script.
async fn call_installed<T: serde::de::DeserializeOwned>(
    page: &Page,
    call: &str,
) -> Result<T, Error> {
    let installed = format!("({INSTALLED}?.{call} ?? 0)");
    if let Ok(Some(context)) = page.secondary_execution_context().await {
        let context = *context.inner();
        match evaluate_in(page, &installed, context).await {
            Ok(Answer::Value(v)) => return decode(v),
            Ok(Answer::NotInstalled) => {
                let whole = format!("({PAGE_JS}).{call}");
                if let Answer::Value(v) = evaluate_in(page, &whole, context).await? {
                    return decode(v);
                }
            }
            // A context of the document before a navigation: make the world again below.
            Err(e) => tracing::trace!(error = %e, "the utility world's context is gone"),
        }
    }
    let context = utility_world(page).await?;
    match evaluate_in(page, &format!("({PAGE_JS}).{call}"), context).await? {
        Answer::Value(v) => decode(v),
        Answer::NotInstalled => Err(Error::new(
            ErrorKind::Cdp,
            "the page state script answered nothing",
        )),
    }
}

/// The utility world's context in the page's top frame, made if need be.
async fn utility_world(page: &Page) -> Result<i64, Error> {
    let frame = page
        .mainframe()
        .await
        .map_err(|e| cdp_error("finding the page's top frame", e))?
        .ok_or_else(|| Error::new(ErrorKind::Cdp, "the page has no top frame"))?;
    let world = CreateIsolatedWorldParams::builder()
        .frame_id(frame)
        .world_name(UTILITY_WORLD_NAME)
        .grant_univeral_access(false)
        .build()
        .map_err(|e| Error::new(ErrorKind::Cdp, format!("building a world: {e}")))?;
    let made = page
        .execute(world)
        .await
        .map_err(|e| cdp_error("Page.createIsolatedWorld", e))?;
    Ok(*made.result.execution_context_id.inner())
}

/// What an evaluation answered.
enum Answer {
    Value(serde_json::Value),
    /// 0: the script is not installed in this world.
    NotInstalled,
}

/// Evaluates `expression` in `context`; the page throwing is an error that quotes nothing of
/// the page (V8's message may quote field values).
async fn evaluate_in(page: &Page, expression: &str, context: i64) -> Result<Answer, Error> {
    let params = evaluate_params(expression.to_owned(), Some(context))?;
    let reply = page
        .execute(params)
        .await
        .map_err(|e| cdp_error("Runtime.evaluate", e))?
        .result;
    if reply.exception_details.is_some() {
        return Err(Error::new(
            ErrorKind::Cdp,
            "the page state script threw; the page is left as it is",
        ));
    }
    let value = reply.result.value.unwrap_or_default();
    if value == serde_json::json!(0) {
        return Ok(Answer::NotInstalled);
    }
    Ok(Answer::Value(value))
}

fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| {
        Error::new(
            ErrorKind::Cdp,
            "decoding the page state script's answer failed",
        )
        .with_source(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::model::Checkpoint;
    use crate::checkpoint::test_support::{chromium_page, read_value};
    use tokio::time::Instant;

    /// A page of `body`, as a data URL.
    fn data_url(body: &str) -> String {
        format!("data:text/html,{}", urlencoding(body))
    }

    fn urlencoding(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// A checkpoint holding `part` as its page state, for the cache.
    fn holding(part: &Arc<Part>) -> Checkpoint {
        let mut cp = Checkpoint::at_url("about:blank", Instant::now());
        cp.page = Some(part.clone());
        cp
    }

    /// Fields over the count cap, and a value over the byte cap, are left out and counted;
    /// what fits is read.
    #[tokio::test]
    async fn fields_over_the_caps_are_counted_left_out() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let inputs = (0..5)
            .map(|i| format!("<input name=f{i}>"))
            .collect::<String>();
        page.goto(data_url(&format!("{inputs}<textarea name=big></textarea>")))
            .await
            .unwrap();
        let fill = "(document.querySelectorAll('input').forEach((e, i) => { e.value = 'v' + i; }),
            document.querySelector('textarea').value = 'x'.repeat(10000), 1)";
        let _: i64 = read_value(&page, fill.into()).await;
        let cache = PartCache::default();
        let caps = Caps {
            fields: 3,
            bytes: MAX_BYTES,
        };
        let part = read(&page, &cache, caps).await.expect("read");
        assert_eq!(
            part.left_out, 3,
            "two inputs and the textarea over 3 fields"
        );
        assert!(part.json.contains("v2") && !part.json.contains("v3"));
        let caps = Caps {
            fields: MAX_FIELDS,
            bytes: 1000,
        };
        let part = read(&page, &cache, caps).await.expect("read");
        assert_eq!(part.left_out, 1, "the textarea over 1000 bytes");
        assert!(part.json.contains("v4") && !part.json.contains("xxx"));
    }

    /// Put back into a page whose form changed: the field still there is set, the one gone and
    /// a scroll position with no element are skipped and counted, within the bound.
    #[tokio::test]
    async fn a_changed_form_restores_what_matches_and_counts_the_rest() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let tall =
            "<div id=box style='height:50px;overflow:auto'><div style='height:900px'></div></div>";
        page.goto(data_url(&format!("<input name=a><input name=b>{tall}")))
            .await
            .unwrap();
        let fill = "(document.querySelector('[name=a]').value = 'kept',
            document.querySelector('[name=b]').value = 'gone',
            document.getElementById('box').scrollTop = 300, 1)";
        let _: i64 = read_value(&page, fill.into()).await;
        let part = read(&page, &PartCache::default(), Caps::default())
            .await
            .expect("read");
        assert!(part.json.contains("kept") && part.json.contains("#box"));

        page.goto(data_url("<input name=a>")).await.unwrap();
        let started = Instant::now();
        let applied = apply(&page, &part).await;
        assert_eq!(
            applied,
            Applied {
                restored: 1,
                left_alone: 0,
                unmatched: 2
            }
        );
        assert!(started.elapsed() < APPLY_WITHIN * 2, "bounded");
        let a: String = read_value(&page, "document.querySelector('[name=a]').value".into()).await;
        assert_eq!(a, "kept");
    }

    /// An unchanged page answers its last read's hash without walking the DOM (a value set
    /// by script, with no event, is not seen); an `input` event makes the next read walk it.
    /// A part outlive holds crosses the wire as its hash.
    #[tokio::test]
    async fn an_unchanged_page_answers_its_last_hash() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        page.goto(data_url("<input name=a><input name=b>"))
            .await
            .unwrap();
        let set = |value: &str, event: bool| {
            let dispatch = if event {
                "e.dispatchEvent(new Event('input', { bubbles: true }));"
            } else {
                ""
            };
            format!(
                "(() => {{ const e = document.querySelector('[name=a]'); e.value = '{value}'; {dispatch} return 1; }})()"
            )
        };
        let long = "y".repeat(600);
        let _: i64 = read_value(&page, set(&long, true)).await;
        let cache = PartCache::default();
        let first = read(&page, &cache, Caps::default()).await.expect("read");
        cache.remember(&holding(&first));
        let _: i64 = read_value(&page, set("quiet", false)).await;
        let second = read(&page, &cache, Caps::default()).await.expect("read");
        assert!(Arc::ptr_eq(&first, &second), "the held part, by its hash");
        let _: i64 = read_value(&page, set("loud", true)).await;
        let third = read(&page, &cache, Caps::default()).await.expect("read");
        assert!(third.json.contains("loud"));
    }
}
