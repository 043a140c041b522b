//! Making sure the machine can run the demo: a Chromium to launch.

use std::process::Command;

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
/// Debian-like machine where we are root, installs Debian's `chromium` package.
///
/// # Errors
///
/// [`ErrorKind::NoChromium`] if it cannot be installed here, [`ErrorKind::ChromiumInstall`]
/// if `apt-get` failed.
pub fn ensure_chromium() -> Result<ChromiumSetup, Error> {
    let local = outlive::LocalChromium::new();
    if let Ok(path) = local.resolve_executable() {
        return Ok(ChromiumSetup::Found(path));
    }
    let root = nix::unistd::geteuid().is_root();
    if !root || !std::path::Path::new("/usr/bin/apt-get").exists() {
        return Err(Error::new(ErrorKind::NoChromium));
    }
    let failed = |cause: String| Error::with(ErrorKind::ChromiumInstall, cause);
    let run = |args: &[&str]| -> Result<(), Error> {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| Error::with(ErrorKind::ChromiumInstall, e))?;
        if status.success() {
            Ok(())
        } else {
            Err(failed(status.to_string()))
        }
    };
    run(&["update", "-qq"])?;
    run(&["install", "-y", "-qq", "chromium"])?;
    local
        .resolve_executable()
        .map(ChromiumSetup::Installed)
        .map_err(|_| failed("installed, but still not found".into()))
}
