//! Capturing a checkpoint: the capture script (`js/capture.js`) runs in every frame of a page,
//! and what each frame reports, with the cookies, becomes a `Checkpoint`. The parts:
//! `expressions` (the script and the expressions that install and call it), `frames` (reading
//! the top frame, out-of-process frames and same-process ones of other origins), `warm`
//! (installing the script as documents start, and warming it up), `options`. IndexedDB change
//! tracking is `idb`'s: a capture holds one `IdbCapture`, which says what to offer and what to
//! read again, and settles what it read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::GetFrameTreeParams;
use chromiumoxide::cdp::browser_protocol::storage::GetCookiesParams;
use tokio::time::Instant;

use super::back_forward;
use super::cache::PartCache;
use super::files;
use super::idb::{IdbAnswers, Tracking};
use super::model::{Checkpoint, FrameState, Part, StorageKey, StoredCookie, is_storable_origin};
use super::page_state;
use super::script::cdp_error;
use crate::error::{Error, ErrorKind};
use crate::relay::Calls;
use expressions::capture_arguments;
use frames::{
    FrameRead, RawPart, Reads, idb_answers, keep_reads, read_other_origins_here,
    read_remote_frames, read_top,
};

mod expressions;
mod frames;
mod options;
mod warm;

pub(crate) use options::CaptureOptions;
pub(crate) use warm::{WarmUp, install_on_new_document};

/// Whether a capture reads its page's cookies: a tab beside the task's page leaves them to
/// it (a page session's `Storage.getCookies` answers for the whole context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cookies {
    Read,
    LeaveToOwnPage,
}

impl FrameRead {
    /// The frame's storage: each part as sent, or the one `cache` holds by its hash.
    fn state(self, cache: &PartCache) -> Result<FrameState, Error> {
        let part = |raw: Option<RawPart>| -> Result<Option<Arc<Part>>, Error> {
            let Some(raw) = raw else { return Ok(None) };
            let part = match raw.data {
                Some(json) => Arc::new(Part {
                    hash: raw.hash,
                    json,
                    left_out: raw.left_out,
                }),
                None => cache.get(&raw.hash).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Cdp,
                        "the page reported storage as unchanged that outlive no longer holds",
                    )
                })?,
            };
            Ok(Some(part))
        };
        Ok(FrameState {
            local: part(self.local)?,
            session: part(self.session)?,
            idb: part(self.idb)?,
            caches: part(self.caches)?,
            files: part(self.files)?,
        })
    }
}

/// Captures a checkpoint from `page` and its frames. Cookies, the top frame, the frame tree
/// and every out-of-process frame are read at once, so a capture costs about one round trip
/// (same-process cross-origin frames add one more); parts `cache` holds unchanged cross the
/// wire as a hash.
pub(crate) async fn capture(
    page: &Page,
    calls: &Calls,
    cache: &PartCache,
    tracking: &Tracking,
    options: CaptureOptions,
) -> Result<Checkpoint, Error> {
    let checkpoint = capture_page(page, calls, cache, tracking, options, Cookies::Read).await?;
    cache.remember(&checkpoint);
    Ok(checkpoint)
}

/// [`capture`] without updating `cache`: for one tab of several, whose parts the cache holds
/// only once every tab is read.
pub(crate) async fn capture_page(
    page: &Page,
    calls: &Calls,
    cache: &PartCache,
    tracking: &Tracking,
    options: CaptureOptions,
    cookies: Cookies,
) -> Result<Checkpoint, Error> {
    let taken = Instant::now();
    let at = SystemTime::now();
    let idb = tracking.begin(cache, options.in_full);
    let arguments = capture_arguments(&cache.known(), options, idb.offered());
    let read_cookies = async {
        match cookies {
            Cookies::Read => Some(page.execute(GetCookiesParams::default()).await),
            Cookies::LeaveToOwnPage => None,
        }
    };
    let (cookies, top, tree, remote, (page_state, history)) = futures::join!(
        read_cookies,
        read_top(page, &arguments),
        page.execute(GetFrameTreeParams::default()),
        read_remote_frames(page, calls, &arguments, options.frame_timeout),
        read_page_state(page, cache, options.page_state),
    );
    tracing::trace!(elapsed = ?taken.elapsed(), "capture round trip");
    let cookies = match cookies {
        Some(read) => {
            let cookies = read.map_err(|e| cdp_error("Storage.getCookies", e))?;
            cookies.result.cookies
        }
        None => Vec::new(),
    };
    let reads = Reads { page, calls, cache };
    let (top, remote) = reads
        .again_if_moved(&idb, (top?, remote), options, taken)
        .await?;
    let top_origin = top.origin.clone();
    let url = top.url.clone();
    let answers = IdbAnswers::of(idb_answers(&top, &remote));

    let mut reads = Vec::new();
    if is_storable_origin(&top_origin) {
        reads.push(top);
    }
    let mut frames_unread = keep_reads(&mut reads, remote.into_iter().map(|(_, r)| r).collect());
    if let Ok(tree) = tree {
        let tree = &tree.result.frame_tree;
        frames_unread += read_other_origins_here(page, cache, options, tree, &mut reads).await;
    }

    let mut storage = storage_by_key(reads, &top_origin, cache)?;
    files::keep_within_total(&mut storage, &top_origin, options.files_max_bytes);
    let checkpoint = Checkpoint {
        url,
        cookies: cookies.into_iter().map(StoredCookie::from).collect(),
        storage,
        contexts: Vec::new(),
        tabs: Vec::new(),
        targets: Vec::new(),
        frames_unread,
        at,
        taken,
        progress: None,
        page: page_state,
        history,
    };
    idb.settle(page, calls, answers).await;
    Ok(checkpoint)
}

/// The page state and the back/forward list, when `on`. The page state is read beside the
/// storage, in the same round trip's time; the list only once its sign has moved.
async fn read_page_state(
    page: &Page,
    cache: &PartCache,
    on: bool,
) -> (Option<Arc<Part>>, Option<Arc<Part>>) {
    if !on {
        return (None, None);
    }
    let read = page_state::read_with_sign(page, cache, page_state::Caps::default()).await;
    let sign = read.nav.as_deref();
    let list = back_forward::read(page, cache, sign, back_forward::MAX_ENTRIES).await;
    (read.state, list)
}

/// The frames' storage under the top origin, by storage key: the first read of each storable
/// origin, its parts resolved against `cache`.
fn storage_by_key(
    reads: Vec<FrameRead>,
    top_origin: &str,
    cache: &PartCache,
) -> Result<BTreeMap<StorageKey, FrameState>, Error> {
    let mut storage = BTreeMap::new();
    for read in reads {
        if !is_storable_origin(&read.origin) {
            continue;
        }
        let key = StorageKey {
            top: top_origin.to_owned(),
            origin: read.origin.clone(),
        };
        if storage.contains_key(&key) {
            continue;
        }
        storage.insert(key, read.state(cache)?);
    }
    Ok(storage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::cache::KNOWN_MIN_BYTES;
    use crate::checkpoint::test_support::{
        CHANGES, chromium_page, first, key, local, read_value, reused, seed, site,
    };
    use chromiumoxide::cdp::browser_protocol::page::AddScriptToEvaluateOnNewDocumentParams;
    use expressions::INSTALLED;
    use std::time::Duration;

    /// Whether this page may compile and run a WebAssembly module: "ok", or the error.
    const WASM_CHECK: &str = "(() => { try {
        const bytes = Uint8Array.of(0, 97, 115, 109, 1, 0, 0, 0, 5, 3, 1, 0, 1);
        new WebAssembly.Instance(new WebAssembly.Module(bytes)); return 'ok';
      } catch (e) { return String(e); } })()";

    /// After a navigation to a new document of the same origin (where the capture script and
    /// its memory are new), unchanged storage crosses the wire as hashes only, and a change to
    /// any one kind — a single character in a 64 KiB value — is captured; with WebAssembly
    /// forbidden by the page's CSP, and for text that is not well-formed UTF-16, the
    /// JavaScript hash does the same.
    #[tokio::test]
    async fn after_a_navigation_only_what_changed_is_sent() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), Tracking::default());
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            files: false,
            files_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            in_full: false,
            page_state: false,
        };
        let capture = || capture(&page, &calls, &cache, &watch, options);
        let cases = [("", ""), ("csp/", ""), ("", "\\ud800")];
        // First where the capture installs its script itself, then where each new document
        // starts with it (as on the pages outlive opens).
        for (installed, (dir, lone)) in cases
            .map(|c| (false, c))
            .into_iter()
            .chain(cases.map(|c| (true, c)))
        {
            if installed && dir.is_empty() && lone.is_empty() {
                page.execute(AddScriptToEvaluateOnNewDocumentParams::new(
                    install_on_new_document(),
                ))
                .await
                .unwrap();
            }
            let go = |n: u32| page.goto(format!("{url}/{dir}page{n}"));
            go(0).await.unwrap();
            let _: i64 = read_value(&page, seed(lone)).await;
            let _ = capture().await.unwrap();
            let mut last = capture().await.unwrap();
            let hash = first(&last).local.as_ref().unwrap().hash.clone();
            if hash.starts_with("lw") != (dir.is_empty() && lone.is_empty()) {
                let here: String = read_value(&page, WASM_CHECK.into()).await;
                panic!(
                    "installed {installed}, {dir}{lone}: hashed by WebAssembly only where it may run: {hash} (WebAssembly on this page: {here})"
                );
            }

            go(1).await.unwrap();
            let there: String = read_value(&page, format!("typeof {INSTALLED}")).await;
            let expected = if installed { "function" } else { "undefined" };
            assert_eq!(
                there, expected,
                "installed {installed}, {dir}{lone}: the script as the document starts"
            );
            let now = capture().await.unwrap();
            assert_eq!(
                reused(&last, &now),
                [true; 3],
                "installed {installed}, {dir}{lone}: nothing changed"
            );
            last = now;

            for (kind, change) in CHANGES.iter().enumerate() {
                go(2 + kind as u32).await.unwrap();
                let _: i64 = read_value(&page, change.replace("{lone}", lone)).await;
                go(10 + kind as u32).await.unwrap();
                let now = capture().await.unwrap();
                let mut expected = [true; 3];
                expected[kind] = false;
                assert_eq!(
                    reused(&last, &now),
                    expected,
                    "installed {installed}, {dir}{lone}: change {kind}"
                );
                let state = first(&now);
                let part = [&state.local, &state.session, &state.idb][kind];
                let json = &part.as_ref().unwrap().json;
                assert!(
                    ["az", "bz", "cz"].iter().any(|m| json.contains(m)),
                    "installed {installed}, {dir}{lone}: change {kind} is in the checkpoint"
                );
                last = now;
            }
        }
    }

    #[test]
    fn unchanged_parts_come_from_the_cache_by_hash() {
        let cache = PartCache::default();
        let mut cp = Checkpoint::at_url("https://a.example/", Instant::now());
        let big = format!(r#"[["k","{}"]]"#, "x".repeat(KNOWN_MIN_BYTES));
        cp.storage
            .insert(key("https://a.example", "https://a.example"), local(&big));
        cache.remember(&cp);
        let hash = first(&cp).local.as_ref().unwrap().hash.clone();
        assert_eq!(cache.known(), vec![hash.clone()]);
        let read = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            scope: None,
            local: Some(RawPart {
                hash,
                data: None,
                left_out: 0,
                list: None,
            }),
            session: None,
            idb: None,
            caches: None,
            files: None,
        };
        assert_eq!(read.state(&cache).unwrap().local.unwrap().json, big);
        let unknown = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            scope: None,
            local: Some(RawPart {
                hash: "nope".into(),
                data: None,
                left_out: 0,
                list: None,
            }),
            session: None,
            idb: None,
            caches: None,
            files: None,
        };
        assert!(unknown.state(&cache).is_err());
    }
}
