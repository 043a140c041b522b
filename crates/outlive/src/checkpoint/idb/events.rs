//! Chromium's change events on one page session, as the relay's tap hands them over, and the
//! two tasks that keep up with them: the watcher that counts them, the tracker that starts and
//! stops Chromium's tracking of storage keys.

use std::sync::{Arc, Mutex};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::storage::{
    TrackIndexedDbForStorageKeyParams, UntrackIndexedDbForStorageKeyParams,
};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Notify, mpsc};
use tokio_util::task::AbortOnDropHandle;

use super::seen::Seen;
use crate::relay::{Tap, Tapped};
use crate::sync::lock;

/// The events Chromium sends for a storage key whose IndexedDB is tracked
/// (`Storage.trackIndexedDBForStorageKey`): a committed change to a store's content, and a
/// database created, deleted or upgraded.
pub(super) const CHANGE_EVENTS: &[&str] = &[
    "Storage.indexedDBContentUpdated",
    "Storage.indexedDBListUpdated",
];

/// Chromium's change events on this session, and the two tasks that keep up with them.
///
/// The watcher counts each event by its storage key as it comes. It asks for a key's tracking
/// to stop at its first change without waiting for it, so no event waits uncounted behind a
/// round trip. A capture counts whatever is already delivered before it decides anything
/// ([`IdbEvents::count_delivered`]): an event the relay has handed over is counted however
/// the tasks are scheduled. The tracker sends Chromium the starts and stops of tracking in
/// the order they were asked for (one start per key at a time: see `Seen::ask`). It notes a
/// key tracked once Chromium said so, unless a change came since. Both tasks stop with this
/// value.
pub(super) struct IdbEvents {
    feed: Arc<Mutex<Feed>>,
    commands: mpsc::UnboundedSender<Command>,
    /// The watch's stale waiter.
    stale: Arc<Notify>,
    _watcher: AbortOnDropHandle<()>,
    _tracker: AbortOnDropHandle<()>,
}

/// The events as the relay's tap hands them over, taken by the watcher and by captures.
struct Feed {
    events: Tap,
}

/// What the tracker sends Chromium.
enum Command {
    /// Start tracking a key (asked at that change count of it).
    Track(String, u64),
    /// Stop tracking a key.
    Untrack(String),
}

impl IdbEvents {
    /// Starts the watcher on `events` (the page session's change events) and the tracker on
    /// `page`; both note what they learn in `seen`, and wake `stale`.
    pub(super) fn watch(
        page: &Page,
        events: Tap,
        seen: Arc<Mutex<Seen>>,
        stale: Arc<Notify>,
    ) -> IdbEvents {
        let feed = Arc::new(Mutex::new(Feed { events }));
        let (commands, mut todo) = mpsc::unbounded_channel();
        let (watched, stops, counted) = (feed.clone(), commands.clone(), seen.clone());
        let wake = stale.clone();
        let watcher = crate::quiet::spawn_detached(async move {
            loop {
                let next = futures::future::poll_fn(|cx| lock(&watched).events.poll_recv(cx)).await;
                if !note(&counted, next.map(changed_key), &stops, &wake) {
                    break;
                }
            }
        });
        let page = page.clone();
        let tracker = crate::quiet::spawn_detached(async move {
            while let Some(command) = todo.recv().await {
                match command {
                    Command::Track(key, at) => {
                        let ask = TrackIndexedDbForStorageKeyParams::new(key.clone());
                        let started = page.execute(ask).await;
                        if let Err(e) = &started {
                            tracing::debug!(error = %e, "IndexedDB change tracking unavailable; every capture reads it in full");
                        }
                        lock(&seen).answered(key, at, started.is_ok());
                    }
                    Command::Untrack(key) => {
                        let ask = UntrackIndexedDbForStorageKeyParams::new(key);
                        let _ = page.execute(ask).await;
                    }
                }
            }
        });
        IdbEvents {
            feed,
            commands,
            stale,
            _watcher: AbortOnDropHandle::new(watcher),
            _tracker: AbortOnDropHandle::new(tracker),
        }
    }

    /// Has the tracker ask Chromium to track `key`, asked at change count `at` of it.
    pub(super) fn track(&self, key: String, at: u64) {
        let _ = self.commands.send(Command::Track(key, at));
    }

    /// Counts every event already delivered (the watcher stays registered for what comes
    /// next).
    pub(super) fn count_delivered(&self, seen: &Mutex<Seen>) {
        let mut feed = lock(&self.feed);
        loop {
            let next = match feed.events.try_recv() {
                Ok(event) => Some(changed_key(event)),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => None,
            };
            if !note(seen, next, &self.commands, &self.stale) {
                return;
            }
        }
    }
}

/// Counts one event (`Some` key) or the end of the events (`None`), asking the tracker to
/// stop tracking a key at its first change and waking `stale` at a change the newest
/// checkpoint may lack; answers whether more may come.
fn note(
    seen: &Mutex<Seen>,
    next: Option<String>,
    tracker: &mpsc::UnboundedSender<Command>,
    stale: &Notify,
) -> bool {
    let mut seen = lock(seen);
    match next {
        Some(key) => {
            if seen.note(key.clone()) {
                let _ = tracker.send(Command::Untrack(key));
            }
            if std::mem::take(&mut seen.stale) {
                stale.notify_one();
            }
            true
        }
        None => {
            seen.end();
            false
        }
    }
}

/// The part of a change event the watcher reads.
#[derive(serde::Deserialize)]
struct Change {
    params: ChangeParams,
}

#[derive(serde::Deserialize)]
struct ChangeParams {
    #[serde(rename = "storageKey")]
    storage_key: String,
}

/// The storage key a change event names. One that cannot be read counts as a key never
/// tracked, a change to every key: nothing is taken as unchanged on a report nobody could read.
fn changed_key(event: Tapped) -> String {
    match serde_json::from_slice::<Change>(event.bytes()) {
        Ok(change) => change.params.storage_key,
        Err(_) => {
            tracing::debug!(
                "an IndexedDB change event could not be read; counted as a change to every storage key"
            );
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_event_is_read_for_its_storage_key() {
        let read = |text: &str| changed_key(Tapped::from(text.to_owned()));
        let content = r#"{"method":"Storage.indexedDBContentUpdated","params":{"origin":"http://a","storageKey":"http://a/","bucketId":"1","databaseName":"db","objectStoreName":"s"},"sessionId":"S"}"#;
        assert_eq!(read(content), "http://a/");
        let list = r#"{"method":"Storage.indexedDBListUpdated","params":{"origin":"http://a","storageKey":"http://a/^0http://b","bucketId":"1"},"sessionId":"T"}"#;
        assert_eq!(read(list), "http://a/^0http://b");
        // One whose storage key cannot be read is still a change: to a key never tracked.
        let unread = r#"{"method":"Storage.indexedDBContentUpdated","params":{"storageKey":7},"sessionId":"S"}"#;
        assert_eq!(read(unread), "");
        assert_eq!(read("{"), "");
    }
}
