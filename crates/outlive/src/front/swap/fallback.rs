//! What the front cannot carry to a new browser, by name (issue 51 design, §3). A client
//! that uses it at a death gets today's behaviour: its connection closed, with the reason in
//! the log and the wide event.
//!
//! Some uses last only while they run (a download, a screencast, a trace, an enabled
//! debugger or interception); others mark the connection for good (a non-flat session, a
//! setter the front does not know).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use super::sticky;
use crate::relay::wire::Head;

/// Why a connection cannot be carried over.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Reason {
    /// Requests paused for the client (`Fetch.enable`, `Network.setRequestInterception`):
    /// Playwright's `route()` and `httpCredentials`.
    Interception(String),
    /// A download in progress.
    Download,
    /// A screencast running (`Page.startScreencast`: Playwright's video).
    Screencast,
    /// A trace running (`Tracing.start`).
    Tracing,
    /// `Debugger`, `Profiler` or `HeapProfiler` enabled: paused scripts, breakpoints and
    /// profiles live in the renderer.
    Debugger(String),
    /// A session the client talks to inside `Target.sendMessageToTarget`.
    NonFlatSession,
    /// `Target.exposeDevToolsProtocol`: a page that speaks CDP itself.
    ExposedProtocol,
    /// A setter the front does not know how to replay.
    UnknownState(String),
    /// A page the client holds was not opened again on the next browser (no checkpoint
    /// named it, or it could not be reopened).
    TabNotReopened,
    /// The client sent more than the front holds while the browser was replaced.
    HoldOverflow,
    /// The next browser did not take the client's state in time.
    SwapTimedOut,
    /// The browser lives and a page of it died: phase 1 carries whole browsers only.
    PageDeath,
    /// Sessions on `tab` targets (Puppeteer's): not carried yet.
    TabTargets,
}

impl Reason {
    /// A short stable name, for the wide event.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Reason::Interception(_) => "interception",
            Reason::Download => "download",
            Reason::Screencast => "screencast",
            Reason::Tracing => "tracing",
            Reason::Debugger(_) => "debugger",
            Reason::NonFlatSession => "non_flat_session",
            Reason::ExposedProtocol => "exposed_protocol",
            Reason::UnknownState(_) => "unknown_state",
            Reason::TabNotReopened => "tab_not_reopened",
            Reason::HoldOverflow => "hold_overflow",
            Reason::SwapTimedOut => "swap_timed_out",
            Reason::PageDeath => "page_death",
            Reason::TabTargets => "tab_targets",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Interception(method) => write!(f, "request interception ({method})"),
            Reason::Download => f.write_str("a download in progress"),
            Reason::Screencast => f.write_str("a screencast (Page.startScreencast)"),
            Reason::Tracing => f.write_str("a trace (Tracing.start)"),
            Reason::Debugger(domain) => write!(f, "{domain} enabled"),
            Reason::NonFlatSession => f.write_str("a non-flat session (flatten: false)"),
            Reason::ExposedProtocol => f.write_str("Target.exposeDevToolsProtocol"),
            Reason::UnknownState(method) => write!(f, "state the front cannot replay ({method})"),
            Reason::TabNotReopened => f.write_str("a page it holds was not reopened"),
            Reason::HoldOverflow => f.write_str("it sent too much while the browser was replaced"),
            Reason::SwapTimedOut => f.write_str("the next browser did not take its state in time"),
            Reason::PageDeath => f.write_str("a page died in a live browser"),
            Reason::TabTargets => f.write_str("sessions on tab targets (Puppeteer's)"),
        }
    }
}

/// What runs while it lasts, per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Running {
    Fetch,
    Interception,
    Screencast,
    Debugger,
    Profiler,
    HeapProfiler,
}

/// The params and event fields the classifier reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Args {
    flatten: Option<bool>,
    auto_attach: Option<bool>,
    patterns: Option<Vec<serde::de::IgnoredAny>>,
    guid: Option<String>,
    state: Option<String>,
}

impl Args {
    fn of(json: Option<&str>) -> Args {
        super::rewrite::read(json)
    }
}

/// One client's uses of what cannot be carried over.
#[derive(Debug, Default)]
pub(super) struct Uncarried {
    /// What runs, by client session (`None`: the browser session).
    running: BTreeMap<(Option<String>, Running), String>,
    /// Downloads begun and not yet over, by guid.
    downloads: BTreeSet<String>,
    tracing: bool,
    /// A use that marks the connection for good.
    lasting: Option<Reason>,
}

impl Uncarried {
    /// A command from the client, as it is sent.
    pub(super) fn command(&mut self, frame: &str) {
        let head = Head::of(frame.as_bytes());
        let Some(method) = head.method.as_deref() else {
            return;
        };
        let session = head.session_id.as_deref();
        let needs_args = matches!(
            method,
            "Target.attachToTarget" | "Target.setAutoAttach" | "Network.setRequestInterception"
        );
        let args = Args::of(if needs_args {
            super::rewrite::member(frame, "params")
        } else {
            None
        });
        let mut run = |what: Running, on: bool| {
            let key = (session.map(str::to_owned), what);
            if on {
                self.running.insert(key, method.to_owned());
            } else {
                self.running.remove(&key);
            }
        };
        match method {
            "Fetch.enable" => run(Running::Fetch, true),
            "Fetch.disable" => run(Running::Fetch, false),
            "Network.setRequestInterception" => {
                let on = args.patterns.is_some_and(|p| !p.is_empty());
                run(Running::Interception, on);
            }
            "Page.startScreencast" => run(Running::Screencast, true),
            "Page.stopScreencast" => run(Running::Screencast, false),
            "Debugger.enable" => run(Running::Debugger, true),
            "Debugger.disable" => run(Running::Debugger, false),
            "Profiler.enable" => run(Running::Profiler, true),
            "Profiler.disable" => run(Running::Profiler, false),
            "HeapProfiler.enable" => run(Running::HeapProfiler, true),
            "HeapProfiler.disable" => run(Running::HeapProfiler, false),
            "Tracing.start" => self.tracing = true,
            "Target.sendMessageToTarget" => self.mark(Reason::NonFlatSession),
            "Target.attachToTarget" if args.flatten != Some(true) => {
                self.mark(Reason::NonFlatSession);
            }
            "Target.setAutoAttach"
                if args.auto_attach == Some(true) && args.flatten != Some(true) =>
            {
                self.mark(Reason::NonFlatSession);
            }
            "Target.exposeDevToolsProtocol" => self.mark(Reason::ExposedProtocol),
            _ if looks_like_setter(method) && !sticky::known(method) => {
                self.mark(Reason::UnknownState(method.to_owned()));
            }
            _ => {}
        }
    }

    /// An event from the browser, in the client's ids.
    pub(super) fn event(&mut self, frame: &str) {
        let head = Head::of(frame.as_bytes());
        let Some(method) = head.method.as_deref() else {
            return;
        };
        match method {
            "Browser.downloadWillBegin" | "Page.downloadWillBegin" => {
                let args = Args::of(super::rewrite::member(frame, "params"));
                self.downloads.extend(args.guid);
            }
            "Browser.downloadProgress" | "Page.downloadProgress" => {
                let args = Args::of(super::rewrite::member(frame, "params"));
                if matches!(args.state.as_deref(), Some("completed" | "canceled")) {
                    if let Some(guid) = args.guid {
                        self.downloads.remove(&guid);
                    }
                }
            }
            "Tracing.tracingComplete" => self.tracing = false,
            _ => {}
        }
    }

    /// Forgets what ran on a client session that is gone.
    pub(super) fn session_gone(&mut self, session: &str) {
        self.running
            .retain(|(s, _), _| s.as_deref() != Some(session));
    }

    /// Why the connection cannot be carried over now, if it cannot.
    pub(super) fn reason(&self) -> Option<Reason> {
        if let Some(lasting) = &self.lasting {
            return Some(lasting.clone());
        }
        if let Some(((_, what), method)) = self.running.iter().next() {
            return Some(match what {
                Running::Fetch | Running::Interception => Reason::Interception(method.clone()),
                Running::Screencast => Reason::Screencast,
                Running::Debugger => Reason::Debugger("Debugger".into()),
                Running::Profiler => Reason::Debugger("Profiler".into()),
                Running::HeapProfiler => Reason::Debugger("HeapProfiler".into()),
            });
        }
        if !self.downloads.is_empty() {
            return Some(Reason::Download);
        }
        self.tracing.then_some(Reason::Tracing)
    }

    /// The first lasting reason stays.
    fn mark(&mut self, reason: Reason) {
        self.lasting.get_or_insert(reason);
    }
}

/// Whether `method` sets state, by its name: `X.enable`, `X.set…`, `X.add…`, `X.grant…`,
/// `X.override…`, `X.emulate…`.
fn looks_like_setter(method: &str) -> bool {
    let name = method.split_once('.').map_or("", |(_, n)| n);
    name == "enable"
        || ["set", "add", "grant", "override", "emulate"]
            .iter()
            .any(|p| {
                name.strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with(char::is_uppercase))
            })
}

#[cfg(test)]
mod tests;
