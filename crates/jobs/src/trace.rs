//! A durable run's trace across the workers that take it.
//!
//! Each pickup of a run runs in a `job` span. The first pickup stores its span's W3C trace
//! context in the run's row (`outlive_runs.traceparent`); a later one, a takeover, parents its
//! `job` span on it. So a run is one trace however many workers had it. Without an
//! OpenTelemetry layer in the process, nothing is stored and nothing is parented.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use sqlx::PgPool;
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
}

/// The `job` span of one pickup, in the run's trace: parented on the context the run's row
/// holds, or (the first pickup) a new trace whose context the row keeps from now on. A
/// database error leaves the span where it is: the run goes on.
pub(crate) async fn pickup_span(pool: &PgPool, pickup: &Pickup<'_>) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "job",
        run_id = pickup.run_id,
        task = pickup.task,
        pickup = pickup.pickup,
        worker = pickup.worker,
        ended = tracing::field::Empty,
    );
    let stored: Result<Option<Option<String>>, sqlx::Error> =
        sqlx::query_scalar("SELECT traceparent FROM outlive_runs WHERE run_id = $1")
            .bind(pickup.run_id)
            .fetch_optional(pool)
            .await;
    match stored {
        Ok(Some(Some(stored))) => match parse(&stored) {
            Some(parent) => {
                let parent = opentelemetry::Context::new().with_remote_span_context(parent);
                if let Err(e) = span.set_parent(parent) {
                    tracing::debug!(error = %e, "the run's trace is not continued");
                }
            }
            None => tracing::debug!("the run's stored trace context does not parse"),
        },
        Ok(_) => store(pool, pickup.run_id, &span).await,
        Err(e) => tracing::debug!(error = %e, "could not read the run's trace context"),
    }
    span
}

/// Keeps the context of `span` in the run's row, unless the row has one already.
async fn store(pool: &PgPool, run_id: &str, span: &tracing::Span) {
    let Some(traceparent) = format(span.context().span().span_context()) else {
        return;
    };
    let stored = sqlx::query(
        "UPDATE outlive_runs SET traceparent = $2 WHERE run_id = $1 AND traceparent IS NULL",
    )
    .bind(run_id)
    .bind(traceparent)
    .execute(pool)
    .await;
    if let Err(e) = stored {
        tracing::debug!(error = %e, "could not keep the run's trace context");
    }
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
