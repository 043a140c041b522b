//! Durable runs as jobs on [apalis](https://docs.rs/apalis) with its PostgreSQL storage. Any
//! number of workers, on one machine or many, take runs from one queue. A run whose worker
//! dies (kill -9, a lost machine) is taken by another once the dead worker's heartbeats lapse.
//! It resumes from its newest checkpoint, sealed in [`PgStore`].
//!
//! # Layout
//!
//! * `task` — [`Tasks`]: tasks by name, Rust functions with a serde input type
//!   ([`Tasks::register`]) or commands ([`Tasks::command`], parsed by [`parse_task`]) run
//!   as `outlive run -- CMD` runs them (`command`); `finish` — how a run of one ends.
//! * `queue` — [`submit`] enqueues a run, [`cancel`] stops it; `runs` — [`runs()`] lists them;
//!   `history` — [`history()`]: a run's events (deaths, checkpoints, takeovers, …), and
//!   [`recent_runs`]: the newest runs with what their events add up to.
//! * `worker` — [`Worker`]: takes runs from the queue, runs them through outlive, durable;
//!   `metrics` — [`WorkerMetrics`]: its runs by state and outcome, its queue wait.
//! * `lease` — exactly one worker per run: the lease, the self-stop before a takeover, and
//!   [`FencedStore`]; `held` — the sessions a pickup launched, released by its successor.
//! * `slots` — [`SessionLimit`]: at most N browser sessions across every worker, through
//!   PostgreSQL advisory locks (a dead worker's locks go with its connections).
//! * `schema` — [`setup`] and the tables, [`check_setup`] (creating nothing); `store` —
//!   [`PgStore`], the sealed checkpoints.
//! * `trace` — a run's trace across its pickups: the first stores its span's context in the
//!   run's row, a takeover continues it.
//!
//! Tables: apalis keeps its queue in the `apalis` schema (`apalis.jobs`, `apalis.workers`).
//! This crate adds four. `outlive_runs` has one row per run: task, status, worker pickups,
//! lease, result or error, the last wide event, the trace context. `outlive_run_events` holds
//! each run's history. `outlive_tasks` lists every task name a worker declared: what
//! [`submit`] accepts besides its own [`Tasks`]. `outlive_checkpoints` is [`PgStore`]'s.

mod command;
mod error;
mod finish;
mod held;
mod history;
mod lease;
mod metrics;
mod queue;
mod runs;
mod schema;
mod slots;
mod store;
mod sync;
mod task;
mod trace;
mod worker;

pub use command::{MAX_INPUT_BYTES, parse_task};
pub use error::{Error, ErrorKind};
pub use history::{RunEvent, RunSummary, history, history_first, recent_runs, run_summary};
pub use lease::FencedStore;
pub use metrics::WorkerMetrics;
pub use queue::{Cancelled, QUEUE, RunJob, cancel, submit};
pub use runs::{Pickup, RunRow, RunStatus, runs};
pub use schema::{check_setup, setup};
pub use slots::{LISTENER_APPLICATION, SLOT_APPLICATION, SessionLimit};
pub use store::{PgStore, Saved};
pub use task::Tasks;
pub use worker::{Worker, WorkerConfig};
