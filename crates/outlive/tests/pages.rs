//! The page as a unit of failure, against real Chromium. A crashed, closed or hung page is
//! noticed from the connection, and every call the task awaits on it fails at once. The task
//! is re-entered on a fresh page in the same browser with the checkpoint restored, without a
//! relaunch. A browser that died too is relaunched.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outlive::chromiumoxide::cdp::browser_protocol::page::{CrashParams, NavigateParams};
use outlive::chromiumoxide::error::CdpError;
use outlive::{DeathCause, Milestone, Options, Page, WideEvent, outlive_with_event};
use support::{Kill, Killable, SecondClient, sign_in, text, whoami};

/// How an entry breaks its page, after its non-repeatable step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Break {
    /// The renderer crashes (`Page.crash`, what running out of memory does).
    Crash,
    /// Another CDP client closes the page's target.
    CloseBySecondClient,
    /// The page's own script never yields (`for (;;) {}`).
    Hang,
    /// The renderer crashes while a checkpoint capture is in flight.
    CrashDuringCapture,
    /// The renderer crashes; the fresh page that replaces it crashes as soon as it exists,
    /// while it is being restored.
    CrashThenCrashTheFreshPage,
    /// The renderer crashes and the whole browser is SIGKILLed at the same moment.
    CrashAndKillTheBrowser,
    /// The renderer crashes; the fresh page that replaces it crashes the moment its target is
    /// created, while outlive is still setting it up (before any restore).
    CrashThenCrashTheFreshPageAtBirth,
}

#[derive(Default)]
struct Seen {
    /// `Page*` causes of the page failures, in order (from the milestones).
    page_failures: Vec<DeathCause>,
    /// Causes of browser deaths.
    deaths: Vec<DeathCause>,
    /// Per entry: whether it was resumed from a checkpoint.
    resumed: Vec<bool>,
    /// How long the first call after each break took to fail.
    failed_in: Vec<Duration>,
    /// When each launch began (its `Launched` milestone, less what it took).
    launch_began: Vec<Instant>,
}

/// When the test crashed a fresh page at its birth (`Break::CrashThenCrashTheFreshPageAtBirth`).
static FRESH_PAGE_CRASHED_AT: Mutex<Option<Instant>> = Mutex::new(None);

struct Outcome {
    event: WideEvent,
    seen: Seen,
    transfers: usize,
    launches: usize,
    /// What the last entry found: the cookie header the site received, and localStorage.
    state: (String, String),
}

/// Runs the two-step task: sign in (an HttpOnly cookie and a localStorage item), optionally
/// checkpoint, then the non-repeatable step (a transfer), checkpoint, and `breaks[attempt-1]`.
async fn run_task(breaks: &[Break], checkpoint_before_break: bool) -> Outcome {
    let (site, profiles, provider) = support::start().await;
    let transferred = AtomicU32::new(0);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let milestones = seen.clone();

    let outlive::Reported {
        result: state,
        event,
    } = outlive_with_event(
        &provider,
        |page, ctx| {
            let (site, provider, transferred, seen) = (&site, &provider, &transferred, &seen);
            async move {
                seen.lock()
                    .unwrap()
                    .resumed
                    .push(ctx.resumed_from().is_some());
                if ctx.resumed_from().is_none() {
                    sign_in(&page, site, "s3cr3t", "kept").await?;
                    if checkpoint_before_break {
                        assert!(ctx.checkpoint().await);
                    }
                }
                if transferred.load(Ordering::SeqCst) == 0 {
                    page.goto(NavigateParams::new(format!("{}/page/transfer", site.base)))
                        .await?;
                    transferred.fetch_add(1, Ordering::SeqCst);
                    // Off the transfer page before the checkpoint: a resume navigates to the
                    // checkpoint's URL, which must not repeat the transfer.
                    page.goto(NavigateParams::new(format!("{}/page/done", site.base)))
                        .await?;
                    if checkpoint_before_break {
                        assert!(ctx.checkpoint().await);
                    }
                }
                if let Some(how) = breaks.get(ctx.attempt() as usize - 1) {
                    break_page(*how, &page, &ctx, provider).await;
                    let started = Instant::now();
                    let after = page.evaluate("1").await;
                    seen.lock().unwrap().failed_in.push(started.elapsed());
                    assert!(after.is_err(), "a call on a broken page must fail");
                    after?;
                }
                whoami(&page, site).await
            }
        },
        probing(500, 1000).on_milestone(move |m| match m {
            Milestone::PageFailed { cause, .. } => {
                milestones.lock().unwrap().page_failures.push(*cause)
            }
            Milestone::Died { cause, .. } => milestones.lock().unwrap().deaths.push(*cause),
            Milestone::Launched { took } => milestones
                .lock()
                .unwrap()
                .launch_began
                .push(Instant::now() - *took),
            _ => {}
        }),
    )
    .await;

    profiles.assert_nothing_left();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Outcome {
        state: state.unwrap(),
        event,
        seen,
        transfers: site.hits("/page/transfer"),
        launches: provider.launches.load(Ordering::SeqCst),
    }
}

async fn break_page(how: Break, page: &Page, ctx: &outlive::Ctx, provider: &Killable) {
    let target = page.target_id().as_ref().to_owned();
    match how {
        Break::Crash => {
            // The crash answers no reply; outlive fails the call when the crash is reported.
            assert!(page.execute(CrashParams::default()).await.is_err());
        }
        Break::CloseBySecondClient => {
            SecondClient::connect(&provider.upstream())
                .await
                .close_target(&target)
                .await;
        }
        Break::Hang => {
            page.evaluate("setTimeout(() => { for (;;) {} }, 0)")
                .await
                .unwrap();
        }
        Break::CrashDuringCapture => {
            let (crashed, _wrote) =
                futures::join!(page.execute(CrashParams::default()), ctx.checkpoint());
            assert!(crashed.is_err());
        }
        Break::CrashThenCrashTheFreshPage => {
            crash_and_watch(page, provider, |mut second| async move {
                // outlive restores localStorage on a document it serves at this path.
                second.crash_page_at("__outlive_restore").await;
                // Keep the connection until the crash is delivered.
                tokio::time::sleep(Duration::from_secs(5)).await;
            })
            .await;
        }
        Break::CrashThenCrashTheFreshPageAtBirth => {
            let old = target.clone();
            crash_and_watch(page, provider, |mut second| async move {
                second.crash_next_page(&old).await;
                *FRESH_PAGE_CRASHED_AT.lock().unwrap() = Some(Instant::now());
                tokio::time::sleep(Duration::from_secs(5)).await;
            })
            .await;
        }
        Break::CrashAndKillTheBrowser => {
            let mut second = SecondClient::connect(&provider.upstream()).await;
            second.crash_target(&target).await;
            provider.kill(Kill::Sigkill);
        }
    }
}

/// Crashes `page` once a second client sees every target, and leaves that client to `watch`
/// (which crashes the fresh page) on a task of its own.
async fn crash_and_watch<F, Fut>(page: &Page, provider: &Killable, watch: F)
where
    F: FnOnce(SecondClient) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut second = SecondClient::connect(&provider.upstream()).await;
    let discover = serde_json::json!({ "discover": true });
    second
        .call("Target.setDiscoverTargets", discover, None)
        .await;
    tokio::spawn(watch(second));
    assert!(page.execute(CrashParams::default()).await.is_err());
}

fn assert_restored(out: &Outcome) {
    assert_eq!(out.transfers, 1, "the non-repeatable step ran once");
    assert_eq!(out.state.0, "sid=s3cr3t", "the HttpOnly cookie came back");
    assert_eq!(out.state.1, "kept", "localStorage came back");
    assert_eq!(out.event.release_failed, 0);
}

/// The run recovered from one page failure, of `cause`, on a fresh page in the same browser.
fn assert_recovered_once_from(out: &Outcome, cause: DeathCause) {
    assert_restored(out);
    assert_eq!(out.seen.page_failures, vec![cause]);
    assert_eq!((out.event.page_recoveries, out.event.relaunches), (1, 0));
    assert_eq!(out.launches, 1, "no new browser");
}

/// The first call after the break failed after at least `min` and within `max`.
fn assert_failed_in(out: &Outcome, min: Duration, max: Duration) {
    let failed_in = &out.seen.failed_in;
    assert!((min..max).contains(&failed_in[0]), "{failed_in:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_crash_mid_task_is_recovered_on_a_fresh_page_without_a_relaunch() {
    let out = run_task(&[Break::Crash], true).await;
    assert_recovered_once_from(&out, DeathCause::PageCrashed);
    assert_eq!(out.seen.resumed, vec![false, true]);
    assert_eq!(out.event.attempts, 2);
    // "At once": far below chromiumoxide's request timeout, whatever the machine's load.
    assert_failed_in(&out, Duration::ZERO, Duration::from_secs(5));
}

/// Tests where one break is recovered once, in the same browser, with nothing more to check.
macro_rules! recovered_once {
    ($($name:ident: $break:ident => $cause:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let out = run_task(&[Break::$break], true).await;
            assert_recovered_once_from(&out, DeathCause::$cause);
        }
    )*};
}

recovered_once! {
    a_page_closed_by_another_client_is_recovered: CloseBySecondClient => PageClosed;
    a_crash_during_a_checkpoint_capture_is_recovered: CrashDuringCapture => PageCrashed;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_page_is_noticed_by_its_stalled_command_and_recovered() {
    let out = run_task(&[Break::Hang], true).await;
    assert_recovered_once_from(&out, DeathCause::PageHung);
    // Noticed half a heartbeat interval + the timeout (1.25 s here) after the call was sent:
    // never before the probe's timeout; within interval + timeout on an idle machine.
    assert_failed_in(&out, Duration::from_millis(1_000), Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_the_fresh_page_during_its_restore_is_recovered_again() {
    let out = run_task(&[Break::CrashThenCrashTheFreshPage], true).await;
    assert_restored(&out);
    let seen = format!(
        "page failures {:?}, deaths {:?}, {:?}",
        out.seen.page_failures, out.seen.deaths, out.event
    );
    assert_eq!(out.event.page_recoveries, 2, "{seen}");
    assert_eq!(out.event.relaunches, 0, "{seen}");
    assert_eq!(out.launches, 1, "{seen}");
    assert_eq!(out.seen.page_failures.len(), 2, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_page_that_crashes_while_it_is_set_up_is_given_up_at_once() {
    let out = run_task(&[Break::CrashThenCrashTheFreshPageAtBirth], true).await;
    assert_restored(&out);
    assert_eq!(out.seen.page_failures, vec![DeathCause::PageCrashed]);
    // The browser that cannot keep a fresh page is replaced; the launch begins right after
    // the crash (it waited for the 10 s open timeout before).
    assert_eq!(
        (out.event.relaunches, out.launches),
        (1, 2),
        "{:?}",
        out.event
    );
    let crashed = FRESH_PAGE_CRASHED_AT
        .lock()
        .unwrap()
        .expect("the fresh page was crashed");
    let relaunched = out.seen.launch_began[1].saturating_duration_since(crashed);
    eprintln!("relaunch began {relaunched:?} after the fresh page crashed");
    assert!(relaunched < Duration::from_secs(1), "{relaunched:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_crashes_in_a_row_are_both_recovered() {
    let out = run_task(&[Break::Crash, Break::Crash], true).await;
    assert_restored(&out);
    assert_eq!(
        out.seen.page_failures,
        vec![DeathCause::PageCrashed, DeathCause::PageCrashed]
    );
    assert_eq!(out.seen.resumed, vec![false, true, true]);
    assert_eq!((out.event.page_recoveries, out.event.relaunches), (2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_first_checkpoint_re_enters_without_resumed_from() {
    let out = run_task(&[Break::Crash], false).await;
    assert_restored(&out);
    assert_eq!(out.seen.resumed, vec![false, false]);
    assert_eq!((out.event.page_recoveries, out.event.relaunches), (1, 0));
    assert_eq!(out.event.checkpoint_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_failure_racing_a_browser_death_relaunches() {
    let out = run_task(&[Break::CrashAndKillTheBrowser], true).await;
    assert_restored(&out);
    assert_eq!(out.event.relaunches, 1, "the dead browser was replaced");
    assert_eq!(out.launches, 2);
    assert!(!out.seen.deaths.is_empty() || !out.seen.page_failures.is_empty());
}

/// Options that probe a page after `interval_ms` of quiet and give it `timeout_ms` to answer.
fn probing(interval_ms: u64, timeout_ms: u64) -> Options {
    Options::new()
        .heartbeat_interval(Duration::from_millis(interval_ms))
        .heartbeat_timeout(Duration::from_millis(timeout_ms))
}

/// Runs `task` on killable browsers with `options`, each entry handed the test site's base
/// URL; checks that the run left nothing behind.
async fn on_site<F, Fut, T, E>(options: Options, mut task: F) -> outlive::Reported<T, E>
where
    F: FnMut(Page, outlive::Ctx, String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let (site, profiles, provider) = support::start().await;
    let entry = |page, ctx| task(page, ctx, site.base.clone());
    let reported = outlive_with_event(&provider, entry, options).await;
    profiles.assert_nothing_left();
    reported
}

/// One attempt, with no page recovery or relaunch.
fn assert_untouched(e: &outlive::WideEvent) {
    assert_eq!(
        (e.attempts, e.page_recoveries, e.relaunches),
        (1, 0, 0),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_navigation_is_not_a_hung_page() {
    // The server takes 3 s, twice the heartbeat interval + timeout: Chromium holds the page's
    // DevTools messages until the navigation commits, so a probe then would go unanswered by
    // a healthy page. outlive does not probe a navigating page.
    let outlive::Reported {
        result: name,
        event: e,
    } = on_site(probing(500, 1000), |page, _ctx, base| async move {
        let started = Instant::now();
        let eval = page.evaluate("new Promise(r => setTimeout(() => r(7), 2500))");
        let (nav, slow_eval) = futures::join!(
            page.goto(NavigateParams::new(format!("{base}/slow/3000"))),
            eval
        );
        nav?;
        // The evaluation either finished before the navigation committed or was cut by it;
        // neither is a page failure.
        let _ = slow_eval;
        assert!(started.elapsed() >= Duration::from_millis(3000));
        text(&page, "#name").await
    })
    .await;
    assert_eq!(name.unwrap(), "slow 3000");
    assert_untouched(&e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_nobody_answers_is_dismissed_and_the_step_is_not_redone() {
    let entries = &AtomicU32::new(0);
    // Half a second of stall is probed; a page with an open dialog would be "hung" at 1.5 s.
    let options = probing(1000, 1000);
    let outlive::Reported {
        result: answers,
        event: e,
    } = on_site(options, |page, _ctx, base| async move {
        entries.fetch_add(1, Ordering::SeqCst);
        page.goto(NavigateParams::new(format!("{base}/page/dialogs")))
            .await?;
        // Each blocks the page's script until the dialog is answered.
        let started = Instant::now();
        let alert: bool = page
            .evaluate("alert('the step is done'), true")
            .await?
            .into_value()?;
        let confirm: bool = page.evaluate("confirm('sure?')").await?.into_value()?;
        let prompt_null: bool = page
            .evaluate("prompt('name?', 'x') === null")
            .await?
            .into_value()?;
        Ok::<_, CdpError>((alert, confirm, prompt_null, started.elapsed()))
    })
    .await;
    let (alert, confirm, prompt_null, took) = answers.unwrap();
    assert_eq!(
        (alert, confirm, prompt_null),
        (true, false, true),
        "dismissed"
    );
    assert!(took < Duration::from_secs(1), "answered at once: {took:?}");
    assert_eq!(entries.load(Ordering::SeqCst), 1, "the step is not redone");
    assert_untouched(&e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_left_to_the_task_waits_for_it_and_is_no_hung_page() {
    use futures::StreamExt;
    use outlive::chromiumoxide::cdp::browser_protocol::page::{
        EventJavascriptDialogOpening, HandleJavaScriptDialogParams,
    };
    let options = probing(1000, 1000).dialogs(outlive::Dialogs::Leave);
    let outlive::Reported {
        result: answer,
        event: e,
    } = on_site(options, |page, _ctx, base| async move {
        page.goto(NavigateParams::new(format!("{base}/page/dialogs")))
            .await?;
        let mut opened = page
            .event_listener::<EventJavascriptDialogOpening>()
            .await?;
        let confirm = page.evaluate("confirm('sure?')");
        // The task takes its time (longer than the hang bound, interval + timeout), then
        // accepts.
        let answer = async {
            let dialog = opened.next().await.expect("the dialog opens");
            assert_eq!(dialog.message, "sure?");
            tokio::time::sleep(Duration::from_millis(3000)).await;
            page.execute(HandleJavaScriptDialogParams::new(true)).await
        };
        let (confirmed, answered) = futures::join!(confirm, answer);
        answered?;
        let confirmed: bool = confirmed?.into_value()?;
        Ok::<_, CdpError>(confirmed)
    })
    .await;
    assert!(answer.unwrap(), "the task's own answer");
    assert_untouched(&e);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_hangs_before_its_navigation_commits_is_noticed() {
    let navigated_at = &Mutex::new(None);
    let failed_at = Arc::new(Mutex::new(None));
    let seen = failed_at.clone();
    let options = Options::new().on_milestone(move |m| {
        if let Milestone::PageFailed {
            cause, detected_at, ..
        } = m
        {
            *seen.lock().unwrap() = Some((*cause, *detected_at));
        }
    });
    let outlive::Reported {
        result: name,
        event: e,
    } = on_site(options, |page, ctx, base| async move {
        if ctx.attempt() == 1 {
            page.goto(NavigateParams::new(format!("{base}/page/a")))
                .await?;
            // The renderer spins; the next document of the same site needs it to commit.
            page.evaluate("setTimeout(() => { for (;;) {} }, 0)")
                .await?;
            *navigated_at.lock().unwrap() = Some(Instant::now());
            page.goto(NavigateParams::new(format!("{base}/page/b")))
                .await?;
            unreachable!("the navigation of a hung page does not commit");
        }
        page.goto(NavigateParams::new(format!("{base}/page/c")))
            .await?;
        text(&page, "#name").await
    })
    .await;
    assert_eq!(name.unwrap(), "c");
    assert_eq!(
        (e.attempts, e.page_recoveries, e.relaunches),
        (2, 1, 0),
        "{e:?}"
    );
    let navigated_at = navigated_at
        .lock()
        .unwrap()
        .expect("the first entry navigated");
    let (cause, failed_at) = failed_at.lock().unwrap().expect("a page failure");
    let noticed = failed_at - navigated_at;
    eprintln!("the hung navigation was noticed after {noticed:?}");
    assert_eq!(cause, DeathCause::PageHung);
    // Default heartbeat: interval 1 s, timeout 2 s.
    assert!(noticed <= Duration::from_secs(3), "{noticed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_with_a_lone_surrogate_comes_back_with_a_replacement_character() {
    // Chromium escapes a lone surrogate in its JSON ("\ud800"), which chromiumoxide's serde
    // refuses: without the relay's mending the reply is dropped and the call never returns.
    let outlive::Reported { result, event } = on_site(Options::new(), |page, _ctx, _| async move {
        let mut seen = Vec::new();
        for script in [
            "'a\\ud800b'",
            "'\\ude00' + '\\ud83d'",
            "'\\ud83d\\ude00'",
            "JSON.stringify('\\udc00')",
        ] {
            let value = tokio::time::timeout(Duration::from_secs(20), page.evaluate(script))
                .await
                .map_err(|_| format!("{script} never returned"))?
                .map_err(|e| format!("{script}: {e}"))?;
            seen.push(value.into_value::<String>().map_err(|e| e.to_string())?);
        }
        Ok::<_, String>(seen)
    })
    .await;
    assert_eq!(
        result.unwrap(),
        ["a\u{FFFD}b", "\u{FFFD}\u{FFFD}", "\u{1F600}", "\"\\udc00\""]
    );
    assert_eq!((event.attempts, event.page_recoveries), (1, 0), "{event:?}");
}

/// A 2560 × 3200 canvas of noise: its PNG does not compress (about 33 MB of base64).
const NOISE: &str = "data:text/html,<body style=margin:0><canvas id=c width=2560 height=3200></canvas><script>const c=document.getElementById('c').getContext('2d');const d=c.createImageData(2560,3200);for(let i=0;i<d.data.length;i+=65536)crypto.getRandomValues(d.data.subarray(i,i+65536));for(let i=3;i<d.data.length;i+=4)d.data[i]=255;c.putImageData(d,0,0)</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_busy_with_a_big_screenshot_is_not_taken_for_dead() {
    // Chromium answers nothing, probes included, while it encodes this page's PNG: measured
    // 1.1–1.3 s here, beyond the 850 ms after which a quiet browser under a waiting command
    // was declared silent (then relaunched, and the task never finished).
    // Local Chromium itself: the test's killable proxy caps frames at tungstenite's 16 MiB.
    let profiles = support::Profiles::new();
    let provider = outlive::LocalChromium::new().profile_root(profiles.path());
    let outlive::Reported { result, event } = outlive_with_event(
        &provider,
        |page, _ctx| async move {
            page.goto(NavigateParams::new(NOISE)).await?;
            let mut sizes = Vec::new();
            for _ in 0..3 {
                let shot = outlive::chromiumoxide::page::ScreenshotParams::builder()
                    .full_page(true)
                    .build();
                sizes.push(page.screenshot(shot).await?.len());
            }
            Ok::<_, CdpError>(sizes)
        },
        Options::new(),
    )
    .await;
    let sizes = result.unwrap();
    assert!(sizes.iter().all(|s| *s > 20 << 20), "{sizes:?}");
    assert_untouched(&event);
    profiles.assert_nothing_left();
}
