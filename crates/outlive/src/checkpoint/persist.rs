//! A checkpoint as bytes, for a store outside this process (durable runs seal them into
//! PostgreSQL). It is versioned JSON with field names of its own, independent of the wire
//! between the page scripts and outlive, so bytes stored by an earlier outlive still read back.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::time::Instant;
use zeroize::{Zeroize, Zeroizing};

use std::collections::BTreeMap;

use super::model::{Checkpoint, ContextState, FrameState, Part, StorageKey, StoredCookie};
use crate::error::{Error, ErrorKind};

/// A checkpoint as bytes (JSON), for a store outside this process; version 1.
#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Persisted {
    v: u32,
    url: String,
    cookies: Vec<StoredCookie>,
    storage: Vec<PersistedFrame>,
    /// The contexts a client made: absent where there are none (so bytes without any are as
    /// format 1 always wrote them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    contexts: Vec<PersistedContext>,
    frames_unread: u64,
    /// The page's typed fields and scroll positions: absent where there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page: Option<PersistedPart>,
    /// The tab's back/forward list: absent where there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    history: Option<PersistedPart>,
    /// Wall-clock time of the capture, milliseconds since the Unix epoch.
    at_ms: u64,
    progress: Option<String>,
}

#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PersistedContext {
    cookies: Vec<StoredCookie>,
    storage: Vec<PersistedFrame>,
}

#[derive(serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PersistedFrame {
    key: StorageKey,
    local: Option<PersistedPart>,
    session: Option<PersistedPart>,
    idb: Option<PersistedPart>,
    /// Cache Storage and private files: absent where not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caches: Option<PersistedPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    files: Option<PersistedPart>,
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
        let persisted = Persisted {
            v: 1,
            url: self.url.clone(),
            cookies: self.cookies.clone(),
            storage: frames_of(&self.storage),
            contexts: self.contexts.iter().map(PersistedContext::from).collect(),
            frames_unread: self.frames_unread,
            page: self.page.as_deref().map(PersistedPart::from),
            history: self.history.as_deref().map(PersistedPart::from),
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
        Ok(Checkpoint {
            url: p.url.clone(),
            cookies: p.cookies.clone(),
            storage: storage_of(&p.storage),
            contexts: p.contexts.iter().map(ContextState::from).collect(),
            // Tabs are reopened only by `serve`, whose checkpoints are not durable.
            tabs: Vec::new(),
            targets: Vec::new(),
            frames_unread: p.frames_unread,
            page: p.page.as_ref().map(|p| Arc::new(Part::from(p))),
            history: p.history.as_ref().map(|p| Arc::new(Part::from(p))),
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(p.at_ms),
            taken,
            progress: p
                .progress
                .as_ref()
                .map(|s| Arc::new(Zeroizing::new(s.clone()))),
        })
    }
}

impl From<&ContextState> for PersistedContext {
    fn from(c: &ContextState) -> Self {
        PersistedContext {
            cookies: c.cookies.clone(),
            storage: frames_of(&c.storage),
        }
    }
}

impl From<&PersistedContext> for ContextState {
    fn from(c: &PersistedContext) -> Self {
        ContextState {
            cookies: c.cookies.clone(),
            storage: storage_of(&c.storage),
        }
    }
}

impl From<&Part> for PersistedPart {
    fn from(p: &Part) -> Self {
        PersistedPart {
            hash: p.hash.clone(),
            json: p.json.clone(),
            left_out: p.left_out,
        }
    }
}

impl From<&PersistedPart> for Part {
    fn from(p: &PersistedPart) -> Self {
        Part {
            hash: p.hash.clone(),
            json: p.json.clone(),
            left_out: p.left_out,
        }
    }
}

fn frames_of(storage: &BTreeMap<StorageKey, FrameState>) -> Vec<PersistedFrame> {
    let part = |p: &Option<Arc<Part>>| p.as_deref().map(PersistedPart::from);
    storage
        .iter()
        .map(|(key, state)| PersistedFrame {
            key: key.clone(),
            local: part(&state.local),
            session: part(&state.session),
            idb: part(&state.idb),
            caches: part(&state.caches),
            files: part(&state.files),
        })
        .collect()
}

fn storage_of(frames: &[PersistedFrame]) -> BTreeMap<StorageKey, FrameState> {
    let part = |p: &Option<PersistedPart>| p.as_ref().map(|p| Arc::new(Part::from(p)));
    frames
        .iter()
        .map(|f| {
            let state = FrameState {
                local: part(&f.local),
                session: part(&f.session),
                idb: part(&f.idb),
                caches: part(&f.caches),
                files: part(&f.files),
            };
            (f.key.clone(), state)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chromiumoxide::cdp::browser_protocol::network::{
        CookiePartitionKey, CookiePriority, CookieSameSite, CookieSourceScheme,
    };

    use super::*;
    use crate::checkpoint::test_support::{key, part};

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
                caches: part(r#"[["v1",[["https://widget.example/a",200,"OK",[],"eA=="]]]]"#),
                files: part(r#"[["d/",null],["d/f","eA=="]]"#),
            },
        );
        cp.frames_unread = 1;
        cp.progress = Some(Arc::new(Zeroizing::new(r#"{"pages":7}"#.to_owned())));
        let mut context = ContextState {
            cookies: cp.cookies.clone(),
            ..ContextState::default()
        };
        context.storage.insert(
            key("https://shop.example", "https://shop.example"),
            FrameState {
                local: part(r#"[["cart","3"]]"#),
                session: None,
                ..FrameState::default()
            },
        );
        cp.contexts.push(context);
        cp.page = part(r#"{"fields":[["k",0,"typed"]],"scroll":[]}"#);
        cp.history = part(r#"{"entries":[["https://bank.example/a","A"]],"current":0}"#);
        let taken = Instant::now();
        let back = Checkpoint::from_bytes(&cp.to_bytes(), taken).unwrap();
        let page = back.page.as_ref().expect("the page state");
        assert_eq!(page.json, cp.page.as_ref().unwrap().json);
        let history = back.history.as_ref().expect("the back/forward list");
        assert_eq!(history.json, cp.history.as_ref().unwrap().json);
        assert_eq!(back.contexts.len(), 1, "a context the client made");
        assert!(back.contexts[0].cookies == cp.cookies);
        let shop = key("https://shop.example", "https://shop.example");
        assert!(back.contexts[0].storage[&shop].same_as(&cp.contexts[0].storage[&shop]));
        assert_eq!(back.url, cp.url);
        assert!(
            back.cookies == cp.cookies,
            "cookies, partition key included"
        );
        let frame = &back.storage[&key("https://bank.example", "https://widget.example")];
        assert!(frame.same_as(&cp.storage[&key("https://bank.example", "https://widget.example")]));
        assert_eq!(frame.session.as_ref().unwrap().json, r#"[["s","1"]]"#);
        assert_eq!(
            frame.files.as_ref().unwrap().json,
            r#"[["d/",null],["d/f","eA=="]]"#
        );
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

    /// Bytes as format 1 has always written them (durable runs keep them in PostgreSQL) read
    /// back, and write out unchanged: the format has field names of its own, whatever the
    /// page scripts call theirs.
    #[test]
    fn stored_bytes_of_format_1_read_back_unchanged() {
        const STORED: &str = r#"{"v":1,"url":"https://bank.example/account","cookies":[{"name":"aurora_session","value":"s3cr3t","domain":"bank.example","path":"/","expires":1900000000.0,"httpOnly":true,"secure":true,"sameSite":"Strict","priority":"Medium","sourceScheme":"Secure","sourcePort":443,"partitionKey":{"topLevelSite":"https://top.example","hasCrossSiteAncestor":false}}],"storage":[{"key":{"top":"https://bank.example","origin":"https://widget.example"},"local":{"hash":"h11","json":"[[\"k\",\"v\"]]","leftOut":0},"session":null,"idb":{"hash":"i1f","json":"[]","leftOut":2}}],"framesUnread":1,"atMs":1700000000123,"progress":"{\"pages\":7}"}"#;
        let cp = Checkpoint::from_bytes(STORED.as_bytes(), Instant::now()).unwrap();
        assert_eq!(cp.url, "https://bank.example/account");
        assert_eq!(cp.cookies.len(), 1);
        assert_eq!(cp.cookies[0].value, "s3cr3t");
        let frame = &cp.storage[&key("https://bank.example", "https://widget.example")];
        let local = frame.local.as_ref().unwrap();
        assert_eq!(
            (local.hash.as_str(), local.json.as_str()),
            ("h11", r#"[["k","v"]]"#)
        );
        assert!(frame.session.is_none());
        assert_eq!(frame.idb.as_ref().unwrap().left_out, 2);
        assert_eq!(cp.frames_unread, 1);
        assert_eq!(cp.left_out(), 3);
        assert_eq!(
            cp.at.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(
            cp.progress.as_deref().map(|p| p.as_str()),
            Some(r#"{"pages":7}"#)
        );
        assert_eq!(cp.to_bytes().as_slice(), STORED.as_bytes());
    }
}
