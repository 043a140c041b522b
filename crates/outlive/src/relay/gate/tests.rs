use super::*;

const SETUP: u64 = wire::OWN_ID_BASE;

fn attached(target: &str, session: &str, waiting: bool) -> String {
    format!(
        r#"{{"method":"Target.attachedToTarget","params":{{"sessionId":"{session}","targetInfo":{{"targetId":"{target}","type":"page"}},"waitingForDebugger":{waiting}}}}}"#
    )
}

fn detached(session: &str) -> String {
    format!(r#"{{"method":"Target.detachedFromTarget","params":{{"sessionId":"{session}"}}}}"#)
}

/// chromiumoxide's attach to `target` as command `id`, and its auto-attach on `session`.
fn client_attach(gate: &mut StartGate, id: u64, target: &str) {
    let text = format!(
        r#"{{"id":{id},"method":"Target.attachToTarget","params":{{"targetId":"{target}","flatten":true}}}}"#
    );
    gate.on_client(&Head::of(text.as_bytes()), text.as_bytes());
}

fn client_auto_attach(gate: &mut StartGate, id: u64, session: &str) -> Sent {
    let text = format!(
        r#"{{"id":{id},"method":"Target.setAutoAttach","sessionId":"{session}","params":{{"autoAttach":true,"waitForDebuggerOnStart":true,"flatten":true}}}}"#
    );
    gate.on_client(&Head::of(text.as_bytes()), text.as_bytes())
}

fn release(session: &str) -> Vec<Step> {
    vec![Step::Release {
        session: session.into(),
    }]
}

/// A gate whose setup was answered at `t0`.
fn open_gate(t0: Instant) -> StartGate {
    let mut gate = StartGate::default();
    gate.start(SETUP, t0);
    assert!(!gate.is_open(), "chromiumoxide waits for the setup");
    gate.own_reply(SETUP);
    assert!(gate.is_open());
    gate
}

#[test]
fn a_new_page_runs_once_the_relay_set_chromiumoxides_auto_attach_on_it() {
    let t0 = Instant::now();
    let mut gate = open_gate(t0);
    let seen = gate.on_browser(attached("T", "R", true).as_bytes(), t0);
    assert_eq!(
        seen,
        Seen::Consume,
        "chromiumoxide never sees the relay's session"
    );
    assert_eq!(gate.due(), Some(t0 + HOLD_CAP));
    client_attach(&mut gate, 1, "T");
    let seen = gate.on_browser(attached("T", "S", false).as_bytes(), t0);
    assert_eq!(seen, Seen::Forward, "chromiumoxide's own attach");
    let session = "S".to_owned();
    assert_eq!(gate.take_steps(), [Step::AutoAttach { session }]);
    gate.set(SETUP + 1, "S".into());
    assert!(gate.take_steps().is_empty(), "held until the answer");
    gate.own_reply(SETUP + 1);
    assert_eq!(gate.take_steps(), release("R"));
    assert_eq!(gate.due(), None);
    assert_eq!(client_auto_attach(&mut gate, 2, "S"), Sent::AnswerHere);
    assert_eq!(client_auto_attach(&mut gate, 3, "S"), Sent::Forward, "once");
    assert_eq!(gate.on_browser(detached("R").as_bytes(), t0), Seen::Consume);
    assert_eq!(gate.on_browser(detached("S").as_bytes(), t0), Seen::Forward);
}

#[test]
fn a_page_not_held_keeps_chromiumoxides_own_auto_attach() {
    let t0 = Instant::now();
    let mut gate = open_gate(t0);
    client_attach(&mut gate, 1, "T");
    assert_eq!(
        gate.on_browser(attached("T", "S", false).as_bytes(), t0),
        Seen::Forward
    );
    assert!(gate.take_steps().is_empty());
    assert_eq!(client_auto_attach(&mut gate, 2, "S"), Sent::Forward);
}

#[test]
fn pages_there_before_the_setup_was_answered_are_let_go_at_once() {
    let t0 = Instant::now();
    let mut gate = StartGate::default();
    gate.start(SETUP, t0);
    let seen = gate.on_browser(attached("T", "R", false).as_bytes(), t0);
    assert_eq!(seen, Seen::Consume);
    assert_eq!(gate.take_steps(), release("R"));
    assert_eq!(gate.due(), Some(t0 + HOLD_CAP), "only the setup is due");
}

#[test]
fn an_attach_chromiumoxide_did_not_ask_for_is_the_relays() {
    let t0 = Instant::now();
    let mut gate = open_gate(t0);
    client_attach(&mut gate, 1, "T");
    assert_eq!(
        gate.on_browser(attached("U", "R", false).as_bytes(), t0),
        Seen::Consume,
        "another target"
    );
    assert_eq!(gate.take_steps(), release("R"));
    assert_eq!(
        gate.on_browser(attached("T", "S", false).as_bytes(), t0),
        Seen::Forward
    );
    assert_eq!(
        gate.on_browser(attached("T", "S2", false).as_bytes(), t0),
        Seen::Consume,
        "one attach asked, one forwarded"
    );
}

#[test]
fn a_page_chromiumoxide_is_slow_to_set_up_runs_after_the_cap() {
    let t0 = Instant::now();
    let mut gate = open_gate(t0);
    gate.on_browser(attached("T", "R", true).as_bytes(), t0);
    gate.expire(t0 + HOLD_CAP - Duration::from_millis(1));
    assert!(gate.take_steps().is_empty());
    gate.expire(t0 + HOLD_CAP);
    assert_eq!(gate.take_steps(), release("R"));
    assert_eq!(gate.due(), None);
}

#[test]
fn a_browser_that_does_not_answer_the_setup_holds_nothing_back_for_long() {
    let t0 = Instant::now();
    let mut gate = StartGate::default();
    gate.start(SETUP, t0);
    gate.expire(t0 + HOLD_CAP);
    assert!(gate.is_open());
    assert_eq!(gate.due(), None);
}

#[test]
fn a_page_closed_while_held_is_forgotten() {
    let t0 = Instant::now();
    let mut gate = open_gate(t0);
    gate.on_browser(attached("T", "R", true).as_bytes(), t0);
    let destroyed = r#"{"method":"Target.targetDestroyed","params":{"targetId":"T"}}"#;
    assert_eq!(gate.on_browser(destroyed.as_bytes(), t0), Seen::Forward);
    assert_eq!(gate.due(), None);
    assert!(gate.take_steps().is_empty());
}
