//! The client's ids against the current browser's, per kind (issue 51 design, §2).
//!
//! * Tokens (sessions, targets and main frames, browser contexts): a two-way map. Chrome's
//!   tokens are random, so one the map does not know passes unchanged both ways.
//! * Script identifiers: Chrome counts them per session, so a new browser's collide with the
//!   old one's. A two-way map per client session; after a swap, each new one gets a fresh
//!   name above every name the client was given.
//! * Execution contexts: renewed by every document. After a swap the client sees the new
//!   browser's ids plus an offset above any id it saw, so a stale id fails in Chrome.
//!
//! Until the first swap every map is the identity.

use std::collections::HashMap;

use super::rewrite::Translate;
use super::shape::Kind;

/// Which way a frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Way {
    /// A command from the client: its ids become the browser's.
    ToBrowser,
    /// A reply or event from the browser: its ids become the client's.
    ToClient,
}

/// Ids paired one to one: the client's and the browser's.
#[derive(Clone, Debug, Default)]
struct Pairs {
    to_browser: HashMap<String, String>,
    to_client: HashMap<String, String>,
}

impl Pairs {
    /// Pairs `client` with `browser`, dropping what either was paired with.
    fn bind(&mut self, client: &str, browser: &str) {
        if let Some(old) = self.to_browser.remove(client) {
            self.to_client.remove(&old);
        }
        if let Some(old) = self.to_client.remove(browser) {
            self.to_browser.remove(&old);
        }
        self.to_browser
            .insert(client.to_owned(), browser.to_owned());
        self.to_client.insert(browser.to_owned(), client.to_owned());
    }

    fn get(&self, way: Way, id: &str) -> Option<&String> {
        match way {
            Way::ToBrowser => self.to_browser.get(id),
            Way::ToClient => self.to_client.get(id),
        }
    }

    fn clear(&mut self) {
        self.to_browser.clear();
        self.to_client.clear();
    }
}

/// One client session's script identifiers.
#[derive(Clone, Debug, Default)]
struct Scripts {
    pairs: Pairs,
    /// The highest number the client was given as a name.
    highest: u64,
}

/// A client's ids against the current browser's (one per client connection, across
/// browsers).
#[derive(Clone, Debug, Default)]
pub(super) struct IdMaps {
    /// How many swaps the client went through.
    swaps: u32,
    /// Targets and main frames (a main frame's id is its target's).
    targets: Pairs,
    sessions: Pairs,
    browser_contexts: Pairs,
    /// By client session (`None`: the browser session).
    scripts: HashMap<Option<String>, Scripts>,
    /// The client's execution context id is the browser's plus this.
    offset: i64,
    /// The highest execution context id the client was shown.
    highest_context: i64,
}

impl IdMaps {
    /// Whether every id is the browser's: no swap yet.
    pub(super) fn is_identity(&self) -> bool {
        self.swaps == 0
    }

    /// A new browser: every pairing is stale. Contexts are offset above the highest the
    /// client saw; scripts named above the highest it was given.
    pub(super) fn swapped(&mut self) {
        self.swaps += 1;
        self.targets.clear();
        self.sessions.clear();
        self.browser_contexts.clear();
        for scripts in self.scripts.values_mut() {
            scripts.pairs.clear();
        }
        self.offset = self.offset.max(self.highest_context);
    }

    /// Pairs the client's token `client` of `kind` with the new browser's `browser`.
    /// Frames share the targets' map. Scripts and contexts are not tokens: see
    /// [`Self::bind_script`].
    pub(super) fn bind(&mut self, kind: Kind, client: &str, browser: &str) {
        match kind {
            Kind::Session => self.sessions.bind(client, browser),
            Kind::Target | Kind::Frame => self.targets.bind(client, browser),
            Kind::BrowserContext => self.browser_contexts.bind(client, browser),
            Kind::Script | Kind::ExecutionContext => {
                debug_assert!(false, "{kind:?} is not a token kind");
            }
        }
    }

    /// Pairs the client's script `client` on its `session` with the browser's `browser`
    /// (a replayed `addScriptToEvaluateOnNewDocument`'s answer).
    pub(super) fn bind_script(&mut self, session: Option<&str>, client: &str, browser: &str) {
        let scripts = self.scripts.entry(session.map(str::to_owned)).or_default();
        scripts.pairs.bind(client, browser);
        scripts.highest = scripts.highest.max(client.parse().unwrap_or(0));
    }

    /// Forgets a client session's scripts (it is gone).
    pub(super) fn session_gone(&mut self, session: &str) {
        self.scripts.remove(&Some(session.to_owned()));
    }

    /// The translation of ids going `way`.
    pub(super) fn toward(&mut self, way: Way) -> Toward<'_> {
        Toward { maps: self, way }
    }

    fn tokens(&self, kind: Kind) -> Option<&Pairs> {
        match kind {
            Kind::Session => Some(&self.sessions),
            Kind::Target | Kind::Frame => Some(&self.targets),
            Kind::BrowserContext => Some(&self.browser_contexts),
            Kind::Script | Kind::ExecutionContext => None,
        }
    }

    /// The client's name for script `id` on its `session`, minted after a swap.
    fn script_to_client(&mut self, session: Option<&str>, id: &str) -> Option<String> {
        let swapped = !self.is_identity();
        let scripts = self.scripts.entry(session.map(str::to_owned)).or_default();
        if let Some(known) = scripts.pairs.get(Way::ToClient, id) {
            return Some(known.clone());
        }
        let Ok(number) = id.parse::<u64>() else {
            return None; // not Chrome's counter: leave it
        };
        if !swapped {
            scripts.highest = scripts.highest.max(number);
            return None;
        }
        scripts.highest += 1;
        let name = scripts.highest.to_string();
        scripts.pairs.bind(&name, id);
        Some(name)
    }
}

/// [`IdMaps`] translating one way.
pub(super) struct Toward<'m> {
    maps: &'m mut IdMaps,
    way: Way,
}

impl Translate for Toward<'_> {
    fn text(&mut self, kind: Kind, id: &str, session: Option<&str>) -> Option<String> {
        if let Some(pairs) = self.maps.tokens(kind) {
            return pairs.get(self.way, id).cloned();
        }
        match (kind, self.way) {
            (Kind::Script, Way::ToClient) => self.maps.script_to_client(session, id),
            (Kind::Script, Way::ToBrowser) => {
                let scripts = self.maps.scripts.get(&session.map(str::to_owned))?;
                scripts.pairs.get(Way::ToBrowser, id).cloned()
            }
            _ => None,
        }
    }

    fn number(&mut self, kind: Kind, id: i64, _session: Option<&str>) -> Option<i64> {
        if kind != Kind::ExecutionContext {
            return None;
        }
        let maps = &mut *self.maps;
        let out = match self.way {
            Way::ToClient => {
                let client = id.saturating_add(maps.offset);
                maps.highest_context = maps.highest_context.max(client);
                client
            }
            // A context of a dead browser becomes an id no context has (≤ 0).
            Way::ToBrowser => id.saturating_sub(maps.offset),
        };
        (out != id).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_both_ways_and_unknown_ones_pass() {
        let mut maps = IdMaps::default();
        maps.swapped();
        maps.bind(Kind::Target, "OLD", "NEW");
        let mut up = maps.toward(Way::ToBrowser);
        assert_eq!(up.text(Kind::Target, "OLD", None).as_deref(), Some("NEW"));
        assert_eq!(up.text(Kind::Frame, "OLD", None).as_deref(), Some("NEW"));
        assert_eq!(up.text(Kind::Target, "OTHER", None), None);
        let mut down = maps.toward(Way::ToClient);
        assert_eq!(down.text(Kind::Frame, "NEW", None).as_deref(), Some("OLD"));
        assert_eq!(down.text(Kind::Session, "NEW", None), None);
        // A second swap drops the first browser's pairs.
        maps.swapped();
        maps.bind(Kind::Target, "OLD", "NEWER");
        let mut down = maps.toward(Way::ToClient);
        assert_eq!(down.text(Kind::Target, "NEW", None), None);
        assert_eq!(
            down.text(Kind::Target, "NEWER", None).as_deref(),
            Some("OLD")
        );
    }

    #[test]
    fn rebinding_either_side_drops_the_old_pair() {
        let mut pairs = Pairs::default();
        pairs.bind("a", "1");
        pairs.bind("a", "2");
        assert_eq!(pairs.get(Way::ToClient, "1"), None);
        pairs.bind("b", "2");
        assert_eq!(pairs.get(Way::ToBrowser, "a"), None);
        assert_eq!(pairs.get(Way::ToClient, "2").map(String::as_str), Some("b"));
    }

    /// The memo's example: scripts "1".."5", "2" removed; the replay makes "1".."4" for
    /// 1, 3, 4, 5; the client's next script gets Chrome's "5", which must be named "6".
    #[test]
    fn scripts_after_a_swap_get_fresh_names() {
        let mut maps = IdMaps::default();
        let s = Some("S");
        for n in 1..=5 {
            let named = maps
                .toward(Way::ToClient)
                .text(Kind::Script, &n.to_string(), s);
            assert_eq!(named, None, "identity before a swap");
        }
        maps.swapped();
        for (client, browser) in [("1", "1"), ("3", "2"), ("4", "3"), ("5", "4")] {
            maps.bind_script(s, client, browser);
        }
        let mut down = maps.toward(Way::ToClient);
        assert_eq!(down.text(Kind::Script, "2", s).as_deref(), Some("3"));
        assert_eq!(down.text(Kind::Script, "5", s).as_deref(), Some("6"));
        assert_eq!(
            down.text(Kind::Script, "5", s).as_deref(),
            Some("6"),
            "stable"
        );
        let mut up = maps.toward(Way::ToBrowser);
        assert_eq!(up.text(Kind::Script, "6", s).as_deref(), Some("5"));
        assert_eq!(up.text(Kind::Script, "3", s).as_deref(), Some("2"));
        // Another session's scripts are its own.
        assert_eq!(up.text(Kind::Script, "3", Some("T")), None);
        // Removed then added across two swaps: names never repeat.
        maps.swapped();
        maps.bind_script(s, "6", "1");
        let mut down = maps.toward(Way::ToClient);
        assert_eq!(down.text(Kind::Script, "2", s).as_deref(), Some("7"));
    }

    #[test]
    fn contexts_are_offset_above_every_id_shown() {
        let mut maps = IdMaps::default();
        for id in [1, 7, 3] {
            assert_eq!(
                maps.toward(Way::ToClient)
                    .number(Kind::ExecutionContext, id, None),
                None
            );
        }
        maps.swapped();
        let mut down = maps.toward(Way::ToClient);
        assert_eq!(down.number(Kind::ExecutionContext, 1, None), Some(8));
        assert_eq!(down.number(Kind::ExecutionContext, 2, None), Some(9));
        let mut up = maps.toward(Way::ToBrowser);
        assert_eq!(up.number(Kind::ExecutionContext, 9, None), Some(2));
        // The dead browser's context 7 matches nothing in the new one.
        assert!(
            up.number(Kind::ExecutionContext, 7, None)
                .is_some_and(|id| id <= 0)
        );
        assert_eq!(up.number(Kind::Target, 9, None), None);
        maps.swapped();
        assert_eq!(
            maps.toward(Way::ToClient)
                .number(Kind::ExecutionContext, 1, None),
            Some(10)
        );
    }
}
