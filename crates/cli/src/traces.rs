//! OpenTelemetry traces: outlive's spans sent to an OTLP/HTTP collector when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) says where.
//!
//! Spans go through a batch processor with a bounded queue, exported from a thread of its own.
//! A collector that is down or slow loses spans (the queue is full, new ones are dropped); the
//! run never waits for it. [`Traces`] sends what is queued when dropped, within [`FLUSH`].
//! `docs/traces.md` lists the spans and their attributes.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// How long the exit waits for the last spans to reach the collector.
pub const FLUSH: Duration = Duration::from_secs(3);

/// The service name when `OTEL_SERVICE_NAME` is not set.
pub const SERVICE_NAME: &str = "outlive";

/// The variables that turn traces on.
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The exporter of a process's traces. Dropping it flushes the queue (within [`FLUSH`]) and
/// ends the exporting thread.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter the environment asks for: `None` when no OTLP endpoint is set.
    ///
    /// # Errors
    ///
    /// The exporter could not be built (an endpoint that is not a URL, say).
    pub fn from_env() -> Result<Option<Traces>, opentelemetry_otlp::ExporterBuildError> {
        let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
        if !ENDPOINTS.iter().any(|var| set(var)) {
            return Ok(None);
        }
        // Endpoint, headers and timeout from the standard variables.
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()?;
        // Queue size, batch size and delay from the `OTEL_BSP_*` variables.
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(BatchConfigBuilder::default().build())
            .build();
        let mut resource = Resource::builder()
            .with_attribute(KeyValue::new("process.pid", i64::from(std::process::id())));
        if !set("OTEL_SERVICE_NAME") {
            resource = resource.with_service_name(SERVICE_NAME);
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_resource(resource.build())
            .build();
        Ok(Some(Traces { provider }))
    }

    /// The layer that turns outlive's `tracing` spans into OpenTelemetry spans: those of the
    /// `outlive*` crates, at INFO and above.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("outlive");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(Targets::new().with_target("outlive", LevelFilter::INFO))
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown_with_timeout(FLUSH) {
            tracing::debug!(error = %e, "the last spans may not have reached the collector");
        }
    }
}
