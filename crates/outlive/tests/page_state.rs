//! The page as it was left (issue 48): typed fields and scroll positions come back after a
//! death, in real Chromium; passwords and `autocomplete="off"` fields do not.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use outlive::chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use outlive::chromiumoxide::error::CdpError;
use outlive::{Options, Outcome, WideEvent, outlive};
use serde_json::{Value, json};
use support::Kill;

/// Every field kind, a controlled input whose model follows `input` events only, a password,
/// `autocomplete="off"` fields, a field the page fills by itself once it has a draft, a
/// scrollable list and a tall page.
const FORM: &str = r#"<!doctype html><title>form</title><body style="margin:0">
<form id="f">
  <input name="text"><input name="num" type="number"><input name="date" type="date">
  <input name="range" type="range" min="0" max="10"><input name="color" type="color">
  <textarea name="area"></textarea>
  <select name="one"><option value="a">a</option><option value="b">b</option></select>
  <select name="many" multiple><option>x</option><option>y</option><option>z</option></select>
  <input type="checkbox" name="check">
  <input type="radio" name="r" value="1" checked><input type="radio" name="r" value="2">
  <input name="model" id="model"><input type="password" name="pw">
  <input name="secret" autocomplete="off"><input name="prefilled" id="prefilled">
</form>
<form autocomplete="off"><input name="inoff"></form>
<div id="ce" contenteditable="true"></div>
<div id="list" style="height:100px;overflow:auto"><div style="height:3000px">list</div></div>
<div style="height:5000px">tall</div>
<script>
  window.model = '';
  document.getElementById('model').addEventListener('input', (e) => { window.model = e.target.value; });
  if (localStorage.getItem('draft')) document.getElementById('prefilled').value = 'from the page';
</script>"#;

/// What the test types, and later reads back.
const FILL: &str = r#"(() => {
  const f = document.forms.f;
  const set = (el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); el.dispatchEvent(new Event('change', { bubbles: true })); };
  set(f.num, '42'); set(f.date, '2024-02-29'); set(f.range, '8'); set(f.color, '#ff0000');
  set(f.area, 'line one\nline two'); set(f.one, 'b');
  f.many.options[0].selected = true; f.many.options[2].selected = true;
  f.many.dispatchEvent(new Event('change', { bubbles: true }));
  f.check.click(); f.r[1].click();
  set(document.forms[1].inoff, 'off too');
  localStorage.setItem('draft', '1');
  window.scrollTo(0, 1234);
  document.getElementById('list').scrollTop = 777;
  return 1;
})()"#;

const READ: &str = r#"(() => {
  const f = document.forms.f;
  return {
    text: f.text.value, num: f.num.value, date: f.date.value, range: f.range.value,
    color: f.color.value, area: f.area.value, one: f.one.value,
    many: Array.from(f.many.selectedOptions, (o) => o.value), check: f.check.checked,
    r: f.r.value, model: f.model.value, windowModel: window.model, pw: f.pw.value,
    secret: f.secret.value, inoff: document.forms[1].inoff.value, prefilled: f.prefilled.value,
    ce: document.getElementById('ce').textContent,
    scrollY: Math.round(window.scrollY), list: Math.round(document.getElementById('list').scrollTop),
  };
})()"#;

async fn form_site() -> outlive_testkit::Served {
    let app = Router::new().route("/form", get(|| async { Html(FORM) }));
    outlive_testkit::serve(app).await
}

/// Types into the form as a user would (keys for the text-like fields and the contenteditable,
/// clicks and set values with their events for the rest), then scrolls.
async fn fill(page: &outlive::Page) -> Result<(), CdpError> {
    for (selector, text) in [
        ("input[name=text]", "typed text"),
        ("#model", "controlled"),
        ("input[name=pw]", "hunter2"),
        ("input[name=secret]", "one-time"),
        ("#prefilled", "typed over"),
        ("#ce", "edited"),
    ] {
        page.find_element(selector)
            .await?
            .click()
            .await?
            .type_str(text)
            .await?;
    }
    page.evaluate(FILL).await?;
    Ok(())
}

/// Runs the form through one death (SIGKILL after a checkpoint) and answers what the page
/// holds after the restore, and the wide event.
async fn through_a_death(options: Options) -> (Value, WideEvent) {
    let server = form_site().await;
    let url = format!("{}/form", server.base);
    let (profiles, provider) = support::browsers();
    let slot: Arc<Mutex<Option<WideEvent>>> = Arc::default();
    let writer = slot.clone();
    let options = options
        .checkpoint_every(Duration::from_secs(3600))
        .on_event(move |e| *writer.lock().unwrap() = Some(e.clone()));
    let state = outlive(
        &provider,
        |page, ctx| {
            let (url, provider) = (&url, &provider);
            async move {
                if ctx.attempt() == 1 {
                    page.goto(NavigateParams::new(url.clone())).await?;
                    fill(&page).await?;
                    assert!(ctx.checkpoint().await, "the checkpoint was written");
                    provider.kill(Kill::Sigkill);
                    page.evaluate("1").await?;
                    unreachable!("a page call succeeded on a killed browser");
                }
                let state: Value = page.evaluate(READ).await?.into_value()?;
                Ok::<_, CdpError>(state)
            }
        },
        options,
    )
    .await
    .map_err(|e| e.to_string())
    .unwrap();
    let event = slot.lock().unwrap().clone().unwrap();
    assert_eq!(event.outcome, Outcome::Completed);
    assert_eq!(event.attempts, 2);
    profiles.assert_nothing_left();
    (state, event)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_fields_and_scroll_positions_survive_a_death() {
    let (state, event) = through_a_death(Options::new()).await;
    assert_eq!(
        state,
        json!({
            "text": "typed text", "num": "42", "date": "2024-02-29", "range": "8",
            "color": "#ff0000", "area": "line one\nline two", "one": "b",
            "many": ["x", "z"], "check": true, "r": "2",
            "model": "controlled", "windowModel": "controlled",
            "pw": "", "secret": "", "inoff": "",
            "prefilled": "from the page", "ce": "edited",
            "scrollY": 1234, "list": 777,
        }),
        "every kept field, the model and both scroll positions as left; no password, no \
         autocomplete=off field; the page's own fill left alone"
    );
    assert_eq!(event.state_left_out, 0, "everything found its place");
    let text = serde_json::to_string(&event).unwrap();
    for secret in ["typed text", "hunter2", "controlled", "edited"] {
        assert!(
            !text.contains(secret),
            "a field value reached the wide event"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_state_off_restores_none_of_it() {
    let (state, _) = through_a_death(Options::new().page_state(false)).await;
    assert_eq!(
        state,
        json!({
            "text": "", "num": "", "date": "", "range": "5", "color": "#000000", "area": "",
            "one": "a", "many": [], "check": false, "r": "1", "model": "", "windowModel": "",
            "pw": "", "secret": "", "inoff": "", "prefilled": "from the page", "ce": "",
            "scrollY": 0, "list": 0,
        })
    );
}
