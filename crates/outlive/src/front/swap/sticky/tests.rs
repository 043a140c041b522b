//! The latest-value rule and the replay order, on commands as Playwright sends them.

use super::*;

/// Records `command` (method and params, on `session`) as answered with `result`.
fn ok(sticky: &mut Sticky, session: Option<&str>, method: &str, params: &str, result: &str) {
    let session = session.map_or(String::new(), |s| format!(r#","sessionId":"{s}""#));
    let command = format!(r#"{{"id":1,"method":"{method}","params":{params}{session}}}"#);
    let reply = format!(r#"{{"id":1,"result":{result}{session}}}"#);
    sticky.answered(&command, &reply);
}

fn methods<'s>(replay: &[Replay<'s>]) -> Vec<&'s str> {
    replay.iter().map(|r| r.method).collect()
}

const S: Option<&str> = Some("S1");

#[test]
fn a_page_session_replays_its_latest_state_in_order() {
    let mut sticky = Sticky::default();
    ok(&mut sticky, S, "Page.enable", "{}", "{}");
    ok(
        &mut sticky,
        S,
        "Page.getFrameTree",
        "{}",
        r#"{"frameTree":{}}"#,
    );
    ok(
        &mut sticky,
        S,
        "Page.setLifecycleEventsEnabled",
        r#"{"enabled":true}"#,
        "{}",
    );
    ok(&mut sticky, S, "Runtime.enable", "{}", "{}");
    let utility = r#"{"source":"","worldName":"__playwright_utility_world_page@1"}"#;
    ok(
        &mut sticky,
        S,
        "Page.addScriptToEvaluateOnNewDocument",
        utility,
        r#"{"identifier":"1"}"#,
    );
    ok(
        &mut sticky,
        S,
        "Emulation.setDeviceMetricsOverride",
        r#"{"width":1,"height":1}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Network.enable",
        r#"{"maxPostDataSize":0}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Target.setAutoAttach",
        r#"{"autoAttach":true,"flatten":true}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Page.addScriptToEvaluateOnNewDocument",
        r#"{"source":"a"}"#,
        r#"{"identifier":"2"}"#,
    );
    ok(
        &mut sticky,
        S,
        "Emulation.setDeviceMetricsOverride",
        r#"{"width":2,"height":2}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Runtime.runIfWaitingForDebugger",
        "{}",
        "{}",
    );
    let replay = sticky.replay(S);
    assert_eq!(
        methods(&replay),
        [
            "Page.enable",
            "Page.setLifecycleEventsEnabled",
            "Runtime.enable",
            "Page.addScriptToEvaluateOnNewDocument",
            "Network.enable",
            "Target.setAutoAttach",
            "Page.addScriptToEvaluateOnNewDocument",
            "Emulation.setDeviceMetricsOverride",
        ]
    );
    assert_eq!(replay[3].params, utility);
    assert_eq!(replay[3].script, Some("1"));
    assert_eq!(replay[6].script, Some("2"));
    assert_eq!(
        replay[4].params, r#"{"maxPostDataSize":0}"#,
        "enable with its params"
    );
    assert_eq!(
        replay[7].params, r#"{"width":2,"height":2}"#,
        "the latest value"
    );
    assert!(sticky.replay(Some("S2")).is_empty(), "per session");
}

#[test]
fn removing_disabling_and_clearing_forget() {
    let mut sticky = Sticky::default();
    ok(&mut sticky, S, "Page.enable", "{}", "{}");
    ok(&mut sticky, S, "Log.enable", "{}", "{}");
    ok(
        &mut sticky,
        S,
        "Page.addScriptToEvaluateOnNewDocument",
        r#"{"source":"a"}"#,
        r#"{"identifier":"1"}"#,
    );
    ok(
        &mut sticky,
        S,
        "Page.addScriptToEvaluateOnNewDocument",
        r#"{"source":"b"}"#,
        r#"{"identifier":"2"}"#,
    );
    ok(
        &mut sticky,
        S,
        "Emulation.setGeolocationOverride",
        r#"{"latitude":1}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Emulation.setTimezoneOverride",
        r#"{"timezoneId":"UTC"}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Page.removeScriptToEvaluateOnNewDocument",
        r#"{"identifier":"1"}"#,
        "{}",
    );
    ok(&mut sticky, S, "Log.disable", "{}", "{}");
    ok(
        &mut sticky,
        S,
        "Emulation.clearGeolocationOverride",
        "{}",
        "{}",
    );
    let replay = sticky.replay(S);
    assert_eq!(
        methods(&replay),
        [
            "Page.enable",
            "Page.addScriptToEvaluateOnNewDocument",
            "Emulation.setTimezoneOverride"
        ]
    );
    assert_eq!(replay[1].params, r#"{"source":"b"}"#);
}

#[test]
fn only_successes_are_recorded() {
    let mut sticky = Sticky::default();
    let command = r#"{"id":4,"method":"Emulation.setLocaleOverride","params":{"locale":"xx"},"sessionId":"S1"}"#;
    sticky.answered(
        command,
        r#"{"id":4,"error":{"code":-32000,"message":"Invalid locale name"},"sessionId":"S1"}"#,
    );
    assert!(sticky.replay(S).is_empty());
    sticky.answered(command, r#"{"id":4,"result":{},"sessionId":"S1"}"#);
    assert_eq!(methods(&sticky.replay(S)), ["Emulation.setLocaleOverride"]);
    sticky.session_gone("S1");
    assert!(sticky.replay(S).is_empty());
}

#[test]
fn bindings_by_name_and_world() {
    let mut sticky = Sticky::default();
    ok(
        &mut sticky,
        S,
        "Runtime.addBinding",
        r#"{"name":"b"}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Runtime.addBinding",
        r#"{"name":"b","executionContextName":"w"}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Runtime.addBinding",
        r#"{"name":"c"}"#,
        "{}",
    );
    ok(
        &mut sticky,
        S,
        "Runtime.addBinding",
        r#"{"name":"b"}"#,
        "{}",
    );
    // Bound to one document's context: that document's only.
    ok(
        &mut sticky,
        S,
        "Runtime.addBinding",
        r#"{"name":"d","executionContextId":3}"#,
        "{}",
    );
    let params: Vec<&str> = sticky.replay(S).iter().map(|r| r.params).collect();
    assert_eq!(
        params,
        [
            r#"{"name":"b","executionContextName":"w"}"#,
            r#"{"name":"c"}"#,
            r#"{"name":"b"}"#
        ]
    );
    ok(
        &mut sticky,
        S,
        "Runtime.removeBinding",
        r#"{"name":"b"}"#,
        "{}",
    );
    let params: Vec<&str> = sticky.replay(S).iter().map(|r| r.params).collect();
    assert_eq!(params, [r#"{"name":"c"}"#]);
}

#[test]
fn the_browser_session_replays_its_state_then_discovery_then_auto_attach() {
    let mut sticky = Sticky::default();
    let attach = r#"{"autoAttach":true,"waitForDebuggerOnStart":true,"flatten":true}"#;
    ok(&mut sticky, None, "Target.setAutoAttach", attach, "{}");
    ok(
        &mut sticky,
        None,
        "Target.setDiscoverTargets",
        r#"{"discover":true}"#,
        "{}",
    );
    let download = r#"{"behavior":"allowAndName","browserContextId":"C1","downloadPath":"/tmp/d","eventsEnabled":true}"#;
    ok(
        &mut sticky,
        None,
        "Browser.setDownloadBehavior",
        download,
        "{}",
    );
    ok(
        &mut sticky,
        None,
        "Browser.setDownloadBehavior",
        r#"{"behavior":"deny"}"#,
        "{}",
    );
    let grant = |origin: &str, ctx: &str| {
        format!(
            r#"{{"origin":"{origin}","browserContextId":"{ctx}","permissions":["geolocation"]}}"#
        )
    };
    ok(
        &mut sticky,
        None,
        "Browser.grantPermissions",
        &grant("https://a", "C1"),
        "{}",
    );
    ok(
        &mut sticky,
        None,
        "Browser.grantPermissions",
        &grant("https://b", "C1"),
        "{}",
    );
    ok(
        &mut sticky,
        None,
        "Browser.grantPermissions",
        &grant("https://a", "C2"),
        "{}",
    );
    ok(
        &mut sticky,
        None,
        "Browser.grantPermissions",
        &grant("https://a", "C1"),
        "{}",
    );
    let replay = sticky.replay(None);
    assert_eq!(
        methods(&replay),
        [
            "Browser.setDownloadBehavior",
            "Browser.setDownloadBehavior",
            "Browser.grantPermissions",
            "Browser.grantPermissions",
            "Browser.grantPermissions",
            "Target.setDiscoverTargets",
            "Target.setAutoAttach",
        ]
    );
    assert_eq!(replay[0].params, download, "one per browser context");
    assert_eq!(
        replay[4].params,
        grant("https://a", "C1"),
        "the latest, last"
    );
    ok(
        &mut sticky,
        None,
        "Browser.resetPermissions",
        r#"{"browserContextId":"C1"}"#,
        "{}",
    );
    let grants: Vec<&str> = sticky
        .replay(None)
        .iter()
        .filter(|r| r.method == "Browser.grantPermissions")
        .map(|r| r.params)
        .collect();
    assert_eq!(grants, [grant("https://a", "C2")]);
}

#[test]
fn a_replay_is_a_frame_in_the_client_ids() {
    let mut sticky = Sticky::default();
    // A lone surrogate in the source: kept as written, byte for byte.
    let source = r#"{"source":"'\ud800'"}"#;
    ok(
        &mut sticky,
        S,
        "Page.addScriptToEvaluateOnNewDocument",
        source,
        r#"{"identifier":"4"}"#,
    );
    ok(
        &mut sticky,
        None,
        "Target.setDiscoverTargets",
        r#"{"discover":true}"#,
        "{}",
    );
    let replay = sticky.replay(S);
    assert_eq!(
        replay[0].frame(1_900_000_001, S),
        r#"{"id":1900000001,"method":"Page.addScriptToEvaluateOnNewDocument","sessionId":"S1","params":{"source":"'\ud800'"}}"#
    );
    assert_eq!(replay[0].script, Some("4"));
    assert_eq!(
        sticky.replay(None)[0].frame(7, None),
        r#"{"id":7,"method":"Target.setDiscoverTargets","params":{"discover":true}}"#
    );
}

#[test]
fn known_setters() {
    for method in [
        "Emulation.setFocusEmulationEnabled",
        "Emulation.setEmulatedMedia",
        "Network.setExtraHTTPHeaders",
        "Page.addScriptToEvaluateOnNewDocument",
        "Runtime.addBinding",
        "Browser.grantPermissions",
        "Browser.setPermission",
        "DOM.setFileInputFiles",
        "Network.setCookies",
        "Page.createIsolatedWorld",
        "Page.enable",
        "Fetch.disable",
    ] {
        assert!(known(method), "{method}");
    }
    for method in [
        "Page.setAdBlockingEnabled",
        "Fetch.enable",
        "WebAuthn.enable",
        "Page.setWebLifecycleState",
    ] {
        assert!(!known(method), "{method}");
    }
}
