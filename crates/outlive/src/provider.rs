//! Providers: where browsers come from, and where they go back to.
//!
//! A [`Provider`] launches one browser session and hands back a [`Session`]; the session is
//! released through [`Session::release`], or — if the owner is dropped first — by the
//! session's own `Drop`, so nothing leaks on any path.

#[cfg(feature = "providers")]
mod cloud;
mod contract;
mod endpoint_fn;
mod local;
mod program;
#[cfg(feature = "solari")]
mod solari;

#[cfg(feature = "providers")]
pub use cloud::{Cloud, Dialect};
pub use contract::{BoxFuture, Provider, Session};
pub use endpoint_fn::Endpoint;
pub(crate) use local::cloexec_pipe;
pub use local::{LocalBrowser, LocalChromium};
pub use program::ProviderCommand;
#[cfg(feature = "solari")]
pub use solari::{Solari, SolariLaunch};
