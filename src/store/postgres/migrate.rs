//! The Postgres store's migrations, run once however many sidecars start
//! together.
//!
//! Connected directly with the standard profile they run under sqlx's
//! session advisory lock, on a connection of their own. A session lock is
//! what neither a pooler in transaction mode (the lock and its unlock may
//! reach two server sessions) nor a distributed engine keeps, so with the
//! portable profile, or behind a pooler, they run instead in one
//! transaction while another, on a connection of its own, locks the row of
//! `stepwell_migration_lock`: a second sidecar waits on that row until the
//! first is done (or, if it died, until its transaction is rolled back),
//! then finds nothing left to do. The portable profile also builds the metadata index with plain
//! `jsonb_ops` in place of `jsonb_path_ops`; the migration keeps its
//! checksum, so a store can move between the profiles.

use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, SqlSafeStr};

use super::session::Session;
use crate::store::Error;
use crate::store::cause::migration_failed;
use crate::store::migrations::POSTGRES_MIGRATOR as MIGRATOR;

/// SQLSTATE of a lock wait past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The lock row's table, made before the migrations (which it guards).
const LOCK_TABLE: &str = "CREATE TABLE IF NOT EXISTS stepwell_migration_lock (id integer PRIMARY KEY); \
     INSERT INTO stepwell_migration_lock (id) VALUES (1) ON CONFLICT (id) DO NOTHING";

/// Moves the counter row past the sequence: the portable profile's
/// tokens then follow every token the standard profile drew.
const ALIGN_COUNTER: &str = "UPDATE stepwell_counters SET value = GREATEST(value, (SELECT last_value FROM lease_tokens)) \
     WHERE name = 'lease_tokens'";

/// Moves the sequence past the counter row, if the portable profile drew
/// past it; otherwise leaves it alone, so it never moves back.
const ALIGN_SEQUENCE: &str = "SELECT setval('lease_tokens', value) FROM stepwell_counters \
     WHERE name = 'lease_tokens' AND value > (SELECT last_value FROM lease_tokens)";

/// The alignment of the two token sources this profile needs.
fn align(session: &Session) -> &'static str {
    if session.portable() { ALIGN_COUNTER } else { ALIGN_SEQUENCE }
}

/// Brings the schema up to date, waiting at most `lock_wait` for the
/// migration lock another sidecar may hold. `base` has no session settings.
pub(super) async fn migrate(base: &PgConnectOptions, session: &Session, lock_wait: Duration) -> Result<(), Error> {
    let migrated = if session.pooled() || session.portable() {
        in_one_transaction(base, session, lock_wait).await
    } else {
        under_advisory_lock(base, lock_wait).await
    };
    match migrated {
        Err(MigrateError::Execute(sqlx::Error::Database(error)))
            if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
        {
            let lock = if session.pooled() || session.portable() {
                "the Postgres migration lock (the row of stepwell_migration_lock)"
            } else {
                "the Postgres migration lock (an advisory lock)"
            };
            Err(Error::MigrationLockTimeout { lock: lock.to_owned(), waited: lock_wait })
        }
        migrated => migrated.map_err(migration_failed),
    }
}

/// sqlx's migrator under its session advisory lock, on a connection of its own.
async fn under_advisory_lock(base: &PgConnectOptions, lock_wait: Duration) -> Result<(), MigrateError> {
    let lock_timeout = lock_wait.as_millis().to_string();
    let options = base.clone().options([("lock_timeout", lock_timeout.as_str()), ("statement_timeout", "0")]);
    let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
    let mut migrated = MIGRATOR.run(&pool).await;
    if migrated.is_ok() {
        migrated = sqlx::raw_sql(ALIGN_SEQUENCE).execute(&pool).await.map(drop).map_err(MigrateError::from);
    }
    pool.close().await;
    migrated
}

/// Every pending migration in one transaction, while a transaction on a
/// connection of its own holds the lock row. The migrations' transaction
/// begins only once the lock is held, so that its snapshot (fixed at its
/// first statement under REPEATABLE READ or SERIALIZABLE) shows what the
/// previous holder committed. A serialization failure (a running sidecar
/// drawing tokens while the counter is aligned, say) runs it again.
async fn in_one_transaction(
    base: &PgConnectOptions,
    session: &Session,
    lock_wait: Duration,
) -> Result<(), MigrateError> {
    let options = session.bare_options(base);
    let limits = format!("SET LOCAL lock_timeout = '{}'; SET LOCAL statement_timeout = 0", lock_wait.as_millis());
    let mut holder = PgConnection::connect_with(&options).await?;
    make_lock_row(&mut holder, session, &limits).await?;
    let mut lock = session.begin(&mut holder).await?;
    sqlx::raw_sql(AssertSqlSafe(limits)).execute(&mut *lock).await?;
    sqlx::raw_sql("SELECT id FROM stepwell_migration_lock WHERE id = 1 FOR UPDATE").execute(&mut *lock).await?;
    let mut conn = PgConnection::connect_with(&options).await?;
    for attempt in 0.. {
        match migrate_once(&mut conn, session).await {
            Err(MigrateError::Execute(sqlx::Error::Database(error)))
                if attempt < 5 && matches!(error.code().as_deref(), Some("40001" | "40P01")) => {}
            migrated => {
                migrated?;
                break;
            }
        }
    }
    lock.commit().await?;
    conn.close().await?;
    holder.close().await?;
    Ok(())
}

/// The migrations and the alignment of the token sources, in one transaction.
async fn migrate_once(conn: &mut PgConnection, session: &Session) -> Result<(), MigrateError> {
    let mut tx = session.begin(conn).await?;
    sqlx::raw_sql("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    // `run_direct` on the transaction's connection: `run` would take it
    // through `Acquire`, whose future the compiler cannot prove `Send`.
    migrator(session).run_direct(None, &mut *tx, false).await?;
    sqlx::raw_sql(align(session)).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Makes the lock row's table and row if they are missing. Two sidecars
/// making it at once can collide on the catalog (a unique violation in
/// `pg_type`, "relation already exists", or "type already exists" when the
/// other committed between the name check and the type's creation); the
/// loser tries again and finds it made.
async fn make_lock_row(conn: &mut PgConnection, session: &Session, limits: &str) -> Result<(), MigrateError> {
    for attempt in 0.. {
        let made = async {
            let mut tx = session.begin(conn).await?;
            sqlx::raw_sql(AssertSqlSafe(limits.to_owned())).execute(&mut *tx).await?;
            sqlx::raw_sql(LOCK_TABLE).execute(&mut *tx).await?;
            tx.commit().await.map_err(MigrateError::from)
        }
        .await;
        match made {
            Err(MigrateError::Execute(sqlx::Error::Database(error)))
                if attempt < 5 && matches!(error.code().as_deref(), Some("23505" | "42P07" | "42710" | "40001")) => {}
            made => return made,
        }
    }
    unreachable!("the loop returns")
}

/// The migrator for this session: the portable profile's builds the
/// metadata index with plain `jsonb_ops`; neither takes sqlx's advisory
/// lock, the lock row standing in for it.
fn migrator(session: &Session) -> Migrator {
    let mut migrations = MIGRATOR.migrations.to_vec();
    if session.portable() {
        for migration in &mut migrations {
            let portable = portable_sql(migration.sql.as_str());
            if portable != migration.sql.as_str() {
                migration.sql = AssertSqlSafe(portable).into_sql_str();
            }
        }
    }
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.set_locking(false);
    migrator
}

/// A migration's SQL as the portable profile runs it: GIN indexes with the
/// default operator class (`jsonb_ops`).
fn portable_sql(sql: &str) -> String {
    sql.replace(" jsonb_path_ops)", ")")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portable_profile_builds_the_metadata_index_with_jsonb_ops_and_keeps_the_checksum() {
        let portable = migrator(&Session::of(false, true));
        let standard: Vec<_> = MIGRATOR.iter().collect();
        assert_eq!(portable.iter().count(), standard.len());
        for (p, s) in portable.iter().zip(standard) {
            assert_eq!(p.checksum, s.checksum, "migration {} keeps its checksum", p.version);
            assert!(!p.sql.as_str().contains("jsonb_path_ops"), "migration {}", p.version);
        }
        assert!(MIGRATOR.iter().any(|m| m.sql.as_str().contains("jsonb_path_ops")), "the standard profile keeps it");
    }
}
