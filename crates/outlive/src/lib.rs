//! outlive: make a browser-automation task outlive the browser it runs in.
#![forbid(unsafe_code)]

mod browser;
pub mod checkpoint;
mod ctx;
pub mod endpoint;
pub mod error;
pub mod options;
pub mod provider;
pub mod redact;
pub mod relay;
pub mod report;
mod run;
mod task;

use std::fmt::Display;
use std::future::Future;

pub use chromiumoxide;
pub use chromiumoxide::Page;
pub use ctx::{Ctx, ResumedFrom};
pub use endpoint::CdpEndpoint;
pub use error::{Error, ErrorKind, RunError};
pub use options::{Options, Viewport};
pub use provider::{BoxFuture, Endpoint, LocalBrowser, LocalChromium, Provider, Session};
pub use redact::Diagnostics;
pub use relay::{Death, DeathCause};
pub use report::{Outcome, WideEvent};

/// Runs `task` against a browser from `provider` and returns what it returns, relaunching
/// and re-entering it whenever the browser dies.
pub async fn outlive<P, F, Fut, T, E>(provider: &P, task: F, options: Options) -> Result<T, RunError<E>>
where
    P: Provider + ?Sized,
    F: FnMut(Page, Ctx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    run::run(&browser::CdpBackend { provider }, task, &options).await
}
