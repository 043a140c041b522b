//! Making sure the machine can run the demo: a Chromium to launch.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{Error, ErrorKind};

/// What [`ensure_chromium`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChromiumSetup {
    /// Chromium was already there.
    Found(std::path::PathBuf),
    /// Chromium was installed with `apt-get`.
    Installed(std::path::PathBuf),
}

/// Finds Chromium the way [`outlive::LocalChromium`] does; if there is none and this is a
/// Debian-like machine where we are root, installs Debian's `chromium` package. It says so
/// in one line on stderr; apt's output goes to `outlive-apt.log` in the temp directory.
///
/// # Errors
///
/// [`ErrorKind::NoChromium`] if it cannot be installed here, [`ErrorKind::ChromiumInstall`]
/// if `apt-get` failed (the error names the log).
pub fn ensure_chromium() -> Result<ChromiumSetup, Error> {
    let log = std::env::temp_dir().join("outlive-apt.log");
    let announce = || {
        eprintln!(
            "Chromium not found: installing it with apt-get (log: {})…",
            log.display()
        );
    };
    ensure_chromium_with(&log, announce)
}

/// [`ensure_chromium`] with apt's log at `log`, `announce` called before apt starts.
///
/// # Errors
///
/// As [`ensure_chromium`].
pub fn ensure_chromium_with(log: &Path, announce: impl FnOnce()) -> Result<ChromiumSetup, Error> {
    let local = outlive::LocalChromium::new();
    if let Ok(path) = local.resolve_executable() {
        return Ok(ChromiumSetup::Found(path));
    }
    let root = nix::unistd::geteuid().is_root();
    if !root || !std::path::Path::new("/usr/bin/apt-get").exists() {
        return Err(Error::new(ErrorKind::NoChromium));
    }
    announce();
    let failed = |cause: String| Error::with(ErrorKind::ChromiumInstall, cause);
    let output = File::create(log)
        .map_err(|e| failed(format!("cannot write its log {}: {e}", log.display())))?;
    let run = |args: &[&str]| -> Result<(), Error> {
        let out = output.try_clone().map_err(|e| failed(e.to_string()))?;
        let err = output.try_clone().map_err(|e| failed(e.to_string()))?;
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| failed(e.to_string()))?;
        if status.success() {
            Ok(())
        } else {
            Err(failed(format!(
                "apt-get {status}; its output is in {}",
                log.display()
            )))
        }
    };
    run(&["update", "-qq"])?;
    run(&["install", "-y", "-qq", "chromium"])?;
    local
        .resolve_executable()
        .map(ChromiumSetup::Installed)
        .map_err(|_| failed("installed, but still not found".into()))
}
