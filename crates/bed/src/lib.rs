//! The test bed outlive's demo, lab and end-to-end tests share: Aurora Bank, a gateway whose
//! sessions die on schedule, a Solari client for it, and the Aurora Bank task.
//!
//! # Layout
//!
//! * [`bed`] — the [`TestBed`](bed::TestBed): Aurora Bank, a gateway and a Solari client,
//!   all on 127.0.0.1; gateway configurations; a provider that records its launches.
//! * [`bank`] — the Aurora Bank task (sign in with TOTP, checkpoint, poll), re-entry safe,
//!   and the `bank` task of durable runs.
//! * [`setup`] — finding (or installing) Chromium.
//! * [`error`] — the one [`Error`] type.
#![forbid(unsafe_code)]

pub mod bank;
pub mod bed;
pub mod error;
pub mod setup;
mod sync;

pub use error::{Error, ErrorKind};
