//! A tab's back/forward list: its entries' URLs and titles and where it stood. Read with
//! `Page.getNavigationHistory`, only when the sign the page state read answers has moved (see
//! `js/page_state.js`): an unchanged list costs nothing beyond that read. CDP cannot write the
//! list, so [`rebuild`] navigates a fresh page through stub documents served by `Fetch`
//! interception, one per entry, ending on the current entry's stub; the ordinary resume load
//! then replaces that stub with the real page and keeps the entries after it. The stubs are
//! `no-store`, so going Back later loads the real page. URLs and titles are user data: held
//! as a [`Part`] (zeroed on drop, sealed when durable), never logged. See `docs/survives.md`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, EventRequestPaused, FulfillRequestParams, HeaderEntry, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::ResourceType;
use chromiumoxide::cdp::browser_protocol::page::{
    EventLoadEventFired, EventNavigatedWithinDocument, GetNavigationHistoryParams,
    NavigateParams, NavigateToHistoryEntryParams, ReloadParams, ResetNavigationHistoryParams,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use zeroize::{Zeroize, Zeroizing};

use super::cache::PartCache;
use super::model::Part;
use super::script::cdp_error;
use crate::error::{Error, ErrorKind};

/// The most entries one tab's list holds: the current one and those before it first, then
/// those after it. The rest are left out and counted. Each costs a stub load on restore.
pub(crate) const MAX_ENTRIES: usize = 25;

/// How long rebuilding one tab's list may take; past it, the tab keeps only its current page.
pub(crate) const REBUILD_WITHIN: Duration = Duration::from_secs(10);

/// The list as a checkpoint holds it (JSON in a [`Part`]).
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct List {
    /// Each entry's URL and title, oldest first.
    pub(super) entries: Vec<(String, String)>,
    /// Where the tab stood.
    pub(super) current: usize,
}

impl Drop for List {
    fn drop(&mut self) {
        for (url, title) in &mut self.entries {
            url.zeroize();
            title.zeroize();
        }
    }
}

/// Whether an entry of this URL can be rebuilt: web pages (as stubs) and `about:blank` (as
/// it is). Not `data:`, `blob:`, `file:`, `chrome:` and the like: a stub cannot stand for
/// them, and loading them again could run what they hold.
fn rebuildable(url: &str) -> bool {
    is_web(url) || url == "about:blank"
}

fn is_web(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

impl List {
    /// The list from `entries` (URL, title) and the current index, within `cap` entries.
    /// Entries that cannot be rebuilt, and those over the cap, are left out (the count).
    /// A tab whose current page is not a web page keeps no list: its page is not loaded again.
    pub(super) fn of(entries: Vec<(String, String)>, current: usize, cap: usize) -> (List, u64) {
        let total = entries.len() as u64;
        let web_current = entries.get(current).is_some_and(|(url, _)| is_web(url));
        if !web_current || cap == 0 {
            return (List::default(), total.saturating_sub(1));
        }
        let mut kept = Vec::with_capacity(entries.len());
        let mut at = 0;
        for (i, entry) in entries.into_iter().enumerate() {
            if i == current {
                at = kept.len();
            }
            if rebuildable(&entry.0) {
                kept.push(entry);
            }
        }
        // The window of `cap` entries holding the current one, as far back as it goes.
        let start = (at + 1).saturating_sub(cap);
        let end = kept.len().min(start + cap);
        let entries: Vec<_> = kept.drain(start..end).collect();
        let list = List {
            current: at - start,
            entries,
        };
        let left_out = total - list.entries.len() as u64;
        (list, left_out)
    }

    fn to_part(&self, hash: String, left_out: u64) -> Arc<Part> {
        Arc::new(Part {
            hash,
            json: serde_json::to_string(self).expect("a list serialises"),
            left_out,
        })
    }
}

/// Reads `page`'s list, or takes the one `cache` holds under `sign` (the page's sign did not
/// move since the last capture): no round trip then. `None` where it could not be read.
pub(super) async fn read(
    page: &Page,
    cache: &PartCache,
    sign: Option<&str>,
    cap: usize,
) -> Option<Arc<Part>> {
    let hash = format!("bf:{}", sign.unwrap_or("unsigned"));
    if sign.is_some()
        && let Some(held) = cache.get(&hash)
    {
        return Some(held);
    }
    let history = match page.execute(GetNavigationHistoryParams::default()).await {
        Ok(h) => h.result,
        Err(e) => {
            tracing::debug!(error = %e, "the back/forward list could not be read");
            return None;
        }
    };
    let current = usize::try_from(history.current_index).unwrap_or(0);
    let entries = history
        .entries
        .into_iter()
        .map(|e| (e.url, e.title))
        .collect();
    let (list, left_out) = List::of(entries, current, cap);
    Some(list.to_part(hash, left_out))
}

/// Rebuilds the list `part` holds in `page` (see the module doc), within [`REBUILD_WITHIN`].
/// Leaves the page on the current entry's stub, for the resume load to replace (or, where
/// the current URL has a fragment, on the real page: a load to it would stay in the stub).
/// Answers the entries not rebuilt: on a failure, all but the current one, and the page's
/// list is cut to the entry it stands on. A list whose current entry is not `url` (the page
/// moved between the two reads) is not rebuilt.
pub(crate) async fn rebuild(page: &Page, part: &Part, url: &str) -> u64 {
    let Ok(list) = serde_json::from_str::<List>(&part.json) else {
        tracing::debug!("a held back/forward list did not decode");
        return 0;
    };
    if list.entries.len() < 2 {
        return 0;
    }
    let lost = list.entries.len() as u64 - 1;
    if list.entries[list.current].0 != url {
        tracing::debug!("the back/forward list was read on another page than the URL; not rebuilt");
        return lost;
    }
    let rebuilt = tokio::time::timeout(REBUILD_WITHIN, rebuild_list(page, &list)).await;
    let failed = match rebuilt {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => Error::new(
            ErrorKind::Cdp,
            format!("rebuilding the back/forward list took over {REBUILD_WITHIN:?}"),
        ),
    };
    tracing::debug!(error = %failed, "the back/forward list was not rebuilt; the tab keeps only its current page");
    let _ = page.execute(fetch::DisableParams::default()).await;
    let _ = page.execute(ResetNavigationHistoryParams::default()).await;
    lost
}

/// The steps of [`rebuild`], with interception on while stubs are loaded.
async fn rebuild_list(page: &Page, list: &List) -> Result<(), Error> {
    let (stub, stubs) = watch::channel(Zeroizing::new(String::new()));
    let _responder = serve_stubs(page, stubs).await?;
    let pattern = RequestPattern::builder()
        .url_pattern("*")
        .resource_type(ResourceType::Document)
        .request_stage(RequestStage::Request)
        .build();
    page.execute(fetch::EnableParams::builder().pattern(pattern).build())
        .await
        .map_err(|e| cdp_error("Fetch.enable", e))?;
    let walked = walk(page, list, &stub).await;
    let disabled = page.execute(fetch::DisableParams::default()).await;
    walked?;
    disabled.map_err(|e| cdp_error("Fetch.disable", e))?;
    let (url, _) = &list.entries[list.current];
    if url.contains('#') {
        // A load to a URL with a fragment would stay in the stub's document: load it here.
        let reload = page.execute(ReloadParams::default());
        until_loaded(page, reload).await?;
    }
    Ok(())
}

/// Navigates through every entry in order, each on a stub titled as its entry was; then
/// back to the current one. The page's earlier entries (restore documents) are dropped.
async fn walk(page: &Page, list: &List, stub: &watch::Sender<Zeroizing<String>>) -> Result<(), Error> {
    let mut previous: Option<&str> = None;
    for (i, (url, title)) in list.entries.iter().enumerate() {
        stub.send_replace(stub_document(title));
        if previous == Some(url.as_str()) {
            // A load of the URL the page is on would replace its entry: a pushed one stands
            // for it, in the same stub.
            let push = format!(
                "history.pushState(null, '', location.href); document.title = {}; 1",
                serde_json::to_string(title).expect("strings serialise")
            );
            evaluate_quietly(page, push).await?;
        } else {
            page.goto(NavigateParams::new(url.clone()))
                .await
                .map_err(|e| cdp_error("loading a back/forward stub", e))?;
            if previous.is_some_and(|p| same_document(p, url)) {
                // A fragment step stays in the stub: its entry takes the title now.
                let name = format!(
                    "document.title = {}; 1",
                    serde_json::to_string(title).expect("strings serialise")
                );
                evaluate_quietly(page, name).await?;
            }
        }
        if i == 0 {
            page.execute(ResetNavigationHistoryParams::default())
                .await
                .map_err(|e| cdp_error("Page.resetNavigationHistory", e))?;
        }
        previous = Some(url);
    }
    if list.current + 1 == list.entries.len() {
        return Ok(());
    }
    let history = page
        .execute(GetNavigationHistoryParams::default())
        .await
        .map_err(|e| cdp_error("Page.getNavigationHistory", e))?
        .result;
    if history.entries.len() != list.entries.len() {
        return Err(Error::new(
            ErrorKind::Cdp,
            format!(
                "the rebuilt back/forward list has {} entries, not {}",
                history.entries.len(),
                list.entries.len()
            ),
        ));
    }
    let (_, title) = &list.entries[list.current];
    stub.send_replace(stub_document(title));
    let id = history.entries[list.current].id;
    until_loaded(page, page.execute(NavigateToHistoryEntryParams::new(id))).await
}

/// Whether going from `a` to `b` stays in one document: they differ only in the fragment.
fn same_document(a: &str, b: &str) -> bool {
    let base = |u: &str| u.split('#').next().unwrap_or("").to_owned();
    b.contains('#') && base(a) == base(b)
}

/// Sends `command` and waits for the top document's load, or a navigation within it.
async fn until_loaded<T>(
    page: &Page,
    command: impl Future<Output = Result<T, chromiumoxide::error::CdpError>>,
) -> Result<(), Error> {
    let mut loaded = page
        .event_listener::<EventLoadEventFired>()
        .await
        .map_err(|e| cdp_error("listening for Page.loadEventFired", e))?;
    let mut within = page
        .event_listener::<EventNavigatedWithinDocument>()
        .await
        .map_err(|e| cdp_error("listening for Page.navigatedWithinDocument", e))?;
    command
        .await
        .map_err(|e| cdp_error("moving in the back/forward list", e))?;
    tokio::select! {
        _ = loaded.next() => Ok(()),
        _ = within.next() => Ok(()),
    }
}

/// Evaluates `expression` in the stub; an exception is an error that quotes nothing.
async fn evaluate_quietly(page: &Page, expression: String) -> Result<(), Error> {
    let params = super::script::evaluate_params(expression, None)?;
    let reply = page
        .execute(params)
        .await
        .map_err(|e| cdp_error("Runtime.evaluate", e))?;
    match reply.result.exception_details {
        Some(_) => Err(Error::new(
            ErrorKind::Cdp,
            "a back/forward stub refused a step",
        )),
        None => Ok(()),
    }
}

/// A stub: the entry's title, no request of its own, and a reload if the back/forward cache
/// ever shows it again (its real page is what Back should bring).
fn stub_document(title: &str) -> Zeroizing<String> {
    let mut escaped = Zeroizing::new(String::with_capacity(title.len()));
    for c in title.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            c => escaped.push(c),
        }
    }
    Zeroizing::new(format!(
        "<!doctype html><meta charset=\"utf-8\"><title>{}</title><link rel=\"icon\" href=\"data:,\">\
         <script>addEventListener('pageshow', (e) => {{ if (e.persisted) location.reload(); }});</script>",
        escaped.as_str()
    ))
}

/// Answers every paused document request with the stub `stubs` holds now; the task stops
/// when the handle drops.
async fn serve_stubs(
    page: &Page,
    stubs: watch::Receiver<Zeroizing<String>>,
) -> Result<AbortOnDropHandle<()>, Error> {
    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| cdp_error("listening for Fetch.requestPaused", e))?;
    let page = page.clone();
    Ok(AbortOnDropHandle::new(crate::quiet::spawn(async move {
        while let Some(event) = paused.next().await {
            let body = Zeroizing::new(BASE64.encode(stubs.borrow().as_bytes()));
            let fulfil = FulfillRequestParams::builder()
                .request_id(event.request_id.clone())
                .response_code(200)
                .response_header(HeaderEntry::new("Content-Type", "text/html; charset=utf-8"))
                .response_header(HeaderEntry::new("Cache-Control", "no-store"))
                .body(body.to_string())
                .build();
            if let Ok(fulfil) = fulfil {
                let _ = page.execute(fulfil).await;
            }
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(urls: &[&str]) -> Vec<(String, String)> {
        urls.iter()
            .map(|u| (u.to_string(), format!("t {u}")))
            .collect()
    }

    #[test]
    fn entries_that_cannot_be_rebuilt_are_left_out_and_counted() {
        let (list, left_out) = List::of(
            entries(&["about:blank", "https://a/1", "data:text/html,x", "https://a/2"]),
            3,
            MAX_ENTRIES,
        );
        let urls: Vec<_> = list.entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(urls, ["about:blank", "https://a/1", "https://a/2"]);
        assert_eq!((list.current, left_out), (2, 1));
        // A tab on a page that is not a web page keeps no list.
        let (list, left_out) = List::of(entries(&["https://a/1", "chrome://version"]), 1, 25);
        assert_eq!((list.entries.len(), left_out), (0, 1));
    }

    #[test]
    fn a_list_over_the_cap_keeps_the_current_entry_and_those_nearest_before_it() {
        let urls: Vec<String> = (0..8).map(|i| format!("https://a/{i}")).collect();
        let all = entries(&urls.iter().map(String::as_str).collect::<Vec<_>>());
        let (list, left_out) = List::of(all, 5, 3);
        let kept: Vec<_> = list.entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(kept, ["https://a/3", "https://a/4", "https://a/5"]);
        assert_eq!((list.current, left_out), (2, 5));
        // Near the start, the entries after the current one fill the cap.
        let all = entries(&urls.iter().map(String::as_str).collect::<Vec<_>>());
        let (list, left_out) = List::of(all, 1, 3);
        let kept: Vec<_> = list.entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(kept, ["https://a/0", "https://a/1", "https://a/2"]);
        assert_eq!((list.current, left_out), (1, 5));
    }

    #[test]
    fn a_stub_keeps_its_title_inside_the_title_element() {
        let doc = stub_document("a </title><script>x</script> & b");
        assert!(doc.contains("<title>a &lt;/title>&lt;script>x&lt;/script> &amp; b</title>"));
    }

    #[test]
    fn only_a_fragment_step_stays_in_the_document() {
        assert!(same_document("https://a/p", "https://a/p#x"));
        assert!(same_document("https://a/p#x", "https://a/p#y"));
        assert!(!same_document("https://a/p#x", "https://a/p"));
        assert!(!same_document("https://a/p", "https://a/q#x"));
    }
}
