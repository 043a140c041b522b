//! A Solari-compatible cloud-browser gateway whose sessions die on schedule.
//!
//! The gateway speaks Solari's REST contract, so the official `solari-browser` client (and the
//! Python and TypeScript SDKs) drive it unmodified. Each session is a real headless Chromium
//! (launched by [`outlive::LocalChromium`]) behind a websocket relay; at its death time the
//! browser is killed and the client sees a close frame, a TCP reset, or silence — while
//! `GET /sessions/:id` keeps saying `"active"`, as Solari's control plane does. It is the test
//! bed for outlive's death detection and recovery.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! let gw = gateway::spawn(
//!     gateway::Config::new()
//!         .lifetime(Duration::from_secs(30))
//!         .jitter(Duration::from_secs(5))
//!         .death(gateway::DeathMode::Mixed),
//! )
//! .await?;
//! // Point a Solari client at gw.base_url() with gw.api_key() …
//! let status = gw.shutdown().await?;
//! assert_eq!(status.chromium_processes, 0);
//! # Ok(()) }
//! ```
//!
//! # REST
//!
//! All routes but `/cdp` need `Authorization: Bearer <api key>`; errors are JSON
//! `{"error": …, "code": …}`.
//!
//! | route | answer |
//! |---|---|
//! | `POST /sessions` | `201 {sessionId, id, status, wsEndpoint, cdpEndpoint, createdAt, expiresAt, userMetadata?}`; `Idempotency-Key` replays the first success (`409 IdempotencyKeyInUse`, `retryable: true`, while it runs); `429 ConcurrencyLimitExceeded`; `400 InvalidJson` / `ValidationError`; `413 PayloadTooLarge` over 64 KiB; `503 BrowserUnhealthy` if Chromium cannot start |
//! | `GET /sessions/:id` | `200 {id, status, …}`: `active` while unreleased (`ended` for a dead one if [`Config::honest`]), `released` after `DELETE`; endpoints only while `active` |
//! | `GET /sessions` | `200 {sessions: [{id, status, …}], nextCursor}`; `limit`, `cursor`, and Solari's `q=user_metadata['k']:'v' AND …` filter |
//! | `DELETE /sessions/:id` | `204`, also for an already released session; kills Chromium and closes the relay |
//! | unknown or malformed id | `404 InvalidSessionId` |
//! | `GET /cdp/:id?token=…` | websocket upgrade to the session's CDP relay; `401` wrong token, `404` unknown session, `409 SessionBusy` while another client is connected, `410 SessionReleased` |
//!
//! `wsEndpoint` and `cdpEndpoint` are the same raw-CDP URL,
//! `ws://<host>/cdp/<sessionId>?token=<per-session capability>` (there is no Playwright
//! protocol server); `<host>` is the `Host` the client used.
//!
//! # Chaos
//!
//! A session dies `lifetime ± jitter` after its create ([`Config::lifetime`],
//! [`Config::jitter`]), or at `timeoutSeconds` if the create asked for less, with
//! [`Config::death`]; with probability [`Config::doa`] it is dead on arrival. One session can
//! choose for itself through the create's `userMetadata` (which the `solari-browser` client
//! passes through): `"chaos.death"`: `close` | `reset` | `silence` | `mixed` | `doa`, and
//! `"chaos.lifetimeMs"`: its exact lifetime. To kill on demand:
//!
//! - `POST /__chaos/sessions/:id/kill[?mode=close|reset|silence|mixed]` → `200 {id, death}`
//!   once Chromium is gone; without `mode` the session dies the death it was created with
//!   (`404 InvalidSessionId`; `409 SessionEnded` if already dead). In process:
//!   [`Gateway::kill`];
//! - `GET /__chaos/status` → `{liveSessions, deadSessions, chromiumProcesses}`.
//!
//! A client connecting to a dead session gets that death at once.
//!
//! # Layout
//!
//! - [`config`]: [`Config`] and [`DeathMode`], validated once.
//! - `server`: the accept loop ([`serve`]) and the in-process handle ([`spawn`], [`Gateway`]).
//! - `api`: the REST routes, auth, and JSON errors.
//! - `session`: the session registry, one keeper task per browser, and orderly shutdown.
//! - `relay`: the hand-made websocket upgrade and the CDP relay, which carries out each death.
//! - `chaos`: when and how each session dies.
//! - `chromium`: the browser per session, and the process-group accounting behind
//!   [`Status::chromium_processes`].
//! - [`error`]: the one error type.
#![forbid(unsafe_code)]

mod api;
mod chaos;
mod chromium;
pub mod config;
pub mod error;
mod relay;
mod server;
mod session;

pub use config::{Config, DeathMode, ParseDeathModeError};
pub use error::{Error, ErrorKind};
pub use server::{Gateway, serve, spawn};
pub use session::Status;
