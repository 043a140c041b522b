//! Rotation and standby end to end: real Chromium behind the gateway, the Aurora task through
//! the Solari provider. Sessions die of old age at a fixed lifetime. With the lifetime
//! declared, the task moves to a successor at a safe point before each death (no death, no
//! lost work, signed in once). With a standby, an unplanned death is replaced by the browser
//! already up.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::{Milestone, Options, Rotation};
use outlive_bed::bank::BankProgress;
use outlive_bed::bed::{TestBed, dying};
use support::Tracked;

/// Runs the bank task (`polls` polls, 100 ms apart, each saved with a checkpoint of the task's
/// own, as the README tells tasks to keep their steps) on `bed` with `options`. It shows each
/// milestone to `hook` as it comes, and answers the result, the event and every milestone in order.
///
/// Without its own checkpoints the task's polls would be progress outlive cannot see. A
/// rotation at an automatic checkpoint would count as fruitless, and the browser after it would
/// wait for its death instead of rotating (the issue-20 rule). Whether a death then reached the
/// task would depend on how fast the machine ran the polls.
async fn bank_run(
    bed: &TestBed,
    provider: &Tracked,
    polls: u32,
    options: Options,
    hook: impl Fn(&Milestone) + Send + Sync + 'static,
) -> (
    Result<u32, String>,
    outlive::WideEvent,
    Vec<Milestone>,
    BankProgress,
) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut task = bed.task(polls, Duration::from_millis(100));
    task.durable_progress = true;
    let progress = BankProgress::default();
    let seen: Arc<Mutex<Vec<Milestone>>> = Arc::default();
    let sink = seen.clone();
    let outlive::Reported { result, event } = task
        .outlive(
            provider,
            &progress,
            options.on_milestone(move |m| {
                hook(m);
                sink.lock().unwrap().push(m.clone());
            }),
        )
        .await;
    let milestones = seen.lock().unwrap().clone();
    (
        result.map_err(|e| e.to_string()),
        event,
        milestones,
        progress,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_lifetime_moves_the_task_before_each_death() {
    // Sessions die at 12 s; leave by 10.8 s (10 % margin), so every launch has seconds of slack
    // even on a loaded machine.
    let lifetime = Duration::from_secs(12);
    // Room for the task's browser, its successor and the one being released.
    let bed =
        TestBed::start(dying(lifetime, Duration::ZERO, gateway::DeathMode::Close).max_sessions(3))
            .await
            .unwrap();
    let provider = Tracked::new(bed.gateway(), 0);
    let (result, event, milestones, progress) = bank_run(
        &bed,
        &provider,
        100,
        Options::new()
            .checkpoint_every(Duration::from_millis(500))
            .rotation(Rotation::Expected(lifetime)),
        |_| {},
    )
    .await;
    println!("{}", event.to_json());

    assert_eq!(result, Ok(100), "{}", event.to_json());
    assert!(event.rotations >= 1, "{}", event.to_json());
    assert_eq!(event.relaunches, 0, "no browser died under the task");
    assert_eq!(event.lost_work_ms, 0);
    // One successor per rotation; a successor whose launch was refused or died before the
    // switch (a loaded machine, the gateway's session limit) is one more.
    assert!(
        event.sessions > event.rotations,
        "a successor per rotation: {}",
        event.to_json()
    );
    assert_eq!(event.attempts, event.rotations + 1);
    for m in &milestones {
        if let Milestone::Rotated { age, .. } = m {
            assert!(*age < lifetime, "left at {age:?}, before the death");
        }
        assert!(
            !matches!(m, Milestone::Died { .. }),
            "no death reached the task: {m:?}"
        );
    }
    assert_eq!(bed.bank().counters().totps_accepted, 1, "signed in once");
    assert_eq!(progress.sign_ins(), 1);
    assert_eq!(event.release_failed, 0);
    assert!(
        provider.ids.lock().unwrap().len() as u32 <= event.sessions,
        "every session the provider created is counted"
    );
    support::shutdown_clean(bed).await;
}

/// A gateway whose sessions live 120 s (only the test kills them), room for a standby.
async fn standby_bed() -> (TestBed, Tracked) {
    let bed = TestBed::start(
        dying(
            Duration::from_secs(120),
            Duration::ZERO,
            gateway::DeathMode::Close,
        )
        .max_sessions(4),
    )
    .await
    .unwrap();
    let provider = Tracked::new(bed.gateway(), 0);
    (bed, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_an_unplanned_death() {
    // Nothing predicts this death: no rotation, only the standby. The task's first browser is
    // killed by the gateway the moment the standby is ready.
    let (bed, provider) = standby_bed().await;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let ready_tx = Mutex::new(Some(ready_tx));
    let options = Options::new()
        .checkpoint_every(Duration::from_millis(500))
        .standby(true);
    let hook = move |m: &Milestone| {
        if matches!(m, Milestone::SuccessorReady { standby: true, .. }) {
            if let Some(tx) = ready_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    };
    let killer = async {
        if ready_rx.await.is_ok() {
            let first = provider.ids.lock().unwrap()[0].clone();
            bed.gateway()
                .kill(&first, gateway::DeathMode::Close)
                .await
                .expect("the first session is alive when its standby is ready");
        }
    };
    let ((result, event, milestones, progress), ()) =
        tokio::join!(bank_run(&bed, &provider, 60, options, hook), killer);
    println!("{}", event.to_json());

    assert_eq!(result, Ok(60), "{}", event.to_json());
    assert_eq!(event.relaunches, 1, "{}", event.to_json());
    assert!(event.standby_ms > 0);
    // The death found the standby ready: it took over, no launch started after the death.
    let death = milestones
        .iter()
        .position(|m| matches!(m, Milestone::Died { .. }))
        .expect("a death");
    assert!(
        milestones[..death]
            .iter()
            .any(|m| matches!(m, Milestone::SuccessorReady { standby: true, .. })),
        "a standby was ready before the death: {milestones:?}"
    );
    // The first browser, its standby (taken), the next standby: no launch for the death.
    assert_eq!(event.sessions, 3, "{}", event.to_json());
    assert_eq!(bed.bank().counters().totps_accepted, 1, "signed in once");
    assert_eq!(progress.sign_ins(), 1);
    assert_eq!(event.release_failed, 0);
    support::shutdown_clean(bed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_is_brought_up_to_date_with_what_changed_after_its_restore() {
    // The standby is restored from the entry's first checkpoint; then the page changes one
    // item, removes one, adds one and checkpoints again; the death makes the standby write only
    // those changes over its earlier restore. The page after the switch must see exactly the
    // newest checkpoint's storage.
    let (bed, provider) = standby_bed().await;
    let ready = Arc::new(tokio::sync::Notify::new());
    let on_ready = ready.clone();
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .standby(true)
        .on_milestone(move |m| {
            if matches!(m, Milestone::SuccessorReady { standby: true, .. }) {
                on_ready.notify_one();
            }
        });
    let url = bed.bank().url("/login");
    let big = "b".repeat(64 * 1024);
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        &provider,
        |page, ctx| {
            let (url, big, ready, bed, provider) =
                (url.clone(), big.clone(), ready.clone(), &bed, &provider);
            async move {
                if ctx.attempt() == 1 {
                    page.goto(url).await?;
                    page.evaluate(format!(
                        "localStorage.setItem('big', '{big}'); localStorage.setItem('step', '1'); \
                         localStorage.setItem('gone', 'x'); sessionStorage.setItem('tab', '1')"
                    ))
                    .await?;
                    assert!(ctx.checkpoint().await);
                    ready.notified().await;
                    page.evaluate(
                        "localStorage.setItem('step', '2'); localStorage.removeItem('gone'); \
                         localStorage.setItem('new', 'n\"ew'); sessionStorage.setItem('tab', '2')",
                    )
                    .await?;
                    assert!(ctx.checkpoint().await);
                    let first = provider.ids.lock().unwrap()[0].clone();
                    bed.gateway()
                        .kill(&first, gateway::DeathMode::Close)
                        .await
                        .expect("the first session is alive");
                    loop {
                        page.evaluate("1").await?;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                let seen: serde_json::Value = page
                    .evaluate(
                        "({ local: Object.fromEntries(Object.entries(localStorage)), \
                            tab: sessionStorage.getItem('tab') })",
                    )
                    .await?
                    .into_value()
                    .expect("json");
                Ok::<_, outlive::chromiumoxide::error::CdpError>(seen)
            }
        },
        options,
    )
    .await;
    println!("{}", event.to_json());
    let seen = result.expect("the run completes");
    assert_eq!(event.relaunches, 1, "{}", event.to_json());
    // The first browser and its standby, which took over (the second entry takes no
    // checkpoint, so no new standby follows).
    assert_eq!(event.sessions, 2, "{}", event.to_json());
    assert!(
        event.standby_ms > 0,
        "a standby took over: {}",
        event.to_json()
    );
    let local = seen["local"].as_object().expect("items");
    let mut keys: Vec<&str> = local.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["big", "new", "step"],
        "exactly the newest checkpoint's items"
    );
    assert!(local["big"] == big.as_str(), "the unchanged item kept");
    assert_eq!(local["step"], "2");
    assert_eq!(local["new"], "n\"ew");
    assert_eq!(seen["tab"], "2");
    support::shutdown_clean(bed).await;
}
