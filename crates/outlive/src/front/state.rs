//! What the front's connections share: the entry served now, the control's holds, and the
//! JSON answers they give.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::watch;

use super::usage::Usage;
use crate::ctx::{CheckpointHold, Ctx};
use crate::endpoint::CdpEndpoint;

/// The browser the front serves now: one entry's.
#[derive(Clone)]
pub(super) struct Serving {
    /// Counts entries: a client connection belongs to one.
    pub(super) generation: u64,
    pub(super) endpoint: CdpEndpoint,
    pub(super) ctx: Ctx,
}

/// What the front's connections share.
pub(super) struct State {
    pub(super) port: u16,
    /// The browser socket's id (unguessable: the URL is the credential, as Chromium's is).
    pub(super) browser_id: String,
    /// The control URL's secret path segment.
    pub(super) token: String,
    pub(super) serving: watch::Sender<Option<Serving>>,
    pub(super) generations: std::sync::atomic::AtomicU64,
    pub(super) holds: Mutex<Vec<CheckpointHold>>,
    /// How long a client connecting between browsers waits for the next.
    pub(super) wait_limit: Duration,
    /// Set when the front is dropped: every connection ends.
    pub(super) closed: watch::Sender<bool>,
    /// What the clients do with the browser served now (the capture reads it).
    pub(super) usage: Arc<Usage>,
    /// Whether a client's connection is carried to the next browser at a death.
    pub(super) carry: bool,
}

/// An answer to a request, with a JSON body.
pub(super) type Reply = Response<Full<Bytes>>;

/// A JSON answer.
pub(super) fn reply(status: StatusCode, body: serde_json::Value) -> Reply {
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, "application/json".parse().expect("static"));
    res
}

/// A refusal, saying why.
pub(super) fn refuse(status: StatusCode, why: &str) -> Reply {
    reply(status, json!({ "error": why }))
}
