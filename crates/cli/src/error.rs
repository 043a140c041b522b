//! The one error type of the `outlive` command's library.

use std::fmt;
use std::net::SocketAddr;

use outlive::WideEvent;

type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a command could not run: a flag, the demo's test bed, a server, a durable run.
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
    /// A flag's value is wrong, or lacks what it needs; nothing was started.
    Flag {
        /// The flag, as written on the command line (`--cdp-url`).
        flag: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// No local Chromium to launch (no provider flag was given).
    LocalChromium,
    /// The sealing key could not be read; the source names the file or the variable.
    SealKey,
    /// The gateway's options are out of range; nothing was started.
    GatewayOptions,
    /// A server could not listen on its address.
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Which server: `the gateway`, `the bank`.
        server: &'static str,
    },
    /// A server failed while serving.
    Serve {
        /// Which server: `the gateway`, `the bank`.
        server: &'static str,
    },
    /// The test bed (Aurora Bank, the gateway, the client) or Chromium could not be set up.
    Bed(outlive_bed::ErrorKind),
    /// The task failed or outlive gave up; [`Error::event`] has the run's wide event.
    Run,
    /// The durable runs' library refused or failed (the database, a task, an input, a run
    /// id); the source, an [`outlive_jobs::Error`], says which.
    Jobs,
    /// A durable run could not be printed as JSON.
    Encode,
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

    /// A wrong `flag`: `message` says what is wrong.
    pub fn flag(flag: &'static str, message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Flag {
            flag,
            message: message.into(),
        })
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
            ErrorKind::Flag { flag, message } => write!(f, "{flag}: {message}"),
            ErrorKind::LocalChromium => f.write_str("no local Chromium to launch"),
            ErrorKind::SealKey => f.write_str("no sealing key"),
            ErrorKind::GatewayOptions => f.write_str("invalid gateway options"),
            ErrorKind::Listen { addr, server } => {
                write!(f, "could not listen on {addr} for {server}")
            }
            ErrorKind::Serve { server } => write!(f, "{server} failed"),
            ErrorKind::Bed(kind) => kind.fmt(f),
            ErrorKind::Run => match &self.event {
                Some(e) => write!(f, "the run did not complete ({})", e.outcome.as_str()),
                None => f.write_str("the run did not complete"),
            },
            ErrorKind::Jobs => f.write_str("durable runs failed"),
            ErrorKind::Encode => f.write_str("could not encode a run as JSON"),
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
        let err = Error::with(ErrorKind::Encode, cause);
        assert_eq!(err.to_string(), "could not encode a run as JSON");
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(source.to_string(), "disk full");
    }

    #[test]
    fn a_bed_error_keeps_its_message_and_its_cause() {
        let bed = outlive_bed::Error::with(
            outlive_bed::ErrorKind::Gateway,
            std::io::Error::other("port taken"),
        );
        let err = Error::from(bed);
        assert_eq!(err.kind(), &ErrorKind::Bed(outlive_bed::ErrorKind::Gateway));
        assert_eq!(err.to_string(), "the gateway failed");
        let source = std::error::Error::source(&err).expect("a source");
        assert_eq!(source.to_string(), "port taken");
    }
}
