//! The runs page: `/` lists runs, `/runs/{id}` draws one run's timeline as server-side SVG.
//! A [`RunSource`] says where runs come from: [`DurableRuns`] (PostgreSQL, for `outlive ui`
//! and a worker) or [`RecentRuns`] (this process's runs, for `run` and `serve`). No script,
//! no external asset; a page refreshes itself while its run goes on.

mod render;
mod timeline;

use std::sync::{Arc, Mutex};

use outlive::BoxFuture;
use outlive::history::{Event, Step};
use outlive_jobs::PgStore;
use tokio::sync::OnceCell;

use crate::error::Error;

pub(crate) use render::{list as render_list, run as render_run};

/// A run as the page shows it.
#[derive(Debug, Clone)]
pub struct RunView {
    /// Its id in the page's address.
    pub id: String,
    /// The task's name (durable runs).
    pub task: Option<String>,
    /// `queued`, `running`, `completed`, …
    pub status: String,
    /// Whether it is over: its page stops refreshing.
    pub over: bool,
    /// The worker that took it last (durable runs).
    pub worker: Option<String>,
    /// Its events, oldest first (none in a list of durable runs: [`RunView::totals`] has
    /// what they add up to).
    pub events: Vec<ViewEvent>,
    /// Whether events after `events` were left out (a page reads so many at most).
    pub left_out: bool,
    /// What all its events add up to, when `events` are not all of them (durable runs).
    pub totals: Option<Totals>,
}

impl RunView {
    /// What all its events add up to: [`RunView::totals`]'s, else counted in `events`.
    pub fn totals(&self) -> Totals {
        self.totals.unwrap_or_else(|| Totals::of(&self.events))
    }
}

/// What a run's events add up to, as the pages show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// The highest attempt entered (0: none yet).
    pub attempts: u32,
    /// Browser sessions launched.
    pub sessions: usize,
    /// When its first event happened, in milliseconds since the Unix epoch.
    pub first_ms: Option<i64>,
    /// When its last event happened.
    pub last_ms: Option<i64>,
}

impl Totals {
    /// Counted in `events` (oldest first).
    pub fn of(events: &[ViewEvent]) -> Totals {
        let attempts = events
            .iter()
            .filter_map(|e| match e.step {
                Step::Entered { attempt, .. } => Some(attempt),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let sessions = events
            .iter()
            .filter(|e| matches!(e.step, Step::Launched { .. }))
            .count();
        Totals {
            attempts,
            sessions,
            first_ms: events.first().map(|e| e.at_ms),
            last_ms: events.last().map(|e| e.at_ms),
        }
    }

    fn of_durable(run: &outlive_jobs::RunSummary) -> Totals {
        Totals {
            attempts: u32::try_from(run.attempts).unwrap_or(0),
            sessions: usize::try_from(run.sessions).unwrap_or(0),
            first_ms: run.first_at_ms,
            last_ms: run.last_at_ms,
        }
    }
}

/// One event of a [`RunView`].
#[derive(Debug, Clone)]
pub struct ViewEvent {
    /// Its order.
    pub seq: i64,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The pickup it happened under (durable runs).
    pub pickup: Option<i32>,
    /// The worker it happened in (durable runs).
    pub worker: Option<String>,
    /// What happened.
    pub step: Step,
}

/// Where the page's runs come from.
pub trait RunSource: Send + Sync {
    /// Every run, newest last.
    fn list(&self) -> BoxFuture<'_, Result<Vec<RunView>, Error>>;
    /// The run `id`, if there is one.
    fn one<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunView>, Error>>;
}

const _OBJECT_SAFE: Option<&dyn RunSource> = None;

/// A step's fields as `name=value` pairs, for a line of text.
pub fn detail_text(step: &Step) -> String {
    match step.detail() {
        serde_json::Value::Object(fields) => fields
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Durable runs, read from PostgreSQL (connected at the first request).
pub struct DurableRuns {
    url: String,
    store: OnceCell<PgStore>,
}

impl DurableRuns {
    /// Runs in the database at `url`, connected when first asked for.
    pub fn new(url: String) -> DurableRuns {
        DurableRuns {
            url,
            store: OnceCell::new(),
        }
    }

    /// Runs in `store`.
    pub fn with_store(store: PgStore) -> DurableRuns {
        DurableRuns {
            url: String::new(),
            store: OnceCell::new_with(Some(store)),
        }
    }

    async fn store(&self) -> Result<&PgStore, Error> {
        let store = self
            .store
            .get_or_try_init(|| PgStore::connect(&self.url))
            .await?;
        Ok(store)
    }
}

/// `run` with `events` (oldest first), more of them left out or not.
fn durable_view(run: outlive_jobs::RunSummary, events: Vec<ViewEvent>, left_out: bool) -> RunView {
    RunView {
        over: run.status.is_over(),
        status: run.status.to_string(),
        totals: Some(Totals::of_durable(&run)),
        id: run.run_id,
        task: Some(run.task),
        worker: run.worker,
        events,
        left_out,
    }
}

fn durable_event(e: outlive_jobs::RunEvent) -> ViewEvent {
    ViewEvent {
        seq: e.seq,
        at_ms: e.at_ms,
        pickup: e.pickup,
        worker: e.worker,
        step: e.step,
    }
}

/// Runs listed at most (the newest), and events read at most for a run's page (its first).
const LISTED: u32 = 50;
const SHOWN_EVENTS: u32 = 2000;

impl RunSource for DurableRuns {
    fn list(&self) -> BoxFuture<'_, Result<Vec<RunView>, Error>> {
        Box::pin(async move {
            let runs = outlive_jobs::recent_runs(self.store().await?, LISTED).await?;
            // Newest last, as every source lists them.
            let views = runs
                .into_iter()
                .rev()
                .map(|r| durable_view(r, Vec::new(), false));
            Ok(views.collect())
        })
    }

    fn one<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunView>, Error>> {
        Box::pin(async move {
            let store = self.store().await?;
            let Some(run) = outlive_jobs::run_summary(store, id).await? else {
                return Ok(None);
            };
            let (events, left_out) = outlive_jobs::history_first(store, id, SHOWN_EVENTS).await?;
            let events = events.into_iter().map(durable_event).collect();
            Ok(Some(durable_view(run, events, left_out)))
        })
    }
}

/// This process's runs (`run`, `serve`), in memory: the newest few, each with its newest
/// events.
#[derive(Clone, Default)]
pub struct RecentRuns {
    runs: Arc<Mutex<Vec<RunView>>>,
}

/// Runs kept, and events kept per run (the oldest go first).
const KEPT_RUNS: usize = 20;
const KEPT_EVENTS: usize = 5000;

impl RecentRuns {
    /// A store with no runs.
    pub fn new() -> RecentRuns {
        RecentRuns::default()
    }

    /// A new run, `running`; its id is its number in this process (1, 2, …).
    pub fn start(&self) -> RecentRun {
        let mut runs = crate::sync::lock(&self.runs);
        let id = runs
            .last()
            .and_then(|r| r.id.parse::<u64>().ok())
            .map_or(1, |n| n + 1)
            .to_string();
        if runs.len() >= KEPT_RUNS {
            runs.remove(0);
        }
        runs.push(RunView {
            id: id.clone(),
            task: None,
            status: "running".to_owned(),
            over: false,
            worker: None,
            events: Vec::new(),
            left_out: false,
            totals: None,
        });
        RecentRun {
            runs: self.clone(),
            id,
        }
    }

    fn with_run(&self, id: &str, f: impl FnOnce(&mut RunView)) {
        let mut runs = crate::sync::lock(&self.runs);
        if let Some(run) = runs.iter_mut().find(|r| r.id == id) {
            f(run);
        }
    }
}

impl RunSource for RecentRuns {
    fn list(&self) -> BoxFuture<'_, Result<Vec<RunView>, Error>> {
        let runs = crate::sync::lock(&self.runs).clone();
        Box::pin(async move { Ok(runs) })
    }

    fn one<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunView>, Error>> {
        let run = crate::sync::lock(&self.runs)
            .iter()
            .find(|r| r.id == id)
            .cloned();
        Box::pin(async move { Ok(run) })
    }
}

/// One run of a [`RecentRuns`]: what records its events.
#[derive(Clone)]
pub struct RecentRun {
    runs: RecentRuns,
    id: String,
}

impl RecentRun {
    /// Adds `event` to the run's history.
    pub fn record(&self, event: Event) {
        self.runs.with_run(&self.id, |run| {
            if run.events.len() >= KEPT_EVENTS {
                run.events.remove(0);
            }
            let seq = run.events.last().map_or(1, |e| e.seq + 1);
            run.events.push(ViewEvent {
                seq,
                at_ms: event.at_ms,
                pickup: None,
                worker: None,
                step: event.step,
            });
        });
    }

    /// The run ended, as its wide event says.
    pub fn finish(&self, event: &outlive::WideEvent) {
        self.record(Event::now(Step::finished(event)));
        self.runs.with_run(&self.id, |run| {
            run.status = event.outcome.as_str().to_owned();
            run.over = true;
        });
    }

    /// `options` also recording this run's milestones (after their own `on_milestone`).
    pub fn observe(&self, options: outlive::Options) -> outlive::Options {
        let run = self.clone();
        options.also_on_milestone(outlive::history::recorder(move |e| run.record(e)))
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    Event::now(Step::Pickup).at_ms
}
