//! Capturing a checkpoint: the capture script (`js/capture.js`) runs in every frame of a page
//! (the top frame; same-process frames in an isolated world of each; out-of-process frames
//! through their sessions on the relay), and what each frame reports, with the cookies,
//! becomes a `Checkpoint`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    AddScriptToEvaluateOnNewDocumentParams, CreateIsolatedWorldParams, FrameTree,
    GetFrameTreeParams,
};
use chromiumoxide::cdp::browser_protocol::storage::GetCookiesParams;
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::idb::{Begun, Frame, FullRead, IdbWatch};
use super::script::{CODEC_JS, cdp_error, evaluate};
use super::{
    Checkpoint, FrameState, Part, PartCache, StorageKey, StoredCookie, is_storable_origin,
};
use crate::error::{Error, ErrorKind};
use crate::relay::{Calls, FrameSession};

/// The capture script (see its header for what it answers).
const CAPTURE_JS: &str = include_str!("../js/capture.js");

/// The content hash's WebAssembly module (`js/hash.wat`, assembled), base64.
const HASH_WASM_B64: &str = include_str!("../js/hash.wasm.b64");

/// What a capture reads besides cookies and Web Storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaptureOptions {
    /// Read IndexedDB.
    pub(crate) indexed_db: bool,
    /// The most IndexedDB (serialised) one frame may hold and still be captured.
    pub(crate) indexed_db_max_bytes: usize,
    /// How long a read in an out-of-process frame may take: a frame that has not answered by
    /// then is counted unread (`frames_unread`) and the checkpoint goes on without it — so it
    /// must be well inside the capture's own cap, or one hung iframe costs every checkpoint.
    pub(crate) frame_timeout: Duration,
    /// Read every frame's IndexedDB in full, taking no last read as standing (see `IdbWatch`):
    /// for a checkpoint no later one could make up for, as at a rotation's safe point.
    pub(crate) indexed_db_in_full: bool,
}

/// What the capture script reports for one frame.
#[derive(Deserialize)]
struct FrameRead {
    url: String,
    origin: String,
    /// The frame's origin and its ancestors' (see `IdbWatch`); `None` where unknown.
    #[serde(default)]
    scope: Option<String>,
    local: Option<RawPart>,
    session: Option<RawPart>,
    idb: Option<RawPart>,
}

/// A part as the script sends it: without `data` when its hash was among the known ones.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPart {
    hash: String,
    /// The part's content as JSON text.
    data: Option<String>,
    /// Values the script could not serialise (IndexedDB only).
    #[serde(default)]
    left_out: u64,
    /// IndexedDB read in full: the databases found (names and versions).
    #[serde(default)]
    list: Option<String>,
}

impl FrameRead {
    /// The frame's storage: each part as sent, or the one `cache` holds by its hash.
    fn state(self, cache: &PartCache) -> Result<FrameState, Error> {
        let part = |raw: Option<RawPart>| -> Result<Option<Arc<Part>>, Error> {
            let Some(raw) = raw else { return Ok(None) };
            let part = match raw.data {
                Some(json) => Arc::new(Part {
                    hash: raw.hash,
                    json,
                    left_out: raw.left_out,
                }),
                None => cache.get(&raw.hash).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Cdp,
                        "the page reported storage as unchanged that outlive no longer holds",
                    )
                })?,
            };
            Ok(Some(part))
        };
        Ok(FrameState {
            local: part(self.local)?,
            session: part(self.session)?,
            idb: part(self.idb)?,
        })
    }
}

/// Where a document keeps its installed capture script.
const INSTALLED: &str = "globalThis[Symbol.for('outlive.capture')]";

/// The expression that installs the capture script in a document (if it is not there yet)
/// and answers it.
fn installer() -> String {
    // Installed once per document and reused: a function V8 has seen before runs its loops
    // optimised, and its WebAssembly hash is compiled once.
    format!(
        "({INSTALLED} ??= (() => {{\n{CODEC_JS}\nconst OUTLIVE_HASH_WASM = '{}';\nreturn ({CAPTURE_JS});\n}})())",
        HASH_WASM_B64.trim()
    )
}

/// The script outlive's pages run as each top-level document starts
/// (`Page.addScriptToEvaluateOnNewDocument`): the capture script installed before the task
/// needs it, so a checkpoint on a new document sends a call, not the 15 KB script. It reads
/// nothing and compiles nothing until the first capture.
pub(crate) fn install_on_new_document() -> String {
    format!("if (window === window.top) {};", installer())
}

/// The warm-up a page's documents run as they start once a capture was asked for on the page
/// (see [`WarmUp`]), as a block statement: when the document has loaded and the renderer is
/// idle, the installed capture script reads and hashes Web Storage ahead of the next capture,
/// sending nothing, so that capture finds each area's last read in the script's memory and
/// only compares the strings it reads now with it (every one, exactly: a change since the
/// warm-up is captured). It marks the installed function `warmed` when done.
fn warm_up() -> String {
    format!(
        "{{
  const warm = () => {{
    const capture = {INSTALLED};
    if (capture) capture([], {{ warm: true }}).then(() => {{ capture.warmed = true; }}, () => {{}});
  }};
  const idle = () => (window.requestIdleCallback
    ? window.requestIdleCallback(warm, {{ timeout: 1000 }})
    : setTimeout(warm, 0));
  window.addEventListener('load', idle, {{ once: true }});
}}"
    )
}

/// [`warm_up`] for the page's top-level documents.
fn warm_on_new_document() -> String {
    format!("if (window === window.top) {}", warm_up())
}

/// What each out-of-process frame (a cross-site iframe, its own target) runs as its documents
/// start once a capture was asked for on the page: the capture script installed, and
/// [`warm_up`]. Registered by the relay as the frame attaches (see `Calls::arm_frames`); a
/// capture reads such a frame with the whole installing expression anyway, so a frame that
/// started before its scripts were registered is read as before.
fn frame_scripts() -> Vec<String> {
    vec![format!("{};", installer()), warm_up()]
}

/// Whether the page's documents warm the capture script up as they load: not until a capture
/// was asked for on the page, so a page outlive never checkpoints costs nothing (and where a page's
/// CSP refuses WebAssembly, only a page outlive checkpoints reports the refusals). One per page
/// session: the script is registered on it.
#[derive(Default)]
pub(crate) struct WarmUp(std::sync::atomic::AtomicBool);

impl WarmUp {
    /// As a capture on `page` starts (beside it, costing it nothing): registers
    /// [`warm_on_new_document`] on the page and has the relay register [`frame_scripts`] on
    /// each cross-site frame that attaches from then on, the first time.
    pub(crate) async fn arm(&self, page: &Page, calls: &Calls) {
        use std::sync::atomic::Ordering;
        if self.0.swap(true, Ordering::SeqCst) {
            return;
        }
        calls.arm_frames(frame_scripts());
        let script = AddScriptToEvaluateOnNewDocumentParams::new(warm_on_new_document());
        if let Err(e) = page.execute(script).await {
            tracing::debug!(error = %e, "registering the capture warm-up failed; next capture tries again");
            self.0.store(false, Ordering::SeqCst);
        }
    }
}

/// The arguments of a capture call: the `known` hashes and, as `idb_same`, what the script
/// may take as unchanged.
fn capture_arguments(
    known: &[String],
    options: CaptureOptions,
    idb_same: &[serde_json::Value],
) -> String {
    let known = serde_json::to_string(known).expect("strings serialise");
    let opts = serde_json::json!({
        "idb": options.indexed_db,
        "idbMax": options.indexed_db_max_bytes,
        "idbSame": idb_same,
    });
    format!("({known}, {opts})")
}

/// The expression that runs the capture script, installing it in the document first if need
/// be.
fn capture_expression(arguments: &str) -> String {
    format!("{}{arguments}", installer())
}

/// What the call answers where the script is not installed (a number: a read is an object).
const NOT_INSTALLED: i64 = 0;

/// The expression that runs the capture script where it is installed already, and answers
/// [`NOT_INSTALLED`] where it is not.
fn installed_capture_expression(arguments: &str) -> String {
    format!("({INSTALLED}?.{arguments} ?? {NOT_INSTALLED})")
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
/// [`install_on_new_document`]), the whole script where it has not (a document older than
/// the page's set-up, a page outlive did not open).
async fn read_top(page: &Page, arguments: &str) -> Result<FrameRead, Error> {
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
    let text = Zeroizing::new(
        calls
            .call_unless_unanswered(session, "Runtime.evaluate", params, timeout)
            .await?,
    );
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

/// Captures a checkpoint from `page` and its frames. Cookies, the top frame, the frame tree
/// and every out-of-process frame are read at once, so a capture costs about one round trip
/// (same-process cross-origin frames add one more); parts `cache` holds unchanged cross the
/// wire as a hash.
pub(crate) async fn capture(
    page: &Page,
    calls: &Calls,
    cache: &PartCache,
    idb: &IdbWatch,
    options: CaptureOptions,
) -> Result<Checkpoint, Error> {
    let checkpoint = capture_page(page, calls, cache, idb, options).await?;
    cache.remember(&checkpoint);
    Ok(checkpoint)
}

/// [`capture`] without updating `cache`: for one tab of several, whose parts the cache holds
/// only once every tab is read.
pub(super) async fn capture_page(
    page: &Page,
    calls: &Calls,
    cache: &PartCache,
    idb: &IdbWatch,
    options: CaptureOptions,
) -> Result<Checkpoint, Error> {
    let taken = Instant::now();
    let at = SystemTime::now();
    let mut begun = idb.begin(cache);
    if options.indexed_db_in_full {
        begun.same.clear();
    }
    let arguments = capture_arguments(&cache.known(), options, &begun.same);
    let (cookies, top, tree, remote) = futures::join!(
        page.execute(GetCookiesParams::default()),
        read_top(page, &arguments),
        page.execute(GetFrameTreeParams::default()),
        read_remote_frames(page, calls, &arguments, options.frame_timeout),
    );
    tracing::trace!(elapsed = ?taken.elapsed(), "capture round trip");
    let cookies = cookies
        .map_err(|e| cdp_error("Storage.getCookies", e))?
        .result
        .cookies;
    let reads = Reads { page, calls, cache };
    let (top, remote) = reads
        .again_if_moved(idb, &begun, (top?, remote), options, taken)
        .await?;
    let top_origin = top.origin.clone();
    let url = top.url.clone();
    let full_reads = full_reads(&top, &remote);
    let standing = standing_scopes(&top, &remote);

    let mut reads = Vec::new();
    if is_storable_origin(&top_origin) {
        reads.push(top);
    }
    let mut frames_unread = keep_reads(&mut reads, remote.into_iter().map(|(_, r)| r).collect());
    if let Ok(tree) = tree {
        let tree = &tree.result.frame_tree;
        frames_unread += read_other_origins_here(page, cache, options, tree, &mut reads).await;
    }

    let storage = storage_by_key(reads, &top_origin, cache)?;
    let checkpoint = Checkpoint {
        url,
        cookies: cookies.into_iter().map(StoredCookie::from).collect(),
        storage,
        contexts: Vec::new(),
        frames_unread,
        at,
        taken,
        progress: None,
    };
    let tracking = full_reads
        .into_iter()
        .map(|read| idb.read_in_full(page, calls, read, &begun));
    futures::future::join_all(tracking).await;
    idb.settle(&standing, &begun);
    Ok(checkpoint)
}

/// What a capture reads through: the page, the relay's calls, the parts cache.
struct Reads<'a> {
    page: &'a Page,
    calls: &'a Calls,
    cache: &'a PartCache,
}

/// The top frame's read and each out-of-process frame's (none where it did not answer).
type FrameReads = (FrameRead, Vec<(FrameSession, Option<FrameRead>)>);

impl Reads<'_> {
    /// A frame's script took its last full read as standing; if a change event for its storage
    /// key came meanwhile (a commit between `begin` and the script's reads, whose completion
    /// the page may have acted on in what was just read), that read does not go with the rest:
    /// those frames are read again, in full, within what is left of the frame timeout.
    async fn again_if_moved(
        &self,
        idb: &IdbWatch,
        begun: &Begun,
        (top, remote): FrameReads,
        options: CaptureOptions,
        taken: Instant,
    ) -> Result<FrameReads, Error> {
        let offered = !begun.same.is_empty();
        let moved = (offered && any_idb_taken_as_unchanged(&top, &remote))
            .then(|| idb.moved_since(&begun.changes))
            .flatten();
        let Some(moved) = moved else {
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
async fn read_other_origins_here(
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

/// The frames whose IndexedDB the capture read in full (it sent the database list), each
/// with its origin and, out of process, its frame id.
fn full_reads(top: &FrameRead, remote: &[(FrameSession, Option<FrameRead>)]) -> Vec<FullRead> {
    let full = |read: &FrameRead, frame: Frame| {
        let idb = read.idb.as_ref()?;
        Some(FullRead {
            scope: read.scope.clone()?,
            frame,
            hash: idb.hash.clone(),
            list: idb.list.clone()?,
        })
    };
    let top = full(
        top,
        Frame::Top {
            origin: top.origin.clone(),
        },
    );
    let frames = remote.iter().filter_map(|(frame, read)| {
        let read = read.as_ref()?;
        // A frame with no ancestors would share its scope with a top frame of its origin.
        let framed = read.scope.as_ref().is_some_and(|s| s.contains(' '));
        if frame.frame_id.is_empty() || !framed {
            return None;
        }
        let frame_id = frame.frame_id.clone();
        let origin = read.origin.clone();
        full(read, Frame::Remote { frame_id, origin })
    });
    top.into_iter().chain(frames).collect()
}

/// Reads again, with `arguments` (which offer nothing as standing), the top frame and the
/// out-of-process frames whose IndexedDB was taken as unchanged and whose scope is among
/// `moved`.
async fn read_again(
    page: &Page,
    calls: &Calls,
    (top, remote): (FrameRead, Vec<(FrameSession, Option<FrameRead>)>),
    arguments: &str,
    options: CaptureOptions,
    moved: &HashSet<String>,
) -> Result<(FrameRead, Vec<(FrameSession, Option<FrameRead>)>), Error> {
    let again = |read: &FrameRead| {
        idb_taken_as_unchanged(read) && read.scope.as_ref().is_none_or(|s| moved.contains(s))
    };
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
async fn read_remote_frames(
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

/// Whether the script took IndexedDB as unchanged since the last full read (it sent neither
/// the database list nor the data).
fn idb_taken_as_unchanged(read: &FrameRead) -> bool {
    read.idb
        .as_ref()
        .is_some_and(|p| p.list.is_none() && p.data.is_none())
}

/// The scopes of the frames whose IndexedDB read was taken as standing.
fn standing_scopes(top: &FrameRead, remote: &[(FrameSession, Option<FrameRead>)]) -> Vec<String> {
    std::iter::once(top)
        .chain(remote.iter().filter_map(|(_, r)| r.as_ref()))
        .filter(|r| idb_taken_as_unchanged(r))
        .filter_map(|r| r.scope.clone())
        .collect()
}

/// Whether the top frame or an out-of-process frame took IndexedDB as unchanged.
fn any_idb_taken_as_unchanged(
    top: &FrameRead,
    remote: &[(FrameSession, Option<FrameRead>)],
) -> bool {
    idb_taken_as_unchanged(top)
        || remote
            .iter()
            .any(|(_, r)| r.as_ref().is_some_and(idb_taken_as_unchanged))
}

/// Moves the frames that answered into `reads`; answers how many did not.
fn keep_reads(reads: &mut Vec<FrameRead>, answers: Vec<Option<FrameRead>>) -> u64 {
    let mut unread = 0;
    for read in answers {
        match read {
            Some(r) => reads.push(r),
            None => unread += 1,
        }
    }
    unread
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

/// The frames' storage under the top origin, by storage key: the first read of each storable
/// origin, its parts resolved against `cache`.
fn storage_by_key(
    reads: Vec<FrameRead>,
    top_origin: &str,
    cache: &PartCache,
) -> Result<BTreeMap<StorageKey, FrameState>, Error> {
    let mut storage = BTreeMap::new();
    for read in reads {
        if !is_storable_origin(&read.origin) {
            continue;
        }
        let key = StorageKey {
            top: top_origin.to_owned(),
            origin: read.origin.clone(),
        };
        if storage.contains_key(&key) {
            continue;
        }
        storage.insert(key, read.state(cache)?);
    }
    Ok(storage)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_module_is_its_text_assembled() {
        use base64::Engine as _;
        let assembled = wat::parse_str(include_str!("../js/hash.wat")).expect("hash.wat parses");
        let embedded = base64::engine::general_purpose::STANDARD
            .decode(HASH_WASM_B64.trim())
            .expect("hash.wasm.b64 is base64");
        assert!(
            embedded == assembled,
            "js/hash.wasm.b64 is out of date with js/hash.wat; write this into it:\n{}",
            base64::engine::general_purpose::STANDARD.encode(&assembled)
        );
    }
    use crate::checkpoint::cache::KNOWN_MIN_BYTES;
    use crate::checkpoint::test_support::{
        chromium_page, frame_value, key, local, read_value, relayed_page, the_frame,
        two_site_server,
    };
    use tokio_util::task::AbortOnDropHandle;

    /// A local site (127.0.0.1) whose every path is a new document; `/csp/…` ones forbid
    /// WebAssembly (and every script but DevTools'), as a strict site's CSP does.
    async fn site() -> (String, AbortOnDropHandle<()>) {
        use axum::response::IntoResponse;
        let app = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
            let page = axum::response::Html(format!("<title>{}</title>", uri.path()));
            if uri.path().starts_with("/csp/") {
                ([("content-security-policy", "script-src 'none'")], page).into_response()
            } else {
                page.into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (url, AbortOnDropHandle::new(server))
    }

    /// The state of the first storage key `cp` holds.
    fn first(cp: &Checkpoint) -> &FrameState {
        cp.storage.values().next().expect("a storage key")
    }

    /// A script that fills the page's storage afresh: four 64 KiB items (each ending in
    /// `lone`) in localStorage, four in sessionStorage, one 4 KiB IndexedDB record.
    fn seed(lone: &str) -> String {
        format!(
            "(async () => {{
              localStorage.clear(); sessionStorage.clear();
              for (let i = 0; i < 4; i++) {{
                localStorage.setItem('l' + i, 'a'.repeat(65536) + '{lone}');
                sessionStorage.setItem('s' + i, 'b'.repeat(65536));
              }}
              await new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onerror = () => reject(r.error);
                r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
                  tx.objectStore('s').put('c'.repeat(4096), 'k');
                  tx.onabort = () => reject(tx.error);
                  tx.oncomplete = () => {{ r.result.close(); resolve(); }}; }}; }});
              return 1;
            }})()"
        )
    }

    /// One change to each kind of storage [`seed`] fills (localStorage, sessionStorage,
    /// IndexedDB), a single character each, marked `az`, `bz`, `cz`; `{lone}` as in the seed.
    const CHANGES: [&str; 3] = [
        "(localStorage.setItem('l2', 'a'.repeat(65535) + 'z' + '{lone}'), 1)",
        "(sessionStorage.setItem('s3', 'b'.repeat(65535) + 'z'), 1)",
        "new Promise((resolve, reject) => { const r = indexedDB.open('db', 1);
          r.onerror = () => reject(r.error);
          r.onsuccess = () => { const tx = r.result.transaction('s', 'readwrite');
            tx.objectStore('s').put('c'.repeat(4095) + 'z', 'k');
            tx.onabort = () => reject(tx.error);
            tx.oncomplete = () => { r.result.close(); resolve(1); }; }; })",
    ];

    /// Whether `now` reused the part `before` held (it crossed the wire as a hash), for
    /// localStorage, sessionStorage and IndexedDB in turn.
    fn reused(before: &Checkpoint, now: &Checkpoint) -> [bool; 3] {
        let (a, b) = (first(before), first(now));
        let same = |x: &Option<Arc<Part>>, y: &Option<Arc<Part>>| match (x, y) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            _ => false,
        };
        [
            same(&a.local, &b.local),
            same(&a.session, &b.session),
            same(&a.idb, &b.idb),
        ]
    }

    /// Whether this page may compile and run a WebAssembly module: "ok", or the error.
    const WASM_CHECK: &str = "(() => { try {
        const bytes = Uint8Array.of(0, 97, 115, 109, 1, 0, 0, 0, 5, 3, 1, 0, 1);
        new WebAssembly.Instance(new WebAssembly.Module(bytes)); return 'ok';
      } catch (e) { return String(e); } })()";

    /// After a navigation to a new document of the same origin (where the capture script and
    /// its memory are new), unchanged storage crosses the wire as hashes only, and a change to
    /// any one kind — a single character in a 64 KiB value — is captured; with WebAssembly
    /// forbidden by the page's CSP, and for text that is not well-formed UTF-16, the
    /// JavaScript hash does the same.
    #[tokio::test]
    async fn after_a_navigation_only_what_changed_is_sent() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            frame_timeout: Duration::from_secs(5),
            indexed_db_in_full: false,
        };
        let capture = || capture(&page, &calls, &cache, &watch, options);
        let cases = [("", ""), ("csp/", ""), ("", "\\ud800")];
        // First where the capture installs its script itself, then where each new document
        // starts with it (as on the pages outlive opens).
        for (installed, (dir, lone)) in cases
            .map(|c| (false, c))
            .into_iter()
            .chain(cases.map(|c| (true, c)))
        {
            if installed && dir.is_empty() && lone.is_empty() {
                page.execute(AddScriptToEvaluateOnNewDocumentParams::new(
                    install_on_new_document(),
                ))
                .await
                .unwrap();
            }
            let go = |n: u32| page.goto(format!("{url}/{dir}page{n}"));
            go(0).await.unwrap();
            let _: i64 = read_value(&page, seed(lone)).await;
            let _ = capture().await.unwrap();
            let mut last = capture().await.unwrap();
            let hash = first(&last).local.as_ref().unwrap().hash.clone();
            if hash.starts_with("lw") != (dir.is_empty() && lone.is_empty()) {
                let here: String = read_value(&page, WASM_CHECK.into()).await;
                panic!(
                    "installed {installed}, {dir}{lone}: hashed by WebAssembly only where it may run: {hash} (WebAssembly on this page: {here})"
                );
            }

            go(1).await.unwrap();
            let there: String = read_value(&page, format!("typeof {INSTALLED}")).await;
            let expected = if installed { "function" } else { "undefined" };
            assert_eq!(
                there, expected,
                "installed {installed}, {dir}{lone}: the script as the document starts"
            );
            let now = capture().await.unwrap();
            assert_eq!(
                reused(&last, &now),
                [true; 3],
                "installed {installed}, {dir}{lone}: nothing changed"
            );
            last = now;

            for (kind, change) in CHANGES.iter().enumerate() {
                go(2 + kind as u32).await.unwrap();
                let _: i64 = read_value(&page, change.replace("{lone}", lone)).await;
                go(10 + kind as u32).await.unwrap();
                let now = capture().await.unwrap();
                let mut expected = [true; 3];
                expected[kind] = false;
                assert_eq!(
                    reused(&last, &now),
                    expected,
                    "installed {installed}, {dir}{lone}: change {kind}"
                );
                let state = first(&now);
                let part = [&state.local, &state.session, &state.idb][kind];
                let json = &part.as_ref().unwrap().json;
                assert!(
                    ["az", "bz", "cz"].iter().any(|m| json.contains(m)),
                    "installed {installed}, {dir}{lone}: change {kind} is in the checkpoint"
                );
                last = now;
            }
        }
    }

    /// Waits until the document the page shows has warmed its capture script up (the warm-up
    /// runs once the document loaded and the renderer is idle).
    async fn warmed(page: &Page) {
        for _ in 0..500 {
            let done: bool = read_value(page, format!("{INSTALLED}?.warmed === true")).await;
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the document did not warm the capture script up within 10 s");
    }

    /// Once a page was captured, each new document reads and hashes its Web Storage ahead of
    /// the next capture; that capture still compares every string, so what changed after the
    /// warm-up — in each kind of storage — is captured, and nothing unchanged is sent. (No
    /// relay: IndexedDB is read in full at each capture, its change tracking is `idb`'s
    /// tests' subject.)
    #[tokio::test]
    async fn a_warmed_up_document_captures_what_changed_after_the_warm_up() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let warm = WarmUp::default();
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            frame_timeout: Duration::from_secs(5),
            indexed_db_in_full: false,
        };
        let capture = || async {
            let (cp, ()) = futures::join!(
                capture(&page, &calls, &cache, &watch, options),
                warm.arm(&page, &calls)
            );
            cp.unwrap()
        };
        page.execute(AddScriptToEvaluateOnNewDocumentParams::new(
            install_on_new_document(),
        ))
        .await
        .unwrap();
        let go = |n: u32| page.goto(format!("{url}/page{n}"));
        go(0).await.unwrap();
        let _: i64 = read_value(&page, seed("")).await;
        let _ = capture().await;
        let mut last = capture().await;

        go(1).await.unwrap();
        warmed(&page).await;
        let now = capture().await;
        assert_eq!(reused(&last, &now), [true; 3], "nothing changed");
        last = now;

        for (kind, change) in CHANGES.iter().enumerate() {
            go(2 + kind as u32).await.unwrap();
            warmed(&page).await;
            let _: i64 = read_value(&page, change.replace("{lone}", "")).await;
            let now = capture().await;
            let mut expected = [true; 3];
            expected[kind] = false;
            assert_eq!(reused(&last, &now), expected, "change {kind}");
            let state = first(&now);
            let part = [&state.local, &state.session, &state.idb][kind];
            let json = &part.as_ref().unwrap().json;
            assert!(
                ["az", "bz", "cz"].iter().any(|m| json.contains(m)),
                "change {kind} is in the checkpoint"
            );
            last = now;
        }
    }

    /// A cross-site iframe (its own renderer, reached through its session on the relay) gets
    /// the capture script and the warm-up as each of its documents starts, once a capture was
    /// asked for on the page: after a navigation its unchanged storage crosses the wire as a
    /// hash, and a change made after its warm-up is captured.
    #[tokio::test]
    async fn a_cross_site_frame_is_warmed_up_and_its_changes_still_captured() {
        let (_chromium, relay, _browser, _pump, page) = relayed_page().await;
        let (port, _server) = two_site_server().await;
        let calls = relay.calls();
        let (cache, watch, warm) = (PartCache::default(), IdbWatch::default(), WarmUp::default());
        let options = CaptureOptions {
            indexed_db: false,
            indexed_db_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            indexed_db_in_full: false,
        };
        let capture = || async {
            let (cp, ()) = futures::join!(
                capture(&page, &calls, &cache, &watch, options),
                warm.arm(&page, &calls)
            );
            cp.unwrap()
        };
        let frame_key = key(
            &format!("http://127.0.0.1:{port}"),
            &format!("http://localhost:{port}"),
        );
        let frame_local = |cp: &Checkpoint| cp.storage[&frame_key].local.clone().unwrap();
        page.execute(AddScriptToEvaluateOnNewDocumentParams::new(
            install_on_new_document(),
        ))
        .await
        .unwrap();
        let go = |n: u32| page.goto(format!("http://127.0.0.1:{port}/top{n}"));

        go(0).await.unwrap();
        let mut frame = the_frame(&page, &calls, None).await;
        let seed = "(localStorage.setItem('f', 'q'.repeat(65536)), 1)";
        frame_value(&calls, &frame, seed).await;
        let _ = capture().await;
        let mut last = capture().await;

        let warmed = format!("{INSTALLED}?.warmed === true");
        for (n, change) in [(1, None), (2, Some("'q'.repeat(65535) + 'z'"))] {
            go(n).await.unwrap();
            frame = the_frame(&page, &calls, Some(&frame)).await;
            let mut done = false;
            for _ in 0..500 {
                done = frame_value(&calls, &frame, &warmed).await == true;
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !done {
                let here = frame_value(
                    &calls,
                    &frame,
                    &format!("[typeof {INSTALLED}, document.readyState, location.href]"),
                )
                .await;
                panic!("document {n}: the frame warmed up within 10 s: {here}");
            }
            if let Some(value) = change {
                let set = format!("(localStorage.setItem('f', {value}), 1)");
                frame_value(&calls, &frame, &set).await;
            }
            let now = capture().await;
            let same = Arc::ptr_eq(&frame_local(&last), &frame_local(&now));
            assert_eq!(
                same,
                change.is_none(),
                "document {n}: the frame's part reused"
            );
            if change.is_some() {
                assert!(
                    frame_local(&now).json.contains("qz"),
                    "the change is captured"
                );
            }
            last = now;
        }
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
        while calls
            .call(
                frame.clone(),
                "Runtime.evaluate",
                serde_json::json!({ "expression": "1" }),
                Duration::from_millis(500),
            )
            .await
            .is_some()
        {
            answered += 1;
            assert!(answered < 20, "the frame's script spins");
        }
        let frame_timeout = Duration::from_secs(2);
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
            frame_timeout,
            indexed_db_in_full: false,
        };
        let (cache, watch) = (PartCache::default(), IdbWatch::default());
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
        while calls
            .call(
                frame.clone(),
                "Runtime.evaluate",
                serde_json::json!({ "expression": "1" }),
                Duration::from_millis(500),
            )
            .await
            .is_none()
        {
            waited += 1;
            assert!(waited < 60, "the frame's script ends after 8 s");
        }
        let cp = capture(&page, &calls, &cache, &watch, options)
            .await
            .unwrap();
        assert_eq!(cp.frames_unread, 0, "the frame is read once it answers");
    }

    /// `hash.wat` over `strings` as the capture script streams them: each string's length in
    /// UTF-16 units (u32, little-endian) and its UTF-8 bytes, zero-padded to whole words.
    fn wasm_hash(strings: &[String]) -> String {
        let mut bytes = Vec::new();
        for s in strings {
            let units = u32::try_from(s.encode_utf16().count()).unwrap();
            bytes.extend_from_slice(&units.to_le_bytes());
            bytes.extend_from_slice(s.as_bytes());
        }
        let total = bytes.len();
        bytes.resize(total.next_multiple_of(8), 0);
        let (mut a, mut b) = (0x9E37_79B9_7F4A_7C15_u64, 0xC2B2_AE3D_27D4_EB4F_u64);
        for word in bytes.chunks_exact(8) {
            let w = u64::from_le_bytes(word.try_into().unwrap());
            a = (a ^ w.wrapping_mul(0x87C3_7B91_1142_53D5))
                .rotate_left(31)
                .wrapping_mul(0x4CF5_AD43_2745_937F);
            b = b
                .wrapping_add(w.wrapping_mul(0x1656_67B1_9E37_79F9))
                .rotate_left(29)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        format!("w{a:x}.{b:x}.{total:x}")
    }

    /// The page's WebAssembly hash of localStorage is the stream `wasm_hash` describes, for
    /// items that cross the module's 256 KiB window many times, at odd offsets, with
    /// characters of every UTF-8 length split across its edges — no byte is lost or counted
    /// twice at a window's edge.
    #[tokio::test]
    async fn the_webassembly_hash_streams_every_byte_through_its_window() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let (url, _server) = site().await;
        page.goto(format!("{url}/page")).await.unwrap();
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let options = CaptureOptions {
            indexed_db: false,
            indexed_db_max_bytes: 0,
            frame_timeout: Duration::from_secs(5),
            indexed_db_in_full: false,
        };
        for (i, (unit, count)) in [("a", 300_001), ("é", 150_001), ("€😀", 70_003), ("x", 7)]
            .into_iter()
            .enumerate()
        {
            let set = format!("(localStorage.setItem('k{i}', '{unit}'.repeat({count})), 1)");
            let _: i64 = read_value(&page, set).await;
            let items: Vec<(String, String)> = read_value(
                &page,
                "Array.from({ length: localStorage.length }, (_, i) =>
                   [localStorage.key(i), localStorage.getItem(localStorage.key(i))])"
                    .into(),
            )
            .await;
            let strings: Vec<String> = items.into_iter().flat_map(|(k, v)| [k, v]).collect();
            let cp = capture(&page, &calls, &cache, &watch, options)
                .await
                .unwrap();
            let hash = &first(&cp).local.as_ref().unwrap().hash;
            assert_eq!(hash, &format!("l{}", wasm_hash(&strings)), "after k{i}");
        }
    }

    #[test]
    fn unchanged_parts_come_from_the_cache_by_hash() {
        let cache = PartCache::default();
        let mut cp = Checkpoint::at_url("https://a.example/", Instant::now());
        let big = format!(r#"[["k","{}"]]"#, "x".repeat(KNOWN_MIN_BYTES));
        cp.storage
            .insert(key("https://a.example", "https://a.example"), local(&big));
        cache.remember(&cp);
        let hash = first(&cp).local.as_ref().unwrap().hash.clone();
        assert_eq!(cache.known(), vec![hash.clone()]);
        let read = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            scope: None,
            local: Some(RawPart {
                hash,
                data: None,
                left_out: 0,
                list: None,
            }),
            session: None,
            idb: None,
        };
        assert_eq!(read.state(&cache).unwrap().local.unwrap().json, big);
        let unknown = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            scope: None,
            local: Some(RawPart {
                hash: "nope".into(),
                data: None,
                left_out: 0,
                list: None,
            }),
            session: None,
            idb: None,
        };
        assert!(unknown.state(&cache).is_err());
    }
}
