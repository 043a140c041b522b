//! A durable run's trace across the workers that take it.
//!
//! Each pickup of a run runs in a `job` span. The first pickup makes the trace's root, a short
//! `run` span that ends (and is exported) at once. It stores the root's W3C trace context in
//! the run's row (`outlive_runs.traceparent`). Every pickup's `job` span is the root's child,
//! a takeover's too, through the context the claim reads back. So a run is one trace, with its
//! root, however many workers had it, even one killed. Without an OpenTelemetry layer in the
//! process, nothing is stored.

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use sqlx::PgPool;
use std::time::Duration;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// For a runs table created before traces.
pub(crate) const TRACEPARENT_COLUMN: &str =
    "ALTER TABLE outlive_runs ADD COLUMN IF NOT EXISTS traceparent text";

/// What a pickup is, for its span.
pub(crate) struct Pickup<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) task: &'a str,
    pub(crate) pickup: i32,
    pub(crate) worker: &'a str,
    /// The run's trace context, as the claim read it from the row.
    pub(crate) traceparent: Option<&'a str>,
}

/// The `job` span of one pickup, in the run's trace, parented on the context the row holds.
/// When it holds none (the first pickup), the parent is a new `run` root span, ended at once,
/// whose context the row keeps from now on. Storing it is bounded by `limit`; a database error or
/// a timeout leaves the takeovers out of this trace, and the run goes on. Without an
/// OpenTelemetry layer, nothing is stored.
pub(crate) async fn pickup_span(pool: &PgPool, pickup: &Pickup<'_>, limit: Duration) -> Span {
    let parent = match pickup.traceparent {
        Some(stored) => match parse(stored) {
            Some(parent) => Some(Context::new().with_remote_span_context(parent)),
            None => {
                tracing::debug!("the run's stored trace context does not parse");
                None
            }
        },
        None => root(pool, pickup, limit).await,
    };
    let span = tracing::info_span!(
        parent: None,
        "job",
        run_id = pickup.run_id,
        task = pickup.task,
        pickup = pickup.pickup,
        worker = pickup.worker,
        ended = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = parent
        && let Err(e) = span.set_parent(parent)
    {
        tracing::debug!(error = %e, "the run's trace is not continued");
    }
    span
}

/// The run's root: a `run` span, ended (so exported) at once, its context kept in the run's
/// row (unless the row has one already). `None` without an OpenTelemetry layer.
async fn root(pool: &PgPool, pickup: &Pickup<'_>, limit: Duration) -> Option<Context> {
    let root = tracing::info_span!(
        parent: None,
        "run",
        run_id = pickup.run_id,
        task = pickup.task,
    );
    let context = root.context();
    drop(root);
    let traceparent = format(context.span().span_context())?;
    let stored = sqlx::query(
        "UPDATE outlive_runs SET traceparent = $2 WHERE run_id = $1 AND traceparent IS NULL",
    )
    .bind(pickup.run_id)
    .bind(traceparent)
    .execute(pool);
    match tokio::time::timeout(limit, stored).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not keep the run's trace context"),
        Err(_) => tracing::debug!(?limit, "keeping the run's trace context timed out"),
    }
    Some(context)
}

/// `00-TRACE-SPAN-FLAGS`, the W3C `traceparent` of a valid context.
fn format(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The remote context a W3C `traceparent` (version 00) names.
fn parse(traceparent: &str) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_goes_and_comes_back() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse(text).expect("parses");
        assert!(context.is_remote());
        assert_eq!(format(&context).as_deref(), Some(text));
    }

    #[test]
    fn a_malformed_traceparent_is_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
        assert!(format(&SpanContext::empty_context()).is_none());
    }
}
