//! The real backend: a provider's session, the relay in front of it, chromiumoxide behind it.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;

use crate::checkpoint::{self, Checkpoint};
use crate::ctx::Capturer;
use crate::error::{Error, ErrorKind};
use crate::options::Options;
use crate::provider::{Provider, Session};
use crate::relay::{Death, DeathCause, Heartbeat, Relay};
use crate::run::{Backend, LiveBrowser};
use crate::task::AbortOnDrop;

/// How long the websocket connect to a fresh session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// chromiumoxide's own per-command timeout; outlive's liveness signals are much faster.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) struct CdpBackend<'p, P: ?Sized> {
    pub(crate) provider: &'p P,
}

pub(crate) struct CdpBrowser {
    page: Page,
    // Field order is drop order: the page and browser go before the pump and the relay.
    _browser: Browser,
    pump: Option<AbortOnDrop>,
    _exit_watch: AbortOnDrop,
    relay: Relay,
    /// Last: dropping it ends the browser (a local process is killed synchronously).
    session: Option<Box<dyn Session>>,
}

impl<P: Provider + ?Sized> Backend for CdpBackend<'_, P> {
    type Page = Page;
    type Browser = CdpBrowser;

    async fn launch(&self, options: &Options) -> Result<CdpBrowser, Error> {
        let session = self.provider.launch().await?;
        let heartbeat = Heartbeat {
            interval: options.heartbeat_interval,
            timeout: options.heartbeat_timeout,
        };
        let relay = match Relay::start(session.endpoint(), heartbeat, CONNECT_TIMEOUT).await {
            Ok(r) => r,
            Err(e) => {
                release_quietly(session).await;
                return Err(e);
            }
        };
        let exited = session.exited();
        match connect(relay, exited, options).await {
            Ok(mut b) => {
                b.session = Some(session);
                Ok(b)
            }
            Err(e) => {
                release_quietly(session).await;
                Err(e)
            }
        }
    }
}

async fn release_quietly(session: Box<dyn Session>) {
    let _ = tokio::time::timeout(Duration::from_secs(15), session.release()).await;
}

async fn connect(
    mut relay: Relay,
    exited: crate::provider::BoxFuture<'static, ()>,
    options: &Options,
) -> Result<CdpBrowser, Error> {
    let config = HandlerConfig {
        request_timeout: REQUEST_TIMEOUT,
        ..HandlerConfig::default()
    };
    let died_early = |d: Death| {
        Error::new(
            ErrorKind::Launch,
            format!(
                "the browser died while it was being connected ({})",
                d.cause.as_str()
            ),
        )
    };
    let client_url = relay.client_url().to_owned();
    let (browser, mut handler) = tokio::select! {
        r = Browser::connect_with_config(client_url, config) => match (r, relay.death()) {
            (Ok(b), _) => b,
            // A failure explained by a death the relay saw is reported as that death.
            (Err(_), Some(d)) => return Err(died_early(d)),
            (Err(e), None) => return Err(Error::new(ErrorKind::Connect, "chromiumoxide could not connect through the relay").with_source(e)),
        },
        d = relay.died() => return Err(died_early(d)),
    };

    // The handler pump: owned, and the first websocket error it reports is a death. It runs
    // quietly (see `quiet`): chromiumoxide's raw CDP traffic carries cookies.
    let death_tx = relay.death_sender();
    let pump = AbortOnDrop(crate::quiet::spawn(async move {
        while let Some(event) = handler.next().await {
            if let Err(CdpError::Ws(_)) = event {
                death_tx.declare(DeathCause::Closed);
                break;
            }
        }
    }));

    // The provider's own signal (a local process exiting) feeds the same death.
    let exit_tx = relay.death_sender();
    let exit_watch = AbortOnDrop(crate::quiet::spawn(async move {
        exited.await;
        exit_tx.declare(DeathCause::ProcessExit);
    }));

    let viewport = SetDeviceMetricsOverrideParams::new(
        i64::from(options.viewport.width),
        i64::from(options.viewport.height),
        1.0,
        false,
    );
    let ready = async {
        let page = browser.new_page("about:blank").await?;
        page.execute(viewport).await?;
        Ok::<_, CdpError>(page)
    };
    let page = tokio::select! {
        r = ready => match r {
            Ok(p) => p,
            Err(_) if relay.death().is_some() => {
                return Err(died_early(relay.death().expect("checked")));
            }
            Err(e) => {
                return Err(Error::new(ErrorKind::Connect, "could not open a page in the new browser").with_source(e));
            }
        },
        d = relay.died() => return Err(died_early(d)),
    };
    Ok(CdpBrowser {
        page,
        _browser: browser,
        pump: Some(pump),
        _exit_watch: exit_watch,
        relay,
        session: None,
    })
}

impl LiveBrowser for CdpBrowser {
    type Page = Page;

    fn page(&self) -> Page {
        self.page.clone()
    }

    fn capturer(&self) -> Capturer {
        let page = self.page.clone();
        Arc::new(move || {
            let page = page.clone();
            Box::pin(async move { checkpoint::capture(&page).await })
        })
    }

    fn died(&self) -> impl Future<Output = Death> + Send {
        let mut watch = self.relay.watch();
        async move { crate::relay::wait_death(&mut watch).await }
    }

    fn death(&self) -> Option<Death> {
        self.relay.death()
    }

    async fn confirm_alive(&self, timeout: Duration) -> bool {
        if self.relay.probe(timeout).await {
            true
        } else {
            self.relay.declare(DeathCause::ProbeFailed);
            false
        }
    }

    fn cut(&mut self) {
        // Dropping the handler makes every pending and future page call fail at once.
        self.pump = None;
        self.relay.cut();
    }

    async fn restore(&self, checkpoint: &Checkpoint) -> Result<(), Error> {
        checkpoint::restore(&self.page, checkpoint).await
    }

    async fn navigate(&self, url: &str) -> Result<(), Error> {
        // The cap is applied by the caller through `navigation_timeout`; see run.rs.
        self.page
            .goto(NavigateParams::new(url))
            .await
            .map(|_| ())
            .map_err(|e| Error::new(ErrorKind::Cdp, "navigation failed").with_source(e))
    }

    async fn release(mut self) -> Result<(), Error> {
        self.cut();
        let session = self.session.take();
        drop(self);
        match session {
            Some(s) => s.release().await,
            None => Ok(()),
        }
    }
}
