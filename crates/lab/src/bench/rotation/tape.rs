//! [`Tape`]: a run's milestones, as rotation and death records.

use std::time::Duration;

use outlive::Milestone;
use tokio::time::Instant;

use super::{Marks, RotationRecord, UnplannedDeath};
use crate::bench::records::{Notes, ms};

/// Milestones into rotation and death records.
pub(super) struct Tape {
    started: Instant,
    pub(super) rotations: Vec<RotationRecord>,
    pub(super) deaths: Vec<UnplannedDeath>,
    /// What the next `Entered` replaces: a rotation (true) or a death (false).
    next: Option<bool>,
    /// When the last `Died` was noted (after the grace).
    died_at: Option<Instant>,
    pub(super) marks: Marks,
    /// The session serving the task: since when, ms.
    primary: Option<f64>,
    /// When that session's launch started, ms (its age counts from there).
    primary_born: Option<f64>,
    /// The newest successor or standby: when its launch started, ms.
    standby: Option<f64>,
}

impl Tape {
    pub(super) fn new() -> Tape {
        Tape {
            started: Instant::now(),
            rotations: Vec::new(),
            deaths: Vec::new(),
            next: None,
            died_at: None,
            marks: Marks::default(),
            primary: None,
            primary_born: None,
            standby: None,
        }
    }

    fn at(&self, d: Duration) -> f64 {
        ms(self.started.elapsed().saturating_sub(d))
    }

    fn close_primary(&mut self, at: f64) {
        if let Some(start) = self.primary.take() {
            self.marks.sessions.push((start, at));
        }
    }

    fn close_standby(&mut self, at: f64) {
        if let Some(start) = self.standby.take() {
            self.marks.standby.push((start, at.max(start)));
        }
    }

    /// Closes whatever is open at the end of the run.
    pub(super) fn finish(&mut self) {
        let now = self.at(Duration::ZERO);
        self.close_primary(now);
        self.close_standby(now);
    }

    fn died(&mut self, cause: &outlive::DeathCause, lost_work: Duration, redone: Duration) {
        let now = self.at(Duration::ZERO);
        self.marks.deaths.push(now);
        let session_age_ms = self.primary_born.map(|born| now - born);
        // A page failure keeps its browser: the session goes on.
        if !cause.is_page() {
            self.close_primary(now);
        }
        self.died_at = Some(Instant::now());
        self.deaths.push(UnplannedDeath {
            at_ms: now,
            cause: cause.as_str().to_owned(),
            session_age_ms,
            lost_work_ms: ms(lost_work),
            redone_ms: ms(redone),
            replaced_in_ms: 0.0,
            replace_ms: 0.0,
        });
        self.next = Some(false);
    }
}

impl Notes for Tape {
    fn note(&mut self, m: &Milestone) {
        let now = self.at(Duration::ZERO);
        match m {
            Milestone::Launched { took } => {
                if self.standby.is_some() && self.primary.is_none() {
                    // The standby took over from a dead browser.
                    self.primary_born = self.standby;
                    self.close_standby(now);
                    self.primary = Some(now);
                } else if self.primary.is_none() {
                    self.primary = Some(self.at(*took));
                    self.primary_born = self.primary;
                }
            }
            Milestone::SuccessorReady { took, .. } => {
                // One successor at a time: a new one means the old one was let go.
                let born = self.at(*took);
                self.close_standby(born);
                self.standby = Some(born);
            }
            Milestone::Checkpointed { .. } => self.marks.checkpoints.push(now),
            Milestone::Rotated {
                age,
                lost_work,
                redone,
                ..
            } => {
                self.marks.rotations.push(now);
                let successor_born_ms = self.standby;
                self.close_primary(now);
                self.close_standby(now);
                self.primary = Some(now);
                self.primary_born = successor_born_ms.or(Some(now));
                self.rotations.push(RotationRecord {
                    at_ms: now,
                    age_ms: ms(*age),
                    lost_work_ms: ms(*lost_work),
                    redone_ms: ms(*redone),
                    stall_ms: 0.0,
                    successor_born_ms,
                    successor_age_ms: successor_born_ms.map(|b| now - b),
                });
                self.next = Some(true);
            }
            Milestone::Died {
                cause,
                lost_work,
                redone,
                ..
            }
            | Milestone::PageFailed {
                cause,
                lost_work,
                redone,
                ..
            } => self.died(cause, *lost_work, *redone),
            Milestone::Entered {
                replaced_in: Some(r),
                ..
            } => match self.next.take() {
                Some(true) => {
                    if let Some(last) = self.rotations.last_mut() {
                        last.stall_ms = ms(*r);
                    }
                }
                Some(false) => {
                    let replace = self.died_at.take().map_or(0.0, |d| ms(d.elapsed()));
                    if let Some(last) = self.deaths.last_mut() {
                        last.replaced_in_ms = ms(*r);
                        last.replace_ms = replace;
                    }
                }
                None => {}
            },
            _ => {}
        }
    }
}
