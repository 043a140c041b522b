//! Closing the pages a program should not find: a browser starts with a tab of its own, and
//! outlive opened another. Waits for each to be gone (`Target.targetDestroyed`), since
//! `Target.closeTarget` answers first, and a program connecting at once would see it.

use std::collections::HashSet;
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ErrorKind};

/// How long closing the other pages may take before the program is served anyway.
const LIMIT: Duration = Duration::from_secs(5);

/// Closes every page but those in `keep` (the task's page and, under `serve`, the tabs
/// reopened). Best effort: a page left over only means the program sees one more.
pub(super) async fn only_these(endpoint: &CdpEndpoint, keep: &[String]) {
    let closed = tokio::time::timeout(LIMIT, close_others(endpoint, keep)).await;
    if !matches!(closed, Ok(Ok(()))) {
        tracing::debug!("could not close the browser's other pages");
    }
}

/// The pages to close and those gone, as the browser's target events tell.
#[derive(Default)]
struct Pages {
    others: HashSet<String>,
    gone: HashSet<String>,
}

impl Pages {
    /// Notes a `Target.targetCreated` or `Target.targetDestroyed` event.
    fn note(&mut self, message: &Value, keep: &[String]) {
        let params = &message["params"];
        match message["method"].as_str() {
            Some("Target.targetCreated") => {
                let info = &params["targetInfo"];
                let Some(id) = info["targetId"].as_str() else {
                    return;
                };
                if info["type"] == "page" && !keep.iter().any(|k| k == id) {
                    self.others.insert(id.to_owned());
                }
            }
            Some("Target.targetDestroyed") => {
                if let Some(id) = params["targetId"].as_str() {
                    self.gone.insert(id.to_owned());
                }
            }
            _ => {}
        }
    }

    fn all_gone(&self) -> bool {
        self.others.is_subset(&self.gone)
    }
}

async fn close_others(endpoint: &CdpEndpoint, keep: &[String]) -> Result<(), Error> {
    let cdp = |e| Error::new(ErrorKind::Cdp, "the browser's other pages").with_source(e);
    let mut ws = crate::websocket::connect(endpoint, |socket| socket)
        .await
        .map_err(cdp)?;
    // Discovery reports every target there is, then each one destroyed.
    let discover =
        json!({"id": 1, "method": "Target.setDiscoverTargets", "params": {"discover": true}});
    ws.send(Message::text(discover.to_string()))
        .await
        .map_err(cdp)?;
    let mut pages = Pages::default();
    let mut asked = false;
    while let Some(message) = ws.next().await {
        let Message::Text(text) = message.map_err(cdp)? else {
            continue;
        };
        let message: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
        pages.note(&message, keep);
        if !asked && message["id"] == 1 {
            asked = true;
            for (n, target) in (2u64..).zip(pages.others.difference(&pages.gone)) {
                let close = json!({"id": n, "method": "Target.closeTarget", "params": {"targetId": target}});
                ws.send(Message::text(close.to_string()))
                    .await
                    .map_err(cdp)?;
            }
        }
        if asked && pages.all_gone() {
            break;
        }
    }
    let _ = ws.close(None).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_not_kept_are_waited_for_until_destroyed() {
        let keep = ["kept".to_owned()];
        let created = |id: &str, kind: &str| json!({"method": "Target.targetCreated", "params": {"targetInfo": {"targetId": id, "type": kind}}});
        let mut pages = Pages::default();
        for event in [
            created("kept", "page"),
            created("worker", "service_worker"),
            created("blank", "page"),
        ] {
            pages.note(&event, &keep);
        }
        assert_eq!(pages.others, HashSet::from(["blank".to_owned()]));
        assert!(!pages.all_gone());
        let destroyed =
            |id: &str| json!({"method": "Target.targetDestroyed", "params": {"targetId": id}});
        pages.note(&destroyed("kept"), &keep);
        assert!(!pages.all_gone());
        pages.note(&destroyed("blank"), &keep);
        assert!(pages.all_gone());
    }
}
