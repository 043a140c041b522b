//! Silence while the task waits: the fast path beside the idle heartbeat.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::relay::{Heartbeat, ProgramCall};

/// In-flight entries older than this are dropped (chromiumoxide gives up on them at 60 s).
const IN_FLIGHT_MAX_AGE: Duration = Duration::from_secs(120);

/// Silence while the task waits. When commands are in flight and *nothing at all* has come
/// from the browser for a few round trips, the relay asks the browser (`Browser.getVersion`)
/// at once instead of waiting for the idle heartbeat. No answer and still nothing else from
/// the browser within a timeout scaled to the round trip is a silent death. An idle
/// connection is left to the heartbeat: no extra traffic.
#[derive(Default)]
pub(super) struct Waiting {
    /// Every client command in flight: id → when it was sent.
    pub in_flight: HashMap<u64, Instant>,
    /// A program's commands in flight on its own connections: (connection, id) → when sent,
    /// and the target of the page it was sent to, if known.
    program: HashMap<(u64, u64), (Instant, Option<String>)>,
    /// Recent reply latencies; the smallest is the round trip (long-running commands only
    /// add large samples, which the minimum ignores).
    samples: VecDeque<Duration>,
    /// The fast probe in flight: its id and when it was sent.
    pub probe: Option<(u64, Instant)>,
    /// Fast probes answered since the last reply to a command: each doubles the quiet time
    /// before the next, so a long silent command costs a handful of probes, not a stream.
    pub answered: u32,
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
        (self.rtt() * 8)
            .max(Duration::from_millis(600))
            .min(heartbeat.timeout)
    }

    pub fn sample(&mut self, rtt: Duration) {
        if self.samples.len() == 16 {
            self.samples.pop_front();
        }
        self.samples.push_back(rtt);
    }

    pub fn sent(&mut self, id: u64, now: Instant) {
        self.in_flight.insert(id, now);
    }

    /// A reply to a client command.
    pub fn replied(&mut self, id: u64, now: Instant) {
        if let Some(sent) = self.in_flight.remove(&id) {
            self.sample(now - sent);
            self.answered = 0;
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
                at,
            } => {
                self.program.insert((conn, id), (at, target));
            }
            ProgramCall::Answered { conn, id, at } => {
                if let Some((sent, _)) = self.program.remove(&(conn, id)) {
                    self.sample(at.saturating_duration_since(sent));
                    self.answered = 0;
                }
            }
            ProgramCall::Gone { conn } => self.program.retain(|(c, _), _| *c != conn),
        }
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
        let young = |sent: &Instant| now.saturating_duration_since(*sent) < IN_FLIGHT_MAX_AGE;
        self.in_flight.retain(|_, sent| young(sent));
        self.program.retain(|_, (sent, _)| young(sent));
        // Until a reply has shown what a round trip costs, the heartbeat alone watches.
        if self.samples.is_empty() {
            return None;
        }
        let programs = self.program.values().map(|(sent, _)| sent);
        let oldest = *self.in_flight.values().chain(programs).min()?;
        Some(last_heard.max(oldest) + self.quiet(heartbeat))
    }
}
