//! The one error type of the gateway library.

use std::error::Error as StdError;
use std::fmt;

/// Broad classification of an [`Error`], for matching.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A [`Config`](crate::Config) option was out of range; nothing was started.
    InvalidConfig,
    /// The local machine refused something the gateway needed (a socket, an address).
    Io,
    /// No session with this id exists (or the id is malformed).
    UnknownSession,
    /// The session exists but its browser is already dead or released.
    SessionEnded,
    /// A task of the gateway panicked; the gateway was stopped anyway.
    TaskPanicked,
    /// A fault to inject was refused (its status is not an HTTP error status); no fault
    /// changed.
    InvalidFault,
}

type Source = Box<dyn StdError + Send + Sync + 'static>;

/// An error of the gateway.
///
/// `Display` says what went wrong at this layer; the cause, if any, is reachable through
/// [`std::error::Error::source`] and is never repeated in the message. No message carries a
/// secret (API key or relay token).
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    option: Option<&'static str>,
    source: Option<Source>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                option: None,
                source: None,
            }),
        }
    }

    pub(crate) fn invalid_config(option: &'static str, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::InvalidConfig, message);
        e.inner.option = Some(option);
        e
    }

    pub(crate) fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.inner.source = Some(source.into());
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The [`Config`](crate::Config) option at fault, for [`ErrorKind::InvalidConfig`].
    pub fn option(&self) -> Option<&'static str> {
        self.inner.option
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(option) = self.inner.option {
            d.field("option", &option);
        }
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}
