//! Chromium's IndexedDB change tracking, which lets a capture take a frame's IndexedDB as
//! unchanged instead of reading it again (see `IdbWatch`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::storage::{
    EventIndexedDbContentUpdated, EventIndexedDbListUpdated, GetStorageKeyParams,
    TrackIndexedDbForStorageKeyParams, UntrackIndexedDbForStorageKeyParams,
};
use futures::StreamExt;
use tokio::time::Instant;

use super::{PartCache, is_storable_origin};
use tokio_util::task::AbortOnDropHandle;

/// Whether a frame's IndexedDB may have changed since the capture script last read it in full,
/// from Chromium's own change events (`Storage.trackIndexedDBForStorageKey` for the frame's
/// storage key, then `indexedDBContentUpdated` / `indexedDBListUpdated` on the page's session —
/// for an out-of-process frame's partitioned storage key too): while none came, the capture
/// script is told the last read stands, and only checks that no database came, went or
/// changed version — so an unchanged IndexedDB costs a checkpoint nothing more, in the top
/// frame and in cross-site iframes, on every new document. Reads are kept by the frame's
/// scope (its origin and its ancestors', which the script states and checks): a scope has one
/// storage key (the script states none where a key is made with a nonce, and a key the browser
/// gives for another origin is refused), though two scopes can share one. Any change event has
/// every frame read in full again (they are rare next to captures, and this needs no
/// bookkeeping per key).
///
/// Chromium reported a commit's content change before the transaction's completion reached the
/// page in every trial (20 of 20 commits; the protocol does not promise it), and chromiumoxide
/// hands events over in the order they came, so a change the task has seen has been counted by
/// the time it asks for a checkpoint (a cross-site frame's change too: the event comes on the
/// page's session, the frame's reply on its own, both through the one connection). A change
/// event that comes while a capture runs has the frames that took their read as standing read
/// again in full, and a full read is made at least every `IDB_READ_IN_FULL_EVERY` regardless.
/// One watch per page session: tracking belongs to the session.
#[derive(Default)]
pub(crate) struct IdbWatch(Mutex<IdbState>);

/// However quiet Chromium's change events are, a frame's IndexedDB is read in full at least
/// this often: the events' order (below) is observed, not promised by the protocol, and
/// a tracking Chromium dropped without closing the session would otherwise go unnoticed.
const IDB_READ_IN_FULL_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct IdbState {
    events: Option<IdbEvents>,
    /// Storage keys tracked on this session; shared with the watcher, which untracks them at
    /// the first change.
    tracked: Arc<Mutex<HashSet<String>>>,
    /// Change events seen so far.
    changes: u64,
    /// The last full read of each scope's IndexedDB, since the last change.
    last: HashMap<String, IdbRead>,
    /// The storage key of each scope met (a scope always has the same one: see the capture
    /// script).
    keys: HashMap<String, String>,
    /// Full reads reported so far.
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
        tracked: Arc<Mutex<HashSet<String>>>,
    ) -> IdbEvents {
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, page) = (changed.clone(), page.clone());
        let watcher = crate::quiet::spawn(async move {
            futures::future::select(content.next(), list.next()).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            drop((content, list));
            let keys: Vec<String> = lock(&tracked).drain().collect();
            for key in keys {
                let _ = page
                    .execute(UntrackIndexedDbForStorageKeyParams::new(key))
                    .await;
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

/// The last full read of a scope's IndexedDB.
struct IdbRead {
    hash: String,
    list: String,
    /// The change count when the capture that read it started.
    changes: u64,
    /// When it was read.
    at: Instant,
    /// Whether its storage key was tracked when that capture started.
    tracked: bool,
}

/// What a capture starts with (see [`IdbWatch::begin`]).
pub(super) struct Begun {
    /// The change count.
    pub changes: u64,
    /// What the capture script may take as unchanged: `[{scope, hash, list}]`.
    pub same: Vec<serde_json::Value>,
    /// The storage keys tracked (a read of one of them counts as unchanged-since).
    tracked: HashSet<String>,
}

/// A frame whose IndexedDB a capture read in full.
pub(super) struct FullRead {
    /// What the script said the frame's scope is.
    pub scope: String,
    pub frame: Frame,
    pub hash: String,
    pub list: String,
}

/// Where a frame read in full is, for its storage key.
pub(super) enum Frame {
    /// The top frame: its origin's (first-party) storage key.
    Top { origin: String },
    /// An out-of-process frame of `origin`: its storage key asked of the browser by its frame
    /// id.
    Remote { frame_id: String, origin: String },
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
            self.last.clear();
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

    /// At a capture's start: the change count, what the capture script may take as
    /// unchanged, and which storage keys are tracked.
    pub(super) fn begin(&self, cache: &PartCache) -> Begun {
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.drain();
        let same = state
            .last
            .iter()
            .filter(|(_, r)| {
                r.tracked
                    && r.changes == state.changes
                    && r.at.elapsed() < IDB_READ_IN_FULL_EVERY
                    && cache.get(&r.hash).is_some()
            })
            .map(|(scope, r)| serde_json::json!({ "scope": scope, "hash": r.hash, "list": r.list }))
            .collect();
        let tracked = lock(&state.tracked).clone();
        Begun {
            changes: state.changes,
            same,
            tracked,
        }
    }

    /// After a capture that read a frame's IndexedDB in full (`read`), begun as `begun`, at
    /// change count `changes`. Starts tracking the frame's storage key if it is not tracked
    /// yet: that read does not count as unchanged-since, the next one will.
    pub(super) async fn read_in_full(
        &self,
        page: &Page,
        read: FullRead,
        begun: &Begun,
        changes: u64,
    ) {
        let FullRead {
            scope,
            frame,
            hash,
            list,
        } = read;
        let Some(key) = self.key_of(page, &scope, &frame).await else {
            return;
        };
        let (tracked, listening) = {
            let mut state = self.0.lock().expect("idb watch poisoned");
            #[cfg(test)]
            {
                state.full_reads += 1;
            }
            // Tracked as the capture began (a key another frame's read started tracking
            // meanwhile was not tracked during this one) and still (a change since stopped it).
            let tracked = begun.tracked.contains(&key) && lock(&state.tracked).contains(&key);
            state.last.insert(
                scope,
                IdbRead {
                    hash,
                    list,
                    changes,
                    at: Instant::now(),
                    tracked,
                },
            );
            (tracked, state.events.is_some())
        };
        if !tracked {
            self.track(page, key, listening).await;
        }
    }

    /// The storage key of the frame read as `scope` (see [`storage_key`]), remembered once
    /// known (not when unknown: the browser may say next time).
    async fn key_of(&self, page: &Page, scope: &str, frame: &Frame) -> Option<String> {
        let known = self
            .0
            .lock()
            .expect("idb watch poisoned")
            .keys
            .get(scope)
            .cloned();
        if known.is_some() {
            return known;
        }
        let key = storage_key(page, frame).await?;
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.keys.insert(scope.to_owned(), key.clone());
        Some(key)
    }

    /// Has Chromium track `key`, listening for its events first (unless `listening`) so no
    /// event after it is missed.
    async fn track(&self, page: &Page, key: String, listening: bool) {
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
        match page
            .execute(TrackIndexedDbForStorageKeyParams::new(key.clone()))
            .await
        {
            Ok(_) => {
                let state = self.0.lock().expect("idb watch poisoned");
                // Not once the watcher has fired: it untracked what it found, and nobody would
                // hear this key's events.
                if let Some(events) = &state.events
                    && !events.changed.load(std::sync::atomic::Ordering::SeqCst)
                {
                    lock(&state.tracked).insert(key);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "IndexedDB change tracking unavailable; every capture reads it in full");
            }
        }
    }
}

/// The storage key of `frame` (`None` where it has none worth tracking, or the browser does
/// not say). A first-party storage key is the origin with a slash (`Storage.getStorageKey`);
/// a cross-site frame's is partitioned by its top-level site, which takes the public suffix
/// list to work out: the browser is asked — about the frame's document *now*, so an answer for
/// another origin (the frame navigated since it was read) is refused, and so is a key made
/// with a nonce (another in each document: nothing to keep).
async fn storage_key(page: &Page, frame: &Frame) -> Option<String> {
    let (frame_id, origin) = match frame {
        Frame::Top { origin } => return is_storable_origin(origin).then(|| format!("{origin}/")),
        Frame::Remote { frame_id, origin } => (frame_id, origin),
    };
    let ask = GetStorageKeyParams::builder()
        .frame_id(frame_id.clone())
        .build();
    let key: String = match page.execute(ask).await {
        Ok(answer) => answer.result.storage_key.into(),
        Err(e) => {
            tracing::debug!(error = %e, "a frame's storage key is unknown; its IndexedDB is read in full at each capture");
            return None;
        }
    };
    trackable_key(&key, origin).then_some(key)
}

/// Whether `key` (a serialised storage key) is `origin`'s, first-party, partitioned by another
/// top-level site (`^0`) or same-site with a cross-site ancestor (`^31`), and made with no
/// nonce (`^1`, `^2`; `^4`–`^6` for an opaque top-level site).
fn trackable_key(key: &str, origin: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(origin)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    // Chromium's forms: `origin/`, `origin/^31` (same site as the top, a cross-site
    // ancestor), `origin/^0<top-level site>`; a site holds no `^`.
    rest.is_empty()
        || rest == "^31"
        || rest
            .strip_prefix("^0")
            .is_some_and(|site| !site.is_empty() && !site.contains('^'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_support::{
        chromium_page, frame_value, key, local, read_value, relayed_page, the_frame,
        two_site_server,
    };
    use crate::checkpoint::{CaptureOptions, Checkpoint, capture, restore};
    use crate::relay::Calls;

    /// What the captures of these tests read: IndexedDB too, up to 1 MiB a frame.
    const OPTIONS: CaptureOptions = CaptureOptions {
        indexed_db: true,
        indexed_db_max_bytes: 1 << 20,
        frame_timeout: Duration::from_secs(5),
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

    #[test]
    fn only_an_origins_own_keys_without_a_nonce_are_tracked() {
        let o = "http://localhost:9";
        assert!(trackable_key("http://localhost:9/", o));
        assert!(trackable_key("http://localhost:9/^0http://127.0.0.1", o));
        let w = "https://w.example";
        assert!(trackable_key("https://w.example/^31", w));
        assert!(!trackable_key("https://w.example/^30", w));
        assert!(!trackable_key(
            "https://w.example/^0https://shop.example^31",
            w
        ));
        assert!(
            !trackable_key("http://localhost:90/", o),
            "another origin (port)"
        );
        assert!(!trackable_key(
            "http://localhost:9/^0http://127.0.0.1",
            "http://127.0.0.1"
        ));
        assert!(
            !trackable_key("http://localhost:9/^112345^267890", o),
            "a nonce"
        );
        assert!(
            !trackable_key("http://localhost:9/^0http://127.0.0.1^4123^5456", o),
            "an opaque top"
        );
        assert!(!trackable_key("http://localhost:9/x", o));
        assert!(!trackable_key("", o));
    }

    /// A script that writes `value` under the key `k` of store `s` of database `db`, and
    /// answers 1 once it is committed.
    fn put(value: &str) -> String {
        format!(
            "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
            r.onupgradeneeded = () => r.result.createObjectStore('s');
            r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
              tx.objectStore('s').put('{value}', 'k'); tx.oncomplete = () => {{ r.result.close(); resolve(1); }}; }};
            r.onerror = () => reject(r.error); }})"
        )
    }

    /// An unchanged IndexedDB is not read again once Chromium tracks it; every kind of change
    /// — a record written, a database created — is in the next capture.
    #[tokio::test]
    async fn indexeddb_is_read_again_only_after_a_change() {
        let (_guards, page) = page_on_app_origin().await;
        let _: i64 = read_value(&page, put("first")).await;

        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let capture = || capture(&page, &calls, &cache, &watch, OPTIONS);
        let first = capture().await.unwrap();
        assert!(idb_of(&first).contains("first"));
        assert!(
            watch.begin(&cache).same.is_empty(),
            "read before tracking began"
        );
        let second = capture().await.unwrap();
        assert_eq!(idb_of(&second), idb_of(&first));
        assert!(
            !watch.begin(&cache).same.is_empty(),
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

    /// A cross-site iframe's IndexedDB (partitioned under the top's site, in a renderer of its
    /// own) is tracked too: once tracked, it is not read again — on the frame's next document
    /// either — until a change, which the next capture has.
    #[tokio::test]
    async fn a_cross_site_frames_indexeddb_is_read_again_only_after_a_change() {
        let (_chromium, relay, _browser, _pump, page) = relayed_page().await;
        let (port, _server) = two_site_server().await;
        let calls = relay.calls();
        let (cache, watch) = (PartCache::default(), IdbWatch::default());
        let capture = || capture(&page, &calls, &cache, &watch, OPTIONS);
        let frame_key = key(
            &format!("http://127.0.0.1:{port}"),
            &format!("http://localhost:{port}"),
        );
        let frame_idb = |cp: &Checkpoint| {
            cp.storage
                .get(&frame_key)
                .and_then(|s| s.idb.as_ref())
                .map(|p| p.json.clone())
                .unwrap_or_default()
        };
        let full_reads = || watch.0.lock().unwrap().full_reads;
        let go = |n: u32| page.goto(format!("http://127.0.0.1:{port}/top{n}"));

        go(0).await.unwrap();
        let mut frame = the_frame(&calls, None).await;
        assert_eq!(frame_value(&calls, &frame, &put("first")).await, 1);
        let first = capture().await.unwrap();
        assert!(frame_idb(&first).contains("first"), "{}", frame_idb(&first));
        let _ = capture().await.unwrap();
        assert_eq!(full_reads(), 2, "read in full until tracked");
        let _ = capture().await.unwrap();
        assert_eq!(full_reads(), 2, "not read again: nothing changed");

        go(1).await.unwrap();
        frame = the_frame(&calls, Some(&frame)).await;
        let on_a_new_document = capture().await.unwrap();
        assert_eq!(frame_idb(&on_a_new_document), frame_idb(&first));
        assert_eq!(
            full_reads(),
            2,
            "not read again on the frame's new document: nothing changed"
        );

        assert_eq!(frame_value(&calls, &frame, &put("second")).await, 1);
        let after_put = capture().await.unwrap();
        assert!(
            frame_idb(&after_put).contains("second"),
            "a record written in the frame is seen: {}",
            frame_idb(&after_put)
        );
        assert_eq!(full_reads(), 3);
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
