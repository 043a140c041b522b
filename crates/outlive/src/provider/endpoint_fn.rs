//! [`Endpoint`]: any CDP websocket URL a closure can produce (Browserless, Steel, Browserbase…).

use std::future::Future;
use std::sync::Arc;

use super::contract::{BoxFuture, Provider, Session};
use crate::endpoint::CdpEndpoint;
use crate::error::Error;

type LaunchFn = dyn Fn() -> BoxFuture<'static, Result<String, Error>> + Send + Sync;
type ReleaseFn = dyn Fn(CdpEndpoint) -> BoxFuture<'static, Result<(), Error>> + Send + Sync;

/// A provider for every other service: a closure returns a CDP websocket URL for a fresh
/// browser, and an optional closure releases it.
///
/// ```no_run
/// let provider = outlive::Endpoint::new(|| async {
///     // e.g. create a session with your provider's REST API here
///     Ok::<_, outlive::Error>("wss://browser.example.com/?token=…".to_owned())
/// });
/// ```
#[derive(Clone)]
pub struct Endpoint {
    launch: Arc<LaunchFn>,
    release: Option<Arc<ReleaseFn>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("release", &self.release.is_some())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// A provider whose launch calls `launch` for a websocket URL.
    pub fn new<F, Fut>(launch: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, Error>> + Send + 'static,
    {
        Self {
            launch: Arc::new(move || Box::pin(launch())),
            release: None,
        }
    }

    /// Called with the session's endpoint when outlive is done with it.
    ///
    /// # Default
    ///
    /// None: the connection is simply closed.
    pub fn on_release<F, Fut>(mut self, release: F) -> Self
    where
        F: Fn(CdpEndpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send + 'static,
    {
        self.release = Some(Arc::new(move |e| Box::pin(release(e))));
        self
    }
}

struct EndpointSession {
    endpoint: CdpEndpoint,
    release: Option<Arc<ReleaseFn>>,
}

impl Provider for Endpoint {
    fn name(&self) -> &str {
        "endpoint"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, Error>> {
        Box::pin(async move {
            let url = (self.launch)().await?;
            let endpoint = CdpEndpoint::new(url)?;
            Ok(Box::new(EndpointSession {
                endpoint,
                release: self.release.clone(),
            }) as Box<dyn Session>)
        })
    }
}

impl Session for EndpointSession {
    fn endpoint(&self) -> &CdpEndpoint {
        &self.endpoint
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        let EndpointSession { endpoint, release } = *self;
        Box::pin(async move {
            match release {
                Some(f) => f(endpoint).await,
                None => Ok(()),
            }
        })
    }
}
