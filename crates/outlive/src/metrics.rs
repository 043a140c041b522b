//! [`Metrics`]: what runs do, as Prometheus metrics in a registry of the caller's.
//!
//! A run records at its events (a death, a launch, a checkpoint, an entry), as they happen,
//! never per CDP frame: each record is an atomic add, or a lookup in a small map of labels.
//! Labels are bounded: a death's cause, a provider's name, an operation. Never a run id or a
//! URL. The names and their meanings: `docs/metrics.md`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::relay::DeathCause;

/// The causes a browser death is counted under, each shown from the start (at 0).
const BROWSER_DEATHS: [DeathCause; 5] = [
    DeathCause::Closed,
    DeathCause::Reset,
    DeathCause::Silence,
    DeathCause::ProcessExit,
    DeathCause::ProbeFailed,
];

/// Where runs record their deaths, sessions, relaunches and checkpoints, as Prometheus
/// metrics. Register it once in a [`Registry`], hand a clone to each run with
/// [`Options::metrics`](crate::Options::metrics), and serve the registry where you like.
/// Cheap to clone: the metrics are shared.
///
/// The families (see `docs/metrics.md`): `outlive_deaths_total{cause}`,
/// `outlive_sessions_started_total{provider}`, `outlive_sessions_live`,
/// `outlive_relaunch_duration_seconds`, `outlive_checkpoint_duration_seconds`,
/// `outlive_checkpoint_bytes`, `outlive_redone_seconds_total`, `outlive_rotations_total`,
/// `outlive_gave_up_total` and `outlive_provider_errors_total{provider,operation}`.
///
/// ```
/// use outlive::prometheus_client::{encoding::text::encode, registry::Registry};
///
/// let mut registry = Registry::default();
/// let metrics = outlive::Metrics::register(&mut registry);
/// let options = outlive::Options::new().metrics(metrics.clone());
/// # let _ = options;
///
/// // What a `/metrics` handler answers (content type: `outlive::METRICS_CONTENT_TYPE`).
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains("outlive_deaths_total{cause=\"silence\"} 0"));
/// ```
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Families>,
}

/// The content type of the text [`prometheus_client::encoding::text::encode`] writes: the
/// `Content-Type` of a `/metrics` answer.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Families {
    deaths: Family<Cause, Counter>,
    sessions_started: Family<ProviderLabel, Counter>,
    sessions_live: Gauge,
    relaunch_duration: Histogram,
    checkpoint_duration: Histogram,
    checkpoint_bytes: Histogram,
    redone: Counter<f64, std::sync::atomic::AtomicU64>,
    rotations: Counter,
    gave_up: Counter,
    provider_errors: Family<ProviderOperation, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Cause {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOperation {
    provider: String,
    operation: &'static str,
}

/// What a provider was asked to do when it failed: the `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Launching a session.
    Launch,
    /// Reaching the session it launched (the CDP websocket, the first page).
    Connect,
    /// Releasing a session.
    Release,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Launch => "launch",
            Operation::Connect => "connect",
            Operation::Release => "release",
        }
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("sessions_live", &self.inner.sessions_live.get())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers outlive's families in `registry` (names start `outlive_`; give a registry
    /// with a prefix to add yours) and answers the handle runs record into.
    ///
    /// Register once per registry: a second handle on the same registry would add every
    /// family again.
    pub fn register(registry: &mut Registry) -> Metrics {
        let families = Families {
            deaths: Family::default(),
            sessions_started: Family::default(),
            sessions_live: Gauge::default(),
            relaunch_duration: Histogram::new([
                0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
            ]),
            checkpoint_duration: Histogram::new(exponential_buckets(0.005, 2.5, 10)),
            checkpoint_bytes: Histogram::new(exponential_buckets(1024.0, 4.0, 10)),
            redone: Counter::default(),
            rotations: Counter::default(),
            gave_up: Counter::default(),
            provider_errors: Family::default(),
        };
        for cause in BROWSER_DEATHS {
            let _ = families.deaths.get_or_create(&Cause {
                cause: cause.as_str(),
            });
        }
        families.register(registry);
        Metrics {
            inner: Arc::new(families),
        }
    }

    /// A browser died of `cause` (page failures are not deaths).
    pub(crate) fn died(&self, cause: DeathCause) {
        let cause = Cause {
            cause: cause.as_str(),
        };
        self.inner.deaths.get_or_create(&cause).inc();
    }

    /// A provider launched a session: counted, and live until the guard is dropped.
    pub(crate) fn session_started(&self, provider: &str) -> LiveSession {
        let label = ProviderLabel {
            provider: provider.to_owned(),
        };
        self.inner.sessions_started.get_or_create(&label).inc();
        self.inner.sessions_live.inc();
        LiveSession {
            metrics: self.clone(),
            provider: label.provider,
        }
    }

    /// The task (or the client) is back on a new browser, `took` after the death was noticed.
    pub(crate) fn relaunched(&self, took: Duration) {
        self.inner.relaunch_duration.observe(took.as_secs_f64());
    }

    /// A checkpoint of about `bytes` was written; its capture took `took`.
    pub(crate) fn checkpointed(&self, took: Duration, bytes: usize) {
        self.inner.checkpoint_duration.observe(took.as_secs_f64());
        self.inner.checkpoint_bytes.observe(bytes as f64);
    }

    /// A cut (death, page failure, rotation) makes the task redo `redone`.
    pub(crate) fn redone(&self, redone: Duration) {
        self.inner.redone.inc_by(redone.as_secs_f64());
    }

    /// The task moved to a successor at a safe point.
    pub(crate) fn rotated(&self) {
        self.inner.rotations.inc();
    }

    /// A run gave up.
    pub(crate) fn gave_up(&self) {
        self.inner.gave_up.inc();
    }

    /// `provider` failed at `operation`.
    pub(crate) fn provider_failed(&self, provider: &str, operation: Operation) {
        let label = ProviderOperation {
            provider: provider.to_owned(),
            operation: operation.as_str(),
        };
        self.inner.provider_errors.get_or_create(&label).inc();
    }
}

impl Families {
    fn register(&self, r: &mut Registry) {
        r.register(
            "outlive_deaths",
            "Browser deaths, by what gave each away",
            self.deaths.clone(),
        );
        r.register(
            "outlive_sessions_started",
            "Browser sessions launched, by provider",
            self.sessions_started.clone(),
        );
        r.register(
            "outlive_sessions_live",
            "Browser sessions launched and not yet released",
            self.sessions_live.clone(),
        );
        r.register_with_unit(
            "outlive_relaunch_duration",
            "From a browser death noticed to the task or client back on a restored browser",
            Unit::Seconds,
            self.relaunch_duration.clone(),
        );
        r.register_with_unit(
            "outlive_checkpoint_duration",
            "Time to capture a checkpoint that was written",
            Unit::Seconds,
            self.checkpoint_duration.clone(),
        );
        r.register_with_unit(
            "outlive_checkpoint",
            "Approximate size of each checkpoint written",
            Unit::Bytes,
            self.checkpoint_bytes.clone(),
        );
        r.register_with_unit(
            "outlive_redone",
            "Work the task had to do again after deaths, page failures and rotations",
            Unit::Seconds,
            self.redone.clone(),
        );
        r.register(
            "outlive_rotations",
            "Moves to a new browser ahead of a predicted death",
            self.rotations.clone(),
        );
        r.register("outlive_gave_up", "Runs that gave up", self.gave_up.clone());
        r.register(
            "outlive_provider_errors",
            "Provider failures, by provider and operation (launch, connect, release)",
            self.provider_errors.clone(),
        );
    }
}

/// A session counted in `outlive_sessions_live` until this is dropped.
pub(crate) struct LiveSession {
    metrics: Metrics,
    provider: String,
}

impl LiveSession {
    /// The session's provider failed at `operation`.
    pub(crate) fn failed(&self, operation: Operation) {
        self.metrics.provider_failed(&self.provider, operation);
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.metrics.inner.sessions_live.dec();
    }
}

#[cfg(test)]
mod tests;
