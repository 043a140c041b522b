//! The relay's judgement, without I/O: heartbeats, silence while commands wait, the page's
//! stalls, navigations and failures, kept as state that the driver feeds and asks.
//!
//! In, each with its time: the browser's messages ([`Watchdog::on_message`]), the client's
//! commands ([`Watchdog::on_command`]), a program's commands on its own connection
//! ([`Watchdog::on_program`]), the upstream writes ([`Watchdog::on_flow`],
//! [`Watchdog::on_written`]), the handle's requests ([`Watchdog::watch`], …). Out: a
//! [`Verdict`] or [`Outbound`] per message; at [`Watchdog::next_deadline`], the [`Action`] due
//! ([`Watchdog::on_deadline`]). No clock or socket here: every timing rule is unit-tested with
//! made-up instants (`watchdog/tests.rs`). Probes behind a big write: `docs/deaths.md`.

mod page;
mod silence;
mod suspicion;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

pub(super) use self::page::PageFailure;
use self::page::{PageState, StallProbe};
use self::silence::Waiting;
pub(crate) use self::suspicion::Answer;
use self::suspicion::{Link, Step};
use super::control::{FrameSession, Heartbeat, ProgramCall, WatchedPage};
use super::death::{Confirmation, DeathCause};
use super::wire::{self, Head, Inbound};

/// What the driver must do when a deadline passed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Ask the browser for a sign of life (`Browser.getVersion`) under this id.
    Probe(u64),
    /// A page command stalled: ask the page (`page_id`, on `session`) and the browser
    /// (`browser_id`) at once.
    ProbeStall {
        page_id: u64,
        browser_id: u64,
        session: String,
    },
    /// The connection fell silent: ask the browser by a second connection whether it lives,
    /// within this long, and hand the answer to [`Watchdog::on_answer`].
    Confirm(Duration),
    /// The browser is dead, confirmed this way: a second connection was refused or closed,
    /// or the silence outlasted its allowance.
    Silent(Confirmation),
    /// The watched page failed.
    PageFailed(PageFailure),
}

/// What the driver does with a message from the browser.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Forward it to the client; then, if the message said so, fail the page.
    Forward(Option<PageFailure>),
    /// A reply to one of the relay's own messages: answer whoever waits for it.
    Own(u64),
    /// A reply the watchdog itself waited for: nothing more to do.
    Consumed,
    /// A JavaScript dialog opened on the watched page: forward the event, then answer the
    /// dialog (`Page.handleJavaScriptDialog`) under `id`.
    AnswerDialog {
        id: u64,
        session: String,
        accept: bool,
    },
}

/// What the driver does with a command from the client.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outbound {
    Forward,
    /// A command to a failed page: answer it with an error at once, never send it.
    Refuse {
        id: u64,
        session: String,
    },
}

/// How the upstream socket's writes go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Flow {
    /// When a write last got room after waiting for it (a drain).
    pub drained: Option<Instant>,
    /// How long that write had waited.
    pub last_stall: Duration,
}

/// One of the relay's own messages went into the upstream socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Written {
    /// The message's id.
    pub id: u64,
    /// When the socket took its last byte.
    pub at: Instant,
    /// The socket's flow then.
    pub flow: Flow,
}

/// The relay's state of mind about the browser and the task's page.
pub(super) struct Watchdog {
    heartbeat: Heartbeat,
    next_id: u64,
    /// When anything last came from the browser.
    last_heard: Instant,
    /// How the upstream socket's writes go.
    flow: Flow,
    /// The idle heartbeat out: its id and when it was sent.
    heartbeat_sent: Option<(u64, Instant)>,
    /// Probes out that were written: id → when their clock started.
    clocks: BTreeMap<u64, Instant>,
    silence: Waiting,
    page: PageState,
    /// What the connection has shown, and a silence under suspicion.
    link: Link,
    /// A stall that ended since the driver last asked ([`Watchdog::take_stall`]).
    stall: Option<Duration>,
}

impl Watchdog {
    /// A watchdog for a connection that was last heard from at `now`. Its silences are judged
    /// by time alone until [`Watchdog::can_confirm`] says a second connection may ask.
    pub fn new(heartbeat: Heartbeat, now: Instant) -> Watchdog {
        Watchdog {
            heartbeat,
            next_id: wire::OWN_ID_BASE,
            last_heard: now,
            flow: Flow::default(),
            heartbeat_sent: None,
            clocks: BTreeMap::new(),
            silence: Waiting::default(),
            page: PageState::default(),
            link: Link::default(),
            stall: None,
        }
    }

    /// Whether a second connection may ask the browser whether it lives.
    pub fn can_confirm(&mut self, can: bool) {
        self.link.can_confirm = can;
    }

    /// The watched page's target: a second connection that lists it reached this browser.
    pub fn watched_target(&self) -> Option<String> {
        self.page.watched.as_ref().map(|w| w.target_id.clone())
    }

    /// A fresh id for a message of the relay's own.
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// When probe `id`, sent at `sent` and unanswered for `timeout`, is judged: `timeout`
    /// after its clock started once written; not written yet, once the socket has not
    /// drained for the heartbeat timeout since it was sent. A clock waits for the end of a
    /// busy command the probe was queued behind (a screenshot's probes answer after it), and
    /// for the end of a stall the connection survived (its answers were held behind it).
    fn judged_at(&self, id: u64, sent: Instant, timeout: Duration) -> Instant {
        let from = |t: Instant| {
            let t = self.silence.clock_from(t);
            self.link.stall_ended.map_or(t, |e| e.max(t))
        };
        match self.clocks.get(&id) {
            Some(started) => from(*started) + timeout,
            None => {
                let moved = self.flow.drained.map_or(sent, |d| d.max(sent));
                from(moved) + timeout.max(self.heartbeat.timeout)
            }
        }
    }

    /// The ids of the probes out: heartbeat, fast probe, page stall probe.
    fn probes_out(&self) -> [Option<u64>; 3] {
        [
            self.heartbeat_sent.map(|(id, _)| id),
            self.silence.probe.map(|(id, _)| id),
            self.page.stall_probe.as_ref().map(|p| p.page_id),
        ]
    }

    /// One of the relay's own messages was written: a probe's clock starts, once what the
    /// send buffer held before it may have crossed (three stalls after the last drain, at
    /// most the heartbeat timeout).
    pub fn on_written(&mut self, written: Written) {
        let out = self.probes_out();
        self.clocks.retain(|id, _| out.contains(&Some(*id)));
        if !out.contains(&Some(written.id)) {
            return;
        }
        let crossed = written
            .flow
            .drained
            .map(|drained| drained + (written.flow.last_stall * 3).min(self.heartbeat.timeout));
        let started = crossed.map_or(written.at, |c| c.max(written.at));
        self.clocks.insert(written.id, started);
    }

    /// A message from the browser: `Some(text)`, or `None` for any other data or control
    /// frame. Anything at all is a sign of life.
    pub fn on_message(&mut self, text: Option<&[u8]>, now: Instant) -> Verdict {
        self.last_heard = now;
        if let Some(stall) = self.link.heard(now) {
            tracing::debug!(?stall, "the connection was stalled, not dead: heard again");
            self.stall = Some(self.stall.map_or(stall, |s| s.max(stall)));
        }
        let heartbeat = self.heartbeat_sent.take();
        let Some(bytes) = text else {
            self.silence.heard(None, now);
            return Verdict::Forward(None);
        };
        match wire::inbound(bytes) {
            Inbound::Reply(id) if id >= wire::OWN_ID_BASE => {
                self.sample_probe(id, heartbeat, now);
                if self.silence.heard(Some(id), now) {
                    return Verdict::Consumed;
                }
                self.page.own_reply(id);
                Verdict::Own(id)
            }
            Inbound::Reply(id) => {
                self.silence.heard(None, now);
                self.silence.replied(id, now);
                self.page.replied(id);
                Verdict::Forward(None)
            }
            Inbound::Event(method) => {
                self.silence.heard(None, now);
                // Responses matter only to a navigation in progress: no parse of the others.
                if method == "Network.responseReceived" && !self.page.is_navigating() {
                    return Verdict::Forward(None);
                }
                let Some(event) = wire::page_event(&method, bytes) else {
                    return Verdict::Forward(None);
                };
                self.page.track_navigation(&event, now);
                self.page.track_frames(&event);
                if let Some(accept) = self.page.track_dialog(&event) {
                    let session = event.session_id.unwrap_or_default();
                    return Verdict::AnswerDialog {
                        id: self.next_id(),
                        session,
                        accept,
                    };
                }
                if let Some(failure) = self.page.track_opening(&event) {
                    return Verdict::Forward(Some(failure));
                }
                let failure = self.page.failure(&event);
                Verdict::Forward(failure.and_then(|cause| self.fail_page(cause)))
            }
            Inbound::Other => {
                self.silence.heard(None, now);
                Verdict::Forward(None)
            }
        }
    }

    /// A probe's answer is a round trip of the link's own: the heartbeat, the fast probe,
    /// the browser probe beside a page stall probe.
    fn sample_probe(&mut self, id: u64, heartbeat: Option<(u64, Instant)>, now: Instant) {
        let stall = self.page.stall_probe.as_ref();
        let sent = [
            heartbeat,
            self.silence.probe,
            stall.map(|p| (p.browser_id, p.sent)),
        ]
        .into_iter()
        .flatten()
        .find(|(pid, _)| *pid == id);
        if let Some((_, sent)) = sent {
            let started = self.clocks.get(&id).copied().unwrap_or(sent);
            self.link.sample(now.saturating_duration_since(started));
        }
    }

    /// The longest stall the connection survived since the last call, if any.
    pub fn take_stall(&mut self) -> Option<Duration> {
        self.stall.take()
    }

    /// A reply to the client starts to stream in (`head`, its first bytes). Its page command
    /// is answered, so a page failing meanwhile does not answer it again; a busy command
    /// still counts as in flight until the reply's end comes to [`Self::on_message`].
    pub fn on_reply_started(&mut self, head: &[u8], now: Instant) {
        self.on_progress(now);
        if let Inbound::Reply(id) = wire::inbound(head) {
            self.page.replied(id);
        }
    }

    /// Bytes of a message still being read came at `at`: the browser is alive.
    pub fn on_progress(&mut self, at: Instant) {
        if at > self.last_heard {
            let _ = self.on_message(None, at);
        }
    }

    /// A command from the client.
    pub fn on_command(&mut self, head: &Head<'_>, now: Instant) -> Outbound {
        if let (Some(id), Some(session)) = (head.id, head.session_id.as_deref()) {
            if self.page.dead_sessions.contains(session) {
                return Outbound::Refuse {
                    id,
                    session: session.to_owned(),
                };
            }
            self.page
                .on_command(id, session, head.method.as_deref(), now);
        }
        if let Some(id) = head.id {
            let busy = head.method.as_deref().is_some_and(wire::keeps_browser_busy);
            self.silence.sent(id, busy, now);
        }
        Outbound::Forward
    }

    /// A program's command on its own connection (see [`ProgramCall`]): while one waits,
    /// silence is judged as while outlive's own commands wait.
    pub fn on_program(&mut self, call: ProgramCall) {
        self.silence.program(call);
    }

    /// How the upstream socket's writes go now.
    pub fn on_flow(&mut self, flow: Flow) {
        self.flow = flow;
    }

    /// The next moment [`Watchdog::on_deadline`] may have something to do.
    pub fn next_deadline(&mut self, now: Instant) -> Instant {
        if let Some(due) = self.link.deadline(self.heartbeat) {
            return due;
        }
        [self.silence_due(now), self.stall_due()]
            .into_iter()
            .flatten()
            .fold(self.heartbeat_due(), Instant::min)
    }

    fn heartbeat_due(&self) -> Instant {
        match self.heartbeat_sent {
            Some((id, sent)) => self.judged_at(id, sent, self.silence.allowance(self.heartbeat)),
            None => self.last_heard + self.heartbeat.interval,
        }
    }

    fn silence_due(&mut self, now: Instant) -> Option<Instant> {
        match self.silence.probe {
            Some((id, sent)) => {
                Some(self.judged_at(id, sent, self.silence.timeout(self.heartbeat)))
            }
            None => self.silence.probe_due(self.last_heard, self.heartbeat, now),
        }
    }

    fn stall_due(&self) -> Option<Instant> {
        self.page.deadline(self.heartbeat, |id, sent| {
            self.judged_at(id, sent, self.silence.allowance(self.heartbeat))
        })
    }

    /// What is due at `now`, if anything: the fast probe (or the silence it ends in), the
    /// page's stall probe (or the hang or silence it ends in), the heartbeat (or the silence).
    pub fn on_deadline(&mut self, now: Instant) -> Option<Action> {
        if self.link.is_suspected() {
            let step = self.link.on_deadline(now, self.heartbeat);
            return step.map(|s| self.act(s));
        }
        if self.silence_due(now).is_some_and(|d| d <= now) {
            if self.silence.probe.is_some() {
                tracing::debug!(timeout = ?self.silence.timeout(self.heartbeat), rtt = ?self.silence.rtt(), "nothing from the browser while commands wait, probe unanswered");
                return self.suspect(now);
            }
            let id = self.next_id();
            self.silence.probe = Some((id, now));
            tracing::trace!(quiet = ?self.silence.quiet(self.heartbeat), "commands wait on a quiet browser; asking it");
            return Some(Action::Probe(id));
        }
        if self.stall_due().is_some_and(|d| d <= now) {
            return self.on_stall(now);
        }
        if self.heartbeat_due() > now {
            return None;
        }
        if self.heartbeat_sent.is_some() {
            tracing::debug!(timeout = ?self.silence.allowance(self.heartbeat), "heartbeat unanswered");
            return self.suspect(now);
        }
        let id = self.next_id();
        self.heartbeat_sent = Some((id, now));
        Some(Action::Probe(id))
    }

    fn on_stall(&mut self, now: Instant) -> Option<Action> {
        match self.page.stall_probe.take() {
            // The page did not answer in time.
            Some(probe) if probe.browser_answered => {
                tracing::debug!(timeout = ?self.silence.allowance(self.heartbeat), "page probe unanswered while the browser answers");
                self.fail_page(DeathCause::PageHung).map(Action::PageFailed)
            }
            // Neither answered: the connection is silent, the browser is gone.
            Some(probe) => {
                tracing::debug!(timeout = ?self.silence.allowance(self.heartbeat), "page and browser probes unanswered");
                // Kept: if the connection was only stalled, the answers still come.
                self.page.stall_probe = Some(probe);
                self.suspect(now)
            }
            // A command has been outstanding for half an interval: ask the page and the browser.
            None => {
                let session = self.page.watched.as_ref()?.session_id.clone();
                let (page_id, browser_id) = (self.next_id(), self.next_id());
                self.page.stall_probe = Some(StallProbe {
                    page_id,
                    browser_id,
                    sent: now,
                    browser_answered: false,
                });
                self.page.last_stall_probe = Some(now);
                tracing::debug!(stalled = ?self.page.pending.first_key_value().map(|(_, t)| now - *t), "a page command stalled; probing the page");
                Some(Action::ProbeStall {
                    page_id,
                    browser_id,
                    session,
                })
            }
        }
    }

    /// The connection is silent: suspect it, and ask a second path if there is one. Without
    /// one, the verdict waits for the allowance ([`Link::allowance`]).
    fn suspect(&mut self, now: Instant) -> Option<Action> {
        let step = self.link.suspect(self.last_heard)?;
        tracing::debug!(silent = ?now.saturating_duration_since(self.last_heard), "the connection is silent; asking the browser by a second connection");
        Some(self.act(step))
    }

    /// Something outside says the browser may be gone (an on-demand probe went unanswered):
    /// suspect the connection, as for a silence.
    pub fn suspect_now(&mut self, now: Instant) -> Option<Action> {
        self.suspect(now)
    }

    /// Whether a silence is under suspicion.
    pub fn is_suspected(&self) -> bool {
        self.link.is_suspected()
    }

    /// A second-path check answered at `now`.
    pub fn on_answer(&mut self, answer: Answer, now: Instant) -> Option<Action> {
        tracing::debug!(?answer, "the second connection answered");
        let step = self.link.on_answer(answer, now)?;
        Some(self.act(step))
    }

    fn act(&self, step: Step) -> Action {
        match step {
            Step::Confirm => Action::Confirm(self.link.check_timeout()),
            Step::Dead(how) => Action::Silent(how),
        }
    }

    /// Watches `page` from now on.
    pub fn watch(&mut self, page: WatchedPage) {
        self.page.watch(page);
    }

    /// A page is being opened as `generation`.
    pub fn opening(&mut self, generation: u64) {
        self.page.opening(generation);
    }

    /// The handle declared page `generation` failed (hung): fail it here too, if it is still
    /// the watched page and not failed yet.
    pub fn fail_watched(&mut self, generation: u64) -> Option<PageFailure> {
        let watched = self.page.watched.as_ref()?;
        if watched.generation != generation || self.page.failed() {
            return None;
        }
        self.fail_page(DeathCause::PageHung)
    }

    /// An id and the session for an on-demand page probe, unless no page is watched or it
    /// failed.
    pub fn page_probe(&mut self) -> Option<(u64, String)> {
        let session = self.page.live_session()?.to_owned();
        Some((self.next_id(), session))
    }

    /// The out-of-process frames of the page whose session is `page`.
    pub fn frames(&self, page: &str) -> Vec<FrameSession> {
        self.page
            .frames_of(page)
            .into_iter()
            .map(|(session, frame_id)| FrameSession { session, frame_id })
            .collect()
    }

    /// The sessions of every out-of-process frame attached.
    pub fn frame_sessions(&self) -> Vec<String> {
        self.page.frames.keys().cloned().collect()
    }

    /// The out-of-process frames attached since the last call.
    pub fn take_attached_frames(&mut self) -> Vec<String> {
        std::mem::take(&mut self.page.attached)
    }

    /// Marks the watched page failed: its session is dead from now on, and its commands in
    /// flight are handed back to be answered with an error.
    fn fail_page(&mut self, cause: DeathCause) -> Option<PageFailure> {
        let watched = self.page.watched.as_ref()?;
        if self.page.failed() {
            return None;
        }
        let (generation, session) = (watched.generation, watched.session_id.clone());
        let target = watched.target_id.clone();
        self.page.failed_generation = generation;
        self.page.dead_sessions.insert(session.clone());
        self.page.stall_probe = None;
        let commands: Vec<u64> = std::mem::take(&mut self.page.pending).into_keys().collect();
        for id in &commands {
            self.silence.in_flight.remove(id);
        }
        self.silence.page_failed(&target);
        Some(PageFailure {
            generation,
            cause,
            session,
            commands,
        })
    }
}

#[cfg(test)]
mod tests;
