//! A tab's back/forward list: its entries' URLs and titles and where it stood. Read with
//! `Page.getNavigationHistory`, only when the sign the page state read answers has moved (see
//! `js/page_state.js`): an unchanged list costs nothing beyond that read. CDP cannot write the
//! list. So [`rebuild`] navigates a fresh page through stub documents served by `Fetch`
//! interception, one per entry, ending on the current entry's stub. The ordinary resume load
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
    EventLoadEventFired, EventNavigatedWithinDocument, GetNavigationHistoryParams, NavigateParams,
    NavigateToHistoryEntryParams, ReloadParams, ResetNavigationHistoryParams,
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
    url.starts_with("http://") || url.starts_with("https://") || url == "about:blank"
}

impl List {
    /// The list from `entries` (URL, title) and the current index, within `cap` entries.
    /// Entries that cannot be rebuilt, and those over the cap, are left out (the count).
    /// A tab whose current page cannot be rebuilt keeps no list.
    pub(super) fn of(entries: Vec<(String, String)>, current: usize, cap: usize) -> (List, u64) {
        let total = entries.len() as u64;
        let kept_current = entries
            .get(current)
            .is_some_and(|(url, _)| rebuildable(url));
        if !kept_current || cap == 0 {
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
/// the current URL has a fragment, on the real page: a load to it would stay in the stub;
/// see [`stands_on`]).
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
    // Off any stub, so the resume load is a load whatever its URL.
    let _ = page.execute(fetch::DisableParams::default()).await;
    let blank = page.goto(NavigateParams::new("about:blank"));
    let _ = tokio::time::timeout(Duration::from_secs(5), blank).await;
    let _ = page.execute(ResetNavigationHistoryParams::default()).await;
    lost
}

/// Whether `page` stands on `url` already, a URL with a fragment: a rebuild loads such a page
/// itself (see [`rebuild`]), and a load to it now would only step within the document.
pub(crate) async fn stands_on(page: &Page, url: &str) -> bool {
    if !url.contains('#') {
        return false;
    }
    let Ok(history) = page.execute(GetNavigationHistoryParams::default()).await else {
        return false;
    };
    let history = history.result;
    let current = usize::try_from(history.current_index).ok();
    current
        .and_then(|i| history.entries.get(i))
        .is_some_and(|e| e.url == url)
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
async fn walk(
    page: &Page,
    list: &List,
    stub: &watch::Sender<Zeroizing<String>>,
) -> Result<(), Error> {
    let mut previous: Option<&str> = None;
    for (i, (url, title)) in list.entries.iter().enumerate() {
        stub.send_replace(stub_document(title));
        if previous.is_some_and(|p| same_document(p, url)) {
            // A fragment step, or a second entry of one URL (a load of the URL the page is on
            // would replace its entry): pushed in the same stub, as the page's own would be.
            let push = format!(
                "history.pushState(null, '', {}); document.title = {}; 1",
                serde_json::to_string(url).expect("strings serialise"),
                serde_json::to_string(title).expect("strings serialise")
            );
            evaluate_quietly(page, push).await?;
        } else {
            page.goto(NavigateParams::new(url.clone()))
                .await
                .map_err(|e| cdp_error("loading a back/forward stub", e))?;
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

/// Whether going from `a` to `b` stays in one stub: the same URL again, or a step to a
/// fragment of the same page.
fn same_document(a: &str, b: &str) -> bool {
    let base = |u: &str| u.split('#').next().unwrap_or("").to_owned();
    a == b || (b.contains('#') && base(a) == base(b))
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
    use crate::checkpoint::test_support::{chromium_page, site};
    use chromiumoxide::cdp::browser_protocol::page::{EventFrameNavigated, NavigationType};

    /// `expression`'s value in the top document the page has now (chromiumoxide's own
    /// `evaluate` may still name the context of the one before).
    async fn read_value<T: serde::de::DeserializeOwned>(page: &Page, expression: String) -> T {
        let params = super::super::script::evaluate_params(expression, None).unwrap();
        let reply = page.execute(params).await.expect("the check runs").result;
        assert!(reply.exception_details.is_none(), "the check threw");
        serde_json::from_value(reply.result.value.unwrap_or_default()).expect("the check answers")
    }

    /// The page's list as Chromium reports it.
    async fn list_of(page: &Page) -> (Vec<(String, String)>, i64) {
        let history = page
            .execute(GetNavigationHistoryParams::default())
            .await
            .unwrap()
            .result;
        let entries = history.entries.into_iter().map(|e| (e.url, e.title));
        (entries.collect(), history.current_index)
    }

    /// `history.go(delta)`, once the page has loaded, come back from the back/forward cache or
    /// moved within its document; answers its URL and title then.
    async fn go(page: &Page, delta: i32) -> (String, String) {
        let mut navigated = page.event_listener::<EventFrameNavigated>().await.unwrap();
        let cached = async move {
            while let Some(e) = navigated.next().await {
                if e.r#type == NavigationType::BackForwardCacheRestore {
                    return;
                }
            }
        };
        let step = until_loaded(page, page.evaluate(format!("history.go({delta})")));
        let moved = async {
            tokio::select! {
                r = step => r.unwrap(),
                () = cached => {}
            }
        };
        tokio::time::timeout(Duration::from_secs(10), moved)
            .await
            .expect("the page moved");
        read_value(page, LOADED.into()).await
    }

    /// The URL and title, once the document has loaded.
    const LOADED: &str = "(async () => { if (document.readyState !== 'complete') \
        await new Promise((r) => addEventListener('load', r, { once: true })); \
        return [location.href, document.title]; })()";

    /// Whether the page is one of outlive's stubs (the test site's pages have no icon link).
    async fn on_stub(page: &Page) -> bool {
        read_value(page, "!!document.querySelector('link[rel=icon]')".into()).await
    }

    /// A list with entries after the current one, two entries of one URL in a row and a
    /// fragment step comes back whole in a fresh page. It ends on the current entry's stub;
    /// the resume load (the same URL) brings the real page and keeps the entries after it.
    /// Where the current URL has a fragment, the rebuild loads the real page itself.
    #[tokio::test]
    async fn a_list_with_entries_after_the_current_one_comes_back_whole() {
        let (_chromium, browser, _pump, page) = chromium_page().await;
        let (base, _server) = site().await;
        let at = |path: &str| format!("{base}{path}");
        for path in ["/a", "/b", "/b#x", "/c", "/d"] {
            match path.split_once('#') {
                // A fragment step answers no load, which `goto` would wait for.
                Some((_, hash)) => {
                    let _: i64 = read_value(&page, format!("location.hash = '{hash}', 1")).await;
                }
                None => {
                    page.goto(at(path)).await.unwrap();
                }
            }
        }
        let _: i64 = read_value(
            &page,
            "history.pushState(null, '', location.href), 1".into(),
        )
        .await;
        assert_eq!(go(&page, -2).await, (at("/c"), "/c".to_owned()));
        let before = list_of(&page).await;
        let urls: Vec<_> = before.0.iter().map(|e| e.0.as_str()).collect();
        let expected = [
            "about:blank",
            &at("/a"),
            &at("/b"),
            &at("/b#x"),
            &at("/c"),
            &at("/d"),
            &at("/d"),
        ];
        assert_eq!((urls.as_slice(), before.1), (expected.as_slice(), 4));
        let part = read(&page, &PartCache::default(), None, MAX_ENTRIES)
            .await
            .expect("read");

        let fresh = browser.new_page("about:blank").await.unwrap();
        assert_eq!(rebuild(&fresh, &part, &at("/c")).await, 0);
        assert_eq!(list_of(&fresh).await, before, "rebuilt");
        assert!(on_stub(&fresh).await, "on the current entry's stub");
        fresh.goto(at("/c")).await.unwrap();
        assert_eq!(
            list_of(&fresh).await,
            before,
            "the resume load replaced the stub"
        );
        assert!(!on_stub(&fresh).await, "the real page");
        assert_eq!(go(&fresh, 1).await, (at("/d"), "/d".to_owned()));
        assert_eq!(go(&fresh, 1).await, (at("/d"), "/d".to_owned()));
        assert!(!on_stub(&fresh).await, "the real page");
        assert_eq!(go(&fresh, -3).await, (at("/b#x"), "/b".to_owned()));
        assert!(!on_stub(&fresh).await, "the real page");

        // The same list standing on the fragment entry.
        let mut list: List = serde_json::from_str(&part.json).unwrap();
        list.current = 3;
        let part = list.to_part("h".into(), 0);
        let fresh = browser.new_page("about:blank").await.unwrap();
        assert_eq!(rebuild(&fresh, &part, &at("/b#x")).await, 0);
        assert!(
            !on_stub(&fresh).await,
            "a fragment URL's real page is loaded by the rebuild"
        );
        assert!(
            stands_on(&fresh, &at("/b#x")).await,
            "no resume load is due"
        );
        let after = list_of(&fresh).await;
        assert_eq!((after.0, after.1), (before.0.clone(), 3));
        assert_eq!(go(&fresh, 2).await, (at("/d"), "/d".to_owned()));
    }

    /// The sign the page state read answers stands while the tab stays put, and moves with
    /// a pushed entry, a new document and a step back. While it stands, the list outlive
    /// holds is answered with no round trip.
    #[tokio::test]
    async fn the_list_is_read_again_only_once_the_tab_moved() {
        use crate::checkpoint::model::Checkpoint;
        use crate::checkpoint::page_state::{Caps, read_with_sign};
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (base, _server) = site().await;
        let cache = PartCache::default();
        let sign = || async { read_with_sign(&page, &cache, Caps::default()).await.nav };
        page.goto(format!("{base}/a")).await.unwrap();
        let first = sign().await;
        assert!(first.is_some(), "a web page has a sign");
        assert_eq!(sign().await, first, "nothing moved");
        let _: i64 = read_value(&page, "history.pushState(null, '', '/a2'), 1".into()).await;
        let pushed = sign().await;
        assert_ne!(pushed, first, "a pushed entry");
        page.goto(format!("{base}/b")).await.unwrap();
        let next = sign().await;
        assert_ne!(next, pushed, "a new document");
        let _ = go(&page, -1).await;
        let back = sign().await;
        assert!(![&first, &pushed, &next].contains(&&back), "a step back");

        let held = read(&page, &cache, back.as_deref(), MAX_ENTRIES)
            .await
            .unwrap();
        let mut cp = Checkpoint::at_url("about:blank", tokio::time::Instant::now());
        cp.history = Some(held.clone());
        cache.remember(&cp);
        let again = read(&page, &cache, back.as_deref(), MAX_ENTRIES)
            .await
            .unwrap();
        assert!(Arc::ptr_eq(&held, &again), "the held list, by its sign");
        let list: List = serde_json::from_str(&again.json).unwrap();
        assert_eq!(list.entries[list.current].0, format!("{base}/a2"));
    }

    fn entries(urls: &[&str]) -> Vec<(String, String)> {
        urls.iter()
            .map(|u| (u.to_string(), format!("t {u}")))
            .collect()
    }

    #[test]
    fn entries_that_cannot_be_rebuilt_are_left_out_and_counted() {
        let (list, left_out) = List::of(
            entries(&[
                "about:blank",
                "https://a/1",
                "data:text/html,x",
                "https://a/2",
            ]),
            3,
            MAX_ENTRIES,
        );
        let urls: Vec<_> = list.entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(urls, ["about:blank", "https://a/1", "https://a/2"]);
        assert_eq!((list.current, left_out), (2, 1));
        // A tab on a page that cannot be rebuilt keeps no list.
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
    fn only_a_fragment_step_or_the_same_url_stays_in_the_stub() {
        assert!(same_document("https://a/p", "https://a/p"));
        assert!(same_document("https://a/p", "https://a/p#x"));
        assert!(same_document("https://a/p#x", "https://a/p#y"));
        assert!(!same_document("https://a/p#x", "https://a/p"));
        assert!(!same_document("https://a/p", "https://a/q#x"));
    }
}
