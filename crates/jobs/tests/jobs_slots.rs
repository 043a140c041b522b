//! What workers share on a real PostgreSQL. The session limit: a launch that finds every slot
//! taken waits on one connection (never a new one per try), is woken by a release, and a slot
//! held by a session dropped without release is freed with its connection. The tables: workers
//! starting at once on a fresh database all set it up.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outlive::{BoxFuture, CdpEndpoint, Provider, Session};
use outlive_jobs::PgStore;
use outlive_jobs::{LISTENER_APPLICATION, SLOT_APPLICATION, SessionLimit};
use outlive_testkit::ScratchDatabase;

/// Sessions that are nothing but a count: the limit is what is tested.
struct Counting(Arc<AtomicU32>);

struct Nothing;

impl Session for Nothing {
    fn endpoint(&self) -> &CdpEndpoint {
        static ENDPOINT: std::sync::OnceLock<CdpEndpoint> = std::sync::OnceLock::new();
        ENDPOINT.get_or_init(|| CdpEndpoint::new("ws://127.0.0.1:9/devtools/browser/x").unwrap())
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        Box::pin(async { Ok(()) })
    }
}

impl Provider for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(Box::new(Nothing) as Box<dyn Session>) })
    }
}

/// The session limit's connections to the scratch database (slots and listener).
async fn backends(store: &PgStore) -> BTreeSet<i32> {
    let rows: Vec<(i32,)> = sqlx::query_as(
        "SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND application_name IN ($1, $2)",
    )
    .bind(SLOT_APPLICATION)
    .bind(LISTENER_APPLICATION)
    .fetch_all(store.pool())
    .await
    .unwrap();
    rows.into_iter().map(|(pid,)| pid).collect()
}

/// Polls `backends` until `ok` holds for it (30 s cap), answering it.
async fn backends_until(
    store: &PgStore,
    what: &str,
    ok: impl Fn(&BTreeSet<i32>) -> bool,
) -> BTreeSet<i32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = backends(store).await;
        if ok(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: backends {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_launch_keeps_one_connection_and_takes_the_slot_a_release_frees() {
    let db = ScratchDatabase::for_test().await;
    let store = PgStore::connect(db.url()).await.unwrap();
    let launches = Arc::new(AtomicU32::new(0));
    let limit = Arc::new(SessionLimit::new(Counting(launches.clone()), db.url(), 1).unwrap());

    // The listener, then the first session's slot.
    let first = limit.launch().await.unwrap();
    let held = backends_until(&store, "the listener and the first slot", |b| b.len() >= 2).await;

    // The second launch waits: one connection more, the same one for every try (the
    // fallback retries at 100 ms, 200 ms, 400 ms, … with jitter: several within 2 s).
    let waiting = tokio::spawn({
        let limit = limit.clone();
        async move { limit.launch().await.map(|_session| ()) }
    });
    let with_waiter = backends_until(&store, "the waiting launch's connection", |b| {
        b.len() > held.len()
    })
    .await;
    assert_eq!(with_waiter.len(), held.len() + 1, "{with_waiter:?}");
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the slot is held");
        let now = backends(&store).await;
        assert_eq!(now, with_waiter, "a try opened a new connection");
    }
    assert_eq!(launches.load(Ordering::SeqCst), 1);

    // Released: the waiting launch takes the slot.
    first.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the released slot is taken")
        .unwrap()
        .unwrap();
    assert_eq!(launches.load(Ordering::SeqCst), 2);

    // A session dropped without release frees its slot with its connection.
    let third = limit.launch().await.unwrap();
    let next = tokio::spawn({
        let limit = limit.clone();
        async move { limit.launch().await.map(|_session| ()) }
    });
    drop(third);
    tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("the dropped session's slot is taken")
        .unwrap()
        .unwrap();
    assert_eq!(launches.load(Ordering::SeqCst), 4);

    drop(limit);
    store.pool().close().await;
    db.drop_now().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_starting_at_once_on_a_fresh_database_all_set_it_up() {
    let db = ScratchDatabase::for_test().await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(PgStore::connect(db.url()).await.unwrap());
    }
    // Without the setup lock, one of them fails on a duplicate type (pg_type's unique index).
    let setups = stores.iter().map(outlive_jobs::setup);
    for result in futures::future::join_all(setups).await {
        result.unwrap();
    }
    let runs = outlive_jobs::runs(&stores[0]).await.unwrap();
    assert!(runs.is_empty());
    for store in stores {
        store.pool().close().await;
    }
    db.drop_now().await.unwrap();
}
