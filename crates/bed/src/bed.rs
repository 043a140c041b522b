//! The test bed the demo and the lab share: Aurora Bank, a gateway whose sessions die on
//! schedule, and a Solari client for it — everything on 127.0.0.1.

use std::sync::Mutex;
use std::time::Duration;

use futures::TryFutureExt;
use outlive::solari_browser::{Client, ClientOptions};
use outlive::{BoxFuture, CdpEndpoint, Provider, Session, Solari};

use crate::bank::BankTask;
use crate::error::{Error, ErrorKind};
use crate::sync::lock;

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

/// A gateway configuration whose sessions die `lifetime ± jitter` after creation, the way
/// `death` says.
pub fn dying(lifetime: Duration, jitter: Duration, death: gateway::DeathMode) -> gateway::Config {
    gateway::Config::new()
        .lifetime(lifetime)
        .jitter(jitter)
        .death(death)
}

/// A gateway configuration whose sessions live long enough that only a kill ends them
/// (600 s, no jitter), with `rtt` added to every CDP message.
pub fn until_killed(rtt: Duration) -> gateway::Config {
    gateway::Config::new()
        .lifetime(Duration::from_secs(600))
        .jitter(Duration::ZERO)
        .rtt(rtt)
}

/// A provider that remembers the CDP endpoint and the pid (see [`Session::pid`]) of every
/// session it launched. The lab kills the newest session through the gateway by its id, or
/// a local one by signal. Tests search logs for the endpoints' tokens.
pub struct Recording<P> {
    inner: P,
    launched: Mutex<Vec<(CdpEndpoint, Option<u32>)>>,
}

impl<P: Provider> Recording<P> {
    /// Wraps `inner`.
    pub fn new(inner: P) -> Self {
        Recording {
            inner,
            launched: Mutex::default(),
        }
    }

    /// Every launched session's endpoint, oldest first.
    pub fn endpoints(&self) -> Vec<CdpEndpoint> {
        let launched = lock(&self.launched);
        launched
            .iter()
            .map(|(endpoint, _)| endpoint.clone())
            .collect()
    }

    /// The pid of every launched browser that runs on this machine, oldest first.
    pub fn pids(&self) -> Vec<u32> {
        let launched = lock(&self.launched);
        launched.iter().filter_map(|(_, pid)| *pid).collect()
    }

    /// The gateway's id of the newest session (see [`session_id`]).
    pub fn newest_session_id(&self) -> Option<String> {
        let launched = lock(&self.launched);
        launched
            .last()
            .and_then(|(endpoint, _)| session_id(endpoint))
            .map(str::to_owned)
    }

    /// Sends `signal` to every browser on this machine that is still running, but the
    /// newest: with a standby up, the task's browser (and an old standby, if one is kept).
    pub fn signal_all_but_newest(&self, signal: nix::sys::signal::Signal) {
        let launched = lock(&self.launched);
        let older = launched.len().saturating_sub(1);
        let me = std::process::id() as i32;
        for pid in launched[..older].iter().filter_map(|l| l.1) {
            // Only ones still up and still this process's children: a released browser's pid
            // was reaped by its provider and may belong to someone else by now.
            let ours = procfs::process::Process::new(pid as i32)
                .and_then(|p| p.stat())
                .is_ok_and(|stat| stat.ppid == me);
            if ours {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
            }
        }
    }

    /// Sends `signal` to the newest browser, if it runs on this machine.
    pub fn signal_newest(&self, signal: nix::sys::signal::Signal) {
        let newest = lock(&self.launched).last().map(|l| l.1);
        if let Some(Some(pid)) = newest {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    }
}

impl<P: Provider> Provider for Recording<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(self.inner.launch().inspect_ok(|session| {
            let launched = (session.endpoint().clone(), session.pid());
            lock(&self.launched).push(launched);
        }))
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), outlive::Error>> {
        self.inner.release_id(id)
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
