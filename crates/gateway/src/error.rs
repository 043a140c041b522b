//! The one error type of the gateway library, and the JSON error body of its HTTP answers.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

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
    /// A page fault was not carried out in full: the browser could not be reached over CDP,
    /// refused a command, or a page did not crash or close in time. The session lives on.
    PageFault,
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error of the gateway.
///
/// `Display` says what went wrong at this layer; the cause, if any, is reachable through
/// [`std::error::Error::source`] and is never repeated in the message. No message carries a
/// secret (API key or relay token).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<Inner>); // boxed: a `Result` stays one pointer wide

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Inner {
    kind: ErrorKind,
    message: String,
    option: Option<&'static str>,
    #[source]
    source: Option<Source>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self(Box::new(Inner {
            kind,
            message: message.into(),
            option: None,
            source: None,
        }))
    }

    pub(crate) fn invalid_config(option: &'static str, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::InvalidConfig, message);
        e.0.option = Some(option);
        e
    }

    pub(crate) fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.0.source = Some(source.into());
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The [`Config`](crate::Config) option at fault, for [`ErrorKind::InvalidConfig`].
    pub fn option(&self) -> Option<&'static str> {
        self.0.option
    }
}

/// A JSON error body the Solari client understands (`{"error": message, "code": code}`),
/// shared by the REST API and the CDP endpoint's refusals.
pub(crate) fn json_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": message.into(), "code": code })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn display_is_this_layers_message_and_the_cause_is_the_source() {
        let cause = std::io::Error::other("the cause");
        let e = Error::new(ErrorKind::Io, "the listener has no local address").with_source(cause);
        assert_eq!(e.to_string(), "the listener has no local address");
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("the cause")
        );
        assert_eq!(
            std::mem::size_of::<Result<(), Error>>(),
            std::mem::size_of::<usize>()
        );
    }
}
