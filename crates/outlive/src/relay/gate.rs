//! New tabs wait at their start until outlive's auto-attach is set on them.
//!
//! chromiumoxide attaches to every tab, a program's too, and sets `Target.setAutoAttach` on it
//! to see its cross-site frames. Set late, while a frame is being created, Chromium detaches the
//! program's own session of that frame; a frame waiting for the program's debugger then never
//! runs, and the page never loads. So the relay auto-attaches at the browser level, waiting:
//! each new page pauses until the relay has set chromiumoxide's auto-attach on it (answering
//! chromiumoxide's own later), or [`HOLD_CAP`] passed. Pure state: the driver feeds and asks.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::wire::{self, Head, Inbound, PageEvent};

/// The longest a new tab waits for chromiumoxide.
pub(super) const HOLD_CAP: Duration = Duration::from_secs(2);

/// What the gate does with a message from the browser.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    Forward,
    /// An event of the relay's own sessions: chromiumoxide never sees it.
    Consume,
}

/// What the gate does with a command from chromiumoxide.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Sent {
    Forward,
    /// Its auto-attach, which the relay set already: answer it here.
    AnswerHere,
}

/// What the driver sends for the gate.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// chromiumoxide's auto-attach on its new `session`, early; then [`StartGate::set`].
    AutoAttach { session: String },
    /// Let the relay's `session` run on, and detach it.
    Release { session: String },
}

/// A new page the relay holds: its session of the relay's own, and since when.
struct Held {
    session: String,
    since: Instant,
}

/// The gate's state (see the module doc).
#[derive(Default)]
pub(super) struct StartGate {
    /// The relay's browser-level auto-attach and when it was sent, until answered (or
    /// [`HOLD_CAP`] passed). chromiumoxide's commands wait for it, so that every attach
    /// before it is the relay's.
    setup: Option<(u64, Instant)>,
    /// New pages held: target id → the relay's session.
    held: HashMap<String, Held>,
    /// chromiumoxide's `Target.attachToTarget` not yet seen attached: target → count.
    attaching: HashMap<String, u32>,
    /// chromiumoxide's page sessions: session → target.
    sessions: HashMap<String, String>,
    /// The relay's auto-attach on a held page's chromiumoxide session: own id → target.
    setting: HashMap<u64, String>,
    /// chromiumoxide's sessions whose auto-attach the relay set.
    preset: Vec<String>,
    /// The relay's sessions still attached.
    own: Vec<String>,
    /// What the driver is to send now.
    steps: Vec<Step>,
}

impl StartGate {
    /// The relay asked for the browser-level auto-attach as message `id`.
    pub fn start(&mut self, id: u64, now: Instant) {
        self.setup = Some((id, now));
    }

    /// Whether chromiumoxide's commands may pass: the relay's auto-attach was answered.
    pub fn is_open(&self) -> bool {
        self.setup.is_none()
    }

    /// A reply to one of the relay's own messages. Any answer to the setup opens the gate; an
    /// error (a browser without the filter) leaves nothing held.
    pub fn own_reply(&mut self, id: u64) {
        if self.setup.is_some_and(|(setup, _)| setup == id) {
            self.setup = None;
        }
        if let Some(target) = self.setting.remove(&id) {
            self.release(&target);
        }
    }

    /// The relay sent [`Step::AutoAttach`] on `session` as its message `id`.
    pub fn set(&mut self, id: u64, session: String) {
        if let Some(target) = self.sessions.get(&session) {
            self.setting.insert(id, target.clone());
            self.preset.push(session);
        }
    }

    /// A command from chromiumoxide.
    pub fn on_client(&mut self, head: &Head<'_>, bytes: &[u8]) -> Sent {
        match (head.method.as_deref(), head.session_id.as_deref()) {
            (Some("Target.attachToTarget"), None) => {
                if let Some(target) = attach_target(bytes) {
                    *self.attaching.entry(target).or_default() += 1;
                }
            }
            (Some("Target.setAutoAttach"), Some(session)) => {
                if let Some(at) = self.preset.iter().position(|s| s == session) {
                    self.preset.swap_remove(at);
                    return Sent::AnswerHere;
                }
            }
            _ => {}
        }
        Sent::Forward
    }

    /// A message from the browser (not a reply to the relay's own).
    pub fn on_browser(&mut self, bytes: &[u8], now: Instant) -> Seen {
        match wire::inbound(bytes) {
            Inbound::Event(method) if GATE_EVENTS.contains(&method.as_ref()) => {
                match wire::page_event(&method, bytes) {
                    Some(event) => self.on_event(&event, now),
                    None => Seen::Forward,
                }
            }
            _ => Seen::Forward,
        }
    }

    fn on_event(&mut self, event: &PageEvent, now: Instant) -> Seen {
        let p = &event.params;
        match event.method.as_str() {
            "Target.attachedToTarget" if event.session_id.is_none() => {
                let (Some(info), Some(session)) = (&p.target_info, &p.session_id) else {
                    return Seen::Forward;
                };
                let Some(target) = info.target_id.clone().filter(|_| info.kind == "page") else {
                    return Seen::Forward;
                };
                self.on_page_attached(target, session.clone(), p.waiting_for_debugger, now)
            }
            "Target.detachedFromTarget" => {
                let session = p.session_id.as_deref().unwrap_or_default();
                if let Some(at) = self.own.iter().position(|s| s == session) {
                    self.own.swap_remove(at);
                    return Seen::Consume;
                }
                self.sessions.remove(session);
                self.preset.retain(|s| s != session);
                Seen::Forward
            }
            "Target.targetDestroyed" => {
                if let Some(target) = p.target_id.as_deref() {
                    self.held.remove(target);
                    self.attaching.remove(target);
                }
                Seen::Forward
            }
            _ => Seen::Forward,
        }
    }

    /// A page attached at the browser level: chromiumoxide's own attach, or the relay's.
    fn on_page_attached(
        &mut self,
        target: String,
        session: String,
        waiting: bool,
        now: Instant,
    ) -> Seen {
        if self.is_open() && !waiting {
            if let Some(n) = self.attaching.get_mut(&target).filter(|n| **n > 0) {
                *n -= 1;
                if self.held.contains_key(&target) {
                    let session = session.clone();
                    self.steps.push(Step::AutoAttach { session });
                }
                self.sessions.insert(session, target);
                return Seen::Forward;
            }
        }
        self.own.push(session.clone());
        if waiting && self.is_open() {
            self.held.insert(
                target,
                Held {
                    session,
                    since: now,
                },
            );
        } else {
            // A page there before the relay's auto-attach: nothing to hold.
            self.steps.push(Step::Release { session });
        }
        Seen::Consume
    }

    fn release(&mut self, target: &str) {
        if let Some(held) = self.held.remove(target) {
            self.steps.push(Step::Release {
                session: held.session,
            });
        }
    }

    /// When the longest-held page (or the unanswered setup) is due to go on anyway.
    pub fn due(&self) -> Option<Instant> {
        let setup = self.setup.map(|(_, sent)| sent);
        let held = self.held.values().map(|h| h.since);
        setup.into_iter().chain(held).min().map(|t| t + HOLD_CAP)
    }

    /// Lets every page held for [`HOLD_CAP`] by `now` run; opens the gate if the setup was
    /// not answered in that time.
    pub fn expire(&mut self, now: Instant) {
        if self.setup.is_some_and(|(_, sent)| sent + HOLD_CAP <= now) {
            tracing::debug!(
                "the browser did not answer the relay's auto-attach; not holding new tabs"
            );
            self.setup = None;
        }
        let late: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.since + HOLD_CAP <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for target in late {
            tracing::debug!("a new tab was held as long as it may; it runs on");
            self.release(&target);
        }
    }

    /// What the driver is to send now.
    pub fn take_steps(&mut self) -> Vec<Step> {
        std::mem::take(&mut self.steps)
    }
}

/// The events the gate reads.
const GATE_EVENTS: [&str; 3] = [
    "Target.attachedToTarget",
    "Target.detachedFromTarget",
    "Target.targetDestroyed",
];

/// `params.targetId` of a `Target.attachToTarget` command.
fn attach_target(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Command {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "targetId")]
        target_id: String,
    }
    let command: Command = serde_json::from_slice(bytes).ok()?;
    Some(command.params.target_id)
}

#[cfg(test)]
mod tests;
