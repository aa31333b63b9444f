//! Contention between writers costs latency, not errors, while the caller's
//! deadline allows. A batch the database breaks off for contention (a
//! deadlock, a lock wait past --postgres-lock-timeout-ms, an SQLite file
//! locked past --sqlite-busy-timeout-ms) has left nothing behind, and the
//! writer tries it again whole after a pause: its callers are answered only
//! once it commits, and none of their writes is visible before. A caller
//! whose deadline passes meanwhile is left out of the next attempt, so its
//! write is never stored.
//!
//! Each test holds the locks from a connection of its own and moves on when
//! the store shows what the sidecar is doing (on Postgres, who waits for
//! whom in `pg_stat_activity`; on SQLite, the sidecar's log), never after a
//! sleep. The Postgres tests are in `postgres_only` (the Postgres pass); the
//! SQLite one runs on a file of its own in either pass.

use stepwell::store::Database;
use tokio::task::JoinHandle;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all, states};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

/// Polls `condition` until it holds, bounded by `WAIT_LIMIT`. Meanwhile no
/// call may be answered (`answered` names one that was): the calls wait for
/// a lock the test holds, and a store that gave up on a batch contention
/// broke off would answer them now, with UNAVAILABLE.
async fn until(what: &str, answered: impl Fn() -> Option<&'static str>, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while !condition().await {
        if let Some(call) = answered() {
            panic!(
                "{what}: {call} was answered while the lock it waits for was held, so its batch was not tried again"
            );
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} within {WAIT_LIMIT:?}");
        tokio::task::yield_now().await;
    }
}

/// The name of the first of `calls` that has been answered, if any.
fn first_answered<const N: usize>(calls: [(&'static str, bool); N]) -> Option<&'static str> {
    calls.into_iter().find(|(_, finished)| *finished).map(|(name, _)| name)
}

fn is_done<T>(call: &JoinHandle<T>) -> bool {
    call.is_finished()
}

#[tokio::test]
async fn a_write_that_finds_the_sqlite_file_locked_past_the_busy_timeout_is_tried_again_and_stored() {
    let dir = tempfile::tempdir().expect("a directory for the file");
    let store = TestStore::on(Database::Sqlite { path: dir.path().join("busy.db") });
    let log = store.dir().join("stepwell.log");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--sqlite-busy-timeout-ms", "200", "--log", "warn,stepwell::store::writer=debug"])
        .stderr_to(&log)
        .spawn()
        .await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("t", "started", T0, "{}")).await;

    // Another connection (a second sidecar on the file, say) holds the write
    // lock past the busy timeout; the sidecar's write waits, finds the file
    // busy, and is tried again. Then the lock goes, and the write is stored.
    let lock = store.hold_write_lock().await;
    let mut writer = server.client();
    let call = tokio::spawn(async move { writer.checkpoint(checkpoint("t", "next", T0 + 1, "{}")).await });
    until(
        "the sidecar tries the write again after SQLite was busy",
        || first_answered([("the write", is_done(&call))]),
        async || {
            let logged = std::fs::read_to_string(&log).unwrap_or_default();
            logged.contains("trying it again") && logged.contains("cause=sqlite_busy")
        },
    )
    .await;
    lock.release().await;
    let answer = call.await.expect("the call's task").expect("the write is stored once the file is free");
    assert!(answer.into_inner().inserted, "the write was not stored before it was answered");
    let stored = restore_all(&mut client, restore("t")).await;
    assert_eq!(states(&stored), ["{}", "{}"], "stored once");
}

/// Postgres: a batch held up past the lock timeout, or broken off in a
/// deadlock, is tried again whole; a caller whose deadline passes is left out.
mod postgres_only {
    use std::time::Duration;

    use sqlx::{Connection, PgConnection, PgPool};
    use stepwell::api::pb::{BeginOutcome, CheckpointResponse};
    use tokio::task::JoinHandle;
    use tonic::{Code, Request};

    use stepwell_test_support::WAIT_LIMIT;
    use stepwell_test_support::admin::{Scrape, free_local_address};
    use stepwell_test_support::backend::{Inspector, TestStore};
    use stepwell_test_support::requests::{T0, assert_inserted, begin, checkpoint, release};
    use stepwell_test_support::sidecar::Sidecar;

    use super::{first_answered, is_done, until};

    /// A transaction of the test's own, holding its locks until `release`.
    struct Holder {
        conn: PgConnection,
        pid: i32,
    }

    impl Holder {
        /// Begins a transaction that runs `setup`, then locks the rows `lock` selects.
        async fn new(store: &TestStore, setup: &str, lock: &str) -> Holder {
            let mut conn = PgConnection::connect(&store.url()).await.expect("connect to the test's database");
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await.expect("a pid");
            let statements = format!("BEGIN; {setup} {lock} FOR UPDATE");
            sqlx::raw_sql(sqlx::AssertSqlSafe(statements)).execute(&mut conn).await.expect("take the locks");
            Holder { conn, pid }
        }

        /// Holds the summary row of `turn`, which every write to the turn locks.
        async fn turn(store: &TestStore, turn: &str) -> Holder {
            let lock = format!("SELECT 1 FROM turns WHERE namespace = 'default' AND turn_id = '{turn}'");
            Holder::new(store, "", &lock).await
        }

        /// Ends the transaction; nothing of it stays.
        async fn release(mut self) {
            sqlx::raw_sql("ROLLBACK").execute(&mut self.conn).await.expect("end the test's transaction");
        }
    }

    /// When the transaction of each backend that `pid` holds up began: the
    /// sidecar's attempts at a batch, each a transaction of its own.
    async fn held_up_by(pool: &PgPool, pid: i32) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT coalesce(CAST(xact_start AS text), '') FROM pg_stat_activity \
             WHERE $1 = ANY(pg_blocking_pids(pid))",
        )
        .bind(pid)
        .fetch_all(pool)
        .await
        .expect("read pg_stat_activity")
    }

    /// Whether the backend `pid` waits for a lock another holds.
    async fn is_held_up(pool: &PgPool, pid: i32) -> bool {
        sqlx::query_scalar("SELECT cardinality(pg_blocking_pids($1)) > 0")
            .bind(pid)
            .fetch_one(pool)
            .await
            .expect("read pg_blocking_pids")
    }

    async fn count(pool: &PgPool, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(pool).await.expect("count rows")
    }

    async fn pool_of(store: &TestStore) -> PgPool {
        match store.inspect().await {
            Inspector::Postgres(pool) => pool,
            Inspector::Sqlite(_) => panic!("the Postgres pass runs on Postgres"),
        }
    }

    /// A sidecar with one writer task, so that batches are taken one after
    /// another, and an admin listener, whose queue gauges show what waits.
    async fn one_writer(lock_timeout: Duration) -> (Sidecar, String) {
        let admin = free_local_address();
        let address = admin.parse().expect("an address");
        let server = Sidecar::builder()
            .configure(move |config| {
                config.writes.concurrency = 1;
                config.store.postgres_lock_timeout = lock_timeout;
                config.observability.admin_listen = Some(address);
            })
            .start()
            .await;
        (server, admin)
    }

    async fn gauge(admin: &str, name: &str) -> f64 {
        Scrape::of(admin).await.value(name, &[])
    }

    type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

    /// The writer held at a gate: its batch, a write to the turn `gate`,
    /// waits for the gate's summary row, which the test holds. The writes
    /// made meanwhile queue behind it, and the writer takes them as one
    /// batch once the gate opens.
    struct Gate {
        holder: Holder,
        write: JoinHandle<Answer<CheckpointResponse>>,
    }

    impl Gate {
        /// Closes the gate and waits until the writer's batch waits at it.
        async fn close(server: &Sidecar, pool: &PgPool) -> Gate {
            let mut client = server.client();
            assert_inserted(&mut client, checkpoint("gate", "started", T0, "{}")).await;
            let holder = Holder::turn(server.store(), "gate").await;
            let write = tokio::spawn(async move { client.checkpoint(checkpoint("gate", "next", T0 + 1, "{}")).await });
            let answered = || first_answered([("the write at the gate", is_done(&write))]);
            until("the batch waits at the gate", answered, async || !held_up_by(pool, holder.pid).await.is_empty())
                .await;
            Gate { holder, write }
        }

        /// Waits until `queued` writes wait behind the gate, then opens it.
        async fn open_behind(self, admin: &str, queued: usize) {
            let answered = || first_answered([("the write at the gate", is_done(&self.write))]);
            until("the writes are queued behind the gate", answered, async || {
                gauge(admin, "stepwell_write_queue_depth").await == queued as f64
            })
            .await;
            self.holder.release().await;
            self.write.await.expect("the call's task").expect("the write at the gate is stored once the gate opens");
        }
    }

    #[tokio::test]
    async fn a_batch_held_up_past_the_lock_timeout_is_tried_again_whole_and_answered_once_it_commits() {
        let (server, admin) = one_writer(Duration::from_secs(1)).await;
        let (store, pool) = (server.store().clone(), pool_of(server.store()).await);
        let mut client = server.client();
        assert_inserted(&mut client, checkpoint("blocked", "started", T0, "{}")).await;
        let blocked = Holder::turn(&store, "blocked").await;

        // Three callers queue behind the gate, to be the writer's next batch:
        // one transaction, since it holds a Begin.
        let gate = Gate::close(&server, &pool).await;
        let (mut c, mut k, mut b) = (server.client(), server.idempotency(), server.client());
        let free = tokio::spawn(async move { c.checkpoint(checkpoint("free", "started", T0, "{}")).await });
        let begun = tokio::spawn(async move { k.begin(begin("charge")).await });
        let held = tokio::spawn(async move { b.checkpoint(checkpoint("blocked", "next", T0 + 1, "{}")).await });
        gate.open_behind(&admin, 3).await;

        // The batch waits for `blocked` past the lock timeout, and is tried
        // again: a transaction begun later waits in the place of the first.
        let answered = || {
            first_answered([
                ("the free write", is_done(&free)),
                ("the Begin", is_done(&begun)),
                ("the held write", is_done(&held)),
            ])
        };
        let mut first_attempt: Option<String> = None;
        until("the batch is tried again after the lock timeout", answered, async || {
            let attempts = held_up_by(&pool, blocked.pid).await;
            match (&first_attempt, attempts.first()) {
                (None, Some(began)) => {
                    first_attempt = Some(began.clone());
                    false
                }
                (Some(first), Some(began)) => began != first,
                (_, None) => false,
            }
        })
        .await;
        // Nothing of the batch is stored or answered before it commits.
        assert_eq!(count(&pool, "SELECT count(*) FROM checkpoints WHERE turn_id = 'free'").await, 0);
        assert_eq!(count(&pool, "SELECT count(*) FROM idempotency WHERE key = 'charge'").await, 0);
        assert_eq!(answered(), None, "no caller is answered before its batch commits");

        blocked.release().await;
        let free = free.await.expect("the call's task").expect("the free write is stored");
        assert!(free.into_inner().inserted);
        let begun = begun.await.expect("the call's task").expect("the Begin is answered");
        assert_eq!(begun.into_inner().outcome(), BeginOutcome::Acquired);
        let held = held.await.expect("the call's task").expect("the held write is stored");
        assert!(held.into_inner().inserted);
        assert_eq!(count(&pool, "SELECT count(*) FROM checkpoints WHERE turn_id = 'free'").await, 1, "stored once");
        assert_eq!(count(&pool, "SELECT count(*) FROM checkpoints WHERE turn_id = 'blocked'").await, 2);
        assert_eq!(count(&pool, "SELECT count(*) FROM idempotency WHERE key = 'charge'").await, 1);
    }

    #[tokio::test]
    async fn a_batch_postgres_breaks_off_in_a_deadlock_is_tried_again_and_commits() {
        // Only the deadlock breaks the batch off: no lock wait here times out.
        let (server, admin) = one_writer(WAIT_LIMIT * 2).await;
        let (store, pool) = (server.store().clone(), pool_of(server.store()).await);
        let (mut client, mut keys) = (server.client(), server.idempotency());
        assert_inserted(&mut client, checkpoint("a", "started", T0, "{}")).await;
        let token = keys.begin(begin("k")).await.expect("a first Begin").into_inner().lease_token;
        keys.release(release("k", token, false, "")).await.expect("give the key back");
        let deadlocks =
            async || count(&pool, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").await;
        let deadlocks_before = deadlocks().await;

        // An append to `a` and a Begin of `k` queue behind the gate, to be the writer's next batch.
        let turn_a = Holder::turn(&store, "a").await;
        let gate = Gate::close(&server, &pool).await;
        let (mut c, mut k) = (server.client(), server.idempotency());
        let appended = tokio::spawn(async move { c.checkpoint(checkpoint("a", "next", T0 + 1, "{}")).await });
        let begun = tokio::spawn(async move { k.begin(begin("k")).await });
        gate.open_behind(&admin, 2).await;

        // The batch takes `k`'s advisory lock, then waits for `a`'s summary row.
        let answered = || first_answered([("the append", is_done(&appended)), ("the Begin", is_done(&begun))]);
        until("the batch waits for turn a", answered, async || !held_up_by(&pool, turn_a.pid).await.is_empty()).await;
        // The test's transaction holds `k`'s record, then asks for `k`'s
        // advisory lock, which the batch holds. It never runs the deadlock
        // check itself, so the batch, waiting last, is the one broken off.
        let record = "SELECT 1 FROM idempotency WHERE namespace = 'default' AND key = 'k'";
        let mut cycle = Holder::new(&store, "SET LOCAL deadlock_timeout = '10min';", record).await;
        let cycle_pid = cycle.pid;
        let waiting = tokio::spawn(async move {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('default' || '/' || 'k', 0))")
                .execute(&mut cycle.conn)
                .await
                .expect("the advisory lock, once the batch lets it go");
            cycle
        });
        until("the test's transaction waits for the batch", answered, async || is_held_up(&pool, cycle_pid).await)
            .await;
        // Freed from `a`, the batch asks for `k`'s record: a deadlock.
        turn_a.release().await;
        let cycle = waiting.await.expect("the test's transaction");
        until("the batch is tried again, and waits for the test's transaction", answered, async || {
            !held_up_by(&pool, cycle_pid).await.is_empty()
        })
        .await;
        cycle.release().await;

        let appended = appended.await.expect("the call's task").expect("the append is stored");
        assert!(appended.into_inner().inserted);
        let begun = begun.await.expect("the call's task").expect("the Begin is answered");
        assert_eq!(begun.into_inner().outcome(), BeginOutcome::Acquired);
        assert_eq!(count(&pool, "SELECT count(*) FROM checkpoints WHERE turn_id = 'a'").await, 2, "stored once");
        until("Postgres counts the deadlock", || None, async || deadlocks().await > deadlocks_before).await;
    }

    #[tokio::test]
    async fn a_write_held_up_by_a_lock_until_its_deadline_is_never_stored_and_its_retry_is() {
        let (server, admin) = one_writer(Duration::from_millis(200)).await;
        let mut client = server.client();
        let mut request = Request::new(checkpoint("t", "started", T0, r#"{"step":1}"#));
        request.set_timeout(Duration::from_secs(2));

        // Another session holds the log's table lock past the lock timeout and
        // past the caller's deadline: the writer tries the write again until
        // the caller gives up, then leaves it out, its bytes given back.
        let lock = server.store().hold_write_lock().await;
        let status = client.checkpoint(request).await.expect_err("the write cannot commit while the lock is held");
        // The server's deadline (DEADLINE_EXCEEDED), or the client's own,
        // which then resets the call (CANCELLED); never UNAVAILABLE.
        assert!(matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled), "{status:?}");
        until(
            "the writer lets the write go",
            || None,
            async || gauge(&admin, "stepwell_write_queue_bytes").await == 0.0,
        )
        .await;
        lock.release().await;

        let request = checkpoint("t", "started", T0, r#"{"step":1}"#);
        let retried = client.checkpoint(request).await.expect("the retry is stored");
        assert!(retried.into_inner().inserted, "the write whose caller gave up was never stored");
    }
}
