//! The `outlive` command's library: everything the binary does, as functions.
//!
//! # Layout
//!
//! * [`cli`] — the command line: [`Cli`](cli::Cli), its subcommands and flags.
//! * [`cmd`] — `outlive run -- CMD` and `outlive serve`: any program, any language.
//! * [`demo`] — `outlive demo`: the Aurora Bank task through outlive on an embedded gateway.
//! * [`worker`] — `outlive worker`: an [`outlive_jobs::Worker`] for the tasks declared on
//!   the command line and the bank task, on a provider or an embedded gateway. Durable runs
//!   themselves (the queue, the store, the lease, the session limit) are the `outlive-jobs`
//!   crate.
//! * [`metrics`] — `--metrics ADDR`: `/metrics` for `run`, `serve` and `worker`; [`ui`] —
//!   the runs page, at `/` there and under `outlive ui`; [`http`] — the listener of both.
//! * [`traces`] — OpenTelemetry: outlive's spans to an OTLP collector, when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//! * [`error`] — the one [`Error`] type.
//!
//! The demo's and the worker's test bed (Aurora Bank, a gateway, the bank task) is the
//! `outlive-bed` crate. The lab (`bench`, `soak`, `probe`) is the `outlive-lab` crate.
#![forbid(unsafe_code)]

pub mod cli;
pub mod cmd;
pub mod demo;
pub mod error;
pub mod http;
pub mod metrics;
mod sync;
pub mod traces;
pub mod ui;
pub mod worker;

pub use error::{Error, ErrorKind};
