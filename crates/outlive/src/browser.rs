//! The real backend: a provider's session, the relay in front of it, chromiumoxide behind it.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::emulation::SetDeviceMetricsOverrideParams;
use chromiumoxide::cdp::browser_protocol::page::{
    AddScriptToEvaluateOnNewDocumentParams, NavigateParams,
};
use chromiumoxide::cdp::browser_protocol::target::DisposeBrowserContextParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::handler::{Handler, HandlerConfig};
use chromiumoxide::{Browser, Page};
use futures::StreamExt;

use crate::checkpoint::{self, CaptureOptions, Checkpoint, PartCache, Tabs, Tracking, WarmUp};
use crate::ctx::{Capturer, DeepReads};
use crate::dialogs::Dialogs;
use crate::error::{Error, ErrorKind};
use crate::front::{Client, Usage};
use crate::metrics::{LiveSession, Operation};
use crate::options::Options;
use crate::provider::{Provider, Session};
use crate::relay::{Death, DeathCause, DeathSender, Heartbeat, LinkWatch, Relay, Stalls};
use crate::run::{Backend, LiveBrowser};
use tokio_util::task::AbortOnDropHandle;

mod later;

/// How long a capture waits for the loads left to carried clients (see `later`).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// How long the websocket connect to a fresh session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a fresh page may take to open in a live browser before outlive relaunches
/// instead (a page that crashes while chromiumoxide initialises it never answers).
const PAGE_OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// chromiumoxide's own per-command timeout; outlive's liveness signals are much faster.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) struct CdpBackend<'p, P: ?Sized> {
    pub(crate) provider: &'p P,
    /// The stalls every relay of the run survived.
    pub(crate) stalls: Arc<Stalls>,
    /// The foreign client the run's browsers are served to, if any.
    client: Option<Client>,
}

impl<'p, P: ?Sized> CdpBackend<'p, P> {
    /// A backend launching through `provider`.
    pub(crate) fn new(provider: &'p P) -> Self {
        CdpBackend {
            provider,
            stalls: Arc::default(),
            client: None,
        }
    }

    /// The backend of a run whose browsers are served to `client`.
    pub(crate) fn with_client(self, client: Client) -> Self {
        CdpBackend {
            client: Some(client),
            ..self
        }
    }
}

pub(crate) struct CdpBrowser {
    page: Page,
    // Field order is drop order: the page and browser go before the pump and the relay.
    browser: Arc<Browser>,
    viewport: crate::options::Viewport,
    capture: CaptureOptions,
    /// The parts of the newest capture (or of the restored checkpoint), by hash.
    parts: Arc<PartCache>,
    /// The change tracking of the page's session (a fresh page starts a fresh one).
    tracking: Arc<Tracking>,
    /// Whether the page's documents warm the capture script up (a fresh page starts cold).
    warm: Arc<WarmUp>,
    /// A foreign client's use of the browser: with one, every tab is captured.
    usage: Option<Arc<Usage>>,
    /// The client's other tabs' tracking state (reset with the task's page).
    tabs: Arc<Tabs>,
    /// How long a reopened tab may take to load.
    navigation_timeout: Duration,
    /// The loads a restore left to carried clients, done here if none takes them.
    later: std::sync::Mutex<Vec<AbortOnDropHandle<()>>>,
    pump: Option<AbortOnDropHandle<()>>,
    _exit_watch: AbortOnDropHandle<()>,
    relay: Relay,
    /// Last: dropping it ends the browser (a local process is killed synchronously).
    session: Option<Box<dyn Session>>,
    /// Counts the session as live (`outlive_sessions_live`) until it is released or dropped.
    live: Option<LiveSession>,
}

impl<P: Provider + ?Sized> CdpBackend<'_, P> {
    /// Launches a session through the provider and connects its browser, ready for the task.
    async fn launch_and_connect(&self, options: &Options) -> Result<CdpBrowser, Error> {
        let metrics = options.metrics.as_ref();
        let provider = self.provider.name();
        let session = match self.provider.launch().await {
            Ok(s) => s,
            Err(e) => {
                if let Some(m) = metrics {
                    m.provider_failed(provider, Operation::Launch);
                }
                return Err(e);
            }
        };
        let live = metrics.map(|m| m.session_started(provider));
        let heartbeat = Heartbeat {
            interval: options.heartbeat_interval,
            timeout: options.heartbeat_timeout,
        };
        // A Rust task's dialogs are dismissed unless it says otherwise; a command's client
        // answers its own.
        let dialogs = options.dialogs.unwrap_or(match self.client {
            Some(_) => Dialogs::Leave,
            None => Dialogs::Dismiss,
        });
        let link = LinkWatch {
            second_connection: session.second_connection(),
            stalls: self.stalls.clone(),
        };
        let endpoint = session.endpoint();
        let relay = match Relay::start(endpoint, heartbeat, dialogs, CONNECT_TIMEOUT, link).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(l) = &live {
                    l.failed(Operation::Connect);
                }
                release_quietly(session).await;
                return Err(e);
            }
        };
        let exited = session.exited();
        let usage = self.client.as_ref().map(|c| c.usage.clone());
        match connect(relay, exited, options, usage).await {
            Ok(mut b) => {
                b.session = Some(session);
                b.live = live;
                if let (Some(usage), Some(endpoint)) = (&b.usage, b.endpoint()) {
                    let own = b.page.target_id().as_ref().to_owned();
                    usage.tabs_ready(endpoint.expose(), vec![own]);
                }
                Ok(b)
            }
            Err(e) => {
                if let Some(l) = &live {
                    l.failed(Operation::Connect);
                }
                release_quietly(session).await;
                Err(e)
            }
        }
    }
}

impl<P: Provider + ?Sized> Backend for CdpBackend<'_, P> {
    type Page = Page;
    type Browser = CdpBrowser;

    fn stalls(&self) -> Option<Arc<Stalls>> {
        Some(self.stalls.clone())
    }

    fn clients(&self) -> Option<Arc<Usage>> {
        self.client.as_ref().map(|c| c.usage.clone())
    }

    fn client_use_is_progress(&self) -> bool {
        self.client.as_ref().is_some_and(|c| c.use_is_progress)
    }

    /// Launches and connects a browser; logs `browser launched` with the provider and the
    /// time it took. An event, not a span: the browser's own tasks, spawned during the launch,
    /// would keep a span open as long as the browser lives.
    async fn launch(&self, options: &Options) -> Result<CdpBrowser, Error> {
        let started = tokio::time::Instant::now();
        let launched = self.launch_and_connect(options).await;
        if launched.is_ok() {
            tracing::info!(
                target: "outlive::milestone",
                provider = %crate::redact::redact(self.provider.name(), options.diagnostics),
                took_ms = started.elapsed().as_millis() as i64,
                "browser launched"
            );
        }
        launched
    }
}

async fn release_quietly(session: Box<dyn Session>) {
    let _ = tokio::time::timeout(Duration::from_secs(15), session.release()).await;
}

/// Connects chromiumoxide through `relay`, starts the tasks that feed the relay's death
/// signal, and opens the run's first page.
async fn connect(
    mut relay: Relay,
    exited: crate::provider::BoxFuture<'static, ()>,
    options: &Options,
    usage: Option<Arc<Usage>>,
) -> Result<CdpBrowser, Error> {
    let config = HandlerConfig {
        request_timeout: REQUEST_TIMEOUT,
        ..HandlerConfig::default()
    };
    let client_url = relay.client_url().to_owned();
    let (browser, handler) = tokio::select! {
        r = Browser::connect_with_config(client_url, config) => match (r, relay.death()) {
            (Ok(b), _) => b,
            // A failure explained by a death the relay saw is reported as that death.
            (Err(_), Some(d)) => return Err(died_early(d)),
            (Err(e), None) => return Err(Error::new(ErrorKind::Connect, "chromiumoxide could not connect through the relay").with_source(e)),
        },
        d = relay.died() => return Err(died_early(d)),
    };
    let pump = spawn_pump(handler, relay.death_sender());
    let exit_watch = spawn_exit_watch(exited, relay.death_sender());
    let page = first_page(&mut relay, &browser, options.viewport, options.page_state).await?;
    Ok(CdpBrowser {
        page,
        browser: Arc::new(browser),
        viewport: options.viewport,
        capture: CaptureOptions::of(options),
        parts: Arc::default(),
        tracking: Arc::default(),
        warm: Arc::default(),
        usage,
        tabs: Arc::default(),
        navigation_timeout: options.navigation_timeout,
        later: Default::default(),
        pump: Some(pump),
        _exit_watch: exit_watch,
        relay,
        session: None,
        live: None,
    })
}

/// The error for a browser that died (`d`) while it was being connected.
fn died_early(d: Death) -> Error {
    Error::new(
        ErrorKind::Launch,
        format!(
            "the browser died while it was being connected ({})",
            d.cause.as_str()
        ),
    )
}

/// Spawns the handler pump: owned, and the first websocket error it reports is a death. It
/// runs quietly (see `quiet`): chromiumoxide's raw CDP traffic carries cookies.
fn spawn_pump(mut handler: Handler, death_tx: DeathSender) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(crate::quiet::spawn_busy(
        crate::quiet::Busy::Pump,
        async move {
            while let Some(event) = handler.next().await {
                if let Err(CdpError::Ws(_)) = event {
                    death_tx.declare(DeathCause::Closed);
                    break;
                }
            }
        },
    ))
}

/// Spawns the watch that feeds the provider's own signal (a local process exiting) into the
/// same death.
fn spawn_exit_watch(
    exited: crate::provider::BoxFuture<'static, ()>,
    exit_tx: DeathSender,
) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(crate::quiet::spawn(async move {
        exited.await;
        exit_tx.declare(DeathCause::ProcessExit);
    }))
}

/// Opens the new browser's first page (see `open_page`) and has `relay` watch it; a death of
/// the page or the browser meanwhile is the error.
async fn first_page(
    relay: &mut Relay,
    browser: &Browser,
    viewport: crate::options::Viewport,
    page_state: bool,
) -> Result<Page, Error> {
    let ready = open_page(browser, viewport, page_state);
    let generation = relay.opening();
    let (mut page_death, _) = relay.page_watch();
    let page = tokio::select! {
        d = crate::relay::wait_page_death(&mut page_death, generation) => {
            return Err(Error::new(ErrorKind::Launch, format!("the new browser's first page failed while it was set up ({})", d.cause.as_str())));
        }
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
    relay.watch_page(
        page.target_id().as_ref().to_owned(),
        page.session_id().as_ref().to_owned(),
    );
    Ok(page)
}

/// A blank page with the run's viewport, whose top-level documents get the capture script
/// installed as they start; with `page_state`, every frame's documents the page state's
/// watcher, in the utility world (so typing before the first checkpoint is seen).
async fn open_page(
    browser: &Browser,
    viewport: crate::options::Viewport,
    page_state: bool,
) -> Result<Page, CdpError> {
    let page = browser.new_page("about:blank").await?;
    let watcher = async {
        if !page_state {
            return Ok(());
        }
        let script = AddScriptToEvaluateOnNewDocumentParams::builder()
            .source(checkpoint::page_state_script())
            .world_name(chromiumoxide::handler::frame::UTILITY_WORLD_NAME)
            .build()
            .expect("source is set");
        page.execute(script).await.map(|_| ())
    };
    let (metrics, script, watcher) = futures::join!(
        page.execute(SetDeviceMetricsOverrideParams::new(
            i64::from(viewport.width),
            i64::from(viewport.height),
            1.0,
            false,
        )),
        page.execute(AddScriptToEvaluateOnNewDocumentParams::new(
            checkpoint::install_on_new_document()
        )),
        watcher,
    );
    metrics?;
    script?;
    watcher?;
    Ok(page)
}

impl LiveBrowser for CdpBrowser {
    type Page = Page;

    fn page(&self) -> Page {
        self.page.clone()
    }

    fn stated_lifetime(&self) -> Option<Duration> {
        self.session.as_ref().and_then(|s| s.lifetime())
    }

    fn endpoint(&self) -> Option<crate::CdpEndpoint> {
        self.session.as_ref().map(|s| s.endpoint().clone())
    }

    fn calls(&self) -> Option<crate::relay::Calls> {
        Some(self.relay.calls())
    }

    fn checkpoint_stale(&self) -> impl Future<Output = ()> + Send {
        let tracking = self.tracking.clone();
        async move { tracking.stale().await }
    }

    fn capturer(&self) -> Capturer {
        let at = Capturing {
            browser: self.browser.clone(),
            page: self.page.clone(),
            calls: self.relay.calls(),
            parts: self.parts.clone(),
            tracking: self.tracking.clone(),
            warm: self.warm.clone(),
            usage: self.usage.clone(),
            tabs: self.tabs.clone(),
            endpoint: self.endpoint().map(|e| e.expose().to_owned()),
        };
        let options = self.capture;
        Arc::new(move |reads| {
            let options = CaptureOptions {
                in_full: reads == DeepReads::InFull,
                ..options
            };
            let at = at.clone();
            Box::pin(async move { at.capture(options).await })
        })
    }

    fn died(&self) -> impl Future<Output = Death> + Send {
        let mut browser = self.relay.watch();
        let (mut page, generation) = self.relay.page_watch();
        async move {
            tokio::select! {
                biased;
                d = crate::relay::wait_death(&mut browser) => d,
                d = crate::relay::wait_page_death(&mut page, generation) => d,
            }
        }
    }

    fn death(&self) -> Option<Death> {
        self.relay.death().or_else(|| self.relay.page_death())
    }

    fn browser_death(&self) -> Option<Death> {
        self.relay.death()
    }

    async fn confirm_alive(&self, timeout: Duration) -> bool {
        let (mut browser, mut page) =
            tokio::join!(self.relay.probe(timeout), self.relay.probe_page(timeout));
        // Unanswered may be a stall: judged as any silence is, then asked again once heard.
        if !browser && self.relay.heard_again().await {
            (browser, page) =
                tokio::join!(self.relay.probe(timeout), self.relay.probe_page(timeout));
        }
        if !browser {
            self.relay.declare(DeathCause::ProbeFailed);
            false
        } else if !page {
            self.relay.declare_page(DeathCause::PageHung);
            false
        } else {
            true
        }
    }

    async fn replace_page(&mut self) -> Result<(), Error> {
        if let Some(d) = self.relay.death() {
            return Err(Error::new(
                ErrorKind::Cdp,
                format!("the browser died too ({})", d.cause.as_str()),
            ));
        }
        // The failed page goes first: a hung renderer is crashed so no new page can share it.
        let hung = self
            .relay
            .page_death()
            .is_some_and(|d| d.cause == DeathCause::PageHung);
        self.relay.retire_page(
            self.page.target_id().as_ref().to_owned(),
            self.page.session_id().as_ref().to_owned(),
            hung,
        );
        let mut browser_death = self.relay.watch();
        // A fresh page that crashes (or is closed) before it is set up is given up at once,
        // not after the open timeout.
        let generation = self.relay.opening();
        let (mut fresh_death, _) = self.relay.page_watch();
        let opened = tokio::select! {
            r = tokio::time::timeout(PAGE_OPEN_TIMEOUT, open_page(&self.browser, self.viewport, self.capture.page_state)) => r,
            d = crate::relay::wait_death(&mut browser_death) => {
                return Err(Error::new(ErrorKind::Cdp, format!("the browser died while a fresh page was opened ({})", d.cause.as_str())));
            }
            d = crate::relay::wait_page_death(&mut fresh_death, generation) => {
                return Err(Error::new(ErrorKind::Cdp, format!("the fresh page failed while it was set up ({})", d.cause.as_str())));
            }
        };
        let page = match opened {
            Ok(Ok(page)) => page,
            Ok(Err(e)) => {
                return Err(Error::new(
                    ErrorKind::Cdp,
                    "could not open a fresh page in the browser",
                )
                .with_source(e));
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Cdp,
                    format!("no fresh page within {PAGE_OPEN_TIMEOUT:?}"),
                ));
            }
        };
        self.relay.watch_page(
            page.target_id().as_ref().to_owned(),
            page.session_id().as_ref().to_owned(),
        );
        if let (Some(usage), Some(endpoint)) = (&self.usage, self.endpoint()) {
            let (old, new) = (self.page.target_id(), page.target_id());
            usage.tab_replaced(endpoint.expose(), old.as_ref(), new.as_ref());
        }
        self.page = page;
        self.tracking = Arc::default();
        self.warm = Arc::default();
        self.tabs = Arc::default();
        Ok(())
    }

    fn cut(&mut self) {
        // Dropping the handler makes every pending and future page call fail at once.
        self.pump = None;
        self.relay.cut();
    }

    async fn restore(
        &self,
        checkpoint: &Checkpoint,
        prior: Option<&Checkpoint>,
    ) -> Result<u64, Error> {
        let calls = self.relay.calls();
        let mut failed = checkpoint::restore(&self.page, &calls, checkpoint, prior).await?;
        // The list ends on the current entry's stub, which the resume load replaces.
        if let Some(list) = &checkpoint.history {
            failed += checkpoint::rebuild_back_forward(&self.page, list, &checkpoint.url).await;
        }
        if let (Some(usage), Some(endpoint)) = (&self.usage, self.endpoint()) {
            // The contexts the client made, ready for it to make again.
            let (ids, f) = checkpoint::remake_contexts(&self.browser, &calls, checkpoint).await;
            failed += f;
            let contexts = ids.clone();
            for unused in usage.contexts_ready(endpoint.expose(), ids) {
                let dispose = DisposeBrowserContextParams::new(BrowserContextId::new(unused));
                let _ = self.browser.execute(dispose).await;
            }
            if usage.reopens_tabs() {
                let endpoint = endpoint.expose();
                // With clients held through the death, each loads its pages when carried.
                let defer = usage.loads().swapping();
                failed += self
                    .reopen_tabs(usage, endpoint, checkpoint, &contexts, defer)
                    .await;
            }
        }
        // The page now holds what the checkpoint holds: the next capture need not send it.
        self.parts.remember(checkpoint);
        Ok(failed)
    }

    fn leave_load_to_clients(&self, checkpoint: &Checkpoint) -> bool {
        let Some(usage) = &self.usage else {
            return false;
        };
        if !usage.loads().swapping() || !checkpoint::is_storable_origin(&checkpoint.url) {
            return false;
        }
        let page = later::LaterLoad {
            page: self.page.clone(),
            url: checkpoint.url.clone(),
            state: checkpoint.page.clone(),
        };
        self.leave_loads(usage, vec![page]);
        true
    }

    async fn navigate(&self, url: &str) -> Result<(), Error> {
        // The cap is applied by the caller through `navigation_timeout`; see run.rs.
        if checkpoint::stands_on(&self.page, url).await {
            return Ok(()); // the back/forward list's rebuild loaded it
        }
        self.page
            .goto(NavigateParams::new(url))
            .await
            .map(|_| ())
            .map_err(|e| Error::new(ErrorKind::Cdp, "navigation failed").with_source(e))
    }

    async fn restore_page(&self, checkpoint: &Checkpoint) -> u64 {
        let Some(state) = &checkpoint.page else {
            return 0;
        };
        let applied = checkpoint::apply_page_state(&self.page, state).await;
        tracing::debug!(
            restored = applied.restored,
            left_alone = applied.left_alone,
            unmatched = applied.unmatched,
            "page state put back"
        );
        applied.unmatched
    }

    async fn release(mut self) -> Result<(), Error> {
        if let (Some(usage), Some(endpoint)) = (&self.usage, self.endpoint()) {
            usage.browser_gone(endpoint.expose());
        }
        self.cut();
        let session = self.session.take();
        let live = self.live.take();
        drop(self);
        let released = match session {
            Some(s) => s.release().await,
            None => Ok(()),
        };
        if let (Err(_), Some(live)) = (&released, &live) {
            live.failed(Operation::Release);
        }
        released
    }
}

impl CdpBrowser {
    /// Leaves `pages`' loads to the clients carried through the death (see `later`).
    fn leave_loads(&self, usage: &Usage, pages: Vec<later::LaterLoad>) {
        let task = later::leave(usage.loads(), pages, self.navigation_timeout);
        crate::sync::lock(&self.later).push(task);
    }

    /// Opens the client's other tabs again (under `serve`), after the task's page: the front
    /// shows them in this order. Answers the writes that failed.
    async fn reopen_tabs(
        &self,
        usage: &Usage,
        endpoint: &str,
        checkpoint: &Checkpoint,
        contexts: &[String],
        defer: bool,
    ) -> u64 {
        let calls = self.relay.calls();
        let navigation = (!defer).then_some(self.navigation_timeout);
        let (pages, failed) = checkpoint::reopen_tabs(
            &self.browser,
            &calls,
            &checkpoint.tabs,
            contexts,
            navigation,
        )
        .await;
        let ids: Vec<String> = pages
            .iter()
            .map(|p| p.target_id().as_ref().to_owned())
            .collect();
        if defer {
            let later =
                pages
                    .into_iter()
                    .zip(&checkpoint.tabs)
                    .map(|(page, tab)| later::LaterLoad {
                        page,
                        url: tab.url.clone(),
                        state: tab.page.clone(),
                    });
            self.leave_loads(usage, later.collect());
        }
        let own = self.page.target_id().as_ref().to_owned();
        let tabs: Vec<String> = std::iter::once(own).chain(ids).collect();
        let pairs = checkpoint.targets.iter().cloned().zip(tabs.iter().cloned());
        usage.restored(endpoint, pairs.collect());
        // The task's page holds the checkpoint's own page state; each reopened tab its own.
        let states = std::iter::once(&checkpoint.page)
            .chain(checkpoint.tabs.iter().map(|t| &t.page))
            .zip(&tabs)
            .filter_map(|(state, tab)| {
                let script = checkpoint::page_state_expression(state.as_deref()?);
                Some((tab.clone(), Arc::new(script)))
            });
        usage.page_states(endpoint, states.collect());
        usage.tabs_ready(endpoint, tabs);
        failed
    }
}

/// What a capture of this browser reads through.
#[derive(Clone)]
struct Capturing {
    browser: Arc<Browser>,
    page: Page,
    calls: crate::relay::Calls,
    parts: Arc<PartCache>,
    tracking: Arc<Tracking>,
    warm: Arc<WarmUp>,
    usage: Option<Arc<Usage>>,
    tabs: Arc<Tabs>,
    endpoint: Option<String>,
}

impl Capturing {
    /// The task's page; with a foreign client, every tab it uses.
    async fn capture(&self, options: CaptureOptions) -> Result<Checkpoint, Error> {
        let read = async {
            let Some(usage) = &self.usage else {
                return checkpoint::capture(
                    &self.page,
                    &self.calls,
                    &self.parts,
                    &self.tracking,
                    options,
                )
                .await;
            };
            // A page whose load a carried client has not done yet stands on its restore
            // document: capturing it now would keep that as its URL.
            let _ = tokio::time::timeout(SETTLE_LIMIT, usage.loads().settled()).await;
            let at = checkpoint::Browsing {
                browser: &self.browser,
                own: &self.page,
                own_tracking: &self.tracking,
                tabs: &self.tabs,
                calls: &self.calls,
                cache: &self.parts,
                usage,
                endpoint: self.endpoint.as_deref(),
            };
            checkpoint::capture_tabs(at, options).await
        };
        let (checkpoint, ()) = futures::join!(read, self.warm.arm(&self.page, &self.calls, false));
        checkpoint
    }
}
