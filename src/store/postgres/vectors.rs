//! pgvector on a Postgres store: when the database has the `vector`
//! extension (or can create it), `memory_vectors` gains an `embedding`
//! column beside the exact bytes, and one approximate (HNSW, cosine) index
//! per dimension count of `--postgres-vector-index-dims`, each a partial
//! index on `embedding::vector(d)`. A search whose query has an indexed
//! length asks the index for candidates only: the sidecar scores them
//! exactly from the stored bytes, as it scores every item, and when the
//! candidates cannot fill the page (a narrow prefix, a selective filter)
//! the search runs exactly instead. So an answer differs from the exact one
//! only where the index missed a nearer vector (recall, measured by
//! bench/memory-store), never in its scores or order.

use std::collections::BTreeSet;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, Connection, Row};

use super::DbError;
use super::session::Session;
use crate::domain::memory::{ItemsQuery, Path};
use crate::store::Error;

/// Vectors one approximate search asks the index for at most (pgvector's
/// largest `hnsw.ef_search`).
const CANDIDATES_MAX: usize = 1000;
/// The search breadth below which the index is not asked to go: at 100,
/// tight clusters (tests/it/pgvector.rs) came back at recall@10 0.8.
const EF_SEARCH_MIN: usize = 400;
/// Rows one backfill statement converts.
const BACKFILL_CHUNK: i64 = 512;
/// The transaction lock that serialises sidecars preparing the column and
/// indexes (the key is this text's hash).
const PREPARE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('stepwell.memory_vectors.embedding'))";

/// What a store does with pgvector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vectors {
    /// `memory_vectors` has the `embedding` column, which every put fills
    /// (whatever this sidecar's flag, so that other sidecars' indexes see it).
    pub embedding: bool,
    /// The dimension counts searched approximately, if any.
    pub index: Option<VectorIndex>,
}

/// The dimension counts the store indexes approximately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorIndex {
    dims: BTreeSet<u32>,
}

impl VectorIndex {
    /// Whether a query of `len` values can ask the index.
    pub fn covers(&self, len: usize) -> bool {
        u32::try_from(len).is_ok_and(|len| self.dims.contains(&len))
    }
}

/// The longest vector pgvector's `vector` holds; longer ones keep only
/// their bytes (no index covers them).
const EMBEDDING_DIMS_MAX: usize = 16_000;

/// The text to fill `embedding` with, if the vector fits in one.
pub fn embedding(values: &[f32]) -> Option<String> {
    (values.len() <= EMBEDDING_DIMS_MAX).then(|| text(values))
}

/// pgvector's text form of a vector, `[1,0.5,-2]`: each `f32` in its
/// shortest form that reads back to the same value.
pub fn text(values: &[f32]) -> String {
    let mut out = String::with_capacity(values.len() * 10 + 2);
    out.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&v.to_string());
    }
    out.push(']');
    out
}

/// Readies pgvector for `dims`: creates the extension if the server has it
/// and the role may, adds the column, fills it for vectors stored before,
/// and makes the indexes; all in one transaction, under a lock, so sidecars
/// starting together do it once. Without `dims` it only finds whether the
/// column is there (another sidecar made it), which its puts then fill.
pub(super) async fn prepare(base: &PgConnectOptions, session: &Session, dims: &[u32]) -> Result<Vectors, Error> {
    let mut conn = PgConnection::connect_with(&session.bare_options(base)).await.map_err(DbError::sqlx)?;
    let vectors = prepare_on(&mut conn, session, dims).await.map_err(DbError::sqlx)?;
    conn.close().await.map_err(DbError::sqlx)?;
    Ok(vectors)
}

/// `prepare` on `conn`, in one transaction even when it only reads: behind
/// a pooler in transaction mode, a statement's two round trips reach the
/// same server session only inside one.
async fn prepare_on(conn: &mut PgConnection, session: &Session, dims: &[u32]) -> Result<Vectors, sqlx::Error> {
    let mut tx = session.begin(conn).await?;
    if !dims.is_empty() {
        sqlx::raw_sql(PREPARE_LOCK).execute(&mut *tx).await?;
    }
    if dims.is_empty() || !extension(&mut tx).await? {
        let embedding = has_column(&mut tx).await?;
        tx.commit().await?;
        return Ok(Vectors { embedding, index: None });
    }
    sqlx::raw_sql("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    sqlx::raw_sql("ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS embedding vector").execute(&mut *tx).await?;
    let filled = backfill(&mut tx).await?;
    for d in dims {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_{d} ON memory_vectors \
             USING hnsw ((embedding::vector({d})) vector_cosine_ops) WHERE vector_dims(embedding) = {d}"
        )))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    tracing::info!(dims = ?dims, backfilled = filled, "memory searches use pgvector's approximate indexes");
    Ok(Vectors { embedding: true, index: Some(VectorIndex { dims: dims.iter().copied().collect() }) })
}

/// Whether `memory_vectors` has the `embedding` column.
async fn has_column(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let (has,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
                        WHERE table_schema = current_schema() AND table_name = 'memory_vectors' \
                          AND column_name = 'embedding')",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(has)
}

/// Whether the `vector` extension is in the database, creating it when the
/// server has it; a role that may not create it leaves the store exact.
/// `conn` is in a transaction.
async fn extension(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let (installed, available): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'), \
                EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if installed || !available {
        return Ok(installed);
    }
    // In a savepoint: a refusal must not abort the transaction it runs in.
    let mut savepoint = conn.begin().await?;
    match sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS vector").execute(&mut *savepoint).await {
        Ok(_) => savepoint.commit().await.map(|()| true),
        Err(sqlx::Error::Database(e)) => {
            tracing::warn!(error = %e, "pgvector is available but could not be created; memory searches stay exact");
            savepoint.rollback().await.map(|()| false)
        }
        Err(e) => Err(e),
    }
}

/// Fills `embedding` for the vectors stored without one (before pgvector
/// was there), chunk by chunk in key order; answers how many.
async fn backfill(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let mut filled = 0;
    loop {
        let rows = sqlx::query(
            "SELECT namespace, path, key, field, vector FROM memory_vectors \
             WHERE embedding IS NULL AND length(vector) <= $2 ORDER BY namespace, path, key, field LIMIT $1",
        )
        .bind(BACKFILL_CHUNK)
        .bind((EMBEDDING_DIMS_MAX * 4) as i32)
        .fetch_all(&mut *conn)
        .await?;
        if rows.is_empty() {
            return Ok(filled);
        }
        let column = |name: &str| rows.iter().map(|r| r.try_get::<String, _>(name)).collect::<Result<Vec<_>, _>>();
        let (namespaces, paths, keys, fields) =
            (column("namespace")?, column("path")?, column("key")?, column("field")?);
        let embeddings = rows
            .iter()
            .map(|r| {
                r.try_get::<Vec<u8>, _>("vector").map(|b| embedding(&crate::domain::memory::Vector::values_of(&b)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        sqlx::query(
            "UPDATE memory_vectors v SET embedding = CAST(u.e AS vector) \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(n, p, k, f, e) \
             WHERE v.namespace = u.n AND v.path = u.p AND v.key = u.k AND v.field = u.f",
        )
        .bind(&namespaces)
        .bind(&paths)
        .bind(&keys)
        .bind(&fields)
        .bind(&embeddings)
        .execute(&mut *conn)
        .await?;
        filled += rows.len() as u64;
    }
}

/// The addresses of the items whose vectors the index finds nearest the
/// query under the prefix, nearest first, each once; at most enough for a
/// page of `room` items. `None` when the page is too deep for the index.
pub(super) async fn candidates(
    conn: &mut PgConnection,
    q: &ItemsQuery,
    room: usize,
) -> Result<Option<Vec<(Path, String)>>, sqlx::Error> {
    let Some(query) = q.query.as_deref() else { return Ok(None) };
    let wanted = (room * 2).max(40);
    if wanted > CANDIDATES_MAX {
        return Ok(None);
    }
    let d = query.len();
    let mut tx = conn.begin().await?;
    // The planner cannot estimate `vector_dims(embedding) = d` (it guesses
    // 0.5% of the rows) and then prefers scoring every row to the index;
    // with sorting and sequential scans off for this transaction, the index
    // is the only plan that gives the order.
    sqlx::query(
        "SELECT set_config('hnsw.ef_search', $1, true), set_config('enable_seqscan', 'off', true), \
                set_config('enable_sort', 'off', true)",
    )
    .bind(wanted.clamp(EF_SEARCH_MIN, CANDIDATES_MAX).to_string())
    .execute(&mut *tx)
    .await?;
    let rows: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT path, key FROM memory_vectors \
         WHERE vector_dims(embedding) = {d} AND namespace = $1 AND path >= $2 AND ($3::text IS NULL OR path < $3) \
         ORDER BY embedding::vector({d}) <=> CAST($4 AS vector({d})) LIMIT $5"
    )))
    .bind(&q.namespace)
    .bind(q.prefix.as_str())
    .bind(q.prefix.upper())
    .bind(text(query))
    .bind(wanted as i64)
    .fetch_all(&mut *tx)
    .await?;
    // It only read: rolling back (a savepoint, behind a pooler) also undoes
    // the settings, which the rest of the search must not run under.
    tx.rollback().await?;
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    let found = rows.into_iter().filter(|row| seen.insert(row.clone())).map(|(p, k)| (Path::from_stored(p), k));
    Ok(Some(found.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_is_written_as_pgvector_reads_it_and_reads_back_the_same() {
        assert_eq!(text(&[1.0, 0.5, -2.0]), "[1,0.5,-2]");
        assert_eq!(text(&[]), "[]");
        let awkward = [0.1f32, f32::MIN_POSITIVE, 3.4e38, -1e-7];
        let written = text(&awkward);
        let read: Vec<f32> =
            written.trim_matches(['[', ']']).split(',').map(|v| v.parse().expect("a number")).collect();
        assert_eq!(read, awkward);
        assert!(embedding(&vec![0.0; EMBEDDING_DIMS_MAX]).is_some());
        assert_eq!(embedding(&vec![0.0; EMBEDDING_DIMS_MAX + 1]), None, "too long for pgvector: bytes only");
    }

    #[test]
    fn only_the_indexed_lengths_ask_the_index() {
        let index = VectorIndex { dims: [3, 768].into_iter().collect() };
        assert!(index.covers(768) && index.covers(3));
        assert!(!index.covers(4) && !index.covers(0));
    }
}
