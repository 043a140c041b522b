//! Restoring a checkpoint into a fresh page: its cookies through `Storage.setCookies`, its
//! storage through restore documents served by `Fetch` interception. Per top origin, a document
//! embeds one iframe per cross-site origin captured under it. Each runs the restore script,
//! `js/restore.js`, on its own part. Over an earlier restore only what changed is
//! written, in place while the page still stands on that restore's document. The parts: `plan`
//! (what to write where, without a browser), `serve` (answering the page's requests with the
//! documents), `write` (loading them, handing data over, or writing in place), `script` (the
//! restore script and its pieces).

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{self, RequestPattern, RequestStage};
use chromiumoxide::cdp::browser_protocol::storage::{ClearCookiesParams, SetCookiesParams};
use tokio::time::Instant;

use super::model::{Checkpoint, StoredCookie};
use super::script::cdp_error;
use crate::error::Error;
use crate::relay::Calls;
use plan::{Plan, plan};
use serve::serve_documents;

mod plan;
mod script;
mod serve;
mod write;

/// Puts cookies and every storage key's state into a fresh page before any request reaches
/// a real site. Each top origin is loaded with every request intercepted (`Fetch.enable`)
/// and answered with a restore document. That document embeds the cross-site origins captured
/// under it. The page is left on the last restore document; the caller navigates to the URL.
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
        && let Some(failed) = write::in_place(page, &top, &data).await?
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
    let result = write::all(page, calls, &loads).await;
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

#[cfg(test)]
mod tests {
    use super::script::PIECE_BYTES;
    use super::*;
    use crate::checkpoint::model::{FrameState, Part};
    use crate::checkpoint::test_support::{
        chromium_page, key, local, part, read_value, relayed_page,
    };
    use std::sync::Arc;

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
                    ..FrameState::default()
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
