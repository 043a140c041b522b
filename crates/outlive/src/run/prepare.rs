//! Before an entry: the newest checkpoint restored into the browser and its URL navigated
//! to, or, on the first entry, the start URL.

use std::fmt::Display;

use tokio::time::Instant;

use super::{Backend, LiveBrowser, Run, TaskFn, background};
use crate::checkpoint::Checkpoint;
use crate::ctx::ResumedFrom;
use crate::error::{Error, ErrorKind};
use crate::options::Options;
use crate::redact::redact;
use crate::relay::Death;
use crate::report::Milestone;

impl<'r, B, F, T, E> Run<'r, B, F>
where
    B: Backend,
    F: TaskFn<B::Page, Value = T, Error = E>,
    E: Display,
{
    /// Restores the newest checkpoint into the browser's page and navigates to its URL (or,
    /// before any checkpoint, opens `start_url` on the first entry). `Err(Some(death))`: the
    /// browser or page failed meanwhile; `Err(None)`: the restore failed with both alive.
    pub(super) async fn prepare(
        &mut self,
        browser: &B::Browser,
    ) -> Result<Option<ResumedFrom>, Option<Death>> {
        let options = self.options;
        let latest = self.store.latest();
        let prior = self.prior.take();
        let first_entry = self.reporter.tally.attempts == 0;
        let restore = async {
            match &latest {
                Some(cp) => {
                    let restore_started = Instant::now();
                    let failed = browser.restore(cp, prior.as_deref()).await?;
                    let restore = restore_started.elapsed();
                    let navigate_started = Instant::now();
                    let failed = match browser.leave_load_to_clients(cp) {
                        true => failed,
                        false => failed + resume_at(browser, cp, options).await,
                    };
                    let navigate = navigate_started.elapsed();
                    options.note(Milestone::Restored { restore, navigate });
                    Ok((
                        Some(ResumedFrom {
                            url: cp.url.clone(),
                            checkpoint_at: cp.at,
                        }),
                        failed,
                    ))
                }
                None => {
                    if let (true, Some(url)) = (first_entry, &options.start_url) {
                        if let Err(e) = navigate(browser, url, options).await {
                            tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "start_url navigation failed; entering anyway");
                        }
                    }
                    Ok::<_, Error>((None, 0))
                }
            }
        };
        let prepared = background(&mut self.releasing, &mut self.reporter, async {
            tokio::select! {
                biased;
                death = browser.died() => Err(Some(death)),
                r = restore => r.map_err(|e| {
                    tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "restore failed");
                    None
                }),
            }
        })
        .await;
        // A restore that failed because the browser or page failed is that failure.
        match prepared {
            Ok((resumed, failed)) => {
                if failed > 0 {
                    tracing::warn!(
                        failed,
                        "some restore writes failed; the state they held is not in the page"
                    );
                }
                self.reporter.tally.restore_writes_failed += failed;
                Ok(resumed)
            }
            Err(death) => Err(death.or(browser.death())),
        }
    }
}

/// The resume navigation, then the page state; answers what found no place in the page.
async fn resume_at<L: LiveBrowser>(browser: &L, cp: &Checkpoint, options: &Options) -> u64 {
    match navigate(browser, &cp.url, options).await {
        Ok(()) => browser.restore_page(cp).await,
        Err(e) => {
            tracing::warn!(error = %redact(&e.to_string(), options.diagnostics), "resume navigation failed; entering anyway");
            0
        }
    }
}

/// The resume (or start) navigation, capped by `navigation_timeout`. Non-web URLs
/// (`about:blank`, an error page) are not navigated to.
async fn navigate<L: LiveBrowser>(browser: &L, url: &str, options: &Options) -> Result<(), Error> {
    if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("file://")) {
        return Ok(());
    }
    match tokio::time::timeout(options.navigation_timeout, browser.navigate(url)).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Cdp,
            format!(
                "navigation did not finish within navigation_timeout ({:?})",
                options.navigation_timeout
            ),
        )),
    }
}
