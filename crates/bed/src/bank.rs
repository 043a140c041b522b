//! The Aurora Bank task: sign in with a password and a TOTP, checkpoint, then poll the
//! account page until enough polls have succeeded. Written to be safe to re-enter: it signs
//! in only when the page shows it is signed out, and its progress lives in [`BankProgress`],
//! outside the task.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use outlive::chromiumoxide::error::CdpError;
use outlive::{Ctx, Options, Page, Provider};
use serde::Deserialize;
use tokio::time::Instant;

use crate::sync::lock;

/// What the task is asked to do.
#[derive(Debug, Clone)]
pub struct BankTask {
    /// Aurora Bank's base URL (`http://127.0.0.1:PORT`).
    pub base_url: String,
    /// Sign-in name.
    pub username: String,
    /// Sign-in password.
    pub password: String,
    /// The TOTP secret the second factor is computed from.
    pub totp: aurora::TotpSecret,
    /// How many successful polls finish the task.
    pub polls: u32,
    /// Pause between polls.
    pub poll_every: Duration,
    /// Cap on any one page step; a step that takes longer fails the entry.
    pub step_timeout: Duration,
    /// Keep the poll count in the checkpoints too (`ctx.checkpoint_with` after each poll),
    /// so a run taken over by another process knows how far it got.
    pub durable_progress: bool,
}

impl BankTask {
    /// The task against an Aurora Bank started with `config`.
    pub fn new(
        base_url: impl Into<String>,
        config: &aurora::Config,
        polls: u32,
        poll_every: Duration,
    ) -> Self {
        BankTask {
            base_url: base_url.into(),
            username: config.username().to_owned(),
            password: config.password().to_owned(),
            totp: config.totp_secret().clone(),
            polls,
            poll_every,
            step_timeout: Duration::from_secs(15),
            durable_progress: false,
        }
    }
}

/// Progress that survives re-entry because it lives with the caller.
#[derive(Debug, Default)]
pub struct BankProgress {
    polls_done: AtomicU32,
    sign_ins: AtomicU32,
    polls: Mutex<Vec<Poll>>,
}

impl BankProgress {
    /// Successful polls so far.
    pub fn polls_done(&self) -> u32 {
        self.polls_done.load(Ordering::SeqCst)
    }

    /// Sign-ins the task performed (1 when every relaunch kept the session).
    pub fn sign_ins(&self) -> u32 {
        self.sign_ins.load(Ordering::SeqCst)
    }

    /// Every successful poll, in order.
    pub fn polls(&self) -> Vec<Poll> {
        lock(&self.polls).clone()
    }
}

/// One successful poll.
#[derive(Debug, Clone)]
pub struct Poll {
    /// When it succeeded, relative to the progress's first poll clock.
    pub at: Instant,
    /// The entry that made it.
    pub attempt: u32,
    /// The account page's server-side poll counter.
    pub served: u64,
}

/// Something the task did, for a progress display.
#[derive(Debug, Clone)]
pub enum BankEvent {
    /// An entry started.
    Entered {
        /// `ctx.attempt()` (1 for the baseline).
        attempt: u32,
        /// Whether a checkpoint was restored.
        resumed: bool,
    },
    /// The task signed in (password + TOTP).
    SignedIn,
    /// A poll succeeded.
    Polled {
        /// Polls done so far.
        done: u32,
        /// Polls needed.
        of: u32,
    },
}

/// Why an entry of the task failed.
#[derive(Debug, thiserror::Error)]
pub enum BankError {
    /// A page call failed.
    #[error("page call failed")]
    Page(#[from] CdpError),
    /// A step took longer than the step timeout.
    #[error("`{0}` took longer than the step timeout")]
    Timeout(&'static str),
    /// The page showed something a correct run never shows.
    #[error("unexpected page state: {0}")]
    Unexpected(String),
}

/// What the account page shows (or the sign-in page it redirected to).
#[derive(Deserialize)]
pub struct AccountState {
    /// The page's path: `/account`, or `/login` when signed out.
    pub path: String,
    /// The poll counter's text.
    pub polls: String,
    /// The localStorage preference the welcome page wrote.
    pub pref: String,
}

const ACCOUNT_STATE: &str = r#"({
  path: location.pathname,
  polls: document.querySelector('#polls')?.textContent ?? '',
  pref: document.querySelector('#pref')?.textContent ?? '',
})"#;

impl BankTask {
    async fn step<T>(
        &self,
        what: &'static str,
        fut: impl Future<Output = Result<T, CdpError>>,
    ) -> Result<T, BankError> {
        match tokio::time::timeout(self.step_timeout, fut).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(BankError::Timeout(what)),
        }
    }

    /// Evaluates `js` on `page` (awaiting a promise) and answers its value; `what` names the
    /// step in a timeout.
    pub async fn eval<T: serde::de::DeserializeOwned>(
        &self,
        page: &Page,
        what: &'static str,
        js: &str,
    ) -> Result<T, BankError> {
        let params = EvaluateParams::builder()
            .expression(js)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(BankError::Unexpected)?;
        let result = self.step(what, page.evaluate_expression(params)).await?;
        result
            .into_value()
            .map_err(|e| BankError::Unexpected(format!("{what}: {e}")))
    }

    /// Navigates `page` to `path` on the bank.
    pub async fn goto(&self, page: &Page, path: &str) -> Result<(), BankError> {
        let url = format!("{}{path}", self.base_url);
        self.step("navigate", page.goto(NavigateParams::new(url)))
            .await?;
        Ok(())
    }

    /// Opens the account page and reads it.
    pub async fn account(&self, page: &Page) -> Result<AccountState, BankError> {
        self.goto(page, "/account").await?;
        self.eval(page, "read the account page", ACCOUNT_STATE)
            .await
    }

    /// Reads the account page, and fails unless the session and the localStorage
    /// preference survived.
    pub async fn signed_in_account(&self, page: &Page) -> Result<AccountState, BankError> {
        let state = self.account(page).await?;
        if state.path != "/account" {
            return Err(BankError::Unexpected(format!(
                "signed out, on {}",
                state.path
            )));
        }
        if state.pref == "MISSING" {
            return Err(BankError::Unexpected(
                "the localStorage preference is missing".into(),
            ));
        }
        Ok(state)
    }

    /// Password, then TOTP, through the page's own `fetch` (so the browser stores the
    /// HttpOnly cookies), then the welcome page that writes the localStorage preference.
    pub async fn sign_in(&self, page: &Page) -> Result<(), BankError> {
        self.goto(page, "/login").await?;
        let body = |pairs: &[(&str, &str)]| {
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish()
        };
        let post = |path: &str, form: String| {
            format!(
                "fetch({path:?}, {{method: 'POST', redirect: 'manual', credentials: 'same-origin', \
                 headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {form:?}}})\
                 .then(r => r.type === 'opaqueredirect' || r.ok)"
            )
        };
        let login = body(&[("username", &self.username), ("password", &self.password)]);
        let ok: bool = self
            .eval(page, "submit the password", &post("/login", login))
            .await?;
        if !ok {
            return Err(BankError::Unexpected("the password was refused".into()));
        }
        let code = self.totp.current_code();
        let ok: bool = self
            .eval(
                page,
                "submit the TOTP",
                &post("/totp", body(&[("code", &code)])),
            )
            .await?;
        if !ok {
            return Err(BankError::Unexpected("the TOTP was refused".into()));
        }
        self.goto(page, "/account?welcome=1").await?;
        Ok(())
    }

    /// Runs the task through outlive on `provider` with `options`, without a progress
    /// display: its result and the run's wide event.
    pub async fn outlive<P: Provider + ?Sized>(
        &self,
        provider: &P,
        progress: &BankProgress,
        options: Options,
    ) -> outlive::Reported<u32, BankError> {
        self.outlive_watched(provider, progress, &|_| {}, options)
            .await
    }

    /// [`BankTask::outlive`], telling `on_event` what the task does.
    pub async fn outlive_watched<P: Provider + ?Sized>(
        &self,
        provider: &P,
        progress: &BankProgress,
        on_event: &(dyn Fn(BankEvent) + Send + Sync),
        options: Options,
    ) -> outlive::Reported<u32, BankError> {
        outlive::outlive_with_event(
            provider,
            |page, ctx| async move { self.run(&page, Some(&ctx), progress, on_event).await },
            options,
        )
        .await
    }

    /// One entry of the task. `ctx` is `None` for the baseline (plain chromiumoxide).
    pub async fn run(
        &self,
        page: &Page,
        ctx: Option<&Ctx>,
        progress: &BankProgress,
        on_event: &(dyn Fn(BankEvent) + Send + Sync),
    ) -> Result<u32, BankError> {
        let attempt = ctx.map_or(1, Ctx::attempt);
        if let (true, Some(ctx)) = (self.durable_progress, ctx) {
            // The polls the checkpoint this entry resumes from had done (another process's,
            // after a takeover).
            let saved = ctx
                .progress::<u32>()
                .map_err(|e| BankError::Unexpected(e.to_string()))?;
            progress
                .polls_done
                .fetch_max(saved.unwrap_or(0), Ordering::SeqCst);
        }
        on_event(BankEvent::Entered {
            attempt,
            resumed: ctx.is_some_and(|c| c.resumed_from().is_some()),
        });
        // Re-entry safe: sign in only if the bank says we are signed out.
        let mut state = self.account(page).await?;
        if state.path == "/login" {
            // No automatic checkpoint in the middle of signing in: a death there must resume
            // from before it (signed out), never from between the TOTP and the welcome page.
            let hold = ctx.map(Ctx::hold_checkpoints);
            self.sign_in(page).await?;
            drop(hold);
            progress.sign_ins.fetch_add(1, Ordering::SeqCst);
            on_event(BankEvent::SignedIn);
            if let Some(ctx) = ctx {
                ctx.checkpoint().await; // never sign in twice
            }
        }
        while progress.polls_done() < self.polls {
            state = self.signed_in_account(page).await?;
            let done = progress.polls_done.fetch_add(1, Ordering::SeqCst) + 1;
            lock(&progress.polls).push(Poll {
                at: Instant::now(),
                attempt,
                served: state.polls.trim().parse().unwrap_or(0),
            });
            on_event(BankEvent::Polled {
                done,
                of: self.polls,
            });
            if let (true, Some(ctx)) = (self.durable_progress, ctx) {
                ctx.checkpoint_with(&done).await;
            }
            if done < self.polls {
                tokio::time::sleep(self.poll_every).await;
            }
        }
        Ok(progress.polls_done())
    }
}

/// The input of the `bank` task (`outlive submit bank --input '{"polls": 30}'`).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankInput {
    /// Aurora Bank's base URL; the worker's own bank when absent.
    #[serde(default)]
    pub bank_url: Option<String>,
    /// Polls that finish the task.
    #[serde(default = "BankInput::default_polls")]
    pub polls: u32,
    /// Pause between polls, in milliseconds.
    #[serde(default = "BankInput::default_every")]
    pub poll_every_ms: u64,
}

impl BankInput {
    fn default_polls() -> u32 {
        30
    }

    fn default_every() -> u64 {
        500
    }
}

/// What the `bank` task answers.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BankResult {
    /// Polls done (all of them).
    pub polls: u32,
    /// Sign-ins this entry made (0 when it resumed signed in).
    pub sign_ins_last_entry: u32,
}

/// The tasks the `outlive` command's workers run: `bank`, the Aurora Bank task (sign-in with
/// the default Aurora credentials, then `polls` polls; its poll count kept in the
/// checkpoints). `bank` is the Aurora Bank used when a run's input names none.
pub fn tasks(bank: Option<String>) -> outlive_jobs::Tasks {
    outlive_jobs::Tasks::new().register(
        "bank",
        move |input: std::sync::Arc<BankInput>, page, ctx| {
            let bank = bank.clone();
            async move {
                let url = input.bank_url.clone().or(bank).ok_or_else(|| {
                    BankError::Unexpected(
                        "no bank_url in the input, and the worker has no bank of its own".into(),
                    )
                })?;
                let mut task = BankTask::new(
                    url,
                    &aurora::Config::new(),
                    input.polls,
                    Duration::from_millis(input.poll_every_ms),
                );
                task.durable_progress = true;
                let progress = BankProgress::default();
                let polls = task.run(&page, Some(&ctx), &progress, &|_| {}).await?;
                Ok::<_, BankError>(BankResult {
                    polls,
                    sign_ins_last_entry: progress.sign_ins(),
                })
            }
        },
    )
}
