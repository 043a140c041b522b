//! The `outlive` command's library: everything the binary does, as functions.
//!
//! # Layout
//!
//! * [`bank`] — the Aurora Bank task (sign in with TOTP, checkpoint, poll), re-entry safe;
//!   used by the demo, the benchmark and the end-to-end tests.
//! * [`demo`] — `outlive demo`: the task through outlive on an embedded gateway.
//! * [`setup`] — finding (or installing) Chromium for the demo.
//! * [`bench`](mod@bench) — `outlive bench`: the survival benchmark and micro-measurements.
//! * [`soak`] — `outlive soak`: many runs with random deaths, then a measured leak audit.
//! * [`timeline`] — the SVG timeline of benchmark runs.
//! * [`probe`] — `outlive probe`: how long a provider's sessions really live.
#![forbid(unsafe_code)]

pub mod bank;
pub mod bench;
pub mod demo;
pub mod probe;
pub mod setup;
pub mod soak;
pub mod timeline;
