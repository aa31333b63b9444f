//! A batch of only Begins and Completes, each on a key of its own, in one
//! statement: the function `stepwell_keys_batch` (migration 0010) takes the
//! keys' advisory locks, plans every request by the rules of
//! `domain::keys` and writes the records, so the batch is one round trip
//! and one commit where the general path (`batch`) takes five: BEGIN, the
//! locks, the records, their upsert, COMMIT. Any other batch, or one that
//! names a key twice (a Complete and a new Begin of one key, say, whose
//! order matters), takes the general path.
//!
//! The function's rows are decoded here into the answers the general path
//! would give. The randomized model test (`tests/it/idempotency_model.rs`)
//! sends one request at a time, so each is a batch of one on this path, and
//! checks every answer against a model of the contract written apart from
//! these rules; the contention tests run it beside the general path.

use crate::store::sql_row::sql_row;
use sqlx::postgres::PgConnection;

use crate::domain::clock::Clock;
use crate::domain::keys::{BeginOutcome, Refusal};
use crate::domain::model::UnixNanos;
use crate::store::batch::{Ran, idempotency_keys};
use crate::store::rows::decode_error;
use crate::store::{DbError, Error, Fenced, Write, Written};

const KEYS_BATCH: &str = "SELECT * FROM stepwell_keys_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// Whether the batch can run as one statement: only Begins and Completes,
/// no key named twice.
pub(super) fn applies(batch: &[Write]) -> bool {
    !batch.is_empty()
        && batch.iter().all(|write| matches!(write, Write::Begin(_) | Write::Complete { .. }))
        && idempotency_keys(batch).len() == batch.len()
}

sql_row! {
    /// One answer row of `stepwell_keys_batch`.
    #[derive(Debug)]
    struct AnswerRow {
        kind: i32,
        idx: i64,
        code: i32,
        attempt: i64,
        lease_token: i64,
        at_ns: i64,
        previous_lease_expired: bool,
        payload: Option<Vec<u8>>,
    }
}

/// The Begins' and the Completes' arguments as the function's arrays.
#[derive(Default)]
struct Arrays<'b> {
    begin_namespaces: Vec<&'b str>,
    begin_keys: Vec<&'b str>,
    fingerprints: Vec<&'b [u8]>,
    leases: Vec<i64>,
    retentions: Vec<i64>,
    complete_namespaces: Vec<&'b str>,
    complete_keys: Vec<&'b str>,
    tokens: Vec<i64>,
    results: Vec<&'b [u8]>,
}

impl<'b> Arrays<'b> {
    fn of(batch: &'b [Write]) -> Result<Arrays<'b>, DbError> {
        let mut arrays = Arrays::default();
        for write in batch {
            match write {
                Write::Begin(args) => {
                    arrays.begin_namespaces.push(&args.namespace);
                    arrays.begin_keys.push(&args.key);
                    arrays.fingerprints.push(&args.fingerprint);
                    arrays.leases.push(args.lease);
                    arrays.retentions.push(args.retention);
                }
                Write::Complete { fence, result } => {
                    arrays.complete_namespaces.push(&fence.namespace);
                    arrays.complete_keys.push(&fence.key);
                    // No stored token is negative, so a token past i64's range
                    // (never issued) holds nothing, as on the general path.
                    arrays.tokens.push(i64::try_from(fence.lease_token).unwrap_or(-1));
                    arrays.results.push(result);
                }
                _ => return Err(decode_error("only Begins and Completes run as one statement".into())),
            }
        }
        Ok(arrays)
    }
}

/// Runs the batch as one statement, atomic and durable by itself, and
/// answers each request in the batch's order.
pub(super) async fn run(conn: &mut PgConnection, clock: &Clock, batch: &[Write]) -> Result<Ran, Error> {
    let a = Arrays::of(batch)?;
    let mut rows: Vec<AnswerRow> = sqlx::query_as(KEYS_BATCH)
        .bind(a.begin_namespaces)
        .bind(a.begin_keys)
        .bind(a.fingerprints)
        .bind(a.leases)
        .bind(a.retentions)
        .bind(a.complete_namespaces)
        .bind(a.complete_keys)
        .bind(a.tokens)
        .bind(a.results)
        .bind(clock.offset())
        .fetch_all(conn)
        .await
        .map_err(DbError::sqlx)?;
    rows.sort_unstable_by_key(|row| (row.kind, row.idx));
    let mut written = Written::default();
    for row in rows {
        match row.kind {
            0 => written.begun.push(begun(row)?),
            1 => written.completed.push(completed(&row)?),
            kind => return Err(decode_error(format!("unknown answer kind {kind}")).into()),
        }
    }
    if written.begun.len() + written.completed.len() != batch.len() {
        return Err(decode_error("the batch statement did not answer every request".into()).into());
    }
    Ok(Ran::keys_only(written))
}

/// A refusal's code, shared by both kinds of request.
fn refusal(code: i32) -> Result<Refusal, DbError> {
    match code {
        10 => Ok(Refusal::KeyReused),
        11 => Ok(Refusal::LeaseLost),
        12 => Ok(Refusal::NotAcquired),
        13 => Ok(Refusal::ResultMismatch),
        code => Err(decode_error(format!("unknown answer code {code}"))),
    }
}

fn begun(row: AnswerRow) -> Result<Fenced<BeginOutcome>, DbError> {
    let attempt =
        u32::try_from(row.attempt).map_err(|_| decode_error(format!("attempt {} out of range", row.attempt)))?;
    let payload = row.payload.unwrap_or_default();
    Ok(Ok(match row.code {
        0 => BeginOutcome::Acquired {
            lease_token: u64::try_from(row.lease_token)
                .map_err(|_| decode_error(format!("token {} < 0", row.lease_token)))?,
            attempt,
            lease_expires_at: row.at_ns,
            previous_lease_expired: row.previous_lease_expired,
        },
        1 => BeginOutcome::Completed { attempt, result: payload },
        2 => BeginOutcome::InProgress { attempt, lease_expires_at: row.at_ns },
        3 => BeginOutcome::Failed {
            attempt,
            error: String::from_utf8(payload).map_err(|_| decode_error("error is not UTF-8".into()))?,
        },
        code => return Ok(Err(refusal(code)?)),
    }))
}

fn completed(row: &AnswerRow) -> Result<Fenced<UnixNanos>, DbError> {
    match row.code {
        0 => Ok(Ok(row.at_ns)),
        code => Ok(Err(refusal(code)?)),
    }
}
