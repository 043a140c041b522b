//! The client's other tabs, opened again after a death under `serve`, each in its context.
//! Each gets its sessionStorage written in, as the task's page gets its state, and its
//! back/forward list rebuilt (`back_forward`). Then it goes to its URL, where its typed fields
//! and scroll positions are put back (or a carried client loads it: `front::loads`). The
//! front shows the tabs to the client in the order they come.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use chromiumoxide::cdp::browser_protocol::target::CreateTargetParams;
use chromiumoxide::{Browser, Page};

use super::model::{Checkpoint, Part, TabState};
use crate::relay::Calls;

/// Opens `tabs` again, in order, those of made contexts in `contexts` (made again, in the
/// client's order); answers their pages and how many writes or navigations failed. A tab
/// that cannot be opened ends the list. Each is loaded (see [`load`]) unless `navigation` is
/// `None`: its load is left to the caller.
pub(crate) async fn reopen(
    browser: &Browser,
    calls: &Calls,
    tabs: &[TabState],
    contexts: &[String],
    navigation: Option<Duration>,
) -> (Vec<Page>, u64) {
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
    let reopened = pages
        .iter()
        .zip(tabs)
        .map(|(page, tab)| reopen_one(page, calls, tab, navigation));
    let failed = futures::future::join_all(reopened).await.into_iter().sum();
    (pages, failed)
}

async fn reopen_one(
    page: &Page,
    calls: &Calls,
    tab: &TabState,
    navigation: Option<Duration>,
) -> u64 {
    let session = Checkpoint::holding(tab.session.clone());
    let mut failed = match super::restore(page, calls, &session, None).await {
        Ok(failed) => failed,
        Err(e) => {
            tracing::debug!(error = %e, "a tab's sessionStorage could not be written");
            1
        }
    };
    if let Some(list) = &tab.history {
        failed += super::back_forward::rebuild(page, list, &tab.url).await;
    }
    match navigation {
        Some(navigation) => failed + load(page, &tab.url, tab.page.as_deref(), navigation).await,
        None => failed,
    }
}

/// Loads `url` in a restored tab (web URLs only) and puts its page state back; answers what
/// failed. One that will not load within `navigation` stays where it got to.
pub(crate) async fn load(
    page: &Page,
    url: &str,
    state: Option<&Part>,
    navigation: Duration,
) -> u64 {
    if !super::model::is_storable_origin(url) {
        return 0;
    }
    let goto = async {
        match super::back_forward::stands_on(page, url).await {
            true => Ok(()), // the back/forward list's rebuild loaded it
            false => page
                .goto(NavigateParams::new(url.to_owned()))
                .await
                .map(|_| ()),
        }
    };
    match tokio::time::timeout(navigation, goto).await {
        Ok(Ok(())) => match state {
            Some(state) => super::page_state::apply(page, state).await.unmatched,
            None => 0,
        },
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a restored tab's navigation failed");
            1
        }
        Err(_) => {
            tracing::debug!(?navigation, "a restored tab did not load in time");
            1
        }
    }
}
