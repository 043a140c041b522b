//! What a run knows of how long its browsers live: the declared lifetime, the ages at which
//! its browsers died, and how long a successor takes to get ready. From these, when to launch
//! a successor so that it is ready before the predicted death.

use std::time::Duration;

use crate::options::Rotation;

/// The margin below the expected lifetime, as a fraction of it.
const MARGIN_SHARE: f64 = 0.10;
/// Deaths learned before [`Rotation::Learned`] predicts anything.
const LEARN_AFTER: usize = 2;

#[derive(Debug, Clone)]
pub(crate) struct Lifetime {
    rotation: Rotation,
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
    /// Age from which a ready successor is switched to, at the next safe point: one checkpoint
    /// interval before `leave_by`, so the browser is used as long as a safe point can still
    /// be had in time (the successor, launched earlier, waits ready).
    pub(crate) switch_at: Duration,
}

impl Lifetime {
    pub(crate) fn new(rotation: Rotation) -> Self {
        Lifetime {
            rotation,
            ages: Vec::new(),
            lead: Duration::ZERO,
        }
    }

    /// A browser died of something other than its page, at `age`.
    pub(crate) fn died_at(&mut self, age: Duration) {
        self.ages.push(age);
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
        let (expected, spread) = match (self.rotation, self.learned()) {
            (Rotation::Off, _) | (Rotation::Learned, None) => return None,
            (Rotation::Learned, Some(l)) => l,
            (Rotation::Expected(declared), None) => (declared, Duration::ZERO),
            (Rotation::Expected(declared), Some((first, spread))) => (declared.min(first), spread),
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
        let mut l = Lifetime::new(Rotation::Expected(secs(20.0)));
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
                    let mut l = Lifetime::new(Rotation::Expected(secs(lifetime)));
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

    #[test]
    fn off_never_plans() {
        let mut l = Lifetime::new(Rotation::Off);
        l.died_at(secs(20.0));
        l.died_at(secs(20.0));
        assert_eq!(l.plan(secs(1.0)), None);
    }

    #[test]
    fn a_declared_lifetime_plans_with_a_ten_percent_margin() {
        let mut l = Lifetime::new(Rotation::Expected(secs(20.0)));
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
        let mut l = Lifetime::new(Rotation::Learned);
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
        let mut l = Lifetime::new(Rotation::Learned);
        for age in [604.0, 319.0, 611.0, 617.0, 608.0] {
            l.died_at(secs(age));
        }
        let plan = l.plan(secs(30.0)).unwrap();
        assert_eq!(plan.dies_at, secs(604.0));
        assert_eq!(plan.leave_by, secs(543.6));
    }

    #[test]
    fn a_long_interval_or_launch_never_brings_the_launch_before_half_the_time() {
        let mut l = Lifetime::new(Rotation::Expected(secs(8.0)));
        l.launched_in(secs(0.4));
        // Leave by 7.2 s; the 30 s default interval counts as a quarter of that (1.8 s), the
        // lead as 1 s.
        assert_eq!(l.plan(secs(30.0)).unwrap().launch_at, secs(4.4));
        l.launched_in(secs(5.0));
        assert_eq!(l.plan(secs(30.0)).unwrap().launch_at, secs(3.6));
    }

    #[test]
    fn a_standby_learns_from_two_deaths_even_without_rotation() {
        let mut l = Lifetime::new(Rotation::Off);
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
        let mut l = Lifetime::new(Rotation::Expected(secs(600.0)));
        l.died_at(secs(604.0));
        l.died_at(secs(617.0));
        assert_eq!(l.plan(secs(30.0)).unwrap().dies_at, secs(600.0));
        l.died_at(secs(590.0));
        let plan = l.plan(secs(30.0)).unwrap();
        assert_eq!(plan.dies_at, secs(590.0));
        // The spread (27 s) is below 10 % (59 s).
        assert_eq!(plan.leave_by, secs(531.0));
    }
}
