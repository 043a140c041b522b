//! The client's other tabs, opened again after a death under `serve`, each in its context.
//! Each gets its sessionStorage written in, as the task's page gets its state. Then it goes to
//! its URL, where its typed fields and scroll positions are put back. The front shows the tabs
//! to the client in the order they come.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use chromiumoxide::cdp::browser_protocol::target::CreateTargetParams;
use chromiumoxide::{Browser, Page};

use super::model::{Checkpoint, TabState};
use crate::relay::Calls;

/// Opens `tabs` again, in order, those of made contexts in `contexts` (made again, in the
/// client's order); answers their targets and how many writes or navigations failed. A tab
/// that cannot be opened ends the list; one that will not load within `navigation` stays where
/// it got to.
pub(crate) async fn reopen(
    browser: &Browser,
    calls: &Calls,
    tabs: &[TabState],
    contexts: &[String],
    navigation: Duration,
) -> (Vec<String>, u64) {
    let mut pages = Vec::new();
    for tab in tabs {
        let mut blank = CreateTargetParams::new("about:blank");
        if let Some(i) = tab.context {
            let Some(context) = contexts.get(i) else {
                tracing::debug!("a tab's context was not made again; its tab is not reopened");
                break;
            };
            blank.browser_context_id = Some(BrowserContextId::new(context.clone()));
        }
        match browser.new_page(blank).await {
            Ok(page) => pages.push(page),
            Err(e) => {
                tracing::debug!(error = %e, "a client's tab could not be opened again");
                break;
            }
        }
    }
    let ids = pages
        .iter()
        .map(|p| p.target_id().as_ref().to_owned())
        .collect();
    let reopened = pages
        .iter()
        .zip(tabs)
        .map(|(page, tab)| reopen_one(page, calls, tab, navigation));
    let failed = futures::future::join_all(reopened).await.into_iter().sum();
    (ids, failed)
}

async fn reopen_one(page: &Page, calls: &Calls, tab: &TabState, navigation: Duration) -> u64 {
    let session = Checkpoint::holding(tab.session.clone());
    let mut failed = match super::restore(page, calls, &session, None).await {
        Ok(failed) => failed,
        Err(e) => {
            tracing::debug!(error = %e, "a tab's sessionStorage could not be written");
            1
        }
    };
    if !super::model::is_storable_origin(&tab.url) {
        return failed;
    }
    let goto = page.goto(NavigateParams::new(tab.url.clone()));
    match tokio::time::timeout(navigation, goto).await {
        Ok(Ok(_)) => {
            if let Some(state) = &tab.page {
                failed += super::page_state::apply(page, state).await.unmatched;
            }
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a reopened tab's navigation failed");
            failed += 1;
        }
        Err(_) => {
            tracing::debug!(?navigation, "a reopened tab did not load in time");
            failed += 1;
        }
    }
    failed
}
