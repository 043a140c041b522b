//! The control requests a script in any language sends the front: `checkpoint` (with its
//! progress as an optional JSON body), `hold` and `release` of the automatic checkpoints.

use http_body_util::{BodyExt, Limited};
use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming;
use serde_json::json;
use serde_json::value::RawValue;

use super::state::{Reply, State, refuse, reply};
use crate::ctx::Ctx;

/// The most progress a checkpoint request may carry.
pub const MAX_PROGRESS_BYTES: usize = 1 << 20;

/// A control request (`POST /<token>/<action>`) to the entry served now.
pub(super) async fn request(state: &State, action: &str, req: Request<Incoming>) -> Reply {
    if !matches!(action, "checkpoint" | "hold" | "release") {
        return refuse(
            StatusCode::NOT_FOUND,
            "unknown control action; use checkpoint, hold or release",
        );
    }
    let body = match Limited::new(req.into_body(), MAX_PROGRESS_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the progress is over {MAX_PROGRESS_BYTES} bytes"),
            );
        }
    };
    let Some(serving) = state.serving.borrow().clone() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "no browser is up: outlive is replacing it; this run's command ends now",
        );
    };
    match action {
        "checkpoint" => checkpoint(serving.ctx, &body).await,
        "hold" => {
            let mut holds = crate::sync::lock(&state.holds);
            holds.push(serving.ctx.hold_checkpoints());
            reply(StatusCode::OK, json!({ "held": holds.len() }))
        }
        _ => {
            let mut holds = crate::sync::lock(&state.holds);
            match holds.pop() {
                Some(_) => reply(StatusCode::OK, json!({ "held": holds.len() })),
                None => refuse(StatusCode::CONFLICT, "nothing is held"),
            }
        }
    }
}

/// A checkpoint with the body as the progress (none when empty). Answers once the capture is
/// done; if the entry ends meanwhile (a death, or a rotation at this very checkpoint), answers
/// that instead of waiting forever.
async fn checkpoint(ctx: Ctx, body: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(body);
    let progress = if text.trim().is_empty() {
        None
    } else {
        match serde_json::from_str::<Box<RawValue>>(text.trim()) {
            Ok(p) => Some(p),
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "the body is not JSON ({:?} error at line {}, column {})",
                        e.classify(),
                        e.line(),
                        e.column()
                    ),
                );
            }
        }
    };
    let retired = ctx.retired();
    let capture = async {
        match &progress {
            Some(p) => ctx.checkpoint_with(p).await,
            None => ctx.checkpoint().await,
        }
    };
    tokio::select! {
        wrote = capture => reply(StatusCode::OK, json!({ "checkpointed": wrote })),
        () = retired => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "checkpointed": false, "error": "the entry ended: the browser is being replaced and this command ends now" }),
        ),
    }
}
