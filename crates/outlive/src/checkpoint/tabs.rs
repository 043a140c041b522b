//! A checkpoint of the whole browser a foreign client uses: every tab of the default context
//! and of the contexts it made, read on outlive's own connection. Each tab is captured as a
//! page; a context's tabs are merged into its storage. The tab the client used last gives the
//! URL to resume at and the sessionStorage (which belongs to one tab).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::storage::GetCookiesParams;
use chromiumoxide::cdp::browser_protocol::target::GetTargetsParams;
use chromiumoxide::{Browser, Page};

use super::cache::PartCache;
use super::capture::{CaptureOptions, Cookies, WarmUp, capture_page};
use super::idb::Tracking;
use super::model::{Checkpoint, ContextState, FrameState, StorageKey, StoredCookie, TabState};
use crate::error::Error;
use crate::front::usage::Usage;
use crate::relay::Calls;
use crate::sync::lock;

/// The per-session state of the client's tabs: change tracking and the warm-up belong to a
/// page session, so each tab keeps its own between captures.
#[derive(Default)]
pub(crate) struct Tabs(Mutex<HashMap<String, Tab>>);

#[derive(Clone)]
struct Tab {
    tracking: Arc<Tracking>,
    warm: Arc<WarmUp>,
}

impl Tabs {
    /// The state of `page`'s session, made beside `own` (one stale wake-up for all) if new.
    fn of(&self, page: &Page, own: &Tracking) -> Tab {
        let mut tabs = lock(&self.0);
        let session = page.session_id().as_ref().to_owned();
        tabs.entry(session)
            .or_insert_with(|| Tab {
                tracking: Arc::new(own.beside()),
                warm: Arc::default(),
            })
            .clone()
    }

    /// Forgets the sessions of tabs no longer there.
    fn keep(&self, pages: &[Page]) {
        let mut tabs = lock(&self.0);
        tabs.retain(|session, _| pages.iter().any(|p| p.session_id().as_ref() == session));
    }
}

/// What a capture of the whole browser reads through.
pub(crate) struct Browsing<'a> {
    pub(crate) browser: &'a Browser,
    /// The task's own page: its capture failing fails the checkpoint, as for a Rust task.
    pub(crate) own: &'a Page,
    pub(crate) own_tracking: &'a Tracking,
    pub(crate) tabs: &'a Tabs,
    pub(crate) calls: &'a Calls,
    pub(crate) cache: &'a PartCache,
    pub(crate) usage: &'a Usage,
    /// The browser's endpoint: which browser's tab order is this one's.
    pub(crate) endpoint: Option<&'a str>,
}

/// One tab's capture, with its target and context.
struct Read {
    target: String,
    context: Option<String>,
    checkpoint: Checkpoint,
}

/// Captures every tab of the browser (see the module doc), the client's tabs beside the task's
/// page. A tab other than the task's page that does not answer within the frame timeout is
/// counted unread; what it held before stays through the run's merge with the older checkpoint.
pub(crate) async fn capture_tabs(
    at: Browsing<'_>,
    options: CaptureOptions,
) -> Result<Checkpoint, Error> {
    let made = at.usage.contexts();
    let pages: Vec<Page> = at
        .browser
        .pages()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.target_id() != at.own.target_id())
        .collect();
    at.tabs.keep(&pages);
    if let Some(endpoint) = at.endpoint {
        let alive: Vec<&str> = pages.iter().map(|p| p.target_id().as_ref()).collect();
        let own = at.own.target_id().as_ref();
        at.usage
            .tabs_alive(endpoint, &[alive.as_slice(), &[own]].concat());
    }
    let (targets, own, reads, cookies) = futures::join!(
        at.browser.execute(GetTargetsParams::default()),
        capture_page(
            at.own,
            at.calls,
            at.cache,
            at.own_tracking,
            options,
            Cookies::Read
        ),
        futures::future::join_all(pages.iter().map(|p| read_tab(&at, p, options))),
        futures::future::join_all(made.iter().map(|id| context_cookies(at.browser, id))),
    );
    let own = own?;
    let order = at
        .endpoint
        .map(|e| at.usage.tab_order(e))
        .unwrap_or_default();
    let contexts: HashMap<String, Option<String>> = targets
        .map(|t| t.result.target_infos)
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            (
                t.target_id.as_ref().to_owned(),
                t.browser_context_id.map(|c| c.as_ref().to_owned()),
            )
        })
        .collect();
    let read = |target: &str, checkpoint| Read {
        target: target.to_owned(),
        context: contexts.get(target).cloned().flatten(),
        checkpoint,
    };
    let mut tabs = vec![read(at.own.target_id().as_ref(), own)];
    let mut unread = 0;
    for (page, checkpoint) in pages.iter().zip(reads) {
        match checkpoint {
            Some(checkpoint) => tabs.push(read(page.target_id().as_ref(), checkpoint)),
            None => unread += 1,
        }
    }
    // The client's order; tabs outlive does not know of (opened by a page) last.
    let rank = |t: &str| order.iter().position(|o| o == t).unwrap_or(usize::MAX);
    tabs[1..].sort_by_key(|r| rank(&r.target));
    // A restore that reopens tabs resumes in the default context: the task's page is there.
    let last = at.usage.last_tab();
    let last = match at.usage.reopens_tabs() {
        true => last.filter(|t| default_context(&tabs, t)),
        false => last,
    };
    let mut checkpoint = assemble(tabs, last, &made, cookies);
    checkpoint.frames_unread += unread;
    at.cache.remember(&checkpoint);
    Ok(checkpoint)
}

/// Whether `target` is among `tabs` in the task page's (the default) context.
fn default_context(tabs: &[Read], target: &str) -> bool {
    let default = &tabs[0].context;
    tabs.iter()
        .any(|r| r.target == target && r.context == *default)
}

/// One of the client's tabs, within the frame timeout; `None` if it could not be read.
async fn read_tab(at: &Browsing<'_>, page: &Page, options: CaptureOptions) -> Option<Checkpoint> {
    let tab = at.tabs.of(page, at.own_tracking);
    let read = async {
        let (checkpoint, ()) = futures::join!(
            capture_page(
                page,
                at.calls,
                at.cache,
                &tab.tracking,
                options,
                Cookies::LeaveToOwnPage
            ),
            tab.warm.arm(page, at.calls, options.page_state),
        );
        checkpoint
    };
    match tokio::time::timeout(options.frame_timeout, read).await {
        Ok(Ok(checkpoint)) => Some(checkpoint),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a tab could not be read; counted unread");
            None
        }
        Err(_) => {
            tracing::debug!("a tab did not answer in time; counted unread");
            None
        }
    }
}

/// The cookies of a context the client made (`Storage.getCookies` on a page session answers
/// the default context's).
async fn context_cookies(browser: &Browser, id: &str) -> Vec<StoredCookie> {
    let params = GetCookiesParams {
        browser_context_id: Some(BrowserContextId::new(id)),
    };
    match browser.execute(params).await {
        Ok(r) => r
            .result
            .cookies
            .into_iter()
            .map(StoredCookie::from)
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "reading a context's cookies failed");
            Vec::new()
        }
    }
}

/// Merges the tabs' reads (the task's page first, the rest in the client's order) into one
/// checkpoint. The default context's storage comes from every tab in it, each made context's
/// from its own. sessionStorage and the URL come from the tab the client used last (else the
/// task's page). The other tabs are kept with their URL, sessionStorage and context.
fn assemble(
    mut tabs: Vec<Read>,
    last_tab: Option<String>,
    made: &[String],
    made_cookies: Vec<Vec<StoredCookie>>,
) -> Checkpoint {
    let focus = last_tab
        .and_then(|t| tabs.iter().position(|r| r.target == t))
        .unwrap_or(0);
    let default = tabs[0].context.clone();
    let url = tabs[focus].checkpoint.url.clone();
    let frames_unread = tabs.iter().map(|r| r.checkpoint.frames_unread).sum();
    // The focused tab first: its read of a key wins, sessionStorage included.
    let focused = tabs.remove(focus);
    let page = focused.checkpoint.page.clone();
    let history = focused.checkpoint.history.clone();
    let order = std::iter::once((true, &focused)).chain(tabs.iter().map(|r| (false, r)));
    let mut storage = BTreeMap::new();
    let mut others = Vec::new();
    let mut targets = vec![focused.target.clone()];
    let mut contexts: Vec<ContextState> = made_cookies
        .into_iter()
        .map(|cookies| ContextState {
            cookies,
            storage: BTreeMap::new(),
        })
        .collect();
    for (is_focus, read) in order {
        let into = match &read.context {
            c if *c == default => {
                if !is_focus {
                    others.push(tab_state(&read.checkpoint, None));
                    targets.push(read.target.clone());
                }
                &mut storage
            }
            Some(c) => match made.iter().position(|m| m == c) {
                Some(i) => {
                    if !is_focus {
                        others.push(tab_state(&read.checkpoint, Some(i)));
                        targets.push(read.target.clone());
                    }
                    &mut contexts[i].storage
                }
                None => continue, // a context the client did not make (another client's)
            },
            None => continue,
        };
        add(into, &read.checkpoint.storage, is_focus);
    }
    let mut checkpoint = if focus == 0 {
        focused.checkpoint
    } else {
        tabs.swap_remove(0).checkpoint
    };
    // The task's page read the default context's cookies (and the capture's times).
    checkpoint.url = url;
    checkpoint.page = page;
    checkpoint.history = history;
    checkpoint.frames_unread = frames_unread;
    checkpoint.storage = storage;
    checkpoint.contexts = contexts;
    checkpoint.tabs = others;
    checkpoint.targets = targets;
    checkpoint
}

/// A tab's URL, sessionStorage, page state and back/forward list.
fn tab_state(read: &Checkpoint, context: Option<usize>) -> TabState {
    let session = read
        .storage
        .iter()
        .filter_map(|(key, state)| {
            let session = state.session.clone()?;
            let state = FrameState {
                session: Some(session),
                ..FrameState::default()
            };
            Some((key.clone(), state))
        })
        .collect();
    TabState {
        url: read.url.clone(),
        session,
        page: read.page.clone(),
        history: read.history.clone(),
        context,
    }
}

/// Adds a tab's storage to a context's: keys already there stay; sessionStorage only from the
/// focused tab.
fn add(
    into: &mut BTreeMap<StorageKey, FrameState>,
    from: &BTreeMap<StorageKey, FrameState>,
    focus: bool,
) {
    for (key, state) in from {
        into.entry(key.clone()).or_insert_with(|| FrameState {
            session: if focus { state.session.clone() } else { None },
            ..state.clone()
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::super::test_support::{key, part};
    use super::*;

    /// A tab at `url` in `context` holding `origin`'s localStorage and sessionStorage.
    fn tab(target: &str, context: &str, url: &str, origin: &str) -> Read {
        let mut checkpoint = Checkpoint::at_url(url, Instant::now());
        let state = FrameState {
            local: part(&format!(r#"[["l","{target}"]]"#)),
            session: part(&format!(r#"[["s","{target}"]]"#)),
            ..FrameState::default()
        };
        checkpoint.storage.insert(key(origin, origin), state);
        checkpoint.page = part(&format!(r#"{{"fields":[["k",0,"{target}"]]}}"#));
        checkpoint.frames_unread = 1;
        Read {
            target: target.into(),
            context: Some(context.into()),
            checkpoint,
        }
    }

    fn json(p: &Option<Arc<crate::checkpoint::model::Part>>) -> Option<&str> {
        p.as_ref().map(|p| p.json.as_str())
    }

    #[test]
    fn the_tab_used_last_gives_the_url_and_the_session_storage() {
        let tabs = vec![
            tab("own", "D", "https://a.example/", "https://a.example"),
            tab("t2", "D", "https://b.example/x", "https://b.example"),
            tab("t3", "D", "https://a.example/y", "https://a.example"),
        ];
        let cp = assemble(tabs, Some("t3".into()), &[], Vec::new());
        assert_eq!(cp.url, "https://a.example/y");
        assert_eq!(cp.frames_unread, 3);
        let a = &cp.storage[&key("https://a.example", "https://a.example")];
        assert_eq!(
            json(&a.session),
            Some(r#"[["s","t3"]]"#),
            "the focused tab's"
        );
        assert_eq!(json(&a.local), Some(r#"[["l","t3"]]"#));
        let b = &cp.storage[&key("https://b.example", "https://b.example")];
        assert_eq!(
            json(&b.local),
            Some(r#"[["l","t2"]]"#),
            "every tab's origins"
        );
        assert!(b.session.is_none(), "no other tab's sessionStorage");
        // The other tabs, in order, each with its URL and its own sessionStorage only.
        let urls: Vec<_> = cp.tabs.iter().map(|t| t.url.as_str()).collect();
        assert_eq!(urls, ["https://a.example/", "https://b.example/x"]);
        let own = &cp.tabs[0].session[&key("https://a.example", "https://a.example")];
        assert_eq!(json(&own.session), Some(r#"[["s","own"]]"#));
        assert!(own.local.is_none());
        assert_eq!(cp.tabs[1].session.len(), 1);
        // Each tab's typed fields go with it: the focused tab's with the URL it resumes at.
        assert!(json(&cp.page).unwrap().contains("t3"));
        let pages: Vec<_> = cp.tabs.iter().map(|t| json(&t.page).unwrap()).collect();
        assert!(pages[0].contains("own") && pages[1].contains("t2"));
    }

    #[test]
    fn each_context_the_client_made_keeps_its_own_storage() {
        let tabs = vec![
            tab("own", "D", "about:blank", "https://a.example"),
            tab("t2", "C2", "https://c.example/", "https://c.example"),
            tab("t3", "C1", "https://b.example/", "https://b.example"),
            tab("t4", "X", "https://x.example/", "https://x.example"),
        ];
        let made = ["C1".to_owned(), "C2".to_owned()];
        let cp = assemble(tabs, Some("t2".into()), &made, vec![Vec::new(), Vec::new()]);
        assert_eq!(cp.url, "https://c.example/");
        assert_eq!(
            cp.storage.len(),
            1,
            "the default context: the task's page only"
        );
        assert_eq!(cp.contexts.len(), 2);
        let c1 = &cp.contexts[0].storage;
        assert!(c1.contains_key(&key("https://b.example", "https://b.example")));
        let c2 = &cp.contexts[1].storage[&key("https://c.example", "https://c.example")];
        assert_eq!(json(&c2.session), Some(r#"[["s","t2"]]"#));
        // The task's page (the default context's other tab), then t3 in the first context
        // made; never another client's.
        let contexts: Vec<_> = cp.tabs.iter().map(|t| t.context).collect();
        assert_eq!(contexts, [None, Some(0)]);
        assert_eq!(cp.targets, ["t2", "own", "t3"]);
        let all: Vec<_> = cp.contexts.iter().flat_map(|c| c.storage.keys()).collect();
        assert!(
            !all.contains(&&key("https://x.example", "https://x.example")),
            "another client's context"
        );
    }

    #[test]
    fn with_no_tab_used_the_task_page_is_the_focus() {
        let tabs = vec![
            tab("own", "D", "https://a.example/", "https://a.example"),
            tab("t2", "D", "https://b.example/", "https://b.example"),
        ];
        let cp = assemble(tabs, Some("gone".into()), &[], Vec::new());
        assert_eq!(cp.url, "https://a.example/");
        let a = &cp.storage[&key("https://a.example", "https://a.example")];
        assert!(a.session.is_some());
    }
}
