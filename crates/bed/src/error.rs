//! The one error type of the test bed.

use std::fmt;

/// A cause, as any error.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the test bed or Chromium could not be set up.
///
/// `Display` says what failed at this layer only; the underlying error is in
/// [`source()`](std::error::Error::source).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Option<Cause>,
}

/// What kind of failure an [`Error`] is. Its `Display` is the error's message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Aurora Bank did not start.
    Bank,
    /// The gateway did not start, or did not stop cleanly.
    Gateway,
    /// The Solari client could not be built.
    Client,
    /// No Chromium, and no way to install it here.
    NoChromium,
    /// Installing Chromium with `apt-get` failed.
    ChromiumInstall,
}

impl Error {
    /// An error of `kind` without a cause.
    pub fn new(kind: ErrorKind) -> Self {
        Error { kind, source: None }
    }

    /// An error of `kind` caused by `source`.
    pub fn with(kind: ErrorKind, source: impl Into<Cause>) -> Self {
        Error {
            kind,
            source: Some(source.into()),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// Its kind and its cause, for a caller's error that takes this one's place (its
    /// message is the kind's, and its source this one's).
    pub fn into_parts(self) -> (ErrorKind, Option<Cause>) {
        (self.kind, self.source)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Bank => f.write_str("Aurora Bank did not start"),
            ErrorKind::Gateway => f.write_str("the gateway failed"),
            ErrorKind::Client => f.write_str("the Solari client could not be built"),
            ErrorKind::NoChromium => f.write_str(
                "Chromium not found and cannot be installed automatically (needs root and \
                 apt-get); install it (Debian/Ubuntu: `sudo apt-get install -y chromium`) or \
                 set $CHROME",
            ),
            ErrorKind::ChromiumInstall => f.write_str(
                "`apt-get install -y chromium` failed; install Chromium by hand or set $CHROME",
            ),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_does_not_repeat_the_cause() {
        let err = Error::with(ErrorKind::Bank, std::io::Error::other("port taken"));
        assert_eq!(err.to_string(), "Aurora Bank did not start");
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(source.to_string(), "port taken");
        let (kind, source) = err.into_parts();
        assert_eq!(kind, ErrorKind::Bank);
        assert_eq!(source.expect("a source").to_string(), "port taken");
    }
}
