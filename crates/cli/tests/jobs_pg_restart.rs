//! PostgreSQL restarted under a worker in the middle of its runs. Checkpoints that fall in the
//! outage are not counted. The runs go on (or, stopped when their leases could not be renewed,
//! are claimed again) and complete, each signed in once, no poll lost.
//! The worker takes new runs afterwards. Its own test binary: it restarts the cluster
//! behind `OUTLIVE_TEST_DATABASE_URL` (a local one, as `scripts/postgres` makes), which other
//! tests must not see.

mod support;

use outlive_jobs::RunStatus;
use std::time::{Duration, Instant};

use outlive_jobs as jobs;
use outlive_jobs::PgStore;
use support::pg::{JobsBed, submit_bank};

/// `pg_ctlcluster VERSION NAME restart` for the local cluster on the URL's port.
fn restart_postgres(url: &str) {
    let port = url::Url::parse(url)
        .unwrap()
        .port()
        .unwrap_or(5432)
        .to_string();
    let list = std::process::Command::new("pg_lsclusters")
        .arg("-h")
        .output()
        .expect("pg_lsclusters (Debian's postgresql-common): the test restarts a local cluster");
    let list = String::from_utf8(list.stdout).unwrap();
    let cluster: Vec<&str> = list
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&port.as_str()))
        .expect("a local cluster on the test database's port")
        .into_iter()
        .take(2)
        .collect();
    let status = std::process::Command::new("pg_ctlcluster")
        .args([cluster[0], cluster[1], "restart"])
        .status()
        .unwrap();
    assert!(status.success(), "pg_ctlcluster restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_go_on_through_a_postgres_restart() {
    let jb = JobsBed::start(Some(4)).await;
    let worker = jb.worker(&["--concurrency", "3"]);
    let JobsBed { db, store, bed, .. } = jb;
    for _ in 0..3 {
        submit_bank(&store, 50, 200).await;
    }
    // All three signed in and polling.
    let deadline = Instant::now() + Duration::from_secs(60);
    while bed.bank().counters().polls_served < 12 {
        assert!(Instant::now() < deadline, "{:?}", bed.bank().counters());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(bed.bank().counters().totps_accepted, 3);
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || restart_postgres(&url))
        .await
        .unwrap();
    let served = bed.bank().counters().polls_served;
    assert!(
        served < 150,
        "the runs were still going when it came back ({served} polls)"
    );
    let store = PgStore::connect(&db.url).await.unwrap();

    let until_done = |n: usize| {
        let store = store.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let runs = jobs::runs(&store).await.unwrap();
                if runs.len() == n && runs.iter().all(|r| r.status == RunStatus::Completed) {
                    return runs;
                }
                assert!(Instant::now() < deadline, "{runs:#?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let runs = until_done(3).await;
    for run in &runs {
        assert_eq!(run.result.as_ref().unwrap()["polls"], 50, "{run:#?}");
        // A restart longer than the self-stop deadline (heartbeat 1 s × (3 − 1)), or a machine
        // too loaded to renew within it, stops the runs. The worker claims them again once
        // the database answers, and they resume from their checkpoints.
        println!("{}: {} pickups", run.run_id, run.pickups);
    }
    assert_eq!(
        bed.bank().counters().totps_accepted,
        3,
        "one sign-in per run"
    );

    // And it still takes new runs.
    submit_bank(&store, 3, 100).await;
    until_done(4).await;

    worker.stop().await;
    support::assert_gateway_clean(bed.gateway()).await;
    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
