//! What a foreign client must not see of outlive: the isolated worlds outlive's own
//! connection creates in the pages it shares with the client (the capture's `outlive` world in
//! other-origin frames, chromiumoxide's utility world in every frame). Chromium tells every
//! session with `Runtime.enable` on a target about every world in it, whichever connection
//! made it. A client that picks "the" context of a frame by name or by type could land in
//! outlive's. And Playwright reports console calls of unknown worlds as the page's.
//!
//! Everything else outlive does travels on its own connection (replies, events and sessions
//! are per connection), so this is the one thing to take out of the client's stream.

use std::collections::HashSet;

use serde::Deserialize;

/// The worlds outlive's connection creates.
const OUR_WORLDS: [&str; 2] = ["outlive", "__chromiumoxide_utility_world__"];

/// Drops outlive's execution contexts from one client's stream, remembering them so their
/// destruction is dropped too.
#[derive(Debug, Default)]
pub(crate) struct WorldFilter {
    /// (sessionId, executionContextId) of the contexts held back.
    hidden: HashSet<(Option<String>, i64)>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    context: Option<Context>,
    #[serde(rename = "executionContextId")]
    execution_context_id: Option<i64>,
}

#[derive(Deserialize)]
struct Context {
    id: i64,
    #[serde(default)]
    name: String,
    #[serde(rename = "auxData")]
    aux_data: Option<AuxData>,
}

#[derive(Deserialize)]
struct AuxData {
    #[serde(rename = "type")]
    kind: Option<String>,
}

impl WorldFilter {
    /// Whether the client may see this frame (text, from the browser).
    pub(crate) fn passes(&mut self, frame: &str) -> bool {
        // Almost every frame: no parse.
        if !frame.contains("Runtime.executionContext") {
            return true;
        }
        let Ok(event) = serde_json::from_str::<Event<'_>>(frame) else {
            return true;
        };
        if event.method == Some("Runtime.executionContextsCleared") {
            self.forget_session(event.session_id.as_deref());
            return true;
        }
        let Some(params) = event.params else {
            return true;
        };
        match event.method {
            Some("Runtime.executionContextCreated") => {
                let Some(context) = params.context else {
                    return true;
                };
                let isolated = context
                    .aux_data
                    .and_then(|a| a.kind)
                    .is_some_and(|k| k == "isolated");
                if isolated && OUR_WORLDS.contains(&context.name.as_str()) {
                    self.hidden.insert((event.session_id, context.id));
                    return false;
                }
                true
            }
            Some("Runtime.executionContextDestroyed") => match params.execution_context_id {
                Some(id) => !self.hidden.remove(&(event.session_id, id)),
                None => true,
            },
            _ => true,
        }
    }

    /// The session's contexts are all gone (`Runtime.executionContextsCleared`): forget what
    /// was held back for it.
    fn forget_session(&mut self, session_id: Option<&str>) {
        self.hidden.retain(|(s, _)| s.as_deref() != session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(session: &str, id: i64, name: &str, kind: &str) -> String {
        format!(
            r#"{{"method":"Runtime.executionContextCreated","params":{{"context":{{"id":{id},"origin":"https://a.test","name":"{name}","uniqueId":"u{id}","auxData":{{"isDefault":false,"type":"{kind}","frameId":"F"}}}}}},"sessionId":"{session}"}}"#
        )
    }

    fn destroyed(session: &str, id: i64) -> String {
        format!(
            r#"{{"method":"Runtime.executionContextDestroyed","params":{{"executionContextId":{id},"executionContextUniqueId":"u{id}"}},"sessionId":"{session}"}}"#
        )
    }

    #[test]
    fn outlives_worlds_and_their_end_are_held_back() {
        let mut f = WorldFilter::default();
        assert!(!f.passes(&created("S", 7, "outlive", "isolated")));
        assert!(!f.passes(&created(
            "S",
            8,
            "__chromiumoxide_utility_world__",
            "isolated"
        )));
        assert!(!f.passes(&destroyed("S", 7)));
        // Once: a later context with the same id in another session is someone else's.
        assert!(f.passes(&destroyed("T", 8)));
        assert!(!f.passes(&destroyed("S", 8)));
    }

    #[test]
    fn the_clients_own_worlds_and_everything_else_pass() {
        let mut f = WorldFilter::default();
        assert!(f.passes(&created("S", 1, "", "default")));
        assert!(f.passes(&created("S", 2, "__playwright_utility_world__", "isolated")));
        // A page may name a default context anything: only isolated worlds are held back.
        assert!(f.passes(&created("S", 3, "outlive", "default")));
        assert!(f.passes(&destroyed("S", 1)));
        assert!(f.passes(r#"{"id":3,"result":{}}"#));
        assert!(f.passes(r#"{"method":"Page.frameNavigated","params":{"frame":{}}}"#));
        // A page's own text that merely mentions the method is not an event of it.
        assert!(f.passes(r#"{"id":4,"result":{"result":{"type":"string","value":"Runtime.executionContextCreated"}}}"#));
        assert!(f.passes("not json, Runtime.executionContextCreated"));
    }

    #[test]
    fn a_cleared_session_is_forgotten() {
        let mut f = WorldFilter::default();
        assert!(!f.passes(&created("S", 7, "outlive", "isolated")));
        assert!(f.passes(
            r#"{"method":"Runtime.executionContextsCleared","params":{},"sessionId":"S"}"#
        ));
        assert!(f.passes(&destroyed("S", 7)));
    }
}
