//! Chromium's IndexedDB change tracking, which lets a capture take the top frame's IndexedDB
//! as unchanged instead of reading it again (see `IdbWatch`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::storage::{
    EventIndexedDbContentUpdated, EventIndexedDbListUpdated, TrackIndexedDbForStorageKeyParams,
    UntrackIndexedDbForStorageKeyParams,
};
use futures::StreamExt;
use tokio::time::Instant;

use super::{PartCache, is_storable_origin};
use tokio_util::task::AbortOnDropHandle;

/// Whether the top frame's IndexedDB may have changed since the capture script last read it
/// in full, from Chromium's own change events (`Storage.trackIndexedDBForStorageKey`, then
/// `indexedDBContentUpdated` / `indexedDBListUpdated` on the page's session): while none came,
/// the capture script is told the last read stands, and only checks that no database came,
/// went or changed version — so an unchanged IndexedDB costs a checkpoint nothing more.
///
/// Chromium reported a commit's content change before the transaction's completion reached the
/// page in every trial (20 of 20 commits; the protocol does not promise it), and chromiumoxide
/// hands events over in the order they came, so a change the task has seen has been counted by
/// the time it asks for a checkpoint. A change event that comes while a capture runs has the
/// top frame read again in full, and a full read is made at least every
/// `IDB_READ_IN_FULL_EVERY` regardless. One watch per page session: tracking
/// belongs to the session.
#[derive(Default)]
pub(crate) struct IdbWatch(Mutex<IdbState>);

/// However quiet Chromium's change events are, the top frame's IndexedDB is read in full at
/// least this often: the events' order (below) is observed, not promised by the protocol, and
/// a tracking Chromium dropped without closing the session would otherwise go unnoticed.
const IDB_READ_IN_FULL_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct IdbState {
    events: Option<IdbEvents>,
    /// Origins whose (first-party) storage key is tracked on this session; shared with the
    /// watcher, which untracks them at the first change.
    tracked: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Change events seen so far.
    changes: u64,
    last: Option<IdbRead>,
    /// Full reads of the top frame's IndexedDB reported so far.
    #[cfg(test)]
    full_reads: u64,
}

/// The tracking's one-shot watcher. It waits for the first change event (or the end of the
/// streams), says so, stops Chromium's tracking and ends, dropping its listeners: however many
/// transactions a page commits between two captures, at most a few events are ever held.
/// The next full read starts the tracking again.
struct IdbEvents {
    /// Set once the first change came or the streams ended.
    changed: Arc<std::sync::atomic::AtomicBool>,
    _watcher: AbortOnDropHandle<()>,
}

impl IdbEvents {
    fn watch(
        page: &Page,
        mut content: chromiumoxide::listeners::EventStream<EventIndexedDbContentUpdated>,
        mut list: chromiumoxide::listeners::EventStream<EventIndexedDbListUpdated>,
        tracked: Arc<Mutex<std::collections::HashSet<String>>>,
    ) -> IdbEvents {
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, page) = (changed.clone(), page.clone());
        let watcher = crate::quiet::spawn(async move {
            futures::future::select(content.next(), list.next()).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            drop((content, list));
            let origins: Vec<String> = lock(&tracked).drain().collect();
            for origin in origins {
                let untrack = UntrackIndexedDbForStorageKeyParams::new(format!("{origin}/"));
                let _ = page.execute(untrack).await;
            }
        });
        IdbEvents {
            changed,
            _watcher: AbortOnDropHandle::new(watcher),
        }
    }
}

/// Locks `m`, taking what a poisoned lock guards as it stands.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The last full read of the top frame's IndexedDB.
struct IdbRead {
    origin: String,
    hash: String,
    list: String,
    /// The change count when the capture that read it started.
    changes: u64,
    /// When it was read.
    at: Instant,
    /// Whether the origin was tracked before that capture started.
    tracked: bool,
}

impl IdbState {
    /// Notes a change the watcher saw (or the end of its streams): the tracking is over until
    /// the next full read, and nothing is skipped until then.
    fn drain(&mut self) {
        let Some(events) = &self.events else {
            return;
        };
        if events.changed.load(std::sync::atomic::Ordering::SeqCst) {
            self.changes += 1;
            self.events = None;
            lock(&self.tracked).clear();
            self.last = None;
        }
    }
}

impl IdbWatch {
    /// The change count now, if a change came (or the tracking ended) since `begin` answered
    /// `changes`.
    pub(super) fn moved_since(&self, changes: u64) -> Option<u64> {
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.drain();
        (state.events.is_none() || state.changes != changes).then_some(state.changes)
    }

    /// At a capture's start: the change count, and what the capture script may take as
    /// unchanged (`{origin, hash, list}`), if anything.
    pub(super) fn begin(&self, cache: &PartCache) -> (u64, Option<serde_json::Value>) {
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.drain();
        let same = state
            .last
            .as_ref()
            .filter(|r| {
                r.tracked
                    && r.changes == state.changes
                    && r.at.elapsed() < IDB_READ_IN_FULL_EVERY
                    && cache.get(&r.hash).is_some()
            })
            .map(|r| serde_json::json!({ "origin": r.origin, "hash": r.hash, "list": r.list }));
        (state.changes, same)
    }

    /// After a capture that read `origin`'s IndexedDB in full (content `hash`, databases
    /// `list`), starting at change count `changes`. Starts tracking the origin if it is not
    /// tracked yet: that read does not count as unchanged-since, the next one will.
    pub(super) async fn read_in_full(
        &self,
        page: &Page,
        origin: &str,
        hash: String,
        list: String,
        changes: u64,
    ) {
        let (tracked, listening) = {
            let mut state = self.0.lock().expect("idb watch poisoned");
            #[cfg(test)]
            {
                state.full_reads += 1;
            }
            let tracked = lock(&state.tracked).contains(origin);
            state.last = Some(IdbRead {
                origin: origin.to_owned(),
                hash,
                list,
                changes,
                at: Instant::now(),
                tracked,
            });
            (tracked, state.events.is_some())
        };
        if tracked || !is_storable_origin(origin) {
            return;
        }
        // Listening before tracking, so no event after it is missed.
        if !listening {
            let (content, list) = futures::join!(
                page.event_listener::<EventIndexedDbContentUpdated>(),
                page.event_listener::<EventIndexedDbListUpdated>(),
            );
            let (Ok(content), Ok(list)) = (content, list) else {
                return;
            };
            let mut state = self.0.lock().expect("idb watch poisoned");
            if state.events.is_none() {
                let tracked = state.tracked.clone();
                state.events = Some(IdbEvents::watch(page, content, list, tracked));
            }
        }
        // A first-party storage key is the origin with a slash (`Storage.getStorageKey`).
        let track = TrackIndexedDbForStorageKeyParams::new(format!("{origin}/"));
        match page.execute(track).await {
            Ok(_) => {
                let state = self.0.lock().expect("idb watch poisoned");
                if state.events.is_some() {
                    lock(&state.tracked).insert(origin.to_owned());
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "IndexedDB change tracking unavailable; every capture reads it in full");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{chromium_page, key, local, read_value};
    use crate::checkpoint::{CaptureOptions, Checkpoint, capture, restore};
    use crate::relay::Calls;

    /// What the captures of these tests read: IndexedDB too, up to 1 MiB a frame.
    const OPTIONS: CaptureOptions = CaptureOptions {
        indexed_db: true,
        indexed_db_max_bytes: 1 << 20,
    };

    /// A page of a real origin, `https://app.example`, restored from a one-item checkpoint
    /// (served by a restore document; no request leaves), and the guards that keep its
    /// Chromium alive (dropped in the order the page's own would be).
    async fn page_on_app_origin() -> (impl Sized, Page) {
        let (chromium, browser, pump, page) = chromium_page().await;
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["k","v"]]"#),
        );
        restore(&page, &crate::relay::Calls::detached(), &cp, None)
            .await
            .unwrap();
        ((pump, browser, chromium), page)
    }

    /// The IndexedDB (JSON) of the first storage key `cp` holds; empty if none.
    fn idb_of(cp: &Checkpoint) -> String {
        cp.storage
            .values()
            .next()
            .and_then(|s| s.idb.as_ref())
            .map(|p| p.json.clone())
            .unwrap_or_default()
    }

    /// An unchanged IndexedDB is not read again once Chromium tracks it; every kind of change
    /// — a record written, a database created — is in the next capture.
    #[tokio::test]
    async fn indexeddb_is_read_again_only_after_a_change() {
        let (_guards, page) = page_on_app_origin().await;
        let put = |value: &str| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
                  tx.objectStore('s').put('{value}', 'k'); tx.oncomplete = () => {{ r.result.close(); resolve(1); }}; }};
                r.onerror = () => reject(r.error); }})"
            )
        };
        let _: i64 = read_value(&page, put("first")).await;

        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let capture = || capture(&page, &calls, &cache, &watch, OPTIONS);
        let first = capture().await.unwrap();
        assert!(idb_of(&first).contains("first"));
        assert!(
            watch.begin(&cache).1.is_none(),
            "read before tracking began"
        );
        let second = capture().await.unwrap();
        assert_eq!(idb_of(&second), idb_of(&first));
        assert!(
            watch.begin(&cache).1.is_some(),
            "read while tracked and unchanged: the next capture may skip it"
        );
        let full_reads = || watch.0.lock().unwrap().full_reads;
        assert_eq!(full_reads(), 2);
        let third = capture().await.unwrap();
        assert_eq!(idb_of(&third), idb_of(&first), "the same content");
        assert_eq!(full_reads(), 2, "not read again: nothing changed");

        let _: i64 = read_value(&page, put("second")).await;
        let after_put = capture().await.unwrap();
        assert!(
            idb_of(&after_put).contains("second"),
            "a record written is seen"
        );
        assert_eq!(full_reads(), 3);
        let _ = capture().await.unwrap();

        let _: i64 = read_value(
            &page,
            "new Promise((resolve) => { const r = indexedDB.open('other', 3);
              r.onsuccess = () => { r.result.close(); resolve(1); }; })"
                .into(),
        )
        .await;
        let after_create = capture().await.unwrap();
        assert!(
            idb_of(&after_create).contains("\"other\""),
            "a database created is seen: {}",
            idb_of(&after_create)
        );
        let _ = capture().await.unwrap();
        let _: i64 = read_value(
            &page,
            "new Promise((resolve) => { const r = indexedDB.deleteDatabase('other');
              r.onsuccess = () => resolve(1); })"
                .into(),
        )
        .await;
        let after_delete = capture().await.unwrap();
        assert!(
            !idb_of(&after_delete).contains("\"other\""),
            "a database deleted is seen"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_indexeddb_commits_leaves_no_events_piled_up() {
        let (_guards, page) = page_on_app_origin().await;
        let commits = |n: u32, tag: &str| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onsuccess = async () => {{
                  for (let i = 0; i < {n}; i++) await new Promise(done => {{
                    const tx = r.result.transaction('s', 'readwrite');
                    tx.objectStore('s').put('{tag}' + i, 'k'); tx.oncomplete = done;
                    tx.onabort = () => reject(tx.error); }});
                  r.result.close(); resolve(1); }};
                r.onerror = () => reject(r.error); }})"
            )
        };
        let _: i64 = read_value(&page, commits(1, "a")).await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let capture = || capture(&page, &calls, &cache, &watch, OPTIONS);
        capture().await.unwrap();
        capture().await.unwrap();
        let watching = || watch.0.lock().unwrap().events.is_some();
        assert!(watching(), "tracked after two full reads");

        // 2 000 transactions, one after another: the watcher sees the first and stops the
        // tracking, so the events of the other 1 999 are neither sent nor held.
        let _: i64 = read_value(&page, commits(2_000, "b")).await;
        // The watcher runs on its own task: wait (bounded) for it to have seen the change and
        // stopped the tracking.
        let stopped = || {
            let state = watch.0.lock().unwrap();
            let seen = state
                .events
                .as_ref()
                .is_some_and(|e| e.changed.load(std::sync::atomic::Ordering::SeqCst));
            seen && lock(&state.tracked).is_empty()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped() {
            assert!(
                Instant::now() < deadline,
                "the watcher saw the change and untracked"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let after = capture().await.unwrap();
        let idb = idb_of(&after);
        assert!(
            idb.contains("b1999"),
            "the newest record is captured: {idb}"
        );
        assert!(watching(), "tracked again by that full read");
    }
}
