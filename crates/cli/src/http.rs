//! [`Server`]: the command's own HTTP listener, for `/metrics` and the runs page. It owns
//! the listener and its connections; dropping it ends them. [`loopback_only`] is the check
//! every such listener makes before it binds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use outlive::prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::error::{Error, ErrorKind};
use crate::ui::{self, RunSource};

/// What a [`Server`] answers.
#[derive(Default)]
pub struct Routes {
    /// `/metrics`, when given.
    pub metrics: Option<Registry>,
    /// `/` and `/runs/{id}`, when given.
    pub runs: Option<Arc<dyn RunSource>>,
}

/// Refuses `addr` off loopback unless `public`, naming `flag` and `public_flag`.
///
/// # Errors
///
/// [`ErrorKind::Flag`].
pub fn loopback_only(
    addr: SocketAddr,
    flag: &'static str,
    public_flag: &str,
    public: bool,
) -> Result<(), Error> {
    if addr.ip().is_loopback() || public {
        return Ok(());
    }
    Err(Error::flag(
        flag,
        format!(
            "{} is not a loopback address, so anyone on the network could read it: use \
             127.0.0.1:PORT, or add {public_flag}",
            addr.ip()
        ),
    ))
}

/// An HTTP listener serving [`Routes`] until dropped.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `addr` and serves `routes` there; `server` names it in errors (`--metrics`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`] when `addr` cannot be bound (in use, not this machine's).
    pub async fn bind(
        addr: SocketAddr,
        server: &'static str,
        routes: Routes,
    ) -> Result<Server, Error> {
        let listen_error = |e: std::io::Error| Error::with(ErrorKind::Listen { addr, server }, e);
        let listener = TcpListener::bind(addr).await.map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let task = tokio::spawn(accept(listener, Arc::new(routes)));
        Ok(Server { addr, task })
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections and answers them; the connections end with this task.
async fn accept(listener: TcpListener, routes: Arc<Routes>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, routes.clone()));
                }
                Err(e) => {
                    // Out of descriptors, most likely: give the connections time to close.
                    tracing::warn!(error = %e, "a listener could not accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One HTTP/1 connection.
async fn connection(stream: tokio::net::TcpStream, routes: Arc<Routes>) {
    let service = hyper::service::service_fn(move |request| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(answer(request, &routes).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "a connection failed");
    }
}

/// `GET /metrics`, `/` and `/runs/{id}`, as far as `routes` has them.
async fn answer(request: Request<Incoming>, routes: &Routes) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
    }
    let path = request.uri().path();
    match (path, &routes.metrics, &routes.runs) {
        ("/metrics", Some(registry), _) => crate::metrics::encoded(&request, registry),
        ("/", _, Some(runs)) => page(
            runs.list()
                .await
                .map(|r| Some(ui::render_list(&r, ui::now_ms()))),
        ),
        (path, _, Some(runs)) if path.starts_with("/runs/") => {
            let id = &path["/runs/".len()..];
            page(
                runs.one(id)
                    .await
                    .map(|r| r.map(|r| ui::render_run(&r, ui::now_ms()))),
            )
        }
        _ => plain(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// A page, or why there is none (the error logged, not shown: it may name a host).
fn page(rendered: Result<Option<String>, Error>) -> Response<Full<Bytes>> {
    let html = match rendered {
        Ok(Some(html)) => html,
        Ok(None) => return plain(StatusCode::NOT_FOUND, "no such run\n"),
        Err(e) => {
            tracing::warn!(error = %crate::cmd::chain(&e), "the runs could not be read");
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the runs could not be read (the log says why)\n",
            );
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(html)));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Nothing but the page itself and its inline style: no request leaves it.
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    response
}

/// A plain-text answer.
pub(crate) fn plain(status: StatusCode, message: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(message.as_bytes())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_in_use_is_an_error_that_names_it() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let e = Server::bind(addr, "--metrics", Routes::default())
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
