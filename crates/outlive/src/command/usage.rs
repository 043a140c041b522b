//! What a foreign client does with the browser, as the front reads it from the client's own
//! stream: the tab it sent a command to last, and the browser contexts it made, in order. The
//! capture reads it to know which tab is the one to resume in, and which context is which.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Deserialize;

/// Shared by the front (which writes it) and the capture (which reads it); one per run.
#[derive(Debug, Default)]
pub(crate) struct Usage(Mutex<Seen>, Mutex<Ready>);

/// Contexts made again from a checkpoint (see `checkpoint::contexts`), by the browser they are
/// in (its endpoint): handed out in order to the client's `Target.createBrowserContext`.
#[derive(Debug, Default)]
struct Ready(HashMap<String, Vec<String>>);

#[derive(Debug, Default)]
struct Seen {
    /// The page target the client sent a command to last, in the browser served now.
    last_tab: Option<String>,
    /// The contexts the client made in the browser served now (`Target.createBrowserContext`
    /// answers), in order.
    contexts: Vec<String>,
}

impl Usage {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new browser is served: what was seen of the last one means nothing in it.
    pub(crate) fn new_browser(&self) {
        *self.seen() = Seen::default();
    }

    fn ready(&self) -> MutexGuard<'_, Ready> {
        self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Contexts made again in the browser at `endpoint`, in the client's order; they replace
    /// any not handed out yet there. Answers those replaced (to dispose of).
    pub(crate) fn contexts_ready(&self, endpoint: &str, ids: Vec<String>) -> Vec<String> {
        self.ready()
            .0
            .insert(endpoint.to_owned(), ids)
            .unwrap_or_default()
    }

    /// The browser at `endpoint` is gone: its contexts with it.
    pub(crate) fn browser_gone(&self, endpoint: &str) {
        self.ready().0.remove(endpoint);
    }

    /// The next context made again in the browser at `endpoint`, for the client's next
    /// `Target.createBrowserContext`; noted as made by the client.
    pub(crate) fn take_ready(&self, endpoint: &str) -> Option<String> {
        let id = {
            let mut ready = self.ready();
            let ids = ready.0.get_mut(endpoint).filter(|ids| !ids.is_empty())?;
            ids.remove(0)
        };
        self.context_made(&id);
        Some(id)
    }

    /// The contexts made again and not handed out yet in the browser at `endpoint`: hidden from
    /// the client's `Target.getBrowserContexts` until they are.
    pub(crate) fn waiting(&self, endpoint: &str) -> Vec<String> {
        self.ready().0.get(endpoint).cloned().unwrap_or_default()
    }

    /// The page target the client used last, if it used one.
    pub(crate) fn last_tab(&self) -> Option<String> {
        self.seen().last_tab.clone()
    }

    /// The contexts the client made, in order.
    pub(crate) fn contexts(&self) -> Vec<String> {
        self.seen().contexts.clone()
    }

    fn used(&self, target: &str) {
        let mut seen = self.seen();
        if seen.last_tab.as_deref() != Some(target) {
            seen.last_tab = Some(target.to_owned());
        }
    }

    /// The client made context `id`; answers its place among the client's contexts (0 first).
    pub(crate) fn context_made(&self, id: &str) -> usize {
        let mut seen = self.seen();
        seen.contexts.push(id.to_owned());
        seen.contexts.len() - 1
    }
}

/// One client connection's view: its sessions' targets, learned from the browser's
/// `Target.attachedToTarget` events on that connection (sessions are per connection).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// sessionId → targetId, for page targets.
    pages: HashMap<String, String>,
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(rename = "sessionId")]
    session_id: Option<&'a str>,
}

#[derive(Deserialize)]
struct Attached<'a> {
    #[serde(borrow)]
    params: AttachedParams<'a>,
}

#[derive(Deserialize)]
struct AttachedParams<'a> {
    #[serde(rename = "sessionId", borrow)]
    session_id: &'a str,
    #[serde(rename = "targetInfo")]
    target_info: Option<TargetInfo<'a>>,
}

#[derive(Deserialize)]
struct TargetInfo<'a> {
    #[serde(rename = "targetId", borrow)]
    target_id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
}

impl Sessions {
    /// A message from the browser: learns page sessions as they attach and forgets them as
    /// they detach. Only attach and detach events are parsed.
    pub(crate) fn on_browser(&mut self, frame: &str) {
        if !frame.contains("\"Target.attachedToTarget\"")
            && !frame.contains("\"Target.detachedFromTarget\"")
        {
            return;
        }
        let Ok(head) = serde_json::from_str::<Head<'_>>(frame) else {
            return;
        };
        match head.method {
            Some("Target.attachedToTarget") => {
                let Ok(a) = serde_json::from_str::<Attached<'_>>(frame) else {
                    return;
                };
                if let Some(t) = a.params.target_info.filter(|t| t.kind == "page") {
                    self.pages
                        .insert(a.params.session_id.to_owned(), t.target_id.to_owned());
                }
            }
            Some("Target.detachedFromTarget") => {
                if let Ok(a) = serde_json::from_str::<Attached<'_>>(frame) {
                    self.pages.remove(a.params.session_id);
                }
            }
            _ => {}
        }
    }

    /// The page target of session `session`, if it is a page's.
    pub(crate) fn target(&self, session: &str) -> Option<String> {
        self.pages.get(session).cloned()
    }

    /// A command from the client: a command on a page's session marks that tab used.
    pub(crate) fn on_client(&self, frame: &str, usage: &Usage) {
        if !frame.contains("\"sessionId\"") {
            return;
        }
        let Ok(head) = serde_json::from_str::<Head<'_>>(frame) else {
            return;
        };
        if let Some(target) = head.session_id.and_then(|s| self.pages.get(s)) {
            usage.used(target);
        }
    }
}

/// What the front does with a command from the client before forwarding it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Forward it.
    Forward,
    /// `Browser.close` (Puppeteer's `browser.close()`): the client is done with the browser,
    /// which is no death. Answer it with this id and close the client's connection.
    CloseBrowser(u64),
    /// `Target.createBrowserContext` with this id: forward it, and note the context made.
    CreateContext(u64),
    /// `Target.getBrowserContexts` with this id: contexts not handed out yet are held back.
    ListContexts(u64),
}

#[derive(Deserialize)]
struct Call<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(rename = "sessionId")]
    session_id: Option<&'a str>,
}

impl Command {
    /// Reads a client's command: only the few browser-level ones the front acts on.
    pub(crate) fn of(frame: &str) -> Command {
        if !frame.contains("\"Browser.close\"") && !frame.contains("BrowserContext") {
            return Command::Forward;
        }
        let Ok(call) = serde_json::from_str::<Call<'_>>(frame) else {
            return Command::Forward;
        };
        match (call.method, call.id, call.session_id) {
            (Some("Browser.close"), Some(id), None) => Command::CloseBrowser(id),
            (Some("Target.createBrowserContext"), Some(id), None) => Command::CreateContext(id),
            (Some("Target.getBrowserContexts"), Some(id), None) => Command::ListContexts(id),
            _ => Command::Forward,
        }
    }
}

/// The `browserContextId` of a reply to command `id`, if `frame` is that reply.
pub(crate) fn context_created(frame: &str, id: u64) -> Option<String> {
    #[derive(Deserialize)]
    struct Reply<'a> {
        id: Option<u64>,
        #[serde(borrow)]
        result: Option<Created<'a>>,
    }
    #[derive(Deserialize)]
    struct Created<'a> {
        #[serde(rename = "browserContextId", borrow)]
        id: &'a str,
    }
    if !frame.contains("\"browserContextId\"") {
        return None;
    }
    let reply: Reply<'_> = serde_json::from_str(frame).ok()?;
    (reply.id == Some(id)).then(|| reply.result.map(|r| r.id.to_owned()))?
}

/// The reply to the client's `Target.getBrowserContexts` `id` without the contexts in `hide`;
/// `None` if `frame` is not that reply or hides none of them.
pub(crate) fn without_contexts(frame: &str, id: u64, hide: &[String]) -> Option<String> {
    let mut reply: serde_json::Value = serde_json::from_str(frame).ok()?;
    if reply["id"].as_u64() != Some(id) {
        return None;
    }
    let ids = reply["result"]["browserContextIds"].as_array_mut()?;
    ids.retain(|c| !c.as_str().is_some_and(|c| hide.iter().any(|h| h == c)));
    Some(reply.to_string())
}

/// The reply the front gives to a `Target.createBrowserContext` with a context made again.
pub(crate) fn context_reply(id: u64, context: &str) -> String {
    serde_json::json!({ "id": id, "result": { "browserContextId": context } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tab_used_last_is_the_one_a_page_command_went_to() {
        let usage = Usage::default();
        let mut sessions = Sessions::default();
        sessions.on_browser(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"A","targetInfo":{"targetId":"T1","type":"page"}}}"#);
        sessions.on_browser(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"B","targetInfo":{"targetId":"T2","type":"page"}}}"#);
        sessions.on_browser(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"W","targetInfo":{"targetId":"T3","type":"worker"}}}"#);
        assert_eq!(usage.last_tab(), None);
        sessions.on_client(
            r#"{"id":1,"method":"Page.navigate","sessionId":"B"}"#,
            &usage,
        );
        assert_eq!(usage.last_tab().as_deref(), Some("T2"));
        sessions.on_client(
            r#"{"id":2,"method":"Runtime.evaluate","sessionId":"W"}"#,
            &usage,
        );
        sessions.on_client(r#"{"id":3,"method":"Target.getTargets"}"#, &usage);
        assert_eq!(usage.last_tab().as_deref(), Some("T2"));
        sessions.on_client(
            r#"{"id":4,"method":"Page.navigate","sessionId":"A"}"#,
            &usage,
        );
        assert_eq!(usage.last_tab().as_deref(), Some("T1"));
        sessions.on_browser(r#"{"method":"Target.detachedFromTarget","params":{"sessionId":"A"}}"#);
        sessions.on_client(
            r#"{"id":5,"method":"Page.navigate","sessionId":"A"}"#,
            &usage,
        );
        assert_eq!(usage.last_tab().as_deref(), Some("T1"));
        usage.new_browser();
        assert_eq!(usage.last_tab(), None);
    }

    #[test]
    fn contexts_made_again_are_handed_out_in_order_and_hidden_until_then() {
        let usage = Usage::default();
        assert_eq!(usage.take_ready("ws://a"), None);
        usage.contexts_ready("ws://a", vec!["C1".into(), "C2".into()]);
        assert_eq!(usage.take_ready("ws://b"), None);
        assert_eq!(usage.waiting("ws://a"), ["C1", "C2"]);
        let list = r#"{"id":4,"result":{"browserContextIds":["C1","C2","X"]}}"#;
        let hidden = without_contexts(list, 4, &usage.waiting("ws://a")).unwrap();
        assert_eq!(hidden, r#"{"id":4,"result":{"browserContextIds":["X"]}}"#);
        assert_eq!(usage.take_ready("ws://a").as_deref(), Some("C1"));
        assert_eq!(usage.contexts(), ["C1"]);
        assert_eq!(usage.waiting("ws://a"), ["C2"]);
        usage.browser_gone("ws://a");
        assert_eq!(usage.take_ready("ws://a"), None);
    }

    #[test]
    fn browser_close_and_new_contexts_are_recognised() {
        assert_eq!(
            Command::of(r#"{"id":7,"method":"Browser.close"}"#),
            Command::CloseBrowser(7)
        );
        assert_eq!(
            Command::of(
                r#"{"id":8,"method":"Target.createBrowserContext","params":{"disposeOnDetach":true}}"#
            ),
            Command::CreateContext(8)
        );
        // On a session, or inside a string, it is something else.
        assert_eq!(
            Command::of(r#"{"id":9,"method":"Browser.close","sessionId":"S"}"#),
            Command::Forward
        );
        assert_eq!(
            Command::of(
                r#"{"id":10,"method":"Runtime.evaluate","params":{"expression":"'Browser.close'"}}"#
            ),
            Command::Forward
        );
        assert_eq!(
            context_created(r#"{"id":8,"result":{"browserContextId":"C1"}}"#, 8).as_deref(),
            Some("C1")
        );
        assert_eq!(
            context_created(r#"{"id":9,"result":{"browserContextId":"C1"}}"#, 8),
            None
        );
    }
}
