//! What a run knows of how long its browsers live (the declared lifetime, the ages at which
//! its browsers died, how long a successor takes to get ready) and of how often its task
//! checkpoints by itself. From these: when to launch a successor so that it is ready, young,
//! when the task reaches the last safe point before the predicted death ([`Plan`]), and which
//! checkpoints are safe points ([`SafePoints`]).
//!
//! A rotation re-enters the task from the top on the successor: everything since the task's
//! own last checkpoint is redone. So it ends the entry at the task's own last checkpoint
//! before the browser is to be left. It ends it at an automatic one only as the last resort
//! before the reactive path, when the task's next own checkpoint is not likely to come in time.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::options::Rotation;

/// The margin below the expected lifetime, as a fraction of it.
const MARGIN_SHARE: f64 = 0.10;
/// Deaths learned before [`Rotation::Learned`] predicts anything.
const LEARN_AFTER: usize = 2;
/// Gaps between the task's own checkpoints its cadence is learned from (the newest).
const CADENCE_WINDOW: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct Lifetime {
    /// `None`: unset, the stated lifetime rules.
    rotation: Option<Rotation>,
    /// The lifetime the newest session stated ([`crate::Session::lifetime`]).
    stated: Option<Duration>,
    /// Ages (from the start of the launch) at which this run's browsers died.
    ages: Vec<Duration>,
    /// The slowest launch + restore of a successor seen so far.
    lead: Duration,
}

/// When a browser should be left, and when its successor must be launched to be ready by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Age at which the browser is expected to die (the expected lifetime).
    pub(crate) dies_at: Duration,
    /// Age by which the task should be on the successor.
    pub(crate) leave_by: Duration,
    /// Age at which to launch the successor.
    pub(crate) launch_at: Duration,
    /// Age from which an automatic checkpoint is a safe point whatever the task's cadence
    /// (the last resort): one checkpoint interval before `leave_by`, so the browser is used as
    /// long as a safe point can still be had in time. Also the expected switch while the
    /// task's cadence is unknown.
    pub(crate) switch_at: Duration,
    /// How long before the expected switch a successor is launched: twice the slowest launch
    /// seen, and at least a second.
    pub(crate) lead: Duration,
}

impl Plan {
    /// When the task is expected to reach the switch on a browser born at `born`. It works
    /// from the task's newest own checkpoint (or the entry's start), `since`, and its cadence.
    /// That is the last own checkpoint due by `leave_by`; if none is, the next one when it is
    /// due before the death, else at once (an automatic checkpoint). While the cadence is
    /// unknown: `switch_at` when an automatic checkpoint may be the safe point (`blind`).
    /// Else none is expected: a successor launched then would only wait, ageing, for the death.
    pub(crate) fn switch_expected(
        &self,
        born: Instant,
        since: Instant,
        cadence: Option<Duration>,
        blind: bool,
    ) -> Option<Instant> {
        let (leave_by, dies_at) = (born + self.leave_by, born + self.dies_at);
        let Some(every) = cadence.filter(|e| !e.is_zero()) else {
            return blind.then_some(born + self.switch_at);
        };
        let steps = if since < leave_by {
            ((leave_by - since).as_secs_f64() / every.as_secs_f64()).floor()
        } else {
            0.0
        };
        Some(match steps {
            0.0 if since + every <= dies_at => since + every,
            0.0 => since,
            steps => since + every.mul_f64(steps),
        })
    }

    /// When to launch the successor so it is ready, and young, at `switch`: a lead before it.
    /// Never before half the time to leave: a lead as long as the lifetime would otherwise
    /// have every browser left as soon as it is entered.
    pub(crate) fn launch_for(&self, born: Instant, switch: Instant) -> Instant {
        switch
            .checked_sub(self.lead)
            .unwrap_or(born)
            .max(born + self.leave_by / 2)
    }
}

/// Which checkpoint a task wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// The task asked for it (`ctx.checkpoint()`, `checkpoint_with`, a control request).
    Own,
    /// The run loop's automatic one.
    Periodic,
}

/// How often the task checkpoints by itself: the newest gaps between its own checkpoints (the
/// first of an entry counts from the entry's start).
#[derive(Debug, Default)]
pub(crate) struct Cadence {
    gaps: VecDeque<Duration>,
}

impl Cadence {
    pub(crate) fn note(&mut self, gap: Duration) {
        if self.gaps.len() == CADENCE_WINDOW {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
    }

    /// The longest of the newest gaps: by then the task's next own checkpoint is likely.
    pub(crate) fn every(&self) -> Option<Duration> {
        self.gaps.iter().max().copied()
    }
}

/// The safe points of an armed switch, for the browser the task is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SafePoints {
    /// When the browser is expected to die.
    pub(crate) dies_at: Instant,
    /// When the task should be on the successor.
    pub(crate) leave_by: Instant,
    /// From when an automatic checkpoint is a safe point whatever the cadence.
    pub(crate) fallback_at: Instant,
    /// Whether automatic checkpoints may be safe points at all: not on a browser whose
    /// predecessor was left at one without the task making progress of its own (that rotation
    /// cost more than reacting would).
    pub(crate) periodic: bool,
    /// Whether an automatic checkpoint may be a safe point while the task's cadence is
    /// unknown: only once an entry of the run has ended without a checkpoint of the task's
    /// own (a task that may never make one). Until then its first is waited for.
    pub(crate) blind: bool,
}

impl SafePoints {
    /// Whether a `kind` checkpoint written at `now` is a safe point, with the task's own last
    /// checkpoint (or the entry's start) at `since` and its cadence `every`.
    ///
    /// * Own: when the next own checkpoint is likely to come after `leave_by` — the last one
    ///   in time.
    /// * Automatic: when the next own checkpoint is likely to come only after the death. The
    ///   work since the last one is lost either way; a cut now redoes least and starts the
    ///   successor's life sooner.
    /// * Automatic, from `fallback_at` on: when the task has gone two of its cadences without
    ///   one. It keeps its progress elsewhere, so a cut costs it no more than a death would.
    ///   Or when the cadence is unknown and the task [may never make one](SafePoints::blind).
    ///
    /// An own checkpoint that is only late (less than a cadence) is waited for. A cut would
    /// redo the whole step; waiting for it (or for the death, the successor ready) never does.
    pub(crate) fn is_safe(
        &self,
        kind: CheckpointKind,
        now: Instant,
        since: Instant,
        every: Option<Duration>,
    ) -> bool {
        match (kind, every) {
            (CheckpointKind::Own, Some(every)) => now + every > self.leave_by,
            (CheckpointKind::Own, None) => now >= self.fallback_at,
            (CheckpointKind::Periodic, _) => self
                .periodic_from(since, every)
                .is_some_and(|from| now >= from),
        }
    }

    /// From when an automatic checkpoint is a safe point (see [`SafePoints::is_safe`]), if
    /// ever on this browser.
    pub(crate) fn periodic_from(&self, since: Instant, every: Option<Duration>) -> Option<Instant> {
        if !self.periodic {
            return None;
        }
        match every {
            Some(every) if since + every > self.dies_at => Some(since),
            Some(every) => Some((since + every * 2).max(self.fallback_at)),
            None if self.blind => Some(self.fallback_at),
            None => None,
        }
    }
}

impl Lifetime {
    pub(crate) fn new(rotation: Option<Rotation>) -> Self {
        Lifetime {
            rotation,
            stated: None,
            ages: Vec::new(),
            lead: Duration::ZERO,
        }
    }

    /// A browser died of something other than its page, at `age`.
    pub(crate) fn died_at(&mut self, age: Duration) {
        self.ages.push(age);
    }

    /// The newest session states its lifetime (or states none).
    pub(crate) fn stated(&mut self, lifetime: Option<Duration>) {
        self.stated = lifetime;
    }

    /// A launch (plus restore) took `took`: the successor's lead follows the slowest.
    pub(crate) fn launched_in(&mut self, took: Duration) {
        self.lead = self.lead.max(took);
    }

    /// The ages that look like deaths of old age: within a quarter of their median (a browser
    /// dead on arrival, or an early death like Solari's one at 319 s among deaths at 604–617 s,
    /// says nothing about the lifetime).
    fn typical(&self) -> Vec<Duration> {
        let mut ages = self.ages.clone();
        ages.sort();
        let Some(median) = ages.get(ages.len() / 2).copied() else {
            return ages;
        };
        ages.retain(|a| a.abs_diff(median) <= median / 4);
        ages
    }

    /// The lifetime learned from this run's deaths (the earliest typical one) and their
    /// spread, once there are as many as learning needs.
    fn learned(&self) -> Option<(Duration, Duration)> {
        let typical = self.typical();
        (typical.len() >= LEARN_AFTER)
            .then(|| (typical[0], typical[typical.len() - 1] - typical[0]))
    }

    /// The expected lifetime and the margin below it, if one is known.
    fn expected(&self) -> Option<(Duration, Duration)> {
        // Declared, capped by what the session states; unset, what it states.
        let declared = match self.rotation {
            Some(Rotation::Off) => return None,
            Some(Rotation::Expected(d)) => Some(self.stated.map_or(d, |s| s.min(d))),
            Some(Rotation::Learned) | None => self.stated,
        };
        let learning = self.rotation == Some(Rotation::Learned);
        // A stated lifetime alone is taken as it is: deaths of other causes (a crash, a
        // kill) are no lifetime to learn, and nobody asked for learning.
        let learned = self.rotation.and(self.learned());
        let (expected, spread) = match (declared, learned) {
            (None, Some(l)) if learning => l,
            (None, _) => return None,
            (Some(d), None) => (d, Duration::ZERO),
            (Some(d), Some((first, spread))) => (d.min(first), spread),
        };
        Some((expected, expected.mul_f64(MARGIN_SHARE).max(spread)))
    }

    /// The lifetime to keep a standby younger than half of: the expected one, or else (without
    /// rotations) the earliest of the typical deaths seen, once there are as many as learning
    /// needs. One death is not enough: a browser dead on arrival or early would have the
    /// standby renewed every few moments.
    pub(crate) fn for_standby(&self) -> Option<Duration> {
        self.expected()
            .or_else(|| self.learned())
            .map(|(lifetime, _)| lifetime)
    }

    /// When to launch the successor and leave, with `interval` between checkpoints (the
    /// successor should be ready an interval before the deadline, so a safe point comes).
    pub(crate) fn plan(&self, interval: Duration) -> Option<Plan> {
        let (dies_at, margin) = self.expected()?;
        let leave_by = dies_at.saturating_sub(margin);
        // Twice the slowest launch seen, and at least a second: a successor slow to get
        // ready only brings the launch forward.
        let lead = (self.lead * 2).max(Duration::from_secs(1));
        // Never before half the time to leave: a checkpoint interval or a launch as long as the
        // lifetime itself would otherwise have every browser left as soon as it is entered.
        let launch_at = leave_by
            .saturating_sub(lead + interval.min(leave_by / 4))
            .max(leave_by / 2);
        let switch_at = leave_by
            .saturating_sub(interval.min(leave_by / 4))
            .max(launch_at);
        Some(Plan {
            dies_at,
            leave_by,
            launch_at,
            switch_at,
            lead,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_long_interval_is_capped_at_a_quarter_of_the_time_to_leave() {
        let mut l = Lifetime::new(Some(Rotation::Expected(secs(20.0))));
        l.launched_in(secs(0.6));
        let plan = l.plan(secs(10.0)).unwrap();
        // A quarter of 18 s is 4.5 s: launch at 18 − (1.2 + 4.5), switch at 18 − 4.5.
        assert_eq!(plan.launch_at, secs(12.3));
        assert_eq!(plan.switch_at, secs(13.5));
    }

    #[test]
    fn the_switch_falls_between_the_launch_and_the_time_to_leave() {
        for lifetime in [1.0, 7.0, 20.0, 600.0] {
            for launch in [0.0, 0.3, 5.0, 400.0] {
                for interval in [0.05, 1.0, 30.0, 3600.0] {
                    let mut l = Lifetime::new(Some(Rotation::Expected(secs(lifetime))));
                    l.launched_in(secs(launch));
                    let p = l.plan(secs(interval)).unwrap();
                    let case =
                        format!("{lifetime} s, launch {launch} s, interval {interval} s: {p:?}");
                    assert!(p.leave_by / 2 <= p.launch_at, "{case}");
                    assert!(p.launch_at <= p.switch_at, "{case}");
                    assert!(p.switch_at < p.leave_by && p.leave_by < p.dies_at, "{case}");
                    assert!(p.leave_by - p.switch_at <= p.leave_by / 4, "{case}");
                }
            }
        }
    }

    /// A plan for a 20 s life (leave by 18 s, fall back from 17 s), born at `born`.
    fn points(born: Instant, periodic: bool, blind: bool) -> (Plan, SafePoints) {
        let plan = Lifetime::new(Some(Rotation::Expected(secs(20.0))))
            .plan(secs(1.0))
            .unwrap();
        let points = SafePoints {
            dies_at: born + plan.dies_at,
            leave_by: born + plan.leave_by,
            fallback_at: born + plan.switch_at,
            periodic,
            blind,
        };
        (plan, points)
    }

    #[test]
    fn the_switch_is_expected_at_the_last_own_checkpoint_due_in_time() {
        let born = Instant::now();
        let (plan, _) = points(born, true, false);
        let at = |since: f64, every: f64| {
            plan.switch_expected(born, born + secs(since), Some(secs(every)), false)
                .map(|i| (i - born).as_secs_f64())
        };
        // Every 5 s from 1 s: 16 s is the last before 18 s.
        assert_eq!(at(1.0, 5.0), Some(16.0));
        // Every 10 s from 10 s: the next (20 s) is not due by 18 s, nor before the death at
        // 20 s... it is, at 20 s exactly: waited for.
        assert_eq!(at(10.0, 10.0), Some(20.0));
        // Every 11 s from 10 s: due after the death: an automatic checkpoint, at once.
        assert_eq!(at(10.0, 11.0), Some(10.0));
        // Unknown cadence: none expected, unless the task may never checkpoint by itself.
        assert_eq!(plan.switch_expected(born, born, None, false), None);
        assert_eq!(
            plan.switch_expected(born, born, None, true),
            Some(born + secs(17.0))
        );
        // The successor a lead (1 s) before, never before half the time to leave.
        assert_eq!(plan.launch_for(born, born + secs(16.0)), born + secs(15.0));
        assert_eq!(plan.launch_for(born, born + secs(3.0)), born + secs(9.0));
    }

    #[test]
    fn own_checkpoints_are_safe_points_when_the_next_would_be_late() {
        let born = Instant::now();
        let (_, p) = points(born, true, false);
        let t = |s: f64| born + secs(s);
        let own = |now: f64, every: f64| {
            p.is_safe(CheckpointKind::Own, t(now), t(now), Some(secs(every)))
        };
        assert!(!own(12.0, 5.0), "the next, at 17 s, is in time");
        assert!(own(14.0, 5.0), "the next, at 19 s, is late");
        let periodic = |now: f64, since: f64, every: Option<f64>| {
            p.is_safe(CheckpointKind::Periodic, t(now), t(since), every.map(secs))
        };
        // Two cadences without one, past the fallback: the task keeps its progress elsewhere.
        assert!(!periodic(16.5, 5.0, Some(2.0)), "before the fallback");
        assert!(periodic(17.0, 5.0, Some(2.0)), "from the fallback");
        assert!(periodic(17.5, 13.0, Some(2.0)), "two cadences since 13 s");
        // The next own checkpoint due before the death: waited for while only late.
        assert!(!periodic(15.0, 14.0, Some(5.5)));
        assert!(!periodic(16.5, 13.0, Some(3.0)), "due at 16 s, late");
        assert!(
            !periodic(17.5, 13.0, Some(4.0)),
            "due at 17 s, late past the fallback"
        );
        // Due after the death: any automatic checkpoint, at once.
        assert!(periodic(14.5, 14.0, Some(7.0)));
        // Unknown cadence: never, unless blind (then from the fallback).
        assert!(!periodic(17.5, 0.0, None));
        let (_, blind) = points(born, true, true);
        assert!(blind.is_safe(CheckpointKind::Periodic, t(17.0), born, None));
        assert!(!blind.is_safe(CheckpointKind::Periodic, t(16.9), born, None));
        // Not after a rotation without progress.
        let (_, off) = points(born, false, true);
        assert!(!off.is_safe(CheckpointKind::Periodic, t(17.5), t(14.0), Some(secs(7.0))));
    }

    #[test]
    fn the_cadence_is_the_longest_of_the_newest_gaps() {
        let mut c = Cadence::default();
        assert_eq!(c.every(), None);
        for gap in [9.0, 1.0, 2.0, 3.0] {
            c.note(secs(gap));
        }
        assert_eq!(c.every(), Some(secs(9.0)));
        c.note(secs(2.5));
        assert_eq!(c.every(), Some(secs(3.0)), "the oldest gap forgotten");
    }

    #[test]
    fn off_never_plans() {
        let mut l = Lifetime::new(Some(Rotation::Off));
        l.died_at(secs(20.0));
        l.died_at(secs(20.0));
        assert_eq!(l.plan(secs(1.0)), None);
    }

    #[test]
    fn a_declared_lifetime_plans_with_a_ten_percent_margin() {
        let mut l = Lifetime::new(Some(Rotation::Expected(secs(20.0))));
        l.launched_in(secs(0.6));
        let plan = l.plan(secs(1.0)).unwrap();
        assert_eq!(plan.dies_at, secs(20.0));
        assert_eq!(plan.leave_by, secs(18.0));
        // 18 s − (2 × 0.6 s lead + 1 s interval)
        assert_eq!(plan.launch_at, secs(15.8));
        // An interval before leaving.
        assert_eq!(plan.switch_at, secs(17.0));
    }

    #[test]
    fn learning_needs_two_deaths_and_ignores_early_ones() {
        let mut l = Lifetime::new(Some(Rotation::Learned));
        l.died_at(secs(0.2)); // dead on arrival
        l.died_at(secs(20.5));
        assert_eq!(
            l.plan(secs(1.0)),
            None,
            "one death of old age says nothing yet"
        );
        l.died_at(secs(19.0));
        let plan = l.plan(secs(1.0)).unwrap();
        // The earliest typical death; margin max(10 % of it, spread 1.5 s).
        assert_eq!(plan.dies_at, secs(19.0));
        assert_eq!(plan.leave_by, secs(17.1));
        l.died_at(secs(10.0)); // an early outlier (beyond a quarter of the median): ignored
        assert_eq!(l.plan(secs(1.0)).unwrap().dies_at, secs(19.0));
    }

    #[test]
    fn solaris_early_death_does_not_shorten_the_learned_lifetime() {
        let mut l = Lifetime::new(Some(Rotation::Learned));
        for age in [604.0, 319.0, 611.0, 617.0, 608.0] {
            l.died_at(secs(age));
        }
        let plan = l.plan(secs(30.0)).unwrap();
        assert_eq!(plan.dies_at, secs(604.0));
        assert_eq!(plan.leave_by, secs(543.6));
    }

    #[test]
    fn a_long_interval_or_launch_never_brings_the_launch_before_half_the_time() {
        let mut l = Lifetime::new(Some(Rotation::Expected(secs(8.0))));
        l.launched_in(secs(0.4));
        // Leave by 7.2 s; the 30 s default interval counts as a quarter of that (1.8 s), the
        // lead as 1 s.
        assert_eq!(l.plan(secs(30.0)).unwrap().launch_at, secs(4.4));
        l.launched_in(secs(5.0));
        assert_eq!(l.plan(secs(30.0)).unwrap().launch_at, secs(3.6));
    }

    #[test]
    fn a_standby_learns_from_two_deaths_even_without_rotation() {
        let mut l = Lifetime::new(Some(Rotation::Off));
        assert_eq!(l.for_standby(), None);
        // Dead on arrival: says nothing.
        l.died_at(secs(0.4));
        assert_eq!(l.for_standby(), None);
        l.died_at(secs(20.0));
        assert_eq!(l.for_standby(), None, "one typical death");
        l.died_at(secs(19.0));
        assert_eq!(l.for_standby(), Some(secs(19.0)));
        assert_eq!(l.plan(secs(1.0)), None);
    }

    #[test]
    fn learned_deaths_refine_a_declared_lifetime_downwards_only() {
        let mut l = Lifetime::new(Some(Rotation::Expected(secs(600.0))));
        l.died_at(secs(604.0));
        l.died_at(secs(617.0));
        assert_eq!(l.plan(secs(30.0)).unwrap().dies_at, secs(600.0));
        l.died_at(secs(590.0));
        let plan = l.plan(secs(30.0)).unwrap();
        assert_eq!(plan.dies_at, secs(590.0));
        // The spread (27 s) is below 10 % (59 s).
        assert_eq!(plan.leave_by, secs(531.0));
    }

    #[test]
    fn a_stated_lifetime_rotates_unless_rotation_is_off() {
        let mut unset = Lifetime::new(None);
        assert!(unset.plan(secs(1.0)).is_none());
        unset.stated(Some(secs(10.0)));
        assert_eq!(unset.plan(secs(1.0)).unwrap().dies_at, secs(10.0));
        // Early deaths do not shorten a stated lifetime nobody asked to learn from.
        unset.died_at(secs(3.0));
        unset.died_at(secs(3.1));
        assert_eq!(unset.plan(secs(1.0)).unwrap().dies_at, secs(10.0));
        let mut off = Lifetime::new(Some(Rotation::Off));
        off.stated(Some(secs(10.0)));
        assert!(off.plan(secs(1.0)).is_none());
        let mut declared = Lifetime::new(Some(Rotation::Expected(secs(600.0))));
        declared.stated(Some(secs(300.0)));
        assert_eq!(declared.plan(secs(1.0)).unwrap().dies_at, secs(300.0));
    }
}
