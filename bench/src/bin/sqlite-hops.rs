//! The profile behind the SQLite write path's shape (docs/benchmarks/history.md,
//! "One caller's write: where the hops are"): one committed single-row
//! transaction (1 KB, WAL, synchronous=FULL) per request from a tokio task,
//! either through sqlx's SQLite worker thread (a channel message per
//! statement, each way) or through a dedicated thread that owns a rusqlite
//! connection (one hop to it, one back). Prints the wall time and the
//! process's context switches (all threads, from /proc) per request.
//! Usage: sqlite-hops sqlx|rusqlite [REQUESTS]
use std::time::Instant;

fn ctx() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if line.starts_with("voluntary_ctxt_switches") || line.starts_with("nonvoluntary_ctxt_switches") {
                total += line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
            }
        }
    }
    total
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::temp_dir().join(format!("hops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: u64 = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(3000);
    let state = vec![b'x'; 1024];
    if mode == "sqlx" {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
        let options = SqliteConnectOptions::new()
            .filename(dir.join("a.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
        sqlx::query("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)").execute(&pool).await.unwrap();
        let (c0, t0) = (ctx(), Instant::now());
        for k in 0..n {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO t (k, v) VALUES ($1, $2)")
                .bind(k as i64)
                .bind(&state)
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        let (c1, t1) = (ctx(), t0.elapsed());
        println!(
            "sqlx worker:      {:.1} us/op, {:.1} ctx switches/op",
            t1.as_micros() as f64 / n as f64,
            (c1 - c0) as f64 / n as f64
        );
    } else {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(i64, Vec<u8>, tokio::sync::oneshot::Sender<()>)>(1024);
        let path = dir.join("b.db");
        std::thread::spawn(move || {
            let mut conn = rusqlite::Connection::open(path).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.pragma_update(None, "synchronous", "FULL").unwrap();
            conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)", []).unwrap();
            while let Ok((k, v, reply)) = rx.recv() {
                let t = conn.transaction().unwrap();
                t.prepare_cached("INSERT INTO t (k, v) VALUES (?1, ?2)")
                    .unwrap()
                    .execute(rusqlite::params![k, v])
                    .unwrap();
                t.commit().unwrap();
                let _ = reply.send(());
            }
        });
        let (c0, t0) = (ctx(), Instant::now());
        for k in 0..n {
            let (reply, answer) = tokio::sync::oneshot::channel();
            tx.send((k as i64, state.clone(), reply)).unwrap();
            answer.await.unwrap();
        }
        let (c1, t1) = (ctx(), t0.elapsed());
        println!(
            "rusqlite thread:  {:.1} us/op, {:.1} ctx switches/op",
            t1.as_micros() as f64 / n as f64,
            (c1 - c0) as f64 / n as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
