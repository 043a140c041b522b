//! [`SessionLimit`]: at most N browser sessions at once across every worker, through
//! PostgreSQL advisory locks.
//!
//! A launch takes one of `max` session-level advisory locks on a connection of its own and
//! keeps that connection (and so the lock) until its session is released; a worker that dies
//! loses its connections and with them its locks. A launch that finds every slot taken waits
//! on the same connection, with no new connection per try. It waits for a `NOTIFY` from a
//! release (one `LISTEN`ing connection per [`SessionLimit`]). As a fallback for slots freed by
//! a dead worker's lost connections, it waits for a backoff of at most 2 s.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use outlive::{BoxFuture, Provider, Session};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tokio::sync::Notify;

use crate::error::{Error, ErrorKind};
use crate::held::{OnRelease, Wrapped};

/// The advisory lock class of session slots ("outl").
const SLOT_CLASS: i32 = 0x6f75_746c;

/// How a slot's connection names itself in `pg_stat_activity`.
pub const SLOT_APPLICATION: &str = "outlive session slot";

/// How the listening connection names itself in `pg_stat_activity`.
pub const LISTENER_APPLICATION: &str = "outlive session slots listener";

/// The channel a release notifies and waiting launches listen on.
const FREED: &str = "outlive_session_slot_freed";

/// At most `max` browser sessions at once across every process using the same database (see
/// the module's documentation). Launches wait for a free slot.
pub struct SessionLimit<P> {
    inner: P,
    url: String,
    max: u32,
    freed: Arc<Notify>,
    /// The task that turns `NOTIFY`s into `freed` wake-ups; aborted on drop.
    listener: tokio::task::JoinHandle<()>,
}

impl<P> Drop for SessionLimit<P> {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl<P: Provider> SessionLimit<P> {
    /// `inner`'s launches, capped at `max` sessions across everything using `database_url`.
    /// Must be called inside a Tokio runtime (it starts the listener).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidOption`] when `max` is 0.
    pub fn new(inner: P, database_url: impl Into<String>, max: u32) -> Result<Self, Error> {
        if max == 0 {
            return Err(Error::new(ErrorKind::InvalidOption {
                option: "max_sessions",
                message: "must be at least 1",
            }));
        }
        let url = database_url.into();
        let freed = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(url.clone(), freed.clone()));
        Ok(SessionLimit {
            inner,
            url,
            max,
            freed,
            listener,
        })
    }

    /// Waits for a slot, on one connection, and answers it holding the slot's lock.
    async fn slot(&self) -> Result<PgConnection, sqlx::Error> {
        let options = PgConnectOptions::from_str(&self.url)?.application_name(SLOT_APPLICATION);
        let mut conn = PgConnection::connect_with(&options).await?;
        let mut fallback = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .without_max_times()
            .with_jitter()
            .build();
        loop {
            // Registered before the try, so a release between the try and the wait counts.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = try_slot(&mut conn, self.max).await? {
                tracing::debug!(slot, "session slot taken");
                return Ok(conn);
            }
            let pause = fallback.next().unwrap_or(Duration::from_secs(2));
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// The first free slot, locked on `conn`; `None` when all `max` are held.
async fn try_slot(conn: &mut PgConnection, max: u32) -> Result<Option<i32>, sqlx::Error> {
    // One query per slot: a locking function in a WHERE with LIMIT may lock more rows than
    // the LIMIT returns (PostgreSQL's advisory-lock documentation).
    for slot in 0..max as i32 {
        let (held,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1, $2)")
            .bind(SLOT_CLASS)
            .bind(slot)
            .fetch_one(&mut *conn)
            .await?;
        if held {
            return Ok(Some(slot));
        }
    }
    Ok(None)
}

/// Wakes every waiting launch on each release's `NOTIFY`, reconnecting after a lost
/// connection (the fallback backoff covers what was missed meanwhile).
async fn listen(url: String, freed: Arc<Notify>) {
    loop {
        let listener = match PgConnectOptions::from_str(&url) {
            Ok(options) => {
                let options = options.application_name(LISTENER_APPLICATION);
                match PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await
                {
                    Ok(pool) => PgListener::connect_with(&pool).await,
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match listener {
            Ok(mut listener) => {
                if let Err(e) = listener.listen(FREED).await {
                    tracing::debug!(error = %e, "session slots: LISTEN failed");
                } else {
                    while listener.recv().await.is_ok() {
                        freed.notify_waiters();
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "session slots: no listening connection"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl<P: Provider> Provider for SessionLimit<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn launch(&self) -> BoxFuture<'_, Result<Box<dyn Session>, outlive::Error>> {
        Box::pin(async move {
            let slot = self.slot().await.map_err(|e| {
                outlive::Error::provider(
                    outlive::ProviderFailure::Launch,
                    "PostgreSQL did not give a session slot",
                )
                .caused_by(e)
            })?;
            let session = self.inner.launch().await?;
            Ok(Box::new(Wrapped {
                inner: session,
                then: FreeSlot(slot),
            }) as Box<dyn Session>)
        })
    }

    fn release_id(&self, id: &str) -> BoxFuture<'_, Result<(), outlive::Error>> {
        self.inner.release_id(id)
    }
}

/// What a limited session's release does: free the slot it holds until then.
struct FreeSlot(PgConnection);

impl OnRelease for FreeSlot {
    fn release(self, inner: Box<dyn Session>) -> BoxFuture<'static, Result<(), outlive::Error>> {
        let FreeSlot(mut slot) = self;
        Box::pin(async move {
            let released = inner.release().await;
            // Unlocked before the notification, so a woken launch finds the slot free;
            // closing the connection would free it anyway.
            let _ = sqlx::query("SELECT pg_advisory_unlock_all()")
                .execute(&mut slot)
                .await;
            let _ = sqlx::query("SELECT pg_notify($1, '')")
                .bind(FREED)
                .execute(&mut slot)
                .await;
            let _ = slot.close().await;
            released
        })
    }
}

// Dropped without `release`: the inner session's own `Drop` ends it, and dropping the
// connection closes its socket, which frees the lock on the server (no notification: the
// waiting launches' fallback backoff finds it).
