//! The rotation bench's long-step task: a wizard on Aurora Bank whose steps are a large part
//! of a browser's life. Sign in once (password + TOTP), then `steps` steps. Each opens the
//! account page and reads it for the rest of `step` (about half a session's lifetime). Then it
//! makes one transfer (`POST /transfer`, not idempotent) and save the count of steps done with
//! `ctx.checkpoint_with`. So the task's own checkpoints are `step` apart, and a cut between
//! them redoes the step from its start.
//!
//! Re-entry safe: it signs in only when the bank says it is signed out, and resumes from the
//! count its checkpoint holds. On a re-entry it also asks the bank which of its transfers it
//! recorded (each step's payee is its own: `{payee}{step}`). So a step whose transfer went
//! through but whose checkpoint did not follow is not made twice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outlive::{Ctx, Page};
use serde::Serialize;
use tokio::time::Instant;

use crate::sync::lock;
use outlive_bed::bank::{BankError, BankTask};

/// The task.
#[derive(Debug, Clone)]
pub struct WizardTask {
    /// The bank, its customer and the step timeout (its poll settings are not used).
    pub bank: BankTask,
    /// Steps that finish the task.
    pub steps: u32,
    /// From a step's start to its transfer: the time between the task's own checkpoints.
    pub step: Duration,
    /// How often the account page is read while a step waits.
    pub read_every: Duration,
    /// The payee prefix: step `k`'s transfer goes to `{payee}{k}`.
    pub payee: String,
}

/// One thing the task did, for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepEvent {
    /// A step started (again, if it was cut before).
    Started,
    /// A step's transfer was made and the count saved.
    Done,
    /// A re-entry found the step's transfer recorded although its checkpoint had not said so.
    Recovered,
}

/// One step event.
#[derive(Debug, Clone)]
pub struct StepMark {
    /// When.
    pub at: Instant,
    /// The step (from 1).
    pub step: u32,
    /// `ctx.attempt()` of the entry.
    pub attempt: u32,
    /// What happened.
    pub event: StepEvent,
}

/// What the task did, kept by the caller (the task itself keeps nothing outside its
/// checkpoints).
#[derive(Debug, Default)]
pub struct WizardProgress {
    sign_ins: AtomicU32,
    log: Mutex<Vec<StepMark>>,
}

impl WizardProgress {
    /// TOTP sign-ins (1 when nothing was repeated).
    pub fn sign_ins(&self) -> u32 {
        self.sign_ins.load(Ordering::SeqCst)
    }

    /// Every step event, in order.
    pub fn log(&self) -> Vec<StepMark> {
        lock(&self.log).clone()
    }

    fn note(&self, step: u32, attempt: u32, event: StepEvent) {
        lock(&self.log).push(StepMark {
            at: Instant::now(),
            step,
            attempt,
            event,
        });
    }
}

impl WizardTask {
    /// How many of this task's transfers the bank recorded (its test route, read through the
    /// page).
    async fn recorded(&self, page: &Page) -> Result<u32, BankError> {
        let js = format!(
            "fetch('/__transfers').then(r => r.json()).then(ts => ts.filter(t => t.to.startsWith({:?})).length)",
            self.payee
        );
        self.bank
            .eval(page, "read the recorded transfers", &js)
            .await
    }

    /// Step `step`'s transfer, through the page's own `fetch` (the session cookie is
    /// HttpOnly); the bank answers with a redirect to the account page, or to the sign-in page
    /// when the session is not known.
    async fn transfer(&self, page: &Page, step: u32) -> Result<(), BankError> {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("to", format!("{}{step}", self.payee).as_str()),
                ("amount", "100"),
            ])
            .finish();
        let js = format!(
            "fetch('/transfer', {{method: 'POST', credentials: 'same-origin', \
             headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {body:?}}})\
             .then(r => r.ok ? new URL(r.url).pathname : 'status ' + r.status)"
        );
        let landed: String = self.bank.eval(page, "submit the transfer", &js).await?;
        if landed != "/account" {
            return Err(BankError::Unexpected(format!(
                "the transfer of step {step} ended on {landed}"
            )));
        }
        Ok(())
    }

    /// One entry of the task: answers the steps done (all of them).
    pub async fn run(
        &self,
        page: &Page,
        ctx: &Ctx,
        progress: &WizardProgress,
    ) -> Result<u32, BankError> {
        let attempt = ctx.attempt();
        let mut done: u32 = ctx
            .progress()
            .map_err(|e| BankError::Unexpected(e.to_string()))?
            .unwrap_or(0);
        let state = self.bank.account(page).await?;
        if state.path == "/login" {
            // No automatic checkpoint between the TOTP and the welcome page.
            let hold = ctx.hold_checkpoints();
            self.bank.sign_in(page).await?;
            drop(hold);
            progress.sign_ins.fetch_add(1, Ordering::SeqCst);
            ctx.checkpoint_with(&done).await; // never sign in twice
        }
        if attempt > 1 {
            // A cut between a transfer and the checkpoint after it: the bank knows.
            let recorded = self.recorded(page).await?;
            if recorded > done {
                for step in done + 1..=recorded {
                    progress.note(step, attempt, StepEvent::Recovered);
                }
                done = recorded;
                ctx.checkpoint_with(&done).await;
            }
        }
        while done < self.steps {
            let started = Instant::now();
            let step = done + 1;
            progress.note(step, attempt, StepEvent::Started);
            self.bank.signed_in_account(page).await?;
            // Read the page until the step is due.
            let due = started + self.step;
            while let Some(left) = due.checked_duration_since(Instant::now()) {
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(self.read_every)).await;
                let _: String = self
                    .bank
                    .eval(
                        page,
                        "read the balance",
                        "document.querySelector('#balance')?.textContent ?? ''",
                    )
                    .await?;
            }
            self.transfer(page, step).await?;
            done = step;
            progress.note(step, attempt, StepEvent::Done);
            ctx.checkpoint_with(&done).await;
        }
        Ok(done)
    }
}
