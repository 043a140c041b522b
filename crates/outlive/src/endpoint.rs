//! [`CdpEndpoint`]: a CDP websocket URL, treated as the credential it often is.

use std::fmt;

use crate::error::{Error, ErrorKind};

/// The websocket URL of a browser's DevTools endpoint.
///
/// Cloud providers put a bearer token in this URL's query (Solari's `?token=…`), so it is a
/// secret: `Debug` and [`CdpEndpoint::redacted`] show scheme and host only, and the raw URL is
/// only reachable through [`CdpEndpoint::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct CdpEndpoint {
    url: String,
}

impl CdpEndpoint {
    /// Wraps a `ws://` or `wss://` URL.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connect`] if the text is not a websocket URL with a host.
    pub fn new(url: impl Into<String>) -> Result<Self, Error> {
        let url = url.into();
        let parsed = url::Url::parse(&url).map_err(|_| {
            Error::new(
                ErrorKind::Connect,
                "the CDP endpoint is not a URL; expected ws://host:port/… or wss://…",
            )
        })?;
        if !matches!(parsed.scheme(), "ws" | "wss") || parsed.host_str().is_none() {
            return Err(Error::new(
                ErrorKind::Connect,
                format!(
                    "the CDP endpoint must be a ws:// or wss:// URL with a host, got a {}: URL",
                    parsed.scheme()
                ),
            ));
        }
        Ok(Self { url })
    }

    /// The raw URL, token and all. Pass it only to a websocket connect.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// Scheme and host (and port), safe for a log line: `wss://connect.example.com:443`.
    pub fn redacted(&self) -> String {
        match url::Url::parse(&self.url) {
            Ok(u) => match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{}://{}:{}", u.scheme(), h, p),
                (Some(h), None) => format!("{}://{}", u.scheme(), h),
                _ => format!("{}://", u.scheme()),
            },
            Err(_) => "<endpoint>".to_owned(),
        }
    }
}

impl fmt::Debug for CdpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CdpEndpoint({}/…)", self.redacted())
    }
}

impl fmt::Display for CdpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_path_and_query() {
        let e = CdpEndpoint::new("wss://cdp.example.com/cdp/abc?token=s3cret").unwrap();
        assert_eq!(e.redacted(), "wss://cdp.example.com");
        assert!(!format!("{e:?}{e}").contains("s3cret"));
        assert!(!format!("{e:?}{e}").contains("abc"));
        assert_eq!(e.expose(), "wss://cdp.example.com/cdp/abc?token=s3cret");
    }

    #[test]
    fn rejects_non_websocket_urls() {
        assert_eq!(
            CdpEndpoint::new("http://x/").unwrap_err().kind(),
            ErrorKind::Connect
        );
        assert!(CdpEndpoint::new("not a url").is_err());
    }
}
