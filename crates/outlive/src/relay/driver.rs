//! The relay's task: the one loop that reads both sockets and the handle's requests, asks the
//! [`Watchdog`] what each means, and hands every write to a forwarding half
//! ([`forward`]). It never awaits a socket write, so a deadline fires on time
//! however stuck a write is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite::{Error as WsError, Message};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tokio_util::task::AbortOnDropHandle;

use super::confirm;
use super::control::{Control, ControlRx, Heartbeat};
use super::death::{Confirmation, DeathCause, Signals};
use super::forward::{self, Flows, Outbox};
use super::frames::{Frame, Reading, WriteError};
use super::gate::{Seen, Sent, StartGate, Step};
use super::link::Stalls;
use super::socket::{self, Ends, FrameRx, Upstream, classify};
use super::tap::Taps;
use super::watchdog::{Action, Answer, Outbound, PageFailure, Verdict, Watchdog, Written};
use super::wire::{self, Head};
use crate::endpoint::CdpEndpoint;

/// After a death, how long the client may still take what was queued for it before the
/// browser died (it was read first, so chromiumoxide gets it, as it would without queues).
const DRAIN: Duration = Duration::from_secs(1);

/// Why the loop ended.
enum End {
    /// The browser connection died, made sure of as it says: publish it, let the client take
    /// what is queued, close.
    Died(DeathCause, Confirmation),
    /// chromiumoxide went away: outlive is done with this browser.
    ClientGone,
}

/// What the relay's task is given.
pub(super) struct Task {
    /// Where the one client connects, and the path it must ask for.
    pub listener: TcpListener,
    pub path: String,
    pub upstream: Upstream,
    /// How the upstream socket's writes go.
    pub flows: Flows,
    pub heartbeat: Heartbeat,
    pub signals: Signals,
    pub control: ControlRx,
    /// Ends the relay at once.
    pub cut: oneshot::Receiver<()>,
    /// Where tapped events are handed as they are read.
    pub taps: Taps,
    /// The endpoint again, when a second connection may ask the browser whether it lives.
    pub second: Option<CdpEndpoint>,
    /// Where the stalls the connection survived are summed.
    pub stalls: Arc<Stalls>,
}

/// The relay's task, from accepting the client to the end of the connection.
pub(super) async fn run(task: Task) {
    let Task {
        listener,
        path,
        upstream,
        flows,
        heartbeat,
        signals,
        mut control,
        mut cut,
        taps,
        second,
        stalls,
    } = task;
    // However the task ends (its handle dropped too), the taps learn it.
    let _closed = CloseOnDrop(taps.clone());
    let mut up = Ends::of(upstream, true);
    let Some((client, early)) = socket::accept_client(
        listener,
        path,
        &mut up.frames,
        &mut control,
        &mut cut,
        &signals,
    )
    .await
    else {
        return;
    };
    let mut client = Ends::of(client, false);
    let (mut driver, ends) = Driver::new(heartbeat, signals, flows, taps);
    driver.second(second, stalls);
    let QueueEnds {
        own,
        mut written,
        to_browser,
        to_client,
    } = ends;
    let browser_writer = forward::write(up.writer, Some(own), to_browser);
    let client_writer = forward::write(client.writer, None, to_client);
    tokio::pin!(browser_writer, client_writer);
    for c in early {
        driver.on_control(c);
    }
    let end = tokio::select! {
        biased;
        _ = &mut cut => return,
        written = &mut browser_writer => match written {
            Err(e) => {
                tracing::debug!(error = %e, "writing to the browser failed");
                End::Died(DeathCause::Reset, Confirmation::Reset)
            }
            Ok(()) => End::ClientGone,
        },
        written = &mut client_writer => {
            if let Err(WriteError::Cut) = written {
                // The browser's socket failed inside a reply; the client's frame is cut too.
                driver.signals.die(DeathCause::Reset);
            }
            return;
        }
        end = driver.run(&mut up.frames, &mut up.reading, &mut client.frames, &mut control, &mut written) => end,
    };
    let End::Died(cause, confirmed) = end else {
        return;
    };
    driver.signals.die_confirmed(cause, confirmed);
    // What the browser sent before it died still reaches the client, within `DRAIN`. The
    // writer runs while the held messages go into its queue.
    let to_client = driver.to_client;
    tokio::select! {
        _ = &mut cut => {}
        _ = tokio::time::sleep(DRAIN) => {}
        _ = futures::future::join(to_client.close(), client_writer) => {}
    }
}

/// Closes the taps when dropped.
struct CloseOnDrop(Taps);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The writers' ends of the driver's queues.
struct QueueEnds {
    own: forward::Own,
    written: mpsc::UnboundedReceiver<Written>,
    to_browser: mpsc::Receiver<Frame>,
    to_client: mpsc::Receiver<Frame>,
}

/// The loop's state: the watchdog, the two directions' outboxes, and who waits for replies
/// to the relay's own messages.
struct Driver {
    dog: Watchdog,
    signals: Signals,
    to_browser: Outbox,
    /// The relay's own messages to the browser (probes, calls) with their ids, written
    /// before the queue.
    own: mpsc::Sender<(u64, Message)>,
    to_client: Outbox,
    flows: Flows,
    /// Probes the handle asked for: id → whom to tell.
    probes: Vec<(u64, oneshot::Sender<()>)>,
    /// Calls of outlive's own: id → whom to hand the reply.
    /// Own calls awaiting their reply, with the session each was sent on.
    calls: HashMap<u64, (String, oneshot::Sender<String>)>,
    /// Scripts registered on each out-of-process frame as it attaches (none until armed).
    frame_scripts: Vec<String>,
    /// Where tapped events go as they are read.
    taps: Taps,
    /// Holds each new tab until chromiumoxide has set its auto-attach on it.
    gate: StartGate,
    /// The second path: the endpoint, the check out (one at a time), where it answers.
    second: Option<CdpEndpoint>,
    check: Option<AbortOnDropHandle<()>>,
    answers: (mpsc::Sender<Answer>, mpsc::Receiver<Answer>),
    /// Who waits for a suspicion to end (see [`Control::Suspect`]).
    suspects: Vec<oneshot::Sender<()>>,
    stalls: Arc<Stalls>,
}

type Incoming = Option<Result<Frame, WsError>>;

impl Driver {
    fn new(
        heartbeat: Heartbeat,
        signals: Signals,
        flows: Flows,
        taps: Taps,
    ) -> (Driver, QueueEnds) {
        let (to_browser, browser_rx) = Outbox::new();
        let (to_client, client_rx) = Outbox::new();
        let (own, own_rx) = mpsc::channel(forward::OWN_QUEUE);
        let (written_tx, written) = mpsc::unbounded_channel();
        let ends = QueueEnds {
            own: forward::Own {
                messages: own_rx,
                written: written_tx,
                flows: flows.clone(),
            },
            written,
            to_browser: browser_rx,
            to_client: client_rx,
        };
        let driver = Driver {
            dog: Watchdog::new(heartbeat, Instant::now()),
            signals,
            to_browser,
            own,
            to_client,
            flows,
            probes: Vec::new(),
            calls: HashMap::new(),
            frame_scripts: Vec::new(),
            taps,
            gate: StartGate::default(),
            second: None,
            check: None,
            answers: mpsc::channel(1),
            suspects: Vec::new(),
            stalls: Arc::default(),
        };
        (driver, ends)
    }

    /// Where a second connection may ask the browser whether it lives, if anywhere, and where
    /// the stalls survived are summed.
    fn second(&mut self, second: Option<CdpEndpoint>, stalls: Arc<Stalls>) {
        self.dog.can_confirm(second.is_some());
        self.second = second;
        self.stalls = stalls;
    }

    async fn run(
        &mut self,
        up: &mut FrameRx,
        reading: &mut Reading,
        client: &mut FrameRx,
        control: &mut ControlRx,
        written: &mut mpsc::UnboundedReceiver<Written>,
    ) -> End {
        let id = self.dog.next_id();
        self.gate.start(id, Instant::now());
        self.send_own(id, wire::hold_new_pages_message(id));
        loop {
            let mid_body = self.heard_reading(reading);
            self.dog.on_flow(self.flows.now());
            let now = Instant::now();
            let deadline = self.dog.next_deadline(now);
            let deadline = self.gate.due().map_or(deadline, |d| d.min(deadline));
            let gate_open = self.gate.is_open();
            // While the client does not take what the browser sends, nothing more is read from
            // the browser, and no silence is judged: the answers may be waiting unread. Unless
            // a streamed body is being read: the answers are behind it.
            let client_clear = self.to_client.is_clear();
            let browser_clear = self.to_browser.is_clear();
            let step = tokio::select! {
                biased;
                msg = up.recv(), if client_clear => self.on_browser_message(msg),
                msg = client.recv(), if client_clear && browser_clear && gate_open => self.on_client_message(msg),
                Some(c) = control.recv() => {
                    self.on_control(c);
                    Ok(())
                }
                Some(w) = written.recv() => {
                    self.dog.on_written(w);
                    Ok(())
                }
                Some(answer) = self.answers.1.recv() => {
                    let action = self.dog.on_answer(answer, Instant::now());
                    self.act(action)
                }
                () = self.to_browser.make_room(), if !browser_clear => Ok(()),
                () = self.to_client.make_room(), if !client_clear => Ok(()),
                Ok(()) = reading.changed() => Ok(()),
                () = sleep_until(deadline), if client_clear || mid_body => {
                    self.heard_reading(reading);
                    self.on_deadline()
                }
            };
            if let Err(end) = step {
                return end;
            }
            self.note_stalls();
            self.release_tabs();
        }
    }

    /// Tells the watchdog when a streamed body's last bytes came; whether one is being read.
    fn heard_reading(&mut self, reading: &mut Reading) -> bool {
        let at = *reading.borrow_and_update();
        if let Some(at) = at {
            self.dog.on_progress(at);
        }
        at.is_some()
    }

    /// Sends what the gate asks for: chromiumoxide's auto-attach on a held tab, early; a
    /// held tab let run, and the relay's session on it detached.
    fn release_tabs(&mut self) {
        for step in self.gate.take_steps() {
            let id = self.dog.next_id();
            match step {
                Step::AutoAttach { session } => {
                    self.send_own(id, wire::auto_attach_message(id, &session));
                    self.gate.set(id, session);
                }
                Step::Release { session } => {
                    let run = wire::call_message(
                        id,
                        &session,
                        "Runtime.runIfWaitingForDebugger",
                        serde_json::json!({}),
                    );
                    self.send_own(id, run);
                    let id = self.dog.next_id();
                    self.send_own(id, wire::detach_message(id, &session));
                }
            }
        }
    }

    fn on_browser_message(&mut self, msg: Incoming) -> Result<(), End> {
        let now = Instant::now();
        match msg {
            // A reply to the client, noted as answered at its start: a page failing while it
            // streams gets no second reply.
            Some(Ok(Frame::Streamed(reply))) => {
                wire::trace("from browser", &reply.head);
                self.dog.on_reply_started(&reply.head, now);
                self.to_client.push(Frame::Streamed(reply));
            }
            Some(Ok(Frame::Arrived(head))) => {
                let _ = self.dog.on_message(Some(&head), now);
            }
            Some(Ok(Frame::Whole(Message::Text(text)))) => {
                match self.dog.on_message(Some(text.as_bytes()), now) {
                    Verdict::Consumed => {}
                    Verdict::Own(id) => {
                        self.gate.own_reply(id);
                        self.answer(id, text.as_str());
                    }
                    Verdict::Forward(_)
                        if self.gate.on_browser(text.as_bytes(), now) == Seen::Consume => {}
                    Verdict::Forward(failure) => {
                        wire::trace("from browser", text.as_bytes());
                        if self.taps.wanted() {
                            self.taps.feed(&text);
                        }
                        self.arm_attached_frames();
                        self.to_client.push(wire::for_chromiumoxide(text));
                        if let Some(f) = failure {
                            self.fail_page(f);
                        }
                    }
                    Verdict::AnswerDialog {
                        id,
                        session,
                        accept,
                    } => {
                        wire::trace("from browser", text.as_bytes());
                        self.to_client.push(wire::for_chromiumoxide(text));
                        tracing::debug!(
                            accept,
                            "a JavaScript dialog opened on the page; answering it"
                        );
                        self.send_own(id, wire::dialog_message(id, &session, accept));
                    }
                }
            }
            Some(Ok(Frame::Whole(m @ Message::Binary(_)))) => {
                self.dog.on_message(None, now);
                self.to_client.push(m);
            }
            Some(Ok(Frame::Whole(Message::Close(_)))) | None => {
                return Err(End::Died(DeathCause::Closed, Confirmation::Close));
            }
            Some(Ok(Frame::Whole(Message::Ping(payload)))) => {
                self.dog.on_message(None, now);
                self.to_browser.push(Message::Pong(payload));
            }
            Some(Ok(Frame::Whole(_))) => {
                self.dog.on_message(None, now);
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "reading the browser's connection failed");
                let cause = classify(&e);
                let how = Confirmation::of(cause).unwrap_or(Confirmation::Reset);
                return Err(End::Died(cause, how));
            }
        }
        Ok(())
    }

    fn on_client_message(&mut self, msg: Incoming) -> Result<(), End> {
        match msg {
            Some(Ok(Frame::Whole(Message::Text(text)))) => {
                wire::trace("to browser", text.as_bytes());
                let head = Head::of(text.as_bytes());
                if self.gate.on_client(&head, text.as_bytes()) == Sent::AnswerHere {
                    if let (Some(id), Some(session)) = (head.id, head.session_id.as_deref()) {
                        self.to_client.push(wire::empty_reply(id, session));
                        return Ok(());
                    }
                }
                let verdict = self.dog.on_command(&head, Instant::now());
                match verdict {
                    Outbound::Forward => self.to_browser.push(Message::Text(text)),
                    // A command to a failed page: answered at once, never sent.
                    Outbound::Refuse { id, session } => self.to_client.push(wire::page_error(
                        id,
                        &session,
                        "the page failed earlier",
                    )),
                }
            }
            Some(Ok(Frame::Whole(m @ Message::Binary(_)))) => self.to_browser.push(m),
            Some(Ok(Frame::Whole(Message::Ping(payload)))) => {
                self.to_client.push(Message::Pong(payload));
            }
            Some(Ok(Frame::Whole(Message::Close(_)))) | Some(Err(_)) | None => {
                return Err(End::ClientGone);
            }
            Some(Ok(_)) => {}
        }
        Ok(())
    }

    fn on_deadline(&mut self) -> Result<(), End> {
        self.gate.expire(Instant::now());
        // The socket may have drained since the deadline was computed.
        self.dog.on_flow(self.flows.now());
        let action = self.dog.on_deadline(Instant::now());
        self.act(action)
    }

    /// Does what the watchdog asks.
    fn act(&mut self, action: Option<Action>) -> Result<(), End> {
        match action {
            None => {}
            Some(Action::Probe(id)) => self.send_own(id, wire::probe_message(id)),
            Some(Action::ProbeStall {
                page_id,
                browser_id,
                session,
            }) => {
                self.send_own(page_id, wire::page_probe_message(page_id, &session));
                self.send_own(browser_id, wire::probe_message(browser_id));
            }
            Some(Action::Confirm(limit)) => self.start_check(limit),
            Some(Action::Silent(how)) => return Err(End::Died(DeathCause::Silence, how)),
            Some(Action::PageFailed(f)) => self.fail_page(f),
        }
        Ok(())
    }

    /// Opens the second connection and asks, unless a check is out already. Its answer comes
    /// back on `answers`; the check ends with the driver.
    fn start_check(&mut self, limit: Duration) {
        let Some(endpoint) = self.second.clone() else {
            return;
        };
        if self.check.as_ref().is_some_and(|c| !c.is_finished()) {
            return;
        }
        let target = self.dog.watched_target();
        let answers = self.answers.0.clone();
        self.check = Some(AbortOnDropHandle::new(crate::quiet::spawn(async move {
            let answer = confirm::ask(&endpoint, target.as_deref(), limit).await;
            let _ = answers.send(answer).await;
        })));
    }

    /// Sums a stall the connection survived, and tells who waits that the silence ended.
    fn note_stalls(&mut self) {
        if let Some(stall) = self.dog.take_stall() {
            self.stalls.record(stall);
        }
        if !self.suspects.is_empty() && !self.dog.is_suspected() {
            for waiter in self.suspects.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    fn on_control(&mut self, c: Control) {
        match c {
            Control::Probe(reply) => {
                let id = self.dog.next_id();
                self.wait_probe(id, reply);
                self.send_own(id, wire::probe_message(id));
            }
            Control::ProbePage(reply) => {
                // No page, or a failed one: `reply` is dropped, and the probe fails at once.
                if let Some((id, session)) = self.dog.page_probe() {
                    self.wait_probe(id, reply);
                    self.send_own(id, wire::page_probe_message(id, &session));
                }
            }
            Control::Watch(page) => {
                self.frame_scripts.clear();
                self.dog.watch(page);
            }
            Control::Opening(generation) => self.dog.opening(generation),
            Control::Call { call, reply } => {
                let id = self.dog.next_id();
                self.calls.retain(|_, (_, r)| !r.is_closed());
                let message = wire::call_message(id, &call.session, call.method, call.params);
                self.calls.insert(id, (call.session, reply));
                self.send_own(id, message);
            }
            Control::Frames(page, reply) => {
                let _ = reply.send((self.dog.frames(&page), self.dog.frame_sessions()));
            }
            Control::ArmFrames(scripts) => {
                self.frame_scripts = scripts;
            }
            Control::Program(call) => self.dog.on_program(call),
            Control::Suspect(waiter) => {
                self.suspects.retain(|w| !w.is_closed());
                self.suspects.push(waiter);
                if let Some(Action::Confirm(limit)) = self.dog.suspect_now(Instant::now()) {
                    self.start_check(limit);
                }
            }
            Control::PageFailed(generation) => {
                if let Some(f) = self.dog.fail_watched(generation) {
                    self.fail_page(f);
                }
            }
            Control::Retire {
                target_id,
                session_id,
                crash,
            } => {
                if crash {
                    let id = self.dog.next_id();
                    self.send_own(id, wire::crash_message(id, &session_id));
                }
                let id = self.dog.next_id();
                self.send_own(id, wire::close_target_message(id, &target_id));
            }
        }
    }

    fn wait_probe(&mut self, id: u64, reply: oneshot::Sender<()>) {
        self.probes.retain(|(_, r)| !r.is_closed());
        self.probes.push((id, reply));
    }

    /// Registers the armed frame scripts on the out-of-process frames that just attached: sent
    /// before the attach is forwarded, so before chromiumoxide's `runIfWaitingForDebugger`
    /// lets the frame run.
    fn arm_attached_frames(&mut self) {
        let attached = self.dog.take_attached_frames();
        if self.frame_scripts.is_empty() {
            return;
        }
        let scripts = std::mem::take(&mut self.frame_scripts);
        for session in attached {
            // Chromium runs a target's new-document scripts only where its Page domain is on.
            let id = self.dog.next_id();
            let enable = wire::call_message(id, &session, "Page.enable", serde_json::json!({}));
            self.send_own(id, enable);
            for script in &scripts {
                let id = self.dog.next_id();
                self.send_own(id, wire::add_script_message(id, &session, script));
            }
        }
        self.frame_scripts = scripts;
    }

    /// Queues message `id` of the relay's own for the browser, without waiting. A call whose
    /// message is dropped is dropped with it: its caller hears at once that no reply comes.
    fn send_own(&mut self, id: u64, message: Message) {
        if let Err(e) = self.own.try_send((id, message)) {
            if let mpsc::error::TrySendError::Full(_) = e {
                tracing::debug!(
                    "the browser socket has not moved for long; an own message is dropped"
                );
            }
            self.calls.remove(&id);
        }
    }

    /// A reply to one of the relay's own messages: hands it to whoever waits for it.
    fn answer(&mut self, id: u64, text: &str) {
        if let Some((_, reply)) = self.calls.remove(&id) {
            // Its caller reads it with serde, which refuses a lone surrogate's escape as
            // chromiumoxide does: mended the same way.
            let text = wire::mend_lone_surrogates(text.as_bytes())
                .and_then(|m| String::from_utf8(m).ok())
                .unwrap_or_else(|| text.to_owned());
            let _ = reply.send(text);
            return;
        }
        if let Some(at) = self.probes.iter().position(|(pid, _)| *pid == id) {
            let (_, reply) = self.probes.swap_remove(at);
            let _ = reply.send(());
        }
    }

    /// Publishes the page's failure, then answers each of its commands in flight with an
    /// error (later ones are refused as they come).
    fn fail_page(&mut self, f: PageFailure) {
        self.signals.fail_page(f.generation, f.cause);
        let why = match f.cause {
            DeathCause::PageCrashed => "the page crashed",
            DeathCause::PageClosed => "the page was closed",
            _ => "the page stopped answering",
        };
        for id in f.commands {
            self.to_client.push(wire::page_error(id, &f.session, why));
        }
        // Own calls on the page's session will not be answered either: their callers learn
        // it now (dropped repliers), not at their timeouts.
        self.calls.retain(|_, (session, _)| *session != f.session);
    }
}
