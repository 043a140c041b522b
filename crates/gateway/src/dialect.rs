//! The clouds' own session APIs, each under a prefix named for the cloud, in front of the same
//! sessions, Chromiums and deaths as the Solari contract: so a client of each cloud is tested
//! end to end offline. The shapes are written here from the clouds' SDKs on their own,
//! independently of outlive's `Dialect` table, so that a mistake in one shows against the
//! other. Errors are JSON `{"error", "message", "statusCode"}`; clients rely on the status.
//!
//! | prefix | create | CDP URL | release | lifetime field |
//! |---|---|---|---|---|
//! | `/browserbase` | `POST /v1/sessions`, `X-BB-API-Key` | `connectUrl` | `POST /v1/sessions/{id}` `{"status":"REQUEST_RELEASE"}` | `timeout` s |
//! | `/steel` | `POST /v1/sessions`, `steel-api-key` | `websocketUrl` (+ `apiKey`) | `POST /v1/sessions/{id}/release` | `timeout` ms |
//! | `/browserless` | `POST /session?token=` | `browserWSEndpoint` (+ `token`) | `DELETE /session/{id}?token=` | `ttl` ms |
//! | `/hyperbrowser` | `POST /api/session`, `x-api-key` | `wsEndpoint` | `PUT /api/session/{id}/stop` | `timeoutMinutes` |
//! | `/anchor` | `POST /v1/sessions`, `anchor-api-key` | `data.cdp_url` | `DELETE /v1/sessions/{id}` | `session.timeout.max_duration` min |
//! | `/kernel` | `POST /browsers`, Bearer | `cdp_ws_url` (id `session_id`) | `DELETE /browsers/{id}` | none |
//! | `/notte` | `POST /sessions/start`, Bearer | none: `GET /sessions/{id}/debug` → `ws.cdp` | `DELETE /sessions/{id}/stop` | `max_duration_minutes` |

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use serde_json::{Map, Value, json};

use crate::chaos::Overrides;
use crate::fault::DeleteFault;
use crate::session::{CreateError, Shared, Snapshot, constant_time_eq, parse_session_id};

#[derive(Clone, Copy)]
enum Auth {
    Header(&'static str),
    Bearer,
    Query(&'static str),
}

#[derive(Clone, Copy)]
enum Verb {
    Post,
    Put,
    Delete,
}

/// One cloud's API, as this gateway serves it.
struct Shape {
    prefix: &'static str,
    auth: Auth,
    create: &'static str,
    id_field: &'static str,
    /// `None`: left out of the create's answer, served at `lookup` instead.
    cdp_field: Option<&'static str>,
    lookup: Option<(&'static str, &'static str)>,
    release: (Verb, &'static str),
    /// The CDP URL carries no capability of its own: the client adds the account's key.
    key_opens: bool,
    /// The create body's lifetime field and how many milliseconds its unit is.
    lifetime: Option<(&'static str, u64)>,
}

const SHAPES: [Shape; 7] = [
    Shape {
        prefix: "browserbase",
        auth: Auth::Header("x-bb-api-key"),
        create: "/v1/sessions",
        id_field: "id",
        cdp_field: Some("connectUrl"),
        lookup: None,
        release: (Verb::Post, "/v1/sessions/{id}"),
        key_opens: false,
        lifetime: Some(("timeout", 1000)),
    },
    Shape {
        prefix: "steel",
        auth: Auth::Header("steel-api-key"),
        create: "/v1/sessions",
        id_field: "id",
        cdp_field: Some("websocketUrl"),
        lookup: None,
        release: (Verb::Post, "/v1/sessions/{id}/release"),
        key_opens: false,
        lifetime: Some(("timeout", 1)),
    },
    Shape {
        prefix: "browserless",
        auth: Auth::Query("token"),
        create: "/session",
        id_field: "id",
        cdp_field: Some("browserWSEndpoint"),
        lookup: None,
        release: (Verb::Delete, "/session/{id}"),
        key_opens: true,
        lifetime: Some(("ttl", 1)),
    },
    Shape {
        prefix: "hyperbrowser",
        auth: Auth::Header("x-api-key"),
        create: "/api/session",
        id_field: "id",
        cdp_field: Some("wsEndpoint"),
        lookup: None,
        release: (Verb::Put, "/api/session/{id}/stop"),
        key_opens: false,
        lifetime: Some(("timeoutMinutes", 60_000)),
    },
    Shape {
        prefix: "anchor",
        auth: Auth::Header("anchor-api-key"),
        create: "/v1/sessions",
        id_field: "data.id",
        cdp_field: Some("data.cdp_url"),
        lookup: None,
        release: (Verb::Delete, "/v1/sessions/{id}"),
        key_opens: false,
        lifetime: Some(("session.timeout.max_duration", 60_000)),
    },
    Shape {
        prefix: "kernel",
        auth: Auth::Bearer,
        create: "/browsers",
        id_field: "session_id",
        cdp_field: Some("cdp_ws_url"),
        lookup: None,
        release: (Verb::Delete, "/browsers/{id}"),
        key_opens: false,
        lifetime: None,
    },
    Shape {
        prefix: "notte",
        auth: Auth::Bearer,
        create: "/sessions/start",
        id_field: "session_id",
        cdp_field: None,
        lookup: Some(("/sessions/{id}/debug", "ws.cdp")),
        release: (Verb::Delete, "/sessions/{id}/stop"),
        key_opens: false,
        lifetime: Some(("max_duration_minutes", 60_000)),
    },
];

/// The names of the dialects served, each the prefix of its routes.
pub const DIALECTS: [&str; 7] = [
    "browserbase",
    "steel",
    "browserless",
    "hyperbrowser",
    "anchor",
    "kernel",
    "notte",
];

type Ctx = (Arc<Shared>, &'static Shape);

/// Every dialect's routes, under its prefix.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(shared: Arc<Shared>) -> Router<S> {
    let mut router = Router::new();
    for shape in &SHAPES {
        let ctx: Ctx = (shared.clone(), shape);
        let (verb, path) = shape.release;
        let release: MethodRouter<Ctx> = match verb {
            Verb::Post => post(release),
            Verb::Put => put(release),
            Verb::Delete => delete(release),
        };
        let mut routes = Router::new()
            .route(shape.create, post(create))
            .route(path, release);
        if let Some((lookup, _)) = shape.lookup {
            routes = routes.route(lookup, get(look_up));
        }
        router = router.nest(&format!("/{}", shape.prefix), routes.with_state(ctx));
    }
    router
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    let body = json!({"error": message, "message": message, "statusCode": status.as_u16()});
    (status, Json(body)).into_response()
}

/// Whether the request carries the gateway's key where the dialect wants it.
fn authorised(
    shape: &Shape,
    shared: &Shared,
    headers: &HeaderMap,
    query: &Map<String, Value>,
) -> bool {
    let presented = match shape.auth {
        Auth::Header(name) => headers.get(name).and_then(|v| v.to_str().ok()),
        Auth::Bearer => headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ")),
        Auth::Query(param) => query.get(param).and_then(Value::as_str),
    };
    presented.is_some_and(|k| constant_time_eq(k.as_bytes(), shared.config.api_key.as_bytes()))
}

/// What the handlers know of a request before their own extractors: its dialect, the gateway,
/// the headers, and whether the key is where the dialect wants it. Each handler refuses a
/// missing key itself, once its own extractors ran: a bad path or body is answered first.
struct Caller {
    shared: Arc<Shared>,
    shape: &'static Shape,
    headers: HeaderMap,
    authorised: bool,
}

impl FromRequestParts<Ctx> for Caller {
    type Rejection = QueryRejection;

    async fn from_request_parts(parts: &mut Parts, ctx: &Ctx) -> Result<Self, QueryRejection> {
        let (shared, shape) = ctx.clone();
        let Query(query) = Query::<Map<String, Value>>::try_from_uri(&parts.uri)?;
        let authorised = authorised(shape, &shared, &parts.headers, &query);
        Ok(Caller {
            shared,
            shape,
            headers: parts.headers.clone(),
            authorised,
        })
    }
}

fn unauthorised() -> Response {
    error(StatusCode::UNAUTHORIZED, "missing or wrong API key")
}

async fn create(caller: Caller, body: Bytes) -> Response {
    if !caller.authorised {
        return unauthorised();
    }
    let (shared, shape) = (caller.shared, caller.shape);
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return error(StatusCode::BAD_REQUEST, "the body must be a JSON object"),
        }
    };
    let deadline = match shape.lifetime {
        None => None,
        Some((field, unit_ms)) => match dotted(&body, field) {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Some(Duration::from_millis(n * unit_ms)),
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("{field} must be a positive whole number"),
                    );
                }
            },
        },
    };
    if let Some(status) = shared.faults.take_create() {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(code, "injected fault");
    }
    let overrides = match Overrides::from_metadata(None, &shared.config) {
        Ok(o) => o,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let host = crate::relay::request_host(&caller.headers, &shared);
    match shared.create(None, overrides, deadline).await {
        Ok(session) => (StatusCode::CREATED, Json(created(shape, &session, &host))).into_response(),
        Err(CreateError::Concurrency { max }) => error(
            StatusCode::TOO_MANY_REQUESTS,
            format!("at most {max} sessions at once"),
        ),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no browser: {e:?}"),
        ),
    }
}

/// The create's answer: the id, and the CDP URL unless the dialect looks it up.
fn created(shape: &Shape, session: &Snapshot, host: &str) -> Value {
    let mut body = Value::Object(Map::new());
    set_dotted(&mut body, shape.id_field, session.id.to_string().into());
    if let Some(field) = shape.cdp_field {
        set_dotted(&mut body, field, cdp_url(shape, session, host).into());
    }
    body
}

fn cdp_url(shape: &Shape, session: &Snapshot, host: &str) -> String {
    if shape.key_opens {
        return format!("ws://{host}/cdp/{}", session.id);
    }
    format!("ws://{host}/cdp/{}?token={}", session.id, session.token)
}

async fn look_up(caller: Caller, Path(id): Path<String>) -> Response {
    if !caller.authorised {
        return unauthorised();
    }
    let Some(session) = parse_session_id(&id).and_then(|id| caller.shared.get(id)) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    let host = crate::relay::request_host(&caller.headers, &caller.shared);
    let mut body = Value::Object(Map::new());
    if let Some((_, field)) = caller.shape.lookup {
        set_dotted(
            &mut body,
            field,
            cdp_url(caller.shape, &session, &host).into(),
        );
    }
    Json(body).into_response()
}

async fn release(caller: Caller, Path(id): Path<String>) -> Response {
    if !caller.authorised {
        return unauthorised();
    }
    let shared = caller.shared;
    let Some(id) = parse_session_id(&id).filter(|id| shared.issued(*id)) else {
        return error(StatusCode::NOT_FOUND, "no such session");
    };
    if let Some(fault) = shared.faults.take_delete() {
        let _ = shared.kill(id, Some(crate::chaos::Death::Close)).await;
        return match fault {
            DeleteFault::Status(status) => error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                "injected fault",
            ),
            DeleteFault::Hang => std::future::pending().await,
        };
    }
    if shared.release(id).await {
        Json(json!({"id": id.to_string(), "success": true})).into_response()
    } else {
        error(StatusCode::NOT_FOUND, "no such session")
    }
}

fn dotted<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |v, key| v.get(key))
}

fn set_dotted(value: &mut Value, path: &str, to: Value) {
    let mut at = value;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        let Some(obj) = at.as_object_mut() else {
            return;
        };
        if keys.peek().is_none() {
            obj.insert(key.to_owned(), to);
            return;
        }
        at = obj.entry(key).or_insert_with(|| Value::Object(Map::new()));
    }
}
