//! Keeping chromiumoxide's raw CDP traffic out of the logs.
//!
//! chromiumoxide logs every CDP message it sends and receives at TRACE
//! (`chromiumoxide::conn`): `Storage.setCookies` with cookie values, `Storage.getCookies`
//! answers, localStorage items. A checkpoint is a credential, so the handler that emits
//! those lines runs under [`WithoutRawCdp`], which forwards every other event to the
//! subscriber that was in place and drops those.

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// A subscriber that forwards to another one, minus chromiumoxide's raw-traffic events.
pub(crate) struct WithoutRawCdp(pub Dispatch);

impl WithoutRawCdp {
    /// The surrounding subscriber, filtered.
    pub(crate) fn current() -> Dispatch {
        Dispatch::new(WithoutRawCdp(tracing::dispatcher::get_default(
            Dispatch::clone,
        )))
    }
}

fn is_raw(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with("chromiumoxide::conn")
}

impl Subscriber for WithoutRawCdp {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_raw(meta) {
            // Other subscribers may still want it; we decide per event in `enabled`.
            Interest::sometimes()
        } else {
            self.0.register_callsite(meta)
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        !is_raw(meta) && self.0.enabled(meta)
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
        if !is_raw(event.metadata()) {
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
}
