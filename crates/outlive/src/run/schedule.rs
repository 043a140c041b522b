//! When the clocks of a running entry are due: the automatic checkpoint, a successor's launch,
//! the standby's replacement, the rotation's arming. Synchronous and pure: read from the run's
//! state, nothing changed. The clocks go into one [`Timers`] table; the entry's select waits
//! for its earliest.

use tokio::time::Instant;

use super::{Backend, LiveBrowser, Run, Successor};
use crate::ctx::Ctx;
use crate::lifetime::Plan;

/// The clocks of a running entry, in the order they are taken when due at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// A successor (or standby) is launched.
    LaunchSuccessor,
    /// The standby is replaced by a younger one.
    StandbyStale,
    /// The ready successor is armed as the rotation's (see [`Arm`]).
    Arm,
    /// The automatic checkpoint.
    Checkpoint,
}

impl Timer {
    const ALL: [Timer; 4] = [
        Timer::LaunchSuccessor,
        Timer::StandbyStale,
        Timer::Arm,
        Timer::Checkpoint,
    ];
}

/// When each clock is due; an unset one is not running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Timers([Option<Instant>; 4]);

impl Timers {
    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.0[timer as usize] = at;
    }

    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer as usize]
    }

    /// The earliest clock set, the first in [`Timer`]'s order on a tie.
    pub(super) fn next(&self) -> Option<(Timer, Instant)> {
        Timer::ALL
            .into_iter()
            .filter_map(|t| Some((t, self.get(t)?)))
            .min_by_key(|&(t, at)| (at, t as usize))
    }

    /// Waits for the earliest clock and answers it; never, with none set. Cancel-safe.
    pub(super) async fn expired(&self) -> Timer {
        match self.next() {
            Some((timer, at)) => {
                tokio::time::sleep_until(at).await;
                timer
            }
            None => std::future::pending().await,
        }
    }
}

/// When the clocks of a running entry are due (see `Run::schedule`).
pub(super) struct Schedule {
    /// From when a rotation's successor is to be launched.
    pub(super) rotate_from: Option<Instant>,
    /// The ready successor's arming, if it is to be (its time is [`Timer::Arm`]'s).
    pub(super) arm: Option<Arm>,
    /// Every clock that runs now.
    pub(super) timers: Timers,
}

/// What the entry is doing that stops some clocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Doing {
    /// An automatic checkpoint is being taken: the next is not due.
    pub(super) checkpointing: bool,
    /// The switch is armed: the standby is not replaced.
    pub(super) switch_armed: bool,
}

/// A ready successor's arming: when, and whether it is too old to rotate to.
#[derive(Clone, Copy)]
pub(super) struct Arm {
    pub(super) at: Instant,
    pub(super) too_old: bool,
    pub(super) plan: Plan,
}

impl<'r, B: Backend, F> Run<'r, B, F> {
    /// When each of the entry's clocks is due: the automatic checkpoint, a successor's launch,
    /// the standby's replacement, the rotation's arming.
    #[allow(clippy::too_many_arguments)] // the entry's state, read as it stands
    pub(super) fn schedule(
        &self,
        ctx: &Ctx,
        plan: Option<Plan>,
        succ: &Option<Successor<'r, B::Browser>>,
        entry_started: Instant,
        last_periodic: Instant,
        retry_at: Instant,
        doing: Doing,
    ) -> Schedule {
        let due = self.checkpoint_due(ctx, entry_started, last_periodic);
        // The switch is expected at the task's last own checkpoint before the browser is
        // to be left; the successor is launched a lead before it, so it is young then.
        let blind = self.blind && self.periodic_safe;
        let expected = plan.and_then(|p| {
            p.switch_expected(self.born, ctx.own_since(), self.store.cadence(), blind)
        });
        let rotate_from = plan
            .zip(expected)
            .map(|(p, at)| p.launch_for(self.born, at));
        let launch_successor_at =
            self.successor_launch_at(succ, rotate_from, entry_started, retry_at);
        let stale_at = self.standby_stale_at(succ, plan);
        let arm = arming(ctx, succ, rotate_from, expected, plan);
        let mut timers = Timers::default();
        timers.set(Timer::LaunchSuccessor, launch_successor_at);
        timers.set(
            Timer::StandbyStale,
            stale_at.filter(|_| !doing.switch_armed),
        );
        timers.set(Timer::Arm, arm.map(|a| a.at));
        timers.set(
            Timer::Checkpoint,
            Some(due).filter(|_| !doing.checkpointing),
        );
        Schedule {
            rotate_from,
            arm,
            timers,
        }
    }

    /// The next automatic checkpoint: an interval after the newest checkpoint, the entry's
    /// start or the last one due, whichever is latest.
    fn checkpoint_due(&self, ctx: &Ctx, entry_started: Instant, last_periodic: Instant) -> Instant {
        let base = self
            .store
            .latest_taken()
            .map_or(entry_started, |t| t.max(entry_started))
            .max(last_periodic);
        let mut due = base + self.options.checkpoint_every;
        // An armed switch with no own safe point coming in time takes an automatic one as
        // soon as it is safe.
        if let Some(safe) = ctx.periodic_safe_from().filter(|at| *at > last_periodic) {
            due = due.min(safe);
        }
        due
    }

    /// When a successor (or standby) is launched, if none is up and one is to be.
    fn successor_launch_at(
        &self,
        succ: &Option<Successor<'r, B::Browser>>,
        rotate_from: Option<Instant>,
        entry_started: Instant,
        retry_at: Instant,
    ) -> Option<Instant> {
        // A successor is launched for a rotation when it is due; a standby once this entry
        // has taken its first checkpoint (so its launch does not slow the entry's start,
        // and it has something current to restore).
        let checkpointed = self
            .store
            .latest_taken()
            .is_some_and(|t| t >= entry_started);
        // No session left: the entry goes on without one, and a death gives up.
        if !self.reporter.budget.may_launch() {
            return None;
        }
        match (succ, self.options.standby, rotate_from) {
            (Some(_), _, _) => None,
            (None, true, _) if checkpointed => Some(retry_at),
            (None, true, None) => None,
            (None, true, Some(at)) => Some(at.max(retry_at)),
            (None, false, at) => at.map(|at| at.max(retry_at)),
        }
    }

    /// When the ready standby is replaced by a younger one, if it is to be.
    fn standby_stale_at(
        &self,
        succ: &Option<Successor<'r, B::Browser>>,
        plan: Option<Plan>,
    ) -> Option<Instant> {
        // A standby must outlive the browser it stands by for. With rotations, one younger
        // than that browser does (it leaves first); one older is replaced now. Without, it
        // is kept younger than half the lifetime known, so that it outlives the browser it
        // replaces by at least that much.
        match (succ, self.lifetime.for_standby()) {
            (Some(s), Some(life)) if s.standby && s.is_ready() => match plan {
                Some(_) if s.born >= self.born => None,
                Some(_) => Some(s.born),
                None => Some(s.born + life / 2),
            },
            _ => None,
        }
    }
}

/// When the ready successor is armed as the rotation's, if it is to be, and whether it is too
/// old to rotate to.
fn arming<'r, Br: LiveBrowser + 'r>(
    ctx: &Ctx,
    succ: &Option<Successor<'r, Br>>,
    rotate_from: Option<Instant>,
    expected: Option<Instant>,
    plan: Option<Plan>,
) -> Option<Arm> {
    // A ready successor is armed once the rotation is due (the safe points then decide
    // the moment). A standby that would be older than a quarter of the lifetime at the
    // expected switch is no successor. It is replaced as soon as the successor is due
    // to launch, so the fresh one has the whole lead to get ready. (Judged once, here,
    // for both.)
    match (succ, rotate_from, expected, plan) {
        (Some(s), Some(at), Some(switch), Some(p)) if s.is_ready() && !ctx.is_switch_armed() => {
            // A fresh one would be a lead old at the switch anyway: no older than that
            // is not too old. Under load, launches slow enough to make a lead longer
            // than a quarter of the lifetime had every fresh standby replaced again.
            let too_old = s.standby
                && switch.saturating_duration_since(s.born) > (p.dies_at / 4).max(p.lead * 2);
            Some(Arm {
                at,
                too_old,
                plan: p,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_clock_is_next_and_ties_go_in_order() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        assert_eq!(timers.next(), None);
        timers.set(Timer::Checkpoint, Some(t0 + Duration::from_secs(30)));
        timers.set(Timer::Arm, Some(t0 + Duration::from_secs(5)));
        assert_eq!(
            timers.next(),
            Some((Timer::Arm, t0 + Duration::from_secs(5)))
        );
        timers.set(Timer::LaunchSuccessor, Some(t0 + Duration::from_secs(5)));
        assert_eq!(
            timers.next(),
            Some((Timer::LaunchSuccessor, t0 + Duration::from_secs(5))),
            "a tie: the launch first, as the select took it"
        );
        timers.set(Timer::LaunchSuccessor, None);
        timers.set(Timer::Arm, None);
        assert_eq!(timers.next().map(|n| n.0), Some(Timer::Checkpoint));
    }

    #[tokio::test(start_paused = true)]
    async fn expired_waits_for_the_earliest() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.set(Timer::Checkpoint, Some(t0 + Duration::from_secs(30)));
        timers.set(Timer::StandbyStale, Some(t0 + Duration::from_secs(10)));
        assert_eq!(timers.expired().await, Timer::StandbyStale);
        assert_eq!(Instant::now(), t0 + Duration::from_secs(10));
        let none = Timers::default();
        let waited = tokio::time::timeout(Duration::from_secs(3600), none.expired()).await;
        assert!(waited.is_err(), "no clock set: never");
    }
}
