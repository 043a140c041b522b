//! The REST surface: Solari's session contract, plus the `/__chaos` controls.
//!
//! Every error is JSON `{"error": <message>, "code": <code>}`, which is what the
//! `solari-browser` client parses into `SolariError::Api { status, code, .. }`. This module
//! holds the router, auth and body rules; `sessions` the session routes, `controls` the
//! `/__chaos` ones, and `timestamp` the wire time format.

mod controls;
mod sessions;
mod timestamp;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::Value;
use uuid::Uuid;

use crate::error::json_error as error;
use crate::fault;
use crate::relay;
use crate::session::{Shared, constant_time_eq, parse_session_id};
use controls::{faults, kill, set_faults, status};
use sessions::{create, get_session, list, release};

/// Request bodies larger than this are answered 413.
const MAX_BODY: usize = 64 * 1024;

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

/// A JSON error with `status` and the code a real one carries.
fn injected(status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error(code, fault::wire_code(status), "injected fault")
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

/// The route's session id, if it is one this gateway could have issued.
fn parse_id(id: Result<Path<String>, PathRejection>) -> Option<Uuid> {
    let Path(id) = id.ok()?;
    parse_session_id(&id)
}
