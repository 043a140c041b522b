//! A run's events laid out on a time axis: its sessions, deaths, checkpoints, redone work.

use outlive::history::Step;

use super::ViewEvent;

/// A span of time, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) from: i64,
    pub(crate) to: i64,
}

/// A browser session: from the start of its launch to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) span: Span,
    /// Its pickup (durable runs).
    pub(crate) pickup: Option<i32>,
    /// Its end was not seen (its worker stopped under it); `span.to` is the last sign of it.
    pub(crate) cut: bool,
}

/// A moment marked on the axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) at: i64,
    /// What: a death's cause, a checkpoint's size, …
    pub(crate) label: String,
}

/// Everything the timeline draws.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    /// The whole axis.
    pub(crate) span: Option<Span>,
    pub(crate) sessions: Vec<Session>,
    pub(crate) deaths: Vec<Mark>,
    pub(crate) page_failures: Vec<Mark>,
    pub(crate) takeovers: Vec<Mark>,
    pub(crate) checkpoints: Vec<Mark>,
    pub(crate) redone: Vec<Span>,
}

impl Timeline {
    /// Lays out `events` (oldest first); an open session ends at `now`.
    pub(crate) fn of(events: &[ViewEvent], now: i64) -> Timeline {
        let mut t = Timeline::default();
        let mut open: Option<Session> = None;
        let mut last = None;
        for e in events {
            t.place(e, &mut open, last);
            last = Some(e.at_ms);
        }
        if let Some(mut s) = open {
            s.span.to = now.max(s.span.from);
            t.sessions.push(s);
        }
        let from = events.iter().map(|e| e.at_ms).chain(t.starts()).min();
        let to = events.iter().map(|e| e.at_ms).chain(t.ends()).max();
        if let (Some(from), Some(to)) = (from, to) {
            t.span = Some(Span { from, to });
        }
        t
    }

    fn starts(&self) -> impl Iterator<Item = i64> + '_ {
        self.sessions.iter().map(|s| s.span.from)
    }

    fn ends(&self) -> impl Iterator<Item = i64> + '_ {
        self.sessions.iter().map(|s| s.span.to)
    }

    /// One event: it may start or end a session, or mark the axis.
    fn place(&mut self, e: &ViewEvent, open: &mut Option<Session>, last: Option<i64>) {
        let mark = |label: String| Mark { at: e.at_ms, label };
        match &e.step {
            Step::Launched { took_ms } => {
                let from = e.at_ms - i64::try_from(*took_ms).unwrap_or(0);
                self.end(open, from, false);
                *open = Some(Session {
                    span: Span { from, to: e.at_ms },
                    pickup: e.pickup,
                    cut: false,
                });
            }
            Step::Died {
                cause, redone_ms, ..
            } => {
                self.end(open, e.at_ms, false);
                self.deaths.push(mark(cause.clone()));
                self.redo(e.at_ms, *redone_ms);
            }
            Step::PageFailed {
                cause, redone_ms, ..
            } => {
                self.page_failures.push(mark(cause.clone()));
                self.redo(e.at_ms, *redone_ms);
            }
            Step::Rotated { redone_ms, .. } => {
                self.end(open, e.at_ms, false);
                self.redo(e.at_ms, *redone_ms);
            }
            Step::Takeover => {
                // The last sign of the stopped worker's session.
                self.end(open, last.unwrap_or(e.at_ms), true);
                self.takeovers
                    .push(mark(format!("pickup {}", e.pickup.unwrap_or(0))));
            }
            Step::Checkpointed { bytes, .. } => self.checkpoints.push(mark(format!("{bytes} B"))),
            Step::Finished { .. } | Step::Cancelled => self.end(open, e.at_ms, false),
            _ => {}
        }
    }

    fn end(&mut self, open: &mut Option<Session>, at: i64, cut: bool) {
        if let Some(mut s) = open.take() {
            s.span.to = at.max(s.span.from);
            s.cut = cut;
            self.sessions.push(s);
        }
    }

    fn redo(&mut self, at: i64, redone_ms: u64) {
        if redone_ms > 0 {
            let from = at - i64::try_from(redone_ms).unwrap_or(0);
            self.redone.push(Span { from, to: at });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_ms: i64, pickup: i32, step: Step) -> ViewEvent {
        ViewEvent {
            seq: at_ms,
            at_ms,
            pickup: Some(pickup),
            worker: None,
            step,
        }
    }

    fn died(redone_ms: u64) -> Step {
        Step::Died {
            attempt: 1,
            cause: "closed".into(),
            confirmed: None,
            lost_ms: 0,
            redone_ms,
        }
    }

    #[test]
    fn deaths_end_sessions_and_a_takeover_cuts_the_open_one() {
        let launched = |took_ms| Step::Launched { took_ms };
        let events = [
            at(1000, 1, Step::Pickup),
            at(1500, 1, launched(400)),
            at(
                2000,
                1,
                Step::Checkpointed {
                    bytes: 9,
                    took_ms: 1,
                },
            ),
            at(3000, 1, died(500)),
            at(3300, 1, launched(300)),
            at(
                4000,
                1,
                Step::Checkpointed {
                    bytes: 9,
                    took_ms: 1,
                },
            ),
            at(9000, 2, Step::Takeover),
            at(9500, 2, launched(400)),
            at(
                12000,
                2,
                Step::Finished {
                    outcome: "completed".into(),
                },
            ),
        ];
        let t = Timeline::of(&events, 99_999);
        let spans: Vec<_> = t
            .sessions
            .iter()
            .map(|s| (s.span.from, s.span.to, s.pickup, s.cut))
            .collect();
        assert_eq!(
            spans,
            [
                (1100, 3000, Some(1), false),
                (3000, 4000, Some(1), true),
                (9100, 12000, Some(2), false)
            ]
        );
        assert_eq!(t.deaths.len(), 1);
        assert_eq!(t.checkpoints.len(), 2);
        assert_eq!(t.takeovers.len(), 1);
        assert_eq!(
            t.redone,
            [Span {
                from: 2500,
                to: 3000
            }]
        );
        assert_eq!(
            t.span,
            Some(Span {
                from: 1000,
                to: 12000
            })
        );
    }

    #[test]
    fn a_running_session_reaches_now() {
        let events = [at(1000, 1, Step::Launched { took_ms: 0 })];
        let t = Timeline::of(&events, 5000);
        assert_eq!(
            t.sessions[0].span,
            Span {
                from: 1000,
                to: 5000
            }
        );
        assert_eq!(
            t.span,
            Some(Span {
                from: 1000,
                to: 5000
            })
        );
    }
}
