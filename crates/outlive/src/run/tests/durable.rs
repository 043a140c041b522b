//! Durable runs (feature `durable`): checkpoints sealed and saved, a run taken over from
//! another process.

use std::sync::atomic::AtomicBool;

use super::*;

/// A checkpoint store in memory: every save, in order; refuses saves when `fail` is set.
#[derive(Default)]
struct Saves {
    saved: Mutex<Vec<(String, u32, Vec<u8>)>>,
    fail: AtomicBool,
}

impl crate::CheckpointStore for Saves {
    fn save<'a>(
        &'a self,
        run_id: &'a str,
        attempt: u32,
        sealed: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            if self.fail.load(Ordering::SeqCst) {
                return Err(Error::new(ErrorKind::Io, "the database is down"));
            }
            self.saved
                .lock()
                .unwrap()
                .push((run_id.to_owned(), attempt, sealed));
            Ok(())
        })
    }
}

fn sealer() -> crate::Sealer {
    crate::Sealer::new(crate::SealKey::from_bytes([7; 32]))
}

#[tokio::test(start_paused = true)]
async fn a_durable_run_saves_each_checkpoint_sealed_for_its_run() {
    let saves = Arc::new(Saves::default());
    let durable = crate::Durable::new("run-1", sealer(), saves.clone());
    let (v, e) = run_fake(
        &Fake::new(&[Plan::Live]),
        |o| o.durable(durable),
        |(), ctx| async move {
            assert!(ctx.checkpoint_with(&3u32).await);
            Ok::<_, String>(ctx.attempt())
        },
    )
    .await;
    assert_eq!(v.unwrap(), 1);
    assert_eq!(
        e.run_id, "run-1",
        "the wide event carries the durable run's id"
    );
    let saved = saves.saved.lock().unwrap();
    assert_eq!(saved.len(), 1);
    let (run, attempt, sealed) = &saved[0];
    assert_eq!((run.as_str(), *attempt), ("run-1", 1));
    let plain = sealer().open("run-1", sealed).unwrap();
    let cp = Checkpoint::from_bytes(&plain, Instant::now()).unwrap();
    assert_eq!(cp.progress.as_deref().map(|p| p.as_str()), Some("3"));
    assert!(sealer().open("run-2", sealed).is_err(), "bound to its run");
}

#[tokio::test(start_paused = true)]
async fn a_run_taken_over_resumes_from_the_sealed_checkpoint() {
    // The first process: two entries (one death), the last checkpoint saved with progress 5.
    let saves = Arc::new(Saves::default());
    let (v, _) = run_fake(
        &Fake::new(&[dies(5_000), Plan::Live]),
        |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone())),
        |(), ctx| async move {
            assert!(ctx.checkpoint_with(&(ctx.attempt() + 3)).await);
            if ctx.attempt() == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, String>(ctx.attempt())
        },
    )
    .await;
    assert_eq!(v.unwrap(), 2);
    let (_, attempt, sealed) = saves.saved.lock().unwrap().last().cloned().unwrap();
    assert_eq!(attempt, 2);
    // Another process takes the run over from what the store kept.
    let fake = Fake::new(&[Plan::Live]);
    let (v, e) = run_fake(
        &fake,
        |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone()).resume(sealed, 2)),
        |(), ctx| async move {
            let progress: Option<u32> = ctx.progress().map_err(|e| e.to_string())?;
            Ok::<_, String>((ctx.attempt(), ctx.resumed_from().is_some(), progress))
        },
    )
    .await;
    assert_eq!(v.unwrap(), (3, true, Some(5)));
    assert_eq!(e.attempts, 3, "attempts continue");
    assert_eq!(fake.launches.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_that_does_not_open_ends_the_run_before_any_launch() {
    let sealed = sealer().seal("run-1", b"{}");
    let wrong_key = crate::Sealer::new(crate::SealKey::from_bytes([8; 32]));
    for (durable, says) in [
        (
            crate::Durable::new("run-1", wrong_key, Arc::new(Saves::default())),
            "sealed under key",
        ),
        (
            crate::Durable::new("run-2", sealer(), Arc::new(Saves::default())),
            "another run",
        ),
    ] {
        let fake = Fake::new(&[Plan::Live]);
        let (v, _) = run_fake(
            &fake,
            |o| o.durable(durable.resume(sealed.clone(), 1)),
            |(), _ctx| async { Ok::<_, String>(()) },
        )
        .await;
        let err = match v {
            Err(RunError::Outlive(e)) => e,
            other => panic!("refused, not {other:?}"),
        };
        assert_eq!(err.kind(), ErrorKind::Sealed);
        assert!(err.to_string().contains(says), "{err}");
        assert!(fake.launches.lock().unwrap().is_empty(), "nothing launched");
    }
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_the_store_refused_is_not_counted_as_taken() {
    let saves = Arc::new(Saves::default());
    saves.fail.store(true, Ordering::SeqCst);
    let (v, _) = run_fake(
        &Fake::new(&[Plan::Live]),
        |o| o.durable(crate::Durable::new("run-1", sealer(), saves.clone())),
        |(), ctx| async move { Ok::<_, String>(ctx.checkpoint().await) },
    )
    .await;
    assert!(!v.unwrap(), "not durable, so not taken");
}
