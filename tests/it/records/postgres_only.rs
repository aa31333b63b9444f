//! On Postgres, a ListRecords metadata filter is jsonb containment that the
//! `records_metadata` GIN index answers: with many records and a selective
//! filter across turns, the plan of the list's statement reads that index
//! rather than walking the kind's records; within a turn, an index too. Runs in the Postgres pass only (its module
//! name is skipped in the SQLite one).

use sqlx::PgPool;
use stepwell::api::pb::ListRecordsRequest;
use stepwell::config::Database;

use stepwell_test_support::backend::{TestStore, fresh_postgres_database};
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, ids, list, list_turn};

const RECORDS: usize = 20_000;

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
        if turn.is_none() {
            assert!(plan.contains("records_metadata"), "across turns, a selective filter reads the GIN index:\n{plan}");
        }
        // Within a turn, the turn's index narrows as well; never the whole table.
        assert!(plan.contains("Index") && !plan.contains("Seq Scan"), "no scan of the table:\n{plan}");
    }
}
