//! The lab: measurements of outlive, kept apart from the product surface. Each runs on the
//! shared [`TestBed`](crate::bed::TestBed) and reports [`Error`].
//!
//! * [`bench`](mod@bench) — `outlive bench`: the survival benchmark and micro-measurements;
//!   `--silence-only`: a silent death under a waiting call in library mode, `serve` and `run`.
//! * [`soak`](mod@soak) — `outlive soak`: many runs with random deaths, then a measured leak
//!   audit; [`serve_soak`] — `outlive soak --serve-for`: `serve` for hours, sampled.
//! * [`foreign`] — `outlive bench --foreign-only`: a Playwright script straight to a session
//!   against the same script under `outlive run`.
//! * [`relay_bench`] — `outlive bench --relay-only`: screenshots through the library's relay
//!   against the same client straight to a session.
//! * [`timeline`] — the SVG timeline of benchmark runs.

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, ErrorKind};

pub mod bench;
pub mod foreign;
pub mod relay_bench;
pub mod serve_soak;
pub mod soak;
pub mod timeline;

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
