//! `--metrics ADDR`: the command's Prometheus metrics at `http://ADDR/metrics`, and its runs
//! at `http://ADDR/` ([`crate::ui`]).
//!
//! The listener is bound before the command starts anything, so a bad address is an error at
//! start. It stays on loopback unless `--metrics-public` says otherwise. The server
//! ([`crate::http::Server`]) owns the listener and its connections; dropping it ends them.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use outlive::prometheus_client::encoding::{prometheus_text, text};
use outlive::prometheus_client::registry::Registry;

use crate::error::Error;
use crate::http::{Routes, plain};
use crate::ui::RunSource;

/// The flags that serve metrics.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics, ADDR as IP:PORT (port 0: any free one).
    ///
    /// Deaths, sessions, relaunches, checkpoints (docs/metrics.md). The runs page is served
    /// at http://ADDR/ (docs/ui.md). Loopback only, unless --metrics-public. The address is
    /// printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Let --metrics listen on an address other than loopback (the network can read its
    /// metrics and its runs page).
    ///
    /// The runs page lists runs with their ids, task names, states, deaths and timings.
    #[arg(long, requires = "metrics")]
    pub metrics_public: bool,
}

impl MetricsArgs {
    /// The address to listen on, if any.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`](crate::ErrorKind::Flag) for an address that is not loopback
    /// without `--metrics-public`.
    pub fn address(&self) -> Result<Option<SocketAddr>, Error> {
        if let Some(addr) = self.metrics {
            crate::http::loopback_only(addr, "--metrics", "--metrics-public", self.metrics_public)?;
        }
        Ok(self.metrics)
    }

    /// When `--metrics` is given: a registry filled by `register`, served there with the
    /// runs of `runs` at `/`, and what `register` answered (the handles to record with).
    /// Call it before starting anything else; it says where on stderr.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`](crate::ErrorKind::Flag) as [`MetricsArgs::address`] says;
    /// [`ErrorKind::Listen`](crate::ErrorKind::Listen) when the address cannot be bound (in
    /// use, not this machine's).
    pub async fn serve<T>(
        &self,
        register: impl FnOnce(&mut Registry) -> T,
        runs: Arc<dyn RunSource>,
    ) -> Result<Option<(MetricsServer, T)>, Error> {
        let Some(addr) = self.address()? else {
            return Ok(None);
        };
        let mut registry = Registry::default();
        let handles = register(&mut registry);
        let routes = Routes {
            metrics: Some(registry),
            runs: Some(runs),
        };
        let server = MetricsServer::bind(addr, "--metrics", routes).await?;
        eprintln!("outlive: metrics at http://{}/metrics", server.addr());
        eprintln!("outlive: runs at http://{}/", server.addr());
        Ok(Some((server, handles)))
    }
}

/// `/metrics` (and `/`, the runs page) served on a listener of its own, until dropped.
pub type MetricsServer = crate::http::Server;

/// `GET /metrics`: OpenMetrics text when the scraper accepts it (Prometheus does), else the
/// Prometheus text format (0.0.4).
pub(crate) fn encoded(request: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let open_metrics = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let mut body = String::new();
    let (encoded, content_type) = if open_metrics {
        (
            text::encode(&mut body, registry),
            outlive::METRICS_CONTENT_TYPE,
        )
    } else {
        (
            prometheus_text::encode(&mut body, registry),
            prometheus_text::CONTENT_TYPE,
        )
    };
    if encoded.is_err() {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded\n",
        );
    }
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(addr: &str, public: bool) -> MetricsArgs {
        MetricsArgs {
            metrics: Some(addr.parse().unwrap()),
            metrics_public: public,
        }
    }

    #[test]
    fn an_address_off_loopback_needs_metrics_public() {
        let e = flags("0.0.0.0:9464", false).address().unwrap_err();
        assert!(matches!(
            e.kind(),
            crate::ErrorKind::Flag {
                flag: "--metrics",
                ..
            }
        ));
        assert!(e.to_string().contains("--metrics-public"), "{e}");
        assert!(flags("0.0.0.0:9464", true).address().is_ok());
        assert!(flags("127.0.0.1:9464", false).address().is_ok());
        assert!(flags("[::1]:9464", false).address().is_ok());
        let none = MetricsArgs {
            metrics: None,
            metrics_public: false,
        };
        assert_eq!(none.address().unwrap(), None);
    }
}
