//! The test bed the demo and the lab share: Aurora Bank, a gateway whose sessions die on
//! schedule, and a Solari client for it — everything on 127.0.0.1.

use std::sync::Mutex;
use std::time::Duration;

use futures::TryFutureExt;
use outlive::solari_browser::{Client, ClientOptions};
use outlive::{BoxFuture, CdpEndpoint, LocalChromium, Provider, Session, Solari};

use crate::bank::BankTask;
use crate::error::{Error, ErrorKind};

/// A running Aurora Bank and gateway, and a client for the gateway. Dropping it stops both;
/// [`TestBed::shutdown`] stops them and reports what the gateway left behind.
pub struct TestBed {
    bank: aurora::Aurora,
    bank_config: aurora::Config,
    gateway: gateway::Gateway,
    client: Client,
}

impl TestBed {
    /// Starts Aurora Bank with its default config and a gateway with `gateway`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Bank`], [`ErrorKind::Gateway`] or [`ErrorKind::Client`]; whatever was
    /// already started is stopped.
    pub async fn start(gateway: gateway::Config) -> Result<TestBed, Error> {
        let bank_config = aurora::Config::new();
        let bank = aurora::spawn(bank_config.clone())
            .await
            .map_err(|e| Error::with(ErrorKind::Bank, e))?;
        let gateway = gateway::spawn(gateway)
            .await
            .map_err(|e| Error::with(ErrorKind::Gateway, e))?;
        let client = Client::new(ClientOptions::new(gateway.api_key(), gateway.base_url()))
            .map_err(|e| Error::with(ErrorKind::Client, e.to_string()))?;
        Ok(TestBed {
            bank,
            bank_config,
            gateway,
            client,
        })
    }

    /// The bank.
    pub fn bank(&self) -> &aurora::Aurora {
        &self.bank
    }

    /// The gateway.
    pub fn gateway(&self) -> &gateway::Gateway {
        &self.gateway
    }

    /// A Solari client for the gateway.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// outlive's Solari provider on the gateway.
    pub fn provider(&self) -> Solari {
        Solari::new(self.client.clone())
    }

    /// The bank task against this bank: `polls` polls, one every `every`.
    pub fn task(&self, polls: u32, every: Duration) -> BankTask {
        BankTask::new(self.bank.base_url(), &self.bank_config, polls, every)
    }

    /// Stops the gateway, then the bank; returns the gateway's last status (sessions and
    /// Chromium processes left).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Gateway`] if the gateway did not stop cleanly.
    pub async fn shutdown(self) -> Result<gateway::Status, Error> {
        let status = self
            .gateway
            .shutdown()
            .await
            .map_err(|e| Error::with(ErrorKind::Gateway, e))?;
        let _ = self.bank.shutdown().await;
        Ok(status)
    }
}

/// A provider that remembers the CDP endpoint of every session it launched: the lab kills
/// the newest session through the gateway by its id, tests search logs for the endpoints'
/// tokens.
pub struct Recording<P> {
    inner: P,
    endpoints: Mutex<Vec<CdpEndpoint>>,
}

impl<P: Provider> Recording<P> {
    /// Wraps `inner`.
    pub fn new(inner: P) -> Self {
        Recording {
            inner,
            endpoints: Mutex::default(),
        }
    }

    /// Every launched session's endpoint, oldest first.
    pub fn endpoints(&self) -> Vec<CdpEndpoint> {
        self.endpoints.lock().expect("endpoints").clone()
    }

    /// The gateway's id of the newest session (see [`session_id`]).
    pub fn newest_session_id(&self) -> Option<String> {
        let endpoints = self.endpoints.lock().expect("endpoints");
        endpoints.last().and_then(session_id).map(str::to_owned)
    }
}

impl<P: Provider> Provider for Recording<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(self.inner.launch().inspect_ok(|session| {
            let endpoint = session.endpoint().clone();
            self.endpoints.lock().expect("endpoints").push(endpoint);
        }))
    }
}

/// The gateway's id of the session behind a CDP endpoint (`ws://…/cdp/{id}?token=…`).
pub fn session_id(endpoint: &outlive::CdpEndpoint) -> Option<&str> {
    endpoint
        .expose()
        .split("/cdp/")
        .nth(1)
        .and_then(|rest| rest.split('?').next())
}

/// `LocalChromium`, remembering the pid of each browser it starts, so a death can be dealt
/// by signal.
pub struct LocalPids {
    chromium: LocalChromium,
    pids: Mutex<Vec<u32>>,
}

impl LocalPids {
    /// Local Chromium as `LocalChromium::new()` finds it.
    pub fn new() -> Self {
        LocalPids {
            chromium: LocalChromium::new(),
            pids: Mutex::default(),
        }
    }

    /// The pid of every browser started so far, oldest first.
    pub fn pids(&self) -> Vec<u32> {
        self.pids.lock().expect("pids").clone()
    }

    /// Sends `signal` to the newest browser.
    pub fn signal_newest(&self, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.pids().last() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), signal);
        }
    }
}

impl Default for LocalPids {
    fn default() -> Self {
        Self::new()
    }
}

impl Provider for LocalPids {
    fn name(&self) -> &str {
        "local"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let browser = self.chromium.start().await?;
            self.pids.lock().expect("pids").push(browser.pid());
            Ok(Box::new(browser) as Box<dyn Session>)
        })
    }
}
