//! A PostgreSQL [`CheckpointStore`]: one row per run, holding the run's newest checkpoint as
//! outlive sealed it (ciphertext only), with the entry it was taken in.
//!
//! ```text
//! outlive_checkpoints(run_id text primary key, attempt integer, sealed bytea, saved_at timestamptz)
//! ```

use outlive::{BoxFuture, CheckpointStore};
use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::{Connection, PgPool};

use crate::error::{Error, db};

/// The table, created by [`PgStore::setup`] if missing.
const TABLE: &str = "CREATE TABLE IF NOT EXISTS outlive_checkpoints (
    run_id text PRIMARY KEY,
    attempt integer NOT NULL,
    sealed bytea NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now()
)";

/// Checkpoints in PostgreSQL. Cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
}

/// A run's newest checkpoint as stored: sealed, and the entry it was taken in.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The sealed checkpoint (for `Durable::resume`).
    pub sealed: Vec<u8>,
    /// The entry it was taken in: the entries made so far.
    pub attempt: u32,
}

impl PgStore {
    /// Connects to `url` (a `postgres://` URL; its password is never logged or put in an
    /// error) with a small pool.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) when the server cannot be reached or
    /// refuses the login.
    pub async fn connect(url: &str) -> Result<PgStore, Error> {
        Self::connect_with(url, 4).await
    }

    /// [`PgStore::connect`] with a pool of up to `max_connections` (at least 1). A worker
    /// needs a few per run it holds. Each run's lease renewals and checkpoint saves must not
    /// wait behind the others': an unrenewed lease stops the run.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) when the server cannot be reached or
    /// refuses the login.
    pub async fn connect_with(url: &str, max_connections: u32) -> Result<PgStore, Error> {
        // One connection first: a server that is down, or a login it refuses, fails it at
        // once, where the pool's own first connection is retried until its acquire timeout.
        let first = PgConnection::connect(url)
            .await
            .map_err(|e| db("connecting", e))?;
        let _ = first.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await
            .map_err(|e| db("connecting", e))?;
        Ok(PgStore { pool })
    }

    /// The pool, for queries of the caller's own.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates the checkpoint table if it is missing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database).
    pub async fn setup(&self) -> Result<(), Error> {
        sqlx::query(TABLE)
            .execute(&self.pool)
            .await
            .map_err(|e| db("creating the checkpoint table", e))?;
        Ok(())
    }

    /// The newest checkpoint of `run_id`, if one was saved.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database).
    pub async fn load(&self, run_id: &str) -> Result<Option<Saved>, Error> {
        let row: Option<(Vec<u8>, i32)> =
            sqlx::query_as("SELECT sealed, attempt FROM outlive_checkpoints WHERE run_id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| db("loading a checkpoint", e))?;
        Ok(row.map(|(sealed, attempt)| Saved {
            sealed,
            attempt: u32::try_from(attempt).unwrap_or(0),
        }))
    }
}

/// What [`CheckpointStore::save`] answers.
pub(crate) type Saving<'a> = BoxFuture<'a, Result<(), outlive::Error>>;

impl CheckpointStore for PgStore {
    fn save<'a>(&'a self, run_id: &'a str, attempt: u32, sealed: Vec<u8>) -> Saving<'a> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO outlive_checkpoints (run_id, attempt, sealed) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id) DO UPDATE
                 SET attempt = excluded.attempt, sealed = excluded.sealed, saved_at = now()",
            )
            .bind(run_id)
            .bind(i32::try_from(attempt).unwrap_or(i32::MAX))
            .bind(sealed)
            .execute(&self.pool)
            .await
            .map_err(save_failed)?;
            Ok(())
        })
    }
}

/// A checkpoint save the database did not do, as the run sees it.
pub(crate) fn save_failed(e: sqlx::Error) -> outlive::Error {
    outlive::Error::provider(
        outlive::ProviderFailure::Io,
        "PostgreSQL did not save the checkpoint",
    )
    .caused_by(e)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::PgStore;

    #[tokio::test]
    async fn a_server_that_is_not_there_is_said_at_once() {
        // Port 1 on loopback: nothing listens, the connection is refused.
        let began = Instant::now();
        let e = PgStore::connect("postgres://outlive:secret-pw@127.0.0.1:1/outlive")
            .await
            .unwrap_err();
        let took = began.elapsed();
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message += &format!(": {c}");
            cause = c.source();
        }
        assert!(took < Duration::from_secs(5), "{took:?}: {message}");
        assert!(message.contains("connecting"), "{message}");
        assert!(!message.contains("secret-pw"), "{message}");
    }
}
