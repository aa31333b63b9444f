//! The stores behind the rows, seen from outside the sidecar: an SQLite
//! file's size on disk (database and WAL, as they are or after a TRUNCATE
//! checkpoint), and the Postgres server: fresh databases, relation sizes,
//! the WAL position, its durability settings and its postmaster's pid (for
//! CPU accounting, when the server runs on this machine).
//!
//! Every SQLite connection here is separate from the sidecar's and opened
//! while the sidecar is idle, with the same pragmas stepwell uses.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};

/// The connection options stepwell's SQLite backend uses: WAL, `synchronous=FULL`.
pub fn sqlite_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(false)
}

/// The bytes of an SQLite database file and its WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SqliteFiles {
    pub db: u64,
    pub wal: u64,
}

impl SqliteFiles {
    pub fn of(path: &Path) -> SqliteFiles {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        SqliteFiles { db: size(path), wal: size(&wal_path(path)) }
    }

    pub fn total(&self) -> u64 {
        self.db + self.wal
    }
}

fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// An SQLite file as the sidecar left it, and after a TRUNCATE checkpoint.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SqliteFootprint {
    pub as_is: SqliteFiles,
    pub checkpointed: SqliteFiles,
    pub checkpoints: i64,
}

/// Counts the checkpoints, then moves the WAL into the database file and
/// truncates it, from a connection of our own.
pub async fn sqlite_footprint(path: &Path) -> Result<SqliteFootprint, String> {
    let as_is = SqliteFiles::of(path);
    let mut conn = sqlite_options(path).connect().await.map_err(|e| format!("open {}: {e}", path.display()))?;
    let checkpoints: i64 =
        sqlx::query_scalar("SELECT count(*) FROM checkpoints").fetch_one(&mut conn).await.map_err(|e| e.to_string())?;
    checkpoint_truncate(&mut conn).await?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(SqliteFootprint { as_is, checkpointed: SqliteFiles::of(path), checkpoints })
}

/// Removes an SQLite database and the files beside it.
pub fn remove_sqlite(path: &Path) -> Result<(), String> {
    for suffix in ["", "-wal", "-shm", "-migrate.lock"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(format!("remove {file:?}: {e}")),
            _ => {}
        }
    }
    Ok(())
}

/// Empties the WAL of `path` into its database file, so the next write starts a new WAL.
pub async fn sqlite_truncate_wal(path: &Path) -> Result<SqliteFiles, String> {
    let mut conn = sqlite_options(path).connect().await.map_err(|e| format!("open {}: {e}", path.display()))?;
    checkpoint_truncate(&mut conn).await?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(SqliteFiles::of(path))
}

async fn checkpoint_truncate(conn: &mut SqliteConnection) -> Result<(), String> {
    let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| format!("wal_checkpoint: {e}"))?;
    if busy != 0 { Err("wal_checkpoint(TRUNCATE) could not finish: the database was busy".into()) } else { Ok(()) }
}

/// A database on the Postgres server.
pub struct Database {
    pub name: String,
    pub url: String,
}

/// The Postgres server every Postgres row runs on.
pub struct PgServer {
    admin_url: String,
    /// The postmaster's pid, when the server runs on this machine.
    pub postmaster: Option<u32>,
    /// Its data directory, when the server runs on this machine.
    data_directory: Option<PathBuf>,
    /// Its version and the settings that decide durability and WAL volume.
    pub settings: Vec<(String, String)>,
    next_database: std::sync::atomic::AtomicUsize,
}

/// What the report says about the server's settings.
const SETTINGS: [&str; 9] = [
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
];

impl PgServer {
    /// The server at `url`, if Postgres is `wanted`; a run that wants it
    /// with no URL cannot start.
    pub async fn if_wanted(wanted: bool, url: Option<&str>) -> Result<Option<PgServer>, String> {
        match (wanted, url) {
            (false, _) => Ok(None),
            (true, Some(url)) => Ok(Some(PgServer::connect(url).await?)),
            (true, None) => Err("Postgres needs --postgres-url or STEPWELL_TEST_POSTGRES_URL".into()),
        }
    }

    pub async fn connect(admin_url: &str) -> Result<PgServer, String> {
        let mut conn = PgConnection::connect(admin_url).await.map_err(|e| format!("connect to Postgres: {e}"))?;
        let mut settings = Vec::new();
        for name in SETTINGS {
            let value: String = sqlx::query_scalar("SELECT current_setting($1)")
                .bind(name)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            settings.push((name.to_owned(), value));
        }
        let data_directory: Option<String> =
            sqlx::query_scalar("SELECT current_setting('data_directory')").fetch_one(&mut conn).await.ok();
        conn.close().await.map_err(|e| e.to_string())?;
        let data_directory = data_directory.map(PathBuf::from);
        let postmaster = data_directory.as_deref().and_then(local_postmaster);
        let data_directory = data_directory.filter(|_| postmaster.is_some());
        Ok(PgServer { admin_url: admin_url.to_owned(), postmaster, data_directory, settings, next_database: 0.into() })
    }

    /// Creates an empty database named after `label`.
    pub async fn fresh_database(&self, label: &str) -> Result<Database, String> {
        let n = self.next_database.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let clean: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let name = format!("bench_{}_{n}_{clean}", std::process::id());
        self.admin(format!("CREATE DATABASE {name}")).await?;
        Ok(Database { url: with_database(&self.admin_url, &name), name })
    }

    /// Drops a database made by `fresh_database`, closing any connection left to it.
    pub async fn drop_database(&self, database: &Database) -> Result<(), String> {
        self.admin(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", database.name)).await
    }

    /// Runs one statement on the server's administrative connection.
    async fn admin(&self, sql: String) -> Result<(), String> {
        let mut conn = PgConnection::connect(&self.admin_url).await.map_err(|e| e.to_string())?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(&mut conn).await.map_err(|e| format!("{sql}: {e}"))?;
        conn.close().await.map_err(|e| e.to_string())
    }

    /// Counts the WAL records from `from` to `to` (positions in bytes; at
    /// most `limit` records), with `pg_waldump` from `bindir`, and those that
    /// touch `database`: its own tables, indexes, TOAST and sequences, or its
    /// system catalogs. Needs the server's data directory on this machine.
    /// A row written by a client always logs a record naming one of the
    /// database's own relations; reads, and the server's checkpoint and
    /// snapshot records, do not.
    pub async fn wal_records(
        &self,
        bindir: &Path,
        database: &Database,
        (from, to): (u64, u64),
        limit: Option<u64>,
    ) -> Result<WalRecords, String> {
        let data = self.data_directory.as_ref().ok_or("the Postgres data directory is not on this machine")?;
        if to <= from {
            return Ok(WalRecords { total: 0, own: 0, catalogs: 0 });
        }
        let mut conn = PgConnection::connect(&self.admin_url).await.map_err(|e| e.to_string())?;
        let oid: i64 = sqlx::query_scalar("SELECT oid::bigint FROM pg_database WHERE datname = $1")
            .bind(&database.name)
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let own = own_relation_files(&database.url).await?;
        // pg_waldump reads files: wait until the walwriter has flushed `to`.
        for _ in 0..100 {
            let flushed: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '0/0')::bigint")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            if flushed as u64 >= to {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        conn.close().await.map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new(bindir.join("pg_waldump"));
        command.arg("-p").arg(data.join("pg_wal")).args(["-s", &lsn(from), "-e", &lsn(to)]);
        if let Some(limit) = limit {
            command.args(["-n", &limit.to_string()]);
        }
        let output = command.output().await.map_err(|e| format!("pg_waldump: {e}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let records = WalRecords::count(&text, oid as u64, &own);
        if records.total == 0 && !output.status.success() {
            return Err(format!("pg_waldump: {}", String::from_utf8_lossy(&output.stderr).trim()));
        }
        Ok(records)
    }

    /// The server's current WAL insert position, in bytes.
    pub async fn wal_position(&self) -> Result<u64, String> {
        let mut conn = PgConnection::connect(&self.admin_url).await.map_err(|e| e.to_string())?;
        let lsn: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        conn.close().await.map_err(|e| e.to_string())?;
        Ok(lsn as u64)
    }
}

/// `url` with its database replaced by `name` (query parameters kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

/// A WAL position as Postgres writes it (e.g. 0/1A2B3C4).
pub fn lsn(position: u64) -> String {
    format!("{:X}/{:X}", position >> 32, position & 0xffff_ffff)
}

/// The file numbers of a database's own relations (OID from
/// FirstNormalObjectId, 16384, on: not the system catalogs), as WAL records
/// name them.
async fn own_relation_files(url: &str) -> Result<HashSet<u64>, String> {
    let mut conn = PgConnection::connect(url).await.map_err(|e| e.to_string())?;
    let files: Vec<i64> = sqlx::query_scalar(
        "SELECT pg_relation_filenode(oid)::bigint FROM pg_class \
         WHERE oid >= 16384 AND pg_relation_filenode(oid) IS NOT NULL",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(files.into_iter().map(|f| f as u64).collect())
}

/// WAL records counted by `pg_waldump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalRecords {
    pub total: u64,
    /// Records that change one of the database's own relations.
    pub own: u64,
    /// Records that change only the database's system catalogs (e.g. page
    /// pruning that Postgres does while reading them).
    pub catalogs: u64,
}

impl WalRecords {
    /// Counts the records in `pg_waldump` output, and those that name a
    /// relation `TABLESPACE/DATABASE/FILE` of database `oid`: one of `own`
    /// files, or another (a catalog).
    fn count(text: &str, oid: u64, own: &HashSet<u64>) -> WalRecords {
        let mut records = WalRecords { total: 0, own: 0, catalogs: 0 };
        for line in text.lines().filter(|l| l.starts_with("rmgr:")) {
            records.total += 1;
            let files: Vec<u64> = line
                .split("rel ")
                .skip(1)
                .filter_map(|rest| {
                    let mut parts = rest.split_whitespace().next()?.split('/');
                    let (_, database, file) = (parts.next()?, parts.next()?, parts.next()?);
                    (database.parse::<u64>().ok()? == oid).then(|| file.trim_end_matches(',').parse().ok())?
                })
                .collect();
            if files.iter().any(|f| own.contains(f)) {
                records.own += 1;
            } else if !files.is_empty() {
                records.catalogs += 1;
            }
        }
        records
    }
}

/// The pid in `postmaster.pid`, if that process is alive here.
fn local_postmaster(data_directory: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_directory.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// The checkpoints of a Postgres database and the bytes of its checkpoint
/// and turn tables (heap, TOAST and indexes).
pub async fn pg_footprint(url: &str) -> Result<(i64, i64), String> {
    let mut conn = PgConnection::connect(url).await.map_err(|e| e.to_string())?;
    let row: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM checkpoints), \
                (pg_total_relation_size('checkpoints') + pg_total_relation_size('turns'))::bigint",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(row)
}

/// The idempotency records at `url`: (all, completed ones).
pub async fn pg_idempotency_counts(url: &str) -> Result<(i64, i64), String> {
    let mut conn = PgConnection::connect(url).await.map_err(|e| e.to_string())?;
    let row: (i64, i64) = sqlx::query_as("SELECT count(*), count(*) FILTER (WHERE held = 2) FROM idempotency")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(row)
}

/// Runs a statement on a database of its own connection (e.g. VACUUM, which
/// cannot run inside a transaction).
pub async fn pg_execute(url: &str, sql: &'static str) -> Result<(), String> {
    let mut conn = PgConnection::connect(url).await.map_err(|e| e.to_string())?;
    sqlx::raw_sql(sql).execute(&mut conn).await.map_err(|e| format!("{sql}: {e}"))?;
    conn.close().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_wal_records_of_a_database() {
        let text = "rmgr: Heap len (rec/tot): 54/150, tx: 735, lsn: 0/01A3C7D8, prev 0/01A3C7A0, desc: INSERT off 3 \
                    flags 0x00, blkref #0: rel 1663/16384/16385 blk 0\n\
                    rmgr: Standby len (rec/tot): 50/50, tx: 0, lsn: 0/01A3C870, prev 0/01A3C7D8, desc: RUNNING_XACTS\n\
                    rmgr: Btree len (rec/tot): 64/64, tx: 736, lsn: 0/01A3C8A8, prev 0/01A3C870, desc: INSERT_LEAF \
                    off 2, blkref #0: rel 1663/5/2662 blk 1\n";
        let own: HashSet<u64> = [16385].into();
        assert_eq!(WalRecords::count(text, 16384, &own), WalRecords { total: 3, own: 1, catalogs: 0 });
        assert_eq!(WalRecords::count(text, 5, &own), WalRecords { total: 3, own: 0, catalogs: 1 });
        assert_eq!(WalRecords::count(text, 1638, &own), WalRecords { total: 3, own: 0, catalogs: 0 });
        assert_eq!(lsn(0x1_0000_00ff), "1/FF");
    }

    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(with_database("postgres://u@h:1/postgres", "b"), "postgres://u@h:1/b");
        assert_eq!(with_database("postgres://u:p@h:1/x?sslmode=disable", "b"), "postgres://u:p@h:1/b?sslmode=disable");
        assert_eq!(with_database("postgres://h:1", "b"), "postgres://h:1/b");
    }
}
