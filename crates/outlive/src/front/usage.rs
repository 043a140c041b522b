//! What a foreign client does with the browser, as the front reads it from the client's own
//! stream: the tab it sent a command to last, the tabs and browser contexts it made, in order.
//! The capture reads it to know which tab to resume in, the tabs' order, and which context is
//! which; the front uses it to show a reconnecting client its tabs in that order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Deserialize;

/// A foreign client of the run's browsers: what it does there, and whether that is progress.
/// Made by whoever starts the front, and handed to the backend (which the capture reads
/// through) beside the options.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pub(crate) usage: Arc<Usage>,
    /// A client's use of the browser counts as progress (`serve`).
    pub(crate) use_is_progress: bool,
}

impl Client {
    /// The client of a command (`run_command`, `serve_task`): it says its progress itself.
    pub(crate) fn of_a_command() -> Client {
        Client {
            usage: Arc::default(),
            use_is_progress: false,
        }
    }

    /// The client of [`serve`](crate::serve): since an agent that serves itself never calls the
    /// control URL, an entry whose client sent the browser a command made progress. Its tabs
    /// are reopened after a death.
    pub(crate) fn served() -> Client {
        Client {
            usage: Arc::new(Usage::served()),
            use_is_progress: true,
        }
    }
}

/// Shared by the front (which writes it) and the capture (which reads it); one per run.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    seen: Mutex<Seen>,
    /// Per browser, by its endpoint (two are up during a rotation).
    browsers: Mutex<HashMap<String, Browser>>,
    /// Whether a restore opens the client's other tabs again (`serve`: its client reconnects
    /// to find them; under `run` the program starts over).
    reopens_tabs: bool,
    /// Client connections carried through deaths, or closed instead.
    carried: Mutex<Carried>,
    /// The swaps under way, and the page loads left to them.
    loads: Arc<super::loads::Loads>,
}

/// The front's account of client connections at deaths, for the wide event.
#[derive(Debug, Default, Clone)]
pub(crate) struct Carried {
    pub(crate) clients: u32,
    pub(crate) longest: std::time::Duration,
    /// Connections closed instead, by reason.
    pub(crate) fallbacks: std::collections::BTreeMap<String, u32>,
}

/// What outlive keeps of one browser for the client.
#[derive(Debug, Default)]
struct Browser {
    /// Contexts made again from a checkpoint (see `checkpoint::contexts`), not handed out yet:
    /// each goes to the client's next `Target.createBrowserContext`.
    contexts: Vec<String>,
    /// The page targets in the client's order: outlive's page (the tab to resume in) first,
    /// then the tabs reopened or made by the client, as they came.
    tabs: Vec<String>,
    /// The tabs a restore opened, each with the dead browser's target it stands for.
    restored: Vec<(String, String)>,
    /// Per tab, the script putting its page state back: run again after a swap's load.
    page_states: HashMap<String, PageStateScript>,
}

/// A script that puts a page's typed fields and scroll positions back (user data: zeroed).
pub(crate) type PageStateScript = Arc<zeroize::Zeroizing<String>>;

#[derive(Debug, Default)]
struct Seen {
    /// The page target the client sent a command to last, in the browser served now.
    last_tab: Option<String>,
    /// The contexts the client made in the browser served now (`Target.createBrowserContext`
    /// answers), in order.
    contexts: Vec<String>,
}

impl Usage {
    /// The usage of `serve`'s client, whose tabs are reopened after a death.
    pub(crate) fn served() -> Usage {
        Usage {
            reopens_tabs: true,
            ..Usage::default()
        }
    }

    /// Whether a restore opens the client's other tabs again.
    pub(crate) fn reopens_tabs(&self) -> bool {
        self.reopens_tabs
    }

    /// The swaps under way, and the page loads left to them.
    pub(crate) fn loads(&self) -> &Arc<super::loads::Loads> {
        &self.loads
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        crate::sync::lock(&self.seen)
    }

    /// A client connection was carried to the next browser in `took`.
    pub(crate) fn client_carried(&self, took: std::time::Duration) {
        let mut carried = crate::sync::lock(&self.carried);
        carried.clients += 1;
        carried.longest = carried.longest.max(took);
    }

    /// A client connection was closed at a death for `reason` (its name).
    pub(crate) fn client_fell_back(&self, reason: &str) {
        let mut carried = crate::sync::lock(&self.carried);
        *carried.fallbacks.entry(reason.to_owned()).or_default() += 1;
    }

    /// The account so far.
    pub(crate) fn carried(&self) -> Carried {
        crate::sync::lock(&self.carried).clone()
    }

    /// A new browser is served: what was seen of the last one means nothing in it.
    pub(crate) fn new_browser(&self) {
        *self.seen() = Seen::default();
    }

    fn browsers(&self) -> MutexGuard<'_, HashMap<String, Browser>> {
        crate::sync::lock(&self.browsers)
    }

    /// Contexts made again in the browser at `endpoint`, in the client's order; they replace
    /// any not handed out yet there. Answers those replaced (to dispose of).
    pub(crate) fn contexts_ready(&self, endpoint: &str, ids: Vec<String>) -> Vec<String> {
        let mut browsers = self.browsers();
        let browser = browsers.entry(endpoint.to_owned()).or_default();
        std::mem::replace(&mut browser.contexts, ids)
    }

    /// The tabs of the browser at `endpoint` in the client's order, outlive's page first.
    pub(crate) fn tabs_ready(&self, endpoint: &str, ids: Vec<String>) {
        self.browsers().entry(endpoint.to_owned()).or_default().tabs = ids;
    }

    /// The tabs of the browser at `endpoint` stand for these (old, new) targets of the browser
    /// its checkpoint was read in: a client kept across the swap finds its pages by them.
    pub(crate) fn restored(&self, endpoint: &str, pairs: Vec<(String, String)>) {
        self.browsers()
            .entry(endpoint.to_owned())
            .or_default()
            .restored = pairs;
    }

    /// The scripts putting the page state of the tabs of the browser at `endpoint` back, by
    /// target: a client carried there loads its pages again, so they run again after.
    pub(crate) fn page_states(&self, endpoint: &str, states: HashMap<String, PageStateScript>) {
        self.browsers()
            .entry(endpoint.to_owned())
            .or_default()
            .page_states = states;
    }

    /// The page state scripts of the browser at `endpoint` (see [`Self::page_states`]).
    pub(crate) fn page_states_of(&self, endpoint: &str) -> HashMap<String, PageStateScript> {
        self.browsers()
            .get(endpoint)
            .map(|b| b.page_states.clone())
            .unwrap_or_default()
    }

    /// The (old, new) target pairs of the browser at `endpoint` (see [`Self::restored`]).
    pub(crate) fn restored_pairs(&self, endpoint: &str) -> Vec<(String, String)> {
        self.browsers()
            .get(endpoint)
            .map(|b| b.restored.clone())
            .unwrap_or_default()
    }

    /// Outlive's page at `endpoint` was replaced by `new`: the new one comes first.
    pub(crate) fn tab_replaced(&self, endpoint: &str, old: &str, new: &str) {
        let mut browsers = self.browsers();
        let tabs = &mut browsers.entry(endpoint.to_owned()).or_default().tabs;
        tabs.retain(|t| t != old);
        tabs.insert(0, new.to_owned());
    }

    /// The client opened tab `id` in the browser at `endpoint` (`Target.createTarget`).
    pub(crate) fn tab_opened(&self, endpoint: &str, id: &str) {
        let mut browsers = self.browsers();
        let tabs = &mut browsers.entry(endpoint.to_owned()).or_default().tabs;
        if !tabs.iter().any(|t| t == id) {
            tabs.push(id.to_owned());
        }
    }

    /// Forgets the tabs of the browser at `endpoint` that are not in `alive` any more.
    pub(crate) fn tabs_alive(&self, endpoint: &str, alive: &[&str]) {
        if let Some(b) = self.browsers().get_mut(endpoint) {
            b.tabs.retain(|t| alive.contains(&t.as_str()));
        }
    }

    /// The tabs of the browser at `endpoint`, in the client's order (those outlive knows of).
    pub(crate) fn tab_order(&self, endpoint: &str) -> Vec<String> {
        self.browsers()
            .get(endpoint)
            .map(|b| b.tabs.clone())
            .unwrap_or_default()
    }

    /// The browser at `endpoint` is gone: its contexts and tabs with it.
    pub(crate) fn browser_gone(&self, endpoint: &str) {
        self.browsers().remove(endpoint);
    }

    /// The next context made again in the browser at `endpoint`, for the client's next
    /// `Target.createBrowserContext`; noted as made by the client.
    pub(crate) fn take_ready(&self, endpoint: &str) -> Option<String> {
        let id = {
            let mut browsers = self.browsers();
            let ids = &mut browsers.get_mut(endpoint)?.contexts;
            if ids.is_empty() {
                return None;
            }
            ids.remove(0)
        };
        self.context_made(&id);
        Some(id)
    }

    /// The contexts made again and not handed out yet in the browser at `endpoint`: hidden from
    /// the client's `Target.getBrowserContexts` until they are.
    pub(crate) fn waiting(&self, endpoint: &str) -> Vec<String> {
        self.browsers()
            .get(endpoint)
            .map(|b| b.contexts.clone())
            .unwrap_or_default()
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
    /// `Target.createTarget` with this id: forward it, and note the tab made.
    CreateTab(u64),
    /// A browser-level `Target.setAutoAttach` with this id: forward it, and order the tabs
    /// the browser attaches in answer.
    AutoAttach(u64),
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
        let watched = [
            "\"Browser.close\"",
            "BrowserContext",
            "Target.createTarget",
            "Target.setAutoAttach",
        ];
        if !watched.iter().any(|m| frame.contains(m)) {
            return Command::Forward;
        }
        let Ok(call) = serde_json::from_str::<Call<'_>>(frame) else {
            return Command::Forward;
        };
        match (call.method, call.id, call.session_id) {
            (Some("Browser.close"), Some(id), None) => Command::CloseBrowser(id),
            (Some("Target.createBrowserContext"), Some(id), None) => Command::CreateContext(id),
            (Some("Target.getBrowserContexts"), Some(id), None) => Command::ListContexts(id),
            (Some("Target.createTarget"), Some(id), None) => Command::CreateTab(id),
            (Some("Target.setAutoAttach"), Some(id), None) => Command::AutoAttach(id),
            _ => Command::Forward,
        }
    }
}

/// The `browserContextId` of a reply to command `id`, if `frame` is that reply.
pub(crate) fn context_created(frame: &str, id: u64) -> Option<String> {
    #[derive(Deserialize)]
    struct Created<'a> {
        #[serde(rename = "browserContextId", borrow)]
        id: &'a str,
    }
    let created: Created<'_> = result_of(frame, id, "\"browserContextId\"")?;
    Some(created.id.to_owned())
}

/// The `targetId` of a reply to command `id`, if `frame` is that reply.
pub(crate) fn tab_created(frame: &str, id: u64) -> Option<String> {
    #[derive(Deserialize)]
    struct Created<'a> {
        #[serde(rename = "targetId", borrow)]
        id: &'a str,
    }
    let created: Created<'_> = result_of(frame, id, "\"targetId\"")?;
    Some(created.id.to_owned())
}

/// The `result` of a reply to command `id`, if `frame` is that reply; a frame without
/// `needle` is not parsed at all.
fn result_of<'a, R: Deserialize<'a>>(frame: &'a str, id: u64, needle: &str) -> Option<R> {
    #[derive(Deserialize)]
    struct Reply<R> {
        id: Option<u64>,
        result: Option<R>,
    }
    if !frame.contains(needle) {
        return None;
    }
    let reply: Reply<R> = serde_json::from_str(frame).ok()?;
    (reply.id == Some(id)).then_some(reply.result)?
}

/// Chromium attaches a client to the tabs that exist in no stable order, so a client that
/// takes the first as current (Playwright MCP, browser-use) would find any of them. This holds
/// the attach events answering a browser-level `Target.setAutoAttach` and lets them go, in the
/// client's tab order, just before the reply.
#[derive(Debug, Default)]
pub(crate) struct AttachOrder {
    /// Ids of the client's browser-level `Target.setAutoAttach` still unanswered.
    asked: Vec<u64>,
    /// The attach events held meanwhile, with their tab's target id.
    held: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct Reply<'a> {
    id: Option<u64>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<&'a str>,
}

impl AttachOrder {
    /// The client sent a browser-level `Target.setAutoAttach` with this id.
    pub(crate) fn asked(&mut self, id: u64) {
        self.asked.push(id);
    }

    /// A message from the browser: `None` to forward it as it is; otherwise the messages to
    /// send in its place (none while attach events are held). `order` is the tab order.
    pub(crate) fn on_browser(
        &mut self,
        frame: &str,
        order: impl FnOnce() -> Vec<String>,
    ) -> Option<Vec<String>> {
        if self.asked.is_empty() {
            return None;
        }
        if frame.contains("\"Target.attachedToTarget\"") {
            let head = serde_json::from_str::<Head<'_>>(frame).ok()?;
            if head.session_id.is_some() {
                return None;
            }
            let a = serde_json::from_str::<Attached<'_>>(frame).ok()?;
            let target = a.params.target_info.map_or("", |t| t.target_id);
            self.held.push((target.to_owned(), frame.to_owned()));
            return Some(Vec::new());
        }
        let reply = serde_json::from_str::<Reply<'_>>(frame).ok()?;
        let id = reply.id.filter(|_| reply.session_id.is_none())?;
        let i = self.asked.iter().position(|&a| a == id)?;
        self.asked.remove(i);
        let order = order();
        let rank = |t: &str| order.iter().position(|o| o == t).unwrap_or(usize::MAX);
        let mut held = std::mem::take(&mut self.held);
        held.sort_by_key(|(t, _)| rank(t));
        let mut frames: Vec<String> = held.into_iter().map(|(_, f)| f).collect();
        frames.push(frame.to_owned());
        Some(frames)
    }
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

    /// An attach event for tab `t`, at the browser level or on session `on`.
    fn attached(t: &str, on: Option<&str>) -> String {
        let session = on.map_or(String::new(), |s| format!(r#","sessionId":"{s}""#));
        format!(
            r#"{{"method":"Target.attachedToTarget","params":{{"sessionId":"S{t}","targetInfo":{{"targetId":"{t}","type":"page"}}}}{session}}}"#
        )
    }

    #[test]
    fn tabs_are_attached_in_the_clients_order() {
        let usage = Usage::default();
        usage.tabs_ready("ws://a", vec!["T1".into(), "T2".into()]);
        assert_eq!(
            Command::of(
                r#"{"id":3,"method":"Target.createTarget","params":{"url":"about:blank"}}"#
            ),
            Command::CreateTab(3)
        );
        assert_eq!(
            tab_created(r#"{"id":3,"result":{"targetId":"T3"}}"#, 3).as_deref(),
            Some("T3")
        );
        usage.tab_opened("ws://a", "T3");
        usage.tab_replaced("ws://a", "T1", "T0");
        assert_eq!(usage.tab_order("ws://a"), ["T0", "T2", "T3"]);
        usage.tabs_alive("ws://a", &["T3", "T0", "T2", "T9"]);
        assert_eq!(usage.tab_order("ws://a"), ["T0", "T2", "T3"]);

        let mut order = AttachOrder::default();
        let tabs = || usage.tab_order("ws://a");
        // Nothing asked: everything passes as it is.
        assert_eq!(order.on_browser(&attached("T3", None), tabs), None);
        assert_eq!(
            Command::of(r#"{"id":5,"method":"Target.setAutoAttach","params":{"autoAttach":true}}"#),
            Command::AutoAttach(5)
        );
        order.asked(5);
        for t in ["X", "T3", "T0", "T2"] {
            assert_eq!(order.on_browser(&attached(t, None), tabs), Some(vec![]));
        }
        // On a session (an iframe's attach), and other replies, pass.
        assert_eq!(order.on_browser(&attached("F", Some("S1")), tabs), None);
        assert_eq!(order.on_browser(r#"{"id":4,"result":{}}"#, tabs), None);
        let sent = order.on_browser(r#"{"id":5,"result":{}}"#, tabs).unwrap();
        let expected = ["T0", "T2", "T3", "X"].map(|t| attached(t, None));
        assert_eq!(sent[..4], expected);
        assert_eq!(sent[4], r#"{"id":5,"result":{}}"#);
        assert_eq!(order.on_browser(&attached("T4", None), tabs), None);
        usage.browser_gone("ws://a");
        assert!(usage.tab_order("ws://a").is_empty());
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
