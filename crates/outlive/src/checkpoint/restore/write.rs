//! Writing a planned restore into the page: loading each restore document and waiting for its
//! report, handing over data too big to ride inside it, or writing in place over an earlier
//! restore's document.

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::plan::Load;
use super::script::{PIECE_BYTES, RESTORE_JS, RUN};
use crate::checkpoint::script::{CODEC_JS, cdp_error, evaluate, evaluate_now};
use crate::error::{Error, ErrorKind};
use crate::relay::{Calls, OwnCall};

/// Where handed-over restore data is assembled, piece by piece, in a restore document's main
/// world (outlive's own document: no site's script runs there).
const HANDED: &str = "globalThis[Symbol.for('outlive.restore.data')]";

/// Sends `data` into the page's main world as pieces of at most [`PIECE_BYTES`], all in
/// flight at once, each stored at its index in [`HANDED`]. Only where `guard` (a JavaScript
/// condition) holds, so nothing lands in a page that is not a restore document. Answers
/// whether every piece landed.
async fn hand_over(page: &Page, data: &str, guard: &str) -> Result<bool, Error> {
    let mut pieces = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let mut end = rest.len().min(PIECE_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&rest[..end]);
        rest = &rest[end..];
    }
    let n = pieces.len();
    let sends = pieces.into_iter().enumerate().map(|(i, piece)| {
        let literal = Zeroizing::new(serde_json::to_string(piece).expect("strings serialise"));
        // The expression moves into the command (chromiumoxide does not zero its own copies).
        let expression = format!(
            "({guard}) ? ((({HANDED} ??= Array({n}))[{i}] = {literal}), true) : false",
            literal = literal.as_str()
        );
        evaluate_now::<bool>(page, expression, "handing restore data over")
    });
    let landed = futures::future::try_join_all(sends).await?;
    Ok(landed.into_iter().all(|l| l))
}

/// The handed-over data, taken out of [`HANDED`] (which is emptied) and parsed. A failure
/// says so without V8's message, which quotes the text around the fault (the data is secret,
/// and a quote cut inside a surrogate pair is a reply chromiumoxide cannot read).
fn take_handed() -> String {
    format!(
        "(() => {{ const d = {HANDED}.join(''); {HANDED} = undefined;\
         try {{ return JSON.parse(d); }} catch (e) {{ throw new Error('the handed-over restore data did not parse'); }} }})()"
    )
}

/// Whether the page is a restore document of `top` (an earlier restore's, with nothing else
/// loaded since), as a JavaScript condition.
fn on_restore_document(top: &str) -> String {
    let top = serde_json::to_string(top).expect("strings serialise");
    format!("location.origin === {top} && location.pathname.startsWith('/__outlive_restore/')")
}

/// What a restore document reports.
#[derive(Deserialize)]
struct RestoreReport {
    errors: Vec<String>,
    /// Time spent in the page: Web Storage, IndexedDB, waiting for child documents.
    ms: serde_json::Value,
}

impl RestoreReport {
    /// How many writes failed, each named in a debug log.
    fn failed(&self) -> u64 {
        for error in &self.errors {
            tracing::debug!(error, "a restore write failed");
        }
        self.errors.len() as u64
    }
}

/// What the in-place write answers: `false` when the page is not on a restore document.
#[derive(Deserialize)]
#[serde(untagged)]
enum InPlace {
    NotThere(#[expect(dead_code, reason = "always false; only the variant matters")] bool),
    Written(RestoreReport),
}

/// Writes `data` into the page where it stands, if that is a restore document of `top` (an
/// earlier restore's, with nothing else loaded since): one round trip, no navigation. `None`
/// when the page is elsewhere.
pub(super) async fn in_place(page: &Page, top: &str, data: &str) -> Result<Option<u64>, Error> {
    let guard = on_restore_document(top);
    let data = if data.len() > PIECE_BYTES {
        if !hand_over(page, data, &guard).await? {
            tracing::debug!("the page is not on a restore document; loading one");
            return Ok(None);
        }
        Zeroizing::new(take_handed())
    } else {
        let literal = Zeroizing::new(serde_json::to_string(data).expect("strings serialise"));
        Zeroizing::new(format!("JSON.parse({})", literal.as_str()))
    };
    let mut expression = Zeroizing::new(format!(
        "(() => {{ if (!({guard})) return false;\n\
         {CODEC_JS}\nreturn ({RESTORE_JS})({data}); }})()",
        data = data.as_str()
    ));
    let started = Instant::now();
    // Moved, not copied (it can hold megabytes); chromiumoxide does not zero its own copies.
    let answer = evaluate(
        page,
        std::mem::take(&mut *expression),
        None,
        "writing a restore in place",
    )
    .await?;
    match answer {
        InPlace::NotThere(_) => {
            tracing::debug!("the page is not on a restore document; loading one");
            Ok(None)
        }
        InPlace::Written(report) => {
            tracing::debug!(took = ?started.elapsed(), in_page = %report.ms, "restore written in place");
            Ok(Some(report.failed()))
        }
    }
}

/// How long the browser may take to answer a restore document's navigation.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Navigates the page to `url` and returns with the browser's own answer to `Page.navigate`,
/// sent through the relay. That is once the response is in, before the document has loaded;
/// chromiumoxide answers a `Page.navigate` only after the `load` of the page and every
/// frame. Commands sent after it reach the new document: DevTools holds them while the
/// navigation commits. Without a relay behind `calls` (a page connected directly), through
/// chromiumoxide.
async fn navigate_answered(page: &Page, calls: &Calls, url: &str) -> Result<(), Error> {
    #[derive(Deserialize)]
    struct Reply {
        result: Option<Navigated>,
        error: Option<Refused>,
    }
    #[derive(Deserialize)]
    struct Navigated {
        #[serde(rename = "errorText")]
        error_text: Option<String>,
    }
    #[derive(Deserialize)]
    struct Refused {
        message: String,
    }
    let failed = |why: &str| {
        Error::new(
            ErrorKind::Cdp,
            format!("loading a restore document failed: {why}"),
        )
    };
    // Asked before the call: a relay that dies during it is no reason to navigate again.
    if !calls.is_relayed() {
        page.goto(NavigateParams::new(url.to_owned()))
            .await
            .map_err(|e| cdp_error("loading a restore document", e))?;
        return Ok(());
    }
    let params = serde_json::json!({ "url": url });
    let call = OwnCall {
        session: page.session_id().as_ref().to_owned(),
        method: "Page.navigate",
        params,
    };
    let text = calls.call(call, COMMIT_TIMEOUT).await.ok_or_else(|| {
        failed(&format!(
            "no answer within {COMMIT_TIMEOUT:?}, or the page or the browser died meanwhile"
        ))
    })?;
    let reply: Reply = serde_json::from_str(&text)
        .map_err(|e| failed("its answer did not decode").with_source(e))?;
    match (reply.result, reply.error) {
        (_, Some(Refused { message })) => Err(failed(&message)),
        (
            Some(Navigated {
                error_text: Some(e),
            }),
            None,
        ) => Err(failed(&e)),
        (Some(Navigated { error_text: None }), None) => Ok(()),
        (None, None) => Err(failed("the browser's answer held no result")),
    }
}

/// Loads each restore document and waits for its report. A document whose data is handed over
/// gets it as soon as the browser answers its navigation, not once it has loaded. Its load
/// waits for its cross-site iframes: child restore documents, each starting a renderer of its
/// own, which meanwhile write their own parts.
pub(super) async fn all(page: &Page, calls: &Calls, loads: &[Load]) -> Result<u64, Error> {
    let mut failed = 0;
    for Load { url, top, handed } in loads {
        let started = Instant::now();
        // When the navigation answered: its response in (handed over), loaded (data inside).
        let navigated;
        let report = match handed {
            Some(data) => {
                navigate_answered(page, calls, url).await?;
                navigated = started.elapsed();
                if !hand_over(page, data, &on_restore_document(top)).await? {
                    return Err(Error::new(
                        ErrorKind::Cdp,
                        "the page was not (or no longer) on the restore document when its data was handed over",
                    ));
                }
                // The document's own script defines the restore; it may still be parsing.
                let run = format!(
                    "(async () => {{ if (document.readyState === 'loading') \
                     await new Promise((r) => addEventListener('DOMContentLoaded', r, {{ once: true }}));\
                     return window.__outlive_restored = {RUN}({}); }})()",
                    take_handed()
                );
                evaluate_now(page, run, "running a restore document").await?
            }
            None => {
                page.goto(NavigateParams::new(url.clone()))
                    .await
                    .map_err(|e| cdp_error("loading a restore document", e))?;
                navigated = started.elapsed();
                let wait = "window.__outlive_restored".to_owned();
                evaluate::<RestoreReport>(page, wait, None, "waiting for a restore document")
                    .await?
            }
        };
        tracing::debug!(?navigated, written = ?started.elapsed(), in_page = %report.ms, "restore document done");
        failed += report.failed();
    }
    Ok(failed)
}
