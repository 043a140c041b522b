//! The contract of a provider: a [`Provider`] launches a [`Session`], which is released once,
//! by its owner or by its own `Drop`; and [`ByIdSession`], a session a provider releases by id.

use std::sync::Arc;
use std::time::Duration;

use crate::endpoint::CdpEndpoint;
use crate::error::{Error, ProviderFailure};

/// A boxed, sendable future; the return type of the object-safe traits here.
pub use futures::future::BoxFuture;

/// Launches browser sessions. Small on purpose, and usable as `Box<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// A short name for logs and the wide event (`"local"`, `"solari"`, …).
    fn name(&self) -> &str;

    /// Launches one browser and returns its session, ready for a CDP connection.
    ///
    /// A launch that fails must clean up whatever it started before it returns.
    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>>;

    /// Releases a session of this provider by its [`Session::id`], without its
    /// [`Session`]: one a process that died left behind (a durable run's takeover).
    ///
    /// # Default
    ///
    /// An error of kind [`Release`](crate::ErrorKind::Release): the provider has no ids.
    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), Error>> {
        let message = format!(
            "the {} provider cannot release a session by its id ({id})",
            self.name()
        );
        Box::pin(async move { Err(Error::provider(ProviderFailure::Release, message)) })
    }
}

/// One launched browser, owned. Dropping it without [`Session::release`] still ends it
/// (best effort, synchronously), but `release` is the path that can report failure.
pub trait Session: Send + Sync {
    /// The browser's CDP websocket endpoint (a secret; see [`CdpEndpoint`]).
    fn endpoint(&self) -> &CdpEndpoint;

    /// A future that resolves when the provider learns by its own means that the browser is
    /// gone — for a local browser, when the process exits. It must not borrow the session.
    /// Providers without such a signal return one that never resolves; the connection-level
    /// signals cover them.
    fn exited(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }

    /// Whether a second, short-lived connection to [`Session::endpoint`] may ask the browser
    /// whether it lives while outlive's own stays open. It must be allowed and reach the same
    /// browser. It must have no side effect: no new browser, no end of the session when it
    /// closes. outlive uses one to tell a stalled connection from a dead browser
    /// (`docs/deaths.md`, "A stall or a death").
    ///
    /// # Default
    ///
    /// `false`: a silence is then judged by time alone, within a longer allowance.
    fn second_connection(&self) -> bool {
        false
    }

    /// The OS process id of the browser when it runs on this machine (a lab or a test can
    /// signal it); `None` for a browser elsewhere.
    fn pid(&self) -> Option<u32> {
        None
    }

    /// The provider's id of the session, for [`Provider::release_id`]; never a secret.
    /// `None` for a session nothing else could release (a local browser).
    fn id(&self) -> Option<&str> {
        None
    }

    /// How long the session lives, when its own settings say so (a timeout asked for at its
    /// create): rotation uses it when [`Options::rotation`](crate::Options::rotation) is not
    /// set.
    fn lifetime(&self) -> Option<std::time::Duration> {
        None
    }

    /// Ends the session and confirms it. Called once, after the last CDP message.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>>;
}

/// `Provider` for pointers to one, each method passed on (a defaulted one too).
macro_rules! provider_through {
    ($($pointer:ty),*) => {$(
        impl<P: Provider + ?Sized> Provider for $pointer {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
                (**self).launch()
            }
            fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), Error>> {
                (**self).release_id(id)
            }
        }
    )*};
}

provider_through!(Box<P>, Arc<P>, &P);

/// Runs a dropped session's `release` in the background, if a runtime is still there to run
/// it: a session dropped unreleased (a cancelled run, a bad answer) still ends.
pub(super) fn release_later(release: impl Future<Output = Result<(), Error>> + Send + 'static) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(crate::quietly(async move {
            let _ = release.await;
        }));
    }
}

/// A session its provider releases by id ([`Provider::release_id`]): at
/// [`Session::release`], or in the background if dropped unreleased.
pub(super) struct ByIdSession<P: Provider + Clone + 'static> {
    pub(super) provider: P,
    pub(super) id: String,
    /// Always set once the session is handed out.
    pub(super) endpoint: Option<CdpEndpoint>,
    pub(super) lifetime: Option<Duration>,
    /// See [`Session::second_connection`]: the provider's to say.
    pub(super) second_connection: bool,
    pub(super) released: bool,
}

impl<P: Provider + Clone + 'static> ByIdSession<P> {
    /// Session `id` of `provider`, stating `lifetime`; its endpoint is set once known.
    pub(super) fn new(provider: P, id: String, lifetime: Option<Duration>) -> Self {
        ByIdSession {
            provider,
            id,
            endpoint: None,
            lifetime,
            second_connection: false,
            released: false,
        }
    }

    /// The release, owning what it needs, so it may run after the session is gone.
    fn releasing(&self) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let (provider, id) = (self.provider.clone(), self.id.clone());
        async move { provider.release_id(&id).await }
    }
}

impl<P: Provider + Clone + 'static> Session for ByIdSession<P> {
    fn endpoint(&self) -> &CdpEndpoint {
        self.endpoint
            .as_ref()
            .expect("set before the session is handed out")
    }

    fn id(&self) -> Option<&str> {
        Some(&self.id)
    }

    fn lifetime(&self) -> Option<Duration> {
        self.lifetime
    }

    fn second_connection(&self) -> bool {
        self.second_connection
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        self.released = true;
        Box::pin(self.releasing())
    }
}

impl<P: Provider + Clone + 'static> Drop for ByIdSession<P> {
    fn drop(&mut self) {
        if !self.released {
            release_later(self.releasing());
        }
    }
}

// Both traits must stay object-safe.
const _: fn() = || {
    fn obj_safe(_: &dyn Provider, _: Box<dyn Session>) {}
    let _ = obj_safe;
};
