//! Fidelity end to end. The two-site app (`aurora::twosite`) keeps a cross-site iframe's
//! partitioned localStorage, a CHIPS partitioned cookie, the tab's sessionStorage and an
//! IndexedDB database (two stores, an index, a Date, a Uint8Array, a Map, a Set, an
//! ArrayBuffer and a Blob). A run seeds it all, checkpoints, and its browser dies — twice, in
//! each death mode, on the Solari provider (the gateway) and on the local provider. After
//! every relaunch the app's own `report()`, read from the page as the app would, must see
//! every piece. No restore request may reach the app's servers. A value the codec cannot
//! carry is counted, not dropped silently.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aurora::twosite::{self, Report, TwoSite};
use gateway::DeathMode;
use nix::sys::signal::Signal;
use outlive::chromiumoxide::Page;
use outlive::chromiumoxide::error::CdpError;
use outlive::{BoxFuture, LocalChromium, Options, Outcome, Provider, WideEvent};
use outlive_bed::bed::Recording;

/// A record the codec cannot carry (an `ImageData`), beside one it can, in a database of
/// its own: the checkpoint must count the one left out.
const UNSUPPORTED_JS: &str = r#"new Promise((resolve, reject) => {
  const r = indexedDB.open('extra', 1);
  r.onupgradeneeded = () => r.result.createObjectStore('things');
  r.onerror = () => reject(r.error);
  r.onsuccess = () => {
    const tx = r.result.transaction('things', 'readwrite');
    tx.objectStore('things').put(new ImageData(1, 1), 'image');
    tx.objectStore('things').put({ kept: true }, 'plain');
    tx.oncomplete = () => { r.result.close(); resolve(true); };
    tx.onerror = () => reject(tx.error);
  };
})"#;

const KEPT_JS: &str = r#"new Promise((resolve) => {
  const r = indexedDB.open('extra');
  r.onsuccess = () => {
    const db = r.result;
    if (!db.objectStoreNames.contains('things')) { db.close(); return resolve(null); }
    const g = db.transaction('things').objectStore('things').get('plain');
    g.onsuccess = () => { db.close(); resolve(g.result ? g.result.kept : null); };
  };
  r.onerror = () => resolve(null);
})"#;

/// How the test kills the browser it is running in.
type Kill = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// What each entry of the task saw.
#[derive(Default)]
struct Seen {
    reports: Vec<(u32, Report)>,
    kept: Vec<(u32, Option<bool>)>,
}

/// The task: on the first entry, open the app, seed everything and checkpoint; on every
/// entry after a relaunch, read the app's report. Each of the first `deaths` entries ends by
/// killing its browser.
async fn task(
    page: Page,
    ctx: outlive::Ctx,
    site_url: String,
    deaths: u32,
    kill: Kill,
    seen: Arc<Mutex<Seen>>,
) -> Result<u32, CdpError> {
    let attempt = ctx.attempt();
    if attempt == 1 {
        page.goto(site_url).await?;
        let seeded: bool = page
            .evaluate_expression(twosite::SEED_JS)
            .await?
            .into_value()?;
        assert!(seeded);
        let _: bool = page
            .evaluate_expression(UNSUPPORTED_JS)
            .await?
            .into_value()?;
    } else {
        assert!(ctx.resumed_from().is_some(), "entry {attempt} resumed");
        let report: Report = page
            .evaluate_expression(twosite::REPORT_JS)
            .await?
            .into_value()?;
        let kept: Option<bool> = page.evaluate_expression(KEPT_JS).await?.into_value()?;
        let mut seen = seen.lock().unwrap();
        seen.reports.push((attempt, report));
        seen.kept.push((attempt, kept));
    }
    if attempt > deaths {
        return Ok(attempt);
    }
    assert!(ctx.checkpoint().await, "entry {attempt} checkpointed");
    kill().await;
    // Keep using the page until the dead browser fails the call.
    loop {
        page.evaluate_expression("1").await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(provider: &dyn Provider, site: &TwoSite, kill: Kill) -> WideEvent {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let options = Options::new()
        .checkpoint_every(Duration::from_secs(3600))
        .relaunch_backoff(Duration::from_millis(100));
    let url = site.app_url();
    let outlive::Reported { result, event } = outlive::outlive_with_event(
        provider,
        |page, ctx| task(page, ctx, url.clone(), 2, kill.clone(), seen.clone()),
        options,
    )
    .await;
    assert_eq!(result.expect("the run completes"), 3);
    assert_eq!((event.outcome, event.relaunches), (Outcome::Completed, 2));

    let seen = seen.lock().unwrap();
    assert_eq!(seen.reports.len(), 2, "two entries after relaunches");
    for (attempt, report) in &seen.reports {
        assert_eq!(
            report.missing(),
            Vec::<&str>::new(),
            "entry {attempt} after a relaunch"
        );
        assert_eq!(report, &Report::seeded(), "entry {attempt}");
    }
    for (attempt, kept) in &seen.kept {
        assert_eq!(
            *kept,
            Some(true),
            "entry {attempt}: the supported record of 'extra'"
        );
    }
    // The ImageData record, in every checkpoint: counted.
    assert_eq!(event.state_left_out, 1, "{event:?}");
    let restore_hits: Vec<_> = site
        .hits()
        .into_iter()
        .filter(|h| h.path.contains("__outlive"))
        .collect();
    assert!(
        restore_hits.is_empty(),
        "restore requests reached the site: {restore_hits:?}"
    );
    event
}

// ---- Solari provider on the gateway --------------------------------------------------------

async fn on_solari(mode: DeathMode) {
    let site = twosite::spawn().await.unwrap();
    let gw = support::fault_gateway(Duration::ZERO).await;
    let provider = Arc::new(support::Tracked::new(&gw, 0));
    let gw = Arc::new(gw);
    let kill: Kill = {
        let (gw, provider) = (gw.clone(), provider.clone());
        Arc::new(move || {
            let (gw, id) = (gw.clone(), provider.newest());
            Box::pin(async move {
                let _ = gw.kill(&id, mode).await;
            })
        })
    };
    let event = run(provider.as_ref(), &site, kill).await;
    assert_eq!(event.release_failed, 0);
    support::assert_gateway_clean(&gw).await;
}

// ---- Local provider --------------------------------------------------------------------------

/// The local deaths: `Close` ends Chromium with SIGTERM (it closes its sockets), `Reset`
/// with SIGKILL, `Silence` freezes it with SIGSTOP (the connection stays open and says
/// nothing; outlive's release kills it).
async fn on_local(mode: DeathMode) {
    let site = twosite::spawn().await.unwrap();
    let provider = Arc::new(Recording::new(LocalChromium::new()));
    let signal = match mode {
        DeathMode::Close => Signal::SIGTERM,
        DeathMode::Reset => Signal::SIGKILL,
        _ => Signal::SIGSTOP,
    };
    let kill: Kill = {
        let provider = provider.clone();
        Arc::new(move || {
            provider.signal_newest(signal);
            Box::pin(async {})
        })
    };
    let event = run(provider.as_ref(), &site, kill).await;
    assert_eq!(event.release_failed, 0);
    for pid in provider.pids() {
        // Gone, or a zombie waiting for its parent: not running.
        let alive = procfs::process::Process::new(pid as i32)
            .and_then(|p| p.stat())
            .is_ok_and(|stat| stat.state != 'Z');
        assert!(!alive, "browser {pid} was left running");
    }
}

/// One test per provider and death mode, so each runs (and fails) on its own.
macro_rules! in_each_mode {
    ($($name:ident: $on:ident($mode:ident);)*) => {$(
        #[tokio::test]
        async fn $name() {
            $on(DeathMode::$mode).await;
        }
    )*};
}

in_each_mode! {
    solari_close: on_solari(Close);
    solari_reset: on_solari(Reset);
    solari_silence: on_solari(Silence);
    local_close: on_local(Close);
    local_reset: on_local(Reset);
    local_silence: on_local(Silence);
}
