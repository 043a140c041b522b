//! Making sure the machine can run the demo: a Chromium to launch.

use std::process::Command;

/// What [`ensure_chromium`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChromiumSetup {
    /// Chromium was already there.
    Found(std::path::PathBuf),
    /// Chromium was installed with `apt-get`.
    Installed(std::path::PathBuf),
}

/// Why Chromium is not available.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// No Chromium, and no way to install it here.
    #[error(
        "Chromium not found and cannot be installed automatically (needs root and apt-get); \
         install it (Debian/Ubuntu: `sudo apt-get install -y chromium`) or set $CHROME"
    )]
    CannotInstall,
    /// `apt-get` failed.
    #[error("`apt-get install -y chromium` failed ({0}); install Chromium by hand or set $CHROME")]
    AptFailed(String),
}

/// Finds Chromium the way [`outlive::LocalChromium`] does; if there is none and this is a
/// Debian-like machine where we are root, installs Debian's `chromium` package.
pub fn ensure_chromium() -> Result<ChromiumSetup, SetupError> {
    let local = outlive::LocalChromium::new();
    if let Ok(path) = local.resolve_executable() {
        return Ok(ChromiumSetup::Found(path));
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || !std::path::Path::new("/usr/bin/apt-get").exists() {
        return Err(SetupError::CannotInstall);
    }
    let run = |args: &[&str]| -> Result<(), SetupError> {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| SetupError::AptFailed(e.to_string()))?;
        if status.success() {
            Ok(())
        } else {
            Err(SetupError::AptFailed(status.to_string()))
        }
    };
    run(&["update", "-qq"])?;
    run(&["install", "-y", "-qq", "chromium"])?;
    local
        .resolve_executable()
        .map(ChromiumSetup::Installed)
        .map_err(|_| SetupError::AptFailed("installed, but still not found".into()))
}
