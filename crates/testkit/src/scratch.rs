//! [`ScratchDatabase`]: a PostgreSQL database of a test's (or a benchmark's) own.

use std::fmt;

use sqlx::PgPool;

/// The variable naming the PostgreSQL server the test suites create their databases on.
pub const TEST_DATABASE_ENV: &str = "OUTLIVE_TEST_DATABASE_URL";

/// A database of its own on a PostgreSQL server, for tests and benchmarks: created with a
/// unique name next to the one `base` points at, dropped (with its connections) by
/// [`ScratchDatabase::drop_now`]. Nothing drops it on `Drop` (that would need a runtime): a
/// test that panics leaves it, named `{prefix}_{uuid}`.
pub struct ScratchDatabase {
    admin: PgPool,
    name: String,
    url: String,
}

/// Why a scratch database could not be made or dropped. Never carries the URL's password.
#[derive(Debug)]
pub enum ScratchError {
    /// The prefix is not 1 to 30 of `a-z`, `0-9` and `_`, starting with a letter or `_`.
    BadPrefix,
    /// The base URL is not a URL, or names its database with `?dbname=`.
    BadUrl(&'static str),
    /// The server could not be reached, or refused; `what` says at which step.
    Database {
        /// "connecting", "creating it" or "dropping it".
        what: &'static str,
        /// What the driver said.
        source: sqlx::Error,
    },
}

impl fmt::Display for ScratchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScratchError::BadPrefix => f.write_str(
                "a scratch database prefix is 1 to 30 of a-z, 0-9 and _, not starting with a digit",
            ),
            ScratchError::BadUrl(why) => write!(f, "the base database URL: {why}"),
            ScratchError::Database { what, .. } => {
                write!(f, "PostgreSQL failed while {what} a scratch database")
            }
        }
    }
}

impl std::error::Error for ScratchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ScratchError::Database { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ScratchDatabase {
    /// Creates `{prefix}_{uuid}` on the server `base` points at (`base` must allow
    /// `CREATE DATABASE`).
    ///
    /// # Errors
    ///
    /// [`ScratchError::BadPrefix`] and [`ScratchError::BadUrl`] before connecting;
    /// [`ScratchError::Database`] if the server cannot be reached or refuses.
    pub async fn create(base: &str, prefix: &str) -> Result<ScratchDatabase, ScratchError> {
        // An unquoted identifier PostgreSQL keeps as written (no case folding, no cut at 63
        // bytes with the 33 the suffix adds).
        let plain = prefix.len() <= 30
            && prefix.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(ScratchError::BadPrefix);
        }
        let mut url = url::Url::parse(base).map_err(|_| ScratchError::BadUrl("not a URL"))?;
        if url.query_pairs().any(|(k, _)| k == "dbname") {
            // It would name the database instead of the path: the scratch URL would point
            // at the base database.
            return Err(ScratchError::BadUrl(
                "name the database in the URL's path, not with ?dbname=",
            ));
        }
        let admin = PgPool::connect(base)
            .await
            .map_err(|source| ScratchError::Database {
                what: "connecting for",
                source,
            })?;
        // Letters, digits and `_` only (the prefix is checked above): safe to splice.
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .map_err(|source| ScratchError::Database {
                what: "creating",
                source,
            })?;
        url.set_path(&name);
        Ok(ScratchDatabase {
            admin,
            name,
            url: url.to_string(),
        })
    }

    /// A database of a test's own on the server [`TEST_DATABASE_ENV`] names, its commits not
    /// waiting for the disk: on a machine whose disk stalls for seconds (other builds), a
    /// worker's 1 s lease renewals would otherwise miss their 2 s self-stop deadline. (A lost
    /// commit on a crash of the test server is no concern here.)
    ///
    /// # Panics
    ///
    /// If the variable is unset or the server refuses: the test cannot go on without it.
    pub async fn for_test() -> ScratchDatabase {
        let base = std::env::var(TEST_DATABASE_ENV).expect(
            "OUTLIVE_TEST_DATABASE_URL: run the tests through scripts/test (it starts a local \
             PostgreSQL with scripts/postgres), or point it at a database you may create \
             databases in",
        );
        let db = ScratchDatabase::create(&base, "outlive_test")
            .await
            .expect("a scratch database on the server at OUTLIVE_TEST_DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} SET synchronous_commit = off",
            db.name
        )))
        .execute(&db.admin)
        .await
        .expect("synchronous_commit off on the scratch database");
        db
    }

    /// Its URL (the base URL with this database's name).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Drops the database, ending any connection still open to it.
    ///
    /// # Errors
    ///
    /// [`ScratchError::Database`] if the server refuses.
    pub async fn drop_now(self) -> Result<(), ScratchError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await
        .map_err(|source| ScratchError::Database {
            what: "dropping",
            source,
        })?;
        self.admin.close().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_prefix_or_url_is_refused_before_connecting() {
        let long = "p".repeat(31);
        for (base, prefix, bad_url) in [
            ("postgres://u:secret@127.0.0.1:1/db", "x; DROP", false),
            ("postgres://u:secret@127.0.0.1:1/db", "ünï", false),
            ("postgres://u:secret@127.0.0.1:1/db", "Upper", false),
            ("postgres://u:secret@127.0.0.1:1/db", "1st", false),
            ("postgres://u:secret@127.0.0.1:1/db", "", false),
            ("postgres://u:secret@127.0.0.1:1/db", long.as_str(), false),
            (
                "postgres://u:secret@127.0.0.1:1/db?dbname=db",
                "ok_prefix",
                true,
            ),
            ("not a url secret", "ok_prefix", true),
        ] {
            let Err(e) = ScratchDatabase::create(base, prefix).await else {
                panic!("{prefix:?} on {base:?} was taken");
            };
            match (&e, bad_url) {
                (ScratchError::BadPrefix, false) | (ScratchError::BadUrl(_), true) => {}
                _ => panic!("{prefix:?} on {base:?}: {e:?}"),
            }
            assert!(!format!("{e} {e:?}").contains("secret"), "{e:?}");
        }
    }
}
