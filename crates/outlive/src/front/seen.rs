//! What one client connection learns of its client as frames pass: its sessions, the tabs
//! and contexts it makes, and the commands the front answers itself.

use std::sync::Mutex;

use super::usage::{self, Sessions, Usage};
use super::waiting::ProgramCalls;
use crate::endpoint::CdpEndpoint;

/// What the front does with a command from the client.
pub(super) enum Heard {
    /// Sends it on to the browser.
    Forward,
    /// Nothing more: the front answered it itself.
    Answered,
    /// Ends the connection: the client sent `Browser.close` (this id), done with the browser.
    CloseBrowser(u64),
}

/// What one client connection's halves learn of the client (see `usage`).
pub(super) struct Seen<'a> {
    usage: &'a Usage,
    /// The browser's endpoint: which browser's contexts made again are this one's.
    endpoint: String,
    sessions: Mutex<Sessions>,
    /// Ids of the client's `Target.createBrowserContext` commands still unanswered.
    creating: Mutex<Vec<u64>>,
    /// Ids of the client's `Target.getBrowserContexts` commands still unanswered.
    listing: Mutex<Vec<u64>>,
    /// Ids of the client's `Target.createTarget` commands still unanswered.
    opening: Mutex<Vec<u64>>,
    /// The tabs shown to the client in its order when it asks to attach to them.
    attach: Mutex<usage::AttachOrder>,
    /// Replies the front gives itself, for the browser-to-client half to send.
    answers: tokio::sync::mpsc::UnboundedSender<String>,
    /// What the relay's watchdog learns of the client's commands waiting for the browser.
    program: ProgramCalls,
}

impl<'a> Seen<'a> {
    /// A connection's view, and where the front's own replies to it arrive.
    pub(super) fn new(
        usage: &'a Usage,
        endpoint: &CdpEndpoint,
        program: ProgramCalls,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (answers, answered) = tokio::sync::mpsc::unbounded_channel();
        let seen = Seen {
            usage,
            endpoint: endpoint.expose().to_owned(),
            sessions: Mutex::default(),
            creating: Mutex::default(),
            listing: Mutex::default(),
            opening: Mutex::default(),
            attach: Mutex::default(),
            answers,
            program,
        };
        (seen, answered)
    }

    /// A command from the client: whether to forward it.
    pub(super) fn on_client(&self, frame: &str) -> Heard {
        crate::sync::lock(&self.sessions).on_client(frame, self.usage);
        match usage::Command::of(frame) {
            usage::Command::Forward => {}
            usage::Command::CloseBrowser(id) => return Heard::CloseBrowser(id),
            usage::Command::CreateContext(id) => match self.usage.take_ready(&self.endpoint) {
                // A context made again from the checkpoint, its state in place: answered here.
                Some(context) => {
                    let _ = self.answers.send(usage::context_reply(id, &context));
                    return Heard::Answered;
                }
                None => crate::sync::lock(&self.creating).push(id),
            },
            usage::Command::ListContexts(id) => {
                crate::sync::lock(&self.listing).push(id);
            }
            usage::Command::CreateTab(id) => crate::sync::lock(&self.opening).push(id),
            usage::Command::AutoAttach(id) => crate::sync::lock(&self.attach).asked(id),
        }
        let sessions = crate::sync::lock(&self.sessions);
        self.program
            .sent(frame.as_bytes(), |session| sessions.target(session));
        Heard::Forward
    }

    /// A message from the browser, as the client is to see it: `None` as it is, else the
    /// messages to send in its place.
    pub(super) fn on_browser(&self, frame: &str) -> Option<Vec<String>> {
        self.program.heard(frame.as_bytes());
        crate::sync::lock(&self.sessions).on_browser(frame);
        self.note_made(frame);
        let order = || self.usage.tab_order(&self.endpoint);
        if let Some(frames) = crate::sync::lock(&self.attach).on_browser(frame, order) {
            return Some(frames);
        }
        self.without_waiting_contexts(frame).map(|f| vec![f])
    }

    /// Notes the tabs and contexts the browser says the client made.
    fn note_made(&self, frame: &str) {
        let mut opening = crate::sync::lock(&self.opening);
        let made = opening
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::tab_created(frame, id).map(|t| (i, t)));
        if let Some((i, tab)) = made {
            opening.remove(i);
            self.usage.tab_opened(&self.endpoint, &tab);
        }
        drop(opening);
        let mut creating = crate::sync::lock(&self.creating);
        let made = creating
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::context_created(frame, id).map(|c| (i, c)));
        if let Some((i, context)) = made {
            creating.remove(i);
            self.usage.context_made(&context);
        }
    }

    /// A reply to the client's `Target.getBrowserContexts` without the contexts not handed out.
    fn without_waiting_contexts(&self, frame: &str) -> Option<String> {
        let mut listing = crate::sync::lock(&self.listing);
        if listing.is_empty() || !frame.contains("browserContextIds") {
            return None;
        }
        let waiting = self.usage.waiting(&self.endpoint);
        let (i, reply) = listing
            .iter()
            .enumerate()
            .find_map(|(i, &id)| usage::without_contexts(frame, id, &waiting).map(|r| (i, r)))?;
        listing.remove(i);
        Some(reply)
    }
}
