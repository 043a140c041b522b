//! The one error type of the library, and the result type of a run.

use std::error::Error as StdError;
use std::fmt;

/// Broad classification of an [`Error`], for matching and for the wide event's `errorCode`.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An option was out of range; reported before anything was launched.
    InvalidOption,
    /// The run stopped trying. The browser died (or a launch failed) more than
    /// `max_relaunches` times in a row, or its page failed more than `max_page_recoveries`
    /// times in a row in a browser that lived on. Or the run would need more than
    /// `max_sessions` sessions. In a row means without progress between.
    GaveUp,
    /// A provider could not launch a browser session.
    Launch,
    /// The CDP connection to a launched browser could not be made.
    Connect,
    /// A session could not be released (closed) after use.
    Release,
    /// A CDP command outlive sent on its own behalf failed (capture or restore).
    Cdp,
    /// The local machine refused something outlive needed (a socket, a temp dir, a process).
    Io,
    /// The task's saved progress (`Ctx::checkpoint_with`) does not read as the type asked for.
    Progress,
    /// A sealed checkpoint was refused: not sealed by outlive, sealed under a key not held, or
    /// altered / belonging to another run. Never restored.
    Sealed,
}

impl ErrorKind {
    /// The stable snake_case code of this kind, as it appears in the wide event.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidOption => "invalid_option",
            ErrorKind::GaveUp => "gave_up",
            ErrorKind::Launch => "launch_failed",
            ErrorKind::Connect => "connect_failed",
            ErrorKind::Release => "release_failed",
            ErrorKind::Cdp => "cdp_failed",
            ErrorKind::Io => "io",
            ErrorKind::Progress => "progress_unreadable",
            ErrorKind::Sealed => "sealed_refused",
        }
    }
}

/// What a [`Provider`](crate::Provider), a [`Session`](crate::Session) or a
/// [`CheckpointStore`](crate::CheckpointStore) implemented outside this crate may report, for
/// [`Error::provider`]; each is the [`ErrorKind`] of the same name.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderFailure {
    /// No browser session could be launched.
    Launch,
    /// The launched browser could not be reached.
    Connect,
    /// A session could not be released.
    Release,
    /// Something local or remote the implementation needed refused (a socket, a file, a
    /// database write).
    Io,
}

impl From<ProviderFailure> for ErrorKind {
    fn from(kind: ProviderFailure) -> ErrorKind {
        match kind {
            ProviderFailure::Launch => ErrorKind::Launch,
            ProviderFailure::Connect => ErrorKind::Connect,
            ProviderFailure::Release => ErrorKind::Release,
            ProviderFailure::Io => ErrorKind::Io,
        }
    }
}

type Source = Box<dyn StdError + Send + Sync + 'static>;

/// An error of outlive itself (never the task's own error; see [`RunError`]).
///
/// `Display` says what went wrong at this layer and what to do; the cause, if any, is
/// reachable through [`std::error::Error::source`] and is never repeated in the message.
/// No message carries a secret: endpoint URLs are reduced to scheme and host before they are
/// put into a message.
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

    pub(crate) fn invalid_option(option: &'static str, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::InvalidOption, message);
        e.inner.option = Some(option);
        e
    }

    pub(crate) fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.inner.source = Some(source.into());
        self
    }

    /// Creates an error for a [`Provider`](crate::Provider), a [`Session`](crate::Session) or
    /// a [`CheckpointStore`](crate::CheckpointStore) implemented outside this crate. Only the
    /// kinds such code can fail with are offered ([`ProviderFailure`]): a run's own verdicts
    /// (`GaveUp`, `InvalidOption`, `Sealed`, …) are outlive's to give. `message` must not
    /// contain secrets.
    pub fn provider(kind: ProviderFailure, message: impl Into<String>) -> Self {
        Self::new(kind.into(), message)
    }

    /// Attaches a cause. The cause must not carry secrets in its `Display`.
    pub fn caused_by(self, source: impl Into<Source>) -> Self {
        self.with_source(source)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The stable code of [`Error::kind`] (`"gave_up"`, `"invalid_option"`, …).
    pub fn code(&self) -> &'static str {
        self.inner.kind.code()
    }

    /// For [`ErrorKind::InvalidOption`], the name of the option that was rejected.
    pub fn option(&self) -> Option<&'static str> {
        self.inner.option
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("outlive::Error");
        d.field("kind", &self.inner.kind);
        if let Some(option) = self.inner.option {
            d.field("option", &option);
        }
        d.field("message", &self.inner.message);
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn StdError + 'static))
    }
}

/// Why [`outlive`](crate::outlive()) did not return the task's value.
///
/// The task's own error comes back unchanged in [`RunError::Task`]: outlive does not retry
/// it, wrap it or coerce it.
#[derive(Debug)]
pub enum RunError<E> {
    /// The task returned this error while its browser was alive.
    Task(E),
    /// outlive itself failed: an invalid option, or the browser died too many times.
    Outlive(Error),
}

impl<E> RunError<E> {
    /// The task's error, if that is what this is.
    pub fn into_task(self) -> Option<E> {
        match self {
            RunError::Task(e) => Some(e),
            RunError::Outlive(_) => None,
        }
    }

    /// The task's error, by reference, if that is what this is.
    pub fn task(&self) -> Option<&E> {
        match self {
            RunError::Task(e) => Some(e),
            RunError::Outlive(_) => None,
        }
    }

    /// outlive's own error, if that is what this is.
    pub fn outlive(&self) -> Option<&Error> {
        match self {
            RunError::Task(_) => None,
            RunError::Outlive(e) => Some(e),
        }
    }

    /// outlive's own error, by value, if that is what this is.
    pub fn into_outlive(self) -> Option<Error> {
        match self {
            RunError::Task(_) => None,
            RunError::Outlive(e) => Some(e),
        }
    }

    /// The kind of outlive's own error (`None` for the task's error).
    pub fn kind(&self) -> Option<ErrorKind> {
        self.outlive().map(Error::kind)
    }

    /// Whether the run gave up: the browser or the page failed more often than allowed.
    pub fn is_gave_up(&self) -> bool {
        self.kind() == Some(ErrorKind::GaveUp)
    }
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Task(e) => e.fmt(f),
            RunError::Outlive(e) => e.fmt(f),
        }
    }
}

impl<E: StdError + 'static> StdError for RunError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            // Transparent: the task's error is the error, not a cause of it.
            RunError::Task(e) => e.source(),
            RunError::Outlive(e) => e.source(),
        }
    }
}

impl<E> From<Error> for RunError<E> {
    fn from(e: Error) -> Self {
        RunError::Outlive(e)
    }
}
