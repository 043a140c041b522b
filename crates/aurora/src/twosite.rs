//! Twosite: an app page on one site that embeds a widget from another, for tests of state a
//! checkpoint must carry beyond cookies and `localStorage`: `sessionStorage`, IndexedDB,
//! partitioned (third-party iframe) `localStorage` and CHIPS partitioned cookies.
//!
//! [`spawn`] binds two listeners on 127.0.0.1. The app is addressed as
//! `http://127.0.0.1:P` and the widget as `http://localhost:Q`: Chromium's site is the
//! scheme and host (the port does not count), so the two are cross-site, and the widget's
//! iframe gets partitioned storage (storage key `http://localhost:Q/^0http://127.0.0.1`)
//! and a partitioned cookie (`partitionKey.topLevelSite` `http://127.0.0.1`). Both hosts
//! are potentially trustworthy, so plain http can set a `Secure` cookie; no flag is needed.
//!
//! The app page's script exposes `window.twosite` with async functions, for
//! `Runtime.evaluate` with `awaitPromise` and `returnByValue` ([`SEED_JS`], [`REPORT_JS`]):
//! `seed()` writes every piece and `report()` reads them back as a [`Report`]; `fillWidget()`
//! fills the widget's storage for benchmarks ([`fill_widget_js`]).

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::listening::{Listening, Stop};
use crate::routes::cookie;

/// The app page, on the app listener.
pub const APP_PATH: &str = "/app";
/// The widget page the app embeds in `<iframe id="widget">`, on the widget listener.
pub const WIDGET_PATH: &str = "/widget";
/// Sets the CHIPS cookie ([`CHIPS_COOKIE`]); the widget fetches it during `seed()` only.
pub const WIDGET_COOKIE_PATH: &str = "/widget/cookie";
/// Answers `{"chips": bool}`: whether the request carried the CHIPS cookie with
/// [`CHIPS_VALUE`]; the widget fetches it during `report()`.
pub const WIDGET_WHOAMI_PATH: &str = "/widget/whoami";

/// The expression that seeds every piece; resolves to `true` once all is written.
pub const SEED_JS: &str = "twosite.seed()";
/// The expression that reads every piece back; resolves to a [`Report`] as JSON.
pub const REPORT_JS: &str = "twosite.report()";

/// The expression that fills the widget's partitioned `localStorage` with `items` items of
/// `chars` characters (`bulk0`, `bulk1`, …) and its IndexedDB with `records` records
/// (database `bulk`, store `records`, indexed by `tag`), for benchmarks; resolves to `true`.
pub fn fill_widget_js(items: u32, chars: u32, records: u32) -> String {
    format!("twosite.fillWidget({items}, {chars}, {records})")
}

/// The app origin's `sessionStorage` key.
pub const SESSION_KEY: &str = "twosite.session";
/// The value `seed()` writes under [`SESSION_KEY`].
pub const SESSION_VALUE: &str = "session-4f1d-tab-scoped";

/// The app origin's IndexedDB database.
pub const IDB_NAME: &str = "twosite";
/// Its version after `seed()`.
pub const IDB_VERSION: u64 = 3;
/// Object store with `keyPath: "id"`, `autoIncrement: true` and the index [`BY_TAG_INDEX`].
pub const NOTES_STORE: &str = "notes";
/// The non-unique index of [`NOTES_STORE`] on `"tag"`.
pub const BY_TAG_INDEX: &str = "byTag";
/// Object store with out-of-line keys; holds one record under [`BLOB_KEY`].
pub const BLOBS_STORE: &str = "blobs";
/// The key of the record in [`BLOBS_STORE`].
pub const BLOB_KEY: &str = "assets";
/// How many records `seed()` puts in [`NOTES_STORE`].
pub const NOTES_COUNT: u64 = 3;
/// The tag that `report()` counts through [`BY_TAG_INDEX`].
pub const NOTE_TAG: &str = "t1";
/// How many notes carry [`NOTE_TAG`].
pub const BY_TAG_COUNT: u64 = 2;
/// The rich note's `when: Date`, in Unix milliseconds.
pub const NOTE_DATE_MS: i64 = 1_700_000_000_123;
/// The rich note's `bytes: Uint8Array`.
pub const NOTE_BYTES: [u8; 6] = [0, 1, 127, 128, 254, 255];
/// An entry of the rich note's `meta: Map`, with a string value.
pub const NOTE_META_TEXT: (&str, &str) = ("k", "v");
/// An entry of the rich note's `meta: Map`, with a number value.
pub const NOTE_META_NUMBER: (&str, i64) = ("n", 42);
/// The members of the [`BLOB_KEY`] record's `set: Set`.
pub const BLOB_SET: [&str; 3] = ["alpha", "beta", "gamma"];
/// The bytes of the [`BLOB_KEY`] record's `buffer: ArrayBuffer`.
pub const BLOB_BUFFER: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];
/// The text of the [`BLOB_KEY`] record's `blob: Blob`.
pub const BLOB_TEXT: &str = "twosite blob body";
/// The MIME type of the [`BLOB_KEY`] record's `blob: Blob`.
pub const BLOB_TYPE: &str = "text/plain";

/// The widget's (partitioned) `localStorage` key.
pub const WIDGET_TOKEN_KEY: &str = "widget.token";
/// The value the widget writes under [`WIDGET_TOKEN_KEY`].
pub const WIDGET_TOKEN: &str = "widget-token-93ab";
/// The partitioned cookie the widget host sets:
/// `Secure; SameSite=None; Partitioned; Path=/`, no expiry (a session cookie).
pub const CHIPS_COOKIE: &str = "widget_chips";
/// The value of [`CHIPS_COOKIE`].
pub const CHIPS_VALUE: &str = "chips-5e07";

/// How long the app waits for the widget iframe to answer before `report()` shows the
/// widget as not loaded (and `seed()` fails).
pub const WIDGET_TIMEOUT: Duration = Duration::from_secs(10);

const APP_HTML: &str = include_str!("twosite/app.html");
const WIDGET_HTML: &str = include_str!("twosite/widget.html");
const CONFIG_SLOT: &str = "__TWOSITE_CONFIG__";
const WIDGET_SRC_SLOT: &str = "__TWOSITE_WIDGET_SRC__";

/// Which listener a request reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The app, `http://127.0.0.1:P`.
    App,
    /// The widget, `http://localhost:Q`.
    Widget,
}

/// One request either server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The listener it reached.
    pub side: Side,
    /// Its path, without the query.
    pub path: String,
}

/// What `twosite.report()` returns, as it reads the state back the way the app would.
/// Missing pieces are `None`/`false`; compare with [`Report::seeded`] and
/// [`Report::fresh`], or list them with [`Report::missing`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `sessionStorage[SESSION_KEY]` in the app's tab.
    pub session: Option<String>,
    /// The IndexedDB database [`IDB_NAME`].
    pub idb: IdbReport,
    /// What the widget iframe reports.
    pub widget: WidgetReport,
}

/// The IndexedDB part of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdbReport {
    /// Whether `indexedDB.databases()` lists [`IDB_NAME`].
    pub exists: bool,
    /// The database's version.
    pub version: Option<u64>,
    /// Its object store names, sorted.
    pub stores: Vec<String>,
    /// The stores' and the index's shape.
    pub schema: IdbSchema,
    /// `count()` of [`NOTES_STORE`].
    pub notes_count: Option<u64>,
    /// `count(NOTE_TAG)` through [`BY_TAG_INDEX`].
    pub by_tag_count: Option<u64>,
    /// The rich note's `when` is a `Date` at [`NOTE_DATE_MS`].
    pub date_ok: bool,
    /// Its `bytes` is a `Uint8Array` of [`NOTE_BYTES`].
    pub bytes_ok: bool,
    /// Its `meta` is a `Map` of exactly [`NOTE_META_TEXT`] and [`NOTE_META_NUMBER`].
    pub map_ok: bool,
    /// The [`BLOB_KEY`] record's `set` is a `Set` of exactly [`BLOB_SET`].
    pub set_ok: bool,
    /// Its `buffer` is an `ArrayBuffer` of [`BLOB_BUFFER`].
    pub array_buffer_ok: bool,
    /// Its `blob` is a `Blob` of type [`BLOB_TYPE`] reading [`BLOB_TEXT`].
    pub blob_ok: bool,
}

/// The shape of the IndexedDB stores, `None` where a store or the index is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdbSchema {
    /// `keyPath` of [`NOTES_STORE`] (`"id"`).
    pub notes_key_path: Option<String>,
    /// `autoIncrement` of [`NOTES_STORE`] (`true`).
    pub notes_auto_increment: Option<bool>,
    /// `keyPath` of [`BY_TAG_INDEX`] (`"tag"`).
    pub by_tag_key_path: Option<String>,
    /// `unique` of [`BY_TAG_INDEX`] (`false`).
    pub by_tag_unique: Option<bool>,
    /// `keyPath` of [`BLOBS_STORE`]: `None` for out-of-line keys, and if the store is missing.
    pub blobs_key_path: Option<String>,
}

/// The widget part of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WidgetReport {
    /// Whether the iframe answered within [`WIDGET_TIMEOUT`].
    pub loaded: bool,
    /// The iframe's `localStorage[WIDGET_TOKEN_KEY]`.
    pub token: Option<String>,
    /// Whether the widget server received [`CHIPS_COOKIE`] with [`CHIPS_VALUE`].
    pub chips_cookie_seen_by_server: bool,
}

impl Report {
    /// What `report()` returns after `seed()`.
    pub fn seeded() -> Report {
        Report {
            session: Some(SESSION_VALUE.to_owned()),
            idb: IdbReport {
                exists: true,
                version: Some(IDB_VERSION),
                stores: vec![BLOBS_STORE.to_owned(), NOTES_STORE.to_owned()],
                schema: IdbSchema {
                    notes_key_path: Some("id".to_owned()),
                    notes_auto_increment: Some(true),
                    by_tag_key_path: Some("tag".to_owned()),
                    by_tag_unique: Some(false),
                    blobs_key_path: None,
                },
                notes_count: Some(NOTES_COUNT),
                by_tag_count: Some(BY_TAG_COUNT),
                date_ok: true,
                bytes_ok: true,
                map_ok: true,
                set_ok: true,
                array_buffer_ok: true,
                blob_ok: true,
            },
            widget: WidgetReport {
                loaded: true,
                token: Some(WIDGET_TOKEN.to_owned()),
                chips_cookie_seen_by_server: true,
            },
        }
    }

    /// What `report()` returns in a browser that holds none of the state.
    pub fn fresh() -> Report {
        Report {
            session: None,
            idb: IdbReport {
                exists: false,
                version: None,
                stores: Vec::new(),
                schema: IdbSchema {
                    notes_key_path: None,
                    notes_auto_increment: None,
                    by_tag_key_path: None,
                    by_tag_unique: None,
                    blobs_key_path: None,
                },
                notes_count: None,
                by_tag_count: None,
                date_ok: false,
                bytes_ok: false,
                map_ok: false,
                set_ok: false,
                array_buffer_ok: false,
                blob_ok: false,
            },
            widget: WidgetReport {
                loaded: true,
                token: None,
                chips_cookie_seen_by_server: false,
            },
        }
    }

    /// Each seeded piece by name (`"session"`, `"idb.schema"`, `"widget.chips"`, …) and
    /// whether this report shows it as [`seeded`](Self::seeded) does.
    pub fn pieces(&self) -> Vec<(&'static str, bool)> {
        let want = Report::seeded();
        let (idb, want_idb) = (&self.idb, &want.idb);
        vec![
            ("session", self.session == want.session),
            (
                "idb.database",
                idb.exists && idb.version == want_idb.version,
            ),
            ("idb.stores", idb.stores == want_idb.stores),
            ("idb.schema", idb.schema == want_idb.schema),
            ("idb.notesCount", idb.notes_count == want_idb.notes_count),
            ("idb.byTagCount", idb.by_tag_count == want_idb.by_tag_count),
            ("idb.date", idb.date_ok),
            ("idb.bytes", idb.bytes_ok),
            ("idb.map", idb.map_ok),
            ("idb.set", idb.set_ok),
            ("idb.arrayBuffer", idb.array_buffer_ok),
            ("idb.blob", idb.blob_ok),
            ("widget.token", self.widget.token == want.widget.token),
            ("widget.chips", self.widget.chips_cookie_seen_by_server),
        ]
    }

    /// The names of the pieces this report lacks (empty after `seed()`).
    pub fn missing(&self) -> Vec<&'static str> {
        self.pieces()
            .into_iter()
            .filter_map(|(name, ok)| (!ok).then_some(name))
            .collect()
    }

    /// The names of the pieces this report has (empty in a fresh browser).
    pub fn present(&self) -> Vec<&'static str> {
        self.pieces()
            .into_iter()
            .filter_map(|(name, ok)| ok.then_some(name))
            .collect()
    }
}

type Hits = Arc<Mutex<Vec<Hit>>>;

/// Binds the app and the widget on `127.0.0.1:0` each and serves both on a new tokio task.
///
/// # Errors
///
/// If a listener cannot be bound.
pub async fn spawn() -> io::Result<TwoSite> {
    let app = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let widget = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let origins = Origins {
        app: format!("http://127.0.0.1:{}", app.local_addr()?.port()),
        widget: format!("http://localhost:{}", widget.local_addr()?.port()),
    };
    let hits = Hits::default();
    let server =
        Listening::spawn(|stop| run(app, widget, origins.clone(), Arc::clone(&hits), stop));
    Ok(TwoSite {
        origins,
        hits,
        server,
    })
}

#[derive(Debug, Clone)]
struct Origins {
    app: String,
    widget: String,
}

#[tracing::instrument(name = "twosite", skip_all, fields(app = %origins.app, widget = %origins.widget))]
async fn run(
    app: TcpListener,
    widget: TcpListener,
    origins: Origins,
    hits: Hits,
    stop: Stop,
) -> io::Result<()> {
    tracing::debug!("serving");
    let app_page = Arc::new(page(APP_HTML, &origins));
    let widget_page = Arc::new(page(WIDGET_HTML, &origins));
    let app_router = Router::new()
        .route(
            APP_PATH,
            get(|| async move { Html(app_page.as_str().to_owned()) }),
        )
        .layer(middleware::from_fn_with_state(
            (Side::App, Arc::clone(&hits)),
            count,
        ));
    let widget_router = Router::new()
        .route(
            WIDGET_PATH,
            get(|| async move { Html(widget_page.as_str().to_owned()) }),
        )
        .route(WIDGET_COOKIE_PATH, get(set_chips_cookie))
        .route(WIDGET_WHOAMI_PATH, get(whoami))
        .layer(middleware::from_fn_with_state((Side::Widget, hits), count));
    let serve = |listener, router, stop: Stop| {
        axum::serve(listener, router)
            .with_graceful_shutdown(stop.requested())
            .into_future()
    };
    tokio::try_join!(
        serve(app, app_router, stop.clone()),
        serve(widget, widget_router, stop),
    )?;
    Ok(())
}

/// `html` with the configuration (origins, keys, the values to seed) filled in.
fn page(html: &str, origins: &Origins) -> String {
    let config = serde_json::json!({
        "appOrigin": origins.app,
        "widgetOrigin": origins.widget,
        "widgetTimeoutMs": WIDGET_TIMEOUT.as_millis() as u64,
        "sessionKey": SESSION_KEY,
        "sessionValue": SESSION_VALUE,
        "tokenKey": WIDGET_TOKEN_KEY,
        "tokenValue": WIDGET_TOKEN,
        "cookiePath": WIDGET_COOKIE_PATH,
        "whoamiPath": WIDGET_WHOAMI_PATH,
        "idb": {
            "name": IDB_NAME,
            "version": IDB_VERSION,
            "notes": NOTES_STORE,
            "byTag": BY_TAG_INDEX,
            "blobs": BLOBS_STORE,
            "blobKey": BLOB_KEY,
            "fixed": {
                "tag": NOTE_TAG,
                "dateMs": NOTE_DATE_MS,
                "bytes": NOTE_BYTES,
                "mapEntries": [
                    [NOTE_META_TEXT.0, NOTE_META_TEXT.1],
                    [NOTE_META_NUMBER.0, NOTE_META_NUMBER.1],
                ],
                "setValues": BLOB_SET,
                "bufferBytes": BLOB_BUFFER,
                "blobText": BLOB_TEXT,
                "blobType": BLOB_TYPE,
            },
        },
    });
    // JSON is a JS literal; escaping `<` keeps a value from ending the script.
    let config = config.to_string().replace('<', "\\u003c");
    let widget_src = format!("{}{WIDGET_PATH}", origins.widget);
    html.replace(CONFIG_SLOT, &config).replace(
        WIDGET_SRC_SLOT,
        &html_escape::encode_double_quoted_attribute(&widget_src),
    )
}

/// Records every request before routing it.
async fn count(State((side, hits)): State<(Side, Hits)>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    tracing::trace!(?side, path, "hit");
    hits.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Hit { side, path });
    next.run(request).await
}

async fn set_chips_cookie() -> Response {
    let cookie =
        format!("{CHIPS_COOKIE}={CHIPS_VALUE}; Secure; SameSite=None; Partitioned; Path=/");
    ([(SET_COOKIE, cookie)], no_store(), "set").into_response()
}

async fn whoami(headers: HeaderMap) -> Response {
    let chips = cookie(&headers, CHIPS_COOKIE) == Some(CHIPS_VALUE);
    (no_store(), Json(serde_json::json!({ "chips": chips }))).into_response()
}

fn no_store() -> [(axum::http::HeaderName, HeaderValue); 1] {
    [(CACHE_CONTROL, HeaderValue::from_static("no-store"))]
}

/// The two running servers started by [`spawn`]. Dropping it stops both at once;
/// [`shutdown`](Self::shutdown) stops them gracefully and reports how they ended.
pub struct TwoSite {
    origins: Origins,
    hits: Hits,
    server: Listening,
}

impl TwoSite {
    /// The app's origin, `http://127.0.0.1:P`, with no trailing slash.
    pub fn app_origin(&self) -> &str {
        &self.origins.app
    }

    /// The widget's origin, `http://localhost:Q`, with no trailing slash.
    pub fn widget_origin(&self) -> &str {
        &self.origins.widget
    }

    /// The app page, `{app_origin}/app`: where a task navigates.
    pub fn app_url(&self) -> String {
        format!("{}{APP_PATH}", self.origins.app)
    }

    /// The widget page, `{widget_origin}/widget` (the iframe's `src`).
    pub fn widget_url(&self) -> String {
        format!("{}{WIDGET_PATH}", self.origins.widget)
    }

    /// Every request either server received so far, oldest first.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// How many requests for `path` reached `side`.
    pub fn hit_count(&self, side: Side, path: &str) -> usize {
        self.hits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|hit| hit.side == side && hit.path == path)
            .count()
    }

    /// Stops accepting connections on both listeners, waits for requests in flight, and
    /// returns once both are closed.
    ///
    /// # Errors
    ///
    /// A server's own error, or an error of kind `Other` if their task panicked.
    pub async fn shutdown(self) -> io::Result<()> {
        self.server.shutdown().await
    }
}

impl fmt::Debug for TwoSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoSite")
            .field("app", &self.origins.app)
            .field("widget", &self.origins.widget)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_get_their_configuration() {
        let origins = Origins {
            app: "http://127.0.0.1:1".to_owned(),
            widget: "http://localhost:2".to_owned(),
        };
        for html in [APP_HTML, WIDGET_HTML] {
            let page = page(html, &origins);
            assert!(!page.contains("__TWOSITE_"), "a slot is left: {page}");
            assert!(page.contains(r#""widgetOrigin":"http://localhost:2""#));
            assert!(page.contains(r#""appOrigin":"http://127.0.0.1:1""#));
        }
        assert!(page(APP_HTML, &origins).contains(r#"src="http://localhost:2/widget""#));
    }

    #[test]
    fn a_fresh_report_lacks_every_piece_and_a_seeded_one_has_all() {
        assert_eq!(Report::seeded().missing(), Vec::<&str>::new());
        assert_eq!(Report::fresh().present(), Vec::<&str>::new());
        let json = serde_json::to_value(Report::fresh()).unwrap();
        assert_eq!(json["widget"]["chipsCookieSeenByServer"], false);
        assert_eq!(json["idb"]["byTagCount"], serde_json::Value::Null);
    }
}
