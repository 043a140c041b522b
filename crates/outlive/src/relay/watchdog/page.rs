//! The relay's view of the task's page: its commands, its navigations (which gate the stall
//! probe), its out-of-process frames, and the events that say it failed.

use std::collections::{BTreeMap, HashSet};

use tokio::time::Instant;

use crate::dialogs::Dialogs;
use crate::relay::control::{Heartbeat, WatchedPage};
use crate::relay::death::DeathCause;
use crate::relay::wire::PageEvent;

/// The watched page failed: publish it, then answer its commands in flight with an error.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::relay) struct PageFailure {
    pub generation: u64,
    pub cause: DeathCause,
    pub session: String,
    /// The page's commands in flight, which will never be answered now.
    pub commands: Vec<u64>,
}

/// A page probe sent because a command on the page stalled, with a browser probe beside it.
pub(super) struct StallProbe {
    pub page_id: u64,
    pub browser_id: u64,
    pub sent: Instant,
    pub browser_answered: bool,
}

/// The relay's view of the task's page.
#[derive(Default)]
pub(super) struct PageState {
    pub watched: Option<WatchedPage>,
    /// Commands in flight on the watched page: id → when sent. chromiumoxide's ids grow, so
    /// the first is the oldest.
    pub pending: BTreeMap<u64, Instant>,
    /// Sessions of failed pages: every command to them is answered with an error at once.
    pub dead_sessions: HashSet<String>,
    pub stall_probe: Option<StallProbe>,
    pub last_stall_probe: Option<Instant>,
    /// Navigation commands in flight on the watched page (`Page.navigate`, …): answered only
    /// when the navigation commits.
    navigations: HashSet<u64>,
    /// A navigation of the page's main frame has started and not yet committed or stopped.
    navigating: bool,
    /// When the navigation in progress received its document's response: from then on only
    /// the commit is missing, which needs the page's renderer (a spinning one never commits a
    /// same-site document), so the stall logic judges the page again.
    responded: Option<Instant>,
    /// The generation of the last page that failed (0: none).
    pub failed_generation: u64,
    /// The out-of-process frames chromiumoxide attached, under any page: by session, their
    /// target id (the id of its frame) and the session they were attached under.
    pub frames: BTreeMap<String, AttachedFrame>,
    /// Frames attached since the driver last took them (see `Watchdog::take_attached_frames`).
    pub attached: Vec<String>,
    /// A JavaScript dialog is open on the watched page: its scripts wait for an answer, which
    /// is no hang.
    dialog_open: bool,
    /// A page being opened, not watched yet.
    opening: Option<Opening>,
}

/// An out-of-process frame: its target id, and the session it was attached under (its page's,
/// or its parent frame's).
pub(super) struct AttachedFrame {
    pub target_id: String,
    pub parent: String,
}

/// A page being opened: its generation, and its target once it was created.
struct Opening {
    generation: u64,
    target_id: Option<String>,
}

impl PageState {
    /// Watches `page` from now on; what was known of the previous one goes, but not which
    /// sessions failed.
    pub fn watch(&mut self, page: WatchedPage) {
        self.pending.clear();
        self.stall_probe = None;
        self.last_stall_probe = None;
        self.navigations.clear();
        self.navigating = false;
        self.responded = None;
        self.dialog_open = false;
        self.opening = None;
        self.watched = Some(page);
    }

    pub fn failed(&self) -> bool {
        self.watched
            .as_ref()
            .is_some_and(|w| w.generation == self.failed_generation)
    }

    /// The watched page's session, unless it failed.
    pub fn live_session(&self) -> Option<&str> {
        let w = self.watched.as_ref()?;
        (!self.failed()).then_some(w.session_id.as_str())
    }

    /// A client command `id` (`method`) on `session`.
    pub fn on_command(&mut self, id: u64, session: &str, method: Option<&str>, now: Instant) {
        if self
            .watched
            .as_ref()
            .is_none_or(|w| w.session_id != session)
        {
            return;
        }
        self.pending.insert(id, now);
        if matches!(
            method,
            Some("Page.navigate" | "Page.reload" | "Page.navigateToHistoryEntry")
        ) {
            self.navigations.insert(id);
            self.stall_probe = None;
        }
    }

    /// A reply to a client command.
    pub fn replied(&mut self, id: u64) {
        self.pending.remove(&id);
        self.navigations.remove(&id);
    }

    /// A reply to one of the relay's own messages.
    pub fn own_reply(&mut self, id: u64) {
        if let Some(probe) = self.stall_probe.as_mut() {
            if probe.browser_id == id {
                probe.browser_answered = true;
            } else if probe.page_id == id {
                self.stall_probe = None;
            }
        }
    }

    /// Whether the page is between a navigation's start and its commit. Chromium holds
    /// DevTools messages for a page while its navigation is pending, so a probe then would
    /// go unanswered by a healthy page: no stall probing until the navigation commits (a
    /// navigation is bounded by its own timeouts).
    pub fn is_navigating(&self) -> bool {
        self.navigating || !self.navigations.is_empty()
    }

    /// Whether the page may be probed: not while a navigation waits for its response (the
    /// browser holds the page's messages until the commit, and a slow server is no hang).
    fn probeable(&self) -> bool {
        !self.dialog_open && (!self.is_navigating() || self.responded.is_some())
    }

    /// A page is being opened as `generation`.
    pub fn opening(&mut self, generation: u64) {
        self.opening = Some(Opening {
            generation,
            target_id: None,
        });
    }

    /// Follows the page being opened: the first page target created after the opening began
    /// is it (the watched page's own target aside); its crash or destruction before it is
    /// watched is that generation's failure.
    pub fn track_opening(&mut self, event: &PageEvent) -> Option<PageFailure> {
        let opening = self.opening.as_mut()?;
        let target = event.params.target_info.as_ref().and_then(|t| {
            (t.kind == "page")
                .then_some(t.target_id.as_deref())
                .flatten()
        });
        let watched = self.watched.as_ref().map(|w| w.target_id.as_str());
        match (event.method.as_str(), &opening.target_id) {
            ("Target.targetCreated", None) if target.is_some() && target != watched => {
                opening.target_id = target.map(str::to_owned);
                None
            }
            ("Target.targetCrashed" | "Target.targetDestroyed", Some(id))
                if event.params.target_id.as_ref() == Some(id) =>
            {
                let cause = if event.method == "Target.targetCrashed" {
                    DeathCause::PageCrashed
                } else {
                    DeathCause::PageClosed
                };
                let generation = opening.generation;
                self.opening = None;
                Some(PageFailure {
                    generation,
                    cause,
                    session: String::new(),
                    commands: Vec::new(),
                })
            }
            _ => None,
        }
    }

    /// Follows the watched page's JavaScript dialogs. Answers `Some(accept)` when the relay is
    /// to answer the one that just opened.
    pub fn track_dialog(&mut self, event: &PageEvent) -> Option<bool> {
        let watched = self.watched.as_ref()?;
        if event.session_id.as_deref() != Some(watched.session_id.as_str()) {
            return None;
        }
        match event.method.as_str() {
            "Page.javascriptDialogOpening" => {
                self.dialog_open = true;
                // A probe already sent waits behind the dialog too.
                self.stall_probe = None;
                match watched.dialogs {
                    Dialogs::Dismiss => Some(false),
                    Dialogs::Accept => Some(true),
                    Dialogs::Leave => None,
                }
            }
            "Page.javascriptDialogClosed" => {
                self.dialog_open = false;
                None
            }
            _ => None,
        }
    }

    /// When the stall logic next needs attention; `judged_at` says when the stall probe
    /// (its page probe's id, and when it was sent) is judged.
    pub fn deadline(
        &self,
        heartbeat: Heartbeat,
        judged_at: impl Fn(u64, Instant) -> Instant,
    ) -> Option<Instant> {
        if !self.probeable() {
            return None;
        }
        if let Some(probe) = &self.stall_probe {
            return Some(judged_at(probe.page_id, probe.sent));
        }
        // A navigation that has its response waits only for the page to commit it: it is
        // stalled from then on (and a command that waited since before, from then too).
        let oldest = match (self.pending.first_key_value(), self.responded) {
            (Some((_, sent)), Some(responded)) => (*sent).max(responded),
            (Some((_, sent)), None) => *sent,
            (None, Some(responded)) => responded,
            (None, None) => return None,
        };
        let oldest = &oldest;
        // Half an interval: the hung page is then declared within interval + timeout of the
        // stalled command being sent, probe round trip included.
        let stalled_after = heartbeat.interval / 2;
        let mut due = *oldest + stalled_after;
        if let Some(last) = self.last_stall_probe {
            due = due.max(last + stalled_after);
        }
        Some(due)
    }

    /// Follows the watched page's main-frame navigations (its frame id is its target id).
    pub fn track_navigation(&mut self, event: &PageEvent, now: Instant) {
        let Some(watched) = self.watched.as_ref() else {
            return;
        };
        if event.method == "Network.responseReceived" {
            let document = event.params.kind.as_deref() == Some("Document")
                && event.params.frame_id.as_deref() == Some(watched.target_id.as_str())
                && event.session_id.as_deref() == Some(watched.session_id.as_str());
            if document && self.is_navigating() && self.responded.is_none() {
                self.responded = Some(now);
            }
            return;
        }
        let starts = matches!(
            event.method.as_str(),
            "Page.frameRequestedNavigation" | "Page.frameStartedNavigating"
        );
        let ends = matches!(
            event.method.as_str(),
            "Page.frameNavigated" | "Page.frameStoppedLoading"
        );
        if !(starts || ends) || event.session_id.as_deref() != Some(watched.session_id.as_str()) {
            return;
        }
        let main_frame = match (&event.params.frame_id, &event.params.frame) {
            (Some(id), _) => *id == watched.target_id,
            (None, Some(f)) => f.parent_id.is_none() && f.id == watched.target_id,
            _ => false,
        };
        if main_frame {
            self.navigating = starts;
            self.responded = None;
            if starts {
                self.stall_probe = None;
            }
        }
    }

    /// Follows the out-of-process frames (cross-site iframes) attached under any page: the
    /// checkpoint reads every tab's frames. A detached session takes its frames with it.
    pub fn track_frames(&mut self, event: &PageEvent) {
        let Some(session) = event.params.session_id.clone() else {
            return;
        };
        match event.method.as_str() {
            "Target.attachedToTarget" => {
                let Some(target) = event.params.target_info.as_ref() else {
                    return;
                };
                let Some(parent) = event.session_id.clone() else {
                    return;
                };
                if target.kind != "iframe" {
                    return;
                }
                let target_id = target.target_id.clone().unwrap_or_default();
                self.frames
                    .insert(session.clone(), AttachedFrame { target_id, parent });
                self.attached.push(session);
            }
            "Target.detachedFromTarget" => {
                let mut gone = vec![session];
                while let Some(session) = gone.pop() {
                    self.frames.remove(&session);
                    let children = self.frames.iter().filter(|(_, f)| f.parent == session);
                    gone.extend(children.map(|(s, _)| s.clone()));
                }
            }
            _ => {}
        }
    }

    /// The out-of-process frames under the page of session `page`, nested ones included.
    pub fn frames_of(&self, page: &str) -> Vec<(String, String)> {
        let under_page = |frame: &AttachedFrame| {
            let mut parent = frame.parent.as_str();
            while let Some(up) = self.frames.get(parent) {
                parent = up.parent.as_str();
            }
            parent == page
        };
        self.frames
            .iter()
            .filter(|(_, f)| under_page(f))
            .map(|(s, f)| (s.clone(), f.target_id.clone()))
            .collect()
    }

    /// Whether `event` reports the watched page's failure, and how.
    pub fn failure(&self, event: &PageEvent) -> Option<DeathCause> {
        let watched = self.watched.as_ref()?;
        if self.failed() {
            return None;
        }
        let on_target = event.params.target_id.as_deref() == Some(watched.target_id.as_str());
        let on_session = |s: &Option<String>| s.as_deref() == Some(watched.session_id.as_str());
        match event.method.as_str() {
            "Inspector.targetCrashed" if on_session(&event.session_id) => {
                Some(DeathCause::PageCrashed)
            }
            "Target.targetCrashed" if on_target => Some(DeathCause::PageCrashed),
            "Target.targetDestroyed" if on_target => Some(DeathCause::PageClosed),
            "Target.detachedFromTarget"
                if event.session_id.is_none()
                    && (on_target || on_session(&event.params.session_id)) =>
            {
                Some(DeathCause::PageClosed)
            }
            _ => None,
        }
    }
}
