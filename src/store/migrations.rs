//! The stores' schema migrations, one list per backend, each file of
//! `migrations/<backend>/` embedded in the binary. The lists become sqlx
//! `Migrator`s at first use, exactly as sqlx's `migrate!` would build them
//! (the same version, description, SQL and checksum, which a store records
//! per applied migration), without that macro: its proc-macro compiles a
//! second copy of both database drivers for the compiler alone. A test reads
//! the folders with sqlx's own resolver and holds the lists to them, so a
//! file added there and not here fails it.

use std::borrow::Cow;
use std::sync::LazyLock;

use sqlx::SqlStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// A migration file: its version and description (from its name,
/// `<version>_<description>.sql`) and its SQL.
type File = (i64, &'static str, &'static str);

macro_rules! files {
    ($backend:literal: $(($version:literal, $name:literal, $description:literal)),* $(,)?) => {
        &[$(($version, $description, include_str!(concat!("../../migrations/", $backend, "/", $name, ".sql")))),*]
    };
}

const SQLITE: &[File] = files!("sqlite":
    (1, "0001_checkpoints", "checkpoints"),
    (2, "0002_idempotency", "idempotency"),
    (3, "0003_turns_trigger", "turns trigger"),
    (4, "0004_turns_indexes", "turns indexes"),
    (5, "0005_records", "records"),
    (6, "0006_waits", "waits"),
    (7, "0007_waits_settled_span", "waits settled span"),
    (8, "0008_console_indexes", "console indexes"),
    (9, "0009_memory", "memory"),
);

const POSTGRES: &[File] = files!("postgres":
    (1, "0001_checkpoints", "checkpoints"),
    (2, "0002_idempotency", "idempotency"),
    (3, "0003_turns_indexes", "turns indexes"),
    (4, "0004_records", "records"),
    (5, "0005_turns_expiry", "turns expiry"),
    (6, "0006_waits", "waits"),
    (7, "0007_waits_settled_span", "waits settled span"),
    (8, "0008_records_turn_statistics", "records turn statistics"),
    (9, "0009_console_indexes", "console indexes"),
    (10, "0010_keys_batch", "keys batch"),
    (11, "0011_token_counter", "token counter"),
    (12, "0012_memory", "memory"),
);

/// The SQLite store's migrations.
pub(crate) static SQLITE_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE));

/// The Postgres store's migrations, as the standard profile runs them.
pub(crate) static POSTGRES_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES));

fn migrator(files: &[File]) -> Migrator {
    let migrations = files
        .iter()
        .map(|&(version, description, sql)| {
            // sqlx's marker for a migration run outside a transaction.
            let no_tx = sql.starts_with("-- no-transaction");
            Migration::new(version, Cow::Borrowed(description), MigrationType::Simple, SqlStr::from_static(sql), no_tx)
        })
        .collect();
    Migrator::with_migrations(migrations)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What sqlx's resolver (the one `migrate!` runs) reads from the folder.
    async fn resolved(folder: &str) -> Migrator {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(folder);
        Migrator::new(path).await.expect("the migrations folder resolves")
    }

    fn same(ours: &Migrator, theirs: &Migrator, folder: &str) {
        let ours: Vec<_> = ours.iter().collect();
        let theirs: Vec<_> = theirs.iter().collect();
        assert_eq!(ours.len(), theirs.len(), "every file of migrations/{folder} is listed, and only those");
        for (a, b) in ours.iter().zip(theirs) {
            let what = format!("migrations/{folder}, version {}", b.version);
            assert_eq!(a.version, b.version, "{what}");
            assert_eq!(a.description, b.description, "{what}");
            assert_eq!(a.migration_type, b.migration_type, "{what}");
            assert_eq!(a.sql.as_str(), b.sql.as_str(), "{what}");
            assert_eq!(a.checksum, b.checksum, "{what}: the checksum a store records");
            assert_eq!(a.no_tx, b.no_tx, "{what}");
        }
    }

    #[tokio::test]
    async fn the_lists_are_the_folders_as_sqlx_reads_them() {
        same(&SQLITE_MIGRATOR, &resolved("sqlite").await, "sqlite");
        same(&POSTGRES_MIGRATOR, &resolved("postgres").await, "postgres");
    }
}
