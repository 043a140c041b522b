//! The caller's tracing context, kept. outlive's background tasks (the relay above all) log
//! inside the run's span, so two runs in one process can be told apart. The task runs in
//! the caller's span, with the run's spans between, for `Span::current()` and for
//! `tracing-opentelemetry` alike. Real Chromium.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outlive::chromiumoxide::error::CdpError;
use outlive::{LocalChromium, Options, outlive, outlive_with_event};
use outlive_testkit::Captured;
use support::Profiles;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// A run that asks the browser one thing and returns.
async fn one_evaluation(provider: &LocalChromium) -> outlive::WideEvent {
    let outlive::Reported { result, event } = outlive_with_event(
        provider,
        |page, _ctx| async move { Ok::<u32, CdpError>(page.evaluate("6 * 7").await?.into_value()?) },
        Options::new(),
    )
    .await;
    assert_eq!(result.unwrap(), 42);
    event
}

#[tokio::test(flavor = "current_thread")]
async fn relay_lines_carry_their_runs_id() {
    let (captured, _guard) = Captured::trace_on_this_thread();
    let profiles = Profiles::new();
    let provider = LocalChromium::new().profile_root(profiles.path());

    // Two runs at once, in one process: each relay's lines must say whose they are.
    let (a, b) = tokio::join!(one_evaluation(&provider), one_evaluation(&provider));
    assert_ne!(a.run_id, b.run_id);

    let logs = captured.text();
    let frames: Vec<&str> = logs.lines().filter(|l| l.contains("cdp frame")).collect();
    assert!(frames.len() > 4, "the relay logged its frames:\n{logs}");
    let mut seen = HashSet::new();
    for line in &frames {
        let ids: Vec<&String> = [&a.run_id, &b.run_id]
            .into_iter()
            .filter(|id| line.contains(&format!("outlive{{run_id={id}}}")))
            .collect();
        assert_eq!(ids.len(), 1, "a relay line in one run's span: {line}");
        seen.insert(ids[0].clone());
    }
    assert_eq!(seen.len(), 2, "both relays logged: {frames:#?}");
    profiles.assert_nothing_left();
}

/// What the task saw of the tracer.
struct Seen {
    trace_id: TraceId,
    span_id: SpanId,
}

#[tokio::test(flavor = "current_thread")]
async fn the_tasks_spans_are_the_callers_in_opentelemetry() {
    let exporter = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let profiles = Profiles::new();
    let provider = LocalChromium::new().profile_root(profiles.path());

    let caller = tracing::info_span!("caller");
    let caller_trace = caller.context().span().span_context().trace_id();
    assert_ne!(caller_trace, TraceId::INVALID);
    let seen = outlive(
        &provider,
        |page, _ctx| async move {
            // What a task does to carry its trace on, e.g. into a request's headers.
            let cx = Span::current().context();
            let seen = Seen {
                trace_id: cx.span().span_context().trace_id(),
                span_id: cx.span().span_context().span_id(),
            };
            page.evaluate("1")
                .instrument(tracing::info_span!("step"))
                .await?;
            // Work the task hands to a task of its own, in its span.
            tokio::spawn(
                async { tracing::info_span!("spawned").in_scope(|| ()) }.in_current_span(),
            )
            .await
            .expect("the spawned work ran");
            Ok::<_, CdpError>(seen)
        },
        Options::new(),
    )
    .instrument(caller.clone())
    .await
    .unwrap();
    drop(caller);
    assert_eq!(
        seen.trace_id, caller_trace,
        "the task sees the caller's trace"
    );

    // A span is exported when it closes; the run's closes when its last background task ends.
    let spans = finished(
        &exporter,
        &["caller", "outlive", "entry", "step", "spawned"],
    )
    .await;
    let by_name = |name: &str| spans.iter().find(|s| s.name == name).unwrap();
    let (caller, run, entry) = (by_name("caller"), by_name("outlive"), by_name("entry"));
    assert_eq!(run.parent_span_id, caller.span_context.span_id());
    assert_eq!(entry.parent_span_id, run.span_context.span_id());
    assert_eq!(
        seen.span_id,
        entry.span_context.span_id(),
        "the task's current span is its entry's"
    );
    for name in ["step", "spawned"] {
        let span = by_name(name);
        assert_eq!(span.parent_span_id, entry.span_context.span_id(), "{name}");
        assert_eq!(span.span_context.trace_id(), caller_trace, "{name}");
    }
    profiles.assert_nothing_left();
}

/// The exported spans, once all of `names` are among them (within 10 s; the runtime runs the
/// tasks that hold spans open meanwhile).
async fn finished(exporter: &InMemorySpanExporter, names: &[&str]) -> Vec<SpanData> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let spans = exporter.get_finished_spans().unwrap();
        let missing: Vec<_> = names
            .iter()
            .filter(|n| !spans.iter().any(|s| s.name == **n))
            .collect();
        if missing.is_empty() {
            return spans;
        }
        assert!(Instant::now() < deadline, "spans never closed: {missing:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
