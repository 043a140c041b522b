//! The session registry: one entry per session, one keeper task per live browser, and the
//! orderly shutdown of all of them.
//!
//! A session's [`Phase`] is published on a `watch` channel: the keeper moves it to `Dead` once
//! it has killed Chromium, a release moves it to `Released`, and the relay follows it. The
//! keeper also carries out the session's scheduled page fault, as part of its own future, so
//! that the fault ends with the session.
//!
//! `keeper` is that task, `idempotency` the keyed creates, `credential` ids and tokens.

mod credential;
mod idempotency;
mod keeper;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use crate::chaos::{Death, Fate, Overrides};
use crate::chromium::{Browser, Processes};
use crate::config::Config;
use crate::fault::Faults;
use crate::weather::Climate;
use credential::new_token;
pub(crate) use credential::{constant_time_eq, parse_session_id};
pub(crate) use idempotency::IdempotencyBegin;
use idempotency::Keyed;
use keeper::{Command, Schedule, keep, stop_keeper};

/// Released sessions remembered in full (for `GET` and the list); older ones are remembered
/// by id only, so that `DELETE` stays idempotent for every id this gateway issued.
const MAX_TOMBSTONES: usize = 256;
/// How long shutdown waits for session tasks before aborting them.
const TASK_DRAIN: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last Chromium process to disappear.
const PROCESS_DRAIN: Duration = Duration::from_secs(5);

/// A snapshot of the gateway's sessions and processes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Unreleased sessions whose browser is alive.
    pub live_sessions: usize,
    /// Unreleased sessions whose browser is dead (they still hold a concurrency slot). A
    /// session whose `DELETE` was faulted (see [`DeleteFault`](crate::DeleteFault)) is counted
    /// here: its browser was killed, but it was not released.
    pub dead_sessions: usize,
    /// Chromium processes (browser and helpers) this gateway started that are still alive:
    /// the members of each browser's process group. (Chromium's crashpad handler leaves the
    /// group with `setsid` and is not counted; it exits by itself with its browser.)
    pub chromium_processes: usize,
    /// Unreleased sessions whose CDP relay has a client connected right now.
    pub relay_clients: usize,
    /// The most sessions held at once since the gateway started: unreleased ones, live or
    /// dead, and creates in flight — what its concurrency limit counts.
    pub peak_sessions: usize,
    /// Weather stalls (of one connection or of the whole link) that held at least one of the
    /// browser's frames: proof that the [`Weather`](crate::Weather) met real traffic.
    pub stalls_hit: u64,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Live,
    Dead(Death),
    Released,
}

/// What the REST layer may know about a session (its token included: it builds the URLs).
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) id: Uuid,
    pub(crate) token: String,
    pub(crate) created: SystemTime,
    pub(crate) expires: SystemTime,
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) phase: Phase,
}

/// Why a create was refused.
#[derive(Debug)]
pub(crate) enum CreateError {
    Concurrency { max: usize },
    ShuttingDown,
    Launch(outlive::Error),
}

/// Why a kill was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KillError {
    Unknown,
    Ended,
}

/// Why a relay attach was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AttachError {
    Unknown,
    BadToken,
    Released,
    Busy,
    ShuttingDown,
}

/// What a relay needs about its session.
#[derive(Debug)]
pub(crate) struct Attachment {
    pub(crate) upstream: String,
    pub(crate) phase: watch::Receiver<Phase>,
}

struct Entry {
    token: String,
    created: SystemTime,
    expires: SystemTime,
    metadata: Option<Map<String, Value>>,
    upstream: String,
    phase: watch::Sender<Phase>,
    keeper: Option<mpsc::UnboundedSender<Command>>,
    /// CDP connections relayed now.
    relay_clients: usize,
}

impl Entry {
    fn snapshot(&self, id: Uuid) -> Snapshot {
        Snapshot {
            id,
            token: self.token.clone(),
            created: self.created,
            expires: self.expires,
            metadata: self.metadata.clone(),
            phase: *self.phase.borrow(),
        }
    }
}

#[derive(Default)]
struct Registry {
    sessions: HashMap<Uuid, Entry>,
    /// Creation order, for listing.
    order: Vec<Uuid>,
    /// Creates in flight; each holds a concurrency slot.
    creating: usize,
    /// The most slots held at once.
    peak: usize,
    /// Released sessions no longer kept in `sessions`.
    forgotten: HashSet<Uuid>,
    keyed: HashMap<String, Keyed>,
    keyed_order: VecDeque<String>,
    tasks: JoinSet<()>,
    closing: bool,
}

impl Registry {
    fn unreleased(&self) -> usize {
        self.sessions
            .values()
            .filter(|e| *e.phase.borrow() != Phase::Released)
            .count()
    }

    fn forget_old_tombstones(&mut self) {
        let released: Vec<Uuid> = self
            .order
            .iter()
            .copied()
            .filter(|id| {
                self.sessions
                    .get(id)
                    .is_some_and(|e| *e.phase.borrow() == Phase::Released)
            })
            .collect();
        if released.len() > MAX_TOMBSTONES {
            for id in &released[..released.len() - MAX_TOMBSTONES] {
                self.sessions.remove(id);
                self.forgotten.insert(*id);
            }
            self.order.retain(|id| self.sessions.contains_key(id));
        }
    }
}

/// State shared by the server, the REST handlers, the relays and the [`Gateway`](crate::Gateway)
/// handle.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) local_addr: SocketAddr,
    pub(crate) processes: Arc<Processes>,
    pub(crate) faults: Faults,
    /// The relay's network weather while the gateway runs.
    pub(crate) climate: Arc<Climate>,
    registry: Mutex<Registry>,
    panics: AtomicUsize,
    /// Sessions created so far (for [`DeathMode::Cycle`](crate::DeathMode::Cycle)).
    created: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn new(config: Config, local_addr: SocketAddr) -> Arc<Self> {
        Arc::new(Self {
            climate: Climate::new(config.weather),
            config,
            local_addr,
            processes: Arc::new(Processes::default()),
            faults: Faults::default(),
            registry: Mutex::new(Registry::default()),
            panics: AtomicUsize::new(0),
            created: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a panicked task (reported by shutdown).
    pub(crate) fn record_panic(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn panics(&self) -> usize {
        self.panics.load(Ordering::Relaxed)
    }

    /// Runs `task` as one of the session tasks shutdown waits for; refused (and dropped)
    /// once shutdown has begun.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) -> bool {
        let mut reg = self.registry();
        self.spawn_locked(&mut reg, task)
    }

    fn spawn_locked(
        &self,
        reg: &mut Registry,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> bool {
        if reg.closing {
            return false;
        }
        while let Some(done) = reg.tasks.try_join_next() {
            if matches!(done, Err(e) if e.is_panic()) {
                self.record_panic();
            }
        }
        reg.tasks.spawn(outlive::quietly(task));
        true
    }

    /// Counts sessions and processes.
    pub(crate) fn status(&self) -> Status {
        let (live, dead, clients, peak) = {
            let reg = self.registry();
            let (live, dead, clients) = reg.sessions.values().fold((0, 0, 0), |(l, d, c), e| {
                let attached = usize::from(e.relay_clients > 0);
                match *e.phase.borrow() {
                    Phase::Live => (l + 1, d, c + attached),
                    Phase::Dead(_) => (l, d + 1, c + attached),
                    Phase::Released => (l, d, c),
                }
            });
            (live, dead, clients, reg.peak)
        };
        Status {
            live_sessions: live,
            dead_sessions: dead,
            chromium_processes: self.processes.alive(),
            relay_clients: clients,
            peak_sessions: peak,
            stalls_hit: self.climate.stalls_hit(),
        }
    }

    /// Creates one session: a concurrency slot, a Chromium, and (unless dead on arrival) a
    /// keeper task that kills it at its death time.
    pub(crate) async fn create(
        self: &Arc<Self>,
        metadata: Option<Map<String, Value>>,
        overrides: Overrides,
        deadline: Option<Duration>,
    ) -> Result<Snapshot, CreateError> {
        let slot = self.reserve_slot()?;
        let serial = self
            .created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fate = Fate::draw(&self.config, overrides, deadline, serial);
        let browser = Browser::launch(&self.config.chromium, &self.processes)
            .await
            .map_err(CreateError::Launch)?;

        let id = Uuid::new_v4();
        let created = SystemTime::now();
        let started = Instant::now();
        let token = new_token();
        let upstream = browser.endpoint();
        let (phase_tx, _) = watch::channel(Phase::Live);

        let keeper = if fate.death == Death::OnArrival {
            // Created, and dead at once.
            phase_tx.send_replace(Phase::Dead(Death::OnArrival));
            browser.close().await;
            tracing::info!(session = %id, "session created dead on arrival");
            None
        } else {
            Some((browser, mpsc::unbounded_channel()))
        };

        let mut reg = self.registry();
        slot.consume(&mut reg);
        if reg.closing {
            drop(reg);
            return Err(CreateError::ShuttingDown); // the browser (if any) is killed on drop
        }
        let mut entry = Entry {
            token,
            created,
            expires: created + fate.nominal,
            metadata,
            upstream,
            phase: phase_tx,
            keeper: None,
            relay_clients: 0,
        };
        if let Some((browser, (cmd_tx, cmd_rx))) = keeper {
            let task = keep(
                self.clone(),
                id,
                browser,
                Schedule {
                    death_at: started + fate.after,
                    death: fate.death,
                    page_fault: fate
                        .page_fault
                        .map(|(fault, after)| (fault, started + after)),
                },
                cmd_rx,
            );
            self.spawn_locked(&mut reg, task);
            entry.keeper = Some(cmd_tx);
            tracing::info!(
                session = %id,
                death = ?fate.death,
                after_ms = fate.after.as_millis() as u64,
                page_fault = ?fate.page_fault,
                "session created"
            );
        }
        let snapshot = entry.snapshot(id);
        reg.sessions.insert(id, entry);
        reg.order.push(id);
        Ok(snapshot)
    }

    fn reserve_slot(self: &Arc<Self>) -> Result<Slot, CreateError> {
        let mut reg = self.registry();
        if reg.closing {
            return Err(CreateError::ShuttingDown);
        }
        let max = self.config.max_sessions;
        if reg.unreleased() + reg.creating >= max {
            return Err(CreateError::Concurrency { max });
        }
        reg.creating += 1;
        reg.peak = reg.peak.max(reg.unreleased() + reg.creating);
        Ok(Slot {
            shared: Some(self.clone()),
        })
    }

    /// One session, if it exists.
    pub(crate) fn get(&self, id: Uuid) -> Option<Snapshot> {
        self.registry().sessions.get(&id).map(|e| e.snapshot(id))
    }

    /// Whether this gateway issued `id` (released sessions included).
    pub(crate) fn issued(&self, id: Uuid) -> bool {
        let reg = self.registry();
        reg.sessions.contains_key(&id) || reg.forgotten.contains(&id)
    }

    /// Every remembered session, oldest first.
    pub(crate) fn list(&self) -> Vec<Snapshot> {
        let reg = self.registry();
        reg.order
            .iter()
            .filter_map(|id| reg.sessions.get(id).map(|e| e.snapshot(*id)))
            .collect()
    }

    /// Releases a session: kills its browser if alive and closes its relay connection.
    /// Releasing a released session is fine. Returns `false` for an unknown id.
    pub(crate) async fn release(&self, id: Uuid) -> bool {
        let keeper = {
            let mut reg = self.registry();
            let Some(entry) = reg.sessions.get_mut(&id) else {
                return reg.forgotten.contains(&id);
            };
            if *entry.phase.borrow() == Phase::Released {
                return true;
            }
            entry.phase.send_replace(Phase::Released);
            let keeper = entry.keeper.take();
            reg.forget_old_tombstones();
            keeper
        };
        tracing::info!(session = %id, "session released");
        if let Some(keeper) = keeper {
            stop_keeper(keeper).await;
        }
        true
    }

    /// Kills a live session's browser now, with `death` or (`None`) the one it was created
    /// with, and returns the death applied once Chromium is gone.
    pub(crate) async fn kill(&self, id: Uuid, death: Option<Death>) -> Result<Death, KillError> {
        let keeper = {
            let reg = self.registry();
            let entry = reg.sessions.get(&id).ok_or(KillError::Unknown)?;
            match (*entry.phase.borrow(), &entry.keeper) {
                (Phase::Live, Some(k)) => k.clone(),
                _ => return Err(KillError::Ended),
            }
        };
        let (done, finished) = oneshot::channel();
        keeper
            .send(Command::Kill { death, done })
            .map_err(|_| KillError::Ended)?;
        // A dropped answer means the keeper was already killing the browser for another reason.
        finished.await.map_err(|_| KillError::Ended)
    }

    /// A live session's browser endpoint, for a page fault, and its phase, to notice the
    /// session ending meanwhile.
    pub(crate) fn live_browser(
        &self,
        id: Uuid,
    ) -> Result<(String, watch::Receiver<Phase>), KillError> {
        let reg = self.registry();
        let entry = reg.sessions.get(&id).ok_or(KillError::Unknown)?;
        if *entry.phase.borrow() != Phase::Live || entry.keeper.is_none() {
            return Err(KillError::Ended);
        }
        Ok((entry.upstream.clone(), entry.phase.subscribe()))
    }

    /// Moves a live session to `Dead`, once its browser is gone.
    fn mark_dead(&self, id: Uuid, death: Death) {
        let reg = self.registry();
        if let Some(entry) = reg.sessions.get(&id) {
            if *entry.phase.borrow() == Phase::Live {
                entry.phase.send_replace(Phase::Dead(death));
            }
        }
    }

    /// Claims one of the session's relay connections.
    pub(crate) fn attach(&self, id: Uuid, token: Option<&str>) -> Result<Attachment, AttachError> {
        let mut reg = self.registry();
        if reg.closing {
            return Err(AttachError::ShuttingDown);
        }
        let entry = reg.sessions.get_mut(&id).ok_or(AttachError::Unknown)?;
        match token {
            Some(t) if constant_time_eq(t.as_bytes(), entry.token.as_bytes()) => {}
            _ => return Err(AttachError::BadToken),
        }
        if *entry.phase.borrow() == Phase::Released {
            return Err(AttachError::Released);
        }
        if entry.relay_clients >= self.config.connections_per_session {
            return Err(AttachError::Busy);
        }
        entry.relay_clients += 1;
        Ok(Attachment {
            upstream: entry.upstream.clone(),
            phase: entry.phase.subscribe(),
        })
    }

    /// Frees one of the session's relay connection slots.
    pub(crate) fn detach(&self, id: Uuid) {
        if let Some(entry) = self.registry().sessions.get_mut(&id) {
            entry.relay_clients = entry.relay_clients.saturating_sub(1);
        }
    }

    /// Stops everything: refuses new work, releases every session, waits for every session
    /// task, and returns once no Chromium process this gateway started is alive.
    pub(crate) async fn close(&self) {
        let (keepers, mut tasks) = {
            let mut reg = self.registry();
            reg.closing = true;
            let mut keepers = Vec::new();
            for entry in reg.sessions.values_mut() {
                entry.phase.send_replace(Phase::Released);
                keepers.extend(entry.keeper.take());
            }
            (keepers, std::mem::take(&mut reg.tasks))
        };
        futures::future::join_all(keepers.into_iter().map(stop_keeper)).await;

        let drained = tokio::time::timeout(TASK_DRAIN, async {
            while let Some(done) = tasks.join_next().await {
                if matches!(done, Err(e) if e.is_panic()) {
                    self.record_panic();
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = tasks.len(),
                "session tasks did not finish; aborting them"
            );
            tasks.shutdown().await;
        }

        let deadline = Instant::now() + PROCESS_DRAIN;
        loop {
            let alive = self.processes.alive();
            if alive == 0 {
                break;
            }
            if Instant::now() >= deadline {
                tracing::error!(alive, "chromium processes survived shutdown");
                break;
            }
            self.processes.kill_unreaped();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A held concurrency slot; dropping it unconsumed gives it back.
struct Slot {
    shared: Option<Arc<Shared>>,
}

impl Slot {
    /// Turns the slot into a session: the caller holds the registry lock.
    fn consume(mut self, reg: &mut Registry) {
        if self.shared.take().is_some() {
            reg.creating -= 1;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.registry().creating -= 1;
        }
    }
}
