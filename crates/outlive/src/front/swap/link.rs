//! One client's connection across browsers (issue 51): what it was shown, and the swap from a
//! dead browser to the next, as a state machine fed frame by frame.
//!
//! At a death ([`Link::died`]) the pages' contexts are cleared and evaluations in flight fail,
//! as at a navigation; the rest wait, and the client's new commands are held. On the next
//! browser ([`Link::rebind`]) the front replays the client's state (root first; each kept page
//! once it attaches), then loads each kept page once and puts its page state back: the client
//! sees a reload, in Chrome's own events. Then what waited is sent.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use super::fallback::{Reason, Uncarried};
use super::ids::{IdMaps, Way};
use super::rewrite::{member, read, to_browser, to_client};
use super::shape::Kind;
use super::sticky::Sticky;
use crate::front::usage::PageStateScript;
use crate::relay::wire::Head;

/// Ids of the front's own commands on a client's upstream: above any a client uses.
const OWN_BASE: u64 = 1_950_000_000;
/// The most a client may send while its browser is replaced.
const HOLD_FRAMES: usize = 10_000;
const HOLD_BYTES: usize = 64 << 20;
/// How long the replay may take on the next browser before the swap gives up.
const REPLAY_LIMIT: Duration = Duration::from_secs(10);
/// How long the pages' loads may take before what waits is sent anyway.
const LOAD_LIMIT: Duration = Duration::from_secs(30);
/// The answer Chrome gives calls in flight at a cross-process navigation; clients match it.
const NAVIGATED: &str = "Inspected target navigated or closed";

/// Frames to send, as the link asks.
#[derive(Debug, Default)]
pub(crate) struct Out {
    /// To the client.
    pub(crate) client: Vec<String>,
    /// The front's own commands, to the browser as they are.
    pub(crate) own: Vec<String>,
    /// The client's commands, to the browser (through the connection's bookkeeping).
    pub(crate) browser: Vec<String>,
    /// The new browser's pages the swap has begun to load (their target ids).
    pub(crate) loading: Vec<String>,
    /// The new browser's pages the swap has loaded, their state back.
    pub(crate) loaded: Vec<String>,
}

impl Out {
    /// Adds what `other` asks after what this asks.
    pub(crate) fn extend(&mut self, other: Out) {
        self.client.extend(other.client);
        self.own.extend(other.own);
        self.browser.extend(other.browser);
        self.loading.extend(other.loading);
        self.loaded.extend(other.loaded);
    }
}

/// A command the client sent and the browser has not answered, in the client's ids.
#[derive(Debug)]
struct Pending {
    method: String,
    frame: String,
}

/// A client session: its target (the client's id), type, parent session and context.
#[derive(Debug, Clone)]
struct Session {
    target: String,
    kind: String,
    parent: Option<String>,
    context: Option<String>,
}

/// A front's own command waiting for its answer (no `Debug`: a script holds user data).
enum Own {
    Replay {
        session: Option<String>,
        script: Option<String>,
    },
    Navigate {
        session: String,
    },
    /// A world made to put the page state back in.
    World {
        session: String,
        script: PageStateScript,
    },
    /// The page state put back.
    Apply {
        session: String,
    },
}

/// Where a swap is.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for the next browser.
    Holding,
    /// Replaying the client's state.
    Replaying,
    /// The kept pages load.
    Loading,
}

/// One swap in progress.
struct Swap {
    step: Step,
    /// The client's page sessions to carry over, by the client's target id.
    kept: HashMap<String, String>,
    /// The new browser's target of each kept session.
    news: HashMap<String, String>,
    /// Kept sessions attached on the new browser.
    attached: HashSet<String>,
    /// Sessions whose events are dropped until their page loads: the replay's echoes.
    quiet: HashSet<String>,
    /// A client's `Page.navigate`/`reload` in flight at the death, per session: re-sent as
    /// that page's load.
    navigations: HashMap<String, u64>,
    /// Sessions whose page has not committed its load yet.
    loading: HashSet<String>,
    /// The client's navigations re-sent as a page's load, by id: their session.
    reloading: HashMap<u64, String>,
    /// Per kept session, the new browser's target and the script putting its page state
    /// back once loaded.
    states: HashMap<String, (String, PageStateScript)>,
    own: HashMap<u64, Own>,
    /// The client's commands in flight at the death, re-sent once the pages are loaded.
    resend: Vec<u64>,
    /// The client's commands read during the swap, in order.
    held: Vec<String>,
    held_bytes: usize,
    deadline: Option<Instant>,
}

impl Swap {
    fn new() -> Swap {
        Swap {
            step: Step::Holding,
            kept: HashMap::new(),
            news: HashMap::new(),
            attached: HashSet::new(),
            quiet: HashSet::new(),
            navigations: HashMap::new(),
            loading: HashSet::new(),
            reloading: HashMap::new(),
            states: HashMap::new(),
            own: HashMap::new(),
            resend: Vec::new(),
            held: Vec::new(),
            held_bytes: 0,
            deadline: None,
        }
    }
}

/// One client connection's view, across browsers (see the module doc).
#[derive(Default)]
pub(crate) struct Link {
    ids: IdMaps,
    sticky: Sticky,
    uncarried: Uncarried,
    pending: HashMap<u64, Pending>,
    /// The client's sessions, in its ids.
    sessions: HashMap<String, Session>,
    /// Every browser's target ids the client was shown, to the client's id.
    targets: HashMap<String, String>,
    /// The last main-frame URL of each client target.
    urls: HashMap<String, String>,
    /// The browser contexts the client made, in order (its ids).
    made: Vec<String>,
    swap: Option<Swap>,
    next_own: u64,
    /// When the swap under way began (the death seen), and how long the last one took once
    /// it is over and not yet taken.
    since: Option<Instant>,
    took: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TargetInfo {
    target_id: String,
    #[serde(rename = "type")]
    kind: String,
    url: String,
    browser_context_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Attached {
    session_id: String,
    target_info: TargetInfo,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Detached {
    session_id: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Frame {
    parent_id: Option<String>,
    url: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Navigated {
    frame: Frame,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct MovedWithin {
    frame_id: String,
    url: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Answer {
    identifier: Option<String>,
    execution_context_id: Option<i64>,
    error_text: Option<String>,
    /// Absent for a same-document navigation: no `frameNavigated` follows.
    loader_id: Option<String>,
}

/// Whether a `Page.navigate` answered so commits a new document (else it failed, or stayed in
/// the document).
fn commits(frame: &str, answer: &Answer) -> bool {
    member(frame, "error").is_none() && answer.error_text.is_none() && answer.loader_id.is_some()
}

/// An error answer to the client's command `id` on `session`.
fn error_answer(id: u64, session: Option<&str>, message: &str) -> String {
    let mut v = serde_json::json!({ "id": id, "error": { "code": -32000, "message": message } });
    if let Some(s) = session {
        v["sessionId"] = s.into();
    }
    v.to_string()
}

impl Link {
    /// Whether a swap is under way: the client's commands are held.
    pub(crate) fn swapping(&self) -> bool {
        self.swap.is_some()
    }

    /// How long the swap just over took, once (from the death seen to the pages loaded).
    pub(crate) fn take_carried(&mut self) -> Option<Duration> {
        self.took.take()
    }

    /// When the swap step under way gives up (see [`Self::timed_out`]).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.swap.as_ref().and_then(|s| s.deadline)
    }

    /// A command from the client: held during a swap, else in the browser's ids.
    pub(crate) fn client_sent(&mut self, frame: String) -> Result<Out, Reason> {
        let mut out = Out::default();
        if let Some(swap) = &mut self.swap {
            swap.held_bytes += frame.len();
            swap.held.push(frame);
            if swap.held.len() > HOLD_FRAMES || swap.held_bytes > HOLD_BYTES {
                return Err(Reason::HoldOverflow);
            }
            return Ok(out);
        }
        out.browser.push(self.send(frame));
        Ok(out)
    }

    /// Notes the client's command and puts it in the browser's ids.
    fn send(&mut self, frame: String) -> String {
        let head = Head::of(frame.as_bytes());
        if let (Some(id), Some(method)) = (head.id, head.method.as_deref()) {
            let method = method.to_owned();
            self.uncarried.command(&frame);
            let browser = to_browser(&frame, &mut self.ids.toward(Way::ToBrowser));
            let out = browser.unwrap_or_else(|| frame.clone());
            self.pending.insert(id, Pending { method, frame });
            return out;
        }
        to_browser(&frame, &mut self.ids.toward(Way::ToBrowser)).unwrap_or(frame)
    }

    /// A frame from the browser: what to send the client and the browser.
    pub(crate) fn browser_sent(&mut self, frame: &str) -> Out {
        let mut out = Out::default();
        let head = Head::of(frame.as_bytes());
        if let Some(id) = head.id {
            if id >= OWN_BASE {
                self.own_answer(id, frame, &mut out);
            } else {
                self.answer(id, frame, &mut out);
            }
            return out;
        }
        let method = head.method.as_deref().unwrap_or("").to_owned();
        let session = head.session_id.as_deref().map(str::to_owned);
        if method == "Target.attachedToTarget" && self.reattached(frame, &mut out) {
            return out;
        }
        let client_session = session.as_deref().map(|s| self.client_session(s));
        if let (Some(swap), Some(s)) = (&self.swap, &client_session) {
            if swap.quiet.contains(s) && method != "Target.attachedToTarget" {
                return out;
            }
        }
        let browser_frame = frame;
        let frame = to_client(frame, |_| None, &mut self.ids.toward(Way::ToClient))
            .unwrap_or_else(|| frame.to_owned());
        self.uncarried.event(&frame);
        match method.as_str() {
            "Target.attachedToTarget" => self.attached(browser_frame, &frame, client_session),
            "Target.detachedFromTarget" => self.detached(&frame),
            "Page.frameNavigated" => self.navigated(&frame, client_session.as_deref(), &mut out),
            "Page.navigatedWithinDocument" => self.moved_within(&frame, client_session.as_deref()),
            _ => {}
        }
        out.client.push(frame);
        out
    }

    /// The client's id for the browser's session `s`.
    fn client_session(&mut self, s: &str) -> String {
        let mut t = self.ids.toward(Way::ToClient);
        super::rewrite::Translate::text(&mut t, Kind::Session, s, None).unwrap_or(s.to_owned())
    }

    /// A reply to the client's command: in its ids, and its state recorded.
    fn answer(&mut self, id: u64, frame: &str, out: &mut Out) {
        let pending = self.pending.remove(&id);
        let method = pending.as_ref().map(|p| p.method.as_str());
        let reply = to_client(frame, |_| method, &mut self.ids.toward(Way::ToClient))
            .unwrap_or_else(|| frame.to_owned());
        if let Some(p) = &pending {
            self.sticky.answered(&p.frame, &reply);
            self.contexts_answered(p, &reply);
        }
        let reloading = self.swap.as_mut().and_then(|s| s.reloading.remove(&id));
        if let Some(session) = reloading {
            if !commits(frame, &read(member(frame, "result"))) {
                self.loaded(&session, out);
            }
        }
        out.client.push(reply);
    }

    /// Notes the contexts the client made or disposed of, at their answer.
    fn contexts_answered(&mut self, command: &Pending, reply: &str) {
        #[derive(Default, Deserialize)]
        #[serde(default, rename_all = "camelCase")]
        struct Context {
            browser_context_id: Option<String>,
        }
        if member(reply, "error").is_some() {
            return;
        }
        match command.method.as_str() {
            "Target.createBrowserContext" => {
                let made: Context = read(member(reply, "result"));
                self.made.extend(made.browser_context_id);
            }
            "Target.disposeBrowserContext" => {
                let gone: Context = read(member(&command.frame, "params"));
                self.made
                    .retain(|c| Some(c) != gone.browser_context_id.as_ref());
            }
            _ => {}
        }
    }

    /// How many contexts the client made (and has not disposed of).
    pub(crate) fn made_contexts(&self) -> usize {
        self.made.len()
    }

    /// A target the client was shown attached (`frame` in its ids, `browser` as sent): its
    /// session noted, and the browser's name for its target.
    fn attached(&mut self, browser: &str, frame: &str, parent: Option<String>) {
        let a: Attached = read(member(frame, "params"));
        let b: Attached = read(member(browser, "params"));
        self.targets
            .insert(b.target_info.target_id, a.target_info.target_id.clone());
        self.sessions.insert(
            a.session_id.clone(),
            Session {
                target: a.target_info.target_id.clone(),
                kind: a.target_info.kind,
                parent,
                context: a.target_info.browser_context_id,
            },
        );
    }

    /// A client session ended: everything of it is forgotten.
    fn detached(&mut self, frame: &str) {
        let d: Detached = read(member(frame, "params"));
        self.forget(&d.session_id);
    }

    fn forget(&mut self, session: &str) {
        self.sessions.remove(session);
        self.sticky.session_gone(session);
        self.uncarried.session_gone(session);
        self.ids.session_gone(session);
    }

    /// A frame committed: a main frame's URL is noted, and a kept page's load is done.
    fn navigated(&mut self, frame: &str, session: Option<&str>, out: &mut Out) {
        let n: Navigated = read(member(frame, "params"));
        let Some(session) = session else {
            return;
        };
        if n.frame.parent_id.is_some() {
            return;
        }
        if let Some(s) = self.sessions.get(session) {
            self.urls.insert(s.target.clone(), n.frame.url);
        }
        self.loaded(session, out);
    }

    /// A main frame moved within its document (`pushState`, a fragment): its URL is noted, so
    /// that the load after a death goes where the page stood. (A page's main frame id is its
    /// target id.)
    fn moved_within(&mut self, frame: &str, session: Option<&str>) {
        let m: MovedWithin = read(member(frame, "params"));
        let Some(s) = session.and_then(|s| self.sessions.get(s)) else {
            return;
        };
        if m.frame_id == s.target {
            self.urls.insert(s.target.clone(), m.url);
        }
    }

    /// A kept page's load committed (or failed): its page state is put back, then once all
    /// are, what waited is sent.
    fn loaded(&mut self, session: &str, out: &mut Out) {
        let Some(swap) = &mut self.swap else {
            return;
        };
        if swap.step != Step::Loading || !swap.loading.contains(session) {
            return;
        }
        if let Some((target, script)) = swap.states.remove(session) {
            let world = serde_json::json!({"frameId": target,
                "worldName": "__chromiumoxide_utility_world__", "grantUniveralAccess": false});
            let session = session.to_owned();
            let own = Own::World {
                session: session.clone(),
                script,
            };
            self.own_browser_command("Page.createIsolatedWorld", world, &session, own, out);
            return;
        }
        self.state_back(session, out);
    }

    /// A kept page is loaded with its state: once all are, what waited is sent.
    fn state_back(&mut self, session: &str, out: &mut Out) {
        let Some(swap) = &mut self.swap else {
            return;
        };
        if !swap.loading.remove(session) {
            return;
        }
        out.loaded.extend(swap.news.get(session).cloned());
        if swap.loading.is_empty() {
            self.go_live(out);
        }
    }

    /// The swap is over: the commands in flight at the death, then those held, go out.
    fn go_live(&mut self, out: &mut Out) {
        let Some(swap) = self.swap.take() else {
            return;
        };
        self.took = self.since.take().map(|t| t.elapsed());
        for id in swap.resend {
            if let Some(p) = self.pending.get(&id) {
                let frame = p.frame.clone();
                let browser = to_browser(&frame, &mut self.ids.toward(Way::ToBrowser));
                out.browser.push(browser.unwrap_or(frame));
            }
        }
        for frame in swap.held {
            out.browser.push(self.send(frame));
        }
        tracing::debug!("a client's connection is on the new browser");
    }

    /// The browser is gone. Evaluations in flight fail as at a navigation, calls on sessions
    /// not carried over are dropped (their detach comes at the rebind), the rest wait.
    pub(crate) fn died(&mut self) -> Result<Out, Reason> {
        if self.sessions.values().any(|s| s.kind == "tab") {
            let also = self.uncarried.reason().map(|r| r.to_string());
            tracing::debug!(also, "a client on tab targets is not carried");
            return Err(Reason::TabTargets);
        }
        if let Some(reason) = self.uncarried.reason() {
            return Err(reason);
        }
        let mut out = Out::default();
        let mut swap = Swap::new();
        self.since.get_or_insert_with(Instant::now);
        if let Some(old) = self.swap.take() {
            swap.held = old.held;
            swap.held_bytes = old.held_bytes;
        }
        // The dead documents' contexts are gone: a client then waits for the next ones instead
        // of evaluating in a context the next browser will not know.
        let mut pages: Vec<&String> = self
            .sessions
            .keys()
            .filter(|s| self.is_kept_page(s))
            .collect();
        pages.sort();
        for session in pages {
            let cleared = serde_json::json!({"method": "Runtime.executionContextsCleared",
                "params": {}, "sessionId": session});
            out.client.push(cleared.to_string());
        }
        let mut ids: Vec<u64> = self.pending.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let p = &self.pending[&id];
            let session = Head::of(p.frame.as_bytes())
                .session_id
                .map(|s| s.into_owned());
            let top = session.as_deref().is_none_or(|s| self.is_kept_page(s));
            match p.method.as_str() {
                _ if !top => {
                    self.pending.remove(&id);
                }
                "Page.navigate" | "Page.reload" => {
                    if let Some(earlier) = swap.navigations.insert(session.unwrap_or_default(), id)
                    {
                        swap.resend.push(earlier);
                    }
                }
                "Runtime.evaluate"
                | "Runtime.callFunctionOn"
                | "Runtime.awaitPromise"
                | "Runtime.runScript"
                | "Runtime.terminateExecution" => {
                    out.client
                        .push(error_answer(id, session.as_deref(), NAVIGATED));
                    self.pending.remove(&id);
                }
                _ => swap.resend.push(id),
            }
        }
        self.ids.swapped();
        self.swap = Some(swap);
        Ok(out)
    }

    /// Whether client session `s` is a page the front carries over: a top-level page.
    fn is_kept_page(&self, s: &str) -> bool {
        self.sessions
            .get(s)
            .is_some_and(|s| s.parent.is_none() && s.kind == "page")
    }

    /// The next browser is up. `pairs` names its tabs by the dead browser's: (old, new)
    /// target ids, as the restore reopened them. Starts the replay.
    /// `states`: by new target, the script putting its page state back after its load.
    /// `remade`: the contexts the client made, made again there, in its order.
    pub(crate) fn rebind(
        &mut self,
        pairs: &[(String, String)],
        states: &HashMap<String, PageStateScript>,
        remade: &[String],
    ) -> Result<Out, Reason> {
        tracing::debug!(
            protocol = super::schema::CDP_CRATE,
            revision = super::schema::REVISION,
            "carrying a client to the next browser"
        );
        let mut out = Out::default();
        let pages: Vec<(String, String)> = self
            .sessions
            .iter()
            .filter(|(s, _)| self.is_kept_page(s))
            .map(|(s, info)| (s.clone(), info.target.clone()))
            .collect();
        for (old, new) in self.made.iter().zip(remade) {
            self.ids.bind(Kind::BrowserContext, old, new);
        }
        let mut kept = HashMap::new();
        let mut news = HashMap::new();
        let mut scripts = HashMap::new();
        for (session, target) in pages {
            let new = pairs
                .iter()
                .find(|(old, _)| self.targets.get(old).unwrap_or(old) == &target)
                .map(|(_, new)| new.clone())
                .ok_or(Reason::TabNotReopened)?;
            self.ids.bind(Kind::Target, &target, &new);
            if let Some(script) = states.get(&new) {
                scripts.insert(session.clone(), (new.clone(), script.clone()));
            }
            self.targets.insert(new.clone(), target.clone());
            news.insert(session.clone(), new);
            kept.insert(target, session);
        }
        // Sessions on children of the dead pages (frames, workers) end, as at a navigation.
        let children: Vec<(String, Session)> = self
            .sessions
            .iter()
            .filter(|(s, _)| !self.is_kept_page(s))
            .map(|(s, i)| (s.clone(), i.clone()))
            .collect();
        for (session, info) in children {
            let mut v = serde_json::json!({
                "method": "Target.detachedFromTarget",
                "params": { "sessionId": session, "targetId": info.target },
            });
            if let Some(parent) = &info.parent {
                v["sessionId"] = parent.as_str().into();
            }
            out.client.push(v.to_string());
            self.forget(&session);
        }
        let root = self.replay_frames(None);
        let swap = self.swap.get_or_insert_with(Swap::new);
        swap.step = Step::Replaying;
        swap.kept = kept;
        swap.news = news;
        swap.states = scripts;
        swap.deadline = Some(Instant::now() + REPLAY_LIMIT);
        for (id, frame, script) in root {
            self.own_command(id, frame, None, script, &mut out);
        }
        self.advance(&mut out);
        Ok(out)
    }

    /// Sends a command of the front's own, written in the browser's ids, on the browser's
    /// session for the client's `session`.
    fn own_browser_command(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: &str,
        own: Own,
        out: &mut Out,
    ) {
        let id = OWN_BASE + self.next_own;
        self.next_own += 1;
        let mut t = self.ids.toward(Way::ToBrowser);
        let browser = super::rewrite::Translate::text(&mut t, Kind::Session, session, None);
        let frame = serde_json::json!({"id": id, "method": method,
            "sessionId": browser.as_deref().unwrap_or(session), "params": params});
        out.own.push(frame.to_string());
        if let Some(swap) = &mut self.swap {
            swap.own.insert(id, own);
        }
    }

    /// The replay of `session`'s state: each command under an id of the front's, in the
    /// client's ids, with the init script it names.
    fn replay_frames(&mut self, session: Option<&str>) -> Vec<(u64, String, Option<String>)> {
        let replay = self.sticky.replay(session);
        let first = OWN_BASE + self.next_own;
        self.next_own += replay.len() as u64;
        replay
            .iter()
            .zip(first..)
            .map(|(r, id)| (id, r.frame(id, session), r.script.map(str::to_owned)))
            .collect()
    }

    /// Sends one replayed command (the front's id `id`), in the browser's ids.
    fn own_command(
        &mut self,
        id: u64,
        frame: String,
        session: Option<String>,
        script: Option<String>,
        out: &mut Out,
    ) {
        let browser = to_browser(&frame, &mut self.ids.toward(Way::ToBrowser)).unwrap_or(frame);
        out.own.push(browser);
        if let Some(swap) = &mut self.swap {
            swap.own.insert(id, Own::Replay { session, script });
        }
    }

    /// A kept page attached on the new browser: its session is paired with the client's and
    /// its state replayed; the client is not told (it knows the page). Whether it was one.
    fn reattached(&mut self, frame: &str, out: &mut Out) -> bool {
        let Some(swap) = &self.swap else {
            return false;
        };
        if swap.step != Step::Replaying {
            return false;
        }
        let a: Attached = read(member(frame, "params"));
        let Some(target) = self.targets.get(&a.target_info.target_id).cloned() else {
            return false;
        };
        let Some(session) = swap.kept.get(&target).cloned() else {
            return false;
        };
        if swap.attached.contains(&session) {
            return false;
        }
        self.ids.bind(Kind::Session, &session, &a.session_id);
        let old_context = self.sessions.get(&session).and_then(|s| s.context.clone());
        if let (Some(old), Some(new)) = (old_context, &a.target_info.browser_context_id) {
            self.ids.bind(Kind::BrowserContext, &old, new);
        }
        if !a.target_info.url.is_empty() {
            self.urls.entry(target).or_insert(a.target_info.url);
        }
        let replay = self.replay_frames(Some(&session));
        if let Some(swap) = &mut self.swap {
            swap.attached.insert(session.clone());
            swap.quiet.insert(session.clone());
        }
        for (id, frame, script) in replay {
            self.own_command(id, frame, Some(session.clone()), script, out);
        }
        self.advance(out);
        true
    }

    /// An answer to one of the front's commands.
    fn own_answer(&mut self, id: u64, frame: &str, out: &mut Out) {
        let Some(own) = self.swap.as_mut().and_then(|s| s.own.remove(&id)) else {
            return;
        };
        let answer: Answer = read(member(frame, "result"));
        match own {
            Own::Replay { session, script } => {
                if member(frame, "error").is_some() {
                    tracing::debug!(
                        "a replayed command failed on the new browser; the client's state may lack it"
                    );
                }
                if let (Some(client), Some(browser)) = (script, answer.identifier) {
                    self.ids.bind_script(session.as_deref(), &client, &browser);
                }
                self.advance(out);
            }
            Own::Navigate { session } => {
                if !commits(frame, &answer) {
                    self.loaded(&session, out);
                }
            }
            Own::World { session, script } => match answer.execution_context_id {
                Some(context) => {
                    let apply = serde_json::json!({"expression": script.as_str(),
                        "contextId": context, "awaitPromise": true, "returnByValue": true});
                    let own = Own::Apply {
                        session: session.clone(),
                    };
                    self.own_browser_command("Runtime.evaluate", apply, &session, own, out);
                }
                None => self.state_back(&session, out),
            },
            Own::Apply { session } => {
                if member(frame, "exceptionDetails").is_some() || member(frame, "error").is_some() {
                    tracing::debug!("the page state could not be put back after the swap's load");
                }
                self.state_back(&session, out);
            }
        }
    }

    /// Once the replay is answered and every kept page attached and replayed, each loads.
    fn advance(&mut self, out: &mut Out) {
        let Some(swap) = &mut self.swap else {
            return;
        };
        let replayed = swap.own.values().all(|o| !matches!(o, Own::Replay { .. }));
        if swap.step != Step::Replaying || !replayed || swap.attached.len() < swap.kept.len() {
            return;
        }
        swap.step = Step::Loading;
        swap.deadline = Some(Instant::now() + LOAD_LIMIT);
        swap.quiet.clear();
        let kept: Vec<(String, String)> = swap
            .kept
            .iter()
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect();
        for (target, session) in kept {
            self.load(&target, &session, out);
        }
        if self.swap.as_ref().is_some_and(|s| s.loading.is_empty()) {
            self.go_live(out);
        }
    }

    /// Loads a kept page: the client's navigation in flight at the death, else the one it
    /// sent first during the swap, else its last URL. Notes it in `out.loading`.
    fn load(&mut self, target: &str, session: &str, out: &mut Out) {
        self.send_load(target, session, out);
        if let Some(swap) = &self.swap
            && swap.loading.contains(session)
        {
            out.loading.extend(swap.news.get(session).cloned());
        }
    }

    /// Sends a kept page's load (see [`Self::load`]), if it has one.
    fn send_load(&mut self, target: &str, session: &str, out: &mut Out) {
        if let Some(frame) = self.held_navigation(session) {
            let head = Head::of(frame.as_bytes());
            let id = head.id.unwrap_or_default();
            if let Some(swap) = &mut self.swap {
                swap.loading.insert(session.to_owned());
                swap.reloading.insert(id, session.to_owned());
            }
            out.browser.push(self.send(frame));
            return;
        }
        let Some(swap) = &mut self.swap else {
            return;
        };
        if let Some(id) = swap.navigations.remove(session) {
            swap.loading.insert(session.to_owned());
            swap.reloading.insert(id, session.to_owned());
            if let Some(p) = self.pending.get(&id) {
                let frame = p.frame.clone();
                let browser = to_browser(&frame, &mut self.ids.toward(Way::ToBrowser));
                out.browser.push(browser.unwrap_or(frame));
            }
            return;
        }
        let Some(url) = self.urls.get(target).cloned() else {
            return;
        };
        swap.loading.insert(session.to_owned());
        let id = OWN_BASE + self.next_own;
        self.next_own += 1;
        swap.own.insert(
            id,
            Own::Navigate {
                session: session.to_owned(),
            },
        );
        let frame = serde_json::json!({
            "id": id, "method": "Page.navigate", "sessionId": session, "params": { "url": url },
        })
        .to_string();
        let browser = to_browser(&frame, &mut self.ids.toward(Way::ToBrowser)).unwrap_or(frame);
        out.own.push(browser);
    }

    /// The client's navigation of `session`'s page sent during the swap, taken out of those
    /// held, when it is the first command held for that page and none was in flight.
    fn held_navigation(&mut self, session: &str) -> Option<String> {
        let swap = self.swap.as_mut()?;
        if swap.navigations.contains_key(session) {
            return None;
        }
        let first = swap
            .held
            .iter()
            .position(|f| Head::of(f.as_bytes()).session_id.as_deref() == Some(session))?;
        let head = Head::of(swap.held[first].as_bytes());
        let navigates = matches!(
            head.method.as_deref(),
            Some("Page.navigate" | "Page.reload")
        );
        if !navigates || head.id.is_none() {
            return None;
        }
        let frame = swap.held.remove(first);
        swap.held_bytes -= frame.len();
        Some(frame)
    }

    /// The swap step's deadline passed: a replay that did not finish fails the swap; pages
    /// still loading are left to finish while what waited goes out.
    pub(crate) fn timed_out(&mut self) -> Result<Out, Reason> {
        let mut out = Out::default();
        match self.swap.as_ref().map(|s| &s.step) {
            Some(Step::Replaying) => return Err(Reason::SwapTimedOut),
            Some(Step::Loading) => self.go_live(&mut out),
            _ => {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
