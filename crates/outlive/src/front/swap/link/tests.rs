use serde_json::{Value, json};

use super::*;
use crate::front::usage::PageStateScript;

fn v(frame: &str) -> Value {
    serde_json::from_str(frame).unwrap()
}

/// Feeds the browser's frame; answers what the client gets.
fn browser(link: &mut Link, frame: Value) -> Out {
    link.browser_sent(&frame.to_string())
}

fn client(link: &mut Link, frame: Value) -> Out {
    link.client_sent(frame.to_string()).unwrap()
}

fn attached(session: &str, target: &str, context: &str) -> Value {
    json!({"method": "Target.attachedToTarget", "params": {
        "sessionId": session, "waitingForDebugger": false,
        "targetInfo": {"targetId": target, "type": "page", "url": "http://a.test/x",
                       "browserContextId": context, "attached": true}}})
}

fn navigated(session: &str, frame: &str, url: &str) -> Value {
    json!({"method": "Page.frameNavigated", "sessionId": session,
           "params": {"frame": {"id": frame, "loaderId": "L", "url": url}, "type": "Navigation"}})
}

/// A Playwright-like client on one page (session S1, target T1) of browser one: auto-attach,
/// the page's domains, an init script, a navigation.
fn playwright_on_one_page() -> Link {
    let mut link = Link::default();
    let auto = json!({"id": 1, "method": "Target.setAutoAttach",
        "params": {"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}});
    client(&mut link, auto);
    let out = browser(&mut link, attached("S1", "T1", "C1"));
    assert_eq!(v(&out.client[0])["params"]["sessionId"], "S1");
    browser(&mut link, json!({"id": 1, "result": {}}));
    for (id, method, params) in [
        (2, "Page.enable", json!({})),
        (3, "Runtime.enable", json!({})),
        (
            4,
            "Page.addScriptToEvaluateOnNewDocument",
            json!({"source": "", "worldName": "u"}),
        ),
        (
            5,
            "Page.setLifecycleEventsEnabled",
            json!({"enabled": true}),
        ),
    ] {
        let out = client(
            &mut link,
            json!({"id": id, "method": method, "sessionId": "S1", "params": params}),
        );
        assert_eq!(out.browser.len(), 1);
        let result = if id == 4 {
            json!({"identifier": "1"})
        } else {
            json!({})
        };
        browser(
            &mut link,
            json!({"id": id, "sessionId": "S1", "result": result}),
        );
    }
    let ctx = json!({"method": "Runtime.executionContextCreated", "sessionId": "S1",
        "params": {"context": {"id": 7, "origin": "", "name": "", "uniqueId": "u7",
                               "auxData": {"frameId": "T1", "isDefault": true}}}});
    browser(&mut link, ctx);
    browser(&mut link, navigated("S1", "T1", "http://a.test/page"));
    link
}

/// Rebinds to browser two (T1 → T2, S1 → S2) and answers the replay, as Chrome would:
/// the front's and the client's commands sent after the answers.
fn rebound(link: &mut Link, states: &HashMap<String, PageStateScript>) -> (Vec<Value>, Vec<Value>) {
    let out = link
        .rebind(&[("T1".into(), "T2".into())], states, &[])
        .unwrap();
    browser(link, json!({"id": v(&out.own[0])["id"], "result": {}}));
    let out = browser(link, attached("S2", "T2", "C2"));
    let (mut own, mut sent) = (Vec::new(), Vec::new());
    for f in out.own.iter().map(|f| v(f)) {
        let result = match f["method"].as_str() {
            Some("Page.addScriptToEvaluateOnNewDocument") => json!({"identifier": "1"}),
            _ => json!({}),
        };
        let out = browser(
            link,
            json!({"id": f["id"], "sessionId": "S2", "result": result}),
        );
        own.extend(out.own.iter().map(|f| v(f)));
        sent.extend(out.browser.iter().map(|f| v(f)));
    }
    (own, sent)
}

#[test]
fn at_a_death_contexts_are_cleared_evaluations_fail_and_the_rest_waits() {
    let mut link = playwright_on_one_page();
    let eval = json!({"id": 9, "method": "Runtime.evaluate", "sessionId": "S1",
                      "params": {"expression": "1", "contextId": 7}});
    client(&mut link, eval);
    let shot =
        json!({"id": 10, "method": "Page.captureScreenshot", "sessionId": "S1", "params": {}});
    client(&mut link, shot);
    let died = link.died().unwrap();
    assert_eq!(died.client.len(), 2, "{:?}", died.client);
    let cleared = v(&died.client[0]);
    assert_eq!(cleared["method"], "Runtime.executionContextsCleared");
    assert_eq!(cleared["sessionId"], "S1");
    let answer = v(&died.client[1]);
    assert_eq!(answer["id"], 9);
    assert_eq!(answer["sessionId"], "S1");
    assert_eq!(answer["error"]["message"], NAVIGATED);
    assert!(link.swapping());
    // Held while the browser is replaced.
    let held = client(
        &mut link,
        json!({"id": 11, "method": "Runtime.evaluate", "sessionId": "S1",
                                        "params": {"expression": "2"}}),
    );
    assert!(held.browser.is_empty());
}

#[test]
fn the_client_state_is_replayed_on_the_new_session_unseen() {
    let mut link = playwright_on_one_page();
    link.died().unwrap();
    let out = link
        .rebind(&[("T1".into(), "T2".into())], &HashMap::new(), &[])
        .unwrap();
    assert_eq!(out.own.len(), 1, "{:?}", out.own);
    let auto = v(&out.own[0]);
    assert_eq!(auto["method"], "Target.setAutoAttach");
    assert!(auto["id"].as_u64().unwrap() >= OWN_BASE);
    // The kept page attaches on browser two: not shown, its state replayed in its ids.
    let out = browser(&mut link, attached("S2", "T2", "C2"));
    assert!(out.client.is_empty(), "{:?}", out.client);
    let replay: Vec<Value> = out.own.iter().map(|f| v(f)).collect();
    let methods: Vec<&str> = replay
        .iter()
        .map(|f| f["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "Page.enable",
            "Runtime.enable",
            "Page.addScriptToEvaluateOnNewDocument",
            "Page.setLifecycleEventsEnabled"
        ]
    );
    assert!(replay.iter().all(|f| f["sessionId"] == "S2"));
    // The replay's echoes are not shown.
    let echo = json!({"method": "Runtime.executionContextCreated", "sessionId": "S2",
        "params": {"context": {"id": 1, "origin": "", "name": "", "uniqueId": "x",
                               "auxData": {"frameId": "T2", "isDefault": true}}}});
    assert!(browser(&mut link, echo).client.is_empty());
}

#[test]
fn the_load_reaches_the_client_in_its_ids_then_what_waited_goes() {
    let mut link = playwright_on_one_page();
    let shot =
        json!({"id": 10, "method": "Page.captureScreenshot", "sessionId": "S1", "params": {}});
    client(&mut link, shot);
    link.died().unwrap();
    client(
        &mut link,
        json!({"id": 11, "method": "Runtime.evaluate", "sessionId": "S1",
                             "params": {"expression": "2"}}),
    );
    let (load, _) = rebound(&mut link, &HashMap::new());
    assert_eq!(load.len(), 1, "{load:?}");
    assert_eq!(load[0]["method"], "Page.navigate");
    assert_eq!(load[0]["sessionId"], "S2");
    assert_eq!(load[0]["params"]["url"], "http://a.test/page");
    // Chrome's own navigation events reach the client in its ids.
    let cleared =
        json!({"method": "Runtime.executionContextsCleared", "sessionId": "S2", "params": {}});
    let out = browser(&mut link, cleared);
    assert_eq!(v(&out.client[0])["sessionId"], "S1");
    let out = browser(&mut link, navigated("S2", "T2", "http://a.test/page"));
    let nav = v(&out.client[0]);
    assert_eq!(nav["sessionId"], "S1");
    assert_eq!(nav["params"]["frame"]["id"], "T1");
    // Loaded: the screenshot in flight, then the held evaluation, go out in browser two's ids.
    assert!(!link.swapping());
    let sent: Vec<Value> = out.browser.iter().map(|f| v(f)).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0]["id"], 10);
    assert_eq!(sent[1]["id"], 11);
    assert!(sent.iter().all(|f| f["sessionId"] == "S2"));
    // A new context is shown above every id the client saw.
    let ctx = json!({"method": "Runtime.executionContextCreated", "sessionId": "S2",
        "params": {"context": {"id": 1, "origin": "", "name": "", "uniqueId": "y",
                               "auxData": {"frameId": "T2", "isDefault": true}}}});
    let shown = v(&browser(&mut link, ctx).client[0]);
    assert!(
        shown["params"]["context"]["id"].as_i64().unwrap() > 7,
        "{shown}"
    );
    assert_eq!(shown["params"]["context"]["auxData"]["frameId"], "T1");
    // The screenshot's answer reaches the client on its session.
    let out = browser(
        &mut link,
        json!({"id": 10, "sessionId": "S2", "result": {"data": "x"}}),
    );
    assert_eq!(v(&out.client[0])["sessionId"], "S1");
}

/// A `pushState` (or fragment) step moves the URL the page is loaded at on the next
/// browser; one in a child frame does not.
#[test]
fn the_load_goes_where_a_step_within_the_document_left_the_page() {
    let mut link = playwright_on_one_page();
    let within = |frame: &str, url: &str| {
        json!({"method": "Page.navigatedWithinDocument", "sessionId": "S1",
               "params": {"frameId": frame, "url": url, "navigationType": "historyApi"}})
    };
    browser(&mut link, within("T1", "http://a.test/page?step=2"));
    browser(&mut link, within("F9", "http://a.test/child#x"));
    link.died().unwrap();
    let (load, _) = rebound(&mut link, &HashMap::new());
    assert_eq!(load.len(), 1, "{load:?}");
    assert_eq!(load[0]["params"]["url"], "http://a.test/page?step=2");
}

#[test]
fn a_navigation_in_flight_is_the_pages_load_on_the_next_browser() {
    let mut link = playwright_on_one_page();
    let goto = json!({"id": 20, "method": "Page.navigate", "sessionId": "S1",
                      "params": {"url": "http://a.test/next", "frameId": "T1"}});
    client(&mut link, goto);
    link.died().unwrap();
    let (own, sent) = rebound(&mut link, &HashMap::new());
    assert!(
        own.is_empty(),
        "the front does not load a page the client is loading"
    );
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["id"], 20);
    assert_eq!(sent[0]["sessionId"], "S2");
    assert_eq!(sent[0]["params"]["frameId"], "T2");
    // Its answer is the client's, in its ids.
    let answer =
        json!({"id": 20, "sessionId": "S2", "result": {"frameId": "T2", "loaderId": "L9"}});
    let out = browser(&mut link, answer);
    assert_eq!(v(&out.client[0])["result"]["frameId"], "T1");
}

#[test]
fn what_cannot_be_carried_is_named() {
    let mut link = playwright_on_one_page();
    client(
        &mut link,
        json!({"id": 30, "method": "Fetch.enable", "sessionId": "S1", "params": {}}),
    );
    assert_eq!(link.died().unwrap_err().name(), "interception");

    let mut link = playwright_on_one_page();
    link.died().unwrap();
    let err = link
        .rebind(&[("T9".into(), "T2".into())], &HashMap::new(), &[])
        .unwrap_err();
    assert_eq!(err.name(), "tab_not_reopened");

    let mut link = playwright_on_one_page();
    link.died().unwrap();
    link.rebind(&[("T1".into(), "T2".into())], &HashMap::new(), &[])
        .unwrap();
    assert_eq!(link.timed_out().unwrap_err().name(), "swap_timed_out");
}

#[test]
fn a_navigation_sent_during_the_swap_is_the_pages_load() {
    let mut link = playwright_on_one_page();
    link.died().unwrap();
    // Sent while the browser is replaced: held, then used as the page's load.
    let goto = json!({"id": 40, "method": "Page.navigate", "sessionId": "S1",
                      "params": {"url": "http://a.test/held", "frameId": "T1"}});
    client(&mut link, goto);
    let later = json!({"id": 41, "method": "Runtime.evaluate", "sessionId": "S1",
                       "params": {"expression": "3"}});
    client(&mut link, later);
    let (own, sent) = rebound(&mut link, &HashMap::new());
    assert!(own.is_empty(), "the front does not load the page itself");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["id"], 40);
    // The evaluation waits for the load to commit.
    let out = browser(&mut link, navigated("S2", "T2", "http://a.test/held"));
    assert_eq!(out.browser.len(), 1);
    assert_eq!(v(&out.browser[0])["id"], 41);
}

#[test]
fn a_pages_state_is_put_back_after_its_load_before_what_waited_goes() {
    let mut link = playwright_on_one_page();
    link.died().unwrap();
    let held = json!({"id": 50, "method": "Runtime.evaluate", "sessionId": "S1",
                      "params": {"expression": "document.querySelector('#to').value"}});
    client(&mut link, held);
    let script: PageStateScript =
        std::sync::Arc::new("apply({\"to\":\"typed\"})".to_owned().into());
    let states = HashMap::from([("T2".to_owned(), script)]);
    let (load, _) = rebound(&mut link, &states);
    let load = &load[0];
    assert_eq!(load["method"], "Page.navigate");
    browser(
        &mut link,
        json!({"id": load["id"], "sessionId": "S2", "result": {"frameId": "T2", "loaderId": "L2"}}),
    );
    // Committed: a world in the new document, not yet what waited.
    let out = browser(&mut link, navigated("S2", "T2", "http://a.test/page"));
    assert!(out.browser.is_empty());
    let world = v(&out.own[0]);
    assert_eq!(world["method"], "Page.createIsolatedWorld");
    assert_eq!(world["sessionId"], "S2");
    assert_eq!(world["params"]["frameId"], "T2");
    // The world's answer is the browser's own context id: the script runs there, untranslated.
    let out = browser(
        &mut link,
        json!({"id": world["id"], "sessionId": "S2", "result": {"executionContextId": 3}}),
    );
    let apply = v(&out.own[0]);
    assert_eq!(apply["method"], "Runtime.evaluate");
    assert_eq!(apply["params"]["contextId"], 3);
    assert_eq!(apply["params"]["expression"], "apply({\"to\":\"typed\"})");
    assert!(link.swapping());
    let out = browser(
        &mut link,
        json!({"id": apply["id"], "sessionId": "S2", "result": {"result": {"type": "object"}}}),
    );
    assert!(!link.swapping());
    assert_eq!(v(&out.browser[0])["id"], 50);
}

/// The swap tells which of the new browser's pages it loads, and when each is loaded: a
/// restore that left the loads to it knows they are done (see `front::loads`).
#[test]
fn the_swap_names_the_pages_it_loads_and_when_each_is_loaded() {
    let mut link = playwright_on_one_page();
    link.died().unwrap();
    let out = link
        .rebind(&[("T1".into(), "T2".into())], &HashMap::new(), &[])
        .unwrap();
    browser(&mut link, json!({"id": v(&out.own[0])["id"], "result": {}}));
    let out = browser(&mut link, attached("S2", "T2", "C2"));
    let mut loading = Vec::new();
    for f in out.own.iter().map(|f| v(f)) {
        let result = match f["method"].as_str() {
            Some("Page.addScriptToEvaluateOnNewDocument") => json!({"identifier": "1"}),
            _ => json!({}),
        };
        let out = browser(
            &mut link,
            json!({"id": f["id"], "sessionId": "S2", "result": result}),
        );
        assert!(out.loaded.is_empty());
        loading.extend(out.loading);
    }
    assert_eq!(loading, ["T2"]);
    let out = browser(&mut link, navigated("S2", "T2", "http://a.test/page"));
    assert_eq!(out.loaded, ["T2"]);
    assert!(!link.swapping());
}
