//! The contexts a foreign client made, made again in a new browser before the client runs:
//! each with its cookies and storage written in (through a page of its own, closed after), so
//! no client sees the writing. The front hands them out in order to the client's
//! `Target.createBrowserContext` commands.

use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::storage::SetCookiesParams;
use chromiumoxide::cdp::browser_protocol::target::{
    CreateBrowserContextParams, CreateTargetParams, DisposeBrowserContextParams,
};

use super::model::{Checkpoint, ContextState};
use super::script::cdp_error;
use crate::error::Error;
use crate::relay::Calls;

/// Makes a context for each of `checkpoint`'s, with its state written in; answers their ids
/// in order, and the writes that failed. A context that cannot be made ends the list: the
/// client's later ones are made empty, by the browser.
pub(crate) async fn remake(
    browser: &Browser,
    calls: &Calls,
    checkpoint: &Checkpoint,
) -> (Vec<String>, u64) {
    let mut ids = Vec::new();
    let mut failed = 0;
    for context in &checkpoint.contexts {
        match remake_one(browser, calls, context).await {
            Ok((id, f)) => {
                ids.push(id);
                failed += f;
            }
            Err(e) => {
                tracing::debug!(error = %e, "a context the client made could not be made again");
                break;
            }
        }
    }
    (ids, failed)
}

async fn remake_one(
    browser: &Browser,
    calls: &Calls,
    context: &ContextState,
) -> Result<(String, u64), Error> {
    let made = browser
        .execute(CreateBrowserContextParams::default())
        .await
        .map_err(|e| cdp_error("Target.createBrowserContext", e))?;
    let id = made.result.browser_context_id;
    let written = write(browser, calls, &id, context).await;
    if written.is_err() {
        let _ = browser
            .execute(DisposeBrowserContextParams::new(id.clone()))
            .await;
    }
    Ok((id.as_ref().to_owned(), written?))
}

/// Writes `context`'s cookies and storage into context `id`.
async fn write(
    browser: &Browser,
    calls: &Calls,
    id: &BrowserContextId,
    context: &ContextState,
) -> Result<u64, Error> {
    if !context.cookies.is_empty() {
        let params = SetCookiesParams {
            cookies: context.cookies.iter().map(|c| c.to_param()).collect(),
            browser_context_id: Some(id.clone()),
        };
        browser
            .execute(params)
            .await
            .map_err(|e| cdp_error("Storage.setCookies", e))?;
    }
    if context.storage.is_empty() {
        return Ok(0);
    }
    let target = CreateTargetParams {
        browser_context_id: Some(id.clone()),
        ..CreateTargetParams::new("about:blank")
    };
    let page = browser
        .new_page(target)
        .await
        .map_err(|e| cdp_error("Target.createTarget", e))?;
    let storage = Checkpoint::holding(context.storage.clone());
    let written = super::restore(&page, calls, &storage, None).await;
    let _ = page.close().await;
    written
}
