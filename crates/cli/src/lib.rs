//! The `outlive` command's library: everything the binary does, as functions.
//!
//! # Layout
//!
//! The product:
//!
//! * [`cli`] — the command line: [`Cli`](cli::Cli), its subcommands and flags.
//! * [`cmd`] — `outlive run -- CMD` and `outlive serve`: any program, any language.
//! * [`bank`] — the Aurora Bank task (sign in with TOTP, checkpoint, poll), re-entry safe;
//!   used by the demo, the lab and the end-to-end tests.
//! * [`bed`] — the [`TestBed`](bed::TestBed): Aurora Bank, a gateway and a Solari client,
//!   shared by the demo and the lab (the `outlive-lab` crate).
//! * [`demo`] — `outlive demo`: the task through outlive on an embedded gateway.
//! * [`setup`] — finding (or installing) Chromium for the demo.
//! * [`worker`] — `outlive worker`: an [`outlive_jobs::Worker`] for the tasks declared on
//!   the command line and the bank task, on a provider or an embedded gateway. Durable runs
//!   themselves (the queue, the store, the lease, the session limit) are the `outlive-jobs`
//!   crate.
//! * [`error`] — the one [`Error`] type.
//!
//! The lab (`bench`, `soak`, `probe`) is the `outlive-lab` crate, built on this one.
#![forbid(unsafe_code)]

pub mod bank;
pub mod bed;
pub mod cli;
pub mod cmd;
pub mod demo;
pub mod error;
pub mod setup;
pub mod worker;

pub use error::{Error, ErrorKind};
