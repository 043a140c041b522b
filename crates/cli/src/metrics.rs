//! `--metrics ADDR`: the command's Prometheus metrics at `http://ADDR/metrics`.
//!
//! The listener is bound before the command starts anything, so a bad address is an error at
//! start. It stays on loopback unless `--metrics-public` says otherwise. [`MetricsServer`]
//! owns the listener and its connections; dropping it ends them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use outlive::prometheus_client::encoding::{prometheus_text, text};
use outlive::prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::error::{Error, ErrorKind};

/// The flags that serve metrics.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics, ADDR as IP:PORT (port 0: any free one).
    ///
    /// Deaths, sessions, relaunches, checkpoints (docs/metrics.md). Loopback only, unless
    /// --metrics-public. The address is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Let --metrics listen on an address other than loopback (the network can read it).
    #[arg(long, requires = "metrics")]
    pub metrics_public: bool,
}

impl MetricsArgs {
    /// The address to listen on, if any.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`] for an address that is not loopback without `--metrics-public`.
    pub fn address(&self) -> Result<Option<SocketAddr>, Error> {
        match self.metrics {
            Some(addr) if !addr.ip().is_loopback() && !self.metrics_public => Err(Error::flag(
                "--metrics",
                format!(
                    "{} is not a loopback address, so anyone on the network could read the \
                     metrics: use 127.0.0.1:PORT, or add --metrics-public",
                    addr.ip()
                ),
            )),
            addr => Ok(addr),
        }
    }

    /// When `--metrics` is given: a registry filled by `register`, served there, and what
    /// `register` answered (the handles to record with). Call it before starting anything
    /// else; it says where on stderr.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Flag`] as [`MetricsArgs::address`] says; [`ErrorKind::Listen`] when the
    /// address cannot be bound (in use, not this machine's).
    pub async fn serve<T>(
        &self,
        register: impl FnOnce(&mut Registry) -> T,
    ) -> Result<Option<(MetricsServer, T)>, Error> {
        let Some(addr) = self.address()? else {
            return Ok(None);
        };
        let mut registry = Registry::default();
        let handles = register(&mut registry);
        let server = MetricsServer::bind(addr, registry).await?;
        eprintln!("outlive: metrics at http://{}/metrics", server.addr());
        Ok(Some((server, handles)))
    }
}

/// `/metrics` served on a listener of its own, until this is dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` and serves `registry` at `/metrics` there.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`] when `addr` cannot be bound.
    pub async fn bind(addr: SocketAddr, registry: Registry) -> Result<MetricsServer, Error> {
        let listen_error = |e: std::io::Error| {
            let kind = ErrorKind::Listen {
                addr,
                server: "--metrics",
            };
            Error::with(kind, e)
        };
        let listener = TcpListener::bind(addr).await.map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let task = tokio::spawn(accept(listener, Arc::new(registry)));
        Ok(MetricsServer { addr, task })
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections and answers them; the connections end with this task.
async fn accept(listener: TcpListener, registry: Arc<Registry>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, registry.clone()));
                }
                Err(e) => {
                    // Out of descriptors, most likely: give the connections time to close.
                    tracing::warn!(error = %e, "the metrics listener could not accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One HTTP/1 connection.
async fn connection(stream: tokio::net::TcpStream, registry: Arc<Registry>) {
    let service = hyper::service::service_fn(move |request| {
        let response = answer(&request, &registry);
        async move { Ok::<_, Infallible>(response) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "a metrics connection failed");
    }
}

/// `GET /metrics`: OpenMetrics text when the scraper accepts it (Prometheus does), else the
/// Prometheus text format (0.0.4).
fn answer(request: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
    }
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

fn plain(status: StatusCode, message: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(message.as_bytes())));
    *response.status_mut() = status;
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
            ErrorKind::Flag {
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

    #[tokio::test]
    async fn an_address_in_use_is_an_error_that_names_it() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let e = MetricsServer::bind(addr, Registry::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.kind(),
            &ErrorKind::Listen {
                addr,
                server: "--metrics"
            }
        );
        assert_eq!(
            e.to_string(),
            format!("could not listen on {addr} for --metrics")
        );
        let source = std::error::Error::source(&e).expect("the bind error");
        assert_eq!(
            source
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::AddrInUse)
        );
    }
}
