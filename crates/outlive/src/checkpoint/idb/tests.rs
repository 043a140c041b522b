//! The tracking against a real Chromium, through outlive's relay: what is read again, and when.

use std::time::Duration;

use chromiumoxide::Page;
use tokio::time::Instant;

use super::Tracking;
use crate::checkpoint::cache::PartCache;
use crate::checkpoint::capture::{CaptureOptions, capture};
use crate::checkpoint::model::{Checkpoint, StorageKey};
use crate::checkpoint::restore::restore;
use crate::checkpoint::test_support::{
    frame_value, key, local, read_value, relayed_page, the_frame, two_site_server,
};
use crate::relay::Calls;
use crate::sync::lock;

/// What the captures of these tests read: IndexedDB too, up to 1 MiB a frame.
const OPTIONS: CaptureOptions = CaptureOptions {
    indexed_db: true,
    indexed_db_max_bytes: 1 << 20,
    files: false,
    files_max_bytes: 0,
    frame_timeout: Duration::from_secs(5),
    in_full: false,
    page_state: false,
};

/// A page under test, the relay's calls, and what its captures keep between them: the
/// IndexedDB watch and the parts cache. Dropped in this order, the guards that keep the
/// page's Chromium alive last.
struct Captures<G> {
    watch: Tracking,
    cache: PartCache,
    calls: Calls,
    page: Page,
    _guards: G,
}

impl<G> Captures<G> {
    fn new(page: Page, calls: Calls, guards: G) -> Self {
        Captures {
            watch: Tracking::default(),
            cache: PartCache::default(),
            calls,
            page,
            _guards: guards,
        }
    }

    /// A checkpoint of the page, as a run takes one.
    async fn capture(&self) -> Checkpoint {
        let (page, calls) = (&self.page, &self.calls);
        capture(page, calls, &self.cache, &self.watch, OPTIONS)
            .await
            .unwrap()
    }

    /// Captures, waits until `n` storage keys are tracked, and captures again: the next
    /// capture may take these reads as standing.
    async fn capture_tracked(&self, n: usize) {
        self.capture().await;
        until_tracked(&self.watch, n).await;
        self.capture().await;
    }

    /// Runs `write` (a page's or a frame's script), then waits until its change event was
    /// counted: so a capture right after it tests what a capture does with the event.
    async fn changed_by<O>(&self, write: impl Future<Output = O>) -> O {
        let n = changes(&self.watch);
        let written = write.await;
        until_changed(&self.watch, n).await;
        written
    }

    /// The frames' IndexedDB read in full so far.
    fn full_reads(&self) -> u64 {
        self.watch.state().full_reads
    }
}

/// A page of a real origin, `https://app.example`, restored from a one-item checkpoint
/// (served by a restore document; no request leaves), reached through outlive's relay
/// (which hands over IndexedDB's change events).
async fn page_on_app_origin() -> Captures<impl Sized> {
    let (chromium, relay, browser, pump, page) = relayed_page().await;
    let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
    cp.storage.insert(
        key("https://app.example", "https://app.example"),
        local(r#"[["k","v"]]"#),
    );
    let calls = relay.calls();
    restore(&page, &calls, &cp, None).await.unwrap();
    Captures::new(page, calls, (pump, browser, relay, chromium))
}

/// A relayed page, and the port of a two-site server to point it at: its `/top{n}` frames
/// a cross-site `/frame{n}`.
async fn page_on_two_sites() -> (Captures<impl Sized>, u16) {
    let (chromium, relay, browser, pump, page) = relayed_page().await;
    let (port, server) = two_site_server().await;
    let calls = relay.calls();
    let guards = (server, pump, browser, relay, chromium);
    (Captures::new(page, calls, guards), port)
}

/// The IndexedDB (JSON) of the first storage key `cp` holds; empty if none.
fn idb_of(cp: &Checkpoint) -> String {
    cp.storage
        .keys()
        .next()
        .map_or_else(String::new, |key| idb_at(cp, key))
}

/// The IndexedDB (JSON) `cp` holds for storage key `key`; empty if none.
fn idb_at(cp: &Checkpoint, key: &StorageKey) -> String {
    cp.storage
        .get(key)
        .and_then(|s| s.idb.as_ref())
        .map(|p| p.json.clone())
        .unwrap_or_default()
}

/// Waits (bounded) until `n` storage keys are tracked: the tracker starts a tracking after
/// the capture that asked for it.
async fn until_tracked(watch: &Tracking, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock(&watch.state().seen).relied_on().len() < n {
        assert!(Instant::now() < deadline, "{n} keys tracked within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The change events counted so far (counting those delivered now).
fn changes(watch: &Tracking) -> u64 {
    let state = watch.state();
    state.count_delivered();
    lock(&state.seen).changes.all
}

/// Waits (bounded) until more than `n` change events were counted. Chromium's event for a
/// commit usually reaches outlive before the commit's completion reaches the page, not
/// always (see `Tracking`). So a test that captures right after a write waits for its event
/// first: it tests what a capture does with the event.
async fn until_changed(watch: &Tracking, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while changes(watch) <= n {
        assert!(Instant::now() < deadline, "a change event within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
    let t = page_on_app_origin().await;
    let _: i64 = read_value(&t.page, put("first")).await;

    let first = t.capture().await;
    assert!(idb_of(&first).contains("first"));
    assert!(
        t.watch.begin(&t.cache, false).offered().is_empty(),
        "read before tracking began"
    );
    until_tracked(&t.watch, 1).await;
    let second = t.capture().await;
    assert_eq!(idb_of(&second), idb_of(&first));
    assert!(
        !t.watch.begin(&t.cache, false).offered().is_empty(),
        "read while tracked and unchanged: the next capture may skip it"
    );
    assert_eq!(t.full_reads(), 2);
    let third = t.capture().await;
    assert_eq!(idb_of(&third), idb_of(&first), "the same content");
    assert_eq!(t.full_reads(), 2, "not read again: nothing changed");

    let _: i64 = t.changed_by(read_value(&t.page, put("second"))).await;
    let after_put = t.capture().await;
    assert!(
        idb_of(&after_put).contains("second"),
        "a record written is seen"
    );
    assert_eq!(t.full_reads(), 3);
    until_tracked(&t.watch, 1).await;
    t.capture().await;

    let create = "new Promise((resolve) => { const r = indexedDB.open('other', 3);
          r.onsuccess = () => { r.result.close(); resolve(1); }; })";
    let _: i64 = t.changed_by(read_value(&t.page, create.into())).await;
    let after_create = t.capture().await;
    assert!(
        idb_of(&after_create).contains("\"other\""),
        "a database created is seen: {}",
        idb_of(&after_create)
    );
    until_tracked(&t.watch, 1).await;
    t.capture().await;
    let delete = "new Promise((resolve) => { const r = indexedDB.deleteDatabase('other');
          r.onsuccess = () => resolve(1); })";
    let _: i64 = t.changed_by(read_value(&t.page, delete.into())).await;
    let after_delete = t.capture().await;
    assert!(
        !idb_of(&after_delete).contains("\"other\""),
        "a database deleted is seen"
    );
}

/// A change reported after a capture that took the frame's read as standing wakes `stale`
/// (Chromium reports a commit after the page learned of it, now and then). So the run takes
/// a new checkpoint at once; that one holds it. A capture that took nothing as
/// standing leaves `stale` asleep.
#[tokio::test]
async fn a_change_reported_after_a_capture_that_took_it_as_standing_wakes_stale() {
    use futures::FutureExt;
    let t = page_on_app_origin().await;
    let _: i64 = read_value(&t.page, put("first")).await;
    t.capture_tracked(1).await;
    let _: i64 = t.changed_by(read_value(&t.page, put("read in full"))).await;
    assert!(
        t.watch.stale().now_or_never().is_none(),
        "read in full: nothing stood"
    );
    t.capture_tracked(1).await;
    let standing = t.capture().await;
    assert_eq!(t.full_reads(), 4, "the last read stood");
    assert!(idb_of(&standing).contains("read in full"));

    let _: i64 = read_value(&t.page, put("late")).await;
    tokio::time::timeout(Duration::from_secs(10), t.watch.stale())
        .await
        .expect("woken within 10 s");
    let next = t.capture().await;
    assert!(idb_of(&next).contains("late"), "{}", idb_of(&next));
}

/// A change that comes while a capture runs — after it began, before the frame's script
/// read — has that frame read again in full: the checkpoint holds the change, not the last
/// read taken as standing.
#[tokio::test]
async fn a_change_during_a_capture_is_in_it() {
    let t = page_on_app_origin().await;
    let _: i64 = read_value(&t.page, put("first")).await;
    t.capture_tracked(1).await;
    assert!(
        !t.watch.begin(&t.cache, false).offered().is_empty(),
        "the next capture may take it as standing"
    );
    // The capture script lists the databases first: the page writes, once, as it does,
    // and goes on once the write's event was counted (`counted`, set below).
    let hook = format!(
        "(() => {{ const databases = indexedDB.databases.bind(indexedDB);
          indexedDB.databases = async () => {{ delete indexedDB.databases; await {};
            globalThis.written = true;
            while (!globalThis.counted) await new Promise((go) => setTimeout(go, 5));
            return databases(); }};
          return 1; }})()",
        put("during")
    );
    let _: i64 = read_value(&t.page, hook).await;
    let n = changes(&t.watch);
    let (during, ()) = futures::join!(t.capture(), async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !read_value::<bool>(&t.page, "globalThis.written === true".into()).await {
            assert!(Instant::now() < deadline, "the page wrote within 10 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        until_changed(&t.watch, n).await;
        let _: bool = read_value(&t.page, "globalThis.counted = true".into()).await;
    });
    assert!(
        idb_of(&during).contains("during"),
        "the change during the capture is in it: {}",
        idb_of(&during)
    );
    assert_eq!(t.full_reads(), 3, "read again in full once");
}

/// A cross-site iframe's IndexedDB (partitioned under the top's site, in a renderer of its
/// own) is tracked too. Once tracked, it is not read again until a change, on the frame's
/// next document either; the next capture has the change.
#[tokio::test]
async fn a_cross_site_frames_indexeddb_is_read_again_only_after_a_change() {
    let (t, port) = page_on_two_sites().await;
    let frame_key = key(
        &format!("http://127.0.0.1:{port}"),
        &format!("http://localhost:{port}"),
    );
    let frame_idb = |cp: &Checkpoint| idb_at(cp, &frame_key);
    let go = |n: u32| t.page.goto(format!("http://127.0.0.1:{port}/top{n}"));

    go(0).await.unwrap();
    let mut frame = the_frame(&t.page, &t.calls, None).await;
    assert_eq!(frame_value(&t.calls, &frame, &put("first")).await, 1);
    let first = t.capture().await;
    assert!(frame_idb(&first).contains("first"), "{}", frame_idb(&first));
    until_tracked(&t.watch, 1).await;
    t.capture().await;
    assert_eq!(t.full_reads(), 2, "read in full until tracked");
    t.capture().await;
    assert_eq!(t.full_reads(), 2, "not read again: nothing changed");

    go(1).await.unwrap();
    frame = the_frame(&t.page, &t.calls, Some(&frame)).await;
    let on_a_new_document = t.capture().await;
    assert_eq!(frame_idb(&on_a_new_document), frame_idb(&first));
    assert_eq!(
        t.full_reads(),
        2,
        "not read again on the frame's new document: nothing changed"
    );

    let written = t
        .changed_by(frame_value(&t.calls, &frame, &put("second")))
        .await;
    assert_eq!(written, 1);
    let after_put = t.capture().await;
    assert!(
        frame_idb(&after_put).contains("second"),
        "a record written in the frame is seen: {}",
        frame_idb(&after_put)
    );
    assert_eq!(t.full_reads(), 3);
}

/// A change to one storage key's IndexedDB has only the frames of that key read again: the
/// top's change leaves the cross-site frame's read standing, and the frame's the top's.
#[tokio::test]
async fn a_change_in_one_frames_indexeddb_has_only_that_frame_read_again() {
    let (t, port) = page_on_two_sites().await;
    let top = format!("http://127.0.0.1:{port}");
    let frame_key = key(&top, &format!("http://localhost:{port}"));
    let top_key = key(&top, &top);

    t.page.goto(format!("{top}/top0")).await.unwrap();
    let frame = the_frame(&t.page, &t.calls, None).await;
    let _: i64 = read_value(&t.page, put("top1")).await;
    assert_eq!(frame_value(&t.calls, &frame, &put("frame1")).await, 1);
    t.capture_tracked(2).await;
    assert_eq!(t.full_reads(), 4, "both read in full until tracked");
    t.capture().await;
    assert_eq!(t.full_reads(), 4, "neither read again: nothing changed");

    let _: i64 = t.changed_by(read_value(&t.page, put("top2"))).await;
    let cp = t.capture().await;
    let (top_idb, frame_idb) = (idb_at(&cp, &top_key), idb_at(&cp, &frame_key));
    assert!(top_idb.contains("top2"), "{top_idb}");
    assert!(frame_idb.contains("frame1"));
    assert_eq!(t.full_reads(), 5, "the top read again, not the frame");
    until_tracked(&t.watch, 2).await;

    let written = t
        .changed_by(frame_value(&t.calls, &frame, &put("frame2")))
        .await;
    assert_eq!(written, 1);
    let cp = t.capture().await;
    let (top_idb, frame_idb) = (idb_at(&cp, &top_key), idb_at(&cp, &frame_key));
    assert!(frame_idb.contains("frame2"), "{frame_idb}");
    assert!(top_idb.contains("top2"));
    // The top's read after its change was not tracked as it began (its change untracked
    // it): read once more, then it stands.
    assert_eq!(
        t.full_reads(),
        7,
        "the frame read again, and the top's second read"
    );
    until_tracked(&t.watch, 2).await;
    t.capture().await;
    assert_eq!(
        t.full_reads(),
        8,
        "the frame's second read after its change"
    );
    t.capture().await;
    assert_eq!(t.full_reads(), 8, "neither read again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_indexeddb_commits_leaves_no_events_piled_up() {
    let t = page_on_app_origin().await;
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
    let _: i64 = read_value(&t.page, commits(1, "a")).await;
    t.capture_tracked(1).await;

    // 2 000 transactions, one after another: the watcher sees the first and stops the
    // tracking, so the events of most of the others are never sent.
    let _: i64 = read_value(&t.page, commits(2_000, "b")).await;
    // The watcher runs on its own task: wait (bounded) for it to have seen the change and
    // stopped the tracking.
    let stopped = || {
        let state = t.watch.state();
        let seen = lock(&state.seen);
        seen.changes.all > 0 && seen.tracked.is_empty()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stopped() {
        assert!(
            Instant::now() < deadline,
            "the watcher saw the change and untracked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The events sent are delivered by now as a rule (a commit's report comes before its
    // completion but for a rare late one): counted, they show the tracking stopped early.
    t.watch.begin(&t.cache, false);
    let events = lock(&t.watch.state().seen).changes.all;
    assert!(events < 1_000, "{events} events for 2 000 commits");
    let after = t.capture().await;
    let idb = idb_of(&after);
    assert!(
        idb.contains("b1999"),
        "the newest record is captured: {idb}"
    );
    // Tracked again after that full read.
    until_tracked(&t.watch, 1).await;
}
