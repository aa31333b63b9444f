//! On Postgres, a ListRecords metadata filter is jsonb containment that the
//! `records_metadata` GIN index answers: with many records and a selective
//! filter across turns, the plan of the list's statement reads that index
//! rather than walking the kind's records; within a turn, an index too.
//! The portable profile builds that index with plain `jsonb_ops`, whose
//! plan across turns is left to the planner.
//! And two batches committing side by side (Postgres's writer runs several)
//! that upsert and insert-if-absent the same addresses in opposite modes
//! must both commit, not deadlock: a batch's row locks are meant to come in
//! one order. Runs in the Postgres pass only (its module
//! name is skipped in the SQLite one).

use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool};
use stepwell::api::pb::ListRecordsRequest;
use stepwell::config::sections::Config;
use stepwell::domain::records::{NewRecord, PutMode, RecordPut};
use stepwell::store::{self, Write};
use stepwell::store::{Database, PostgresProfile};

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::{TestStore, fresh_postgres_database};
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, ids, list, list_turn};

const RECORDS: usize = 20_000;

/// Asserts that the metadata index is the one the run's profile builds
/// (jsonb_path_ops, or with the portable profile plain jsonb_ops), and
/// answers whether the profile is the portable one.
async fn assert_the_profiles_metadata_index(store: &TestStore, pool: &PgPool) -> bool {
    let portable = store.postgres_mode().profile == PostgresProfile::Portable;
    let index: String = sqlx::query_scalar("SELECT indexdef FROM pg_indexes WHERE indexname = 'records_metadata'")
        .fetch_one(pool)
        .await
        .expect("the metadata index");
    assert_eq!(index.contains("jsonb_path_ops"), !portable, "{index}");
    assert!(index.contains("USING gin (metadata"), "{index}");
    portable
}

#[tokio::test]
async fn a_metadata_filter_reads_the_records_metadata_index() {
    let store = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });
    let server = Sidecar::builder().store(&store).start().await;
    let mut client = server.records();
    // The schema is the sidecar's; the rows are written directly, many at once.
    store
        .execute(
            "unused: this test runs on Postgres only",
            &format!(
                "INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, \
                                      refs, recorded_at_ns) \
                 SELECT 'default', 'turn-' || (i % 50), '{KIND}', '', lpad(i::text, 6, '0'), '', '', '\\x00', \
                        jsonb_build_object('run_id', 'r' || i, 'step', i % 7), '[]', 0 \
                 FROM generate_series(1, {RECORDS}) i; ANALYZE records;"
            ),
        )
        .await;

    let filter = br#"{"run_id": "r12345"}"#.to_vec();
    let found = ids(&mut client, ListRecordsRequest { metadata_contains: filter.clone(), ..list(KIND) }).await;
    assert_eq!(found, ["012345"]);
    let in_turn = ListRecordsRequest { metadata_contains: filter, ..list_turn("turn-45", KIND) };
    assert_eq!(ids(&mut client, in_turn).await, ["012345"]);

    // The list's statement, as src/store/postgres/records.rs builds it for
    // a filter across turns (and within one).
    let pool = PgPool::connect(&store.url()).await.expect("connect to the test's database");
    let portable = assert_the_profiles_metadata_index(&store, &pool).await;
    for turn in [None, Some("turn-45")] {
        let filters = match turn {
            Some(_) => " AND turn_id = $3 AND metadata @> CAST($4 AS jsonb)",
            None => " AND metadata @> CAST($3 AS jsonb)",
        };
        let sql = format!(
            "EXPLAIN WITH page AS MATERIALIZED (SELECT * FROM records WHERE namespace = $1 AND kind = $2{filters} \
               ORDER BY id DESC, turn_id DESC, scope DESC LIMIT 1001) \
             SELECT * FROM page"
        );
        let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).bind("default").bind(KIND);
        if let Some(turn) = turn {
            query = query.bind(turn);
        }
        let query = query.bind(r#"{"run_id": "r12345"}"#);
        let plan = query.fetch_all(&pool).await.expect("explain").join("\n");
        if portable && turn.is_none() {
            // jsonb_ops indexes keys and values apart, so the planner sees
            // `run_id` in every row and may walk the table at this size.
            continue;
        }
        if turn.is_none() {
            assert!(plan.contains("records_metadata"), "across turns, a selective filter reads the GIN index:\n{plan}");
        }
        // Within a turn, the turn's index narrows as well; never the whole table.
        assert!(plan.contains("Index") && !plan.contains("Seq Scan"), "no scan of the table:\n{plan}");
    }
}

fn new_record(id: &str, payload: &str, mode: PutMode) -> NewRecord {
    super::store_record("t", id, payload, mode)
}

fn put_of(records: Vec<NewRecord>) -> Write {
    Write::PutRecords(RecordPut { namespace: "default".to_owned(), records, fence: None })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_upserting_and_inserting_the_same_addresses_both_commit() {
    use PutMode::{InsertIfAbsent, Upsert};
    let test_store = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    store
        .write(vec![put_of(vec![new_record("x", "seed", Upsert), new_record("y", "seed", Upsert)])])
        .await
        .expect("the seed commits");
    // Inserts of payload "hold" wait for the test's advisory lock, after
    // their batch's upserts ran: the point where each batch holds the row it
    // upserted and is about to insert-if-absent the other's.
    test_store
        .execute(
            "unused: this test runs on Postgres only",
            "CREATE FUNCTION hold_inserts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.payload = convert_to('hold', 'UTF8') THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER hold_inserts BEFORE INSERT ON records FOR EACH ROW EXECUTE FUNCTION hold_inserts()",
        )
        .await;
    let mut gate = PgConnection::connect(&test_store.url()).await.expect("connect");
    sqlx::query("SELECT pg_advisory_lock(4242)").execute(&mut gate).await.expect("close the gate");

    // Each batch is what the writer commits for puts of several callers:
    // one upserts x and inserts y if absent, the other the reverse.
    let batch_a =
        || vec![put_of(vec![new_record("x", "a", Upsert)]), put_of(vec![new_record("y", "hold", InsertIfAbsent)])];
    let batch_b =
        || vec![put_of(vec![new_record("y", "b", Upsert)]), put_of(vec![new_record("x", "hold", InsertIfAbsent)])];
    let (a, b) = (store.clone(), store.clone());
    let first = tokio::spawn(async move { a.write(batch_a()).await });
    let second = tokio::spawn(async move { b.write(batch_b()).await });
    // Wait until both batches wait (a condition, polled): one at the gate,
    // holding its turn's lock; the other for that turn lock, before taking
    // any row, which is what keeps the two from deadlocking.
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    loop {
        let waiting: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                .fetch_one(&mut gate)
                .await
                .expect("read pg_locks");
        if waiting == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "both batches wait: at the gate, or for the turn");
        tokio::task::yield_now().await;
    }
    sqlx::query("SELECT pg_advisory_unlock(4242)").execute(&mut gate).await.expect("open the gate");

    let answers = [(first.await.expect("a batch task"), batch_a()), (second.await.expect("a batch task"), batch_b())];
    let failed = failures_after_retrying_serialization_failures(&store, answers).await;
    assert!(failed.is_empty(), "two batches of puts, each valid alone, must both commit: {failed:?}");
}

#[tokio::test]
async fn a_turns_newest_records_are_read_through_the_primary_key_whatever_the_statistics_say() {
    let store = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });
    let _server = Sidecar::builder().store(&store).start().await;
    // Statistics taken while the namespace held one turn, then many records
    // of other turns, newer ids included, as a store of many sessions grows.
    let rows = |turn: &str, count: u32| {
        format!(
            "INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, \
                                  refs, recorded_at_ns) \
             SELECT 'default', {turn}, '{KIND}', '', lpad(i::text, 20, '0'), '', '', '\\x00', NULL, '[]', 0 \
             FROM generate_series(1, {count}) i;"
        )
    };
    let first = rows("'early'", 20) + "ANALYZE records;";
    store.execute("unused: this test runs on Postgres only", &first).await;
    store.execute("unused: this test runs on Postgres only", &rows("'later-' || (i % 16)", 12_000)).await;

    // The list's statement, as src/store/postgres/records.rs builds it for
    // one turn and scope, with the turn and scope as parameters and as
    // constants (a prepared statement's generic and custom plans).
    let pool = PgPool::connect(&store.url()).await.expect("connect to the test's database");
    let mut conn = pool.acquire().await.expect("a connection");
    for mode in ["force_generic_plan", "force_custom_plan"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("SET plan_cache_mode = {mode}")))
            .execute(&mut *conn)
            .await
            .expect("set plan_cache_mode");
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN WITH page AS MATERIALIZED (SELECT * FROM records WHERE namespace = $1 AND kind = $2 \
               AND turn_id = $3 AND scope = $4 ORDER BY id DESC, turn_id DESC, scope DESC LIMIT $5) \
             SELECT * FROM page",
        )
        .bind("default")
        .bind(KIND)
        .bind("early")
        .bind("")
        .bind(2_i64)
        .fetch_all(&mut *conn)
        .await
        .expect("explain");
        let plan = plan.join("\n");
        assert!(plan.contains("records_pkey") && !plan.contains("records_by_id"), "{mode}:\n{plan}");
    }
}

/// The batches' failures, once each broken off as a serialization failure
/// is tried again: with every transaction SERIALIZABLE (a pass of the test
/// command) one of two conflicting batches may be, which leaves nothing
/// behind and which the writer tries again.
async fn failures_after_retrying_serialization_failures(
    store: &std::sync::Arc<dyn store::Store>,
    answers: [(Result<store::Written, store::Error>, Vec<Write>); 2],
) -> Vec<String> {
    let mut failed = Vec::new();
    for (answer, batch) in answers {
        let answer = match answer {
            Err(error) if error.cause() == store::Cause::SerializationFailure => store.write(batch).await,
            answer => answer,
        };
        failed.extend(answer.err().map(|e| e.to_string()));
    }
    failed
}
