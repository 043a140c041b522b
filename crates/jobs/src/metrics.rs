//! [`WorkerMetrics`]: a worker's runs as Prometheus metrics, in a registry of the caller's.
//!
//! Recorded at a run's claim, its hold and its end, never more often. Labels are a run's state
//! and outcome: a handful of values, never a run id.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Where a run is in this worker: the `state` label of `outlive_runs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Taken from the queue; waiting for its lease (another worker's may have to lapse).
    Claiming,
    /// Its task runs under this worker's lease.
    Running,
    /// The hold was lost (cancelled, taken over, unrenewed): its task is being stopped.
    Stopping,
}

impl RunState {
    const ALL: [RunState; 3] = [RunState::Claiming, RunState::Running, RunState::Stopping];

    fn as_str(self) -> &'static str {
        match self {
            RunState::Claiming => "claiming",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
        }
    }
}

/// How a run left this worker: the `outcome` label of `outlive_runs_finished_total`.
pub(crate) const OUTCOMES: [&str; 6] = [
    "completed",
    "failed",
    "gave_up",
    "cancelled",
    "taken_over",
    "refused",
];

/// A worker's runs as Prometheus metrics: `outlive_runs{state}` (this worker's runs by state),
/// `outlive_runs_finished_total{outcome}` and `outlive_queue_wait_seconds` (from a run's
/// submission to its first pickup). Register it in a [`Registry`] and give it to
/// [`Worker::metrics`](crate::Worker::metrics). The runs themselves record into an
/// [`outlive::Metrics`] set with [`Options::metrics`](outlive::Options::metrics).
///
/// ```
/// use outlive::prometheus_client::{encoding::text::encode, registry::Registry};
///
/// let mut registry = Registry::default();
/// let worker = outlive_jobs::WorkerMetrics::register(&mut registry);
/// let runs = outlive::Metrics::register(&mut registry);
/// let mut text = String::new();
/// encode(&mut text, &registry).unwrap();
/// assert!(text.contains("outlive_runs{state=\"running\"} 0"));
/// # let _ = (worker, runs);
/// ```
#[derive(Clone)]
pub struct WorkerMetrics {
    inner: Arc<Families>,
}

struct Families {
    runs: Family<State, Gauge>,
    finished: Family<Outcome, Counter>,
    queue_wait: Histogram,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct State {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMetrics").finish_non_exhaustive()
    }
}

impl WorkerMetrics {
    /// Registers the worker's families in `registry` (once per registry).
    pub fn register(registry: &mut Registry) -> WorkerMetrics {
        let families = Families {
            runs: Family::default(),
            finished: Family::default(),
            // 10 ms to about 3 days, ×4 a step.
            queue_wait: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.01, 4.0, 14,
            )),
        };
        for state in RunState::ALL {
            let _ = families.runs.get_or_create(&State {
                state: state.as_str(),
            });
        }
        for outcome in OUTCOMES {
            let _ = families.finished.get_or_create(&Outcome { outcome });
        }
        registry.register(
            "outlive_runs",
            "This worker's runs, by state (claiming, running, stopping)",
            families.runs.clone(),
        );
        registry.register(
            "outlive_runs_finished",
            "Runs that left this worker, by outcome",
            families.finished.clone(),
        );
        registry.register_with_unit(
            "outlive_queue_wait",
            "From a run's submission to its first pickup by a worker",
            Unit::Seconds,
            families.queue_wait.clone(),
        );
        WorkerMetrics {
            inner: Arc::new(families),
        }
    }

    /// A run enters `state`; it leaves it for another through [`InState::go`], or when the
    /// guard is dropped.
    pub(crate) fn enter(&self, state: RunState) -> InState {
        self.gauge(state).inc();
        InState {
            metrics: self.clone(),
            state,
        }
    }

    /// A run left this worker with `outcome` (one of [`OUTCOMES`]).
    pub(crate) fn finished(&self, outcome: &'static str) {
        debug_assert!(OUTCOMES.contains(&outcome), "{outcome}");
        self.inner
            .finished
            .get_or_create(&Outcome { outcome })
            .inc();
    }

    /// A run waited `waited` in the queue before its first pickup.
    pub(crate) fn waited(&self, waited: Duration) {
        self.inner.queue_wait.observe(waited.as_secs_f64());
    }

    fn gauge(&self, state: RunState) -> Gauge {
        let state = State {
            state: state.as_str(),
        };
        self.inner.runs.get_or_create_owned(&state)
    }
}

/// A run counted in `outlive_runs{state}` while this lives.
pub(crate) struct InState {
    metrics: WorkerMetrics,
    state: RunState,
}

impl InState {
    /// The run moves to `state`.
    pub(crate) fn go(&mut self, state: RunState) {
        self.metrics.gauge(self.state).dec();
        self.metrics.gauge(state).inc();
        self.state = state;
    }
}

impl Drop for InState {
    fn drop(&mut self) {
        self.metrics.gauge(self.state).dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn a_run_is_counted_in_one_state_at_a_time_and_labels_stay_few() {
        let mut registry = Registry::default();
        let metrics = WorkerMetrics::register(&mut registry);
        for _ in 0..100 {
            let mut run = metrics.enter(RunState::Claiming);
            run.go(RunState::Running);
            let text = text(&registry);
            assert!(text.contains("outlive_runs{state=\"running\"} 1"), "{text}");
            assert!(
                text.contains("outlive_runs{state=\"claiming\"} 0"),
                "{text}"
            );
            run.go(RunState::Stopping);
            drop(run);
            metrics.finished("taken_over");
            metrics.waited(Duration::from_millis(250));
        }
        let text = text(&registry);
        for state in ["claiming", "running", "stopping"] {
            assert!(text.contains(&format!("outlive_runs{{state=\"{state}\"}} 0")));
        }
        let series = text
            .lines()
            .filter(|l| l.starts_with("outlive_runs"))
            .count();
        assert_eq!(series, 3 + OUTCOMES.len(), "{text}");
        assert!(text.contains("outlive_runs_finished_total{outcome=\"taken_over\"} 100"));
        assert!(
            text.contains("outlive_queue_wait_seconds_count 100"),
            "{text}"
        );
    }
}
