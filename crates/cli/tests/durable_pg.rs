//! Durable runs on a real PostgreSQL (`OUTLIVE_TEST_DATABASE_URL`, which `scripts/test` sets
//! up with `scripts/postgres`). The Aurora task's checkpoints go to the database sealed: the
//! raw rows hold neither the session cookie nor the localStorage value. A second run takes
//! the first one over from the row, signed in without a second TOTP. A tampered row and a
//! wrong key are refused before any browser is launched. Each test creates and drops
//! its own database.

mod support;

use std::sync::Arc;
use std::time::Duration;

use outlive::{Durable, ErrorKind, Options, RunError, SealKey, Sealer};
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{TestBed, dying};
use outlive_jobs::PgStore;
use support::Tracked;
use support::pg::Scratch;

fn sealer(byte: u8) -> Sealer {
    Sealer::new(SealKey::from_bytes([byte; 32]))
}

/// The bank task through outlive on `provider`, durable with `durable`.
async fn bank_run(
    bed: &TestBed,
    provider: &Tracked,
    durable: Durable,
) -> (Result<u32, String>, outlive::WideEvent) {
    let progress = BankProgress::default();
    let outlive::Reported { result, event } = bed
        .task(12, Duration::from_millis(100))
        .outlive(
            provider,
            &progress,
            Options::new()
                .checkpoint_every(Duration::from_millis(300))
                .durable(durable),
        )
        .await;
    (result.map_err(|e| e.to_string()), event)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_stored_sealed_and_a_run_is_taken_over_from_them() {
    let db = Scratch::create().await;
    let store = PgStore::connect(&db.url).await.unwrap();
    store.setup().await.unwrap();
    let bed = TestBed::start(dying(
        Duration::from_secs(120),
        Duration::ZERO,
        gateway::DeathMode::Close,
    ))
    .await
    .unwrap();
    let provider = Tracked::new(bed.gateway(), 0);
    let run_id = "run-pg-1";

    // The first process: the whole task, every checkpoint saved.
    let durable = Durable::new(run_id, sealer(1), Arc::new(store.clone()));
    let (result, event) = bank_run(&bed, &provider, durable).await;
    assert_eq!(result, Ok(12), "{}", event.to_json());
    assert_eq!(event.run_id, run_id);
    let saved = store
        .load(run_id)
        .await
        .unwrap()
        .expect("a row for the run");
    assert_eq!(saved.attempt, 1);

    // What the row holds, opened with the key: the session cookie and the localStorage value.
    let plain = sealer(1).open(run_id, &saved.sealed).unwrap();
    let plain = String::from_utf8(plain.to_vec()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&plain).unwrap();
    let cookie = json["cookies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == aurora::SESSION_COOKIE)
        .and_then(|c| c["value"].as_str())
        .expect("the session cookie is in the checkpoint")
        .to_owned();
    let pref = bed.bank().config().pref().to_owned();
    assert!(
        cookie.len() >= 16 && plain.contains(&pref),
        "the controls are real"
    );

    // The raw table, every column as text and the sealed bytes as they are: no plaintext.
    let rows: Vec<(String,)> = sqlx::query_as("SELECT t::text FROM outlive_checkpoints t")
        .fetch_all(store.pool())
        .await
        .unwrap();
    let raw: Vec<(Vec<u8>,)> = sqlx::query_as("SELECT sealed FROM outlive_checkpoints")
        .fetch_all(store.pool())
        .await
        .unwrap();
    for secret in [&cookie, &pref] {
        for (row,) in &rows {
            assert!(!row.contains(secret.as_str()), "plaintext in a row");
            assert!(
                !row.contains(&hex::encode(secret)),
                "hex plaintext in a row"
            );
        }
        for (bytes,) in &raw {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "plaintext in the sealed bytes"
            );
        }
    }

    // Another process takes the run over from the row: signed in already, no second TOTP.
    let launched = provider.ids.lock().unwrap().len();
    let durable =
        Durable::new(run_id, sealer(1), Arc::new(store.clone())).resume(saved.sealed.clone(), 1);
    let (result, event) = bank_run(&bed, &provider, durable).await;
    assert_eq!(result, Ok(12), "{}", event.to_json());
    assert_eq!(event.attempts, 2, "attempts continue: {}", event.to_json());
    assert_eq!(bed.bank().counters().totps_accepted, 1, "signed in once");
    assert_eq!(provider.ids.lock().unwrap().len(), launched + 1);
    assert_eq!(store.load(run_id).await.unwrap().unwrap().attempt, 2);

    // A tampered row and a wrong key: refused, nothing launched.
    sqlx::query(
        "UPDATE outlive_checkpoints SET sealed = set_byte(sealed, 60, get_byte(sealed, 60) # 1)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let tampered = store.load(run_id).await.unwrap().unwrap();
    let launched = provider.ids.lock().unwrap().len();
    for (key, says) in [(1, "altered"), (2, "sealed under key")] {
        let durable = Durable::new(run_id, sealer(key), Arc::new(store.clone()))
            .resume(tampered.sealed.clone(), tampered.attempt);
        let outlive::Reported { result, event } = bed
            .task(12, Duration::from_millis(100))
            .outlive(
                &provider,
                &BankProgress::default(),
                Options::new().durable(durable),
            )
            .await;
        match result {
            Err(RunError::Outlive(e)) => {
                assert_eq!(e.kind(), ErrorKind::Sealed);
                assert!(e.to_string().contains(says), "{e}");
            }
            other => panic!("refused, not {:?}", other.map_err(|e| e.to_string())),
        }
        assert_eq!(event.error_code.as_deref(), Some("sealed_refused"));
    }
    assert_eq!(
        provider.ids.lock().unwrap().len(),
        launched,
        "nothing launched"
    );

    support::shutdown_clean(bed).await;
    db.drop_now(store).await;
}
