//! The one error type of the lab.

use std::fmt;
use std::path::PathBuf;

use outlive::WideEvent;

type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a benchmark, a soak or a probe could not run, or its results could not be written.
///
/// `Display` says what failed at this layer only; the underlying error is in
/// [`source()`](std::error::Error::source). Messages carry no URL beyond scheme and host,
/// and never a key or token.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Option<Cause>,
    event: Option<Box<WideEvent>>,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A temporary directory could not be created.
    TempDir,
    /// The test bed (Aurora Bank, the gateway, its client) or Chromium could not be set up.
    Bed(outlive_bed::ErrorKind),
    /// A provider's Solari client could not be built.
    Client,
    /// The task failed or outlive gave up; [`Error::event`] has the run's wide event, if any.
    Run,
    /// An option was out of range; nothing was started.
    InvalidOption {
        /// The option's field name, or its flag.
        option: &'static str,
        /// What is wrong with it.
        message: &'static str,
    },
    /// The control plane did not create a session; the samples before it were already
    /// passed on.
    Create {
        /// The index of the session that could not be created.
        session: u32,
        /// The HTTP status of the refusal, if there was a response.
        status: Option<u16>,
    },
    /// The durable runs' library refused or failed; the source, an [`outlive_jobs::Error`],
    /// says which.
    Jobs,
    /// A benchmark step failed (a client script, a run it measures); the source says which.
    Bench,
    /// A result file, or the directory it goes in, could not be written.
    Write {
        /// The file or directory.
        path: PathBuf,
    },
}

impl Error {
    /// An error of `kind` without a cause.
    pub fn new(kind: ErrorKind) -> Self {
        Error {
            kind,
            source: None,
            event: None,
        }
    }

    /// An error of `kind` caused by `source`.
    pub fn with(kind: ErrorKind, source: impl Into<Cause>) -> Self {
        Error {
            source: Some(source.into()),
            ..Error::new(kind)
        }
    }

    /// A run that did not complete.
    pub fn run(event: WideEvent) -> Self {
        Error {
            event: Some(Box::new(event)),
            ..Error::new(ErrorKind::Run)
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The wide event of a run that did not complete ([`ErrorKind::Run`]).
    pub fn event(&self) -> Option<&WideEvent> {
        self.event.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::TempDir => f.write_str("could not create a temporary directory"),
            ErrorKind::Bed(kind) => kind.fmt(f),
            ErrorKind::Client => f.write_str("the Solari client could not be built"),
            ErrorKind::Run => match &self.event {
                Some(e) => write!(f, "the run did not complete ({})", e.outcome.as_str()),
                None => f.write_str("the run did not complete"),
            },
            ErrorKind::InvalidOption { option, message } => {
                write!(f, "invalid option `{option}`: {message}")
            }
            ErrorKind::Create { session, status } => {
                write!(f, "the control plane did not create session {session}")?;
                match status {
                    Some(s) => write!(f, " (HTTP {s})"),
                    None => Ok(()),
                }
            }
            ErrorKind::Jobs => f.write_str("durable runs failed"),
            ErrorKind::Bench => f.write_str("a benchmark step failed"),
            ErrorKind::Write { path } => write!(f, "could not write {}", path.display()),
        }
    }
}

impl From<outlive_bed::Error> for Error {
    fn from(e: outlive_bed::Error) -> Self {
        let (kind, source) = e.into_parts();
        Error {
            source,
            ..Error::new(ErrorKind::Bed(kind))
        }
    }
}

impl From<outlive_jobs::Error> for Error {
    fn from(e: outlive_jobs::Error) -> Self {
        Error::with(ErrorKind::Jobs, e)
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
        let cause = std::io::Error::other("disk full");
        let err = Error::with(ErrorKind::TempDir, cause);
        assert_eq!(err.to_string(), "could not create a temporary directory");
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(source.to_string(), "disk full");
    }
}
