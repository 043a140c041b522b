//! Checkpoints: cookies (CHIPS partition keys included), and per storage key — a frame's
//! origin under the top-level origin it was seen in — localStorage, sessionStorage and
//! IndexedDB, plus the URL; captured from a live page and all its frames, restored into a
//! fresh one.
//!
//! Reading and writing storage is page script (`js/`): the capture script runs in every frame
//! of the page (cross-site iframes through their own sessions, which the relay sees), so each
//! frame reads exactly the storage partition it uses. It hashes what it read and sends only
//! parts whose hash outlive does not already hold, so unchanged megabytes are never sent
//! twice. Restore serves documents through `Fetch` interception — no request reaches the real
//! site — a top-level document of each top origin embedding one iframe per cross-site origin
//! captured under it, each writing its own part; Chromium files every write under the same
//! storage key the original frame had.
//!
//! A checkpoint is a credential. It lives in memory only, its `Debug` shows sizes and never
//! values, and its strings are zeroed when it is dropped — so are the copies restore makes
//! (the restore documents). The copies inside the CDP messages chromiumoxide and serde
//! handle are theirs and are not zeroed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, EventRequestPaused, FulfillRequestParams, HeaderEntry, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{
    Cookie, CookieParam, CookiePartitionKey, CookiePriority, CookieSameSite, CookieSourceScheme,
    TimeSinceEpoch,
};
use chromiumoxide::cdp::browser_protocol::page::{
    CreateIsolatedWorldParams, FrameTree, GetFrameTreeParams, NavigateParams,
};
use chromiumoxide::cdp::browser_protocol::storage::{
    ClearCookiesParams, EventIndexedDbContentUpdated, EventIndexedDbListUpdated, GetCookiesParams,
    SetCookiesParams, TrackIndexedDbForStorageKeyParams, UntrackIndexedDbForStorageKeyParams,
};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use futures::StreamExt;
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::{Zeroize, Zeroizing};

use crate::error::{Error, ErrorKind};
use crate::relay::Calls;
use crate::task::AbortOnDrop;

const CODEC_JS: &str = include_str!("js/codec.js");
const CAPTURE_JS: &str = include_str!("js/capture.js");
const RESTORE_JS: &str = include_str!("js/restore.js");

/// How long a restore document waits for its cross-site iframes to report.
const CHILD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a read in a cross-site frame may take (the capture as a whole is bounded too).
const FRAME_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Parts smaller than this are simply sent again; only bigger ones are offered by hash.
const KNOWN_MIN_BYTES: usize = 512;

/// What a capture reads besides cookies and Web Storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaptureOptions {
    /// Read IndexedDB.
    pub(crate) indexed_db: bool,
    /// The most IndexedDB (serialised) one frame may hold and still be captured.
    pub(crate) indexed_db_max_bytes: usize,
}

/// One cookie, as much of it as `Storage.setCookies` can put back.
#[derive(Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredCookie {
    name: String,
    value: String,
    domain: String,
    path: String,
    expires: Option<f64>,
    http_only: bool,
    secure: bool,
    same_site: Option<CookieSameSite>,
    priority: CookiePriority,
    source_scheme: CookieSourceScheme,
    source_port: i64,
    /// CHIPS: the top-level site the cookie is partitioned under.
    partition_key: Option<CookiePartitionKey>,
}

impl From<Cookie> for StoredCookie {
    fn from(c: Cookie) -> Self {
        StoredCookie {
            expires: (!c.session && c.expires > 0.0).then_some(c.expires),
            name: c.name,
            value: c.value,
            domain: c.domain,
            path: c.path,
            http_only: c.http_only,
            secure: c.secure,
            same_site: c.same_site,
            priority: c.priority,
            source_scheme: c.source_scheme,
            source_port: c.source_port,
            partition_key: c.partition_key,
        }
    }
}

impl StoredCookie {
    fn to_param(&self) -> CookieParam {
        let mut p = CookieParam::new(self.name.clone(), self.value.clone());
        p.domain = Some(self.domain.clone());
        p.path = Some(self.path.clone());
        p.secure = Some(self.secure);
        p.http_only = Some(self.http_only);
        p.same_site = self.same_site.clone();
        p.expires = self.expires.map(TimeSinceEpoch::new);
        p.priority = Some(self.priority.clone());
        p.source_scheme = Some(self.source_scheme.clone());
        p.source_port = Some(self.source_port);
        p.partition_key = self.partition_key.clone();
        p
    }

    fn bytes(&self) -> usize {
        self.name.len() + self.value.len() + self.domain.len() + self.path.len()
    }
}

impl Drop for StoredCookie {
    fn drop(&mut self) {
        self.name.zeroize();
        self.value.zeroize();
        self.domain.zeroize();
        self.path.zeroize();
    }
}

/// Where a frame's storage lives: its origin, under the top-level origin of the page it was
/// captured in. Chromium partitions a cross-site frame's storage by the top-level *site*;
/// restoring under the same top origin reproduces whatever key Chromium gave it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, Deserialize)]
pub(crate) struct StorageKey {
    pub(crate) top: String,
    pub(crate) origin: String,
}

impl StorageKey {
    /// The key of a top-level document of `origin`.
    fn first_party(origin: &str) -> Self {
        StorageKey {
            top: origin.to_owned(),
            origin: origin.to_owned(),
        }
    }

    fn is_first_party(&self) -> bool {
        self.top == self.origin
    }
}

/// One part of a frame's state — its localStorage, sessionStorage or IndexedDB — as the
/// page's script serialised it, with the hash the script computed of its content.
pub(crate) struct Part {
    hash: String,
    json: String,
    /// Values the script could not serialise (IndexedDB only).
    left_out: u64,
}

impl Part {
    fn is_empty(&self) -> bool {
        self.json == "[]"
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        self.json.zeroize();
    }
}

/// A frame's storage: each part shared between the checkpoints that hold the same content.
#[derive(Clone, Default)]
pub(crate) struct FrameState {
    local: Option<Arc<Part>>,
    session: Option<Arc<Part>>,
    idb: Option<Arc<Part>>,
}

impl FrameState {
    fn parts(&self) -> impl Iterator<Item = &Arc<Part>> {
        [&self.local, &self.session, &self.idb]
            .into_iter()
            .flatten()
    }

    fn is_empty(&self) -> bool {
        self.parts().all(|p| p.is_empty())
    }

    /// Whether `other` holds the same content (compared by the parts' hashes).
    fn same_as(&self, other: &FrameState) -> bool {
        fn hash(p: &Option<Arc<Part>>) -> Option<&str> {
            p.as_ref().map(|p| p.hash.as_str())
        }
        hash(&self.local) == hash(&other.local)
            && hash(&self.session) == hash(&other.session)
            && hash(&self.idb) == hash(&other.idb)
    }

    /// The restore script's input for this frame. With `prior` (what an earlier restore put
    /// in this browser for the same storage key), a part with the same content is left out
    /// (`null`) and a Web Storage area that changed is sent as the items to set and remove.
    fn restore_data(&self, children: usize, prior: Option<&FrameState>) -> Zeroizing<String> {
        fn same(a: &Option<Arc<Part>>, b: &Option<Arc<Part>>) -> bool {
            matches!((a, b), (Some(a), Some(b)) if a.hash == b.hash)
        }
        let part = |now: &Option<Arc<Part>>, before: Option<&Option<Arc<Part>>>, area: bool| match (
            now, before,
        ) {
            (_, Some(b)) if same(now, b) => Zeroizing::new("null".to_owned()),
            (Some(n), Some(Some(b))) if area => {
                area_delta(&b.json, &n.json).unwrap_or_else(|| Zeroizing::new(n.json.clone()))
            }
            (Some(n), _) => Zeroizing::new(n.json.clone()),
            (None, _) => Zeroizing::new("null".to_owned()),
        };
        let local = part(&self.local, prior.map(|p| &p.local), true);
        let session = part(&self.session, prior.map(|p| &p.session), true);
        let idb = part(&self.idb, prior.map(|p| &p.idb), false);
        Zeroizing::new(format!(
            r#"{{"local":{},"session":{},"idb":{},"children":{children},"childTimeoutMs":{}}}"#,
            local.as_str(),
            session.as_str(),
            idb.as_str(),
            CHILD_TIMEOUT.as_millis(),
        ))
    }
}

/// What turns a Web Storage area holding `before` (`[[key, value], …]`, as the capture
/// script serialises it) into `after`: `{"set": [[key, value], …], "remove": [key, …]}`,
/// built from slices of the two texts (no decoded copy of a value is made). `None` if either
/// does not parse.
fn area_delta(before: &str, after: &str) -> Option<Zeroizing<String>> {
    use serde_json::value::RawValue;
    type Items<'a> = Vec<(&'a RawValue, &'a RawValue)>;
    let before: Items = serde_json::from_str(before).ok()?;
    let after: Items = serde_json::from_str(after).ok()?;
    // Keys compare by their JSON text: the same serialiser wrote both.
    let old: HashMap<&str, &str> = before.iter().map(|(k, v)| (k.get(), v.get())).collect();
    let new: std::collections::HashSet<&str> = after.iter().map(|(k, _)| k.get()).collect();
    let mut out = Zeroizing::new(String::from(r#"{"set":["#));
    let mut first = true;
    for (k, v) in &after {
        if old.get(k.get()) != Some(&v.get()) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push('[');
            out.push_str(k.get());
            out.push(',');
            out.push_str(v.get());
            out.push(']');
        }
    }
    out.push_str(r#"],"remove":["#);
    first = true;
    for (k, _) in &before {
        if !new.contains(k.get()) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k.get());
        }
    }
    out.push_str("]}");
    Some(out)
}

/// The part of a page's state that survives a relaunch.
#[derive(Clone)]
pub(crate) struct Checkpoint {
    pub(crate) url: String,
    pub(crate) cookies: Vec<StoredCookie>,
    /// Web Storage and IndexedDB per storage key.
    pub(crate) storage: BTreeMap<StorageKey, FrameState>,
    /// Frames whose storage could not be read at all.
    pub(crate) frames_unread: u64,
    /// Wall-clock time the capture started (what `ctx.resumed_from()` reports).
    pub(crate) at: SystemTime,
    /// Monotonic time the capture started (what lost-work accounting uses).
    pub(crate) taken: Instant,
    /// The task's own progress (JSON) as of the capture's start: `Ctx::checkpoint_with`.
    pub(crate) progress: Option<Progress>,
}

/// The task's progress, serialised (JSON); zeroed when the last holder drops it.
pub(crate) type Progress = Arc<zeroize::Zeroizing<String>>;

impl Checkpoint {
    /// An empty checkpoint at `url`; the fake backends in tests use it.
    #[cfg(test)]
    pub(crate) fn at_url(url: &str, taken: Instant) -> Self {
        Checkpoint {
            url: url.to_owned(),
            cookies: Vec::new(),
            storage: BTreeMap::new(),
            frames_unread: 0,
            at: SystemTime::now(),
            taken,
            progress: None,
        }
    }

    /// Approximate size of the secret material, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.url.len()
            + self.progress.as_ref().map_or(0, |p| p.len())
            + self.cookies.iter().map(StoredCookie::bytes).sum::<usize>()
            + self
                .storage
                .iter()
                .map(|(k, s)| {
                    k.origin.len() + k.top.len() + s.parts().map(|p| p.json.len()).sum::<usize>()
                })
                .sum::<usize>()
    }

    /// What this checkpoint could not hold: IndexedDB values that cannot be serialised or
    /// that are over the size cap, and frames whose storage could not be read.
    pub(crate) fn left_out(&self) -> u64 {
        self.frames_unread
            + self
                .storage
                .values()
                .flat_map(FrameState::parts)
                .map(|p| p.left_out)
                .sum::<u64>()
    }

    /// Keeps storage captured earlier under keys this capture did not see.
    pub(crate) fn merge_older(&mut self, older: &Checkpoint) {
        for (key, state) in &older.storage {
            self.storage
                .entry(key.clone())
                .or_insert_with(|| state.clone());
        }
    }
}

/// A checkpoint as bytes (JSON), for a store outside this process; version 1.
#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Persisted {
    v: u32,
    url: String,
    cookies: Vec<StoredCookie>,
    storage: Vec<PersistedFrame>,
    frames_unread: u64,
    /// Wall-clock time of the capture, milliseconds since the Unix epoch.
    at_ms: u64,
    progress: Option<String>,
}

#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PersistedFrame {
    key: StorageKey,
    local: Option<PersistedPart>,
    session: Option<PersistedPart>,
    idb: Option<PersistedPart>,
}

#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PersistedPart {
    hash: String,
    json: String,
    left_out: u64,
}

impl Drop for Persisted {
    fn drop(&mut self) {
        self.url.zeroize();
        if let Some(p) = &mut self.progress {
            p.zeroize();
        }
    }
}

impl Drop for PersistedPart {
    fn drop(&mut self) {
        self.json.zeroize();
    }
}

impl Checkpoint {
    /// The checkpoint as bytes, for a store outside this process (seal them first: they are
    /// a credential).
    pub(crate) fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let part = |p: &Option<Arc<Part>>| {
            p.as_ref().map(|p| PersistedPart {
                hash: p.hash.clone(),
                json: p.json.clone(),
                left_out: p.left_out,
            })
        };
        let persisted = Persisted {
            v: 1,
            url: self.url.clone(),
            cookies: self.cookies.clone(),
            storage: self
                .storage
                .iter()
                .map(|(key, state)| PersistedFrame {
                    key: key.clone(),
                    local: part(&state.local),
                    session: part(&state.session),
                    idb: part(&state.idb),
                })
                .collect(),
            frames_unread: self.frames_unread,
            at_ms: self
                .at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            progress: self.progress.as_ref().map(|p| p.as_str().to_owned()),
        };
        Zeroizing::new(serde_json::to_vec(&persisted).expect("a checkpoint serialises to JSON"))
    }

    /// A checkpoint read back from [`Checkpoint::to_bytes`]; `taken` is when it counts as
    /// taken on this process's clock (its capture happened elsewhere).
    pub(crate) fn from_bytes(bytes: &[u8], taken: Instant) -> Result<Checkpoint, Error> {
        let p: Persisted = serde_json::from_slice(bytes).map_err(|e| {
            Error::new(
                ErrorKind::Sealed,
                format!(
                    "a stored checkpoint opened but does not read as one ({:?} error at column {})",
                    e.classify(),
                    e.column()
                ),
            )
        })?;
        if p.v != 1 {
            return Err(Error::new(
                ErrorKind::Sealed,
                format!(
                    "a stored checkpoint has format version {}; this outlive reads version 1",
                    p.v
                ),
            ));
        }
        let part = |p: &Option<PersistedPart>| {
            p.as_ref().map(|p| {
                Arc::new(Part {
                    hash: p.hash.clone(),
                    json: p.json.clone(),
                    left_out: p.left_out,
                })
            })
        };
        Ok(Checkpoint {
            url: p.url.clone(),
            cookies: p.cookies.clone(),
            storage: p
                .storage
                .iter()
                .map(|f| {
                    (
                        f.key.clone(),
                        FrameState {
                            local: part(&f.local),
                            session: part(&f.session),
                            idb: part(&f.idb),
                        },
                    )
                })
                .collect(),
            frames_unread: p.frames_unread,
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(p.at_ms),
            taken,
            progress: p
                .progress
                .as_ref()
                .map(|s| Arc::new(Zeroizing::new(s.clone()))),
        })
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        self.url.zeroize();
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("cookies", &self.cookies.len())
            .field("storage_keys", &self.storage.len())
            .field("bytes", &self.bytes())
            .field("left_out", &self.left_out())
            .finish_non_exhaustive()
    }
}

/// The parts of the newest capture by hash: what the capture script need not send again.
/// Content-addressed, so it can never hand back the wrong frame's state.
#[derive(Default)]
pub(crate) struct PartCache(Mutex<HashMap<String, Arc<Part>>>);

impl PartCache {
    fn known(&self) -> Vec<String> {
        let cache = self.0.lock().expect("part cache poisoned");
        cache
            .values()
            .filter(|p| p.json.len() >= KNOWN_MIN_BYTES)
            .map(|p| p.hash.clone())
            .collect()
    }

    fn get(&self, hash: &str) -> Option<Arc<Part>> {
        self.0
            .lock()
            .expect("part cache poisoned")
            .get(hash)
            .cloned()
    }

    /// Holds exactly the parts of `checkpoint` from now on (a restored one, or the newest
    /// capture).
    pub(crate) fn remember(&self, checkpoint: &Checkpoint) {
        let parts = checkpoint
            .storage
            .values()
            .flat_map(FrameState::parts)
            .map(|p| (p.hash.clone(), p.clone()))
            .collect();
        *self.0.lock().expect("part cache poisoned") = parts;
    }
}

/// What the capture script reports for one frame.
#[derive(Deserialize)]
struct FrameRead {
    url: String,
    origin: String,
    local: Option<RawPart>,
    session: Option<RawPart>,
    idb: Option<RawPart>,
}

/// A part as the script sends it: without `d` when its hash was among the known ones.
#[derive(Deserialize)]
struct RawPart {
    h: String,
    d: Option<String>,
    #[serde(default)]
    u: u64,
    /// IndexedDB read in full: the databases found (names and versions).
    #[serde(default)]
    l: Option<String>,
}

impl FrameRead {
    fn state(self, cache: &PartCache) -> Result<FrameState, Error> {
        let part = |raw: Option<RawPart>| -> Result<Option<Arc<Part>>, Error> {
            let Some(raw) = raw else { return Ok(None) };
            let part = match raw.d {
                Some(json) => Arc::new(Part {
                    hash: raw.h,
                    json,
                    left_out: raw.u,
                }),
                None => cache.get(&raw.h).ok_or_else(|| {
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

fn cdp_error(what: &str, e: chromiumoxide::error::CdpError) -> Error {
    Error::new(ErrorKind::Cdp, format!("{what} failed")).with_source(e)
}

fn is_storable_origin(origin: &str) -> bool {
    origin.starts_with("http://") || origin.starts_with("https://")
}

fn capture_expression(
    known: &[String],
    options: CaptureOptions,
    idb_same: Option<serde_json::Value>,
) -> String {
    let known = serde_json::to_string(known).expect("strings serialise");
    let opts = serde_json::json!({
        "idb": options.indexed_db,
        "idbMax": options.indexed_db_max_bytes,
        "idbSame": idb_same,
    });
    // Installed once per document and reused: a function V8 has seen before runs its loops
    // optimised (a fresh one hashes a megabyte in the interpreter, ~10× slower).
    format!(
        "(globalThis[Symbol.for('outlive.capture')] ??= (() => {{\n{CODEC_JS}\nreturn ({CAPTURE_JS});\n}})())({known}, {opts})"
    )
}

fn evaluate_params(expression: String, context: Option<i64>) -> Result<EvaluateParams, Error> {
    let mut b = EvaluateParams::builder()
        .expression(expression)
        .await_promise(true)
        .return_by_value(true);
    if let Some(c) = context {
        b = b.context_id(chromiumoxide::cdp::js_protocol::runtime::ExecutionContextId::new(c));
    }
    b.build()
        .map_err(|e| Error::new(ErrorKind::Cdp, format!("building a page script: {e}")))
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

/// Runs `expression` in the page (in `context`, or the top frame's main world) and decodes
/// what it answers; `what` names the step in errors.
async fn evaluate<T: serde::de::DeserializeOwned>(
    page: &Page,
    expression: String,
    context: Option<i64>,
    what: &str,
) -> Result<T, Error> {
    page.evaluate_expression(evaluate_params(expression, context)?)
        .await
        .map_err(|e| cdp_error(what, e))?
        .into_value()
        .map_err(|e| {
            Error::new(
                ErrorKind::Cdp,
                format!("decoding the answer of {what} failed"),
            )
            .with_source(e)
        })
}

/// Runs the capture script in an out-of-process frame, through its session on the relay.
async fn read_remote(calls: &Calls, session: String, expression: String) -> Option<FrameRead> {
    #[derive(Deserialize)]
    struct Reply {
        result: Option<Evaluated>,
    }
    #[derive(Deserialize)]
    struct Evaluated {
        result: Remote,
        #[serde(rename = "exceptionDetails")]
        exception: Option<serde::de::IgnoredAny>,
    }
    #[derive(Deserialize)]
    struct Remote {
        value: Option<FrameRead>,
    }
    let params = serde_json::json!({
        "expression": expression,
        "awaitPromise": true,
        "returnByValue": true,
    });
    let text = Zeroizing::new(
        calls
            .call(session, "Runtime.evaluate", params, FRAME_READ_TIMEOUT)
            .await?,
    );
    let reply: Reply = serde_json::from_str(&text).ok()?;
    let evaluated = reply.result?;
    if evaluated.exception.is_some() {
        return None;
    }
    evaluated.result.value
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
    let taken = Instant::now();
    let at = SystemTime::now();
    let (mut changes, idb_same) = idb.begin(cache);
    let offered = idb_same.is_some();
    let expression = capture_expression(&cache.known(), options, idb_same);
    let remote = async {
        let sessions = calls.frame_sessions().await;
        let reads = sessions
            .into_iter()
            .map(|s| read_remote(calls, s, expression.clone()));
        futures::future::join_all(reads).await
    };
    let (cookies, top, tree, remote) = futures::join!(
        page.execute(GetCookiesParams::default()),
        read_here(page, expression.clone(), None),
        page.execute(GetFrameTreeParams::default()),
        remote,
    );
    tracing::trace!(elapsed = ?taken.elapsed(), "capture round trip");
    let cookies = cookies
        .map_err(|e| cdp_error("Storage.getCookies", e))?
        .result
        .cookies;
    let mut top = top?;
    // The script took the last full read as standing; if a change event came meanwhile (a
    // commit between `begin` and the script's reads, whose completion the page may have acted
    // on in what was just read), that read does not go with the rest: read it again, in full.
    if offered
        && top
            .idb
            .as_ref()
            .is_some_and(|p| p.l.is_none() && p.d.is_none())
        && let Some(now) = idb.moved_since(changes)
    {
        tracing::debug!("IndexedDB changed during the capture; reading the top frame again");
        changes = now;
        let full = capture_expression(&cache.known(), options, None);
        top = read_here(page, full, None).await?;
    }
    let top_origin = top.origin.clone();
    let url = top.url.clone();
    let idb_read = top
        .idb
        .as_ref()
        .and_then(|p| Some((p.h.clone(), p.l.clone()?)));

    let mut frames_unread = 0;
    let mut reads = Vec::new();
    if is_storable_origin(&top_origin) {
        reads.push(top);
    }
    for read in remote {
        match read {
            Some(r) => reads.push(r),
            None => frames_unread += 1,
        }
    }

    // Same-process frames of another origin (same-site subdomains, or every frame where
    // site isolation is off): read in an isolated world of each.
    if let Ok(tree) = tree {
        let mut frames = Vec::new();
        collect_frames(&tree.result.frame_tree, &mut frames);
        let mut seen: Vec<String> = reads.iter().map(|r| r.origin.clone()).collect();
        frames.retain(|(_, origin)| {
            let new = is_storable_origin(origin) && !seen.contains(origin);
            if new {
                seen.push(origin.clone());
            }
            new
        });
        let local_reads = frames.iter().map(|(frame, _)| async {
            let world = CreateIsolatedWorldParams::builder()
                .frame_id(frame.clone())
                .world_name("outlive")
                .build()
                .ok()?;
            let context = page.execute(world).await.ok()?.result.execution_context_id;
            read_here(page, expression.clone(), Some(*context.inner()))
                .await
                .ok()
        });
        for read in futures::future::join_all(local_reads).await {
            match read {
                Some(r) => reads.push(r),
                None => frames_unread += 1,
            }
        }
    }

    let mut storage = BTreeMap::new();
    for read in reads {
        if !is_storable_origin(&read.origin) {
            continue;
        }
        let key = StorageKey {
            top: top_origin.clone(),
            origin: read.origin.clone(),
        };
        if storage.contains_key(&key) {
            continue;
        }
        storage.insert(key, read.state(cache)?);
    }

    let checkpoint = Checkpoint {
        url,
        cookies: cookies.into_iter().map(StoredCookie::from).collect(),
        storage,
        frames_unread,
        at,
        taken,
        progress: None,
    };
    cache.remember(&checkpoint);
    if let Some((hash, list)) = idb_read {
        idb.read_in_full(page, &top_origin, hash, list, changes)
            .await;
    }
    Ok(checkpoint)
}

/// Whether the top frame's IndexedDB may have changed since the capture script last read it
/// in full, from Chromium's own change events (`Storage.trackIndexedDBForStorageKey`, then
/// `indexedDBContentUpdated` / `indexedDBListUpdated` on the page's session): while none came,
/// the capture script is told the last read stands, and only checks that no database came,
/// went or changed version — so an unchanged IndexedDB costs a checkpoint nothing more.
///
/// Chromium reported a commit's content change before the transaction's completion reached the
/// page in every trial (20 of 20 commits; the protocol does not promise it), and chromiumoxide
/// hands events over in the order they came, so a change the task has seen has been counted by
/// the time it asks for a checkpoint. A change event that comes while a capture runs has the
/// top frame read again in full, and a full read is made at least every
/// `IDB_READ_IN_FULL_EVERY` regardless. One watch per page session: tracking
/// belongs to the session.
#[derive(Default)]
pub(crate) struct IdbWatch(Mutex<IdbState>);

/// However quiet Chromium's change events are, the top frame's IndexedDB is read in full at
/// least this often: the events' order (below) is observed, not promised by the protocol, and
/// a tracking Chromium dropped without closing the session would otherwise go unnoticed.
const IDB_READ_IN_FULL_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct IdbState {
    events: Option<IdbEvents>,
    /// Origins whose (first-party) storage key is tracked on this session; shared with the
    /// watcher, which untracks them at the first change.
    tracked: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Change events seen so far.
    changes: u64,
    last: Option<IdbRead>,
    /// Full reads of the top frame's IndexedDB reported so far.
    #[cfg(test)]
    full_reads: u64,
}

/// The tracking's one-shot watcher. It waits for the first change event (or the end of the
/// streams), says so, stops Chromium's tracking and ends, dropping its listeners: however many
/// transactions a page commits between two captures, at most a few events are ever held.
/// The next full read starts the tracking again.
struct IdbEvents {
    /// Set once the first change came or the streams ended.
    changed: Arc<std::sync::atomic::AtomicBool>,
    _watcher: AbortOnDrop,
}

impl IdbEvents {
    fn watch(
        page: &Page,
        mut content: chromiumoxide::listeners::EventStream<EventIndexedDbContentUpdated>,
        mut list: chromiumoxide::listeners::EventStream<EventIndexedDbListUpdated>,
        tracked: Arc<Mutex<std::collections::HashSet<String>>>,
    ) -> IdbEvents {
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, page) = (changed.clone(), page.clone());
        let watcher = crate::quiet::spawn(async move {
            futures::future::select(content.next(), list.next()).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            drop((content, list));
            let origins: Vec<String> = lock(&tracked).drain().collect();
            for origin in origins {
                let untrack = UntrackIndexedDbForStorageKeyParams::new(format!("{origin}/"));
                let _ = page.execute(untrack).await;
            }
        });
        IdbEvents {
            changed,
            _watcher: AbortOnDrop(watcher),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The last full read of the top frame's IndexedDB.
struct IdbRead {
    origin: String,
    hash: String,
    list: String,
    /// The change count when the capture that read it started.
    changes: u64,
    /// When it was read.
    at: Instant,
    /// Whether the origin was tracked before that capture started.
    tracked: bool,
}

impl IdbState {
    /// Notes a change the watcher saw (or the end of its streams): the tracking is over until
    /// the next full read, and nothing is skipped until then.
    fn drain(&mut self) {
        let Some(events) = &self.events else {
            return;
        };
        if events.changed.load(std::sync::atomic::Ordering::SeqCst) {
            self.changes += 1;
            self.events = None;
            lock(&self.tracked).clear();
            self.last = None;
        }
    }
}

impl IdbWatch {
    /// The change count now, if a change came (or the tracking ended) since `begin` answered
    /// `changes`.
    fn moved_since(&self, changes: u64) -> Option<u64> {
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.drain();
        (state.events.is_none() || state.changes != changes).then_some(state.changes)
    }

    /// At a capture's start: the change count, and what the capture script may take as
    /// unchanged (`{origin, h, l}`), if anything.
    fn begin(&self, cache: &PartCache) -> (u64, Option<serde_json::Value>) {
        let mut state = self.0.lock().expect("idb watch poisoned");
        state.drain();
        let same = state
            .last
            .as_ref()
            .filter(|r| {
                r.tracked
                    && r.changes == state.changes
                    && r.at.elapsed() < IDB_READ_IN_FULL_EVERY
                    && cache.get(&r.hash).is_some()
            })
            .map(|r| serde_json::json!({ "origin": r.origin, "h": r.hash, "l": r.list }));
        (state.changes, same)
    }

    /// After a capture that read `origin`'s IndexedDB in full (content `hash`, databases
    /// `list`), starting at change count `changes`. Starts tracking the origin if it is not
    /// tracked yet: that read does not count as unchanged-since, the next one will.
    async fn read_in_full(
        &self,
        page: &Page,
        origin: &str,
        hash: String,
        list: String,
        changes: u64,
    ) {
        let (tracked, listening) = {
            let mut state = self.0.lock().expect("idb watch poisoned");
            #[cfg(test)]
            {
                state.full_reads += 1;
            }
            let tracked = lock(&state.tracked).contains(origin);
            state.last = Some(IdbRead {
                origin: origin.to_owned(),
                hash,
                list,
                changes,
                at: Instant::now(),
                tracked,
            });
            (tracked, state.events.is_some())
        };
        if tracked || !is_storable_origin(origin) {
            return;
        }
        // Listening before tracking, so no event after it is missed.
        if !listening {
            let (content, list) = futures::join!(
                page.event_listener::<EventIndexedDbContentUpdated>(),
                page.event_listener::<EventIndexedDbListUpdated>(),
            );
            let (Ok(content), Ok(list)) = (content, list) else {
                return;
            };
            let mut state = self.0.lock().expect("idb watch poisoned");
            if state.events.is_none() {
                let tracked = state.tracked.clone();
                state.events = Some(IdbEvents::watch(page, content, list, tracked));
            }
        }
        // A first-party storage key is the origin with a slash (`Storage.getStorageKey`).
        let track = TrackIndexedDbForStorageKeyParams::new(format!("{origin}/"));
        match page.execute(track).await {
            Ok(_) => {
                let state = self.0.lock().expect("idb watch poisoned");
                if state.events.is_some() {
                    lock(&state.tracked).insert(origin.to_owned());
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "IndexedDB change tracking unavailable; every capture reads it in full");
            }
        }
    }
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

/// A restore document: the codec and the restore script with `data`, then one iframe per
/// child restore document.
fn restore_document(data: &str, children: &[String]) -> Zeroizing<String> {
    // The data goes in as a string for `JSON.parse`, never as an object literal (where a
    // `"__proto__"` key would set a prototype instead of a property).
    let literal = Zeroizing::new(serde_json::to_string(data).expect("strings serialise"));
    // Keep it inside the <script> element whatever it contains: `<\/` and `<\!` read as
    // `</` and `<!` in a string literal.
    let step = Zeroizing::new(literal.replace("</", "<\\/"));
    let data = Zeroizing::new(step.replace("<!--", "<\\!--"));
    let frames: String = children
        .iter()
        .map(|src| format!("<iframe src=\"{src}\"></iframe>"))
        .collect();
    Zeroizing::new(format!(
        "<!doctype html><meta charset=\"utf-8\"><title>outlive restore</title><link rel=\"icon\" href=\"data:,\">\
         <script>(function(){{\n{CODEC_JS}\nwindow.__outlive_restored=({RESTORE_JS})(JSON.parse({data}));\n}})()</script>\
         <body>{frames}</body>",
        data = data.as_str()
    ))
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

/// The documents of one restore, by URL.
type Documents = HashMap<String, Zeroizing<String>>;

/// What a restore writes: per top origin with anything to write, the URL to load; every
/// document by its URL; and, over an earlier restore where only one top origin's own storage
/// changed, that origin and the data to write in place.
struct Plan {
    loads: Vec<String>,
    documents: Documents,
    in_place: Option<(String, Zeroizing<String>)>,
}

/// Plans a restore (see [`Plan`]).
fn plan(checkpoint: &Checkpoint, prior: Option<&Checkpoint>) -> Plan {
    let mut tops: BTreeMap<&str, (Option<&FrameState>, Vec<&StorageKey>)> = BTreeMap::new();
    // A top origin whose every storage key holds what `prior` already put in the page needs
    // no document.
    let mut changed = std::collections::BTreeSet::new();
    let mut frames_changed = false;
    for (key, state) in &checkpoint.storage {
        if state.is_empty() || !is_storable_origin(&key.top) || !is_storable_origin(&key.origin) {
            continue;
        }
        let known = prior
            .and_then(|p| p.storage.get(key))
            .is_some_and(|before| before.same_as(state));
        if !known {
            changed.insert(key.top.as_str());
            if !key.is_first_party() {
                frames_changed = true;
            }
        }
        let entry = tops.entry(key.top.as_str()).or_default();
        if key.is_first_party() {
            entry.0 = Some(state);
        } else {
            entry.1.push(key);
        }
    }
    let mut documents = Documents::new();
    let mut loads = Vec::new();
    let mut in_place = None;
    let mut n = 0;
    let mut url_of = |origin: &str| {
        n += 1;
        format!("{origin}/__outlive_restore/{n}")
    };
    for (top, (own, children)) in tops {
        if !changed.contains(top) {
            continue;
        }
        let mut child_urls = Vec::new();
        for key in children {
            let url = url_of(&key.origin);
            let before = prior.and_then(|p| p.storage.get(key));
            let data = checkpoint.storage[key].restore_data(0, before);
            documents.insert(url.clone(), restore_document(&data, &[]));
            child_urls.push(url);
        }
        let before = prior.and_then(|p| p.storage.get(&StorageKey::first_party(top)));
        let own = own.cloned().unwrap_or_default();
        if prior.is_some() && !frames_changed && changed.len() == 1 {
            in_place = Some((top.to_owned(), own.restore_data(0, before)));
        }
        let data = own.restore_data(child_urls.len(), before);
        let url = url_of(top);
        documents.insert(url.clone(), restore_document(&data, &child_urls));
        loads.push(url);
    }
    Plan {
        loads,
        documents,
        in_place,
    }
}

/// Writes `data` into the page where it stands, if that is a restore document of `top` (an
/// earlier restore's, with nothing else loaded since): one round trip, no navigation. `None`
/// when the page is elsewhere.
async fn write_in_place(page: &Page, top: &str, data: &str) -> Result<Option<u64>, Error> {
    let top = serde_json::to_string(top).expect("strings serialise");
    let data = Zeroizing::new(serde_json::to_string(data).expect("strings serialise"));
    let mut expression = Zeroizing::new(format!(
        "(() => {{ if (location.origin !== {top} || !location.pathname.startsWith('/__outlive_restore/')) return false;\n\
         {CODEC_JS}\nreturn ({RESTORE_JS})(JSON.parse({data})); }})()",
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

/// Puts cookies and every storage key's state into a fresh page before any request reaches
/// a real site: each top origin is loaded with every request intercepted (`Fetch.enable`)
/// and answered with a restore document, which embeds the cross-site origins captured under
/// it. The page is left on the last restore document; the caller navigates to the URL.
/// Answers how many writes failed in the page (each named in a debug log).
///
/// With `prior` (what was restored into this browser before, with nothing else happening in it
/// since), only what changed is written: the cookies are replaced, and only top origins whose
/// storage differs get a document.
pub(crate) async fn restore(
    page: &Page,
    checkpoint: &Checkpoint,
    prior: Option<&Checkpoint>,
) -> Result<u64, Error> {
    let started = Instant::now();
    let cookies_known = prior.is_some_and(|p| p.cookies == checkpoint.cookies);
    if prior.is_some_and(|p| !p.cookies.is_empty()) && !cookies_known {
        page.execute(ClearCookiesParams::default())
            .await
            .map_err(|e| cdp_error("Storage.clearCookies", e))?;
    }
    if !checkpoint.cookies.is_empty() && !cookies_known {
        let cookies = checkpoint
            .cookies
            .iter()
            .map(StoredCookie::to_param)
            .collect::<Vec<_>>();
        page.execute(SetCookiesParams::new(cookies))
            .await
            .map_err(|e| cdp_error("Storage.setCookies", e))?;
    }
    // Copies of the values: zeroed when restore returns, like the checkpoint itself.
    let Plan {
        loads,
        documents,
        in_place,
    } = plan(checkpoint, prior);
    if loads.is_empty() {
        return Ok(0);
    }
    if let Some((top, data)) = in_place
        && let Some(failed) = write_in_place(page, &top, &data).await?
    {
        return Ok(failed);
    }
    let planned = started.elapsed();

    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| cdp_error("listening for Fetch.requestPaused", e))?;
    let responder_page = page.clone();
    // Answers every paused request; owned, so it stops when restore returns.
    let _responder = AbortOnDrop(crate::quiet::spawn(async move {
        while let Some(event) = paused.next().await {
            let key = url::Url::parse(&event.request.url)
                .map(|u| format!("{}{}", u.origin().ascii_serialization(), u.path()))
                .unwrap_or_default();
            let body = documents.get(&key).map_or("", |d| d.as_str());
            let t = Instant::now();
            let encoded = Zeroizing::new(BASE64.encode(body.as_bytes()));
            let fulfil = FulfillRequestParams::builder()
                .request_id(event.request_id.clone())
                .response_code(200)
                .response_header(HeaderEntry::new("Content-Type", "text/html; charset=utf-8"))
                .response_header(HeaderEntry::new("Cache-Control", "no-store"))
                .body(encoded.to_string())
                .build();
            if let Ok(fulfil) = fulfil {
                let _ = responder_page.execute(fulfil).await;
            }
            tracing::debug!(bytes = body.len(), took = ?t.elapsed(), "restore document served");
        }
    }));

    let pattern = RequestPattern::builder()
        .url_pattern("*")
        .request_stage(RequestStage::Request)
        .build();
    page.execute(fetch::EnableParams::builder().pattern(pattern).build())
        .await
        .map_err(|e| cdp_error("Fetch.enable", e))?;
    let enabled = started.elapsed();
    let result = write_all(page, &loads).await;
    let written = started.elapsed();
    let disabled = page.execute(fetch::DisableParams::default()).await;
    tracing::debug!(?planned, ?enabled, ?written, done = ?started.elapsed(), "restore phases");
    let failed = result?;
    disabled.map_err(|e| cdp_error("Fetch.disable", e))?;
    Ok(failed)
}

/// Loads each restore document and waits for its report.
async fn write_all(page: &Page, loads: &[String]) -> Result<u64, Error> {
    let mut failed = 0;
    for url in loads {
        let started = Instant::now();
        page.goto(NavigateParams::new(url.clone()))
            .await
            .map_err(|e| cdp_error("loading a restore document", e))?;
        let loaded = started.elapsed();
        let report: RestoreReport = evaluate(
            page,
            "window.__outlive_restored".to_owned(),
            None,
            "waiting for a restore document",
        )
        .await?;
        tracing::debug!(?loaded, written = ?started.elapsed(), in_page = %report.ms, "restore document done");
        failed += report.failed();
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(json: &str) -> Option<Arc<Part>> {
        Some(Arc::new(Part {
            hash: format!("h{}", json.len()),
            json: json.to_owned(),
            left_out: 0,
        }))
    }

    fn key(top: &str, origin: &str) -> StorageKey {
        StorageKey {
            top: top.into(),
            origin: origin.into(),
        }
    }

    fn local(json: &str) -> FrameState {
        FrameState {
            local: part(json),
            ..FrameState::default()
        }
    }

    #[test]
    fn restore_document_cannot_be_broken_out_of() {
        let data =
            local(r#"[["k","</script><script>alert(1)</script><!--"]]"#).restore_data(0, None);
        let doc = restore_document(&data, &[]);
        assert_eq!(doc.matches("</script>").count(), 1, "{}", doc.as_str());
        assert!(!doc.contains("<!--"), "{}", doc.as_str());
    }

    #[test]
    fn a_checkpoint_reads_back_from_its_bytes() {
        let mut cp = Checkpoint::at_url("https://bank.example/account", Instant::now());
        cp.cookies.push(StoredCookie {
            name: "aurora_session".into(),
            value: "s3cr3t".into(),
            domain: "bank.example".into(),
            path: "/".into(),
            expires: Some(1_900_000_000.0),
            http_only: true,
            secure: true,
            same_site: Some(CookieSameSite::Strict),
            priority: CookiePriority::Medium,
            source_scheme: CookieSourceScheme::Secure,
            source_port: 443,
            partition_key: Some(CookiePartitionKey::new("https://top.example", false)),
        });
        cp.storage.insert(
            key("https://bank.example", "https://widget.example"),
            FrameState {
                local: part(r#"[["k","v"]]"#),
                session: part(r#"[["s","1"]]"#),
                idb: None,
            },
        );
        cp.frames_unread = 1;
        cp.progress = Some(Arc::new(Zeroizing::new(r#"{"pages":7}"#.to_owned())));
        let taken = Instant::now();
        let back = Checkpoint::from_bytes(&cp.to_bytes(), taken).unwrap();
        assert_eq!(back.url, cp.url);
        assert!(
            back.cookies == cp.cookies,
            "cookies, partition key included"
        );
        let frame = &back.storage[&key("https://bank.example", "https://widget.example")];
        assert!(frame.same_as(&cp.storage[&key("https://bank.example", "https://widget.example")]));
        assert_eq!(frame.session.as_ref().unwrap().json, r#"[["s","1"]]"#);
        assert_eq!(back.frames_unread, 1);
        assert_eq!(
            back.progress.as_deref().map(|p| p.as_str()),
            Some(r#"{"pages":7}"#)
        );
        assert_eq!(back.taken, taken);
        assert_eq!(
            back.at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
            cp.at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let bad = Checkpoint::from_bytes(b"{\"v\":2}", taken).unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::Sealed);
    }

    #[test]
    fn debug_shows_sizes_never_values() {
        let mut cp = Checkpoint::at_url(
            "https://bank.example/account?sid=SECRET-URL",
            Instant::now(),
        );
        cp.storage.insert(
            key("https://bank.example", "https://bank.example"),
            local(r#"[["token","SECRET-ITEM"]]"#),
        );
        let debug = format!("{cp:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
        assert!(debug.contains("bytes"));
    }

    #[test]
    fn merge_keeps_keys_only_the_older_checkpoint_saw() {
        let now = Instant::now();
        let a = key("https://a.example", "https://a.example");
        let b = key("https://a.example", "https://b.example");
        let mut older = Checkpoint::at_url("https://a.example/", now);
        older.storage.insert(a.clone(), local(r#"[["k","old"]]"#));
        older.storage.insert(b.clone(), local(r#"[["k","b"]]"#));
        let mut newer = Checkpoint::at_url("https://a.example/", now);
        newer.storage.insert(a.clone(), local(r#"[["k","new"]]"#));
        newer.merge_older(&older);
        assert!(
            newer.storage[&a]
                .local
                .as_ref()
                .unwrap()
                .json
                .contains("new")
        );
        assert!(
            newer.storage[&b]
                .local
                .as_ref()
                .unwrap()
                .json
                .contains("\"b\"")
        );
    }

    #[test]
    fn a_cross_site_frame_is_restored_inside_its_top_origin() {
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["a","1"]]"#),
        );
        cp.storage.insert(
            key("https://app.example", "https://widget.example"),
            local(r#"[["w","2"]]"#),
        );
        cp.storage.insert(
            key("https://other.example", "https://other.example"),
            local("[]"),
        );
        let Plan {
            loads,
            documents,
            in_place,
        } = plan(&cp, None);
        assert!(
            in_place.is_none(),
            "a fresh page is not on a restore document"
        );
        assert_eq!(loads.len(), 1, "empty storage is not loaded: {loads:?}");
        assert!(loads[0].starts_with("https://app.example/__outlive_restore/"));
        let top = &documents[&loads[0]];
        let child = documents
            .keys()
            .find(|u| u.starts_with("https://widget.example/"))
            .expect("a document for the widget");
        assert!(top.contains(&format!("<iframe src=\"{child}\">")));
        assert!(top.contains(r#"\"children\":1"#));
        assert!(documents[child].contains(r#"[[\"w\",\"2\"]]"#));
    }

    #[test]
    fn over_an_earlier_restore_only_what_changed_is_written() {
        let idb = part(r#"[{"name":"db","version":1,"stores":[]}]"#);
        let app = key("https://app.example", "https://app.example");
        let mut prior = Checkpoint::at_url("https://app.example/", Instant::now());
        prior.storage.insert(
            app.clone(),
            FrameState {
                local: part(r#"[["big","xxxx"],["step","1"],["gone","x"]]"#),
                session: part(r#"[["s","1"]]"#),
                idb: idb.clone(),
            },
        );
        let mut now = Checkpoint::at_url("https://app.example/", Instant::now());
        now.storage.insert(
            app.clone(),
            FrameState {
                // Same length, so the test's hash differs only by content: give it its own.
                local: Some(Arc::new(Part {
                    hash: "changed".into(),
                    json: r#"[["big","xxxx"],["step","2"],["new","\"q\""]]"#.into(),
                    left_out: 0,
                })),
                session: part(r#"[["s","1"]]"#),
                idb,
            },
        );
        let Plan {
            loads,
            documents,
            in_place,
        } = plan(&now, Some(&prior));
        assert_eq!(loads.len(), 1);
        let (top, data) = in_place.expect("only the top origin's own storage changed");
        assert_eq!(top, "https://app.example");
        assert!(
            data.contains(r#""local":{"set":[["step","2"],["new","\"q\""]],"remove":["gone"]}"#),
            "{}",
            data.as_str()
        );
        let doc = documents[&loads[0]].as_str();
        assert!(
            doc.contains(r#"\"local\":{\"set\":[[\"step\",\"2\"],[\"new\",\"\\\"q\\\"\"]],\"remove\":[\"gone\"]}"#),
            "{doc}"
        );
        assert!(doc.contains(r#"\"session\":null,\"idb\":null"#), "{doc}");
        assert!(
            !doc.contains("xxxx"),
            "the unchanged item is not sent again"
        );
        assert!(
            plan(&prior, Some(&prior)).loads.is_empty(),
            "nothing changed, nothing loaded"
        );
        // A cross-site frame's storage changed: its document must be loaded.
        let widget = key("https://app.example", "https://widget.example");
        let mut framed = Checkpoint::at_url("https://app.example/", Instant::now());
        framed.storage = prior.storage.clone();
        framed.storage.insert(widget, local(r#"[["w","2"]]"#));
        let Plan {
            loads, in_place, ..
        } = plan(&framed, Some(&prior));
        assert_eq!(loads.len(), 1);
        assert!(
            in_place.is_none(),
            "a frame's change goes through a document"
        );
    }

    #[test]
    fn unchanged_parts_come_from_the_cache_by_hash() {
        let cache = PartCache::default();
        let mut cp = Checkpoint::at_url("https://a.example/", Instant::now());
        let big = format!(r#"[["k","{}"]]"#, "x".repeat(KNOWN_MIN_BYTES));
        cp.storage
            .insert(key("https://a.example", "https://a.example"), local(&big));
        cache.remember(&cp);
        let hash = cp
            .storage
            .values()
            .next()
            .unwrap()
            .local
            .as_ref()
            .unwrap()
            .hash
            .clone();
        assert_eq!(cache.known(), vec![hash.clone()]);
        let read = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            local: Some(RawPart {
                h: hash,
                d: None,
                u: 0,
                l: None,
            }),
            session: None,
            idb: None,
        };
        assert_eq!(read.state(&cache).unwrap().local.unwrap().json, big);
        let unknown = FrameRead {
            url: "https://a.example/".into(),
            origin: "https://a.example".into(),
            local: Some(RawPart {
                h: "nope".into(),
                d: None,
                u: 0,
                l: None,
            }),
            session: None,
            idb: None,
        };
        assert!(unknown.state(&cache).is_err());
    }

    /// The codec in real Chromium: every supported type, and 256 generated values (nested
    /// arrays, objects, Maps and Sets of them), come back as the same types and contents;
    /// the unsupported ones are refused as `Unsupported` (what capture counts), never
    /// mangled.
    #[tokio::test]
    async fn the_codec_round_trips_every_supported_type_in_chromium() {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::TestRunner;

        let mut runner = TestRunner::deterministic();
        let strategy = js_value();
        let mut cases: Vec<String> = [
            "'text ✓ \\u2028'",
            "42",
            "-0",
            "NaN",
            "Infinity",
            "-Infinity",
            "true",
            "null",
            "undefined",
            "12345678901234567890n",
            "new Date(1700000000123)",
            "new Date(NaN)",
            "/a+b?/gi",
            "new Uint8Array([1, 2, 255])",
            "new Int16Array([-1, 300])",
            "new Float64Array([1.5, -0.25])",
            "new BigInt64Array([-5n])",
            "new Uint8Array([0, 1, 2, 3, 4]).subarray(1, 4)",
            "new Uint8Array([9, 8]).buffer",
            "new DataView(new Uint8Array([7, 6, 5]).buffer)",
            "new Map([['k', 1], [2, 'v']])",
            "new Set([1, 'a', null])",
            "new Blob([new Uint8Array([1, 2])], {type: 'image/png'})",
            "new File(['hi'], 'a.txt', {type: 'text/plain', lastModified: 1700000000000})",
            "new TypeError('boom')",
            "new Number(5)",
            "new String('s')",
            "new Boolean(false)",
            "{'$t': 'd', v: 1}",
            "{['__proto__']: {a: 1}}",
            "Object.create(null)",
        ]
        .map(String::from)
        .to_vec();
        for _ in 0..256 {
            cases.push(strategy.new_tree(&mut runner).unwrap().current());
        }
        let unsupported = [
            "() => 1",
            "Symbol('s')",
            "(() => { const o = {}; o.self = [o]; return o; })()",
            "new WeakMap()",
            "new (class Thing { constructor() { this.a = 1; } })()",
            "new ImageData(1, 1)",
        ];
        let expression = format!(
            "(async () => {{\n{CODEC_JS}\nreturn ({})([{}], [{}]);\n}})()",
            include_str!("js/codec_check.js"),
            cases.join(",\n"),
            unsupported.join(",\n"),
        );

        let (_chromium, _browser, _pump, page) = chromium_page().await;
        #[derive(Deserialize)]
        struct Checked {
            failed: Vec<usize>,
            #[serde(rename = "notRefused")]
            not_refused: Vec<usize>,
            checked: usize,
        }
        let checked: Checked = read_value(&page, expression).await;
        let failed: Vec<&str> = checked.failed.iter().map(|&i| cases[i].as_str()).collect();
        let not_refused: Vec<&str> = checked
            .not_refused
            .iter()
            .map(|&i| unsupported[i])
            .collect();
        assert!(
            failed.is_empty(),
            "values that did not round-trip: {failed:#?}"
        );
        assert!(not_refused.is_empty(), "not refused: {not_refused:?}");
        assert_eq!(checked.checked, cases.len() + unsupported.len());
    }

    /// A page with a local Chromium behind it, owned by the returned guards.
    async fn chromium_page() -> (
        crate::LocalBrowser,
        chromiumoxide::Browser,
        AbortOnDrop,
        Page,
    ) {
        let chromium = crate::LocalChromium::new()
            .start()
            .await
            .expect("Chromium starts");
        let (browser, mut handler) =
            chromiumoxide::Browser::connect(chromium.endpoint().expose().to_owned())
                .await
                .expect("connects");
        let pump = AbortOnDrop(tokio::spawn(async move {
            while handler.next().await.is_some() {}
        }));
        let page = browser.new_page("about:blank").await.expect("a page");
        (chromium, browser, pump, page)
    }

    /// Over an earlier restore still in the page, what changed is written where the page
    /// stands (no navigation); a page that went elsewhere gets a restore document again.
    #[tokio::test]
    async fn a_restore_over_an_earlier_one_is_written_in_place_while_the_page_is_there() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let app = key("https://app.example", "https://app.example");
        let state = |local: &str| {
            let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
            cp.storage.insert(
                app.clone(),
                FrameState {
                    local: Some(Arc::new(Part {
                        hash: local.to_owned(),
                        json: local.to_owned(),
                        left_out: 0,
                    })),
                    session: part(r#"[["s","1"]]"#),
                    idb: None,
                },
            );
            cp
        };
        let read = r#"JSON.stringify([location.pathname, window.__mark ?? null,
            Object.entries(localStorage).sort(), sessionStorage.getItem('s')])"#;
        let first = state(r#"[["keep","1"],["step","1"],["gone","x"]]"#);
        assert_eq!(restore(&page, &first, None).await.unwrap(), 0);
        let _: serde_json::Value = read_value(&page, "window.__mark = 'still here'".into()).await;

        let second = state(r#"[["keep","1"],["step","2"]]"#);
        assert_eq!(restore(&page, &second, Some(&first)).await.unwrap(), 0);
        let seen: String = read_value(&page, read.into()).await;
        assert_eq!(
            seen, r#"["/__outlive_restore/1","still here",[["keep","1"],["step","2"]],"1"]"#,
            "written in place: the document (and its mark) stayed"
        );

        page.goto("about:blank").await.unwrap();
        let third = state(r#"[["keep","1"],["step","3"]]"#);
        assert_eq!(restore(&page, &third, Some(&second)).await.unwrap(), 0);
        let seen: String = read_value(&page, read.into()).await;
        assert_eq!(
            seen, r#"["/__outlive_restore/1",null,[["keep","1"],["step","3"]],"1"]"#,
            "a restore document was loaded again"
        );
    }

    /// An unchanged IndexedDB is not read again once Chromium tracks it; every kind of change
    /// — a record written, a database created — is in the next capture.
    #[tokio::test]
    async fn indexeddb_is_read_again_only_after_a_change() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        // A page of a real origin (served by a restore document; no request leaves).
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["k","v"]]"#),
        );
        restore(&page, &cp, None).await.unwrap();
        let put = |value: &str| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onsuccess = () => {{ const tx = r.result.transaction('s', 'readwrite');
                  tx.objectStore('s').put('{value}', 'k'); tx.oncomplete = () => {{ r.result.close(); resolve(1); }}; }};
                r.onerror = () => reject(r.error); }})"
            )
        };
        let _: i64 = read_value(&page, put("first")).await;

        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
        };
        let idb_of = |cp: &Checkpoint| {
            cp.storage
                .values()
                .next()
                .and_then(|s| s.idb.as_ref())
                .map(|p| p.json.clone())
                .unwrap_or_default()
        };
        let capture = || capture(&page, &calls, &cache, &watch, options);
        let first = capture().await.unwrap();
        assert!(idb_of(&first).contains("first"));
        assert!(
            watch.begin(&cache).1.is_none(),
            "read before tracking began"
        );
        let second = capture().await.unwrap();
        assert_eq!(idb_of(&second), idb_of(&first));
        assert!(
            watch.begin(&cache).1.is_some(),
            "read while tracked and unchanged: the next capture may skip it"
        );
        let full_reads = || watch.0.lock().unwrap().full_reads;
        assert_eq!(full_reads(), 2);
        let third = capture().await.unwrap();
        assert_eq!(idb_of(&third), idb_of(&first), "the same content");
        assert_eq!(full_reads(), 2, "not read again: nothing changed");

        let _: i64 = read_value(&page, put("second")).await;
        let after_put = capture().await.unwrap();
        assert!(
            idb_of(&after_put).contains("second"),
            "a record written is seen"
        );
        assert_eq!(full_reads(), 3);
        let _ = capture().await.unwrap();

        let _: i64 = read_value(
            &page,
            "new Promise((resolve) => { const r = indexedDB.open('other', 3);
              r.onsuccess = () => { r.result.close(); resolve(1); }; })"
                .into(),
        )
        .await;
        let after_create = capture().await.unwrap();
        assert!(
            idb_of(&after_create).contains("\"other\""),
            "a database created is seen: {}",
            idb_of(&after_create)
        );
        let _ = capture().await.unwrap();
        let _: i64 = read_value(
            &page,
            "new Promise((resolve) => { const r = indexedDB.deleteDatabase('other');
              r.onsuccess = () => resolve(1); })"
                .into(),
        )
        .await;
        let after_delete = capture().await.unwrap();
        assert!(
            !idb_of(&after_delete).contains("\"other\""),
            "a database deleted is seen"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_indexeddb_commits_leaves_no_events_piled_up() {
        let (_chromium, _browser, _pump, page) = chromium_page().await;
        let mut cp = Checkpoint::at_url("https://app.example/", Instant::now());
        cp.storage.insert(
            key("https://app.example", "https://app.example"),
            local(r#"[["k","v"]]"#),
        );
        restore(&page, &cp, None).await.unwrap();
        let commits = |n: u32, tag: &str| {
            format!(
                "new Promise((resolve, reject) => {{ const r = indexedDB.open('db', 1);
                r.onupgradeneeded = () => r.result.createObjectStore('s');
                r.onsuccess = async () => {{
                  for (let i = 0; i < {n}; i++) await new Promise(done => {{
                    const tx = r.result.transaction('s', 'readwrite');
                    tx.objectStore('s').put('{tag}' + i, 'k'); tx.oncomplete = done; }});
                  r.result.close(); resolve(1); }};
                r.onerror = () => reject(r.error); }})"
            )
        };
        let _: i64 = read_value(&page, commits(1, "a")).await;
        let (calls, cache, watch) = (Calls::detached(), PartCache::default(), IdbWatch::default());
        let options = CaptureOptions {
            indexed_db: true,
            indexed_db_max_bytes: 1 << 20,
        };
        let capture = || capture(&page, &calls, &cache, &watch, options);
        capture().await.unwrap();
        capture().await.unwrap();
        let watching = || watch.0.lock().unwrap().events.is_some();
        assert!(watching(), "tracked after two full reads");

        // 2 000 transactions, one after another: the watcher sees the first and stops the
        // tracking, so the events of the other 1 999 are neither sent nor held.
        let _: i64 = read_value(&page, commits(2_000, "b")).await;
        // The watcher runs on its own task: wait (bounded) for it to have seen the change and
        // stopped the tracking.
        let stopped = || {
            let state = watch.0.lock().unwrap();
            let seen = state
                .events
                .as_ref()
                .is_some_and(|e| e.changed.load(std::sync::atomic::Ordering::SeqCst));
            seen && lock(&state.tracked).is_empty()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped() {
            assert!(
                Instant::now() < deadline,
                "the watcher saw the change and untracked"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let after = capture().await.unwrap();
        let idb = after
            .storage
            .values()
            .next()
            .and_then(|s| s.idb.as_ref())
            .map(|p| p.json.clone())
            .unwrap_or_default();
        assert!(
            idb.contains("b1999"),
            "the newest record is captured: {idb}"
        );
        assert!(watching(), "tracked again by that full read");
    }

    async fn read_value<T: serde::de::DeserializeOwned>(page: &Page, expression: String) -> T {
        let eval = evaluate_params(expression, None).unwrap();
        page.evaluate_expression(eval)
            .await
            .expect("the check runs")
            .into_value()
            .expect("the check answers")
    }

    /// A JavaScript expression for a random structured-clonable value.
    fn js_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let number = any::<f64>().prop_map(|f| {
            if f.is_nan() {
                "NaN".to_owned()
            } else if f.is_infinite() {
                if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else if f == 0.0 && f.is_sign_negative() {
                "-0".to_owned()
            } else {
                format!("{f:e}")
            }
        });
        let string = any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap());
        let bytes = proptest::collection::vec(any::<u8>(), 0..24);
        let leaf = prop_oneof![
            number,
            string,
            any::<bool>().prop_map(|b| b.to_string()),
            Just("null".to_owned()),
            Just("undefined".to_owned()),
            any::<i64>().prop_map(|n| format!("{n}n")),
            (-8_640_000_000_000_000i64..8_640_000_000_000_000)
                .prop_map(|ms| format!("new Date({ms})")),
            bytes.clone().prop_map(|b| format!("new Uint8Array({b:?})")),
            proptest::collection::vec(any::<i32>(), 0..8)
                .prop_map(|v| format!("new Int32Array({v:?})")),
            proptest::collection::vec(-1e9f64..1e9, 0..8)
                .prop_map(|v| format!("new Float32Array({v:?})")),
            bytes
                .clone()
                .prop_map(|b| format!("new Uint8Array({b:?}).buffer")),
            (bytes.clone(), "[a-z]{0,5}/[a-z]{0,5}")
                .prop_map(|(b, t)| format!("new Blob([new Uint8Array({b:?})], {{type: '{t}'}})")),
            ("[a-z./]{0,8}", "[a-z]{1,8}").prop_map(|(src, flags)| {
                let flags: String = flags
                    .chars()
                    .filter(|c| "dgimsuy".contains(*c))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                format!(
                    "new RegExp({}, '{flags}')",
                    serde_json::to_string(&src).unwrap()
                )
            }),
        ];
        let key = prop_oneof![
            "[a-z$_0-9]{0,4}",
            Just("$t".to_owned()),
            Just("__proto__".to_owned())
        ];
        leaf.prop_recursive(3, 32, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(", "))),
                proptest::collection::vec((key.clone(), inner.clone()), 0..4).prop_map(|v| {
                    let fields: Vec<String> = v
                        .iter()
                        .map(|(k, x)| format!("[{}]: {x}", serde_json::to_string(k).unwrap()))
                        .collect();
                    format!("{{{}}}", fields.join(", "))
                }),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(|v| {
                    let pairs: Vec<String> = v.iter().map(|(k, x)| format!("[{k}, {x}]")).collect();
                    format!("new Map([{}])", pairs.join(", "))
                }),
                proptest::collection::vec(inner, 0..4)
                    .prop_map(|v| format!("new Set([{}])", v.join(", "))),
            ]
        })
    }
}
