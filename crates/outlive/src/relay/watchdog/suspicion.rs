//! Silence is a suspicion, not a verdict: what the connection has shown, and the wait for a
//! second path to say whether a silent browser lives (`docs/deaths.md`, "A stall or a death").

use std::time::Duration;

use tokio::time::Instant;

use crate::relay::control::Heartbeat;
use crate::relay::death::Confirmation;

/// Silence with no way to confirm it (or none that answered) is a death after this long, at
/// least: Wi-Fi, mobile and congested links stall for seconds.
pub(crate) const UNCONFIRMED_ALLOWANCE: Duration = Duration::from_secs(5);

/// A connection that stays silent this long while its browser answers a second connection
/// is given up: the connection, not the browser, is dead.
pub(crate) const MAX_STALL: Duration = Duration::from_secs(20);

/// A silence shorter than this is no stall, even under suspicion (one raised from outside,
/// by an unanswered on-demand probe, on a connection that is not silent).
const STALL_MIN: Duration = Duration::from_millis(500);

/// The first wait before asking again after the browser answered a second connection; it
/// doubles with each answer, up to [`RECHECK_MAX`].
const RECHECK_FIRST: Duration = Duration::from_secs(1);
const RECHECK_MAX: Duration = Duration::from_secs(4);

/// What a second, short-lived connection to the browser found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The browser answered: it lives, and the first connection is stalled.
    Alive,
    /// The second connection was refused or closed: the browser is gone.
    Dead(Confirmation),
    /// Nothing answered in time, or an answer that says nothing (busy, rate-limited).
    Inconclusive,
}

/// What the watchdog does next about a suspicion.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Open a second connection and ask.
    Confirm,
    /// The browser is dead, confirmed this way.
    Dead(Confirmation),
}

/// A silence under suspicion.
#[derive(Debug, Clone, Copy)]
struct Suspected {
    /// When the connection was last heard from.
    since: Instant,
    /// When to ask again, once the last check answered.
    recheck: Option<Instant>,
    /// Checks the browser answered.
    alive: u32,
}

/// What the connection has shown (round trips, stalls survived), and the suspicion, if any.
#[derive(Debug, Default)]
pub(super) struct Link {
    /// A second connection may confirm a silence (the provider allows one).
    pub can_confirm: bool,
    /// Smoothed round trip and its variation, as TCP keeps them (RFC 6298).
    srtt: Option<Duration>,
    rttvar: Duration,
    suspected: Option<Suspected>,
    /// Silences that raised a suspicion and ended with the connection heard again.
    pub stalls_survived: u32,
    pub longest_stall: Duration,
    /// When the last such stall ended: probes sent before waited behind it.
    pub stall_ended: Option<Instant>,
}

impl Link {
    /// A probe's round trip: the link's own, with nothing of the page's work in it.
    pub fn sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
    }

    /// SRTT + 4·RTTVAR: how long an answer may take on this link, as TCP would judge it.
    pub fn rto(&self) -> Duration {
        self.srtt.map_or(Duration::ZERO, |s| s + self.rttvar * 4)
    }

    /// How long a silence nothing confirmed may last: the floor, the heartbeat's timeout,
    /// twice the longest stall this link survived, or its RTO, whichever is longest.
    pub fn allowance(&self, heartbeat: Heartbeat) -> Duration {
        UNCONFIRMED_ALLOWANCE
            .max(heartbeat.timeout)
            .max(self.longest_stall * 2)
            .max(self.rto())
            .min(MAX_STALL)
    }

    /// How long one second-path check may take: four RTOs, within 1 s to 5 s.
    pub fn check_timeout(&self) -> Duration {
        (self.rto() * 4).clamp(Duration::from_secs(1), Duration::from_secs(5))
    }

    pub fn is_suspected(&self) -> bool {
        self.suspected.is_some()
    }

    /// The connection was silent since `last_heard`: suspect it. A check to start, if a
    /// second path exists and none is out.
    pub fn suspect(&mut self, last_heard: Instant) -> Option<Step> {
        if self.suspected.is_some() {
            return None;
        }
        self.suspected = Some(Suspected {
            since: last_heard,
            recheck: None,
            alive: 0,
        });
        self.can_confirm.then_some(Step::Confirm)
    }

    /// When the suspicion needs the watchdog next: a check to start, or the verdict.
    pub fn deadline(&self, heartbeat: Heartbeat) -> Option<Instant> {
        let s = self.suspected?;
        let verdict = self.verdict_at(&s, heartbeat);
        Some(s.recheck.map_or(verdict, |r| r.min(verdict)))
    }

    fn verdict_at(&self, s: &Suspected, heartbeat: Heartbeat) -> Instant {
        let allowance = self.allowance(heartbeat);
        s.since + if s.alive > 0 { MAX_STALL } else { allowance }
    }

    /// What is due at `now`: the verdict of a silence that lasted its allowance (or, after
    /// the browser answered elsewhere, [`MAX_STALL`]), or the next check.
    pub fn on_deadline(&mut self, now: Instant, heartbeat: Heartbeat) -> Option<Step> {
        let s = self.suspected?;
        if now >= self.verdict_at(&s, heartbeat) {
            return Some(Step::Dead(Confirmation::Silence));
        }
        let s = self.suspected.as_mut()?;
        if s.recheck.is_some_and(|r| r <= now) {
            s.recheck = None;
            return Some(Step::Confirm);
        }
        None
    }

    /// A check answered at `now`.
    pub fn on_answer(&mut self, answer: Answer, now: Instant) -> Option<Step> {
        let s = self.suspected.as_mut()?;
        match answer {
            Answer::Dead(how) => return Some(Step::Dead(how)),
            Answer::Alive => {
                s.alive += 1;
                let wait = RECHECK_FIRST.saturating_mul(1 << (s.alive - 1).min(4));
                s.recheck = Some(now + wait.min(RECHECK_MAX));
            }
            Answer::Inconclusive => s.recheck = Some(now + RECHECK_FIRST),
        }
        None
    }

    /// The connection was heard at `now`: a suspicion ends as a stall survived. Its length,
    /// if there was one.
    pub fn heard(&mut self, now: Instant) -> Option<Duration> {
        let s = self.suspected.take()?;
        let stall = now.saturating_duration_since(s.since);
        if stall < STALL_MIN {
            return None;
        }
        self.stalls_survived += 1;
        self.longest_stall = self.longest_stall.max(stall);
        self.stall_ended = Some(now);
        Some(stall)
    }
}
