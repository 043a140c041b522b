//! outlive: make a browser-automation task outlive the browser it runs in.
//!
//! Cloud browser sessions end on their own schedule. [`outlive()`] runs your async task
//! against a Chromium [`Page`] and checkpoints cookies, Web Storage, IndexedDB, Cache
//! Storage, OPFS files and the URL. It notices a death from the connection and launches a
//! new browser through a [`Provider`]. Then it restores the checkpoint and calls the task
//! again, with [`Ctx::attempt`] and [`Ctx::resumed_from`], so it can skip what it already
//! did. When only the page fails, the task is re-entered on a fresh page in the same browser.
//!
//! ```no_run
//! use std::sync::Mutex;
//! use outlive::{chromiumoxide::cdp::browser_protocol::page::NavigateParams, LocalChromium, Options};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let done = Mutex::new(Vec::<String>::new()); // progress lives outside the task: it survives
//! let rows = outlive::outlive(
//!     &LocalChromium::new(),
//!     |page, ctx| {
//!         let done = &done;
//!         async move {
//!             if ctx.resumed_from().is_none() {
//!                 page.goto(NavigateParams::new("https://bank.example/login")).await?;
//!                 // … sign in: the expensive, non-repeatable part …
//!                 ctx.checkpoint().await; // never do that twice
//!             }
//!             while done.lock().unwrap().len() < 36 {
//!                 page.goto(NavigateParams::new("https://bank.example/account")).await?;
//!                 let balance = page.evaluate("document.title").await?.into_value::<String>()?;
//!                 done.lock().unwrap().push(balance);
//!             }
//!             Ok::<_, outlive::chromiumoxide::error::CdpError>(done.lock().unwrap().clone())
//!         }
//!     },
//!     Options::new().max_relaunches(5),
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! # How a run ends
//!
//! * `Ok(value)`: the task returned `Ok`.
//! * [`RunError::Task`]: the task returned `Err` while its browser was alive. Returned
//!   unchanged, never retried.
//! * [`RunError::Outlive`] with [`ErrorKind::GaveUp`]: the run spent its budget: browser or
//!   page failures in a row without progress, or `max_sessions` in all. The error names the
//!   limit hit. With [`ErrorKind::InvalidOption`]: an option was out of range, reported
//!   before anything was launched.
//! * A panic in the task closes every browser, emits the event, and resumes unwinding.
//!   Dropping the `outlive` future closes every browser too.
//!
//! # The book
//!
//! The guide is a book under `docs/` in the repository (`mdbook build docs`):
//!
//! * [The Rust API][rust]: `ctx`, progress, errors, the budget, every option.
//! * [What survives, and how][survives].
//! * [Rotation and standby][rotation].
//! * [Durable runs and jobs][durable].
//! * [How deaths are noticed][deaths], and re-entry as cancellation.
//! * [The wide event][event], [metrics] and [security].
//! * [Measurements][measurements].
//!
//! [rust]: https://github.com/outlive-rs/outlive/blob/main/docs/rust.md
//! [survives]: https://github.com/outlive-rs/outlive/blob/main/docs/survives.md
//! [rotation]: https://github.com/outlive-rs/outlive/blob/main/docs/rotation.md
//! [durable]: https://github.com/outlive-rs/outlive/blob/main/docs/durable.md
//! [deaths]: https://github.com/outlive-rs/outlive/blob/main/docs/deaths.md
//! [event]: https://github.com/outlive-rs/outlive/blob/main/docs/wide-event.md
//! [metrics]: https://github.com/outlive-rs/outlive/blob/main/docs/metrics.md
//! [security]: https://github.com/outlive-rs/outlive/blob/main/docs/security.md
//! [measurements]: https://github.com/outlive-rs/outlive/blob/main/docs/measurements/README.md
//!
//! # Layout
//!
//! * `provider` — where browsers come from: [`LocalChromium`] (the default),
//!   `Solari` (feature `solari`), [`Endpoint`] (any CDP websocket URL); the [`Provider`] and
//!   [`Session`] traits.
//! * `relay` — the loopback websocket relay between chromiumoxide and the browser, which
//!   detects a death first (close frame, reset, silent connection, process exit) and watches
//!   the task's page (crash, close, hang), failing its calls at once when it fails.
//! * `checkpoint` — capturing cookies, Web Storage, IndexedDB, Cache Storage, OPFS and the
//!   URL from every frame, and restoring them (page script in `js/`).
//! * `run` — the loop, a struct with named steps. Next browser, prepare (restore), watch the
//!   entry (and beside it the successor or standby). After a failure, a fresh page or a
//!   relaunch; a rotation at a safe point; the accounting. `browser` is its real backend.
//! * `ctx` — the task's [`Ctx`]: the run's checkpoints, one capture at a time, the switch to
//!   a successor at a safe point.
//! * `command` — a program as the task: [`run_command`], [`serve`], [`serve_task`].
//! * `front` — the loopback endpoint programs and agents connect to, at one address for the
//!   whole run: CDP forwarded to the browser served now, and the control requests.
//! * `lifetime` — the declared and learned session lifetime, and when to launch a successor.
//! * `metrics` — [`Metrics`]: deaths, sessions, relaunches and checkpoints as Prometheus
//!   metrics, recorded as they happen into a registry of the caller's.
//! * `quiet` — keeping the wire (cookies, tokens) out of every log: [`Quiet`], [`quietly`].
//! * `report` — the [`WideEvent`], one per run, and the [`Milestone`]s; [`history`] — the
//!   milestones as timestamped events, for a run's history and its page.
//! * [`redact`] — what may reach a log line.
//! * [`wire`] — the relay's reading of a CDP frame (in `relay/wire.rs`), for other CDP clients.
//! * `options`, `dialogs`, `error`, `endpoint` — the typed edges: [`Options`] (configuration
//!   only, no run state) and [`Dialogs`], [`Error`] and
//!   [`RunError`], [`CdpEndpoint`]; `setters` — the `setters!` macro behind their plain
//!   chainable setters; `websocket` — the one websocket config and connector; `sync` — the
//!   poison-tolerant lock.
//!
//! Every type has one public path, at the crate root; [`redact`] and [`wire`] are the public
//! modules (their functions).
//!
//! # Features and platforms
//!
//! * `solari` (default): the Solari provider through the official `solari-browser` client,
//!   and its re-export.
//! * `durable` (default): durable runs — `Options::durable`, `Durable`, `CheckpointStore`,
//!   `SealKey`, `Sealer` and the sealing stack (XChaCha20-Poly1305, SHA-256).
//!
//! `default-features = false` leaves a local-only library: [`LocalChromium`] and
//! [`Endpoint`], checkpoints in memory.
//!
//! Unix only (Linux first; macOS compiles): local browsers are tied to their owner by a pipe
//! and their profiles by a `flock`, and commands run in process groups (`nix`).
#![forbid(unsafe_code)]

mod browser;
pub(crate) mod checkpoint;
mod command;
mod ctx;
mod dialogs;
#[cfg(feature = "durable")]
mod durable;
mod endpoint;
mod error;
mod front;
pub mod history;
mod lifetime;
mod metrics;
mod options;
mod provider;
mod quiet;
pub mod redact;
mod relay;
mod report;
mod run;
#[cfg(feature = "durable")]
mod seal;
mod setters;
mod sync;
mod websocket;

pub mod wire {
    //! Reading a CDP frame the way outlive's relay does. It reads on bytes, never slicing text
    //! at a guessed index, and only as far as the keys it needs. Its answer is serde's
    //! (property-tested and fuzzed against it). It also mends the one thing Chromium writes
    //! that serde refuses, an escaped lone UTF-16 surrogate ([`mend_lone_surrogates`]).
    //!
    //! ```
    //! let request = outlive::wire::version_request(3);
    //! assert_eq!(request, r#"{"id":3,"method":"Browser.getVersion"}"#);
    //! let reply = br#"{"id":3,"result":{"product":"HeadlessChrome/142"}}"#;
    //! assert_eq!(outlive::wire::reply_id(reply), Some(3));
    //! ```
    #[doc(hidden)]
    pub use crate::relay::wire::fuzz_one;
    pub use crate::relay::wire::{mend_lone_surrogates, reply_id, version_request};
}

// The README's and the book's Rust examples are compiled as doctests (`cargo test --doc`).
// A chapter added to docs/SUMMARY.md with Rust in it belongs here too.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../../docs/rust.md")]
    struct Rust;
    #[doc = include_str!("../../../docs/rotation.md")]
    struct Rotation;
    #[doc = include_str!("../../../docs/durable.md")]
    struct Durable;
    #[doc = include_str!("../../../docs/survives.md")]
    struct Survives;
    #[doc = include_str!("../../../docs/deaths.md")]
    struct Deaths;
    #[doc = include_str!("../../../docs/security.md")]
    struct Security;
    #[doc = include_str!("../../../docs/providers.md")]
    struct Providers;
    #[doc = include_str!("../../../docs/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../../../docs/run-and-serve.md")]
    struct RunAndServe;
    #[doc = include_str!("../../../docs/metrics.md")]
    struct Metrics;
}

use std::fmt::Display;
use std::future::Future;

pub use chromiumoxide;
pub use chromiumoxide::Page;
pub use command::{
    Command, CommandFailed, EXIT_GAVE_UP, EXIT_NOT_FOUND, EXIT_USAGE, Endpoints, EntryStart,
    run_command, serve, serve_task,
};
pub use ctx::{CheckpointHold, Ctx, ResumedFrom};
pub use dialogs::Dialogs;
#[cfg(feature = "durable")]
pub use durable::{CheckpointStore, Durable};
pub use endpoint::CdpEndpoint;
pub use error::{Error, ErrorKind, ProviderFailure, RunError};
pub use front::MAX_PROGRESS_BYTES;
pub use metrics::{METRICS_CONTENT_TYPE, Metrics};
pub use options::{Options, Rotation};
pub use prometheus_client;
pub use provider::{
    BoxFuture, Endpoint, LocalBrowser, LocalChromium, Provider, ProviderCommand, Session,
};
#[cfg(feature = "providers")]
pub use provider::{Cloud, Dialect};
#[cfg(feature = "solari")]
pub use provider::{Solari, SolariLaunch};
pub use quiet::{Quiet, quietly};
pub use redact::Diagnostics;
pub use relay::{Confirmation, DeathCause};
pub use report::{Milestone, Outcome, WideEvent};
#[cfg(feature = "durable")]
pub use seal::{SealKey, Sealer};
#[cfg(feature = "solari")]
pub use solari_browser;

/// [`outlive()`], also returning the run's [`WideEvent`] (the one `on_event` receives).
///
/// ```no_run
/// # async fn demo() {
/// use outlive::{LocalChromium, Options};
/// let outlive::Reported { result, event } = outlive::outlive_with_event(
///     &LocalChromium::new(),
///     |page, _ctx| async move { page.url().await },
///     Options::new(),
/// )
/// .await;
/// println!("{} after {} attempts: {:?}", event.outcome.as_str(), event.attempts, result.is_ok());
/// # }
/// ```
///
/// If the task panics, the panic propagates as with [`outlive()`] (the event has been
/// delivered to `on_event` first).
pub async fn outlive_with_event<P, F, Fut, T, E>(
    provider: &P,
    task: F,
    options: Options,
) -> Reported<T, E>
where
    P: Provider + ?Sized,
    F: FnMut(Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
    let result = outlive(provider, task, options.with_event_slot(slot.clone())).await;
    let event = sync::lock(&slot)
        .take()
        .expect("every run that returns has emitted its event");
    Reported { result, event }
}

/// What [`outlive_with_event`] answers: the run's result and its wide event.
#[derive(Debug)]
pub struct Reported<T, E> {
    /// What [`outlive()`] would have returned.
    pub result: Result<T, RunError<E>>,
    /// The run's wide event (the one `on_event` received).
    pub event: WideEvent,
}

/// Runs `task` against a browser from `provider` and returns what it returns, relaunching
/// and re-entering it whenever the browser dies.
///
/// The task is called once per browser with a fresh [`Page`] and a [`Ctx`]; it is called
/// again after each death, until it returns. Every browser outlive launched is closed and
/// released before this returns, on every path. The provider stays yours.
///
/// # Errors
///
/// See [How a run ends](crate#how-a-run-ends).
pub async fn outlive<P, F, Fut, T, E>(
    provider: &P,
    task: F,
    options: Options,
) -> Result<T, RunError<E>>
where
    P: Provider + ?Sized,
    F: FnMut(Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    quietly(run::run(
        &browser::CdpBackend::new(provider),
        task,
        &options,
    ))
    .await
}
