//! The back/forward list (issue 48, part 3): after a death, Back and Forward go where they
//! went before, in real Chromium, through each kind of death `support::Kill` makes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::response::Html;
use axum::routing::get;
use futures::StreamExt;
use outlive::chromiumoxide::cdp::browser_protocol::page::{
    EventFrameNavigated, EventLoadEventFired, EventNavigatedWithinDocument,
    GetNavigationHistoryParams, NavigateParams, NavigationType,
};
use outlive::chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use outlive::chromiumoxide::error::CdpError;
use outlive::{Options, Outcome, WideEvent, outlive};
use support::Kill;

/// Pages `/p/{n}` titled `page {n}`, and `/p/{n}/pushed` titled `page {n} pushed`.
async fn pages_site() -> outlive_testkit::Served {
    let page = |title: String| Html(format!("<!doctype html><title>{title}</title><p>{title}"));
    let app = Router::new()
        .route(
            "/p/{n}",
            get(move |Path(n): Path<u32>| async move { page(format!("page {n}")) }),
        )
        .route(
            "/p/{n}/pushed",
            get(move |Path(n): Path<u32>| async move { page(format!("page {n} pushed")) }),
        );
    outlive_testkit::serve(app).await
}

/// The tab's list as Chromium reports it: each entry's URL and title, and the current index.
async fn list(page: &outlive::Page) -> Result<(Vec<(String, String)>, i64), CdpError> {
    let history = page
        .execute(GetNavigationHistoryParams::default())
        .await?
        .result;
    let entries = history.entries.into_iter().map(|e| (e.url, e.title));
    Ok((entries.collect(), history.current_index))
}

/// `history.go(delta)`, once the page has loaded, come back from the back/forward cache or
/// moved within its document; answers where it stands then (URL and title).
async fn go(page: &outlive::Page, delta: i32) -> Result<(String, String), CdpError> {
    let mut loaded = page.event_listener::<EventLoadEventFired>().await?;
    let mut within = page
        .event_listener::<EventNavigatedWithinDocument>()
        .await?;
    let mut navigated = page.event_listener::<EventFrameNavigated>().await?;
    page.evaluate(format!("history.go({delta})")).await?;
    let cached = async {
        while let Some(e) = navigated.next().await {
            if e.r#type == NavigationType::BackForwardCacheRestore {
                return;
            }
        }
    };
    let moved = async {
        tokio::select! {
            _ = loaded.next() => {}
            _ = within.next() => {}
            _ = cached => {}
        }
    };
    tokio::time::timeout(Duration::from_secs(10), moved)
        .await
        .expect("the page moved in its back/forward list");
    // A document that came back from the cache says so as it commits: wait for its load.
    let loaded = "(async () => { if (document.readyState !== 'complete') \
        await new Promise((r) => addEventListener('load', r, { once: true })); \
        return [location.href, document.title]; })()";
    // Evaluated in the top document there is now (chromiumoxide's `evaluate` may still name
    // the context of the one before).
    let params = EvaluateParams::builder()
        .expression(loaded)
        .await_promise(true)
        .return_by_value(true)
        .build()
        .expect("an expression is set");
    let reply = page.execute(params).await?.result;
    let at = serde_json::from_value(reply.result.value.unwrap_or_default())?;
    Ok(at)
}

type Entries = (Vec<(String, String)>, i64);

/// What a run through one death saw: the list before it, the list after the restore, and the
/// wide event.
struct Seen {
    before: Entries,
    after: Entries,
    event: WideEvent,
}

/// Opens `/p/1` to `/p/{deep}` (the second with a secret in its query), then pushes
/// `/p/{deep}/pushed` titled as its server page is; checkpoints, kills the browser `how`, and
/// after the restore runs `then` on the page.
async fn through_a_death<T, F, Fut>(options: Options, how: Kill, deep: u32, then: F) -> (Seen, T)
where
    F: Fn(outlive::Page) -> Fut,
    Fut: Future<Output = Result<T, CdpError>>,
{
    let server = pages_site().await;
    let base = server.base.clone();
    let (profiles, provider) = support::browsers();
    let slot: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let writer = slot.clone();
    let options = options
        .checkpoint_every(Duration::from_secs(3600))
        .on_event(move |e| *writer.lock().unwrap() = Some(e.clone()));
    let before: Arc<Mutex<Option<Entries>>> = Arc::default();
    let (then, before_slot) = (&then, &before);
    let (after, value) = outlive(
        &provider,
        |page, ctx| {
            let (base, provider) = (&base, &provider);
            async move {
                if ctx.attempt() == 1 {
                    for n in 1..=deep {
                        let query = if n == 2 { "?token=SECRET-IN-URL" } else { "" };
                        page.goto(NavigateParams::new(format!("{base}/p/{n}{query}")))
                            .await?;
                    }
                    page.evaluate(format!(
                        "history.pushState({{}}, '', '/p/{deep}/pushed'); \
                         document.title = 'page {deep} pushed'; 1"
                    ))
                    .await?;
                    *before_slot.lock().unwrap() = Some(list(&page).await?);
                    assert!(ctx.checkpoint().await, "the checkpoint was written");
                    provider.kill(how);
                    page.evaluate("1").await?;
                    unreachable!("a page call succeeded on a killed browser");
                }
                let after = list(&page).await?;
                Ok::<_, CdpError>((after, then(page).await?))
            }
        },
        options,
    )
    .await
    .map_err(|e| e.to_string())
    .unwrap();
    let event = slot.lock().unwrap().clone().unwrap();
    assert_eq!(event.outcome, Outcome::Completed);
    assert_eq!(event.attempts, 2);
    profiles.assert_nothing_left();
    let before = before.lock().unwrap().take().unwrap();
    (
        Seen {
            before,
            after,
            event,
        },
        value,
    )
}

/// Back twice, then Forward twice: where each step lands.
async fn back_and_forth(page: outlive::Page) -> Result<Vec<(String, String)>, CdpError> {
    let mut steps = Vec::new();
    for delta in [-1, -1, 1, 1] {
        steps.push(go(&page, delta).await?);
    }
    Ok(steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_and_forward_go_where_they_went_before_a_death() {
    for how in [Kill::Sigkill, Kill::CloseFrame] {
        let (seen, steps) = through_a_death(Options::new(), how, 3, back_and_forth).await;
        let (entries, current) = &seen.before;
        assert!(entries.len() >= 4, "three pages and a pushed entry");
        assert_eq!(
            seen.after, seen.before,
            "{how:?}: the same entries, at the same place"
        );
        // Back twice from the pushed entry, then Forward twice: each as before the death.
        let at = |i: i64| entries[i as usize].clone();
        let expected = vec![
            at(current - 1),
            at(current - 2),
            at(current - 1),
            at(*current),
        ];
        assert_eq!(steps, expected, "{how:?}");
        assert!(steps[1].0.ends_with("/p/2?token=SECRET-IN-URL"));
        assert_eq!(steps[3].1, "page 3 pushed");
        assert_eq!(seen.event.state_left_out, 0, "{how:?}");
        let event = serde_json::to_string(&seen.event).unwrap();
        assert!(!event.contains("SECRET"), "a URL reached the wide event");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_state_off_leaves_the_list_empty() {
    let options = Options::new().page_state(false);
    let (seen, ()) = through_a_death(options, Kill::Sigkill, 3, |_| async { Ok(()) }).await;
    let (before, current) = &seen.before;
    let resumed = &before[*current as usize];
    assert!(before.len() >= 4);
    // A new tab's first entry (`about:blank`), then the resumed page: none of the others.
    let after: Vec<_> = seen
        .after
        .0
        .iter()
        .filter(|e| e.0 != "about:blank")
        .collect();
    assert_eq!(after, [resumed], "only the resumed page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_over_the_cap_keeps_the_newest_entries_and_counts_the_rest() {
    const CAP: usize = 25;
    let (seen, _) = through_a_death(Options::new(), Kill::Sigkill, 28, |_| async { Ok(()) }).await;
    let (entries, current) = &seen.before;
    assert_eq!(*current as usize, entries.len() - 1);
    let over = entries.len() - CAP;
    assert!(over >= 4, "28 pages and a pushed entry");
    assert_eq!(seen.after.0, entries[over..], "the 25 newest");
    assert_eq!(seen.after.1 as usize, CAP - 1);
    assert_eq!(seen.event.state_left_out, over as u64, "the rest counted");
}
