//! A PostgreSQL database of a test's own.

use outlive_cli::durable::PgStore;

/// A database of the test's own, dropped by [`Scratch::drop_now`].
pub struct Scratch {
    admin: sqlx::PgPool,
    name: String,
    pub url: String,
}

impl Scratch {
    pub async fn create() -> Scratch {
        let base = std::env::var("OUTLIVE_TEST_DATABASE_URL").expect(
            "OUTLIVE_TEST_DATABASE_URL: run the tests through scripts/test (it starts a local \
             PostgreSQL with scripts/postgres), or point it at a database you may create \
             databases in",
        );
        let admin = sqlx::PgPool::connect(&base)
            .await
            .expect("PostgreSQL reachable at OUTLIVE_TEST_DATABASE_URL");
        let name = format!("outlive_test_{}", uuid::Uuid::new_v4().simple());
        // The name is ours (a UUID), never input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .unwrap();
        let mut url = url::Url::parse(&base).unwrap();
        url.set_path(&name);
        Scratch {
            admin,
            name,
            url: url.to_string(),
        }
    }

    pub async fn drop_now(self, store: PgStore) {
        store.pool().close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await
        .unwrap();
    }
}
