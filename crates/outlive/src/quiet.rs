//! Keeping wire traffic out of the logs, whatever subscriber the application installed.
//!
//! chromiumoxide and tungstenite log every CDP and websocket message, credentials included.
//! So every future and task outlive runs is polled under [`Quiet`]. It forwards everything to
//! the subscriber in place except those libraries' wire-level events, `log` records too.
//! outlive's own `outlive::wire` TRACE line keeps each frame's direction, size,
//! CDP method and id, never a payload. The task is polled under the caller's own dispatcher,
//! whole ([`as_caller`]): a wrapper cannot forward `downcast_raw`. Nothing is lost by it: the
//! wire is logged only in futures outlive polls under [`Quiet`]. Why and how:
//! `docs/security.md`, "Logs at every level, TRACE included".

use std::future::Future;

use tracing::instrument::{Instrument, WithDispatch, WithSubscriber};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// A dispatcher that forwards to the one in place, minus wire-level events of the libraries
/// that carry secrets.
///
/// Wrap any future that drives chromiumoxide or a websocket carrying CDP with
/// [`quietly`]; outlive does so for every run and every task it spawns, and the gateway for
/// every connection it serves.
pub struct Quiet(Dispatch);

impl Quiet {
    /// The current dispatcher, filtered (or the current one itself if it is already quiet).
    pub fn current() -> Dispatch {
        tracing::dispatcher::get_default(|current| {
            if current.is::<Quiet>() {
                current.clone()
            } else {
                Dispatch::new(Quiet(current.clone()))
            }
        })
    }

    /// The dispatcher this one filters: the current one without [`Quiet`].
    fn outside() -> Dispatch {
        tracing::dispatcher::get_default(|current| {
            current
                .downcast_ref::<Quiet>()
                .map_or_else(|| current.clone(), |quiet| quiet.0.clone())
        })
    }
}

/// Whether an event from this callsite may carry wire payloads or endpoint URLs.
fn is_wire(meta: &Metadata<'_>) -> bool {
    let target = meta.target();
    let from = |krate: &str| {
        target == krate
            || target
                .strip_prefix(krate)
                .is_some_and(|rest| rest.starts_with("::"))
    };
    // Every tungstenite line is frame-level or handshake-level (the request line carries the
    // URL's query, where a Solari token lives).
    if from("tungstenite") || from("async_tungstenite") || from("tokio_tungstenite") {
        return true;
    }
    // chromiumoxide: `conn` logs every message, `cmd` logs a timed-out command with its
    // parameters, the handler logs an invalid message with its text. Its connection errors
    // (ERROR, no payload) are kept.
    if from("chromiumoxide") {
        return !(target.starts_with("chromiumoxide::handler")
            && *meta.level() == tracing::Level::ERROR);
    }
    false
}

impl Subscriber for Quiet {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_wire(meta) {
            // Other dispatchers may still want it; this one decides per event.
            Interest::sometimes()
        } else {
            self.0.register_callsite(meta)
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        !is_wire(meta) && self.0.enabled(meta)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        self.0.new_span(attrs)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.0.record(span, values)
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.0.record_follows_from(span, follows)
    }

    fn event(&self, event: &Event<'_>) {
        if !is_wire(event.metadata()) {
            self.0.event(event)
        }
    }

    fn enter(&self, span: &Id) {
        self.0.enter(span)
    }

    fn exit(&self, span: &Id) {
        self.0.exit(span)
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.0.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.0.try_close(id)
    }

    /// The subscriber's own current span: without it `Span::current()` is `Span::none()`
    /// here, and `in_current_span` does nothing.
    fn current_span(&self) -> Current {
        self.0.current_span()
    }
}

/// Polls `future` under [`Quiet`]: nothing it (or a library it drives) logs at the wire
/// level reaches the application's subscriber.
///
/// Spans and `Span::current()` work as outside it, but nothing can downcast the dispatcher
/// through it (`tracing-opentelemetry`'s `Span::context()` finds no context there): keep it to
/// the futures that drive the wire.
pub fn quietly<F: Future>(future: F) -> WithDispatch<F> {
    future.with_subscriber(Quiet::current())
}

/// Makes the caller's task (`make`) and polls it under the dispatcher outside [`Quiet`], the
/// caller's own, whole: the task's spans and any OpenTelemetry context in it are the
/// caller's, with outlive's spans between.
pub(crate) fn as_caller<F: Future>(make: impl FnOnce() -> F) -> WithDispatch<F> {
    let caller = Quiet::outside();
    tracing::dispatcher::with_default(&caller, make).with_subscriber(caller)
}

/// Spawns `future` under the current dispatcher made [`Quiet`], in the current span. A task
/// spawned with plain `tokio::spawn` would run under the global subscriber instead, with no
/// filter.
pub(crate) fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(quietly(future.in_current_span()))
}

/// A task polled at every CDP message, which logs below INFO only: it runs in the caller's
/// span only when the subscriber wants its lines (see [`spawn_busy`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Busy {
    /// The relay's driver and its frame readers.
    Relay,
    /// chromiumoxide's handler pump: only its connection errors are ever logged.
    Pump,
}

/// Like [`spawn`], for a [`Busy`] task. It runs in the current span only when the subscriber
/// wants the task's lines: entering a span at every poll is most of what tracing costs a call.
pub(crate) fn spawn_busy<F>(busy: Busy, future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if busy.lines_wanted() {
        spawn(future)
    } else {
        spawn_detached(future)
    }
}

/// Whether a span at `$target` and `$level` would be recorded. A probe span, not
/// `enabled!`: under per-layer filters `enabled!` leaves the thread's filter state set when no
/// span or event follows, and the next event then misses layers that wanted it.
macro_rules! wanted {
    ($($target:literal at $level:ident),+ $(,)?) => {
        false $(|| !tracing::span!(target: $target, tracing::Level::$level, "probe").is_disabled())+
    };
}

impl Busy {
    fn lines_wanted(self) -> bool {
        match self {
            Busy::Relay => wanted!(
                "outlive::wire" at TRACE,
                "outlive::relay" at DEBUG,
                "outlive::relay::driver" at DEBUG,
                "outlive::relay::watchdog" at DEBUG,
                "outlive::relay::gate" at DEBUG,
                "outlive::relay::calls" at DEBUG,
                "outlive::relay::wire" at DEBUG,
            ),
            Busy::Pump => wanted!("chromiumoxide::handler" at ERROR),
        }
    }
}

/// Like [`spawn`], in no span: for a task that lives as long as a browser or a page. In the
/// current span it would hold that span (a `checkpoint`, an `entry`, the run) open, and
/// unexported, until the browser goes.
pub(crate) fn spawn_detached<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(quietly(future.instrument(tracing::Span::none())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn meta(target: &'static str, level: Level) -> bool {
        struct Cs;
        impl tracing::callsite::Callsite for Cs {
            fn set_interest(&self, _: Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!()
            }
        }
        static CS: Cs = Cs;
        let m = Metadata::new(
            "event",
            target,
            level,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CS)),
            tracing::metadata::Kind::EVENT,
        );
        is_wire(&m)
    }

    #[test]
    fn wire_targets_are_recognised_and_nothing_else() {
        assert!(meta("tungstenite::handshake::client", Level::TRACE));
        assert!(meta("tungstenite::protocol", Level::DEBUG));
        assert!(meta("async_tungstenite", Level::TRACE));
        assert!(meta("chromiumoxide::conn", Level::TRACE));
        assert!(meta("chromiumoxide::cmd", Level::ERROR));
        assert!(meta("chromiumoxide::handler", Level::WARN));
        assert!(!meta("chromiumoxide::handler", Level::ERROR));
        assert!(!meta("tungstenitex", Level::TRACE));
        assert!(!meta("outlive::wire", Level::TRACE));
        assert!(!meta("my_app", Level::TRACE));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_current_span_is_the_subscribers_and_spawned_tasks_keep_it_unless_detached() {
        let _guard = tracing::subscriber::set_default(tracing_subscriber::registry());
        let run = tracing::info_span!("run");
        let (inside, spawned) = quietly(async {
            let spawned = spawn(async { tracing::Span::current().id() });
            let detached = spawn_detached(async { tracing::Span::current().id() });
            (
                tracing::Span::current().id(),
                (spawned.await.unwrap(), detached.await.unwrap()),
            )
        })
        .instrument(run.clone())
        .await;
        assert_eq!(inside, run.id());
        assert_eq!(spawned.0, run.id());
        assert_eq!(spawned.1, None);
    }

    #[test]
    fn busy_tasks_run_in_the_span_only_when_their_lines_are_wanted() {
        use tracing_subscriber::filter::{LevelFilter, Targets};
        use tracing_subscriber::layer::SubscriberExt;
        // As a trace exporter filters: outlive's spans at INFO, no line of a busy task.
        let spans_only = Targets::new().with_target("outlive", LevelFilter::INFO);
        let subscriber = tracing_subscriber::registry().with(spans_only);
        tracing::subscriber::with_default(subscriber, || {
            assert!(!Busy::Relay.lines_wanted());
            assert!(!Busy::Pump.lines_wanted());
        });
        let wire = Targets::new().with_target("outlive::wire", LevelFilter::TRACE);
        let subscriber = tracing_subscriber::registry().with(wire);
        tracing::subscriber::with_default(subscriber, || {
            assert!(Busy::Relay.lines_wanted());
            assert!(!Busy::Pump.lines_wanted());
        });
        // A log at WARN still shows the pump's connection errors in the run's span.
        let subscriber = tracing_subscriber::registry().with(LevelFilter::WARN);
        tracing::subscriber::with_default(subscriber, || {
            assert!(!Busy::Relay.lines_wanted());
            assert!(Busy::Pump.lines_wanted());
        });
    }

    /// Counts the events that reach it.
    #[derive(Clone, Default)]
    struct Count(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl<S: Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, _: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn asking_leaves_no_filter_state_behind() {
        use tracing_subscriber::Layer;
        use tracing_subscriber::filter::{LevelFilter, Targets};
        use tracing_subscriber::layer::SubscriberExt;
        // A log that wants the relay's lines and a trace layer that does not, each filtered.
        let (log, traces) = (Count::default(), Count::default());
        let subscriber = tracing_subscriber::registry()
            .with(log.clone().with_filter(LevelFilter::DEBUG))
            .with(
                traces
                    .clone()
                    .with_filter(Targets::new().with_target("outlive", LevelFilter::INFO)),
            );
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                assert!(Busy::Relay.lines_wanted());
                tracing::info!(target: "outlive::run", "browser launched");
            }
        });
        let count = |c: &Count| c.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!((count(&log), count(&traces)), (3, 3));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_caller_s_task_runs_under_the_caller_s_dispatcher() {
        let _guard = tracing::subscriber::set_default(tracing_subscriber::registry());
        let (quiet, caller) = quietly(async {
            let quiet = tracing::dispatcher::get_default(|d| d.is::<Quiet>());
            let caller =
                as_caller(|| async { tracing::dispatcher::get_default(|d| d.is::<Quiet>()) });
            (quiet, caller.await)
        })
        .await;
        assert!(quiet);
        assert!(!caller);
    }
}
