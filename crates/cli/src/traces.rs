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

/// The variables that turn traces on, the one that wins first.
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Why traces are off though asked for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint is https: the exporter is built without TLS.
    #[error("OTLP over https is not built in; use a local collector over http")]
    Https,
    /// The exporter could not be built.
    #[error(transparent)]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Whether the environment (`var`) asks for traces: an endpoint set, and the SDK not
/// disabled. An https endpoint is an error.
fn wanted(var: impl Fn(&str) -> Option<String>) -> Result<bool, Error> {
    let value = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if value("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    // The traces endpoint wins over the general one.
    let Some(endpoint) = ENDPOINTS.iter().find_map(|name| value(name)) else {
        return Ok(false);
    };
    let scheme = endpoint.trim().split("://").next().unwrap_or_default();
    if scheme.eq_ignore_ascii_case("https") {
        return Err(Error::Https);
    }
    Ok(true)
}

/// The exporter of a process's traces. Dropping it flushes the queue (within [`FLUSH`]) and
/// ends the exporting thread.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter the environment asks for: `None` when no OTLP endpoint is set, or when
    /// `OTEL_SDK_DISABLED` is `true`.
    ///
    /// # Errors
    ///
    /// The endpoint is https (not built in), or the exporter could not be built (an endpoint
    /// that is not a URL, say).
    pub fn from_env() -> Result<Option<Traces>, Error> {
        let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
        if !wanted(|var| std::env::var(var).ok())? {
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
        // The run's tasks enter its span at every poll: no busy/idle timing and no context
        // activation there (nothing here reads `Context::current()`), so a span costs little.
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted_with(vars: &[(&str, &str)]) -> Result<bool, Error> {
        wanted(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn an_http_endpoint_turns_traces_on_and_nothing_else_does() {
        let http = "http://127.0.0.1:4318";
        assert!(!wanted_with(&[]).unwrap());
        assert!(!wanted_with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap());
        assert!(wanted_with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", http)]).unwrap());
        assert!(wanted_with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", http)]).unwrap());
        for disabled in ["true", "TRUE"] {
            let vars = [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", http),
                ("OTEL_SDK_DISABLED", disabled),
            ];
            assert!(!wanted_with(&vars).unwrap());
        }
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", http),
            ("OTEL_SDK_DISABLED", "false"),
        ];
        assert!(wanted_with(&vars).unwrap());
    }

    #[test]
    fn an_https_endpoint_is_refused_with_a_clear_error() {
        for vars in [
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")],
            vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "HTTPS://collector")],
            vec![
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ],
        ] {
            let refused = wanted_with(&vars).unwrap_err();
            assert!(matches!(refused, Error::Https), "{vars:?}");
            assert!(
                refused
                    .to_string()
                    .contains("use a local collector over http")
            );
        }
        // The traces endpoint wins: an https general one is not used.
        let vars = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector"),
        ];
        assert!(wanted_with(&vars).unwrap());
    }
}
