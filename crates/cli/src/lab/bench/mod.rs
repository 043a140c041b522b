//! `outlive bench`: the survival benchmark (baseline against outlive, side by side) and the
//! micro-measurements (checkpoint cost against RTT, death-detection latency, replace time).
//!
//! Everything runs on 127.0.0.1: an embedded gateway whose sessions die on schedule and an
//! embedded Aurora Bank. Raw data is returned as serialisable records; the binary writes
//! them under `docs/measurements/`.
//!
//! * [`records`] — the serialisable settings, runs and reports;
//! * `survival` — the two arms and [`survival()`];
//! * `micro` — checkpoint cost, detection latency and page recovery: [`micro()`];
//! * `summary` — [`summary()`], [`micro_summary()`] and [`timeline_runs()`].

mod micro;
pub mod records;
mod summary;
mod survival;

pub use micro::micro;
pub use records::*;
pub use summary::{micro_summary, summary, timeline_runs};
pub use survival::survival;
