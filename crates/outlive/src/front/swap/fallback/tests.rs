//! Each reason, named, from the frames that cause and end it.

use super::*;

fn send(u: &mut Uncarried, session: Option<&str>, method: &str, params: &str) {
    let session = session.map_or(String::new(), |s| format!(r#","sessionId":"{s}""#));
    u.command(&format!(
        r#"{{"id":1,"method":"{method}","params":{params}{session}}}"#
    ));
}

fn hear(u: &mut Uncarried, method: &str, params: &str) {
    u.event(&format!(r#"{{"method":"{method}","params":{params}}}"#));
}

#[test]
fn playwrights_usual_commands_are_carried() {
    let mut u = Uncarried::default();
    let attach = r#"{"autoAttach":true,"waitForDebuggerOnStart":true,"flatten":true}"#;
    send(&mut u, None, "Target.setAutoAttach", attach);
    send(
        &mut u,
        None,
        "Browser.setDownloadBehavior",
        r#"{"behavior":"allowAndName","downloadPath":"/t","eventsEnabled":true}"#,
    );
    for method in [
        "Page.enable",
        "Page.getFrameTree",
        "Log.enable",
        "Page.setLifecycleEventsEnabled",
        "Runtime.enable",
        "Page.addScriptToEvaluateOnNewDocument",
        "Network.enable",
        "Emulation.setFocusEmulationEnabled",
        "Emulation.setDeviceMetricsOverride",
        "Page.createIsolatedWorld",
        "Runtime.runIfWaitingForDebugger",
        "Runtime.evaluate",
        "DOM.setFileInputFiles",
        "Input.dispatchMouseEvent",
    ] {
        send(&mut u, Some("S1"), method, "{}");
    }
    send(&mut u, Some("S1"), "Target.setAutoAttach", attach);
    assert_eq!(u.reason(), None);
}

#[test]
fn interception_lasts_until_disabled() {
    let mut u = Uncarried::default();
    send(
        &mut u,
        Some("S1"),
        "Fetch.enable",
        r#"{"patterns":[{"urlPattern":"*"}]}"#,
    );
    let reason = u.reason().expect("intercepting");
    assert_eq!(reason.name(), "interception");
    assert_eq!(reason.to_string(), "request interception (Fetch.enable)");
    send(&mut u, Some("S1"), "Fetch.disable", "{}");
    assert_eq!(u.reason(), None);
    send(
        &mut u,
        Some("S1"),
        "Network.setRequestInterception",
        r#"{"patterns":[{}]}"#,
    );
    assert_eq!(u.reason().map(|r| r.name()), Some("interception"));
    send(
        &mut u,
        Some("S1"),
        "Network.setRequestInterception",
        r#"{"patterns":[]}"#,
    );
    assert_eq!(u.reason(), None);
    send(&mut u, Some("S2"), "Fetch.enable", "{}");
    u.session_gone("S2");
    assert_eq!(u.reason(), None, "its session is gone");
}

#[test]
fn a_download_lasts_until_it_is_over() {
    let mut u = Uncarried::default();
    hear(
        &mut u,
        "Browser.downloadWillBegin",
        r#"{"frameId":"F","guid":"g1","url":"https://x/a.pdf","suggestedFilename":"a.pdf"}"#,
    );
    hear(
        &mut u,
        "Browser.downloadWillBegin",
        r#"{"frameId":"F","guid":"g2","url":"https://x/b.pdf","suggestedFilename":"b.pdf"}"#,
    );
    hear(
        &mut u,
        "Browser.downloadProgress",
        r#"{"guid":"g1","totalBytes":9,"receivedBytes":9,"state":"completed"}"#,
    );
    assert_eq!(u.reason(), Some(Reason::Download));
    hear(
        &mut u,
        "Browser.downloadProgress",
        r#"{"guid":"g2","totalBytes":9,"receivedBytes":3,"state":"inProgress"}"#,
    );
    assert_eq!(u.reason(), Some(Reason::Download));
    hear(
        &mut u,
        "Browser.downloadProgress",
        r#"{"guid":"g2","totalBytes":9,"receivedBytes":3,"state":"canceled"}"#,
    );
    assert_eq!(u.reason(), None);
}

#[test]
fn screencasts_traces_and_debuggers_while_they_run() {
    let mut u = Uncarried::default();
    send(
        &mut u,
        Some("S1"),
        "Page.startScreencast",
        r#"{"format":"jpeg"}"#,
    );
    assert_eq!(u.reason(), Some(Reason::Screencast));
    send(&mut u, Some("S1"), "Page.stopScreencast", "{}");
    send(&mut u, None, "Tracing.start", "{}");
    send(&mut u, None, "Tracing.end", "{}");
    assert_eq!(
        u.reason(),
        Some(Reason::Tracing),
        "until the trace is complete"
    );
    hear(
        &mut u,
        "Tracing.tracingComplete",
        r#"{"dataLossOccurred":false}"#,
    );
    assert_eq!(u.reason(), None);
    send(&mut u, Some("S1"), "Profiler.enable", "{}");
    assert_eq!(
        u.reason().map(|r| r.to_string()).as_deref(),
        Some("Profiler enabled")
    );
    send(&mut u, Some("S1"), "Profiler.disable", "{}");
    assert_eq!(u.reason(), None);
}

#[test]
fn lasting_reasons_stay() {
    let mut u = Uncarried::default();
    send(&mut u, None, "Target.attachToTarget", r#"{"targetId":"T"}"#);
    assert_eq!(u.reason(), Some(Reason::NonFlatSession));
    send(
        &mut u,
        None,
        "Page.setAdBlockingEnabled",
        r#"{"enabled":true}"#,
    );
    assert_eq!(u.reason(), Some(Reason::NonFlatSession), "the first reason");

    let mut u = Uncarried::default();
    send(
        &mut u,
        Some("S1"),
        "Page.setAdBlockingEnabled",
        r#"{"enabled":true}"#,
    );
    let reason = u.reason().expect("unknown state");
    assert_eq!(reason.name(), "unknown_state");
    assert_eq!(
        reason.to_string(),
        "state the front cannot replay (Page.setAdBlockingEnabled)"
    );

    let mut u = Uncarried::default();
    send(
        &mut u,
        None,
        "Target.setAutoAttach",
        r#"{"autoAttach":true,"waitForDebuggerOnStart":false}"#,
    );
    assert_eq!(u.reason(), Some(Reason::NonFlatSession));
    let mut u = Uncarried::default();
    send(
        &mut u,
        None,
        "Target.exposeDevToolsProtocol",
        r#"{"targetId":"T"}"#,
    );
    assert_eq!(u.reason().map(|r| r.name()), Some("exposed_protocol"));
}

#[test]
fn setters_by_name() {
    for m in [
        "Page.enable",
        "Emulation.setLocaleOverride",
        "Runtime.addBinding",
        "Browser.grantPermissions",
        "Network.emulateNetworkConditions",
        "Page.overrideFoo",
    ] {
        assert!(looks_like_setter(m), "{m}");
    }
    for m in [
        "Page.navigate",
        "Runtime.evaluate",
        "Page.settle",
        "Page.address",
        "Target.getTargets",
        "enable",
    ] {
        assert!(!looks_like_setter(m), "{m}");
    }
}
