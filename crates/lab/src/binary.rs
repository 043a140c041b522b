//! The product's `outlive` binary, which the lab starts as its `serve` and its workers: the
//! lab measures the command as shipped, and does not link it.

use std::path::PathBuf;

use crate::error::{Error, ErrorKind};

/// The variable that names the `outlive` binary to start, instead of the one next to the
/// lab's own executable.
pub const OUTLIVE_BIN: &str = "OUTLIVE_BIN";

/// The `outlive` binary: `$OUTLIVE_BIN`, else `outlive` next to this executable (cargo puts
/// both in `target/PROFILE/`).
///
/// # Errors
///
/// [`ErrorKind::Bench`] when there is none, saying how to build it.
pub fn outlive_binary() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os(OUTLIVE_BIN) {
        return Ok(path.into());
    }
    let me = std::env::current_exe().map_err(|e| Error::with(ErrorKind::Bench, e))?;
    let path = me.with_file_name("outlive");
    if path.is_file() {
        return Ok(path);
    }
    Err(Error::with(
        ErrorKind::Bench,
        format!(
            "no `outlive` binary at {}: build it with `cargo build -p outlive-cli` (with \
             `--release` for a release lab), or name one in ${OUTLIVE_BIN}",
            path.display()
        ),
    ))
}
