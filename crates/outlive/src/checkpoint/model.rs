//! The data model: a checkpoint, its cookies, and each storage key's parts.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use chromiumoxide::cdp::browser_protocol::network::{
    Cookie, CookieParam, CookiePartitionKey, CookiePriority, CookieSameSite, CookieSourceScheme,
    TimeSinceEpoch,
};
use serde::Deserialize;
use tokio::time::Instant;
use zeroize::Zeroize;

/// One cookie, as much of it as `Storage.setCookies` can put back.
#[derive(Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredCookie {
    pub(super) name: String,
    pub(super) value: String,
    pub(super) domain: String,
    pub(super) path: String,
    pub(super) expires: Option<f64>,
    pub(super) http_only: bool,
    pub(super) secure: bool,
    pub(super) same_site: Option<CookieSameSite>,
    pub(super) priority: CookiePriority,
    pub(super) source_scheme: CookieSourceScheme,
    pub(super) source_port: i64,
    /// CHIPS: the top-level site the cookie is partitioned under.
    pub(super) partition_key: Option<CookiePartitionKey>,
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
    pub(super) fn to_param(&self) -> CookieParam {
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

    pub(super) fn bytes(&self) -> usize {
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
    pub(super) fn first_party(origin: &str) -> Self {
        StorageKey {
            top: origin.to_owned(),
            origin: origin.to_owned(),
        }
    }

    pub(super) fn is_first_party(&self) -> bool {
        self.top == self.origin
    }
}

/// One part of a frame's state — its localStorage, sessionStorage, IndexedDB, Cache Storage
/// or private files — as the page's script serialised it, with the hash of its content.
pub(crate) struct Part {
    pub(super) hash: String,
    pub(super) json: String,
    /// What the script left out: values it could not serialise, entries over a cap.
    pub(super) left_out: u64,
}

impl Part {
    pub(super) fn is_empty(&self) -> bool {
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
    pub(super) local: Option<Arc<Part>>,
    pub(super) session: Option<Arc<Part>>,
    pub(super) idb: Option<Arc<Part>>,
    /// Cache Storage (see `files`).
    pub(super) caches: Option<Arc<Part>>,
    /// The origin private file system (see `files`).
    pub(super) files: Option<Arc<Part>>,
}

impl FrameState {
    pub(super) fn parts(&self) -> impl Iterator<Item = &Arc<Part>> {
        [
            &self.local,
            &self.session,
            &self.idb,
            &self.caches,
            &self.files,
        ]
        .into_iter()
        .flatten()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts().all(|p| p.is_empty())
    }

    /// Whether `other` holds the same content (compared by the parts' hashes).
    pub(super) fn same_as(&self, other: &FrameState) -> bool {
        fn hash(p: &Option<Arc<Part>>) -> Option<&str> {
            p.as_ref().map(|p| p.hash.as_str())
        }
        hash(&self.local) == hash(&other.local)
            && hash(&self.session) == hash(&other.session)
            && hash(&self.idb) == hash(&other.idb)
            && hash(&self.caches) == hash(&other.caches)
            && hash(&self.files) == hash(&other.files)
    }
}

/// A browser context a foreign client made (`Target.createBrowserContext`): its cookies and
/// its storage, restored into the context the client makes in its place after a relaunch.
#[derive(Clone, Default)]
pub(crate) struct ContextState {
    pub(crate) cookies: Vec<StoredCookie>,
    pub(crate) storage: BTreeMap<StorageKey, FrameState>,
}

impl ContextState {
    pub(super) fn bytes(&self) -> usize {
        self.cookies.iter().map(StoredCookie::bytes).sum::<usize>() + storage_bytes(&self.storage)
    }
}

/// Another tab of the default context, reopened after a death under `serve`: its URL and its
/// sessionStorage (which belongs to the tab) per storage key.
#[derive(Clone)]
pub(crate) struct TabState {
    pub(crate) url: String,
    pub(crate) session: BTreeMap<StorageKey, FrameState>,
    /// Its typed fields and scroll positions (see `page_state`).
    pub(crate) page: Option<Arc<Part>>,
    /// Its back/forward list (see `back_forward`).
    pub(crate) history: Option<Arc<Part>>,
    /// The context the client made it in (its place in `Checkpoint::contexts`); `None`: the
    /// default context.
    pub(crate) context: Option<usize>,
}

impl TabState {
    pub(super) fn bytes(&self) -> usize {
        self.url.len()
            + storage_bytes(&self.session)
            + self.page.as_ref().map_or(0, |p| p.json.len())
            + self.history.as_ref().map_or(0, |p| p.json.len())
    }
}

impl Drop for TabState {
    fn drop(&mut self) {
        self.url.zeroize();
    }
}

pub(super) fn storage_bytes(storage: &BTreeMap<StorageKey, FrameState>) -> usize {
    storage
        .iter()
        .map(|(k, s)| k.origin.len() + k.top.len() + s.parts().map(|p| p.json.len()).sum::<usize>())
        .sum()
}

/// Keeps what `older` held under keys `newer` does not hold.
pub(super) fn merge_storage(
    newer: &mut BTreeMap<StorageKey, FrameState>,
    older: &BTreeMap<StorageKey, FrameState>,
) {
    for (key, state) in older {
        newer.entry(key.clone()).or_insert_with(|| state.clone());
    }
}

/// The part of the browser's state that survives a relaunch: the default context's cookies
/// and storage, the URL of the tab to resume in, and the contexts a client made.
#[derive(Clone)]
pub(crate) struct Checkpoint {
    /// The URL of the tab to resume in: the one the client used last, else the task's page.
    pub(crate) url: String,
    /// The default context's cookies.
    pub(crate) cookies: Vec<StoredCookie>,
    /// The default context's Web Storage and IndexedDB per storage key, from every tab in it;
    /// sessionStorage only from the tab to resume in (it belongs to a tab).
    pub(crate) storage: BTreeMap<StorageKey, FrameState>,
    /// The contexts a foreign client made, in the order it made them.
    pub(crate) contexts: Vec<ContextState>,
    /// The default context's other tabs, in the client's order (kept in memory only).
    pub(crate) tabs: Vec<TabState>,
    /// The targets read: the tab to resume in, then `tabs`' (in memory only). The front pairs
    /// them with the tabs a restore opens, for a client kept across the swap.
    pub(crate) targets: Vec<String>,
    /// Frames whose storage could not be read at all.
    pub(crate) frames_unread: u64,
    /// Wall-clock time the capture started (what `ctx.resumed_from()` reports).
    pub(crate) at: SystemTime,
    /// Monotonic time the capture started (what lost-work accounting uses).
    pub(crate) taken: Instant,
    /// The task's own progress (JSON) as of the capture's start: `Ctx::checkpoint_with`.
    pub(crate) progress: Option<Progress>,
    /// The resumed tab's typed fields and scroll positions (see `page_state`); `None` where
    /// not read (off, or the page did not answer).
    pub(crate) page: Option<Arc<Part>>,
    /// The resumed tab's back/forward list (see `back_forward`); `None` where not read.
    pub(crate) history: Option<Arc<Part>>,
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
            contexts: Vec::new(),
            tabs: Vec::new(),
            targets: Vec::new(),
            frames_unread: 0,
            at: SystemTime::now(),
            taken,
            progress: None,
            page: None,
            history: None,
        }
    }

    /// A checkpoint at `about:blank` holding only `storage`, for writing it into a page.
    pub(crate) fn holding(storage: BTreeMap<StorageKey, FrameState>) -> Self {
        Checkpoint {
            url: "about:blank".to_owned(),
            cookies: Vec::new(),
            storage,
            contexts: Vec::new(),
            tabs: Vec::new(),
            targets: Vec::new(),
            frames_unread: 0,
            at: SystemTime::now(),
            taken: Instant::now(),
            progress: None,
            page: None,
            history: None,
        }
    }

    /// Approximate size of the secret material, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.url.len()
            + self.progress.as_ref().map_or(0, |p| p.len())
            + self.cookies.iter().map(StoredCookie::bytes).sum::<usize>()
            + storage_bytes(&self.storage)
            + self.contexts.iter().map(ContextState::bytes).sum::<usize>()
            + self.tabs.iter().map(TabState::bytes).sum::<usize>()
            + self.page.as_ref().map_or(0, |p| p.json.len())
            + self.history.as_ref().map_or(0, |p| p.json.len())
    }

    /// What this checkpoint could not hold: IndexedDB values that cannot be serialised or
    /// that are over the size cap, Cache Storage entries and private files that are
    /// unreadable or over their caps, frames whose storage could not be read, form fields over
    /// the page state's caps, and back/forward entries over the list's cap or not rebuildable.
    pub(crate) fn left_out(&self) -> u64 {
        let storages =
            std::iter::once(&self.storage).chain(self.contexts.iter().map(|c| &c.storage));
        let pages = self.page_parts();
        self.frames_unread
            + storages
                .flat_map(BTreeMap::values)
                .flat_map(FrameState::parts)
                .map(|p| p.left_out)
                .sum::<u64>()
            + pages.map(|p| p.left_out).sum::<u64>()
    }

    /// Keeps storage captured earlier under keys this capture did not see, per context.
    pub(crate) fn merge_older(&mut self, older: &Checkpoint) {
        merge_storage(&mut self.storage, &older.storage);
        for (i, old) in older.contexts.iter().enumerate() {
            match self.contexts.get_mut(i) {
                Some(context) => merge_storage(&mut context.storage, &old.storage),
                None => self.contexts.push(old.clone()),
            }
        }
    }

    /// Every tab's page state and back/forward list.
    fn page_parts(&self) -> impl Iterator<Item = &Arc<Part>> {
        let own = self.page.iter().chain(&self.history);
        own.chain(
            self.tabs
                .iter()
                .flat_map(|t| t.page.iter().chain(&t.history)),
        )
    }

    /// Every part this checkpoint holds, in every context and tab, page states included.
    pub(crate) fn parts(&self) -> impl Iterator<Item = &Arc<Part>> {
        let pages = self.page_parts();
        std::iter::once(&self.storage)
            .chain(self.contexts.iter().map(|c| &c.storage))
            .chain(self.tabs.iter().map(|t| &t.session))
            .flat_map(BTreeMap::values)
            .flat_map(FrameState::parts)
            .chain(pages)
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
            .field("contexts", &self.contexts.len())
            .field("tabs", &self.tabs.len())
            .field("bytes", &self.bytes())
            .field("left_out", &self.left_out())
            .finish_non_exhaustive()
    }
}

/// Whether `origin` has storage a checkpoint holds: `http` and `https` origins only.
pub(crate) fn is_storable_origin(origin: &str) -> bool {
    origin.starts_with("http://") || origin.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{key, local};
    use super::*;

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
}
