//! A TCP proxy on 127.0.0.1 that can stop forwarding: a network partition between one process
//! and a server, with every socket left open (what a cut cable or a lost route looks like:
//! nothing arrives, nothing is refused). What was sent during the cut is held and delivered
//! once it heals, as late packets would be.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; stopped (every connection through it ended) when dropped.
pub struct Partition {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Partition {
    /// A proxy to `upstream`, forwarding.
    pub async fn start(upstream: SocketAddr) -> Partition {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(false);
        let subscribe = cut.clone();
        let accepting = tokio::spawn(async move {
            // Dropped with the accepting task: every connection's halves end with it.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let cut = subscribe.clone();
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        forward(client_read, server_write, cut.subscribe()),
                        forward(server_read, client_write, cut.subscribe()),
                    );
                });
            }
        });
        Partition {
            addr,
            cut,
            accepting,
        }
    }

    /// `url` (a `postgres://` URL) through this proxy.
    pub fn url(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string()
    }

    /// Stops forwarding, both ways.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forwards again, what was held first.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// One direction: read, then write, each only while not cut.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut cut: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if cut.wait_for(|c| !*c).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.wait_for(|c| !*c).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
