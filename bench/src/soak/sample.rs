//! What the soak reads of the running sidecar every few seconds: its
//! resident memory and open file descriptors (`/proc`), the SQLite
//! write-ahead log's size on disk, the gauges and counters of its admin
//! `/metrics` that show queues, pools, sweeps and purges, and on Postgres
//! each table's live and dead tuples and total size.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The metrics kept from `/metrics`, by name (every label set of each).
const METRICS: [&str; 16] = [
    "stepwell_write_queue_depth",
    "stepwell_write_queue_bytes",
    "stepwell_postgres_pool_connections",
    "stepwell_postgres_pool_waiting_requests",
    "stepwell_sqlite_file_bytes",
    "stepwell_awaits_pending",
    "stepwell_sweeps_total",
    "stepwell_idempotency_records_purged_total",
    "stepwell_turns_expired_total",
    "stepwell_checkpoints_expired_total",
    "stepwell_turn_retention_failures_total",
    "stepwell_record_turns_expired_total",
    "stepwell_records_deleted_total",
    "stepwell_checkpoints_appended_total",
    "stepwell_turns_deleted_total",
    "stepwell_batches_failed_total",
];

/// One Postgres table's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PgTable {
    pub table: String,
    pub live_tuples: i64,
    pub dead_tuples: i64,
    pub total_bytes: i64,
}

/// One reading, `t_s` seconds into the soak.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub rss_kib: u64,
    pub fds: u64,
    /// The machine's 1-minute load average, which everything on it shares.
    pub load1: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_bytes: Option<u64>,
    pub metrics: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pg_tables: Option<Vec<PgTable>>,
}

/// Resident memory (KiB) and open descriptors of process `pid`.
pub fn process(pid: u32) -> Result<(u64, u64), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}: {e}"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status has no VmRSS"))?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("/proc/{pid}/fd: {e}"))?.count();
    Ok((rss, fds as u64))
}

/// The machine's 1-minute load average (0 if /proc/loadavg cannot be read).
pub fn load1() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(0.0)
}

/// The size of the `-wal` file beside the SQLite database at `path` (0 while there is none).
pub fn wal_bytes(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(&wal).map_or(0, |m| m.len())
}

/// The kept metrics of a Prometheus text exposition: `name{labels}` to value.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            METRICS.contains(&name).then(|| Some((series.to_owned(), value.trim().parse().ok()?)))?
        })
        .collect()
}

/// The sidecar's `/metrics` at `admin`, over plain HTTP/1.0.
pub async fn metrics(admin: &str) -> Result<BTreeMap<String, f64>, String> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await.map_err(|e| e.to_string())?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.map_err(|e| e.to_string())?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(parse_metrics(&body))
    };
    tokio::time::timeout(Duration::from_secs(30), work)
        .await
        .map_err(|_| "/metrics: no answer within 30 s".to_owned())?
        .map_err(|e| format!("/metrics at {admin}: {e}"))
}

/// Every user table of the database at `url`: live and dead tuples, and
/// its size with TOAST and indexes.
pub async fn pg_tables(url: &str) -> Result<Vec<PgTable>, String> {
    let mut conn = PgConnection::connect(url).await.map_err(|e| format!("connect to Postgres: {e}"))?;
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_live_tup, n_dead_tup, pg_total_relation_size(relid)::bigint \
         FROM pg_stat_user_tables ORDER BY relname",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| format!("pg_stat_user_tables: {e}"))?;
    conn.close().await.map_err(|e| e.to_string())?;
    Ok(rows
        .into_iter()
        .map(|(table, live_tuples, dead_tuples, total_bytes)| PgTable { table, live_tuples, dead_tuples, total_bytes })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_listed_metrics_with_their_labels() {
        let text = "# HELP stepwell_write_queue_depth writes\n\
                    stepwell_write_queue_depth 3\n\
                    stepwell_postgres_pool_connections{state=\"in_use\"} 2\n\
                    stepwell_batch_writes_bucket{le=\"1\"} 7\n\
                    stepwell_sweeps_total{result=\"drained\"} 12\n";
        let kept = parse_metrics(text);
        assert_eq!(kept.len(), 3);
        assert_eq!(kept["stepwell_write_queue_depth"], 3.0);
        assert_eq!(kept["stepwell_postgres_pool_connections{state=\"in_use\"}"], 2.0);
        assert_eq!(kept["stepwell_sweeps_total{result=\"drained\"}"], 12.0);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let (rss, fds) = process(std::process::id()).unwrap();
        assert!(rss > 0 && fds > 0);
    }
}
