//! Postgres's statements for waits (WaitService): the shared SQL of
//! `store::waits`, run on a batch's connection inside its transaction, and
//! the reads on a pooled connection. Every statement that settles a wait
//! also sends `pg_notify` on `WAITS_CHANNEL` for each wait it settled,
//! inside the settling transaction, so the notification is delivered (to
//! every sidecar listening) only if the settlement commits.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions};

use super::batch::Conn;
use crate::domain::model::UnixNanos;
use crate::domain::waits::{NewWait, Settle, Wait, WaitKey, WaitQuery, due_at};
use crate::store::DbError;
use crate::store::hub::Hub;
use crate::store::waits::{
    COUNT_TURN_WAITS, DELETE_TURN_WAITS, FIRE_DUE_POSTGRES, GET_WAIT, INSERT_SETTLED_WAIT, INSERT_WAIT, LIST_WAITS,
    NEXT_DUE, SETTLE_WAIT, WaitDbRow, WaitStatements, into_waits,
};

/// The channel settlements are announced on; the payload is the wait's key.
pub const WAITS_CHANNEL: &str = "stepwell_waits";

/// The `application_name` of each sidecar's listening connection, by which
/// an operator (or a test) finds it in `pg_stat_activity`.
pub const LISTENER_APPLICATION_NAME: &str = "stepwell-waits-listener";

/// The first pause before connecting the listener again; each doubles it.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two attempts to connect the listener.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Listens for the settlements every sidecar of the store announces, on a
/// connection of its own (outside the pool, so a busy pool never delays a
/// wake), and wakes this sidecar's waiters of each, forever. A lost
/// connection is opened again after a pause that doubles up to
/// `RECONNECT_MAX`; what was announced meanwhile is missed, and the poll
/// (`server::waits::poll`) finds it within a second.
pub(super) async fn listen(options: PgConnectOptions, hub: Arc<Hub>) {
    let options = options.application_name(LISTENER_APPLICATION_NAME);
    let mut pause = RECONNECT_FIRST;
    loop {
        match listen_once(&options, &hub).await {
            Ok(()) => pause = RECONNECT_FIRST,
            Err(error) => tracing::warn!(%error, ?pause, "the waits' listening connection failed; reconnecting"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// One listening connection, until it is lost: `Ok` if it listened first.
async fn listen_once(options: &PgConnectOptions, hub: &Hub) -> Result<(), sqlx::Error> {
    // A pool of one, only for PgListener: it never reconnects by itself here.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options.clone())
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    listener.eager_reconnect(false);
    listener.listen(WAITS_CHANNEL).await?;
    tracing::debug!("listening for the settlements of waits");
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match serde_json::from_str::<(String, String, String)>(notification.payload()) {
                Ok((namespace, turn_id, name)) => hub.wake(&WaitKey { namespace, turn_id, name }, None),
                Err(error) => tracing::warn!(%error, "a settlement's notification is not a wait's key; ignored"),
            },
            Ok(None) => {
                tracing::warn!("the waits' listening connection was lost; reconnecting");
                return Ok(());
            }
            Err(error) => {
                tracing::warn!(%error, "the waits' listening connection failed; reconnecting");
                return Ok(());
            }
        }
    }
}

/// `sql`, whose rows are settled waits, with a notification for each
/// whose payload is the wait's key as a JSON array [namespace, turn_id,
/// name]. The notifications' CTE is joined to the rows so that it runs.
fn notifying(sql: &str) -> String {
    format!(
        "WITH settled AS ({sql}), \
              notified AS (SELECT count(pg_notify('{WAITS_CHANNEL}', \
                             CAST(json_build_array(namespace, turn_id, name) AS text))) AS n FROM settled) \
         SELECT settled.* FROM settled, notified"
    )
}

/// Those of the keys `$1, $2, $3` that are settled, each found through the
/// primary key (as `LOAD_KEYS` of the batch reads keys).
const SETTLED_WAITS: &str = "SELECT w.* FROM UNNEST($1::text[], $2::text[], $3::text[]) AS k(namespace, turn_id, name) \
         CROSS JOIN LATERAL (SELECT namespace, turn_id, name, status, metadata, created_at_ns, expire_at_ns, \
           resolve_at_ns, settled_at_ns, payload, content_type, settled_by, settled_span FROM waits r \
           WHERE r.namespace = k.namespace AND r.turn_id = k.turn_id AND r.name = k.name AND r.status <> 1 \
           OFFSET 0) w";

/// A wait, on any connection.
pub(super) async fn get(conn: &mut PgConnection, key: &WaitKey) -> Result<Option<Wait>, DbError> {
    let row: Option<WaitDbRow> = sqlx::query_as(GET_WAIT)
        .bind(&key.namespace)
        .bind(&key.turn_id)
        .bind(&key.name)
        .fetch_optional(conn)
        .await
        .map_err(DbError::sqlx)?;
    row.map(WaitDbRow::into_wait).transpose()
}

/// Those of `keys` that are settled, in one statement.
pub(super) async fn settled(conn: &mut PgConnection, keys: &[WaitKey]) -> Result<Vec<Wait>, DbError> {
    let namespaces: Vec<&str> = keys.iter().map(|key| key.namespace.as_str()).collect();
    let turns: Vec<&str> = keys.iter().map(|key| key.turn_id.as_str()).collect();
    let names: Vec<&str> = keys.iter().map(|key| key.name.as_str()).collect();
    let rows: Vec<WaitDbRow> = sqlx::query_as(SETTLED_WAITS)
        .bind(namespaces)
        .bind(turns)
        .bind(names)
        .fetch_all(conn)
        .await
        .map_err(DbError::sqlx)?;
    into_waits(rows)
}

/// A page of waits, and whether more follow.
pub(super) async fn list(conn: &mut PgConnection, q: &WaitQuery) -> Result<(Vec<Wait>, bool), DbError> {
    let (after_turn, after_name) = q.after.clone().unwrap_or_default();
    let rows: Vec<WaitDbRow> = sqlx::query_as(LIST_WAITS)
        .bind(&q.namespace)
        .bind(after_turn)
        .bind(after_name)
        .bind(q.turn_id.as_deref())
        .bind(q.status.map(|status| status.code()))
        .bind(q.resolve_before)
        .bind(i64::from(q.limit) + 1)
        .fetch_all(conn)
        .await
        .map_err(DbError::sqlx)?;
    let mut page = into_waits(rows)?;
    let more = page.len() > q.limit as usize;
    page.truncate(q.limit as usize);
    Ok((page, more))
}

/// When the next pending wait falls due.
pub(super) async fn next_due(conn: &mut PgConnection) -> Result<Option<UnixNanos>, DbError> {
    let (due,): (Option<i64>,) = sqlx::query_as(NEXT_DUE).fetch_one(conn).await.map_err(DbError::sqlx)?;
    Ok(due)
}

#[async_trait]
impl WaitStatements for Conn<'_> {
    async fn get_wait(&mut self, key: &WaitKey) -> Result<Option<Wait>, DbError> {
        get(self.conn, key).await
    }

    async fn count_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<i64, DbError> {
        let (count,): (i64,) = sqlx::query_as(COUNT_TURN_WAITS)
            .bind(namespace)
            .bind(turn_id)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        Ok(count)
    }

    async fn insert_wait(&mut self, new: &NewWait, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        let row: Option<WaitDbRow> = sqlx::query_as(INSERT_WAIT)
            .bind(&new.key.namespace)
            .bind(&new.key.turn_id)
            .bind(&new.key.name)
            .bind(new.metadata.as_deref())
            .bind(at)
            .bind(new.expire_at)
            .bind(new.resolve_at)
            .bind(due_at(new.resolve_at, new.expire_at))
            .bind(Vec::<u8>::new())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        row.map(WaitDbRow::into_wait).transpose()
    }

    async fn settle_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        settle_with(self.conn, &notifying(SETTLE_WAIT), settle, at).await
    }

    async fn insert_settled_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        settle_with(self.conn, &notifying(INSERT_SETTLED_WAIT), settle, at).await
    }

    async fn fire_due(&mut self, now: UnixNanos, limit: u32) -> Result<Vec<Wait>, DbError> {
        let rows: Vec<WaitDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(notifying(FIRE_DUE_POSTGRES)))
            .bind(now)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        into_waits(rows)
    }

    async fn delete_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<u64, DbError> {
        let done = sqlx::query(DELETE_TURN_WAITS)
            .bind(namespace)
            .bind(turn_id)
            .execute(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        Ok(done.rows_affected())
    }
}

/// Runs a settling statement (`SETTLE_WAIT`'s parameters) and reads the wait it settled, if any.
async fn settle_with(
    conn: &mut PgConnection,
    sql: &str,
    settle: &Settle,
    at: UnixNanos,
) -> Result<Option<Wait>, DbError> {
    let row: Option<WaitDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(&settle.key.namespace)
        .bind(&settle.key.turn_id)
        .bind(&settle.key.name)
        .bind(settle.status.code())
        .bind(at)
        .bind(&settle.payload)
        .bind(&settle.content_type)
        .bind(&settle.settled_by)
        .bind(settle.span.as_deref())
        .fetch_optional(conn)
        .await
        .map_err(DbError::sqlx)?;
    row.map(WaitDbRow::into_wait).transpose()
}
