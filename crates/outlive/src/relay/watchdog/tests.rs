//! The watchdog's timing rules with made-up instants: no socket, no Chromium, no sleeping.

use std::time::Duration;

use super::silence::Waiting;
use super::suspicion::{MAX_STALL, UNCONFIRMED_ALLOWANCE};
use super::*;
use crate::dialogs::Dialogs;

const HEARTBEAT: Heartbeat = Heartbeat {
    interval: Duration::from_secs(1),
    timeout: Duration::from_secs(2),
};

/// A watchdog whose silences a second connection confirms.
fn confirming(mut dog: Watchdog) -> Watchdog {
    dog.can_confirm(true);
    dog
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn head<'a>(id: u64, method: &'a str, session: Option<&'a str>) -> Head<'a> {
    Head {
        id: Some(id),
        method: Some(method.into()),
        session_id: session.map(Into::into),
    }
}

fn reply(id: u64) -> Vec<u8> {
    format!(r#"{{"id":{id},"result":{{}}}}"#).into_bytes()
}

/// A browser and a socket the watchdog runs against, in made-up time. The browser answers
/// the relay's browser probes `rtt` after they were written (or never), never a page probe.
/// The socket's writer is busy with a big write from `busy.0` until `busy.1` (or for good),
/// draining at `drains`; the relay's own messages queued meanwhile are written when it ends.
struct Sim {
    dog: Watchdog,
    t0: Instant,
    now: Instant,
    rtt: Option<Duration>,
    /// Replies on their way: when they arrive, and their id.
    replies: Vec<(Instant, u64)>,
    busy: Option<(Instant, Option<Instant>)>,
    drains: Vec<Instant>,
    /// Own messages waiting for the writer: their ids, and whether the browser answers them.
    queued: Vec<(u64, bool)>,
    /// Every action but a silence, with when it came (since `t0`).
    log: Vec<(Duration, Action)>,
    /// What a second connection answers, and after how long; `None`: it never does.
    second: Option<(Duration, Answer)>,
    /// The second connection's answer on its way: when it arrives.
    answer: Option<(Instant, Answer)>,
    /// When the watchdog asked a second connection (since `t0`).
    confirms: Vec<Duration>,
}

impl Sim {
    fn new(rtt: Option<Duration>) -> Sim {
        let t0 = Instant::now();
        Sim {
            dog: confirming(Watchdog::new(HEARTBEAT, t0)),
            t0,
            now: t0,
            rtt,
            replies: Vec::new(),
            busy: None,
            drains: Vec::new(),
            queued: Vec::new(),
            log: Vec::new(),
            second: Some((Duration::ZERO, Answer::Dead(Confirmation::Refused))),
            answer: None,
            confirms: Vec::new(),
        }
    }

    fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    /// A big write starts at `from` (since `t0`) and never ends: the socket does not drain.
    fn stuck_from(&mut self, from: Duration) {
        self.busy = Some((self.t0 + from, None));
    }

    /// A big write starts at `from`, the socket draining every `every` until `to` (since
    /// `t0`); then the write is stuck for good, or done if `done`.
    fn draining(&mut self, from: Duration, to: Duration, every: Duration, done: bool) {
        self.busy = Some((self.t0 + from, done.then_some(self.t0 + to)));
        let mut t = from + every;
        while t <= to {
            self.drains.push(self.t0 + t);
            t += every;
        }
    }

    fn busy_now(&self) -> bool {
        self.busy
            .is_some_and(|(from, until)| from <= self.now && until.is_none_or(|u| self.now < u))
    }

    /// The socket's flow now: each stall began at the drain before (or when the write began).
    fn flow(&self) -> Flow {
        let drained = self
            .drains
            .iter()
            .filter(|d| **d <= self.now)
            .max()
            .copied();
        let last_stall = drained.map_or(Duration::ZERO, |d| {
            let before = self.drains.iter().filter(|e| **e < d).max().copied();
            d - before.or(self.busy.map(|b| b.0)).unwrap_or(d)
        });
        Flow {
            drained,
            last_stall,
        }
    }

    /// The next moment the socket changes.
    fn next_socket_change(&self) -> Option<Instant> {
        let (from, until) = self.busy?;
        let drains = self.drains.iter().copied();
        drains
            .chain([from])
            .chain(until)
            .filter(|t| *t > self.now)
            .min()
    }

    /// Writes the own messages queued, unless the writer is busy.
    fn write_queued(&mut self) {
        if self.busy_now() {
            return;
        }
        for (id, answered) in std::mem::take(&mut self.queued) {
            let written = Written {
                id,
                at: self.now,
                flow: self.flow(),
            };
            self.dog.on_written(written);
            if let (true, Some(rtt)) = (answered, self.rtt) {
                self.replies.push((self.now + rtt, id));
            }
        }
    }

    /// Runs until `until` (since `t0`): `Some(when)` if the connection was declared silent.
    fn run_until(&mut self, until: Duration) -> Option<Duration> {
        let end = self.at(until);
        for _ in 0..100_000 {
            self.dog.on_flow(self.flow());
            let deadline = self.dog.next_deadline(self.now);
            let reply = self.replies.iter().map(|r| r.0).min();
            let answer = self.answer.map(|a| a.0);
            let next = [Some(deadline), reply, answer, self.next_socket_change()]
                .into_iter()
                .flatten()
                .min()
                .expect("a deadline")
                .max(self.now);
            if next > end {
                self.now = end;
                return None;
            }
            self.now = next;
            self.write_queued();
            self.deliver();
            if let Some(silent) = self.answered() {
                return Some(silent);
            }
            self.dog.on_flow(self.flow());
            if deadline <= self.now {
                if let Some(silent) = self.on_deadline() {
                    return Some(silent);
                }
            }
        }
        panic!("the watchdog made no progress");
    }

    fn deliver(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.replies.drain(..).partition(|r| r.0 <= now);
        self.replies = later;
        for (_, id) in due {
            self.dog.on_message(Some(&reply(id)), now);
        }
    }

    /// The second connection's answer, if it came: `Some(when)` if it confirmed a death.
    fn answered(&mut self) -> Option<Duration> {
        let (at, answer) = self.answer.filter(|(at, _)| *at <= self.now)?;
        self.answer = None;
        let action = self.dog.on_answer(answer, at)?;
        self.act(action)
    }

    fn on_deadline(&mut self) -> Option<Duration> {
        let action = self.dog.on_deadline(self.now)?;
        self.act(action)
    }

    fn act(&mut self, action: Action) -> Option<Duration> {
        let since = self.now - self.t0;
        match &action {
            Action::Silent(_) => return Some(since),
            Action::Confirm(_) => {
                self.confirms.push(since);
                self.answer = self.second.map(|(after, a)| (self.now + after, a));
                return self.answered();
            }
            Action::Probe(id) => self.queued.push((*id, true)),
            Action::ProbeStall {
                page_id,
                browser_id,
                ..
            } => {
                self.queued.push((*page_id, false));
                self.queued.push((*browser_id, true));
            }
            Action::PageFailed(_) => {}
        }
        self.write_queued();
        self.log.push((since, action));
        None
    }

    /// The watchdog watching page 1 (target `T`, session `S`), dismissing its dialogs.
    fn watching(self) -> Sim {
        self.watching_with(Dialogs::Dismiss)
    }

    /// The watchdog watching page 1 (target `T`, session `S`).
    fn watching_with(mut self, dialogs: Dialogs) -> Sim {
        self.dog.watch(WatchedPage {
            target_id: "T".into(),
            session_id: "S".into(),
            generation: 1,
            dialogs,
        });
        self
    }

    /// A client command `id` goes out now.
    fn command(&mut self, id: u64, method: &str, session: Option<&str>) {
        let out = self.dog.on_command(&head(id, method, session), self.now);
        assert_eq!(out, Outbound::Forward);
    }

    /// Command 1 (on `session`) goes out now and is answered `rtt` later: a round trip measured.
    fn round_trip(&mut self, session: Option<&str>, rtt: Duration) {
        self.command(1, "Runtime.evaluate", session);
        self.now += rtt;
        self.dog.on_message(Some(&reply(1)), self.now);
    }

    /// A message from the browser arrives now.
    fn hear(&mut self, text: &str) -> Verdict {
        self.dog.on_message(Some(text.as_bytes()), self.now)
    }
}

#[test]
fn an_idle_connection_is_asked_each_interval_and_silent_after_interval_plus_timeout() {
    let mut sim = Sim::new(Some(ms(5)));
    assert_eq!(sim.run_until(ms(3000)), None);
    let probes: Vec<_> = sim.log.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        probes,
        [ms(1000), ms(2005)],
        "one heartbeat an interval after the last answer"
    );
    // The browser stops answering: the next heartbeat goes unanswered for the timeout.
    sim.rtt = None;
    assert_eq!(sim.run_until(ms(10_000)), Some(ms(3010 + 2000)));
}

#[test]
fn a_write_stuck_on_a_half_open_socket_is_silence_within_interval_plus_timeout() {
    // The heartbeat alone watches (no round trip measured yet): a multi-MB command goes out
    // at once, the socket never drains, nothing comes back. The heartbeat queued behind the
    // command is never written, and judged once the socket has not drained for the timeout.
    let mut sim = Sim::new(None);
    sim.command(1, "Runtime.evaluate", Some("S"));
    sim.stuck_from(ms(1));
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert_eq!(silent, HEARTBEAT.interval + HEARTBEAT.timeout);
    assert_eq!(sim.log.len(), 1, "{:?}", sim.log);

    // With a round trip measured, the waiting path asks sooner (250 ms); stuck behind the
    // command, its probe gets the heartbeat timeout rather than its own 600 ms.
    let mut sim = Sim::new(None);
    sim.command(1, "Runtime.evaluate", None);
    sim.now += ms(2);
    assert_eq!(
        sim.hear(std::str::from_utf8(&reply(1)).unwrap()),
        Verdict::Forward(None)
    );
    sim.now += ms(8);
    sim.command(2, "Runtime.evaluate", None);
    sim.stuck_from(ms(11));
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert!(matches!(sim.log[..], [(t, Action::Probe(_)), ..] if t == ms(10 + 250)));
    assert_eq!(silent, ms(10 + 250) + HEARTBEAT.timeout);
    assert!(silent <= HEARTBEAT.interval + HEARTBEAT.timeout);

    // Written (the socket took it), the waiting path's own timeout: 250 + 600 ms.
    let mut sim = Sim::new(None);
    sim.round_trip(None, ms(2));
    sim.now += ms(8);
    sim.command(2, "Runtime.evaluate", None);
    assert_eq!(sim.run_until(ms(60_000)), Some(ms(10 + 250 + 600)));
}

#[test]
fn a_slow_write_that_keeps_draining_is_not_silence() {
    let mut sim = Sim::new(None);
    // A measured round trip, so both the waiting path and the heartbeat are armed.
    sim.round_trip(None, ms(2));
    // A 40 MB command over a slow link: its write waits for room, the socket draining
    // every 700 ms (a third of the send buffer acknowledged) for 5 s; then it stops.
    sim.command(2, "Runtime.evaluate", None);
    sim.draining(ms(100), ms(5000), ms(700), false);
    assert_eq!(sim.run_until(ms(5000)), None, "{:?}", sim.log);
    assert_eq!(
        sim.log.len(),
        2,
        "the fast probe and the heartbeat, each once: {:?}",
        sim.log
    );
    // Both probes wait behind the write: judged once it has not drained for the timeout.
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert_eq!(silent, ms(5000) + HEARTBEAT.timeout);
}

#[test]
fn a_probe_written_after_a_slow_write_waits_for_the_send_buffer_to_cross() {
    // The write ends at 5 s; the probes behind it go out then, behind a send buffer that
    // takes three stalls (2.1 s, at most the heartbeat timeout: 2 s) to cross.
    let mut sim = Sim::new(None);
    sim.round_trip(None, ms(2));
    sim.command(2, "Runtime.evaluate", None);
    sim.draining(ms(100), ms(5000), ms(700), true);
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert_eq!(silent, ms(5000) + HEARTBEAT.timeout + ms(600));
    // A browser that answers once the buffer has crossed is alive (until the next probe).
    let mut sim = Sim::new(Some(ms(1900)));
    sim.round_trip(None, ms(2));
    sim.command(2, "Runtime.evaluate", None);
    sim.draining(ms(100), ms(5000), ms(700), true);
    assert_eq!(sim.run_until(ms(7500)), None, "{:?}", sim.log);
}

#[test]
fn writes_that_never_waited_do_not_hold_the_silence_off() {
    // A silent browser whose kernel still takes small commands: they never wait, so they do
    // not count as the peer reading.
    let mut sim = Sim::new(None);
    for id in 1..=25 {
        sim.command(id, "Runtime.evaluate", None);
        assert_eq!(sim.run_until(ms(id * 100)), None);
    }
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert_eq!(silent, HEARTBEAT.interval + HEARTBEAT.timeout);
}

#[test]
fn a_stalled_page_command_is_probed_after_half_an_interval_and_hung_after_the_timeout() {
    let mut sim = Sim::new(Some(ms(10))).watching();
    sim.command(7, "Runtime.evaluate", Some("S"));
    assert_eq!(sim.run_until(ms(3000)), None);
    let kinds: Vec<_> = sim
        .log
        .iter()
        .map(|(t, a)| (*t, std::mem::discriminant(a)))
        .collect();
    assert_eq!(kinds[0].0, ms(500), "{:?}", sim.log);
    assert!(matches!(sim.log[0].1, Action::ProbeStall { ref session, .. } if session == "S"));
    let failed = sim
        .log
        .iter()
        .find(|(_, a)| matches!(a, Action::PageFailed(_)))
        .expect("a page failure");
    assert_eq!(failed.0, ms(500 + 2000));
    assert_eq!(
        failed.1,
        Action::PageFailed(PageFailure {
            generation: 1,
            cause: DeathCause::PageHung,
            session: "S".into(),
            commands: vec![7],
        })
    );
    // A later command to the failed page is refused; the browser lives on.
    let refused = sim
        .dog
        .on_command(&head(8, "Runtime.evaluate", Some("S")), sim.now);
    assert_eq!(
        refused,
        Outbound::Refuse {
            id: 8,
            session: "S".into()
        }
    );
    assert_eq!(sim.dog.page_probe(), None);
}

#[test]
fn neither_page_nor_browser_answering_the_stall_probe_is_silence() {
    let mut sim = Sim::new(None).watching();
    sim.command(7, "Runtime.evaluate", Some("S"));
    assert_eq!(sim.run_until(ms(60_000)), Some(ms(500 + 2000)));
}

#[test]
fn no_stall_probe_while_the_main_frame_navigates() {
    let mut sim = Sim::new(Some(ms(10))).watching();
    sim.command(7, "Page.navigate", Some("S"));
    assert_eq!(sim.run_until(ms(3000)), None);
    assert!(
        sim.log.iter().all(|(_, a)| matches!(a, Action::Probe(_))),
        "{:?}",
        sim.log
    );
    // Committed (the reply), but the frame has started navigating and not yet finished: a
    // command sent meanwhile is not probed either.
    sim.hear(
        r#"{"method":"Page.frameStartedNavigating","params":{"frameId":"T"},"sessionId":"S"}"#,
    );
    sim.hear(r#"{"id":7,"result":{}}"#);
    sim.command(8, "Runtime.evaluate", Some("S"));
    let sent = sim.now - sim.t0;
    assert_eq!(sim.run_until(ms(5000)), None);
    assert!(sim.log.iter().all(|(_, a)| matches!(a, Action::Probe(_))));
    // Navigated: the stalled command is probed at once (it is older than half an interval).
    sim.hear(r#"{"method":"Page.frameNavigated","params":{"frame":{"id":"T","loaderId":"L"}},"sessionId":"S"}"#);
    let navigated = sim.now - sim.t0;
    assert!(navigated - sent > ms(500));
    assert_eq!(sim.run_until(ms(5001)), None);
    assert!(matches!(sim.log.last(), Some((t, Action::ProbeStall { .. })) if *t == navigated));
}

#[test]
fn a_navigation_that_has_its_response_but_never_commits_is_a_hung_page() {
    let started =
        r#"{"method":"Page.frameStartedNavigating","params":{"frameId":"T"},"sessionId":"S"}"#;
    let response = |frame: &str, kind: &str| {
        format!(
            r#"{{"method":"Network.responseReceived","params":{{"requestId":"R","loaderId":"L","type":"{kind}","frameId":"{frame}","response":{{"url":"http://a/b","status":200}}}},"sessionId":"S"}}"#
        )
    };
    let mut sim = Sim::new(Some(ms(10))).watching();
    sim.command(7, "Page.navigate", Some("S"));
    sim.hear(started);
    // A slow server: 5 s without a response is no hang.
    assert_eq!(sim.run_until(ms(5000)), None);
    // Neither is a subresource's or a child frame's response.
    sim.hear(&response("T", "Image"));
    sim.hear(&response("F", "Document"));
    assert_eq!(sim.run_until(ms(8000)), None);
    assert!(sim.log.iter().all(|(_, a)| matches!(a, Action::Probe(_))));
    // The document's response came: the navigation waits only for the page to commit it.
    sim.hear(&response("T", "Document"));
    sim.hear(r#"{"id":7,"result":{"frameId":"T","loaderId":"L"}}"#);
    let responded = sim.now - sim.t0;
    assert_eq!(sim.run_until(ms(12_000)), None);
    let failed = sim
        .log
        .iter()
        .find(|(_, a)| matches!(a, Action::PageFailed(_)))
        .expect("a hung page");
    assert_eq!(failed.0, responded + ms(500 + 2000));

    // A page that commits in time is not judged.
    let mut sim = Sim::new(Some(ms(10))).watching();
    sim.command(7, "Page.navigate", Some("S"));
    sim.hear(started);
    sim.hear(&response("T", "Document"));
    sim.hear(r#"{"id":7,"result":{"frameId":"T","loaderId":"L"}}"#);
    sim.now += ms(300);
    sim.hear(r#"{"method":"Page.frameNavigated","params":{"frame":{"id":"T","loaderId":"L"}},"sessionId":"S"}"#);
    assert_eq!(sim.run_until(ms(10_000)), None);
    assert!(sim.log.iter().all(|(_, a)| matches!(a, Action::Probe(_))));
}

#[test]
fn page_events_fail_the_page_once_and_hand_back_its_commands() {
    let mut sim = Sim::new(None).watching();
    sim.command(3, "Runtime.evaluate", Some("S"));
    sim.command(4, "DOM.getDocument", Some("S"));
    sim.command(5, "Target.getTargets", None);
    // Another target's crash is not the page's.
    let other = r#"{"method":"Target.targetCrashed","params":{"targetId":"U"}}"#;
    assert_eq!(sim.hear(other), Verdict::Forward(None));
    let crash = r#"{"method":"Inspector.targetCrashed","params":{},"sessionId":"S"}"#;
    assert_eq!(
        sim.hear(crash),
        Verdict::Forward(Some(PageFailure {
            generation: 1,
            cause: DeathCause::PageCrashed,
            session: "S".into(),
            commands: vec![3, 4],
        }))
    );
    assert_eq!(sim.hear(crash), Verdict::Forward(None), "failed once");
    // A fresh page: its closing by someone else is a failure of its own.
    sim.dog.watch(WatchedPage {
        target_id: "T2".into(),
        session_id: "S2".into(),
        generation: 2,
        dialogs: Dialogs::Dismiss,
    });
    assert_eq!(sim.dog.fail_watched(1), None, "an earlier page");
    let closed =
        r#"{"method":"Target.detachedFromTarget","params":{"sessionId":"S2","targetId":"T2"}}"#;
    assert!(matches!(
        sim.hear(closed),
        Verdict::Forward(Some(PageFailure {
            generation: 2,
            cause: DeathCause::PageClosed,
            ..
        }))
    ));
}

#[test]
fn out_of_process_frames_are_followed_under_every_page() {
    let mut sim = Sim::new(None).watching();
    sim.hear(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"F1","targetInfo":{"type":"iframe","targetId":"X"}},"sessionId":"S"}"#);
    sim.hear(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"W1","targetInfo":{"type":"worker","targetId":"Y"}},"sessionId":"S"}"#);
    // Another tab's frame, and a frame nested in it.
    sim.hear(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"F2","targetInfo":{"type":"iframe","targetId":"Z"}},"sessionId":"T"}"#);
    sim.hear(r#"{"method":"Target.attachedToTarget","params":{"sessionId":"F3","targetInfo":{"type":"iframe","targetId":"Q"}},"sessionId":"F2"}"#);
    let frame = |s: &str, id: &str| crate::relay::FrameSession {
        session: s.into(),
        frame_id: id.into(),
    };
    assert_eq!(sim.dog.frames("S"), [frame("F1", "X")]);
    assert_eq!(sim.dog.frames("T"), [frame("F2", "Z"), frame("F3", "Q")]);
    sim.hear(
        r#"{"method":"Target.detachedFromTarget","params":{"sessionId":"F1"},"sessionId":"S"}"#,
    );
    assert!(sim.dog.frames("S").is_empty());
    // A tab's page session going takes its frames, nested ones too.
    sim.hear(
        r#"{"method":"Target.detachedFromTarget","params":{"sessionId":"F2"},"sessionId":"T"}"#,
    );
    assert!(sim.dog.frames("T").is_empty());
    assert!(sim.dog.frame_sessions().is_empty());
}

#[test]
fn recognises_only_its_own_replies() {
    let mut sim = Sim::new(None);
    let id = sim.dog.next_id();
    assert_eq!(id, wire::OWN_ID_BASE);
    assert_eq!(
        sim.hear(r#"{"id":1900000000,"result":{}}"#),
        Verdict::Own(id)
    );
    assert_eq!(sim.hear(r#"{"id":12,"result":{}}"#), Verdict::Forward(None));
    assert_eq!(
        sim.hear(r#"{"method":"Page.loadEventFired"}"#),
        Verdict::Forward(None)
    );
    assert_eq!(sim.hear(r#"{"id":"#), Verdict::Forward(None));
    // Re-serialised by a proxy, with the id last.
    assert_eq!(
        sim.hear(r#"{"result":{"product":"Chrome"},"id":1900000007}"#),
        Verdict::Own(1_900_000_007)
    );
    assert_eq!(sim.hear(r#"{"result":{},"id":19}"#), Verdict::Forward(None));
    // The fast probe's reply is the watchdog's own business.
    sim.command(1, "Runtime.evaluate", None);
    sim.now += ms(2);
    sim.hear(r#"{"id":1,"result":{}}"#);
    sim.command(2, "Runtime.evaluate", None);
    let due = sim.dog.next_deadline(sim.now);
    sim.now = due;
    let Some(Action::Probe(probe)) = sim.dog.on_deadline(due) else {
        panic!("the fast probe")
    };
    let text = String::from_utf8(reply(probe)).unwrap();
    assert_eq!(sim.hear(&text), Verdict::Consumed);
}

#[test]
fn the_utf8_frame_that_panicked_is_forwarded() {
    let mut sim = Sim::new(None).watching();
    let text = format!(
        r#"{{"method":"Page.{}é","params":{{}},"sessionId":"S"}}"#,
        "x".repeat(34)
    );
    assert!(!text.is_char_boundary(r#"{"method":""#.len() + 40));
    assert_eq!(sim.hear(&text), Verdict::Forward(None));
}

#[test]
fn an_idle_connection_is_left_to_the_heartbeat() {
    let mut w = Waiting::default();
    let now = Instant::now();
    assert_eq!(w.probe_due(now, HEARTBEAT, now), None);
    w.sent(7, false, now);
    assert_eq!(
        w.probe_due(now, HEARTBEAT, now),
        None,
        "no round trip measured yet"
    );
    w.in_flight.clear();
    w.sent(1, false, now);
    w.replied(1, now + ms(2));
    assert_eq!(w.probe_due(now, HEARTBEAT, now), None, "nothing in flight");
}

#[test]
fn a_waiting_command_on_a_quiet_browser_is_asked_about_within_a_second() {
    let mut w = Waiting::default();
    let t0 = Instant::now();
    // A measured round trip of 2 ms.
    w.sent(1, false, t0);
    w.replied(1, t0 + ms(2));
    assert_eq!(w.rtt(), ms(2));
    // A long command goes out; then nothing comes back.
    w.sent(2, false, t0 + ms(10));
    let probe_at = w.probe_due(t0, HEARTBEAT, t0).unwrap();
    assert_eq!(probe_at, t0 + ms(10 + 250));
    let silent_at = probe_at + w.timeout(HEARTBEAT);
    assert_eq!(silent_at, probe_at + ms(600));
    assert!(silent_at - (t0 + ms(10)) <= Duration::from_secs(1));
}

#[test]
fn anything_heard_clears_the_probe_and_answers_back_off() {
    let mut w = Waiting::default();
    let t0 = Instant::now();
    w.sent(1, false, t0);
    w.probe = Some((99, t0));
    // An event (not the probe's reply): alive, and no back-off.
    assert!(!w.heard(None, t0 + ms(5)));
    assert!(w.probe.is_none());
    assert_eq!(w.answered, 0);
    // The probe's reply: alive, and the next quiet period doubles.
    w.probe = Some((100, t0));
    let before = w.quiet(HEARTBEAT);
    assert!(w.heard(Some(100), t0 + ms(1)));
    assert_eq!(w.quiet(HEARTBEAT), before * 2);
    // Capped by the heartbeat interval; a reply to a command resets the back-off.
    w.answered = 20;
    assert_eq!(w.quiet(HEARTBEAT), HEARTBEAT.interval);
    w.replied(1, t0 + ms(3));
    assert_eq!(w.answered, 0);
}

#[test]
fn the_timeouts_scale_with_the_round_trip_and_stay_within_the_heartbeat() {
    let mut w = Waiting::default();
    w.sample(ms(100));
    assert_eq!(w.quiet(HEARTBEAT), ms(400));
    assert_eq!(w.timeout(HEARTBEAT), ms(800));
    let slow = Heartbeat {
        interval: ms(300),
        timeout: ms(500),
    };
    assert_eq!(w.quiet(slow), ms(300));
    assert_eq!(w.timeout(slow), ms(500));
}

const DIALOG_OPENING: &str = r#"{"method":"Page.javascriptDialogOpening","params":{"url":"http://a/","message":"hi","type":"alert","hasBrowserHandler":false,"defaultPrompt":""},"sessionId":"S"}"#;
const DIALOG_CLOSED: &str = r#"{"method":"Page.javascriptDialogClosed","params":{"result":false,"userInput":""},"sessionId":"S"}"#;

#[test]
fn a_dialog_on_the_watched_page_is_answered_as_the_option_says() {
    for (dialogs, answer) in [
        (Dialogs::Dismiss, Some(false)),
        (Dialogs::Accept, Some(true)),
        (Dialogs::Leave, None),
    ] {
        let mut sim = Sim::new(Some(ms(10))).watching_with(dialogs);
        let verdict = sim.hear(DIALOG_OPENING);
        match answer {
            Some(accept) => assert!(
                matches!(verdict, Verdict::AnswerDialog { ref session, accept: a, .. } if session == "S" && a == accept),
                "{dialogs:?}: {verdict:?}"
            ),
            None => assert_eq!(verdict, Verdict::Forward(None), "{dialogs:?}"),
        }
    }
    // A dialog on another page's session is not ours to answer.
    let mut sim = Sim::new(Some(ms(10))).watching();
    let elsewhere = DIALOG_OPENING.replace(r#""sessionId":"S""#, r#""sessionId":"X""#);
    assert_eq!(sim.hear(&elsewhere), Verdict::Forward(None));
}

#[test]
fn a_page_waiting_on_an_open_dialog_is_never_called_hung() {
    let mut sim = Sim::new(Some(ms(10))).watching_with(Dialogs::Leave);
    // The task's command waits behind an alert nobody answers (the page answers no probe).
    sim.command(7, "Runtime.evaluate", Some("S"));
    sim.now += ms(100);
    assert_eq!(sim.hear(DIALOG_OPENING), Verdict::Forward(None));
    assert_eq!(sim.run_until(ms(30_000)), None);
    assert!(
        sim.log.iter().all(|(_, a)| matches!(a, Action::Probe(_))),
        "only heartbeats while the dialog is open: {:?}",
        sim.log
    );
    // Once it closes, a command that still waits is judged as usual.
    assert_eq!(sim.hear(DIALOG_CLOSED), Verdict::Forward(None));
    let closed = sim.now - sim.t0;
    assert_eq!(sim.run_until(ms(40_000)), None);
    let stalled = sim
        .log
        .iter()
        .find(|(t, a)| *t >= closed && matches!(a, Action::ProbeStall { .. }));
    assert!(stalled.is_some(), "{:?}", sim.log);
    assert!(
        sim.log
            .iter()
            .any(|(t, a)| *t > closed && matches!(a, Action::PageFailed(_)))
    );
}

#[test]
fn a_dialog_that_opens_while_a_stall_probe_is_out_is_no_hang_either() {
    let mut sim = Sim::new(Some(ms(10))).watching_with(Dialogs::Leave);
    sim.command(7, "Runtime.evaluate", Some("S"));
    // The stall probe goes out at 500 ms; the dialog opens before it is judged.
    assert_eq!(sim.run_until(ms(600)), None);
    assert!(matches!(
        sim.log.last(),
        Some((_, Action::ProbeStall { .. }))
    ));
    sim.hear(DIALOG_OPENING);
    assert_eq!(sim.run_until(ms(30_000)), None);
    assert!(
        !sim.log
            .iter()
            .any(|(_, a)| matches!(a, Action::PageFailed(_))),
        "{:?}",
        sim.log
    );
}

#[test]
fn a_page_being_opened_that_crashes_fails_its_generation_at_once() {
    let mut sim = Sim::new(Some(ms(10))).watching();
    sim.dog.opening(2);
    let created = |id: &str, kind: &str| {
        format!(
            r#"{{"method":"Target.targetCreated","params":{{"targetInfo":{{"targetId":"{id}","type":"{kind}","title":"","url":"about:blank","attached":false,"canAccessOpener":false}}}}}}"#
        )
    };
    let crashed = |id: &str| {
        format!(
            r#"{{"method":"Target.targetCrashed","params":{{"targetId":"{id}","status":"crashed","errorCode":11}}}}"#
        )
    };
    // A worker is no page; the old (watched) page crashing as it is retired is not the new one.
    assert_eq!(
        sim.hear(&created("W", "service_worker")),
        Verdict::Forward(None)
    );
    assert_eq!(sim.hear(&created("N", "page")), Verdict::Forward(None));
    assert!(matches!(
        sim.hear(&crashed("T")),
        Verdict::Forward(Some(PageFailure { generation: 1, .. }))
    ));
    assert_eq!(
        sim.hear(&crashed("N")),
        Verdict::Forward(Some(PageFailure {
            generation: 2,
            cause: DeathCause::PageCrashed,
            session: String::new(),
            commands: vec![],
        }))
    );
    // Once watched, a page is judged by the usual rules.
    sim.dog.opening(3);
    sim.hear(&created("M", "page"));
    sim.dog.watch(WatchedPage {
        target_id: "M".into(),
        session_id: "SM".into(),
        generation: 3,
        dialogs: Dialogs::Dismiss,
    });
    assert!(matches!(
        sim.hear(&crashed("M")),
        Verdict::Forward(Some(PageFailure { generation: 3, ref session, .. })) if session == "SM"
    ));
}

/// A heartbeat so slow that the idle path alone would take a minute.
const SLOW: Heartbeat = Heartbeat {
    interval: Duration::from_secs(30),
    timeout: Duration::from_secs(30),
};

fn program_sent(conn: u64, id: u64, target: Option<&str>, at: Instant) -> ProgramCall {
    ProgramCall::Sent {
        conn,
        id,
        busy: false,
        target: target.map(Into::into),
        at,
    }
}

/// A sim under [`SLOW`] whose browser never answers, with a round trip of `rtt` measured on
/// one of outlive's own commands (sent at 0).
fn slow_sim(rtt: Duration) -> Sim {
    let mut sim = Sim::new(None);
    sim.dog = confirming(Watchdog::new(SLOW, sim.t0));
    let mut sim = sim.watching();
    sim.round_trip(Some("S"), rtt);
    sim
}

#[test]
fn a_programs_waiting_call_is_judged_as_outlives_own() {
    for (rtt, asked, silent) in [
        // max(4 × RTT, 250 ms), then max(8 × RTT, 600 ms).
        (ms(2), ms(250), ms(850)),
        (ms(100), ms(400), ms(1200)),
    ] {
        let mut sim = slow_sim(rtt);
        let sent = sim.now + ms(10);
        sim.dog.on_program(program_sent(1, 5, Some("T"), sent));
        let t0 = sim.t0;
        let since_sent = |d: Duration| d - (sent - t0);
        let silent_at = sim.run_until(Duration::from_secs(5)).expect("silent");
        assert_eq!(since_sent(silent_at), silent, "rtt {rtt:?}");
        let (probed_at, probe) = &sim.log[0];
        assert!(matches!(probe, Action::Probe(_)), "{probe:?}");
        assert_eq!(since_sent(*probed_at), asked, "rtt {rtt:?}");
    }
}

#[test]
fn a_programs_reply_is_a_round_trip_and_ends_its_wait() {
    let mut sim = slow_sim(ms(2));
    let t = sim.now;
    // A program's call answered in 100 ms: the round trip stays the smallest seen.
    sim.dog.on_program(program_sent(1, 5, None, t));
    let answered = ProgramCall::Answered {
        conn: 1,
        id: 5,
        at: t + ms(100),
    };
    sim.dog.on_program(answered);
    // Nothing waits: the idle heartbeat alone, at its slow pace.
    assert_eq!(sim.run_until(Duration::from_secs(10)), None);
    assert!(sim.log.is_empty(), "{:?}", sim.log);
    // Only a reply of the same connection ends a wait.
    let mut sim = slow_sim(ms(200));
    let t = sim.now;
    sim.dog.on_program(program_sent(1, 5, None, t));
    sim.dog.on_program(ProgramCall::Answered {
        conn: 2,
        id: 5,
        at: t + ms(1),
    });
    let silent_at = sim.run_until(Duration::from_secs(5)).expect("silent");
    assert_eq!(silent_at - (t - sim.t0), ms(800 + 1600));
}

#[test]
fn a_programs_calls_wait_no_more_once_its_connection_or_page_is_gone() {
    let mut sim = slow_sim(ms(2));
    let t = sim.now;
    sim.dog.on_program(program_sent(1, 5, None, t));
    sim.dog.on_program(program_sent(1, 6, Some("T"), t));
    sim.dog.on_program(ProgramCall::Gone { conn: 1 });
    assert_eq!(sim.run_until(Duration::from_secs(10)), None);
    // A call to the watched page, which then crashes: the browser lives, no silence.
    let mut sim = slow_sim(ms(2));
    let t = sim.now;
    sim.dog.on_program(program_sent(3, 7, Some("T"), t));
    let crash = r#"{"method":"Inspector.targetCrashed","params":{},"sessionId":"S"}"#;
    assert!(matches!(sim.hear(crash), Verdict::Forward(Some(_))));
    assert_eq!(sim.run_until(Duration::from_secs(10)), None);
    // A call to another page still waits on the browser.
    let mut sim = slow_sim(ms(2));
    let t = sim.now;
    sim.dog.on_program(program_sent(3, 7, Some("U"), t));
    assert!(matches!(sim.hear(crash), Verdict::Forward(Some(_))));
    assert!(sim.run_until(Duration::from_secs(10)).is_some());
}

/// The watched page's screenshot (command 2), sent at 10 ms on a browser that answers
/// nothing else, probes included, until the screenshot's reply at `end`.
fn screenshot_answered_at(end: Duration) -> Sim {
    let mut sim = Sim::new(None).watching();
    sim.round_trip(Some("S"), ms(2));
    sim.now = sim.at(ms(10));
    sim.command(2, "Page.captureScreenshot", Some("S"));
    assert_eq!(sim.run_until(end), None, "busy, not silent");
    sim.hear(std::str::from_utf8(&reply(2)).unwrap());
    sim
}

#[test]
fn a_browser_busy_with_a_screenshot_is_given_its_allowance_then_judged_as_before() {
    let mut sim = screenshot_answered_at(ms(5_000));
    // Done: a plain command on a browser gone quiet is judged by the fast rule again.
    sim.command(3, "Runtime.evaluate", None);
    let silent = sim.run_until(ms(60_000)).expect("silence");
    assert!(silent <= ms(5_000 + 850), "{silent:?}");

    // A screenshot on a browser that died: silent once the allowance is out.
    let mut sim = Sim::new(None).watching();
    sim.round_trip(Some("S"), ms(2));
    sim.now = sim.at(ms(10));
    sim.command(2, "Page.captureScreenshot", Some("S"));
    // The fast probe goes at 260 ms and gets the 30 s allowance.
    assert_eq!(sim.run_until(ms(60_000)), Some(ms(30_260)));
}

/// The probes sent while a screenshot runs, in the order they went: (id, a page probe).
fn probes_out(sim: &Sim) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    for (_, action) in &sim.log {
        match action {
            Action::Probe(id) => out.push((*id, false)),
            Action::ProbeStall {
                page_id,
                browser_id,
                ..
            } => out.extend([(*page_id, true), (*browser_id, false)]),
            _ => {}
        }
    }
    out
}

#[test]
fn probes_queued_behind_a_screenshot_are_judged_from_its_end() {
    // Seen in CI on a loaded machine: a 33 MB screenshot answered past the stall probe's
    // timeout, its probes just after it; judged from when they were sent, the page was
    // called hung (or the browser silent) between the two.
    let mut sim = screenshot_answered_at(ms(5_000));
    let probes = probes_out(&sim);
    assert!(
        probes.iter().any(|p| p.1),
        "a stall probe went: {:?}",
        sim.log
    );
    // The browser's probes answer 100 ms after the screenshot, the page's never.
    sim.now = sim.at(ms(5_100));
    for (id, _) in probes.iter().filter(|p| !p.1) {
        sim.dog.on_message(Some(&reply(*id)), sim.now);
    }
    assert_eq!(sim.run_until(ms(6_999)), None);
    assert!(
        !sim.log
            .iter()
            .any(|(_, a)| matches!(a, Action::PageFailed(_))),
        "not hung within the timeout after the screenshot: {:?}",
        sim.log
    );
    assert_eq!(sim.run_until(ms(7_000)), None);
    let failed = sim
        .log
        .iter()
        .find(|(_, a)| matches!(a, Action::PageFailed(_)));
    assert_eq!(
        failed.map(|f| f.0),
        Some(ms(5_000 + 2_000)),
        "{:?}",
        sim.log
    );
}

#[test]
fn a_programs_screenshot_gets_the_same_allowance() {
    let mut sim = slow_sim(ms(2));
    let sent = sim.now + ms(10);
    sim.dog.on_program(ProgramCall::Sent {
        conn: 1,
        id: 5,
        busy: true,
        target: Some("T".into()),
        at: sent,
    });
    let silent = sim.run_until(ms(120_000)).expect("silence");
    assert_eq!(silent, ms(2 + 10 + 250) + Duration::from_secs(30));
}

/// The first bytes of a reply whose end is still to come: `whole` without its last `cut`.
fn first_bytes(whole: &[u8], cut: usize) -> &[u8] {
    &whole[..whole.len() - cut]
}

#[test]
fn a_streaming_reply_is_answered_for_its_page_at_once_and_busy_until_its_end() {
    let mut sim = Sim::new(None).watching();
    sim.round_trip(Some("S"), ms(2));
    sim.now = sim.at(ms(10));
    sim.command(2, "Page.captureScreenshot", Some("S"));
    sim.command(3, "DOM.getDocument", Some("S"));
    sim.now = sim.at(ms(100));
    sim.dog.on_reply_started(
        first_bytes(br#"{"id":2,"result":{"data":"iVBO"}}"#, 3),
        sim.now,
    );
    // Its bytes keep coming for 10 s; the allowance holds while they do.
    for t in (200..10_000).step_by(100) {
        assert_eq!(sim.run_until(ms(t)), None, "busy, not silent");
        sim.dog.on_progress(sim.now);
    }
    // Then none for a while: the screenshot is still in flight, with its allowance.
    assert_eq!(sim.run_until(ms(25_000)), None, "busy until its end");
    let crash = r#"{"method":"Inspector.targetCrashed","params":{},"sessionId":"S"}"#;
    let Verdict::Forward(Some(failure)) = sim.hear(crash) else {
        panic!("the crash failed no page");
    };
    assert_eq!(
        failure.commands,
        vec![3],
        "the streaming reply is not answered twice"
    );
}

#[test]
fn bytes_of_a_large_reply_still_coming_are_heard() {
    let mut sim = Sim::new(None);
    sim.round_trip(None, ms(2));
    sim.command(2, "Runtime.evaluate", None);
    sim.dog.on_reply_started(
        first_bytes(br#"{"id":2,"result":{"result":{}}}"#, 3),
        sim.now,
    );
    // A slow link: bytes every 200 ms for 5 s, then nothing.
    for t in (200..5_000).step_by(200) {
        assert_eq!(sim.run_until(ms(2 + t)), None, "alive while bytes come");
        sim.dog.on_progress(sim.now);
    }
    let silent = sim.run_until(ms(60_000)).expect("silence once they stop");
    assert!(silent <= ms(4_802 + 250 + 850), "{silent:?}");
}

/// A watched page's command waits on a link that stopped answering after a 5 ms round trip.
fn stalled_sim() -> Sim {
    let mut sim = Sim::new(Some(ms(5))).watching();
    sim.round_trip(Some("S"), ms(5));
    sim.rtt = None;
    sim.command(2, "Runtime.evaluate", Some("S"));
    sim
}

fn hear_reply(sim: &mut Sim, id: u64) {
    sim.dog.on_message(Some(&reply(id)), sim.now);
}

#[test]
fn a_stall_the_second_connection_finds_alive_is_waited_out_and_counted() {
    let mut sim = stalled_sim();
    sim.second = Some((ms(3), Answer::Alive));
    assert_eq!(sim.run_until(ms(3000)), None, "no death in a 3 s stall");
    // Asked at ~0.85 s, then 1 s after its answer (then 2 s, 4 s): a few, not a stream.
    assert_eq!(sim.confirms.len(), 2, "{:?}", sim.confirms);
    assert!(sim.confirms[0] < ms(1000), "{:?}", sim.confirms);
    hear_reply(&mut sim, 2);
    let stall = sim.dog.take_stall().expect("a stall survived");
    assert_eq!(stall, ms(3000 - 5));
    assert_eq!(sim.dog.take_stall(), None, "reported once");
    sim.rtt = Some(ms(5));
    sim.command(3, "Runtime.evaluate", Some("S"));
    assert_eq!(sim.run_until(ms(10_000)), None);
}

#[test]
fn a_connection_silent_past_the_stall_limit_is_dead_though_the_browser_answers() {
    let mut sim = stalled_sim();
    sim.second = Some((ms(3), Answer::Alive));
    assert_eq!(sim.run_until(ms(60_000)), Some(ms(5) + MAX_STALL));
}

#[test]
fn a_refusing_second_connection_confirms_a_death_at_once() {
    let mut sim = stalled_sim();
    sim.second = Some((ms(2), Answer::Dead(Confirmation::Refused)));
    let dead = sim.run_until(ms(60_000)).expect("a death");
    assert_eq!(sim.confirms.len(), 1);
    assert_eq!(dead, sim.confirms[0] + ms(2));
    assert!(dead < ms(1000), "noticed in under a second: {dead:?}");
}

#[test]
fn without_a_second_path_a_silence_is_dead_after_the_allowance() {
    let mut sim = stalled_sim();
    sim.dog.can_confirm(false);
    assert_eq!(
        sim.run_until(ms(60_000)),
        Some(ms(5) + UNCONFIRMED_ALLOWANCE)
    );
    assert!(sim.confirms.is_empty());
}

#[test]
fn an_inconclusive_second_connection_waits_the_allowance() {
    let mut sim = stalled_sim();
    sim.second = Some((ms(1000), Answer::Inconclusive));
    assert_eq!(
        sim.run_until(ms(60_000)),
        Some(ms(5) + UNCONFIRMED_ALLOWANCE)
    );
    assert!(sim.confirms.len() >= 2, "asked again: {:?}", sim.confirms);
}

#[test]
fn a_stall_survived_lengthens_the_allowance_of_the_next() {
    let mut sim = stalled_sim();
    sim.dog.can_confirm(false);
    assert_eq!(sim.run_until(ms(4000)), None);
    hear_reply(&mut sim, 2);
    assert_eq!(sim.dog.take_stall(), Some(ms(3995)));
    sim.command(3, "Runtime.evaluate", Some("S"));
    // Twice the longest stall survived, not the 5 s floor.
    assert_eq!(sim.run_until(ms(60_000)), Some(ms(4000) + ms(2 * 3995)));
}

#[test]
fn a_page_probe_held_by_a_stall_is_judged_from_the_stall_end() {
    let mut sim = stalled_sim();
    sim.second = Some((ms(3), Answer::Alive));
    assert_eq!(sim.run_until(ms(4000)), None);
    let stall_probe = sim.log.iter().find_map(|(_, a)| match a {
        Action::ProbeStall {
            page_id,
            browser_id,
            ..
        } => Some((*page_id, *browser_id)),
        _ => None,
    });
    let (page_id, browser_id) = stall_probe.expect("the stalled command was probed");
    // The link comes back: the browser's answer first, the page's 100 ms later.
    hear_reply(&mut sim, browser_id);
    assert_eq!(sim.run_until(ms(4100)), None);
    hear_reply(&mut sim, page_id);
    hear_reply(&mut sim, 2);
    assert_eq!(sim.run_until(ms(10_000)), None);
    let failed = sim
        .log
        .iter()
        .any(|(_, a)| matches!(a, Action::PageFailed(_)));
    assert!(!failed, "{:?}", sim.log);
}
