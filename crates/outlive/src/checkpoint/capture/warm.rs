//! Having the capture script ready before a capture needs it. It is installed in each
//! top-level document as it starts. Once the page was captured, it is warmed up in its
//! documents and its cross-site frames': Web Storage read and hashed ahead of the next capture.

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::AddScriptToEvaluateOnNewDocumentParams;

use super::expressions::{INSTALLED, installer};
use crate::relay::Calls;

/// The script outlive's pages run as each top-level document starts
/// (`Page.addScriptToEvaluateOnNewDocument`): the capture script installed before the task
/// needs it, so a checkpoint on a new document sends a call, not the 15 KB script. It reads
/// nothing and compiles nothing until the first capture.
pub(crate) fn install_on_new_document() -> String {
    format!("if (window === window.top) {};", installer())
}

/// The warm-up a page's documents run as they start once a capture was asked for on the page
/// (see [`WarmUp`]), as a block statement. When the document has loaded and the renderer is
/// idle, the installed capture script reads and hashes Web Storage, sending nothing. The next
/// capture then finds each area's last read in the script's memory. It only compares the
/// strings it reads now with it: every one, exactly, so a change since the warm-up is
/// captured. It marks the installed function `warmed` when done.
fn warm_up() -> String {
    format!(
        "{{
  const warm = () => {{
    const capture = {INSTALLED};
    if (capture) capture([], {{ warm: true }}).then(() => {{ capture.warmed = true; }}, () => {{}});
  }};
  const idle = () => (window.requestIdleCallback
    ? window.requestIdleCallback(warm, {{ timeout: 1000 }})
    : setTimeout(warm, 0));
  window.addEventListener('load', idle, {{ once: true }});
}}"
    )
}

/// [`warm_up`] for the page's top-level documents.
fn warm_on_new_document() -> String {
    format!("if (window === window.top) {}", warm_up())
}

/// What each out-of-process frame (a cross-site iframe, its own target) runs as its documents
/// start once a capture was asked for on the page: the capture script installed, and
/// [`warm_up`]. Registered by the relay as the frame attaches (see `Calls::arm_frames`); a
/// capture reads such a frame with the whole installing expression anyway, so a frame that
/// started before its scripts were registered is read as before.
fn frame_scripts() -> Vec<String> {
    vec![format!("{};", installer()), warm_up()]
}

/// Whether the page's documents warm the capture script up as they load. Not until a capture
/// was asked for on the page, so a page outlive never checkpoints costs nothing. Where a page's
/// CSP refuses WebAssembly, only a page outlive checkpoints reports the refusals. One per page
/// session: the script is registered on it.
#[derive(Default)]
pub(crate) struct WarmUp(std::sync::atomic::AtomicBool);

impl WarmUp {
    /// As a capture on `page` starts (beside it, costing it nothing): registers
    /// [`warm_on_new_document`] on the page and has the relay register [`frame_scripts`] on
    /// each cross-site frame that attaches from then on, the first time. With `page_state`
    /// (a page outlive did not open itself), the page state's watcher too.
    pub(crate) async fn arm(&self, page: &Page, calls: &Calls, page_state: bool) {
        use std::sync::atomic::Ordering;
        if self.0.swap(true, Ordering::SeqCst) {
            return;
        }
        calls.arm_frames(frame_scripts());
        let script = AddScriptToEvaluateOnNewDocumentParams::new(warm_on_new_document());
        let watcher = async {
            if page_state {
                let script = AddScriptToEvaluateOnNewDocumentParams::builder()
                    .source(crate::checkpoint::page_state::on_new_document())
                    .world_name(chromiumoxide::handler::frame::UTILITY_WORLD_NAME)
                    .build()
                    .expect("source is set");
                if let Err(e) = page.execute(script).await {
                    tracing::debug!(error = %e, "registering the page state watcher failed");
                }
            }
        };
        let (warm, ()) = futures::join!(page.execute(script), watcher);
        if let Err(e) = warm {
            tracing::debug!(error = %e, "registering the capture warm-up failed; next capture tries again");
            self.0.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::cache::PartCache;
    use crate::checkpoint::capture::{CaptureOptions, capture};
    use crate::checkpoint::idb::Tracking;
    use crate::checkpoint::model::Checkpoint;
    use crate::checkpoint::test_support::{
        CHANGES, chromium_page, first, frame_value, key, read_value, relayed_page, reused, seed,
        site, the_frame, two_site_server,
    };
    use std::sync::Arc;
    use std::time::Duration;

    /// Waits until the document the page shows has warmed its capture script up (the warm-up
    /// runs once the document loaded and the renderer is idle).
    async fn warmed(page: &Page) {
        for _ in 0..500 {
            let done: bool = read_value(page, format!("{INSTALLED}?.warmed === true")).await;
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the document did not warm the capture script up within 10 s");
    }

    /// Has `page`'s top-level documents install the capture script as they start, as outlive's
    /// pages do.
    async fn install(page: &Page) {
        let script = AddScriptToEvaluateOnNewDocumentParams::new(install_on_new_document());
        page.execute(script).await.unwrap();
    }

    /// A capture of `page` with `warm` armed beside it, as outlive's captures arm it.
    async fn warm_capture(
        page: &Page,
        calls: &Calls,
        cache: &PartCache,
        watch: &Tracking,
        warm: &WarmUp,
        options: CaptureOptions,
    ) -> Checkpoint {
        let (cp, ()) = futures::join!(
            capture(page, calls, cache, watch, options),
            warm.arm(page, calls, false)
        );
        cp.unwrap()
    }

    /// Once a page was captured, each new document reads and hashes its Web Storage ahead of
    /// the next capture; that capture still compares every string, so what changed after the
    /// warm-up — in each kind of storage — is captured, and nothing unchanged is sent. (No
    /// relay: IndexedDB is read in full at each capture, its change tracking is `idb`'s
    /// tests' subject.)
    #[tokio::test]
    async fn a_warmed_up_document_captures_what_changed_after_the_warm_up() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), Tracking::default());
        let warm = WarmUp::default();
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            files: false,
            files_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            in_full: false,
            page_state: false,
        };
        let capture = || warm_capture(&page, &calls, &cache, &watch, &warm, options);
        install(&page).await;
        let go = |n: u32| page.goto(format!("{url}/page{n}"));
        go(0).await.unwrap();
        let _: i64 = read_value(&page, seed("")).await;
        let _ = capture().await;
        let mut last = capture().await;

        go(1).await.unwrap();
        warmed(&page).await;
        let now = capture().await;
        assert_eq!(reused(&last, &now), [true; 3], "nothing changed");
        last = now;

        for (kind, change) in CHANGES.iter().enumerate() {
            go(2 + kind as u32).await.unwrap();
            warmed(&page).await;
            let _: i64 = read_value(&page, change.replace("{lone}", "")).await;
            let now = capture().await;
            let mut expected = [true; 3];
            expected[kind] = false;
            assert_eq!(reused(&last, &now), expected, "change {kind}");
            let state = first(&now);
            let part = [&state.local, &state.session, &state.idb][kind];
            let json = &part.as_ref().unwrap().json;
            assert!(
                ["az", "bz", "cz"].iter().any(|m| json.contains(m)),
                "change {kind} is in the checkpoint"
            );
            last = now;
        }
    }

    /// A cross-site iframe (its own renderer, reached through its session on the relay) gets
    /// the capture script and the warm-up as each of its documents starts, once a capture was
    /// asked for on the page: after a navigation its unchanged storage crosses the wire as a
    /// hash, and a change made after its warm-up is captured.
    #[tokio::test]
    async fn a_cross_site_frame_is_warmed_up_and_its_changes_still_captured() {
        let (_chromium, relay, _browser, _pump, page) = relayed_page().await;
        let (port, _server) = two_site_server().await;
        let calls = relay.calls();
        let (cache, watch, warm) = (PartCache::default(), Tracking::default(), WarmUp::default());
        let options = CaptureOptions {
            indexed_db: false,
            indexed_db_max_bytes: 0,
            files: false,
            files_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            in_full: false,
            page_state: false,
        };
        let capture = || warm_capture(&page, &calls, &cache, &watch, &warm, options);
        let frame_key = key(
            &format!("http://127.0.0.1:{port}"),
            &format!("http://localhost:{port}"),
        );
        let frame_local = |cp: &Checkpoint| cp.storage[&frame_key].local.clone().unwrap();
        install(&page).await;
        let go = |n: u32| page.goto(format!("http://127.0.0.1:{port}/top{n}"));

        go(0).await.unwrap();
        let mut frame = the_frame(&page, &calls, None).await;
        let seed = "(localStorage.setItem('f', 'q'.repeat(65536)), 1)";
        frame_value(&calls, &frame, seed).await;
        let _ = capture().await;
        let mut last = capture().await;

        let warmed = format!("{INSTALLED}?.warmed === true");
        for (n, change) in [(1, None), (2, Some("'q'.repeat(65535) + 'z'"))] {
            go(n).await.unwrap();
            frame = the_frame(&page, &calls, Some(&frame)).await;
            let mut done = false;
            for _ in 0..500 {
                done = frame_value(&calls, &frame, &warmed).await == true;
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !done {
                let here = frame_value(
                    &calls,
                    &frame,
                    &format!("[typeof {INSTALLED}, document.readyState, location.href]"),
                )
                .await;
                panic!("document {n}: the frame warmed up within 10 s: {here}");
            }
            if let Some(value) = change {
                let set = format!("(localStorage.setItem('f', {value}), 1)");
                frame_value(&calls, &frame, &set).await;
            }
            let now = capture().await;
            let same = Arc::ptr_eq(&frame_local(&last), &frame_local(&now));
            assert_eq!(
                same,
                change.is_none(),
                "document {n}: the frame's part reused"
            );
            if change.is_some() {
                assert!(
                    frame_local(&now).json.contains("qz"),
                    "the change is captured"
                );
            }
            last = now;
        }
    }
}
