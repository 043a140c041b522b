//! The `outlive` command's library: everything the binary does, as functions.
//!
//! # Layout
//!
//! * [`bank`] — the Aurora Bank task (sign in with TOTP, checkpoint, poll), re-entry safe;
//!   used by the demo, the benchmark and the end-to-end tests.
//! * [`demo`] — `outlive demo`: the task through outlive on an embedded gateway.
//! * [`bench`] — `outlive bench`: the survival benchmark and micro-measurements.
#![forbid(unsafe_code)]

pub mod bank;
pub mod bench;
pub mod demo;
pub mod probe;
pub mod timeline;
