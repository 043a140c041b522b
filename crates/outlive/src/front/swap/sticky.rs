//! The client's sticky state, as the commands that set it: recorded at their successful
//! reply, the latest value of each, to replay on a new browser (issue 51 design, §3).
//!
//! Chromium keeps the like per session (`DevToolsSession::session_state_cookie_`) and hands
//! it to a new renderer. The front cannot see the renderer's state, so it keeps the
//! commands. A command never answered is re-sent instead, so nothing applies twice. Commands
//! are kept as the client wrote them, in its ids: the replay goes through the rewriter.

use std::collections::HashMap;

use serde::Deserialize;

use super::rewrite::member;
use crate::relay::wire::Head;

/// Domains whose `enable` is replayed (their `disable` forgets it): events to subscribe to,
/// nothing the front cannot set again.
const REPLAYED_DOMAINS: [&str; 18] = [
    "Accessibility",
    "Animation",
    "Audits",
    "CSS",
    "DOM",
    "DOMStorage",
    "Inspector",
    "LayerTree",
    "Log",
    "Media",
    "Network",
    "Overlay",
    "Page",
    "Performance",
    "Runtime",
    "Security",
    "ServiceWorker",
    "WebMCP",
];

/// Setters whose latest call wins, by method (besides `Emulation.set*`).
const BY_METHOD: [&str; 16] = [
    "Input.setInterceptDrags",
    "Network.emulateNetworkConditions",
    "Network.emulateNetworkConditionsByRule",
    "Network.overrideNetworkState",
    "Network.setBlockedURLs",
    "Network.setBypassServiceWorker",
    "Network.setCacheDisabled",
    "Network.setExtraHTTPHeaders",
    "Network.setUserAgentOverride",
    "Page.setBypassCSP",
    "Page.setFontFamilies",
    "Page.setFontSizes",
    "Page.setInterceptFileChooserDialog",
    "Page.setLifecycleEventsEnabled",
    "Security.setIgnoreCertificateErrors",
    "Target.setDiscoverTargets",
];

/// Setters that are not state to replay: they act on the current document, or write what
/// the checkpoint carries (replaying would roll it back), or make what the restore makes.
const NOT_STATE: [&str; 11] = [
    "Browser.setWindowBounds",
    "DOMStorage.setDOMStorageItem",
    "Network.setCookie",
    "Network.setCookies",
    "Page.addCompilationCache",
    "Page.createIsolatedWorld",
    "Page.setDocumentContent",
    "Runtime.setAsyncCallStackDepth",
    "Runtime.setMaxCallStackSizeToCapture",
    "Storage.setCookies",
    "Target.createBrowserContext",
];

/// Domains whose setters act on the current document only (nodes, styles, highlights).
const DOCUMENT_DOMAINS: [&str; 4] = ["CSS", "DOM", "Overlay", "Animation"];

/// What the latest value is kept under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// A setter by method.
    Method(String),
    /// `X.enable`, with its params.
    Domain(String),
    /// An init script, by the client's identifier.
    Script(String),
    /// `Runtime.addBinding`, by name and world.
    Binding { name: String, world: Option<String> },
    /// `Browser.grantPermissions`, by browser context and origin.
    Grant {
        context: Option<String>,
        origin: Option<String>,
    },
    /// `Browser.setPermission`, by browser context, origin and permission.
    Permission {
        context: Option<String>,
        origin: Option<String>,
        name: String,
    },
    /// `Browser.setDownloadBehavior`, by browser context.
    Downloads { context: Option<String> },
}

/// What a successful command does to the state.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    Set(Key),
    Forget(Key),
    /// `Runtime.removeBinding`: the binding in every world.
    ForgetBinding(String),
    /// `Browser.resetPermissions`: every permission of a browser context.
    ForgetPermissions(Option<String>),
    Nothing,
}

/// The params fields that key the state.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Args {
    name: Option<String>,
    execution_context_name: Option<String>,
    execution_context_id: Option<i64>,
    browser_context_id: Option<String>,
    origin: Option<String>,
    identifier: Option<String>,
    permission: Option<Named>,
}

#[derive(Debug, Deserialize)]
struct Named {
    name: String,
}

impl Args {
    /// The fields of `json`, as far as serde reads them (a lone surrogate mended first).
    fn of(json: &str) -> Args {
        super::rewrite::read(Some(json))
    }
}

/// What the successful command `method` with `params` (answered `result`) does.
fn effect(method: &str, params: &Args, result: &Args) -> Effect {
    let Some((domain, name)) = method.split_once('.') else {
        return Effect::Nothing;
    };
    let by_method = || Effect::Set(Key::Method(method.to_owned()));
    match (domain, name) {
        ("Target", "setAutoAttach") => by_method(),
        (_, _) if BY_METHOD.contains(&method) => by_method(),
        (_, "enable") if REPLAYED_DOMAINS.contains(&domain) => {
            Effect::Set(Key::Domain(domain.to_owned()))
        }
        (_, "disable") => Effect::Forget(Key::Domain(domain.to_owned())),
        ("Page", "addScriptToEvaluateOnNewDocument" | "addScriptToEvaluateOnLoad") => {
            match &result.identifier {
                Some(id) => Effect::Set(Key::Script(id.clone())),
                None => Effect::Nothing,
            }
        }
        ("Page", "removeScriptToEvaluateOnNewDocument" | "removeScriptToEvaluateOnLoad") => {
            match &params.identifier {
                Some(id) => Effect::Forget(Key::Script(id.clone())),
                None => Effect::Nothing,
            }
        }
        ("Runtime", "addBinding") => match (&params.name, params.execution_context_id) {
            (Some(name), None) => Effect::Set(Key::Binding {
                name: name.clone(),
                world: params.execution_context_name.clone(),
            }),
            _ => Effect::Nothing,
        },
        ("Runtime", "removeBinding") => match &params.name {
            Some(name) => Effect::ForgetBinding(name.clone()),
            None => Effect::Nothing,
        },
        ("Emulation", "resetPageScaleFactor") => {
            Effect::Forget(Key::Method("Emulation.setPageScaleFactor".into()))
        }
        ("Emulation", _) if name.starts_with("set") => by_method(),
        ("Emulation", _) if name.starts_with("clear") && name.ends_with("Override") => {
            let set = format!("Emulation.set{}", &name["clear".len()..]);
            Effect::Forget(Key::Method(set))
        }
        ("Browser", "grantPermissions") => Effect::Set(Key::Grant {
            context: params.browser_context_id.clone(),
            origin: params.origin.clone(),
        }),
        ("Browser", "setPermission") => match &params.permission {
            Some(permission) => Effect::Set(Key::Permission {
                context: params.browser_context_id.clone(),
                origin: params.origin.clone(),
                name: permission.name.clone(),
            }),
            None => Effect::Nothing,
        },
        ("Browser", "resetPermissions") => {
            Effect::ForgetPermissions(params.browser_context_id.clone())
        }
        ("Browser", "setDownloadBehavior") => Effect::Set(Key::Downloads {
            context: params.browser_context_id.clone(),
        }),
        _ => Effect::Nothing,
    }
}

/// Whether the front knows what to do with setter `method` at a swap: replay it, or nothing
/// (it is not state). A setter it does not know makes the connection fall back.
pub(super) fn known(method: &str) -> bool {
    let (domain, name) = method.split_once('.').unwrap_or((method, ""));
    let args = Args {
        // The keys' fields, so that a keyed setter counts as recorded.
        name: Some(String::new()),
        identifier: Some(String::new()),
        permission: Some(Named {
            name: String::new(),
        }),
        ..Args::default()
    };
    effect(method, &args, &args) != Effect::Nothing
        || NOT_STATE.contains(&method)
        || (DOCUMENT_DOMAINS.contains(&domain) && name != "enable")
}

/// One recorded command.
#[derive(Clone, Debug)]
struct Entry {
    /// When it was recorded: the replay keeps the order.
    seq: u64,
    method: String,
    /// Its params, as the client wrote them (`{}` when it sent none).
    params: String,
}

/// A command to replay, in the client's ids.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Replay<'s> {
    pub(super) method: &'s str,
    pub(super) params: &'s str,
    /// An init script's identifier, the client's: pair it with the new browser's answer.
    pub(super) script: Option<&'s str>,
}

impl Replay<'_> {
    /// The command as a frame with `id`, on the client's `session`.
    pub(super) fn frame(&self, id: u64, session: Option<&str>) -> String {
        let method = serde_json::Value::from(self.method);
        match session {
            Some(s) => {
                let session = serde_json::Value::from(s);
                format!(
                    r#"{{"id":{id},"method":{method},"sessionId":{session},"params":{}}}"#,
                    self.params
                )
            }
            None => format!(
                r#"{{"id":{id},"method":{method},"params":{}}}"#,
                self.params
            ),
        }
    }
}

/// The sticky state of one client, per session (`None`: the browser session).
#[derive(Debug, Default)]
pub(super) struct Sticky {
    sessions: HashMap<Option<String>, HashMap<Key, Entry>>,
    seq: u64,
}

impl Sticky {
    /// The client's `command` was answered `reply`: if it succeeded and set state, the
    /// state is now its value.
    pub(super) fn answered(&mut self, command: &str, reply: &str) {
        if member(reply, "error").is_some() {
            return;
        }
        let Some(result) = member(reply, "result") else {
            return;
        };
        let head = Head::of(command.as_bytes());
        let Some(method) = head.method.as_deref() else {
            return;
        };
        let params = member(command, "params").unwrap_or("{}");
        let effect = effect(method, &Args::of(params), &Args::of(result));
        let state = self
            .sessions
            .entry(head.session_id.map(|s| s.into_owned()))
            .or_default();
        match effect {
            Effect::Set(key) => {
                self.seq += 1;
                let entry = Entry {
                    seq: self.seq,
                    method: method.to_owned(),
                    params: params.to_owned(),
                };
                state.insert(key, entry);
            }
            Effect::Forget(key) => {
                state.remove(&key);
            }
            Effect::ForgetBinding(name) => {
                state.retain(|k, _| !matches!(k, Key::Binding { name: n, .. } if *n == name));
            }
            Effect::ForgetPermissions(context) => state.retain(|k, _| match k {
                Key::Grant { context: c, .. } | Key::Permission { context: c, .. } => *c != context,
                _ => true,
            }),
            Effect::Nothing => {}
        }
    }

    /// Forgets a client session that is gone.
    pub(super) fn session_gone(&mut self, session: &str) {
        self.sessions.remove(&Some(session.to_owned()));
    }

    /// What to replay on `session` (`None`: the browser session), in order. On the browser
    /// session, the browser's own state comes first, then discovery, then auto-attach (its
    /// attach events drive the sessions' replay). On a session, the order the client set it.
    pub(super) fn replay(&self, session: Option<&str>) -> Vec<Replay<'_>> {
        let Some(state) = self.sessions.get(&session.map(str::to_owned)) else {
            return Vec::new();
        };
        let mut entries: Vec<(&Key, &Entry)> = state.iter().collect();
        let rank = |e: &Entry| match (session, e.method.as_str()) {
            (None, "Target.setDiscoverTargets") => 1,
            (None, "Target.setAutoAttach") => 2,
            _ => 0,
        };
        entries.sort_by_key(|(_, e)| (rank(e), e.seq));
        entries
            .into_iter()
            .map(|(key, e)| Replay {
                method: &e.method,
                params: &e.params,
                script: match key {
                    Key::Script(id) => Some(id),
                    _ => None,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
