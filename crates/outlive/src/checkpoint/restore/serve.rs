//! Serving a restore's documents: every request the page makes while `Fetch` interception is
//! on is answered from them, so none reaches the real site.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    EventRequestPaused, FulfillRequestParams, HeaderEntry,
};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use zeroize::Zeroizing;

use super::plan::Documents;
use crate::checkpoint::script::cdp_error;
use crate::error::Error;

/// Starts answering every request the page pauses (`Fetch.requestPaused`) with its document
/// from `documents` (an empty one for any other URL); the task stops when the handle drops.
pub(super) async fn serve_documents(
    page: &Page,
    documents: Documents,
) -> Result<AbortOnDropHandle<()>, Error> {
    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| cdp_error("listening for Fetch.requestPaused", e))?;
    let responder_page = page.clone();
    Ok(AbortOnDropHandle::new(crate::quiet::spawn(async move {
        while let Some(event) = paused.next().await {
            let key = url::Url::parse(&event.request.url)
                .map(|u| format!("{}{}", u.origin().ascii_serialization(), u.path()))
                .unwrap_or_default();
            let body = documents.get(&key).map_or("", |d| d.as_str());
            let t = Instant::now();
            let encoded = Zeroizing::new(BASE64.encode(body.as_bytes()));
            let fulfil = FulfillRequestParams::builder()
                .request_id(event.request_id.clone())
                .response_code(200)
                .response_header(HeaderEntry::new("Content-Type", "text/html; charset=utf-8"))
                .response_header(HeaderEntry::new("Cache-Control", "no-store"))
                .body(encoded.to_string())
                .build();
            if let Ok(fulfil) = fulfil {
                let _ = responder_page.execute(fulfil).await;
            }
            tracing::debug!(bytes = body.len(), took = ?t.elapsed(), "restore document served");
        }
    })))
}
