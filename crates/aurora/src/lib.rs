//! Aurora Bank: a small, real web app for browser-automation tasks to run against in
//! tests, demos and benchmarks.
//!
//! One customer signs in with a password and a TOTP code, gets an `HttpOnly` session
//! cookie, and lands on an account page whose script depends on a `localStorage` value
//! written at sign-in. The page can be polled, and a transfer is deliberately
//! non-idempotent. So a task that survives a browser dying must carry cookies *and*
//! `localStorage` across, and must not repeat the transfer; the server's counters show
//! whether it did.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let bank = aurora::spawn(aurora::Config::new()).await?;
//! println!("sign in at {}/login with code {}", bank.base_url(), bank.config().current_totp());
//! assert_eq!(bank.counters().sign_ins, 0);
//! bank.shutdown().await
//! # }
//! ```
//!
//! # Routes
//!
//! | route | what it does |
//! |---|---|
//! | `GET /login` | form `#username`, `#password`, `#submit` |
//! | `POST /login` | right credentials: 303 to `/totp` with a 5-minute `HttpOnly` `aurora_pending` cookie; wrong: 401 with `#error` |
//! | `GET /totp` | form `#code`, `#submit` (303 to `/login` without a pending sign-in) |
//! | `POST /totp` | right code (±1 step): sets `aurora_session=…; HttpOnly; SameSite=Lax; Path=/`, 303 to `/account?welcome=1`; wrong: 401 with `#error` |
//! | `GET /account` | needs the session (else 303 to `/login`); shows `#balance`, `#polls`, `#server-time`, `#pref` |
//! | `GET /transfer` | form `#to`, `#amount` (cents), `#submit` |
//! | `POST /transfer` | needs the session; records a transfer, debits the balance, 303 to `/account` (422 if funds are short) |
//! | `GET /__counters` | [`Counters`] as JSON |
//! | `GET /__transfers` | the [`Transfer`]s as a JSON list |
//!
//! Malformed forms get 400 with `#error`, bodies over [`MAX_BODY_BYTES`] get 413.
//!
//! # The account page and `localStorage`
//!
//! The first account page a session is served with `?welcome=1` (where the TOTP step
//! redirects) writes [`Config::pref`] to `localStorage["aurora.pref"]`, then strips the
//! query from the URL. Every render shows the stored value in `#pref`; if it is missing,
//! `#pref` reads `MISSING` and `body` gets class `broken`. Later `?welcome=1` visits of
//! the same session write nothing, so a browser whose `localStorage` was not restored
//! stays visibly broken.
//!
//! # Twosite: state beyond cookies and `localStorage`
//!
//! [`twosite::spawn`] starts a second, separate app. It is a page on `http://127.0.0.1:P` that
//! embeds a cross-site widget iframe from `http://localhost:Q`. Its `twosite.seed()` writes
//! `sessionStorage`, an IndexedDB database (a keyPath store with an index, an out-of-line
//! store, values such as `Date`, `Map`, `Set`, typed arrays and a `Blob`), the widget's
//! partitioned `localStorage` and a CHIPS partitioned cookie. `twosite.report()` reads
//! them back as a [`twosite::Report`], so a test can tell exactly which piece a restored
//! browser lacks.
//!
//! # Layout
//!
//! - `config`: [`Config`], the customer and the server's starting state; [`ConfigError`].
//! - `totp`: [`TotpSecret`] and [`totp_now`], RFC 6238 codes via `totp-rs`.
//! - `bank`: the in-memory ledger: sessions, transfers, [`Counters`].
//! - `pages`: the HTML.
//! - `routes`: the handlers, cookies and input checks.
//! - `server`: [`serve`], [`spawn`] and the [`Aurora`] handle.
//! - `listening`: the task handle with graceful shutdown that [`Aurora`] and
//!   [`twosite::TwoSite`] hold.
//! - [`twosite`]: the two-site app, its pages (`twosite/*.html`), seeded values and report.

#![forbid(unsafe_code)]

mod bank;
mod config;
mod listening;
mod pages;
mod routes;
mod server;
mod totp;
pub mod twosite;

pub use bank::{Counters, Transfer};
pub use config::{Config, ConfigError};
pub use pages::PREF_KEY;
pub use routes::{MAX_BODY_BYTES, PENDING_COOKIE, SESSION_COOKIE};
pub use server::{Aurora, serve, spawn};
pub use totp::{DEFAULT_TOTP_SECRET, TotpSecret, totp_now};
