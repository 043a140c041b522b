//! End to end against real Chromium: a task outlives the browsers it runs in.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::{Options, Outcome, RunError, WideEvent, outlive};
use support::{Kill, Profiles, Site, text};

fn capture_event() -> (
    Arc<Mutex<Option<WideEvent>>>,
    impl Fn(&WideEvent) + Send + Sync + 'static,
) {
    let slot: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let writer = slot.clone();
    (slot, move |e: &WideEvent| {
        *writer.lock().unwrap() = Some(e.clone())
    })
}

fn quiet_options() -> Options {
    // No automatic checkpoints: each test checkpoints where it needs to.
    Options::new().checkpoint_every(Duration::from_secs(3600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_needing_three_browsers_completes() {
    let (site, profiles, provider) = support::start().await;
    let (event, on_event) = capture_event();
    let done = AtomicU32::new(0); // progress lives in the caller's scope

    let result = outlive(
        &provider,
        |page, ctx| {
            let (site, provider, done) = (&site, &provider, &done);
            async move {
                while done.load(Ordering::SeqCst) < 6 {
                    let step = done.load(Ordering::SeqCst);
                    page.goto(NavigateParams::new(format!(
                        "{}/page/step{step}",
                        site.base
                    )))
                    .await?;
                    assert_eq!(text(&page, "#name").await?, format!("step{step}"));
                    done.fetch_add(1, Ordering::SeqCst);
                    ctx.checkpoint().await;
                    match (ctx.attempt(), step) {
                        (1, 1) => provider.kill(Kill::Sigkill),
                        (2, 3) => provider.kill(Kill::CloseFrame),
                        _ => continue,
                    }
                    // The browser is gone: the next call fails or hangs until outlive drops us.
                    page.evaluate("1").await?;
                    unreachable!("a page call succeeded on a killed browser");
                }
                Ok::<_, outlive::chromiumoxide::error::CdpError>(done.load(Ordering::SeqCst))
            }
        },
        quiet_options().on_event(on_event),
    )
    .await
    .unwrap();

    assert_eq!(result, 6);
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.outcome, Outcome::Completed);
    assert_eq!(event.attempts, 3);
    assert_eq!(event.relaunches, 2);
    assert_eq!(event.release_failed, 0);
    assert!(event.checkpoint_count >= 6);
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookies_local_storage_of_two_origins_and_url_survive() {
    let a = Site::start().await;
    let b = Site::start().await;
    let (profiles, provider) = support::browsers();
    let b_hits_at_death = AtomicU32::new(0);
    let seen = Mutex::new(None::<(String, String, String, String, String)>);

    outlive(
        &provider,
        |page, ctx| {
            let (a, b, provider, b_hits_at_death, seen) =
                (&a, &b, &provider, &b_hits_at_death, &seen);
            async move {
                if ctx.attempt() == 1 {
                    page.goto(NavigateParams::new(format!("{}/login/SID-4242", a.base)))
                        .await?;
                    page.evaluate("localStorage.setItem('pref', 'dark-mode')")
                        .await?;
                    page.goto(NavigateParams::new(format!("{}/page/other", b.base)))
                        .await?;
                    page.evaluate("localStorage.setItem('b-token', 'from-b')")
                        .await?;
                    assert!(ctx.checkpoint().await);
                    page.goto(NavigateParams::new(format!(
                        "{}/page/final?x=1#frag",
                        a.base
                    )))
                    .await?;
                    assert!(ctx.checkpoint().await);
                    b_hits_at_death.store(b.total_hits() as u32, Ordering::SeqCst);
                    provider.kill(Kill::Sigkill);
                    page.evaluate("1").await?;
                    unreachable!();
                }
                // Re-entered: nothing may have reached origin B while restoring.
                let b_hits_after_restore = b.total_hits() as u32;
                let resumed = ctx
                    .resumed_from()
                    .expect("a checkpoint was restored")
                    .url
                    .clone();
                let url_now = page.url().await?.unwrap_or_default();
                let pref = page
                    .evaluate("localStorage.getItem('pref')")
                    .await?
                    .into_value::<String>()?;
                page.goto(NavigateParams::new(format!("{}/whoami", a.base)))
                    .await?;
                let cookie = text(&page, "#cookie").await?;
                page.goto(NavigateParams::new(format!("{}/page/again", b.base)))
                    .await?;
                let b_item = page
                    .evaluate("localStorage.getItem('b-token')")
                    .await?
                    .into_value::<String>()?;
                assert_eq!(
                    b_hits_after_restore,
                    b_hits_at_death.load(Ordering::SeqCst),
                    "requests reached origin B during the restore: {:?}",
                    b.hit_paths()
                );
                *seen.lock().unwrap() = Some((resumed, url_now, pref, cookie, b_item));
                Ok::<_, outlive::chromiumoxide::error::CdpError>(())
            }
        },
        quiet_options(),
    )
    .await
    .unwrap();

    let (resumed, url_now, pref, cookie, b_item) = seen.lock().unwrap().clone().unwrap();
    let final_url = format!("{}/page/final?x=1#frag", a.base);
    assert_eq!(resumed, final_url);
    assert_eq!(url_now, final_url);
    assert_eq!(pref, "dark-mode");
    assert_eq!(cookie, "sid=SID-4242", "the HttpOnly cookie came back");
    assert_eq!(
        b_item, "from-b",
        "origin B's localStorage was restored though B was not open"
    );
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_death_before_the_first_checkpoint_reenters_without_resumed_from() {
    let (site, profiles, provider) = support::start().await;
    let entries = Mutex::new(Vec::new());

    outlive(
        &provider,
        |page, ctx| {
            let (site, provider, entries) = (&site, &provider, &entries);
            async move {
                entries
                    .lock()
                    .unwrap()
                    .push((ctx.attempt(), ctx.resumed_from().cloned()));
                page.goto(NavigateParams::new(format!("{}/page/x", site.base)))
                    .await?;
                if ctx.attempt() == 1 {
                    provider.kill(Kill::Sigkill);
                    page.evaluate("1").await?;
                }
                Ok::<_, outlive::chromiumoxide::error::CdpError>(())
            }
        },
        quiet_options(),
    )
    .await
    .unwrap();

    let entries = entries.into_inner().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].0, 2);
    assert!(
        entries[1].1.is_none(),
        "no checkpoint existed, so nothing was resumed"
    );
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_finishes_within_the_grace_is_not_reentered() {
    let (site, profiles, provider) = support::start().await;
    let (event, on_event) = capture_event();

    let out = outlive(
        &provider,
        |page, _ctx| {
            let (site, provider) = (&site, &provider);
            async move {
                page.goto(NavigateParams::new(format!("{}/page/last", site.base)))
                    .await?;
                let last = text(&page, "#name").await?; // the last page call, succeeded
                provider.kill(Kill::Sigkill);
                // Non-browser tail that ends after outlive noticed the death: a page call
                // fails only once the connection has been cut.
                let _ = page.evaluate("1").await;
                Ok::<_, outlive::chromiumoxide::error::CdpError>(last)
            }
        },
        quiet_options().on_event(on_event),
    )
    .await
    .unwrap();

    assert_eq!(out, "last");
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(
        (event.outcome, event.attempts, event.relaunches),
        (Outcome::Completed, 1, 0)
    );
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_working_past_the_grace_is_dropped_and_reentered() {
    let (profiles, provider) = support::browsers();
    let ticks = Arc::new(AtomicU32::new(0));

    let frozen = outlive(
        &provider,
        |_page, ctx| {
            let (provider, ticks) = (&provider, ticks.clone());
            async move {
                if ctx.attempt() == 1 {
                    provider.kill(Kill::Sigkill);
                    // Busy with non-browser work well past the grace.
                    loop {
                        ticks.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                // The old entry was dropped before this one started: the counter is frozen.
                let before = ticks.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, std::convert::Infallible>((before, ticks.load(Ordering::SeqCst)))
            }
        },
        quiet_options().grace(Duration::from_millis(250)),
    )
    .await
    .unwrap();

    assert!(frozen.0 > 0, "the first entry ran");
    assert_eq!(frozen.0, frozen.1, "the dropped entry kept running");
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_deaths_give_up_and_release_everything() {
    let (profiles, provider) = support::browsers();
    let (event, on_event) = capture_event();

    let err = outlive(
        &provider,
        |page, _ctx| {
            let provider = &provider;
            async move {
                provider.kill(Kill::Sigkill);
                page.evaluate("1").await?;
                Ok::<(), outlive::chromiumoxide::error::CdpError>(())
            }
        },
        quiet_options().max_relaunches(1).on_event(on_event),
    )
    .await
    .unwrap_err();

    let RunError::Outlive(e) = err else {
        panic!("expected GaveUp, got a task error")
    };
    assert_eq!(e.kind(), outlive::ErrorKind::GaveUp);
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.outcome, Outcome::GaveUp);
    assert_eq!(event.error_code.as_deref(), Some("gave_up"));
    assert_eq!((event.attempts, event.relaunches), (2, 1));
    // Two browsers were used. A third may have been launched during the last death's grace
    // (when the relay noticed the death before the task's page call failed) and then, not
    // needed, released: `assert_nothing_left` checks that.
    let launches = provider.launches.load(Ordering::SeqCst);
    assert!((2..=3).contains(&launches), "{launches} launches");
    profiles.assert_nothing_left();
}

#[derive(Debug, PartialEq)]
struct MyError(&'static str);
impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_error_with_a_live_browser_comes_back_unchanged() {
    let (profiles, provider) = support::browsers();
    let (event, on_event) = capture_event();
    let calls = AtomicU32::new(0);

    let err = outlive(
        &provider,
        |_page, _ctx| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(MyError("insufficient funds")) }
        },
        quiet_options().on_event(on_event),
    )
    .await
    .unwrap_err();

    assert!(matches!(err, RunError::Task(MyError("insufficient funds"))));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.outcome, Outcome::Failed);
    assert_eq!(event.error_name.as_deref(), Some("MyError"));
    assert_eq!(event.error.as_deref(), Some("insufficient funds"));
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_task_propagates_and_leaves_no_browser() {
    let (profiles, provider) = support::browsers();
    let (event, on_event) = capture_event();
    let options = quiet_options().on_event(on_event);

    let joined = tokio::spawn(async move {
        outlive(
            &provider,
            |_page, _ctx| async { panic!("task bug") as Result<(), MyError> },
            options,
        )
        .await
    })
    .await;

    assert!(joined.unwrap_err().is_panic());
    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.error_code.as_deref(), Some("panic"));
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_releases_every_browser() {
    let (profiles, provider) = support::browsers();
    let (event, on_event) = capture_event();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = Mutex::new(Some(entered_tx));

    let run = outlive(
        &provider,
        |_page, _ctx| {
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<(), MyError>>()
        },
        quiet_options().on_event(on_event),
    );
    tokio::select! {
        _ = run => unreachable!(),
        _ = entered_rx => {} // the task is running; dropping `run` here
    }

    let event = event.lock().unwrap().clone().unwrap();
    assert_eq!(event.error_code.as_deref(), Some("cancelled"));
    profiles.assert_nothing_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_options_fail_before_any_browser_starts() {
    let (_profiles, provider) = support::browsers();
    for options in [
        Options::new().checkpoint_every(Duration::ZERO),
        Options::new().navigation_timeout(Duration::ZERO),
        Options::new().viewport(0, 0),
    ] {
        let err = outlive(&provider, |_p, _c| async { Ok::<(), MyError>(()) }, options)
            .await
            .unwrap_err();
        assert_eq!(
            err.outlive().unwrap().kind(),
            outlive::ErrorKind::InvalidOption
        );
    }
    assert_eq!(provider.launches.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_browser_leaves_nothing_in_the_temp_dir() {
    let profiles = Profiles::new();
    let mut browser = outlive::LocalChromium::new()
        .profile_root(profiles.path())
        .start()
        .await
        .unwrap();
    // Chromium's process-singleton directory (which a SIGKILL would leave behind) is created
    // in the browser's own TMPDIR, inside its temporary directory.
    let singleton: Vec<_> = std::fs::read_dir(browser.profile_dir().join("tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        singleton.iter().any(|n| n.starts_with("org.chromium.")),
        "{singleton:?}"
    );
    browser.kill();
    drop(browser);
    profiles.assert_nothing_left();
}
