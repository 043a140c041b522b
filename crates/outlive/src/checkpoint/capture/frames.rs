//! Reading a page's frames with the capture script: the top frame, out-of-process frames
//! through their sessions on the relay (`Calls`), and same-process frames of other origins in
//! an isolated world of each.

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{CreateIsolatedWorldParams, FrameTree};
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::expressions::{
    NOT_INSTALLED, capture_arguments, capture_expression, installed_capture_expression,
};
use super::options::CaptureOptions;
use crate::checkpoint::cache::PartCache;
use crate::checkpoint::idb::{IdbAnswer, IdbCapture, IdbPart, Moved};
use crate::checkpoint::model::is_storable_origin;
use crate::checkpoint::script::evaluate;
use crate::error::{Error, ErrorKind};
use crate::relay::{Calls, FrameSession, OwnCall};

/// What the capture script reports for one frame.
#[derive(Deserialize)]
pub(super) struct FrameRead {
    pub(super) url: String,
    pub(super) origin: String,
    /// The frame's origin and its ancestors' (see `Tracking`); `None` where unknown.
    #[serde(default)]
    pub(super) scope: Option<String>,
    pub(super) local: Option<RawPart>,
    pub(super) session: Option<RawPart>,
    pub(super) idb: Option<RawPart>,
    /// Cache Storage; `None` where not read.
    #[serde(default)]
    pub(super) caches: Option<RawPart>,
    /// The origin private file system; `None` where not read.
    #[serde(default)]
    pub(super) files: Option<RawPart>,
}

/// A part as the script sends it: without `data` when its hash was among the known ones.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawPart {
    pub(super) hash: String,
    /// The part's content as JSON text.
    pub(super) data: Option<String>,
    /// What the script left out: values it could not serialise, entries over a cap.
    #[serde(default)]
    pub(super) left_out: u64,
    /// IndexedDB read in full: the databases found (names and versions).
    #[serde(default)]
    pub(super) list: Option<String>,
}

impl FrameRead {
    /// What this read says of the frame's IndexedDB, as the top frame's (see
    /// [`IdbAnswer::in_frame`]).
    fn idb_answer(&self) -> IdbAnswer<'_> {
        IdbAnswer {
            scope: self.scope.as_deref(),
            part: self.idb.as_ref().map(|p| IdbPart {
                hash: &p.hash,
                list: p.list.as_deref(),
                sent: p.data.is_some(),
            }),
            origin: &self.origin,
            frame_id: None,
        }
    }
}

/// The IndexedDB answers of the top frame and of each out-of-process frame that answered.
pub(super) fn idb_answers<'a>(
    top: &'a FrameRead,
    remote: &'a [(FrameSession, Option<FrameRead>)],
) -> impl Iterator<Item = IdbAnswer<'a>> {
    let frames = remote
        .iter()
        .filter_map(|(frame, read)| Some(read.as_ref()?.idb_answer().in_frame(&frame.frame_id)));
    std::iter::once(top.idb_answer()).chain(frames)
}

/// Runs the capture script in a frame of the page's own process (the top frame, or with
/// `context` a same-process child frame).
async fn read_here(
    page: &Page,
    expression: String,
    context: Option<i64>,
) -> Result<FrameRead, Error> {
    evaluate(page, expression, context, "reading a frame's storage").await
}

/// Runs the capture script in the top frame: a call where the document has it installed (see
/// [`install_on_new_document`](super::install_on_new_document)), the whole script where it
/// has not (a document older than the page's set-up, a page outlive did not open).
pub(super) async fn read_top(page: &Page, arguments: &str) -> Result<FrameRead, Error> {
    let installed = installed_capture_expression(arguments);
    let read: serde_json::Value =
        evaluate(page, installed, None, "reading the page's storage").await?;
    if read == NOT_INSTALLED {
        tracing::debug!("the capture script is not installed in this document; sending it");
        return read_here(page, capture_expression(arguments), None).await;
    }
    serde_json::from_value(read).map_err(|e| {
        Error::new(
            ErrorKind::Cdp,
            "decoding the answer of reading the page's storage failed",
        )
        .with_source(e)
    })
}

/// Runs the capture script in an out-of-process frame, through its session on the relay: the
/// installed script first (a frame's documents get it once the page is checkpointed), the
/// whole script where it is not there yet; both within `timeout`.
async fn read_remote(
    calls: &Calls,
    session: String,
    arguments: &str,
    timeout: Duration,
) -> Option<FrameRead> {
    let started = Instant::now();
    let installed = evaluate_remote(
        calls,
        session.clone(),
        installed_capture_expression(arguments),
        timeout,
    );
    match installed.await? {
        Remote::Read(read) => Some(*read),
        Remote::NotInstalled => {
            tracing::debug!(
                "the capture script is not installed in a frame's document; sending it"
            );
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return None;
            }
            match evaluate_remote(calls, session, capture_expression(arguments), left).await? {
                Remote::Read(read) => Some(*read),
                Remote::NotInstalled => None,
            }
        }
    }
}

/// What a frame's capture call answered.
enum Remote {
    Read(Box<FrameRead>),
    /// [`NOT_INSTALLED`].
    NotInstalled,
}

/// Evaluates a capture `expression` in an out-of-process frame; `None` if it failed, threw or
/// did not answer within `timeout`.
async fn evaluate_remote(
    calls: &Calls,
    session: String,
    expression: String,
    timeout: Duration,
) -> Option<Remote> {
    #[derive(Deserialize)]
    struct Reply<'a> {
        #[serde(borrow)]
        result: Option<Evaluated<'a>>,
    }
    #[derive(Deserialize)]
    struct Evaluated<'a> {
        #[serde(borrow)]
        result: Returned<'a>,
        #[serde(rename = "exceptionDetails")]
        exception: Option<serde::de::IgnoredAny>,
    }
    #[derive(Deserialize)]
    struct Returned<'a> {
        // Borrowed from the zeroed reply: the read is decoded once, from the reply itself.
        #[serde(borrow)]
        value: Option<&'a serde_json::value::RawValue>,
    }
    let params = serde_json::json!({
        "expression": expression,
        "awaitPromise": true,
        "returnByValue": true,
    });
    let call = OwnCall {
        session,
        method: "Runtime.evaluate",
        params,
    };
    let text = Zeroizing::new(calls.call_unless_unanswered(call, timeout).await?);
    let reply: Reply = serde_json::from_str(&text).ok()?;
    let evaluated = reply.result?;
    if evaluated.exception.is_some() {
        return None;
    }
    let value = evaluated.result.value?;
    if value.get() == NOT_INSTALLED.to_string() {
        return Some(Remote::NotInstalled);
    }
    serde_json::from_str(value.get()).ok().map(Remote::Read)
}

/// What a capture reads through: the page, the relay's calls, the parts cache.
pub(super) struct Reads<'a> {
    pub(super) page: &'a Page,
    pub(super) calls: &'a Calls,
    pub(super) cache: &'a PartCache,
}

/// The top frame's read and each out-of-process frame's (none where it did not answer).
type FrameReads = (FrameRead, Vec<(FrameSession, Option<FrameRead>)>);

impl Reads<'_> {
    /// A frame's script took its last full read as standing. If a change event for its storage
    /// key came meanwhile, that read does not go with the rest. The event means a commit between
    /// `begin` and the script's reads, whose completion the page may have acted on in what was
    /// just read. Those frames are read again, in full, within what is left of the frame timeout.
    pub(super) async fn again_if_moved(
        &self,
        idb: &IdbCapture<'_>,
        (top, remote): FrameReads,
        options: CaptureOptions,
        taken: Instant,
    ) -> Result<FrameReads, Error> {
        let Some(moved) = idb.moved(idb_answers(&top, &remote)) else {
            return Ok((top, remote));
        };
        tracing::debug!("IndexedDB changed during the capture; reading those frames again");
        let arguments = capture_arguments(&self.cache.known(), options, &[]);
        // The frames' time is the capture's, not each round's.
        let left = CaptureOptions {
            frame_timeout: options.frame_timeout.saturating_sub(taken.elapsed()),
            ..options
        };
        let reads = (top, remote);
        let (top, remote) =
            read_again(self.page, self.calls, reads, &arguments, left, &moved).await?;
        Ok((top, remote))
    }
}

/// Reads the same-process frames of another origin than those in `reads` (same-site
/// subdomains, or every frame where site isolation is off) in an isolated world of each, and
/// adds them to `reads`; answers how many did not answer.
pub(super) async fn read_other_origins_here(
    page: &Page,
    cache: &PartCache,
    options: CaptureOptions,
    tree: &FrameTree,
    reads: &mut Vec<FrameRead>,
) -> u64 {
    let seen = reads.iter().map(|r| r.origin.clone()).collect();
    // Not offered any IndexedDB as standing: they are not tracked.
    let arguments = capture_arguments(&cache.known(), options, &[]);
    let local = read_same_process_frames(page, tree, seen, &arguments).await;
    keep_reads(reads, local)
}

/// Reads again, with `arguments` (which offer nothing as standing), the top frame and the
/// out-of-process frames `moved` says to read again.
async fn read_again(
    page: &Page,
    calls: &Calls,
    (top, remote): (FrameRead, Vec<(FrameSession, Option<FrameRead>)>),
    arguments: &str,
    options: CaptureOptions,
    moved: &Moved,
) -> Result<(FrameRead, Vec<(FrameSession, Option<FrameRead>)>), Error> {
    let again = |read: &FrameRead| moved.to_read_again(&read.idb_answer());
    let top = async {
        if again(&top) {
            read_top(page, arguments).await
        } else {
            Ok(top)
        }
    };
    let frames = remote.into_iter().map(|(frame, read)| async move {
        match read {
            Some(r) if again(&r) => {
                let session = frame.session.clone();
                let again = read_remote(calls, session, arguments, options.frame_timeout).await;
                (frame, again)
            }
            read => (frame, read),
        }
    });
    let (top, frames) = futures::join!(top, futures::future::join_all(frames));
    Ok((top?, frames))
}

/// Runs the capture script in every out-of-process frame the relay holds a session for, each
/// within `timeout`.
pub(super) async fn read_remote_frames(
    page: &Page,
    calls: &Calls,
    arguments: &str,
    timeout: Duration,
) -> Vec<(FrameSession, Option<FrameRead>)> {
    let frames = calls.frame_sessions(page.session_id().as_ref()).await;
    let reads = frames.into_iter().map(|frame| async move {
        let read = read_remote(calls, frame.session.clone(), arguments, timeout).await;
        (frame, read)
    });
    futures::future::join_all(reads).await
}

/// Runs the whole capture script (an isolated world has none installed) with `arguments` in
/// an isolated world of each same-process frame below `tree` whose storable origin is not in
/// `seen` yet (one frame per origin).
async fn read_same_process_frames(
    page: &Page,
    tree: &FrameTree,
    mut seen: Vec<String>,
    arguments: &str,
) -> Vec<Option<FrameRead>> {
    let mut frames = Vec::new();
    collect_frames(tree, &mut frames);
    frames.retain(|(_, origin)| {
        let new = is_storable_origin(origin) && !seen.contains(origin);
        if new {
            seen.push(origin.clone());
        }
        new
    });
    if frames.is_empty() {
        return Vec::new();
    }
    let expression = capture_expression(arguments);
    let local_reads = frames.iter().map(|(frame, _)| async {
        let world = CreateIsolatedWorldParams::builder()
            .frame_id(frame.clone())
            .world_name("outlive")
            .build()
            .ok()?;
        let context = page.execute(world).await.ok()?.result.execution_context_id;
        read_here(page, expression.to_owned(), Some(*context.inner()))
            .await
            .ok()
    });
    futures::future::join_all(local_reads).await
}

/// Frames below the top one, with their security origins.
fn collect_frames(tree: &FrameTree, out: &mut Vec<(String, String)>) {
    for child in tree.child_frames.iter().flatten() {
        out.push((
            child.frame.id.inner().clone(),
            child.frame.security_origin.clone(),
        ));
        collect_frames(child, out);
    }
}

/// Moves the frames that answered into `reads`; answers how many did not.
pub(super) fn keep_reads(reads: &mut Vec<FrameRead>, answers: Vec<Option<FrameRead>>) -> u64 {
    let mut unread = 0;
    for read in answers {
        match read {
            Some(r) => reads.push(r),
            None => unread += 1,
        }
    }
    unread
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::capture::capture;
    use crate::checkpoint::idb::Tracking;
    use crate::checkpoint::test_support::{
        frame_value, key, read_value, relayed_page, the_frame, two_site_server,
    };

    /// Whether `frame` answers a trivial evaluation within 500 ms.
    async fn answers(calls: &Calls, frame: &str) -> bool {
        let params = serde_json::json!({ "expression": "1" });
        let timeout = Duration::from_millis(500);
        let call = OwnCall {
            session: frame.to_owned(),
            method: "Runtime.evaluate",
            params,
        };
        let reply = calls.call(call, timeout);
        reply.await.is_some()
    }

    /// A cross-site iframe whose renderer does not answer (its script spins) is counted unread
    /// once the frame timeout has passed, and the rest of the page is captured: one hung
    /// iframe does not cost the checkpoint (the frame timeout used to equal the capture's own
    /// cap, so the whole capture timed out). While its call is unanswered, later captures
    /// send it none (they would all run once it is free) and do not wait for it; once it
    /// answers, it is read again.
    #[tokio::test]
    async fn a_hung_cross_site_frame_is_counted_unread_and_the_rest_captured() {
        let (_chromium, relay, _browser, _pump, page) = relayed_page().await;
        let (port, _server) = two_site_server().await;
        let calls = relay.calls();
        page.goto(format!("http://127.0.0.1:{port}/top0"))
            .await
            .unwrap();
        let _: i64 = read_value(&page, "(localStorage.setItem('k', 'v'), 1)".into()).await;
        let frame = the_frame(&page, &calls, None).await;
        // Spins for 8 s (longer than the first two captures), then answers again.
        let spin =
            "(setTimeout(() => { const t = Date.now(); while (Date.now() < t + 8000); }, 0), 1)";
        frame_value(&calls, &frame, spin).await;
        // Until the frame stops answering (it never answers again).
        let mut answered = 0;
        while answers(&calls, &frame).await {
            answered += 1;
            assert!(answered < 20, "the frame's script spins");
        }
        let frame_timeout = Duration::from_secs(2);
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            files: false,
            files_max_bytes: 0,
            frame_timeout,
            in_full: false,
            page_state: false,
        };
        let (cache, watch) = (PartCache::default(), Tracking::default());
        let top = key(
            &format!("http://127.0.0.1:{port}"),
            &format!("http://127.0.0.1:{port}"),
        );
        let started = Instant::now();
        let first = capture(&page, &calls, &cache, &watch, options);
        let cp = tokio::time::timeout(Duration::from_secs(8), first)
            .await
            .expect("the capture ends without the frame")
            .unwrap();
        assert!(
            started.elapsed() >= frame_timeout,
            "it waited for the frame"
        );
        assert_eq!(cp.frames_unread, 1);
        let local = cp.storage[&top].local.clone().unwrap();
        assert_eq!(local.json, r#"[["k","v"]]"#);

        // The next capture sends the frame nothing while its last call is unanswered (a hung
        // renderer runs every queued call once free), so it does not wait for it either.
        let started = Instant::now();
        let cp = capture(&page, &calls, &cache, &watch, options)
            .await
            .unwrap();
        assert!(
            started.elapsed() < frame_timeout,
            "the frame's earlier call is unanswered: no new one waited for ({:?})",
            started.elapsed()
        );
        assert_eq!(cp.frames_unread, 1);
        assert!(cp.storage.contains_key(&top));

        // Once the frame is free again (it answers what was queued), it is read again.
        let mut waited = 0;
        while !answers(&calls, &frame).await {
            waited += 1;
            assert!(waited < 60, "the frame's script ends after 8 s");
        }
        let cp = capture(&page, &calls, &cache, &watch, options)
            .await
            .unwrap();
        assert_eq!(cp.frames_unread, 0, "the frame is read once it answers");
    }
}
