//! Silence while the task waits: the fast path beside the idle heartbeat.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::relay::control::{Heartbeat, ProgramCall};

/// In-flight entries older than this are dropped (chromiumoxide gives up on them at 60 s).
const IN_FLIGHT_MAX_AGE: Duration = Duration::from_secs(120);

/// How long a browser may say nothing while a command that keeps it busy waits
/// ([`crate::relay::wire::keeps_browser_busy`]): Playwright's default timeout for one.
const BUSY_ALLOWANCE: Duration = Duration::from_secs(30);

/// A command in flight: when it went out, and whether the browser answers nothing else
/// until it is done (measured: `Browser.getVersion` waits out a multi-MB screenshot).
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub at: Instant,
    pub busy: bool,
}

/// Silence while the task waits. When commands are in flight and *nothing at all* has come
/// from the browser for a few round trips, the relay asks the browser (`Browser.getVersion`)
/// at once instead of waiting for the idle heartbeat. No answer and still nothing else from
/// the browser within a timeout scaled to the round trip is a silent death. An idle
/// connection is left to the heartbeat: no extra traffic.
#[derive(Default)]
pub(super) struct Waiting {
    /// Every client command in flight, by id.
    pub in_flight: HashMap<u64, Sent>,
    /// A program's commands in flight on its own connections: (connection, id) → when sent,
    /// and the target of the page it was sent to, if known.
    program: HashMap<(u64, u64), (Sent, Option<String>)>,
    /// Recent reply latencies; the smallest is the round trip (long-running commands only
    /// add large samples, which the minimum ignores).
    samples: VecDeque<Duration>,
    /// The fast probe in flight: its id and when it was sent.
    pub probe: Option<(u64, Instant)>,
    /// Fast probes answered since the last reply to a command: each doubles the quiet time
    /// before the next, so a long silent command costs a handful of probes, not a stream.
    pub answered: u32,
    /// When a command that kept the browser busy was last answered: a probe sent before
    /// waited behind it, so its clock runs from then.
    busy_ended: Option<Instant>,
}

impl Waiting {
    /// The round trip; zero before any was measured (the fast path is off until then).
    pub fn rtt(&self) -> Duration {
        self.samples.iter().min().copied().unwrap_or_default()
    }

    /// How long the browser may be quiet while commands are in flight before it is asked.
    pub fn quiet(&self, heartbeat: Heartbeat) -> Duration {
        let base = (self.rtt() * 4).max(Duration::from_millis(250));
        base.saturating_mul(1 << self.answered.min(8))
            .min(heartbeat.interval)
    }

    /// How long the fast probe may go unanswered (with nothing else heard) before the
    /// browser counts as silent.
    pub fn timeout(&self, heartbeat: Heartbeat) -> Duration {
        if self.busy() {
            return self.allowance(heartbeat);
        }
        (self.rtt() * 8)
            .max(Duration::from_millis(600))
            .min(heartbeat.timeout)
    }

    /// How long any probe may go unanswered: the heartbeat's timeout, or longer while a
    /// command that keeps the browser busy waits.
    pub fn allowance(&self, heartbeat: Heartbeat) -> Duration {
        if self.busy() {
            heartbeat.timeout.max(BUSY_ALLOWANCE)
        } else {
            heartbeat.timeout
        }
    }

    /// Whether a command that keeps the browser busy is in flight, outlive's or a program's.
    pub fn busy(&self) -> bool {
        self.in_flight.values().any(|s| s.busy) || self.program.values().any(|(s, _)| s.busy)
    }

    pub fn sample(&mut self, rtt: Duration) {
        if self.samples.len() == 16 {
            self.samples.pop_front();
        }
        self.samples.push_back(rtt);
    }

    pub fn sent(&mut self, id: u64, busy: bool, now: Instant) {
        self.in_flight.insert(id, Sent { at: now, busy });
    }

    /// A reply to a client command.
    pub fn replied(&mut self, id: u64, now: Instant) {
        if let Some(sent) = self.in_flight.remove(&id) {
            self.sample(now - sent.at);
            self.answered = 0;
            self.note_busy_end(sent, now);
        }
    }

    /// A program's command went out, was answered, or its connection ended. An answer is a
    /// round trip like any other.
    pub fn program(&mut self, call: ProgramCall) {
        match call {
            ProgramCall::Sent {
                conn,
                id,
                target,
                busy,
                at,
            } => {
                self.program.insert((conn, id), (Sent { at, busy }, target));
            }
            ProgramCall::Answered { conn, id, at } => {
                if let Some((sent, _)) = self.program.remove(&(conn, id)) {
                    self.sample(at.saturating_duration_since(sent.at));
                    self.answered = 0;
                    self.note_busy_end(sent, at);
                }
            }
            ProgramCall::Gone { conn } => self.program.retain(|(c, _), _| *c != conn),
        }
    }

    fn note_busy_end(&mut self, sent: Sent, at: Instant) {
        if sent.busy {
            self.busy_ended = Some(self.busy_ended.map_or(at, |e| e.max(at)));
        }
    }

    /// When a probe whose clock started at `started` may start to be judged: not while a
    /// busy command it waited behind was still running.
    pub fn clock_from(&self, started: Instant) -> Instant {
        self.busy_ended.map_or(started, |ended| started.max(ended))
    }

    /// The page with this target failed: a program's commands to it will not be answered.
    pub fn page_failed(&mut self, target: &str) {
        self.program
            .retain(|_, (_, t)| t.as_deref() != Some(target));
    }

    /// Anything at all came from the browser: it is alive. Answers whether `reply_to` (a
    /// reply's id) was the fast probe.
    pub fn heard(&mut self, reply_to: Option<u64>, now: Instant) -> bool {
        match self.probe.take() {
            Some((id, sent)) if reply_to == Some(id) => {
                self.sample(now - sent);
                self.answered += 1;
                true
            }
            _ => false,
        }
    }

    /// When the fast probe is due, if no probe is out: `quiet` after the later of the last
    /// message heard and the oldest command in flight, outlive's or a program's.
    pub fn probe_due(
        &mut self,
        last_heard: Instant,
        heartbeat: Heartbeat,
        now: Instant,
    ) -> Option<Instant> {
        let young = |sent: &Sent| now.saturating_duration_since(sent.at) < IN_FLIGHT_MAX_AGE;
        self.in_flight.retain(|_, sent| young(sent));
        self.program.retain(|_, (sent, _)| young(sent));
        // Until a reply has shown what a round trip costs, the heartbeat alone watches.
        if self.samples.is_empty() {
            return None;
        }
        let programs = self.program.values().map(|(sent, _)| sent.at);
        let oldest = self
            .in_flight
            .values()
            .map(|s| s.at)
            .chain(programs)
            .min()?;
        Some(last_heard.max(oldest) + self.quiet(heartbeat))
    }
}
