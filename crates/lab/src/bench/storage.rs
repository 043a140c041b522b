//! What client-side state costs a checkpoint and a restore. A checkpoint with 1 MiB of
//! unchanged localStorage (alone, and beside a 1 000-record IndexedDB store) is set against a
//! small one, at several RTTs through the gateway. The restore of 1 MiB localStorage plus the
//! 1 000 IndexedDB records after a death goes into a fresh local Chromium, and into a standby
//! restored before the death (where only what changed since is written). The realistic case,
//! [`Seed::TwoSite`], is the same on an app page that also keeps sessionStorage, a second
//! database and a cross-site iframe with its own (partitioned) storage. It is checkpointed on
//! each new document a multi-page task navigates to. It is replaced after a death with its
//! launch, restore and navigation timed apart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outlive::chromiumoxide::Page;
use outlive::chromiumoxide::error::CdpError;
use outlive::{LocalChromium, Milestone, Options};
use serde::Serialize;

use super::micro::measured_checkpoints;
use super::records::ms;
use crate::error::{Error, ErrorKind};
use crate::stats::median;
use crate::sync::lock;
use outlive_bed::bed::{Recording, TestBed, until_killed};

/// 16 localStorage items of 64 KiB characters: 1 MiB.
const SEED_LOCAL_1MIB: &str = "(() => { for (let i = 0; i < 16; i++) localStorage.setItem('blob' + i, String(i % 10).repeat(65536)); return true; })()";
/// One 100-character item: the small checkpoint.
const SEED_SMALL: &str =
    "(() => { localStorage.setItem('pref', 'x'.repeat(100)); return true; })()";
/// A 16 KiB sessionStorage item (a form's draft).
const SEED_SESSION_16K: &str =
    "(() => { sessionStorage.setItem('draft', 'd'.repeat(16384)); return true; })()";
/// The twosite widget's partitioned localStorage: 4 items of 64 Ki characters (256 KiB).
const WIDGET_ITEMS: u32 = 4;
/// A 1 000-record object store (an index, a Date, an array and numbers in each record).
const SEED_IDB_1000: &str = r#"new Promise((resolve, reject) => {
  const r = indexedDB.open('bench', 1);
  r.onupgradeneeded = () => r.result.createObjectStore('records', { keyPath: 'id' }).createIndex('byTag', 'tag');
  r.onerror = () => reject(r.error);
  r.onsuccess = () => {
    const tx = r.result.transaction('records', 'readwrite');
    const st = tx.objectStore('records');
    for (let i = 0; i < 1000; i++) st.put({ id: i, tag: 't' + (i % 7), name: 'record number ' + i, at: new Date(1700000000000 + i), tags: ['a', 'b'], n: i * 1.5 });
    tx.oncomplete = () => { r.result.close(); resolve(true); };
  };
})"#;

/// The state a case seeds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Seed {
    /// One 100-character localStorage item.
    Small,
    /// 1 MiB of localStorage.
    Local1MiB,
    /// 1 MiB of localStorage and a 1 000-record IndexedDB store.
    Local1MiBIdb1000,
    /// The twosite app (`aurora::twosite`): [`Seed::Local1MiBIdb1000`], 16 KiB of
    /// sessionStorage, the app's own IndexedDB database (rich values, a Blob) and a cross-site
    /// widget iframe with 256 KiB of partitioned localStorage and a CHIPS cookie.
    TwoSite,
    /// [`Seed::TwoSite`] with 1 000 IndexedDB records in the widget too (partitioned).
    TwoSiteFramedIdb,
    /// [`Seed::TwoSiteFramedIdb`], where the app writes one record into its IndexedDB on each
    /// new document before the checkpoint (the widget's stays unchanged).
    TwoSiteFramedIdbAppWrites,
}

impl Seed {
    fn scripts(self) -> Vec<String> {
        let scripts: &[&str] = match self {
            Seed::Small => &[SEED_SMALL],
            Seed::Local1MiB => &[SEED_LOCAL_1MIB],
            Seed::Local1MiBIdb1000 => &[SEED_LOCAL_1MIB, SEED_IDB_1000],
            Seed::TwoSite | Seed::TwoSiteFramedIdb | Seed::TwoSiteFramedIdbAppWrites => &[
                aurora::twosite::SEED_JS,
                SEED_LOCAL_1MIB,
                SEED_IDB_1000,
                SEED_SESSION_16K,
            ],
        };
        let mut scripts: Vec<String> = scripts.iter().map(|s| (*s).to_owned()).collect();
        match self {
            Seed::TwoSite => scripts.push(aurora::twosite::fill_widget_js(WIDGET_ITEMS, 65536, 0)),
            Seed::TwoSiteFramedIdb | Seed::TwoSiteFramedIdbAppWrites => {
                scripts.push(aurora::twosite::fill_widget_js(WIDGET_ITEMS, 65536, 1000));
            }
            _ => {}
        }
        scripts
    }

    /// What the page does on each new document `n` before its checkpoint, if anything.
    fn on_each_page(self, n: u32) -> Option<String> {
        (self == Seed::TwoSiteFramedIdbAppWrites).then(|| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('bench', 1);
                  r.onsuccess = () => {{ const tx = r.result.transaction('records', 'readwrite');
                    tx.objectStore('records').put({{ id: 100000 + {n}, tag: 'page', name: 'page {n}' }});
                    tx.oncomplete = () => {{ r.result.close(); resolve(true); }};
                    tx.onabort = () => reject(tx.error); }};
                  r.onerror = () => reject(r.error); }})"
            )
        })
    }

    /// The server of the page it seeds: the twosite app for [`Seed::TwoSite`] and its
    /// variants, else Aurora Bank's sign-in page.
    async fn site(self) -> Result<Site, Error> {
        let two_site = matches!(
            self,
            Seed::TwoSite | Seed::TwoSiteFramedIdb | Seed::TwoSiteFramedIdbAppWrites
        );
        Ok(if two_site {
            Site::TwoSite(aurora::twosite::spawn().await.map_err(bank_error)?)
        } else {
            Site::Bank(
                aurora::spawn(aurora::Config::new())
                    .await
                    .map_err(bank_error)?,
            )
        })
    }
}

/// A page's server for one case, shut down by [`Site::shutdown`] (or dropped with it).
enum Site {
    Bank(aurora::Aurora),
    TwoSite(aurora::twosite::TwoSite),
}

impl Site {
    fn url(&self) -> String {
        match self {
            Site::Bank(bank) => bank.url("/login"),
            Site::TwoSite(site) => site.app_url(),
        }
    }

    async fn shutdown(self) -> Result<(), Error> {
        match self {
            Site::Bank(bank) => bank.shutdown().await,
            Site::TwoSite(site) => site.shutdown().await,
        }
        .map_err(bank_error)
    }
}

/// Checkpoints of one seeded page at one RTT.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureCase {
    /// The RTT the gateway adds per message.
    pub added_rtt_ms: f64,
    /// The round trip as measured from the task (`Runtime.evaluate("1")`), median.
    pub measured_rtt_ms: f64,
    /// What the page holds.
    pub seed: Seed,
    /// Each checkpoint on a document the task just navigated to (a new document of the same
    /// origin, its storage unchanged), as a multi-page task checkpoints; `None`: all on the
    /// document that was seeded.
    pub navigated: Option<AfterNavigation>,
    /// With `navigated`: the task's first command on a new document right after `goto`
    /// (`Runtime.evaluate("1")`), median — what any command costs there while the renderer
    /// finishes the load; the floor under a checkpoint taken at that moment.
    pub first_command_after_goto_ms: Option<f64>,
    /// The first checkpoint: everything crosses the wire.
    pub first_ms: f64,
    /// Later checkpoints, storage unchanged: median.
    pub unchanged_median_ms: f64,
    /// The issue's target for them: 1.5 × measured RTT + 5 ms.
    pub target_ms: f64,
    /// Size of the checkpoint.
    pub bytes: usize,
    /// Every unchanged checkpoint, in order.
    pub unchanged_ms: Vec<f64>,
}

/// When, on a new document, the checkpoint is taken.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AfterNavigation {
    /// Right after `goto` answered.
    Immediately,
    /// Half a second after `goto`, the page settled (as a task checkpoints after working on
    /// it). What the capture itself costs on a new document: its script installed again,
    /// storage hashed by a cold script, IndexedDB opened again — without the load's tail.
    Settled,
}

/// Restores of a seeded page's state after a death on local Chromium.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreCase {
    /// What the page holds.
    pub seed: Seed,
    /// With a standby (`Options::standby`): the restore after the death only brings the
    /// standby's earlier restore up to date (one item changed since); without, a fresh browser
    /// gets everything.
    pub standby: bool,
    /// Cookies and storage put in place (`Milestone::Restored::restore`), median.
    pub restore_median_ms: f64,
    /// The navigation to the checkpoint URL after it, median.
    pub navigate_median_ms: f64,
    /// Without a standby: the new browser's launch and connection before the restore
    /// (`Milestone::Launched`), median; with one it is launched before the death.
    pub launch_median_ms: Option<f64>,
    /// From the death's detection to the task's next entry (`Milestone::Entered`), median.
    pub replaced_median_ms: f64,
    /// Size of the checkpoint restored.
    pub bytes: usize,
    /// Every restore, in order.
    pub restore_ms: Vec<f64>,
}

/// Everything `storage()` measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageReport {
    /// Checkpoint cost per RTT and seed.
    pub captures: Vec<CaptureCase>,
    /// Restore cost into a fresh browser.
    pub restore: RestoreCase,
    /// Restore cost on the critical path with a standby.
    pub restore_standby: RestoreCase,
    /// The realistic case ([`Seed::TwoSite`]) replaced in a fresh browser.
    pub restore_two_site: RestoreCase,
}

async fn seed(page: &Page, seed: Seed) -> Result<(), CdpError> {
    for script in seed.scripts() {
        let _: bool = page.evaluate_expression(script).await?.into_value()?;
    }
    Ok(())
}

fn bank_error(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with(
        ErrorKind::Bed(outlive_bed::ErrorKind::Bank),
        Box::new(e) as Box<dyn std::error::Error + Send + Sync>,
    )
}

/// One capture case: `samples` unchanged checkpoints of a page seeded with `what`, through
/// the gateway with `added_rtt`.
pub async fn capture_case(
    added_rtt: Duration,
    what: Seed,
    navigated: Option<AfterNavigation>,
    samples: u32,
) -> Result<CaptureCase, Error> {
    let bed = TestBed::start(until_killed(added_rtt)).await?;
    let site = what.site().await?;
    let provider = bed.provider();
    let (options, costs) = measured_checkpoints();
    let url = site.url();
    let result = outlive::outlive(
        &provider,
        |page, ctx| {
            let (url, costs) = (url.clone(), costs.clone());
            async move {
                page.goto(url.as_str()).await?;
                seed(&page, what).await?;
                let mut rtts = Vec::new();
                for _ in 0..samples {
                    let t = Instant::now();
                    page.evaluate_expression("1").await?;
                    rtts.push(ms(t.elapsed()));
                }
                lock(&costs).clear();
                for n in 0..=samples {
                    if let (Some(after), true) = (navigated, n > 0) {
                        // Not timed: only the checkpoint after it is.
                        page.goto(format!("{url}?page={n}")).await?;
                        if after == AfterNavigation::Settled {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        if let Some(write) = what.on_each_page(n) {
                            let _: bool = page.evaluate_expression(write).await?.into_value()?;
                        }
                    }
                    ctx.checkpoint().await;
                }
                let mut first_commands = Vec::new();
                for n in 0..samples * u32::from(navigated.is_some()) {
                    page.goto(format!("{url}?again={n}")).await?;
                    let t = Instant::now();
                    page.evaluate_expression("1").await?;
                    first_commands.push(ms(t.elapsed()));
                }
                Ok::<_, CdpError>((median(&rtts), first_commands))
            }
        },
        options,
    )
    .await;
    bed.shutdown().await?;
    site.shutdown().await?;
    let (measured_rtt_ms, first_commands) =
        result.map_err(|e| Error::with(ErrorKind::Run, e.to_string()))?;
    let costs = lock(&costs).clone();
    let (first, unchanged) = costs
        .split_first()
        .ok_or_else(|| Error::new(ErrorKind::Run))?;
    let unchanged_ms: Vec<f64> = unchanged.iter().map(|c| c.0).collect();
    Ok(CaptureCase {
        added_rtt_ms: ms(added_rtt),
        measured_rtt_ms,
        seed: what,
        navigated,
        first_command_after_goto_ms: navigated.map(|_| median(&first_commands)),
        first_ms: first.0,
        unchanged_median_ms: median(&unchanged_ms),
        target_ms: 1.5 * measured_rtt_ms + 5.0,
        bytes: first.1,
        unchanged_ms,
    })
}

/// What a restore case's milestones say, noted as they come.
#[derive(Debug, Default)]
struct RestoreMarks {
    /// `Milestone::Restored`'s restore and navigation, ms.
    restores: Vec<(f64, f64)>,
    /// `Milestone::Launched`, ms: the task's first browser, then each replacement's.
    launches: Vec<f64>,
    /// `Milestone::Entered`'s death → re-entry, ms.
    replaced: Vec<f64>,
    /// The last checkpoint's size.
    bytes: usize,
}

impl RestoreMarks {
    fn note(&mut self, m: &Milestone) {
        match m {
            Milestone::Restored { restore, navigate } => {
                self.restores.push((ms(*restore), ms(*navigate)));
            }
            Milestone::Checkpointed { bytes, .. } => self.bytes = *bytes,
            Milestone::Launched { took } => self.launches.push(ms(*took)),
            Milestone::Entered {
                replaced_in: Some(took),
                ..
            } => self.replaced.push(ms(*took)),
            _ => {}
        }
    }

    fn case(&self, seed: Seed, standby: bool) -> RestoreCase {
        let restore_ms: Vec<f64> = self.restores.iter().map(|r| r.0).collect();
        let navigate: Vec<f64> = self.restores.iter().map(|r| r.1).collect();
        // The first launch is the task's first browser, not a replacement's; with a standby
        // the launches are the standbys', made before the deaths.
        let launches: Vec<f64> = self.launches.iter().skip(1).copied().collect();
        RestoreCase {
            seed,
            standby,
            restore_median_ms: median(&restore_ms),
            navigate_median_ms: median(&navigate),
            launch_median_ms: (!standby).then(|| median(&launches)),
            replaced_median_ms: median(&self.replaced),
            bytes: self.bytes,
            restore_ms,
        }
    }
}

/// `samples` restores of `what` after a death on local Chromium. Each
/// entry changes one small item and checkpoints; with `standby`, it waits for the standby to
/// be ready (restored from that checkpoint), changes the item again and checkpoints, so the
/// restore after the death has something, but little, to write.
pub async fn restore_case(samples: u32, standby: bool, what: Seed) -> Result<RestoreCase, Error> {
    let site = what.site().await?;
    let provider = Arc::new(Recording::new(LocalChromium::new()));
    let marks: Arc<Mutex<RestoreMarks>> = Arc::default();
    let noted = marks.clone();
    // Standbys ready so far: an entry waits for one ready after its first checkpoint.
    let (on_ready, ready) = tokio::sync::watch::channel(0u32);
    let url = site.url();
    let killer = provider.clone();
    let result = outlive::outlive(
        provider.as_ref(),
        |page, ctx| {
            let (url, killer, mut ready) = (url.clone(), killer.clone(), ready.clone());
            async move {
                if ctx.attempt() == 1 {
                    page.goto(url).await?;
                    seed(&page, what).await?;
                }
                if ctx.attempt() > samples {
                    return Ok::<_, CdpError>(());
                }
                let step = |n: String| format!("localStorage.setItem('step', '{n}')");
                page.evaluate_expression(step(ctx.attempt().to_string()))
                    .await?;
                let seen = *ready.borrow_and_update();
                ctx.checkpoint().await;
                if standby {
                    let _ = ready.wait_for(|n| *n > seen).await;
                    page.evaluate_expression(step(format!("{}.1", ctx.attempt())))
                        .await?;
                    ctx.checkpoint().await;
                    // The task's browser: every one up but the newest (the standby).
                    killer.signal_all_but_newest(nix::sys::signal::Signal::SIGKILL);
                } else {
                    killer.signal_newest(nix::sys::signal::Signal::SIGKILL);
                }
                loop {
                    page.evaluate_expression("1").await?;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        },
        Options::new()
            .checkpoint_every(Duration::from_secs(3600))
            .max_relaunches(samples + 2)
            .relaunch_backoff(Duration::from_millis(100))
            .standby(standby)
            .on_milestone(move |m| {
                if let Milestone::SuccessorReady { standby: true, .. } = m {
                    on_ready.send_modify(|n| *n += 1);
                }
                lock(&noted).note(m);
            }),
    )
    .await;
    site.shutdown().await?;
    result.map_err(|e| Error::with(ErrorKind::Run, e.to_string()))?;
    let case = lock(&marks).case(what, standby);
    Ok(case)
}

/// Measures checkpoint cost at added RTTs of 0 and 20 ms for each [`Seed`]: `samples`
/// unchanged checkpoints each, the realistic [`Seed::TwoSite`] and its variants only after
/// navigations. Also
/// `samples` restores on local Chromium of [`Seed::Local1MiBIdb1000`] (fresh and into a
/// standby) and of [`Seed::TwoSite`] (fresh).
///
/// # Errors
///
/// [`ErrorKind::Bed`] if the test bed does not start,
/// [`ErrorKind::Run`] if a measured run fails.
pub async fn storage(samples: u32) -> Result<StorageReport, Error> {
    let mut captures = Vec::new();
    for rtt in [Duration::ZERO, Duration::from_millis(20)] {
        for what in [Seed::Small, Seed::Local1MiB, Seed::Local1MiBIdb1000] {
            captures.push(capture_case(rtt, what, None, samples).await?);
        }
        for after in [AfterNavigation::Immediately, AfterNavigation::Settled] {
            for what in [
                Seed::Small,
                Seed::Local1MiBIdb1000,
                Seed::TwoSite,
                Seed::TwoSiteFramedIdb,
                Seed::TwoSiteFramedIdbAppWrites,
            ] {
                captures.push(capture_case(rtt, what, Some(after), samples).await?);
            }
        }
    }
    let restore = restore_case(samples, false, Seed::Local1MiBIdb1000).await?;
    let restore_standby = restore_case(samples, true, Seed::Local1MiBIdb1000).await?;
    let restore_two_site = restore_case(samples, false, Seed::TwoSite).await?;
    Ok(StorageReport {
        captures,
        restore,
        restore_standby,
        restore_two_site,
    })
}

/// The storage figures as text.
pub fn storage_summary(r: &StorageReport) -> String {
    let mut s = String::from(
        "checkpoint cost with storage (gateway; Aurora Bank's origin, TwoSite: the twosite app with its cross-site widget). 'navigated': each checkpoint on a new document of the origin, right after goto or once the page settled (0.5 s; TwoSiteFramedIdbAppWrites: then the app writes one IndexedDB record, so not unchanged); [first command]: any command right after goto, median\n  added RTT  measured RTT  seed                                       first     unchanged (median)  target (1.5×RTT+5)  bytes\n",
    );
    for c in &r.captures {
        s += &format!(
            "  {:>6.0} ms  {:>9.2} ms  {:<41}  {:>6.1} ms  {:>9.2} ms          {:>7.2} ms          {}{}\n",
            c.added_rtt_ms,
            c.measured_rtt_ms,
            format!(
                "{:?}{}",
                c.seed,
                match c.navigated {
                    None => "",
                    Some(AfterNavigation::Immediately) => ", navigated (right after goto)",
                    Some(AfterNavigation::Settled) => ", navigated (settled)",
                }
            ),
            c.first_ms,
            c.unchanged_median_ms,
            c.target_ms,
            c.bytes,
            c.first_command_after_goto_ms
                .map(|f| format!("  [first command {f:.2} ms]"))
                .unwrap_or_default()
        );
    }
    for (what, c) in [
        ("into a fresh browser", &r.restore),
        (
            "into the standby (one item changed since its restore)",
            &r.restore_standby,
        ),
        ("into a fresh browser", &r.restore_two_site),
    ] {
        s += &format!(
            "restore of {:?} after a death (local Chromium), {what}: median {:.1} ms (navigate after it {:.1} ms; launch before it {}; death to re-entry {:.1} ms), {} samples, {} bytes\n",
            c.seed,
            c.restore_median_ms,
            c.navigate_median_ms,
            c.launch_median_ms
                .map_or_else(|| "none".to_owned(), |l| format!("{l:.1} ms")),
            c.replaced_median_ms,
            c.restore_ms.len(),
            c.bytes
        );
    }
    s
}
