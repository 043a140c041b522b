//! The lab: measurements of outlive, kept apart from the product surface. Each runs on the
//! shared [`TestBed`](crate::bed::TestBed) and reports [`Error`](crate::Error).
//!
//! * [`bench`](mod@bench) — `outlive bench`: the survival benchmark and micro-measurements.
//! * [`soak`](mod@soak) — `outlive soak`: many runs with random deaths, then a measured leak
//!   audit.
//! * [`timeline`] — the SVG timeline of benchmark runs.

pub mod bench;
pub mod soak;
pub mod timeline;
