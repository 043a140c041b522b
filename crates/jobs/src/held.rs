//! The sessions a worker holds for a run, recorded in the run's row (`held_sessions`: the
//! provider's name and the session's id, never a token). The worker that takes the run over
//! releases what a dead worker left: a remote session would otherwise stay up, billed, until
//! the provider's own timeout.

use std::sync::Arc;
use std::time::Duration;

use outlive::{BoxFuture, CdpEndpoint, Provider, Session};
use serde::Deserialize;
use sqlx::PgPool;

/// For a runs table created before sessions were recorded.
pub(crate) const HELD_COLUMN: &str = "ALTER TABLE outlive_runs
    ADD COLUMN IF NOT EXISTS held_sessions jsonb NOT NULL DEFAULT '[]'::jsonb";

/// How long each inherited session's release may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(15);

/// What a takeover released of the sessions its predecessors held: the wide event's
/// `takeoverReleased` and `takeoverReleaseFailed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Takeover {
    pub(crate) released: u32,
    pub(crate) failed: u32,
}

impl Takeover {
    /// `event` (a wide event's JSON) with the counts added, when there was anything to release.
    pub(crate) fn into_event(self, event: Option<String>) -> Option<String> {
        if self == Takeover::default() {
            return event;
        }
        let mut value: serde_json::Value = serde_json::from_str(event.as_deref()?).ok()?;
        let obj = value.as_object_mut()?;
        obj.insert("takeoverReleased".into(), self.released.into());
        obj.insert("takeoverReleaseFailed".into(), self.failed.into());
        Some(value.to_string())
    }
}

#[derive(Deserialize)]
struct Held {
    provider: String,
    id: String,
}

/// Releases every session recorded for `run_id` by `provider`, each within a timeout; a
/// released one leaves the record, one that failed stays for the next takeover. A session of
/// another provider (the workers disagree on it) is left, with a warning.
pub(crate) async fn release_inherited(
    pool: &PgPool,
    run_id: &str,
    provider: &dyn Provider,
) -> Result<Takeover, sqlx::Error> {
    let held: serde_json::Value =
        sqlx::query_scalar("SELECT held_sessions FROM outlive_runs WHERE run_id = $1")
            .bind(run_id)
            .fetch_one(pool)
            .await?;
    let held: Vec<Held> = serde_json::from_value(held).unwrap_or_default();
    let mut takeover = Takeover::default();
    for session in held {
        if session.provider != provider.name() {
            tracing::warn!(
                run_id,
                provider = session.provider,
                "a session held by a previous worker is of another provider: not released"
            );
            continue;
        }
        match tokio::time::timeout(RELEASE_TIMEOUT, provider.release_id(&session.id)).await {
            Ok(Ok(())) => {
                takeover.released += 1;
                forget(pool, run_id, &session.id).await?;
            }
            failed => {
                takeover.failed += 1;
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {RELEASE_TIMEOUT:?}"),
                };
                let error = outlive::redact::redact(&error, outlive::Diagnostics::Safe);
                tracing::warn!(run_id, session = session.id, %error, "a session a previous worker held was not released");
            }
        }
    }
    if takeover != Takeover::default() {
        tracing::info!(
            run_id,
            released = takeover.released,
            failed = takeover.failed,
            "released the sessions a previous worker held"
        );
    }
    Ok(takeover)
}

/// Drops session `id` from the run's record.
async fn forget(pool: &PgPool, run_id: &str, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outlive_runs SET held_sessions = COALESCE(
            (SELECT jsonb_agg(e) FROM jsonb_array_elements(held_sessions) e WHERE e->>'id' <> $2),
            '[]'::jsonb)
         WHERE run_id = $1",
    )
    .bind(run_id)
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// A worker's provider for one run it holds (pickup `pickup`): each session it launches is
/// recorded in the run's row while this pickup holds the run, and forgotten once released.
pub(crate) struct Recorded {
    pub(crate) inner: Arc<dyn Provider>,
    pub(crate) pool: PgPool,
    pub(crate) run_id: String,
    pub(crate) pickup: i32,
}

impl Recorded {
    async fn record(&self, id: &str) {
        let recorded = sqlx::query(
            "UPDATE outlive_runs SET held_sessions = held_sessions
                || jsonb_build_array(jsonb_build_object('provider', $3::text, 'id', $4::text))
             WHERE run_id = $1 AND pickups = $2",
        )
        .bind(&self.run_id)
        .bind(self.pickup)
        .bind(self.inner.name())
        .bind(id)
        .execute(&self.pool)
        .await;
        if let Err(e) = recorded {
            tracing::warn!(run_id = self.run_id, error = %e, "a session was not recorded: a worker taking the run over could not release it");
        }
    }
}

impl Provider for Recorded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let session = self.inner.launch().await?;
            let Some(id) = session.id().map(str::to_owned) else {
                return Ok(session);
            };
            self.record(&id).await;
            let then = Forget {
                pool: self.pool.clone(),
                run_id: self.run_id.clone(),
                id,
            };
            Ok(Box::new(Wrapped {
                inner: session,
                then,
            }) as Box<dyn Session>)
        })
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), outlive::Error>> {
        self.inner.release_id(id)
    }
}

/// A launched session with work of the worker's to do once it is released (forget its record,
/// free its slot); the inner session's otherwise, whose own `Drop` ends it if never released.
pub(crate) struct Wrapped<W> {
    pub(crate) inner: Box<dyn Session>,
    pub(crate) then: W,
}

/// What a [`Wrapped`] session does as it is released.
pub(crate) trait OnRelease: Send + Sync + 'static {
    /// The session's id: the inner session's, unless this says otherwise.
    fn id<'s>(&'s self, inner: &'s dyn Session) -> Option<&'s str> {
        inner.id()
    }

    /// Releases `inner`, then does this work; answers the release.
    fn release(self, inner: Box<dyn Session>) -> BoxFuture<'static, Result<(), outlive::Error>>;
}

impl<W: OnRelease> Session for Wrapped<W> {
    fn endpoint(&self) -> &CdpEndpoint {
        self.inner.endpoint()
    }

    fn exited(&self) -> BoxFuture<'static, ()> {
        self.inner.exited()
    }

    fn pid(&self) -> Option<u32> {
        self.inner.pid()
    }

    fn id(&self) -> Option<&str> {
        self.then.id(&*self.inner)
    }

    fn lifetime(&self) -> Option<Duration> {
        self.inner.lifetime()
    }

    fn second_connection(&self) -> bool {
        self.inner.second_connection()
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        let Wrapped { inner, then } = *self;
        then.release(inner)
    }
}

/// What a recorded session's release does: forget it in the run's row.
struct Forget {
    pool: PgPool,
    run_id: String,
    id: String,
}

impl OnRelease for Forget {
    fn id<'s>(&'s self, _: &'s dyn Session) -> Option<&'s str> {
        Some(&self.id)
    }

    fn release(self, inner: Box<dyn Session>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        let Forget { pool, run_id, id } = self;
        Box::pin(async move {
            inner.release().await?;
            if let Err(e) = forget(&pool, &run_id, &id).await {
                tracing::debug!(run_id, error = %e, "a released session stays recorded");
            }
            Ok(())
        })
    }
}
