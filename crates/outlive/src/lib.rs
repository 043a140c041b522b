//! outlive: make a browser-automation task outlive the browser it runs in.
#![forbid(unsafe_code)]

pub mod endpoint;
pub mod error;
pub mod provider;
pub mod redact;

pub use chromiumoxide;
pub use endpoint::CdpEndpoint;
pub use error::{Error, ErrorKind, RunError};
pub use provider::{BoxFuture, Endpoint, LocalBrowser, LocalChromium, Provider, Session};
pub use redact::Diagnostics;
