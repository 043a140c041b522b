//! Checkpoints: cookies, localStorage of every origin touched, and the URL — captured from a
//! live page and restored into a fresh one.
//!
//! A checkpoint is a credential. It lives in memory only, its `Debug` shows sizes and never
//! values, and its strings are zeroed when it is dropped — so are the copies restore makes
//! (the restore documents). The copies inside the CDP commands chromiumoxide serialises and
//! sends are chromiumoxide's and are not zeroed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::dom_storage::{GetDomStorageItemsParams, StorageId};
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, EventRequestPaused, FulfillRequestParams, HeaderEntry, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{
    Cookie, CookieParam, CookiePriority, CookieSameSite, CookieSourceScheme, TimeSinceEpoch,
};
use chromiumoxide::cdp::browser_protocol::page::{FrameTree, GetFrameTreeParams, NavigateParams};
use chromiumoxide::cdp::browser_protocol::storage::{GetCookiesParams, SetCookiesParams};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use futures::StreamExt;
use tokio::time::Instant;
use zeroize::{Zeroize, Zeroizing};

use crate::error::{Error, ErrorKind};
use crate::task::AbortOnDrop;

/// One cookie, as much of it as `Storage.setCookies` can put back.
#[derive(Clone)]
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

/// The part of a page's state that survives a relaunch.
#[derive(Clone)]
pub(crate) struct Checkpoint {
    pub(crate) url: String,
    pub(crate) cookies: Vec<StoredCookie>,
    /// localStorage items per origin (`scheme://host:port`), in insertion order.
    pub(crate) origins: BTreeMap<String, Vec<(String, String)>>,
    /// Wall-clock time the capture started (what `ctx.resumed_from()` reports).
    pub(crate) at: SystemTime,
    /// Monotonic time the capture started (what lost-work accounting uses).
    pub(crate) taken: Instant,
}

impl Checkpoint {
    /// An empty checkpoint at `url`; the fake backends in tests use it.
    #[cfg(test)]
    pub(crate) fn at_url(url: &str, taken: Instant) -> Self {
        Checkpoint {
            url: url.to_owned(),
            cookies: Vec::new(),
            origins: BTreeMap::new(),
            at: SystemTime::now(),
            taken,
        }
    }

    /// Approximate size of the secret material, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.url.len()
            + self.cookies.iter().map(StoredCookie::bytes).sum::<usize>()
            + self
                .origins
                .iter()
                .map(|(o, items)| {
                    o.len() + items.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
                })
                .sum::<usize>()
    }

    /// Keeps origins captured earlier that this capture did not see.
    pub(crate) fn merge_older(&mut self, older: &Checkpoint) {
        for (origin, items) in &older.origins {
            self.origins
                .entry(origin.clone())
                .or_insert_with(|| items.clone());
        }
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        self.url.zeroize();
        for items in self.origins.values_mut() {
            for (k, v) in items.iter_mut() {
                k.zeroize();
                v.zeroize();
            }
        }
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoint")
            .field("cookies", &self.cookies.len())
            .field("origins", &self.origins.len())
            .field("items", &self.origins.values().map(Vec::len).sum::<usize>())
            .field("bytes", &self.bytes())
            .finish_non_exhaustive()
    }
}

/// What the page's own script reports: URL, origin and that origin's localStorage.
#[derive(serde::Deserialize)]
struct TopFrameState {
    url: String,
    origin: String,
    items: Option<Vec<(String, String)>>,
}

const TOP_FRAME_STATE: &str = r#"(() => {
  let items = [];
  try {
    const s = window.localStorage;
    for (let i = 0; i < s.length; i++) { const k = s.key(i); items.push([k, s.getItem(k)]); }
  } catch (e) { items = null; }
  return { url: location.href, origin: location.origin, items };
})()"#;

fn cdp_error(what: &str, e: chromiumoxide::error::CdpError) -> Error {
    Error::new(ErrorKind::Cdp, format!("{what} failed")).with_source(e)
}

fn is_storable_origin(origin: &str) -> bool {
    origin.starts_with("http://") || origin.starts_with("https://")
}

/// Captures a checkpoint from `page`. The three reads go out together, so a capture costs
/// about one round trip; origins of cross-origin iframes add one more, also concurrent.
pub(crate) async fn capture(page: &Page) -> Result<Checkpoint, Error> {
    let taken = Instant::now();
    let at = SystemTime::now();
    let eval = EvaluateParams::builder()
        .expression(TOP_FRAME_STATE)
        .return_by_value(true)
        .build()
        .map_err(|e| Error::new(ErrorKind::Cdp, format!("building the capture script: {e}")))?;
    let ((cookies, t1), (top, t2), (frames, t3)) = futures::join!(
        async {
            let r = page.execute(GetCookiesParams::default()).await;
            (r, taken.elapsed())
        },
        async {
            let r = page.evaluate_expression(eval).await;
            (r, taken.elapsed())
        },
        async {
            let r = page.execute(GetFrameTreeParams::default()).await;
            (r, taken.elapsed())
        },
    );
    tracing::trace!(?t1, ?t2, ?t3, "capture round trips");
    let cookies = cookies
        .map_err(|e| cdp_error("Storage.getCookies", e))?
        .result
        .cookies;
    let top: TopFrameState = top
        .map_err(|e| cdp_error("reading the page's URL and localStorage", e))?
        .into_value()
        .map_err(|e| {
            Error::new(
                ErrorKind::Cdp,
                "decoding the page's URL and localStorage failed",
            )
            .with_source(e)
        })?;

    let mut origins = BTreeMap::new();
    if let (true, Some(items)) = (is_storable_origin(&top.origin), top.items) {
        origins.insert(top.origin.clone(), items);
    }

    // Cross-origin iframes: their storage is read through DOMStorage, all at once.
    if let Ok(frames) = frames {
        let mut others = Vec::new();
        collect_origins(&frames.result.frame_tree, &mut others);
        others.retain(|o| is_storable_origin(o) && !origins.contains_key(o));
        others.dedup();
        let reads = others.into_iter().map(|origin| async move {
            let id = StorageId::builder()
                .security_origin(origin.clone())
                .is_local_storage(true)
                .build()
                .ok()?;
            let r = page.execute(GetDomStorageItemsParams::new(id)).await.ok()?;
            let items = r
                .result
                .entries
                .iter()
                .filter_map(|item| match item.inner().as_slice() {
                    [k, v] => Some((k.clone(), v.clone())),
                    _ => None,
                })
                .collect::<Vec<_>>();
            Some((origin, items))
        });
        for (origin, items) in futures::future::join_all(reads).await.into_iter().flatten() {
            origins.entry(origin).or_insert(items);
        }
    }

    Ok(Checkpoint {
        url: top.url,
        cookies: cookies.into_iter().map(StoredCookie::from).collect(),
        origins,
        at,
        taken,
    })
}

fn collect_origins(tree: &FrameTree, out: &mut Vec<String>) {
    out.push(tree.frame.security_origin.clone());
    for child in tree.child_frames.iter().flatten() {
        collect_origins(child, out);
    }
}

/// A blank document whose inline script writes `items` into its origin's localStorage.
fn restore_document(items: &[(String, String)]) -> Zeroizing<String> {
    let json = Zeroizing::new(serde_json::to_string(items).expect("strings serialise"));
    // Keep the data inside the <script> element whatever it contains.
    let step = Zeroizing::new(json.replace("</", "<\\/"));
    let data = Zeroizing::new(step.replace("<!--", "<\\!--"));
    let data = data.as_str();
    Zeroizing::new(format!(
        "<!doctype html><title>outlive restore</title><link rel=\"icon\" href=\"data:,\"><script>(function(){{var d={data};\
         localStorage.clear();for(var i=0;i<d.length;i++){{localStorage.setItem(d[i][0],d[i][1]);}}}})()</script>"
    ))
}

/// Puts cookies and every origin's localStorage into a fresh page, before any request
/// reaches a real site: each origin is loaded with every request intercepted
/// (`Fetch.enable`) and answered with a blank document whose inline script writes the items.
/// The page is left on the last origin's blank document; the caller navigates to the URL.
pub(crate) async fn restore(page: &Page, checkpoint: &Checkpoint) -> Result<(), Error> {
    if !checkpoint.cookies.is_empty() {
        let cookies = checkpoint
            .cookies
            .iter()
            .map(StoredCookie::to_param)
            .collect::<Vec<_>>();
        page.execute(SetCookiesParams::new(cookies))
            .await
            .map_err(|e| cdp_error("Storage.setCookies", e))?;
    }
    let origins: Vec<_> = checkpoint
        .origins
        .iter()
        .filter(|(o, items)| is_storable_origin(o) && !items.is_empty())
        .collect();
    if origins.is_empty() {
        return Ok(());
    }

    let mut paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| cdp_error("listening for Fetch.requestPaused", e))?;
    // Copies of the values: zeroed when restore returns, like the checkpoint itself.
    let documents: BTreeMap<String, Zeroizing<String>> = origins
        .iter()
        .map(|(o, items)| ((*o).clone(), restore_document(items)))
        .collect();
    let responder_page = page.clone();
    // Answers every paused request; owned, so it stops when restore returns.
    let _responder = AbortOnDrop(crate::quiet::spawn(async move {
        while let Some(event) = paused.next().await {
            let origin = url::Url::parse(&event.request.url)
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default();
            let body = documents.get(&origin).cloned().unwrap_or_default();
            let fulfil = FulfillRequestParams::builder()
                .request_id(event.request_id.clone())
                .response_code(200)
                .response_header(HeaderEntry::new("Content-Type", "text/html; charset=utf-8"))
                .response_header(HeaderEntry::new("Cache-Control", "no-store"))
                .body(BASE64.encode(body.as_bytes()))
                .build();
            if let Ok(fulfil) = fulfil {
                let _ = responder_page.execute(fulfil).await;
            }
        }
    }));

    let pattern = RequestPattern::builder()
        .url_pattern("*")
        .request_stage(RequestStage::Request)
        .build();
    page.execute(fetch::EnableParams::builder().pattern(pattern).build())
        .await
        .map_err(|e| cdp_error("Fetch.enable", e))?;
    let mut result = Ok(());
    for (origin, _) in &origins {
        let nav = NavigateParams::new(format!("{origin}/__outlive_restore"));
        if let Err(e) = page.goto(nav).await {
            result = Err(cdp_error(
                "loading an origin to restore its localStorage",
                e,
            ));
            break;
        }
    }
    let disabled = page.execute(fetch::DisableParams::default()).await;
    result?;
    disabled.map_err(|e| cdp_error("Fetch.disable", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_document_cannot_be_broken_out_of() {
        let doc = restore_document(&[("k".into(), "</script><script>alert(1)</script>".into())]);
        assert_eq!(doc.matches("</script>").count(), 1, "{}", doc.as_str());
    }

    #[test]
    fn debug_shows_sizes_never_values() {
        let mut cp = Checkpoint::at_url(
            "https://bank.example/account?sid=SECRET-URL",
            Instant::now(),
        );
        cp.origins.insert(
            "https://bank.example".into(),
            vec![("token".into(), "SECRET-ITEM".into())],
        );
        let debug = format!("{cp:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
        assert!(debug.contains("bytes"));
    }

    #[test]
    fn merge_keeps_origins_only_the_older_checkpoint_saw() {
        let now = Instant::now();
        let mut older = Checkpoint::at_url("https://a.example/", now);
        older
            .origins
            .insert("https://a.example".into(), vec![("k".into(), "old".into())]);
        older
            .origins
            .insert("https://b.example".into(), vec![("k".into(), "b".into())]);
        let mut newer = Checkpoint::at_url("https://a.example/", now);
        newer
            .origins
            .insert("https://a.example".into(), vec![("k".into(), "new".into())]);
        newer.merge_older(&older);
        assert_eq!(newer.origins["https://a.example"][0].1, "new");
        assert_eq!(newer.origins["https://b.example"][0].1, "b");
    }
}
