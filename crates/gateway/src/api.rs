//! The REST surface: Solari's session contract, plus the `/__chaos` controls.
//!
//! Every error is JSON `{"error": <message>, "code": <code>}`, which is what the
//! `solari-browser` client parses into `SolariError::Api { status, code, .. }`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, HOST};
use axum::http::{HeaderMap, HeaderValue, StatusCode, uri::Authority};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::chaos::{Death, Overrides};
use crate::config::DeathMode;
use crate::error::json_error as error;
use crate::fault::{self, DeleteFault, Queued};
use crate::relay;
use crate::session::{
    CreateError, IdempotencyBegin, KillError, Phase, Shared, Snapshot, constant_time_eq,
    parse_session_id,
};

/// Request bodies larger than this are answered 413.
const MAX_BODY: usize = 64 * 1024;
/// Solari refuses a `timeoutSeconds` under a minute.
const MIN_TIMEOUT_SECONDS: u32 = 60;
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The whole HTTP surface of the gateway.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let authed = Router::new()
        .route("/sessions", post(create).get(list))
        .route("/sessions/{id}", get(get_session).delete(release))
        .route("/__chaos/sessions/{id}/kill", post(kill))
        .route("/__chaos/status", get(status))
        .route("/__chaos/faults", get(faults).post(set_faults))
        .route_layer(from_fn(refuse_announced_oversize))
        .route_layer(from_fn_with_state(shared.clone(), require_api_key));
    Router::new()
        .merge(authed)
        .merge(crate::dialect::routes(shared.clone()))
        .route("/cdp/{id}", get(relay::upgrade))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

fn invalid_session_id() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "InvalidSessionId",
        "no such session on this gateway",
    )
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "NotFound", "no such route")
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "this route does not take this method",
    )
}

async fn require_api_key(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    match presented {
        Some(key) if constant_time_eq(key.as_bytes(), shared.config.api_key.as_bytes()) => {
            next.run(req).await
        }
        Some(_) => error(StatusCode::UNAUTHORIZED, "Unauthorized", "wrong API key"),
        None => error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "missing API key; send Authorization: Bearer <key>",
        ),
    }
}

/// Answers 413 to a body announced larger than [`MAX_BODY`] without reading any of it: the
/// body limit alone would wait for the body, and take a client that stops sending (or
/// half-closes) for a broken request.
async fn refuse_announced_oversize(req: Request, next: Next) -> Response {
    let announced = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return payload_too_large();
    }
    next.run(req).await
}

fn payload_too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
        format!("request bodies are limited to {MAX_BODY} bytes"),
    )
}

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

async fn create(
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

/// A JSON error with `status` and the code a real one carries.
fn injected(status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error(code, fault::wire_code(status), "injected fault")
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

/// A body that must be a JSON object. The error is the `code` and message of a 400.
fn json_object(body: &[u8]) -> Result<Value, (&'static str, String)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ("InvalidJson", format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err((
            "ValidationError",
            "the body must be a JSON object".to_owned(),
        ));
    }
    Ok(value)
}

/// The request body as `parse` reads it, or the answer refusing it: `413` over the size
/// limit, `400` if it cannot be read or `parse` refuses it.
#[allow(clippy::result_large_err)] // the refusal goes straight back to axum as the answer
fn parse_body<T>(
    body: Result<Bytes, BytesRejection>,
    parse: impl FnOnce(&[u8]) -> Result<T, (&'static str, String)>,
) -> Result<T, Response> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            payload_too_large()
        } else {
            error(
                StatusCode::BAD_REQUEST,
                "InvalidBody",
                "the request body could not be read",
            )
        }
    })?;
    parse(&body).map_err(|(code, message)| error(StatusCode::BAD_REQUEST, code, message))
}

/// The authority clients reached this gateway by, for the websocket URLs it hands out.
pub(crate) fn request_host(headers: &HeaderMap, shared: &Shared) -> String {
    headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.contains('@'))
        .and_then(|h| Authority::from_str(h).ok())
        .map(|a| a.to_string())
        .unwrap_or_else(|| shared.local_addr.to_string())
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

fn parse_id(id: Result<Path<String>, PathRejection>) -> Option<Uuid> {
    let Path(id) = id.ok()?;
    parse_session_id(&id)
}

async fn get_session(
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

#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
    q: Option<String>,
}

async fn list(
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

async fn release(
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

#[derive(Debug, Deserialize)]
struct KillQuery {
    mode: Option<String>,
}

async fn kill(
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

async fn status(State(shared): State<Arc<Shared>>) -> Response {
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

async fn set_faults(
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
async fn faults(State(shared): State<Arc<Shared>>) -> Response {
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

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn iso8601(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = date_of(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn date_of(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_iso8601_utc() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(iso8601(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(iso8601(at(1_768_000_000, 0)), "2026-01-09T23:06:40.000Z");
        assert_eq!(iso8601(at(4_102_444_800, 0)), "2100-01-01T00:00:00.000Z");
    }

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
