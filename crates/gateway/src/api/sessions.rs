//! The session routes: create (with `Idempotency-Key`), get, list (with Solari's metadata
//! filter) and release.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::timestamp::iso8601;
use super::{injected, invalid_session_id, json_object, parse_body, parse_id};
use crate::chaos::{Death, Overrides};
use crate::error::json_error as error;
use crate::fault::DeleteFault;
use crate::relay::request_host;
use crate::session::{CreateError, IdempotencyBegin, Phase, Shared, Snapshot};

/// Solari refuses a `timeoutSeconds` under a minute.
const MIN_TIMEOUT_SECONDS: u32 = 60;
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// `POST /sessions` body. Unknown fields are ignored; the options this gateway cannot honour
/// (profiles, proxies, stealth, recording, captcha, keep-alive) are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    #[serde(default)]
    timeout_seconds: Option<u32>,
    #[serde(default)]
    user_metadata: Option<Map<String, Value>>,
}

pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let parsed = match parse_body(body, parse_create_body) {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    let deadline = match deadline(parsed.timeout_seconds) {
        Ok(d) => d,
        Err(refusal) => return refusal,
    };
    let overrides = match Overrides::from_metadata(parsed.user_metadata.as_ref(), &shared.config) {
        Ok(o) => o,
        Err(message) => return error(StatusCode::BAD_REQUEST, "ValidationError", message),
    };

    let key = match idempotency_key(&headers) {
        Ok(k) => k,
        Err(refusal) => return refusal,
    };
    // Before the key store: a faulted request neither records its key nor replays one.
    if let Some(status) = shared.faults.take_create() {
        return injected_create_fault(status, &shared);
    }
    let guard = match key.map(|k| shared.idempotency_begin(k)) {
        None => None,
        Some(IdempotencyBegin::Fresh(guard)) => Some(guard),
        Some(IdempotencyBegin::Done(first)) => {
            return (StatusCode::CREATED, Json(first)).into_response();
        }
        Some(IdempotencyBegin::InProgress) => {
            return (
                StatusCode::CONFLICT,
                Json(json!({
                    "error": "a create with this Idempotency-Key is still in progress",
                    "code": "IdempotencyKeyInUse",
                    "retryable": true,
                })),
            )
                .into_response();
        }
    };

    let host = request_host(&headers, &shared);
    match shared
        .create(parsed.user_metadata, overrides, deadline)
        .await
    {
        Ok(session) => {
            let mut body = session_json(&session, &host, "active");
            if let Some(obj) = body.as_object_mut() {
                obj.insert("sessionId".into(), Value::String(session.id.to_string()));
            }
            if let Some(guard) = guard {
                guard.complete(body.clone());
            }
            (StatusCode::CREATED, Json(body)).into_response()
        }
        Err(e) => create_failed(e),
    }
}

/// A session's deadline from `timeoutSeconds` (none for 0 or absent), or the refusal of one
/// too short.
#[allow(clippy::result_large_err)] // the refusal goes straight back to axum as the answer
fn deadline(timeout_seconds: Option<u32>) -> Result<Option<Duration>, Response> {
    match timeout_seconds {
        None | Some(0) => Ok(None),
        Some(s) if s < MIN_TIMEOUT_SECONDS => Err(error(
            StatusCode::BAD_REQUEST,
            "ValidationError",
            format!("timeoutSeconds must be at least {MIN_TIMEOUT_SECONDS}, got {s}"),
        )),
        Some(s) => Ok(Some(Duration::from_secs(u64::from(s)))),
    }
}

/// The request's `Idempotency-Key`, if any, or the refusal of one that is empty, too long or
/// not visible ASCII.
#[allow(clippy::result_large_err)] // the refusal goes straight back to axum as the answer
fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, Response> {
    match headers.get("idempotency-key").map(HeaderValue::to_str) {
        None => Ok(None),
        Some(Ok(k)) if !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY => Ok(Some(k)),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "ValidationError",
            format!("Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
        )),
    }
}

/// The answer to a create the registry could not do.
fn create_failed(e: CreateError) -> Response {
    match e {
        CreateError::Concurrency { max } => concurrency_limit(max),
        CreateError::ShuttingDown => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "error": "the gateway is shutting down",
                "code": "ShuttingDown",
                "retryable": false,
            })),
        )
            .into_response(),
        CreateError::Launch(e) => {
            tracing::warn!(error = %e, "chromium launch failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "BrowserUnhealthy",
                format!("could not start a browser: {e}"),
            )
        }
    }
}

fn concurrency_limit(max: usize) -> Response {
    error(
        StatusCode::TOO_MANY_REQUESTS,
        "ConcurrencyLimitExceeded",
        format!("at most {max} sessions at once; release one first"),
    )
}

/// The answer of a faulted create: what a real refusal with this status looks like.
fn injected_create_fault(status: u16, shared: &Shared) -> Response {
    tracing::info!(status, "create answered with an injected fault");
    match status {
        429 => concurrency_limit(shared.config.max_sessions),
        503 => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "BrowserUnhealthy",
            "could not start a browser: injected fault",
        ),
        _ => injected(status),
    }
}

/// An empty body means all defaults; anything else must be a JSON object. The error is the
/// `code` and message of a 400.
fn parse_create_body(body: &[u8]) -> Result<CreateBody, (&'static str, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CreateBody::default());
    }
    let value = json_object(body)?;
    CreateBody::deserialize(value).map_err(|e| ("ValidationError", e.to_string()))
}

/// The wire status of a session. A dead session is still "active" unless the gateway is
/// honest.
fn wire_status(phase: Phase, honest: bool) -> &'static str {
    match phase {
        Phase::Live => "active",
        Phase::Dead(_) if honest => "ended",
        Phase::Dead(_) => "active",
        Phase::Released => "released",
    }
}

/// A session as `GET /sessions/:id` shows it, with the given wire status.
fn session_json(s: &Snapshot, host: &str, status: &str) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), Value::String(s.id.to_string()));
    obj.insert("status".into(), Value::String(status.into()));
    obj.insert("kind".into(), Value::String("fast".into()));
    obj.insert("org".into(), Value::String("local".into()));
    obj.insert("createdAt".into(), Value::String(iso8601(s.created)));
    obj.insert("expiresAt".into(), Value::String(iso8601(s.expires)));
    if let Some(m) = &s.metadata {
        obj.insert("userMetadata".into(), Value::Object(m.clone()));
    }
    if status == "active" {
        let url = format!("ws://{host}/cdp/{}?token={}", s.id, s.token);
        obj.insert("wsEndpoint".into(), Value::String(url.clone()));
        obj.insert("cdpEndpoint".into(), Value::String(url));
    }
    Value::Object(obj)
}

pub(super) async fn get_session(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let Some(session) = parse_id(id).and_then(|id| shared.get(id)) else {
        return invalid_session_id();
    };
    let host = request_host(&headers, &shared);
    let status = wire_status(session.phase, shared.config.honest);
    Json(session_json(&session, &host, status)).into_response()
}

/// `GET /sessions` query: a page size, a cursor, and the metadata filter.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
    q: Option<String>,
}

pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "ValidationError",
            "malformed query string",
        );
    };
    let limit = match query.limit.as_deref().map(str::parse::<usize>) {
        None => DEFAULT_PAGE,
        Some(Ok(n)) if (1..=MAX_PAGE).contains(&n) => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "ValidationError",
                format!("limit must be 1-{MAX_PAGE}"),
            );
        }
    };
    let start = match query.cursor.as_deref().map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return error(StatusCode::BAD_REQUEST, "ValidationError", "unknown cursor");
        }
    };
    let filter = match query.q.as_deref().map(parse_metadata_filter) {
        None => Vec::new(),
        Some(Ok(f)) => f,
        Some(Err(message)) => return error(StatusCode::BAD_REQUEST, "ValidationError", message),
    };

    let honest = shared.config.honest;
    let matching: Vec<Snapshot> = shared
        .list()
        .into_iter()
        .filter(|s| {
            filter.iter().all(|(k, v)| {
                s.metadata
                    .as_ref()
                    .and_then(|m| m.get(k))
                    .and_then(Value::as_str)
                    == Some(v.as_str())
            })
        })
        .collect();
    let rows: Vec<Value> = matching
        .iter()
        .skip(start)
        .take(limit)
        .map(|s| {
            let mut row = Map::new();
            row.insert("id".into(), Value::String(s.id.to_string()));
            row.insert(
                "status".into(),
                Value::String(wire_status(s.phase, honest).into()),
            );
            row.insert("kind".into(), Value::String("fast".into()));
            row.insert("createdAt".into(), Value::String(iso8601(s.created)));
            row.insert("expiresAt".into(), Value::String(iso8601(s.expires)));
            if let Some(m) = &s.metadata {
                row.insert("userMetadata".into(), Value::Object(m.clone()));
            }
            Value::Object(row)
        })
        .collect();
    let next = start + rows.len();
    let next_cursor = (next < matching.len()).then(|| next.to_string());
    Json(json!({ "sessions": rows, "nextCursor": next_cursor })).into_response()
}

/// Parses Solari's list filter: `user_metadata['k']:'v'` clauses joined by ` AND `.
fn parse_metadata_filter(q: &str) -> Result<Vec<(String, String)>, String> {
    let bad = || format!("q must be user_metadata['key']:'value' clauses joined by AND, got {q:?}");
    q.split(" AND ")
        .map(|clause| {
            let rest = clause
                .trim()
                .strip_prefix("user_metadata['")
                .and_then(|r| r.strip_suffix('\''))
                .ok_or_else(bad)?;
            let (k, v) = rest.split_once("']:'").ok_or_else(bad)?;
            if k.is_empty() || k.contains('\'') || v.contains('\'') {
                return Err(bad());
            }
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

pub(super) async fn release(
    State(shared): State<Arc<Shared>>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let Some(id) = parse_id(id).filter(|id| shared.issued(*id)) else {
        return invalid_session_id();
    };
    if let Some(fault) = shared.faults.take_delete() {
        return faulted_release(&shared, id, fault).await;
    }
    if shared.release(id).await {
        StatusCode::NO_CONTENT.into_response()
    } else {
        invalid_session_id()
    }
}

/// A faulted `DELETE`: the answer is the fault, not the cleanup. The browser dies anyway so
/// that nothing leaks; the session stays unreleased (dead) until a delete that is not faulted.
async fn faulted_release(shared: &Shared, id: Uuid, fault: DeleteFault) -> Response {
    tracing::info!(session = %id, ?fault, "delete answered with an injected fault");
    // `Ended`: already dead or released; either way no browser is left.
    let _ = shared.kill(id, Some(Death::Close)).await;
    match fault {
        DeleteFault::Status(status) => injected(status),
        // Dropped with its connection when the client gives up or the gateway stops.
        DeleteFault::Hang => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_metadata_filter() {
        assert_eq!(
            parse_metadata_filter("user_metadata['env']:'prod' AND user_metadata['team']:'x'")
                .unwrap(),
            vec![
                ("env".to_owned(), "prod".to_owned()),
                ("team".to_owned(), "x".to_owned())
            ]
        );
        for bad in [
            "",
            "env:prod",
            "user_metadata['']:'x'",
            "user_metadata['a']:'b",
        ] {
            assert!(parse_metadata_filter(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn create_bodies_must_be_empty_or_an_object() {
        assert!(parse_create_body(b"").is_ok());
        assert!(parse_create_body(b" {} ").is_ok());
        let code = |body: &[u8]| parse_create_body(body).unwrap_err().0;
        assert_eq!(code(b"{\"timeoutSeconds\":"), "InvalidJson");
        assert_eq!(code(b"[]"), "ValidationError");
        assert_eq!(code(b"null"), "ValidationError");
        assert_eq!(code(b"{\"userMetadata\": 3}"), "ValidationError");
    }

    #[test]
    fn dead_sessions_look_active_unless_honest() {
        let dead = Phase::Dead(Death::Reset);
        assert_eq!(wire_status(dead, false), "active");
        assert_eq!(wire_status(dead, true), "ended");
        assert_eq!(wire_status(Phase::Released, false), "released");
    }
}
