//! A Solari-compatible cloud-browser gateway whose sessions die on schedule.
//!
//! The gateway speaks Solari's REST contract, so the official `solari-browser` client (and the
//! Python and TypeScript SDKs) drive it unmodified. Each session is a real headless Chromium
//! (launched by [`outlive::LocalChromium`]) behind a websocket relay. At its death time the
//! browser is killed and the client sees a close frame, a TCP reset, or silence. Meanwhile
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
//! | `POST /sessions` | `201 {sessionId, id, status, wsEndpoint, cdpEndpoint, createdAt, expiresAt, userMetadata?}`; `Idempotency-Key` replays the first success (`409 IdempotencyKeyInUse`, `retryable: true`, while it runs); `429 ConcurrencyLimitExceeded`; `400 InvalidJson` / `ValidationError`; `413 PayloadTooLarge` over 64 KiB (at once if `Content-Length` says so); `503 BrowserUnhealthy` if Chromium cannot start |
//! | `GET /sessions/:id` | `200 {id, status, …}`: `active` while unreleased (`ended` for a dead one if [`Config::honest`]), `released` after `DELETE`; endpoints only while `active` |
//! | `GET /sessions` | `200 {sessions: [{id, status, …}], nextCursor}`; `limit`, `cursor`, and Solari's `q=user_metadata['k']:'v' AND …` filter |
//! | `DELETE /sessions/:id` | `204`, also for an already released session; kills Chromium and closes the relay (`404 InvalidSessionId` for an id this gateway never issued) |
//! | unknown or malformed id | `404 InvalidSessionId` (ids are hyphenated UUIDs; braced, `urn:uuid:` or bare-hex spellings are malformed) |
//! | a known route, another method | `405 MethodNotAllowed` |
//! | `GET /cdp/:id?token=…` | websocket upgrade to the session's CDP relay (after its death: `101`, then close `1011`); `401` wrong token, `404` unknown session, `409 SessionBusy` while another client is connected, `410 SessionReleased` |
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
//! * `POST /__chaos/sessions/:id/kill[?mode=close|reset|silence|mixed]` → `200 {id, death}`
//!   once Chromium is gone; without `mode` the session dies the death it was created with
//!   (`404 InvalidSessionId`; `409 SessionEnded` if already dead). In process:
//!   [`Gateway::kill`];
//! * `GET /__chaos/status` → `{liveSessions, deadSessions, chromiumProcesses, peakSessions,
//!   stallsHit}` (`peakSessions`: the most sessions held at once since the start;
//!   `stallsHit`: see [Weather](#weather)).
//!
//! ## Control-plane faults
//!
//! The next creates or deletes can fail on purpose ([`Gateway::fail_creates`],
//! [`Gateway::fail_deletes`], [`Gateway::clear_faults`], or over REST):
//!
//! * `POST /__chaos/faults` with a JSON object of optional members, applied in this order
//!   once all are valid (else `400 InvalidJson` / `ValidationError` and nothing changes):
//!   * `"clear": true` drops every queued fault;
//!   * `"creates": {"count": N, "status": S}`: the next `N` creates answer `S` (400–599) with
//!     the body a real refusal carries (`503 BrowserUnhealthy`, `429
//!     ConcurrencyLimitExceeded`, `500 InternalError`, …); no browser starts. `N = 0` clears;
//!   * `"deletes": {"count": N, "status": S}` or `"deletes": {"count": N, "hang": true}`: the
//!     next `N` deletes (no `count`: every one, until cleared) answer `S`, or never answer.
//!     Either way the session's Chromium is killed first and the session stays unreleased
//!     (dead, in `deadSessions`) until a delete that is not faulted releases it.
//!
//!   Each member replaces the fault of its kind. The answer, like `GET /__chaos/faults`, is
//!   `200 {"creates": {"remaining", "status"} | null, "deletes": {"remaining" (null: until
//!   cleared), "status" | "hang": true} | null, "createsFaulted": n, "deletesFaulted": n}`.
//!
//! Faults are taken per HTTP request, after auth and validation (a delete only for an id the
//! gateway issued), so a client's own retries each take one; a faulted create never records
//! or replays its `Idempotency-Key`.
//!
//! A connection open at the death meets the death itself. One that arrives after it gets a
//! close frame `1011` ("the browser is unreachable") at once. The browser is gone, and a
//! proxy cannot reach it.
//!
//! ## Page faults
//!
//! A session's pages can die while its browser, and the client's relay connection, live on:
//! every page target crashes or is closed, as [`PageFault`] says. A crash is CDP `Page.crash`
//! (clients see `Target.targetCrashed`, or `Inspector.targetCrashed` on an attached session).
//! A close is `Target.closeTarget` (clients see `Target.targetDestroyed`). This tests a task's
//! handling of a dead tab rather than a dead browser.
//!
//! * On a schedule: [`Config::page_fault`] faults each session's pages once, a fixed time
//!   after its create (the session still dies at its own time). One session can choose for
//!   itself through `userMetadata`: `"chaos.pageFault"`: `crash` | `close`, and
//!   `"chaos.pageFaultAfterMs"`: when; either alone takes the other from the config, which
//!   must then have one (else `400 ValidationError` naming the key).
//! * On demand: [`Gateway::fail_page`], which answers once each page is seen crashed or gone.
//!
//! # Weather
//!
//! A bad network is not a death. [`Config::weather`] makes the relay stall the browser's
//! frames to the client ([`Weather`]): each connection on its own schedule
//! ([`Weather::flows`]), the whole link at once ([`Weather::link`]), and a random delay per
//! frame ([`Weather::frame_jitter`]). Held frames are delivered, in order, when the hold
//! ends; nothing is dropped, and the client's frames to the browser pass untouched.
//! [`Status::stalls_hit`] (`stallsHit`) counts the stalls that held at least one frame.
//!
//! # Layout
//!
//! * [`config`]: [`Config`], [`DeathMode`] and [`PageFault`], validated once.
//! * `server`: the accept loop ([`serve`]) and the in-process handle ([`spawn`], [`Gateway`]).
//! * `api`: the REST routes, auth, and JSON errors.
//! * `dialect`: the other clouds' session APIs ([`DIALECTS`]), each under its own prefix.
//! * `session`: the session registry, one keeper task per browser, and orderly shutdown.
//! * `relay`: the hand-made websocket upgrade and the CDP relay, which carries out each death
//!   and the weather.
//! * `chaos`: when and how each session dies, and when its pages do.
//! * `weather`: [`Weather`], and the stalls it drives on each relay connection and the link.
//! * `page`: page faults, over a CDP connection of the gateway's own to the browser.
//! * `fault`: the control-plane faults ([`DeleteFault`], [`FaultCounters`]) queued for the
//!   next creates and deletes.
//! * `websocket`: the one websocket configuration, and the connector to a browser.
//! * `chromium`: the browser per session, and the process-group accounting behind
//!   [`Status::chromium_processes`].
//! * [`error`]: the one error type.
#![forbid(unsafe_code)]

mod api;
mod chaos;
mod chromium;
pub mod config;
mod dialect;
pub mod error;
mod fault;
mod page;
mod relay;
mod server;
mod session;
mod weather;
mod websocket;

pub use config::{Config, DeathMode, PageFault, ParseDeathModeError, ParsePageFaultError};
pub use dialect::DIALECTS;
pub use error::{Error, ErrorKind};
pub use fault::{DeleteFault, FaultCounters};
pub use server::{Gateway, serve, spawn};
pub use session::Status;
pub use weather::Weather;
