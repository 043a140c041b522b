//! Cache Storage and the origin private file system (issue 48): a page and its cross-site
//! iframe each keep entries and files; after a death both come back, each on its own origin,
//! in real Chromium. Opaque responses and data over the cap are left out and counted. After a
//! page crash (a restore into the same browser), what was left out or came later stays.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::response::Html;
use axum::routing::get;
use outlive::chromiumoxide::cdp::browser_protocol::page::{CrashParams, NavigateParams};
use outlive::chromiumoxide::error::CdpError;
use outlive::{Options, Outcome, WideEvent, outlive};
use serde_json::{Value, json};
use support::Kill;

/// What both pages share: `seed()` keeps two cache entries and files in a subdirectory,
/// `big()` an entry and a file of 8 KiB each, `read()` answers every entry and file.
const STORE: &str = r#"<script>
window.seed = async () => {
  const tag = location.hostname === 'localhost' ? 'widget' : 'app';
  const cache = await caches.open(tag + '-v1');
  await cache.put('/' + tag + '/one', new Response(tag + ' body', {
    status: 200, statusText: 'Fine', headers: { 'content-type': 'text/plain', 'x-mark': tag + '1' } }));
  await cache.put('/' + tag + '/two', new Response(Uint8Array.of(0, 255, 1, 254), {
    status: 404, statusText: 'Gone Fishing', headers: { 'x-mark': tag + '2' } }));
  const root = await navigator.storage.getDirectory();
  const sub = await (await root.getDirectoryHandle('docs', { create: true }))
    .getDirectoryHandle('sub', { create: true });
  for (const [dir, name, text] of [[sub, 'note.txt', tag + ' note'], [root, 'top.txt', tag + ' top']]) {
    const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
    await w.write(text);
    await w.close();
  }
  await root.getDirectoryHandle('empty', { create: true });
};
window.big = async () => {
  await (await caches.open('big')).put('/big', new Response('b'.repeat(8192)));
  const root = await navigator.storage.getDirectory();
  const w = await (await root.getFileHandle('big.bin', { create: true })).createWritable();
  await w.write('f'.repeat(8192));
  await w.close();
};
window.read = async () => {
  const caches_ = {};
  for (const name of await caches.keys()) {
    const cache = await caches.open(name);
    for (const q of await cache.keys()) {
      const r = await cache.match(q);
      caches_[name + ' ' + new URL(q.url).pathname] = [r.status, r.statusText,
        r.headers.get('x-mark'), Array.from(new Uint8Array(await r.arrayBuffer())).join(',')];
    }
  }
  const files = {};
  const walk = async (dir, prefix) => {
    for await (const [name, h] of dir.entries()) {
      if (h.kind === 'directory') { files[prefix + name + '/'] = null; await walk(h, prefix + name + '/'); }
      else files[prefix + name] = await (await h.getFile()).text();
    }
  };
  await walk(await navigator.storage.getDirectory(), '');
  return { origin: location.origin, caches: caches_, files };
};
</script>"#;

/// The app: asks its iframe to do as it does, over `postMessage`.
const APP: &str = r#"<!doctype html><title>app</title>
<iframe id="w" src="WIDGET/widget"></iframe>
<script>
const frameLoaded = new Promise((r) => document.getElementById('w').addEventListener('load', r));
const ask = async (what) => {
  await frameLoaded;
  const answer = new Promise((r) => window.addEventListener('message', (e) => r(e.data), { once: true }));
  document.getElementById('w').contentWindow.postMessage(what, '*');
  return answer;
};
window.both = async (what) => [await window[what](), await ask(what)];
</script>"#;

/// The widget: does what the app asks and answers.
const WIDGET: &str = r#"<!doctype html><title>widget</title><script>
window.addEventListener('message', async (e) => {
  e.source.postMessage(await window[e.data](), '*');
});
</script>"#;

/// The app on `http://127.0.0.1:P`, its iframe on `http://localhost:P`: another site.
async fn two_sites() -> (outlive_testkit::Served, String) {
    let app = Router::new()
        .route(
            "/app",
            get(|headers: HeaderMap| async move {
                let host = headers.get("host").and_then(|h| h.to_str().ok());
                let port = host.and_then(|h| h.rsplit(':').next()).unwrap_or_default();
                let widget = format!("http://localhost:{port}");
                Html(format!("{}{STORE}", APP.replace("WIDGET", &widget)))
            }),
        )
        .route(
            "/widget",
            get(|| async { Html(format!("{WIDGET}{STORE}")) }),
        )
        .route("/asset", get(|| async { "opaque to the app" }));
    let served = outlive_testkit::serve(app).await;
    let url = format!("{}/app", served.base);
    (served, url)
}

/// How the first attempt ends after its checkpoint.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// The browser is SIGKILLed: a fresh one gets the restore.
    Death,
    /// A second checkpoint with nothing changed (the parts taken as unchanged, by hash or
    /// the OPFS stamp), then the SIGKILL.
    DeathAfterASecondCheckpoint,
    /// The page crashes (after `late()` adds an entry and a file no checkpoint holds): the
    /// restore goes into the same browser's storage.
    PageCrash,
}

/// An entry and a file made after the checkpoint (see [`End::PageCrash`]).
const LATE: &str = "(async () => {
  await (await caches.open('late')).put('/late', new Response('late body'));
  await (await caches.open('app-v1')).put('/app/late', new Response('late one'));
  const root = await navigator.storage.getDirectory();
  const w = await (await root.getFileHandle('late.txt', { create: true })).createWritable();
  await w.write('late file');
  await w.close();
})()";

/// Seeds both origins (`big` adds the 8 KiB entry and file to the app's), keeps an opaque
/// response in the app's cache, checkpoints, ends as `end` says; answers what each origin
/// holds after the restore, and the wide event.
async fn through_a_death(options: Options, big: bool) -> (Value, WideEvent) {
    through(options, big, End::Death).await
}

async fn through(options: Options, big: bool, end: End) -> (Value, WideEvent) {
    let (_server, url) = two_sites().await;
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
                    page.evaluate("both('seed')").await?;
                    let opaque = "(async () => { const c = await caches.open('app-v1');
                      const r = await fetch(location.href.replace('127.0.0.1', 'localhost')
                        .replace('/app', '/asset'), { mode: 'no-cors' });
                      await c.put('/opaque', r); return r.type; })()";
                    let kind: String = page.evaluate(opaque).await?.into_value()?;
                    assert_eq!(kind, "opaque");
                    if big {
                        page.evaluate("big()").await?;
                    }
                    assert!(ctx.checkpoint().await, "the checkpoint was written");
                    match end {
                        End::Death => provider.kill(Kill::Sigkill),
                        End::DeathAfterASecondCheckpoint => {
                            assert!(ctx.checkpoint().await, "the second checkpoint");
                            provider.kill(Kill::Sigkill);
                        }
                        End::PageCrash => {
                            page.evaluate(LATE).await?;
                            // The crash answers no reply; the call fails when it is reported.
                            assert!(page.execute(CrashParams::default()).await.is_err());
                        }
                    }
                    page.evaluate("1").await?;
                    unreachable!("a page call succeeded on a dead page");
                }
                let state: Value = page.evaluate("both('read')").await?.into_value()?;
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

/// What `read()` answers on an origin seeded as `tag`, at `origin`.
fn seeded(origin: &str, tag: &str) -> Value {
    let body: Vec<String> = format!("{tag} body")
        .bytes()
        .map(|b| b.to_string())
        .collect();
    json!({
        "origin": origin,
        "caches": {
            format!("{tag}-v1 /{tag}/one"): [200, "Fine", format!("{tag}1"), body.join(",")],
            format!("{tag}-v1 /{tag}/two"): [404, "Gone Fishing", format!("{tag}2"), "0,255,1,254"],
        },
        "files": {
            "docs/": null, "docs/sub/": null, "empty/": null,
            "docs/sub/note.txt": format!("{tag} note"), "top.txt": format!("{tag} top"),
        },
    })
}

fn origins(state: &Value) -> (String, String) {
    let origin = |i: usize| state[i]["origin"].as_str().unwrap().to_owned();
    (origin(0), origin(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_entries_and_files_come_back_each_on_its_origin() {
    // Every thread's logs (outlive's tasks run on the runtime's workers).
    let logs = outlive_testkit::Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let (state, event) = through_a_death(Options::new(), false).await;
    let (app, widget) = origins(&state);
    assert!(app.starts_with("http://127.0.0.1:") && widget.starts_with("http://localhost:"));
    assert_eq!(
        state,
        json!([seeded(&app, "app"), seeded(&widget, "widget")]),
        "every entry and file on its own origin, none on the other; the opaque one left out"
    );
    assert_eq!(event.state_left_out, 1, "the opaque response");
    let event = serde_json::to_string(&event).unwrap();
    let logs = logs.text();
    assert!(
        logs.contains("outlive run finished"),
        "the logs are captured"
    );
    // Bodies and contents travel in base64: both forms, and the names, URLs and paths.
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut secrets = vec![b64(&[0, 255, 1, 254])];
    for tag in ["app", "widget"] {
        for value in ["body", "note", "top"].map(|v| format!("{tag} {v}")) {
            secrets.push(b64(value.as_bytes()));
            secrets.push(value);
        }
        for name in ["-v1", "1", "2"].map(|n| format!("{tag}{n}")) {
            secrets.push(name);
        }
        secrets.extend([format!("/{tag}/one"), format!("/{tag}/two")]);
    }
    secrets.extend(["top.txt", "note.txt", "docs/sub", "Gone Fishing", "x-mark"].map(String::from));
    for secret in &secrets {
        assert!(
            !event.contains(secret.as_str()),
            "{secret:?} reached the wide event"
        );
        assert!(
            !logs.contains(secret.as_str()),
            "{secret:?} reached a log line"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_crash_keeps_what_was_left_out_or_came_later() {
    let options = Options::new().cache_storage_and_opfs_max_bytes(4096);
    let (state, event) = through(options, true, End::PageCrash).await;
    let (app, widget) = origins(&state);
    let mut kept = seeded(&app, "app");
    let caches = kept["caches"].as_object_mut().unwrap();
    let text = |s: &str| {
        s.bytes()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    // Over the cap, opaque (not captured) and made after the checkpoint: all still there.
    caches.insert(
        "big /big".into(),
        json!([200, "", null, text(&"b".repeat(8192))]),
    );
    caches.insert("app-v1 /opaque".into(), json!([0, "", null, ""]));
    caches.insert(
        "app-v1 /app/late".into(),
        json!([200, "", null, text("late one")]),
    );
    caches.insert(
        "late /late".into(),
        json!([200, "", null, text("late body")]),
    );
    let files = kept["files"].as_object_mut().unwrap();
    files.insert("big.bin".into(), json!("f".repeat(8192)));
    files.insert("late.txt".into(), json!("late file"));
    assert_eq!(state, json!([kept, seeded(&widget, "widget")]));
    assert_eq!(
        event.state_left_out, 3,
        "the opaque response, the big entry and the big file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_and_files_over_the_cap_are_left_out_and_counted() {
    let options = Options::new().cache_storage_and_opfs_max_bytes(4096);
    let (state, event) = through_a_death(options, true).await;
    let (app, widget) = origins(&state);
    assert_eq!(
        state,
        json!([seeded(&app, "app"), seeded(&widget, "widget")]),
        "all but the 8 KiB entry and file"
    );
    assert_eq!(
        event.state_left_out, 3,
        "the opaque response, the big entry and the big file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_second_checkpoint_keeps_the_parts_and_their_count() {
    let options = Options::new().cache_storage_and_opfs_max_bytes(4096);
    let (state, event) = through(options, true, End::DeathAfterASecondCheckpoint).await;
    let (app, widget) = origins(&state);
    assert_eq!(
        state,
        json!([seeded(&app, "app"), seeded(&widget, "widget")]),
        "all but the 8 KiB entry and file"
    );
    assert_eq!(event.state_left_out, 3, "the count of the first read, kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switched_off_none_of_it_comes_back() {
    let options = Options::new().cache_storage_and_opfs(false);
    let (state, event) = through_a_death(options, false).await;
    let (app, widget) = origins(&state);
    let empty = |origin: &str| json!({ "origin": origin, "caches": {}, "files": {} });
    assert_eq!(
        state,
        json!([empty(&app), empty(&widget)]),
        "a fresh browser's"
    );
    assert_eq!(event.state_left_out, 0);
}
