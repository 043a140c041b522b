//! The `/__chaos` routes: kill a session, the gateway's status, and the control-plane faults.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{invalid_session_id, json_object, parse_body, parse_id};
use crate::chaos::Death;
use crate::config::DeathMode;
use crate::error::json_error as error;
use crate::fault::{self, DeleteFault, Queued};
use crate::session::{KillError, Shared};

/// `POST /__chaos/sessions/:id/kill` query: the death to die, else the session's own.
#[derive(Debug, Deserialize)]
pub(super) struct KillQuery {
    mode: Option<String>,
}

pub(super) async fn kill(
    State(shared): State<Arc<Shared>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<KillQuery>, QueryRejection>,
) -> Response {
    let Some(id) = parse_id(id) else {
        return invalid_session_id();
    };
    let death = match query.ok().and_then(|Query(q)| q.mode) {
        None => None,
        Some(m) => match m.parse::<DeathMode>() {
            Ok(mode) => Some(Death::resolve(mode, 0)),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "ValidationError",
                    format!("mode: {e}"),
                );
            }
        },
    };
    match shared.kill(id, death).await {
        Ok(death) => {
            Json(json!({ "id": id.to_string(), "death": death.mode().as_str() })).into_response()
        }
        Err(KillError::Unknown) => invalid_session_id(),
        Err(KillError::Ended) => error(
            StatusCode::CONFLICT,
            "SessionEnded",
            "the session's browser is already dead or released",
        ),
    }
}

pub(super) async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let s = shared.status();
    Json(json!({
        "liveSessions": s.live_sessions,
        "deadSessions": s.dead_sessions,
        "chromiumProcesses": s.chromium_processes,
        "peakSessions": s.peak_sessions,
        "stallsHit": s.stalls_hit,
    }))
    .into_response()
}

/// `POST /__chaos/faults` body: `clear`, then `creates`, then `deletes`, all optional,
/// all validated before any is applied.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultsBody {
    #[serde(default)]
    clear: bool,
    creates: Option<CreatesFault>,
    deletes: Option<DeletesFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreatesFault {
    count: u32,
    status: u16,
}

/// Exactly one of `status` and `hang: true`; no `count` means until cleared.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeletesFault {
    count: Option<u32>,
    status: Option<u16>,
    #[serde(default)]
    hang: bool,
}

/// A validated `POST /__chaos/faults`.
struct FaultChange {
    clear: bool,
    creates: Option<(u32, u16)>,
    deletes: Option<(Option<u32>, DeleteFault)>,
}

/// Parses and validates a faults body. The error is the `code` and message of a 400.
fn parse_faults_body(body: &[u8]) -> Result<FaultChange, (&'static str, String)> {
    let parsed = FaultsBody::deserialize(json_object(body)?)
        .map_err(|e| ("ValidationError", e.to_string()))?;
    let invalid = |what: &str, e: crate::Error| ("ValidationError", format!("{what}: {e}"));
    let creates = match parsed.creates {
        None => None,
        Some(c) => {
            fault::check_status(c.status).map_err(|e| invalid("creates", e))?;
            Some((c.count, c.status))
        }
    };
    let deletes = match parsed.deletes {
        None => None,
        Some(d) => {
            let fault = match (d.status, d.hang) {
                (Some(status), false) => {
                    fault::check_status(status).map_err(|e| invalid("deletes", e))?;
                    DeleteFault::Status(status)
                }
                (None, true) => DeleteFault::Hang,
                _ => {
                    return Err((
                        "ValidationError",
                        "deletes: give exactly one of status and hang: true".to_owned(),
                    ));
                }
            };
            Some((d.count, fault))
        }
    };
    Ok(FaultChange {
        clear: parsed.clear,
        creates,
        deletes,
    })
}

pub(super) async fn set_faults(
    State(shared): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let change = match parse_body(body, parse_faults_body) {
        Ok(c) => c,
        Err(refusal) => return refusal,
    };
    if change.clear {
        shared.faults.clear();
    }
    if let Some((count, status)) = change.creates {
        shared.faults.fail_creates(count, status);
    }
    if let Some((count, fault)) = change.deletes {
        shared.faults.fail_deletes(count, fault);
    }
    faults(State(shared)).await
}

/// `GET /__chaos/faults`: what is queued, and how many requests were faulted so far.
pub(super) async fn faults(State(shared): State<Arc<Shared>>) -> Response {
    Json(faults_json(
        shared.faults.snapshot(),
        shared.faults.counters(),
    ))
    .into_response()
}

fn faults_json(queued: Queued, counters: fault::FaultCounters) -> Value {
    let creates = queued
        .creates
        .map(|c| json!({ "remaining": c.remaining, "status": c.status }));
    let deletes = queued.deletes.map(|d| match d.fault {
        DeleteFault::Status(status) => json!({ "remaining": d.remaining, "status": status }),
        DeleteFault::Hang => json!({ "remaining": d.remaining, "hang": true }),
    });
    json!({
        "creates": creates,
        "deletes": deletes,
        "createsFaulted": counters.creates_faulted,
        "deletesFaulted": counters.deletes_faulted,
    })
}
