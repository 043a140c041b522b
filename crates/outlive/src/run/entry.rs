//! One entry of the task, watched. It is entered on a browser, then watched by a `biased`
//! select over the switch, the task, the connection, the successor and the clocks, each arm a
//! named step. Then comes how the entry ended: a rotation, the task's return, error or panic,
//! or a failure's grace.

use std::fmt::Display;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures::future::{BoxFuture, CatchUnwind, OptionFuture};
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::instrument::{Instrumented, WithDispatch};

use super::ended::{Ended, EntryEnd};
use super::schedule::{Arm, Doing, Schedule, Timer};
use super::{Backend, LiveBrowser, Run, Spares, Standing, Successor, TaskFn, Turn, type_name_of};
use crate::ctx::{Ctx, EntryLink, ResumedFrom};
use crate::error::RunError;
use crate::lifetime::{Plan, SafePoints};
use crate::redact::redact;
use crate::relay::Death;
use crate::report::{Milestone, Outcome};

/// The task's future for one entry: under the caller's dispatcher, in the entry's span, its
/// panic caught. Boxed so that dropping it really ends the entry, at the point the loop says.
type Task<Fut> = Pin<Box<CatchUnwind<AssertUnwindSafe<Instrumented<WithDispatch<Fut>>>>>>;

/// What the task's future answers: its result, or its panic.
pub(super) type TaskResult<T, E> = std::thread::Result<Result<T, E>>;

/// An entry of the task: what is fixed while it is watched, and its future.
struct Entry<Fut> {
    ctx: Ctx,
    started: Instant,
    /// The rotation's plan, if the lifetime is known.
    plan: Option<Plan>,
    /// When the entry's browser was launched: its age counts from there.
    born: Instant,
    /// The entry's span: how it ended is recorded on it.
    span: tracing::Span,
    task: Task<Fut>,
}

/// What changes while an entry is watched, between two turns of the loop.
struct Watch<'r, Br> {
    /// The automatic checkpoint being taken, if one is.
    periodic: Option<BoxFuture<'static, bool>>,
    /// When the last automatic checkpoint was due (at first, the entry's start).
    last_periodic: Instant,
    /// The run's spares, while the entry has them (its successor and old standby).
    spares: Spares<'r, Br>,
    /// From when another successor may be launched (a failed launch's backoff).
    retry_at: Instant,
    /// Bumped when a checkpoint is kept: the entry's first is what a standby waits for.
    kept: watch::Receiver<u32>,
}

/// Why the watch of an entry stopped.
enum Stop<O> {
    /// A safe point came with the switch armed: the task moves to the successor.
    Switch,
    /// The task's future ended: the task returned, or panicked.
    Returned(O),
    /// The entry's browser or page failed.
    Died(Death),
}

impl<Br> Watch<'_, Br> {
    /// The automatic checkpoint is due: taken beside the task, unless the task holds
    /// checkpoints (then skipped; the next is due an interval later).
    fn checkpoint_due(&mut self, ctx: &Ctx) {
        self.last_periodic = Instant::now();
        if !ctx.is_held() {
            let ctx = ctx.clone();
            self.periodic = Some(Box::pin(async move { ctx.checkpoint_periodic().await }));
        }
    }

    /// The automatic checkpoint is over (kept or not).
    fn checkpoint_done(&mut self) {
        self.periodic = None;
    }
}

impl<'r, B, F, T, E> Run<'r, B, F>
where
    B: Backend,
    F: TaskFn<B::Page, Value = T, Error = E>,
    E: Display,
{
    /// Enters the task and watches the entry, the connection and the checkpoint clock until
    /// the entry ends or fails. On a failure, gives the entry its grace while the replacement
    /// (a fresh page, or a new browser) gets ready, then drops it.
    pub(super) async fn watch_entry(
        &mut self,
        browser: B::Browser,
        resumed_from: Option<ResumedFrom>,
    ) -> Ended<T, E, B::Browser> {
        let mut entry = self.enter(&browser, resumed_from);
        let mut w = Watch {
            periodic: None,
            last_periodic: entry.started,
            spares: std::mem::take(&mut self.spares),
            retry_at: entry.started,
            kept: self.store.watch_kept(),
        };
        let stop = self.watch(&mut entry, &browser, &mut w).await;
        // An automatic checkpoint still being taken is dropped before anything else.
        w.periodic = None;
        record_end(&entry.span, &stop);
        match stop {
            Stop::Switch => {
                // At a safe point: the entry ends here, before anything after the checkpoint.
                drop(entry.task);
                let s = w
                    .spares
                    .successor
                    .take()
                    .expect("armed only with a successor");
                self.rotate(browser, &entry.ctx, s, w.spares.stale.take(), entry.started)
            }
            Stop::Returned(out) => {
                let cut = self.leave(&entry, &mut w);
                self.returned(browser, &entry.ctx, &entry.span, entry.task, cut, out)
                    .await
            }
            Stop::Died(death) => {
                let cut = self.leave(&entry, &mut w);
                entry.ctx.retire();
                self.give_grace(browser, death, cut, entry.task).await
            }
        }
    }

    /// Enters the task on `browser`: its `Ctx`, the milestone, and its future (not polled
    /// yet).
    fn enter(
        &mut self,
        browser: &B::Browser,
        resumed_from: Option<ResumedFrom>,
    ) -> Entry<F::Entry> {
        let options = self.options;
        self.reporter.tally.attempts += 1;
        let attempt = self.reporter.tally.attempts;
        // The progress saved with the checkpoint this entry resumes from (the newest: no
        // capture can land between the restore and the entry).
        let progress = resumed_from
            .as_ref()
            .and_then(|_| self.store.latest())
            .and_then(|cp| cp.progress.clone());
        let handed = progress.as_ref().map(|p| p.len());
        let ctx = Ctx::new(
            attempt,
            resumed_from,
            browser.capturer(),
            self.store.clone(),
            self.rules.clone(),
            progress,
            EntryLink {
                run_id: self.reporter.run_id.clone(),
                endpoint: browser.endpoint(),
                calls: browser.calls(),
            },
        );
        let started = Instant::now();
        self.start_deferred();
        if let (Some(died), Some(m)) = (self.relaunching.take(), &options.metrics) {
            m.relaunched(started.saturating_duration_since(died));
        }
        options.note(Milestone::Entered {
            attempt,
            resumed: ctx.resumed_from().is_some(),
            replaced_in: self
                .last_failure
                .map(|d| started.saturating_duration_since(d)),
        });
        tracing::info!(
            attempt,
            resumed = ctx.resumed_from().is_some(),
            "entering the task"
        );
        let span = entry_span(&ctx, handed);
        let task = AssertUnwindSafe(
            crate::quiet::as_caller(|| (self.task)(browser.page(), ctx.clone()))
                .instrument(span.clone()),
        )
        .catch_unwind();
        Entry {
            ctx,
            started,
            // Rotation: when to launch a successor, and when to move to it.
            plan: self.lifetime.plan(options.checkpoint_every),
            born: self.born,
            span,
            task: Box::pin(task),
        }
    }

    /// The loop: each turn, the clocks scheduled, then the first arm ready (in this order,
    /// `biased`) taken. Stops at the switch, at the task's end, or at a failure.
    async fn watch(
        &mut self,
        entry: &mut Entry<F::Entry>,
        browser: &B::Browser,
        w: &mut Watch<'r, B::Browser>,
    ) -> Stop<TaskResult<T, E>> {
        let ctx = &entry.ctx;
        let started = entry.started;
        loop {
            // While the entry runs, nothing waits: releases start as they come.
            self.start_deferred();
            let doing = Doing {
                checkpointing: w.periodic.is_some(),
                switch_armed: ctx.is_switch_armed(),
            };
            let Schedule {
                rotate_from,
                arm,
                timers,
            } = self.schedule(
                ctx,
                entry.plan,
                &w.spares.successor,
                started,
                w.last_periodic,
                w.retry_at,
                doing,
            );
            tokio::select! {
                biased;
                () = ctx.at_safe_point(), if ctx.is_switch_armed() => return Stop::Switch,
                out = &mut entry.task => return Stop::Returned(out),
                // A kept checkpoint moves the expected switch and may let a standby launch.
                _ = w.kept.changed() => {}
                death = browser.died() => return Stop::Died(death),
                turn = async { w.spares.successor.as_mut().expect("checked").turn().await }, if w.spares.successor.is_some() => {
                    self.on_successor_turn(w, turn, rotate_from, ctx);
                }
                death = async { w.spares.stale.as_mut().expect("checked").standing_death().await }, if w.spares.stale.is_some() => {
                    self.on_stale_death(w, death);
                }
                Some(released) = self.releasing.next(), if !self.releasing.is_empty() => {
                    self.reporter.note_release(released);
                }
                timer = timers.expired() => match timer {
                    Timer::LaunchSuccessor => w.spares.successor = Some(self.launch_successor()),
                    Timer::StandbyStale => self.on_standby_old(w),
                    Timer::Arm => self.on_arm(w, arm.expect("set with its arming"), entry.born, ctx),
                    Timer::Checkpoint => w.checkpoint_due(ctx),
                },
                Some(_) = OptionFuture::from(w.periodic.as_mut()), if w.periodic.is_some() => {
                    w.checkpoint_done();
                }
                // Not while the task holds the automatic checkpoints (its own after the hold, or
                // the next automatic one, holds the change); the periodic slot stays.
                () = browser.checkpoint_stale(), if w.periodic.is_none() && !ctx.is_held() => {
                    if !ctx.is_held() {
                        tracing::debug!("the newest checkpoint may lack a change reported after it; taking another");
                        w.checkpoint_due(ctx);
                    }
                }
            }
        }
    }

    /// A successor's launch ended, or the ready one died: it is kept ready, or let go (then
    /// another is launched from `retry_at`).
    fn on_successor_turn(
        &mut self,
        w: &mut Watch<'r, B::Browser>,
        turn: Turn<B::Browser>,
        rotate_from: Option<Instant>,
        ctx: &Ctx,
    ) {
        let s = w.spares.successor.take().expect("checked");
        let rotating = rotate_from.is_some_and(|at| Instant::now() >= at);
        w.spares.successor = match turn {
            Turn::Launched(Ok((successor, restored))) => {
                // The old standby goes now, unless this is the rotation's successor: then at
                // the switch, so its teardown does not slow the safe point's checkpoint.
                if let Some(old) = w.spares.stale.take_if(|_| !rotating) {
                    self.discard_successor(old);
                }
                self.options.note(Milestone::SuccessorReady {
                    took: s.born.elapsed(),
                    standby: s.standby,
                });
                self.lifetime.launched_in(s.born.elapsed());
                self.lifetime.stated(successor.stated_lifetime());
                tracing::debug!(took = ?s.born.elapsed(), standby = s.standby, "successor ready");
                Some(Successor {
                    state: Standing::Ready {
                        browser: successor,
                        restored,
                    },
                    ..s
                })
            }
            Turn::Launched(Err(e)) => {
                self.reporter.tally.standby += s.born.elapsed();
                tracing::warn!(error = %redact(&e.to_string(), self.options.diagnostics), "a successor's launch failed; trying again after the backoff");
                w.retry_at = Instant::now() + self.options.relaunch_backoff;
                None
            }
            Turn::Died(death) => {
                ctx.disarm_switch();
                tracing::info!(
                    cause = death.cause.as_str(),
                    "a successor died before the switch; launching another"
                );
                self.discard_successor(s);
                w.retry_at = Instant::now();
                None
            }
        };
    }

    /// The old standby died while the fresh one was launching: let go.
    fn on_stale_death(&mut self, w: &mut Watch<'r, B::Browser>, death: Death) {
        tracing::info!(cause = death.cause.as_str(), "the old standby died");
        let old = w.spares.stale.take().expect("checked");
        self.discard_successor(old);
    }

    /// The standby is getting old: a fresh one is launched.
    fn on_standby_old(&mut self, w: &mut Watch<'r, B::Browser>) {
        tracing::debug!("the standby is getting old; launching a fresh one");
        self.renew_standby(w);
    }

    /// The ready successor's arming is due: the switch is armed for the next safe point,
    /// unless the standby is too old to rotate to.
    fn on_arm(&mut self, w: &mut Watch<'r, B::Browser>, arm: Arm, born: Instant, ctx: &Ctx) {
        let Arm {
            too_old, plan: p, ..
        } = arm;
        if too_old {
            // A standby about as old as this browser would soon need leaving too: a fresh one
            // takes its place, and is the successor.
            tracing::debug!("the standby is too old to rotate to; launching a fresh one");
            self.renew_standby(w);
        } else {
            ctx.arm_switch(SafePoints {
                dies_at: born + p.dies_at,
                leave_by: born + p.leave_by,
                fallback_at: born + p.switch_at,
                periodic: self.periodic_safe,
                blind: self.blind,
            });
            tracing::debug!(age = ?born.elapsed(), "rotation armed: switching at the next safe point");
        }
    }

    /// The successor becomes the old standby, kept until a fresh one (launched now) is ready;
    /// an older one still kept goes.
    fn renew_standby(&mut self, w: &mut Watch<'r, B::Browser>) {
        if let Some(older) = w.spares.renew_standby() {
            self.discard_successor(older);
        }
        w.retry_at = Instant::now();
    }

    /// The entry stopped without a switch: the switch disarmed, the successor and the old
    /// standby kept for the next entry. Answers where the entry was cut.
    fn leave(&mut self, entry: &Entry<F::Entry>, w: &mut Watch<'r, B::Browser>) -> EntryEnd {
        entry.ctx.disarm_switch();
        self.spares = std::mem::take(&mut w.spares);
        let cut = EntryEnd::of(&entry.ctx, entry.started);
        self.blind |= !cut.checkpointed;
        cut
    }

    /// The task returned (or panicked): the run is over, unless its error was its browser's
    /// or page's failure.
    async fn returned(
        &mut self,
        browser: B::Browser,
        ctx: &Ctx,
        span: &tracing::Span,
        task: Task<F::Entry>,
        cut: EntryEnd,
        out: TaskResult<T, E>,
    ) -> Ended<T, E, B::Browser> {
        match out {
            Ok(Ok(value)) => {
                ctx.retire();
                Ended::Over(self.complete(browser, value).await)
            }
            Ok(Err(e)) => self.task_failed(browser, ctx, span, task, cut, e).await,
            Err(panic) => {
                ctx.retire();
                self.panicked(browser, panic).await
            }
        }
    }

    /// The task returned its error: the run fails with it, unless its browser or page had
    /// failed (then that failure ends the entry).
    async fn task_failed(
        &mut self,
        browser: B::Browser,
        ctx: &Ctx,
        span: &tracing::Span,
        task: Task<F::Entry>,
        cut: EntryEnd,
        e: E,
    ) -> Ended<T, E, B::Browser> {
        // The task's error is its own unless its browser or page already failed.
        let failed = browser.death().is_some()
            || !browser.confirm_alive(self.options.heartbeat_timeout).await;
        match (failed, browser.death()) {
            (true, Some(death)) => {
                tracing::info!(
                    cause = death.cause.as_str(),
                    "the task failed because its browser or page failed"
                );
                // The entry failed, as if the death had been seen first.
                span.record("ended", "failed");
                span.record("cause", death.cause.as_str());
                ctx.retire();
                // Nothing is left of the entry: no grace to give.
                drop(task);
                self.failed(browser, death, cut).await
            }
            _ => {
                ctx.retire();
                // Released with everything else still up, at once.
                self.release_later(browser);
                self.settle_background().await;
                self.reporter.emit(
                    Outcome::Failed,
                    Some((type_name_of::<E>(), "task_error", e.to_string())),
                );
                Ended::Over(Err(RunError::Task(e)))
            }
        }
    }

    /// The entry ended at a safe point with the successor `s` ready: the task moves to it.
    fn rotate(
        &mut self,
        browser: B::Browser,
        ctx: &Ctx,
        s: Successor<'r, B::Browser>,
        stale: Option<Successor<'r, B::Browser>>,
        entry_started: Instant,
    ) -> Ended<T, E, B::Browser> {
        let attempt = ctx.attempt();
        ctx.retire();
        let ended_at = Instant::now();
        let Standing::Ready {
            browser: successor,
            restored,
        } = s.state
        else {
            unreachable!("armed only when ready");
        };
        if let Some(old) = stale {
            self.discard_successor(old);
        }
        self.reporter.tally.rotations += 1;
        if let Some(m) = &self.options.metrics {
            m.rotated();
        }
        self.reporter.tally.standby += ended_at.saturating_duration_since(s.born);
        let lost_work = self
            .store
            .latest_taken()
            .map_or(Duration::ZERO, |t| ended_at.saturating_duration_since(t));
        let cut = EntryEnd::of(ctx, entry_started);
        let redone = self.reporter.record_redone(&cut, ended_at);
        let age = ended_at.saturating_duration_since(self.born);
        self.options.note(Milestone::Rotated {
            attempt,
            age,
            lost_work,
            redone,
        });
        tracing::info!(
            attempt,
            ?age,
            ?lost_work,
            ?redone,
            "rotated to the successor at a safe point"
        );
        Ended::Rotated {
            old: browser,
            successor,
            born: s.born,
            restored,
            entry: cut,
        }
    }
}

/// The span of an entry: its attempt, whether a checkpoint was restored, the size of the
/// progress it was handed (never its content); how it ended is recorded later. Numbers as
/// `i64`, which OpenTelemetry keeps as numbers.
fn entry_span(ctx: &Ctx, handed: Option<usize>) -> tracing::Span {
    tracing::info_span!(
        "entry",
        attempt = i64::from(ctx.attempt()),
        resumed = ctx.resumed_from().is_some(),
        progress_bytes = handed.map(|n| n as i64),
        ended = tracing::field::Empty,
        cause = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records on the entry's span how it ended: `rotated`, `returned`, `error`, `panicked`, or
/// `failed` with the failure's cause.
fn record_end<T, E>(span: &tracing::Span, stop: &Stop<TaskResult<T, E>>) {
    let ended = match stop {
        Stop::Switch => "rotated",
        Stop::Returned(Ok(Ok(_))) => "returned",
        Stop::Returned(Ok(Err(_))) => "error",
        Stop::Returned(Err(_)) => "panicked",
        Stop::Died(death) => {
            span.record("cause", death.cause.as_str());
            "failed"
        }
    };
    span.record("ended", ended);
    if ended != "rotated" && ended != "returned" {
        span.record("otel.status_code", "ERROR");
    }
}
