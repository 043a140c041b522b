//! The lab: measurements of outlive, kept apart from the product (`outlive-lab`, never
//! published). Each runs on the shared [`TestBed`](outlive_bed::bed::TestBed) and reports its
//! [`Error`]. Where a measurement needs the `outlive` command (`serve`, `worker`), it starts
//! the product's binary ([`binary`]).
//!
//! # Layout
//!
//! * [`cmd`] — the `outlive-lab` commands' arguments: `bench`, `soak`, `probe` and `weather`.
//! * [`bench`](mod@bench) — `bench`: the survival benchmark and micro-measurements;
//!   `--silence-only`: a silent death under a waiting call in library mode, `serve` and `run`.
//! * [`soak`](mod@soak) — `soak`: many runs with random deaths, then a leak audit;
//!   [`serve_soak`] — `soak --serve-for`: `outlive serve` for hours, sampled.
//! * [`weather_bench`] — `weather`: false deaths under network weather, and detection
//!   latency per death kind, a build before against this one.
//! * [`served`] — `outlive serve` as a child (this build's or another's) and the agent that
//!   works through it, for the serve soak and the weather bench.
//! * [`binary`] — finding the `outlive` binary to start.
//! * [`foreign`] — `bench --foreign-only`: a Playwright script with and without outlive.
//! * [`relay_bench`] — `bench --relay-only`: screenshots with and without the relay.
//! * [`tabs_bench`] — `bench --tabs-only`: a checkpoint of three tabs against one tab's.
//! * [`probe`] — `probe`: how long a provider's sessions really live.
//! * [`timeline`] — the SVG timeline of benchmark runs; [`stats`] — medians, percentiles.
//! * [`error`] — the one [`Error`] type.
#![forbid(unsafe_code)]

use std::path::Path;

use serde::Serialize;

pub mod bench;
pub mod binary;
pub mod cmd;
pub mod error;
pub mod foreign;
pub mod probe;
pub mod relay_bench;
pub mod serve_soak;
pub mod served;
pub mod soak;
pub mod stats;
mod sync;
pub mod tabs_bench;
pub mod timeline;
pub mod weather_bench;

pub use error::{Error, ErrorKind};

/// Writes `value` as pretty JSON to `name` under `out`; see [`write_text`].
fn write_json(out: &Path, name: &str, value: &impl Serialize) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value).map_err(|e| write_failed(&out.join(name), e))?;
    write_text(out, name, &text)
}

/// Creates the output directory `out` if it is missing: before a measurement starts, so a
/// bad `--out` fails at once rather than after minutes of work.
fn create_out(out: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(out).map_err(|e| write_failed(out, e))
}

/// Writes `text` to `name` under `out` and says so on stdout.
fn write_text(out: &Path, name: &str, text: &str) -> Result<(), Error> {
    let path = out.join(name);
    std::fs::write(&path, text).map_err(|e| write_failed(&path, e))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn write_failed(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::with(
        ErrorKind::Write {
            path: path.to_owned(),
        },
        e,
    )
}
