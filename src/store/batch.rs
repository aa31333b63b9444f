//! The backend-independent half of a group commit: what a batch of writes
//! means, decided in memory so that a backend runs a constant number of
//! statements per batch, however large it is.
//!
//! Every request in a batch was in flight at the same time, so any order of
//! them is a valid order; a batch runs its appends first, then its
//! idempotency requests (in arrival order, against records loaded once). A
//! DeleteTurn chunk is committed alone (the writer never batches it with
//! other writes), so its transaction locks one turn's summary and nothing
//! else, and cannot close a lock cycle with batches of appends. Per-request answers are exactly what the requests would get
//! one at a time: a second identical append in one batch is a duplicate of
//! the first, and a second Begin on one key sees the first's lease.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;

use super::waits::{self, WaitStatements};
use super::{DbError, Deleted, Error, Expired, Fenced, Write, Written};
use crate::domain::keys::{self, BeginPlan, Fence, KeyRecord, Plan};
use crate::domain::memory::{self, Final, ItemsTouch, Path};
use crate::domain::model::{Appended, Cursor, NewCheckpoint, StoredCheckpoint, UnixNanos};
use crate::domain::records::{self, Address, NewRecord, PutRefusal, RecordDelete, RecordPut};
use crate::domain::waits::{WaitDone, WaitRefusal, WaitWrite};

/// The deduplication key of a checkpoint.
pub type CheckpointKey<'a> = (&'a str, &'a str, &'a str, i64);

pub fn checkpoint_key(cp: &NewCheckpoint) -> CheckpointKey<'_> {
    (&cp.namespace, &cp.turn_id, &cp.phase, cp.timestamp)
}

/// The batch's appends to insert: the first of each key, sorted by key so
/// that concurrent batches take index locks in one order.
pub fn unique_appends(batch: &[Write]) -> Vec<&NewCheckpoint> {
    let mut seen = HashMap::new();
    let mut unique = Vec::new();
    for write in batch {
        if let Write::Append(cp) = write
            && seen.insert(checkpoint_key(cp), ()).is_none()
        {
            unique.push(cp);
        }
    }
    unique.sort_by(|a, b| checkpoint_key(a).cmp(&checkpoint_key(b)));
    unique
}

/// What decides an append's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendSource {
    /// This append inserted its checkpoint, as `seq`.
    Inserted(i64),
    /// A repeat, with the same content, of a key this batch inserted as `seq`.
    Repeat(i64),
    /// A repeat of a key this batch inserted, with other content.
    Conflicting,
    /// The key was stored before the batch.
    Stored(StoredCheckpoint),
}

/// The source of each append's answer, by its index in the batch, given the
/// `seq` of each key this batch inserted and the rows of keys already stored.
///
/// A key neither inserted nor found was deleted between the insert and the
/// fetch (a DeleteTurn from another sidecar); the batch then fails as a whole
/// and its callers retry.
pub fn append_sources(
    batch: &[Write],
    inserted: &HashMap<CheckpointKey<'_>, i64>,
    existing: &HashMap<CheckpointKey<'_>, StoredCheckpoint>,
) -> Result<HashMap<usize, AppendSource>, Error> {
    let mut first: HashMap<CheckpointKey<'_>, &NewCheckpoint> = HashMap::new();
    let mut sources = HashMap::new();
    for (index, write) in batch.iter().enumerate() {
        let Write::Append(cp) = write else { continue };
        let key = checkpoint_key(cp);
        let source = match (inserted.get(&key), first.get(&key)) {
            (Some(&seq), Some(earlier)) if cp.same_content(earlier) => AppendSource::Repeat(seq),
            (Some(_), Some(_)) => AppendSource::Conflicting,
            (Some(&seq), None) => {
                first.insert(key, cp);
                AppendSource::Inserted(seq)
            }
            (None, _) => AppendSource::Stored(existing.get(&key).ok_or(Error::Vanished)?.clone()),
        };
        sources.insert(index, source);
    }
    Ok(sources)
}

/// Every append's answer, in batch order, from its source. Each checkpoint
/// moves into its own answer without a copy: a repeat of an inserted key has
/// the same content as the row, so it answers with itself.
pub fn appended(batch: Vec<Write>, mut sources: HashMap<usize, AppendSource>, recorded_at: UnixNanos) -> Vec<Appended> {
    let mut answers = Vec::with_capacity(sources.len());
    for (index, write) in batch.into_iter().enumerate() {
        let Write::Append(checkpoint) = write else { continue };
        let answer = match sources.remove(&index).expect("every append has a source") {
            AppendSource::Inserted(seq) => Appended::Inserted(StoredCheckpoint { checkpoint, recorded_at, seq }),
            AppendSource::Repeat(seq) => Appended::Duplicate(StoredCheckpoint { checkpoint, recorded_at, seq }),
            AppendSource::Conflicting => Appended::Conflict,
            AppendSource::Stored(stored) if checkpoint.same_content(&stored.checkpoint) => Appended::Duplicate(stored),
            AppendSource::Stored(_) => Appended::Conflict,
        };
        answers.push(answer);
    }
    answers
}

/// The (namespace, key) of every idempotency request in the batch, distinct
/// and sorted, so that concurrent batches lock keys in one order.
pub fn idempotency_keys(batch: &[Write]) -> Vec<(&str, &str)> {
    let mut keys: Vec<(&str, &str)> = batch.iter().filter_map(idempotency_key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// How many fencing tokens the batch may need: one per Begin.
pub fn tokens_needed(batch: &[Write]) -> usize {
    batch.iter().filter(|write| matches!(write, Write::Begin(_))).count()
}

/// Plans every idempotency request of the batch in arrival order against
/// `records` (loaded once, keyed by namespace and key), updating them in
/// memory as each request writes. Puts each request's answer in `written`
/// and returns the records to save. Records past their retention count as
/// absent. `tokens` yields fresh fencing tokens in increasing order.
pub fn plan_idempotency(
    batch: &[Write],
    mut records: HashMap<(String, String), KeyRecord>,
    now: UnixNanos,
    tokens: &mut impl Iterator<Item = u64>,
    written: &mut Written,
) -> Vec<KeyRecord> {
    let mut changed: HashMap<(String, String), ()> = HashMap::new();
    for write in batch {
        let Some((namespace, key)) = idempotency_key(write) else {
            if let Write::PutRecords(_) = write {
                written.put.push(Ok(now));
            }
            continue;
        };
        let id = (namespace.to_owned(), key.to_owned());
        let current = records.get(&id).filter(|r| !r.is_purgeable(now));
        let record = match write {
            Write::Begin(args) => {
                let (answer, record) = plan_acquire(current, args, now, tokens);
                written.begun.push(answer);
                record
            }
            Write::Complete { fence, result } => {
                keep(keys::plan_complete(current, fence, result, now), &mut written.completed)
            }
            Write::Release { fence, error, permanent } => {
                keep(keys::plan_release(current, fence, error, *permanent, now), &mut written.released)
            }
            Write::Extend { fence, lease } => {
                keep(keys::plan_extend(current, fence, *lease, now), &mut written.extended)
            }
            Write::PutRecords(put) => {
                let verdict = put.fence.as_ref().map_or(Ok(()), |fence| keys::check_fence(current, fence));
                written.put.push(verdict.map(|()| now).map_err(PutRefusal::Fence));
                None
            }
            Write::Append(_)
            | Write::DeleteTurn { .. }
            | Write::DeleteRecords(_)
            | Write::CopyTurn { .. }
            | Write::Wait(_)
            | Write::PutItems(_)
            | Write::TouchItems(_)
            | Write::DeleteItems { .. } => None,
        };
        if let Some(record) = record {
            records.insert(id.clone(), record);
            changed.insert(id, ());
        }
    }
    let mut to_save: Vec<KeyRecord> = changed.into_keys().filter_map(|id| records.remove(&id)).collect();
    to_save.sort_by(|a, b| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)));
    to_save
}

/// The (namespace, key) an idempotency request is about; `None` for the others.
fn idempotency_key(write: &Write) -> Option<(&str, &str)> {
    match write {
        Write::Begin(args) => Some((&args.namespace, &args.key)),
        Write::Complete { fence, .. } | Write::Release { fence, .. } | Write::Extend { fence, .. } => {
            Some((&fence.namespace, &fence.key))
        }
        Write::PutRecords(put) => put.fence.as_ref().map(|fence| (fence.namespace.as_str(), fence.key.as_str())),
        Write::Wait(WaitWrite::Settle(settle)) => {
            settle.fence.as_ref().map(|fence| (fence.namespace.as_str(), fence.key.as_str()))
        }
        Write::Append(_)
        | Write::DeleteTurn { .. }
        | Write::DeleteRecords(_)
        | Write::CopyTurn { .. }
        | Write::Wait(_)
        | Write::PutItems(_)
        | Write::TouchItems(_)
        | Write::DeleteItems { .. } => None,
    }
}

/// A Begin's answer, and the record to write when it acquires the lease.
fn plan_acquire(
    current: Option<&KeyRecord>,
    args: &keys::BeginArgs,
    now: UnixNanos,
    tokens: &mut impl Iterator<Item = u64>,
) -> (Fenced<keys::BeginOutcome>, Option<KeyRecord>) {
    match keys::plan_begin(current, args, now) {
        BeginPlan::Answer(answer) => (answer, None),
        BeginPlan::Acquire { attempt, previous_lease_expired } => {
            let lease_token = tokens.next().expect("one token per Begin was allocated");
            let acquired = keys::acquired(current, args, now, lease_token, attempt);
            let outcome = keys::BeginOutcome::Acquired {
                lease_token,
                attempt,
                lease_expires_at: acquired.lease_expires_at,
                previous_lease_expired,
            };
            (Ok(outcome), Some(acquired))
        }
    }
}

/// The statements a DeleteTurn chunk runs, each backend's own; what a chunk
/// does with them is `delete_chunk`'s, written once for all.
#[async_trait]
pub trait TurnChunks: Send {
    /// The turn's checkpoint count, newest timestamp and terminal flag, its
    /// summary row locked until the transaction ends (no append to the turn
    /// commits meanwhile); `None` when it has no summary.
    async fn lock_turn(&mut self, namespace: &str, turn_id: &str) -> Result<Option<(i64, i64, bool)>, DbError>;
    /// Deletes up to `rows` of the turn's checkpoints after `from`, oldest
    /// first; answers the (timestamp, seq) of each it deleted.
    async fn delete_oldest(
        &mut self,
        namespace: &str,
        turn_id: &str,
        from: Cursor,
        rows: u32,
    ) -> Result<Vec<(i64, i64)>, DbError>;
    /// The timestamp of the turn's oldest checkpoint after `after`.
    async fn oldest_after(&mut self, namespace: &str, turn_id: &str, after: Cursor) -> Result<Option<i64>, DbError>;
    /// The summary less `deleted` checkpoints whose oldest was at
    /// `oldest_gone`: its first timestamp stays if older (appended after the
    /// delete began), else becomes `oldest_left`.
    async fn shrink_turn(
        &mut self,
        namespace: &str,
        turn_id: &str,
        deleted: i64,
        oldest_gone: i64,
        oldest_left: i64,
    ) -> Result<(), DbError>;
    /// Deletes the turn's summary.
    async fn delete_summary(&mut self, namespace: &str, turn_id: &str) -> Result<(), DbError>;
}

/// One chunk of a DeleteTurn, in its own transaction: lock the turn's
/// summary (an append to the turn then waits for the chunk to commit, and
/// checkpoints it inserted before are not yet visible to the chunk), delete
/// up to `rows` of its oldest checkpoints, then either shrink the summary by
/// as many or, if none are left, delete it. After any chunk, and so after a
/// crash or a cancelled DeleteTurn, every turn with checkpoints has a summary
/// that counts them. As the oldest go first, the summary's latest checkpoint
/// (last timestamp, phase, terminal) stays true; `first_ts_ns` moves to the
/// oldest left; session and workflow version stay as the turn named them.
/// Each chunk starts after the last one's last checkpoint, so it never reads
/// again what earlier chunks deleted (on Postgres, dead index entries that
/// every chunk would otherwise walk past from the turn's start).
///
/// The chunk that finds the turn gone deletes its waits too, in the same
/// transaction: waits go with their turn, whether DeleteTurn or retention
/// deleted it.
pub async fn delete_chunk(
    statements: &mut (impl TurnChunks + WaitStatements),
    namespace: &str,
    turn_id: &str,
    rows: u32,
    after: Option<Cursor>,
    only_if: Option<Expired>,
) -> Result<Deleted, DbError> {
    let mut deleted = delete_checkpoints(statements, namespace, turn_id, rows, after, only_if).await?;
    if deleted.gone {
        deleted.waits = statements.delete_turn_waits(namespace, turn_id).await?;
    }
    Ok(deleted)
}

/// `delete_chunk`'s checkpoints and summary.
async fn delete_checkpoints(
    statements: &mut impl TurnChunks,
    namespace: &str,
    turn_id: &str,
    rows: u32,
    after: Option<Cursor>,
    only_if: Option<Expired>,
) -> Result<Deleted, DbError> {
    let Some((count, last_ts_ns, terminal)) = statements.lock_turn(namespace, turn_id).await? else {
        // No summary: no checkpoints committed, and any being appended
        // commit after this delete.
        return Ok(Deleted { checkpoints: 0, waits: 0, gone: true, next: None, kept: false });
    };
    if let Some(expired) = only_if
        && (last_ts_ns >= expired.last_before || terminal != expired.terminal)
    {
        // Written since retention chose it, or its status changed.
        return Ok(Deleted { checkpoints: 0, waits: 0, gone: false, next: None, kept: true });
    }
    let from = after.unwrap_or(Cursor { timestamp: i64::MIN, seq: i64::MIN });
    let gone = statements.delete_oldest(namespace, turn_id, from, rows).await?;
    let deleted = gone.len() as u64;
    let last = gone.iter().max().map(|&(timestamp, seq)| Cursor { timestamp, seq });
    let (Some(last), Some(oldest_gone)) = (last, gone.iter().map(|&(ts, _)| ts).min()) else {
        if after.is_none() {
            // Nothing at all is left: the summary goes with the turn.
            statements.delete_summary(namespace, turn_id).await?;
            return Ok(Deleted { checkpoints: 0, waits: 0, gone: true, next: None, kept: false });
        }
        // Nothing after the cursor, but checkpoints appended meanwhile
        // with older timestamps: the next chunk starts from the start.
        return Ok(Deleted { checkpoints: 0, waits: 0, gone: false, next: None, kept: false });
    };
    let deleted_rows = i64::try_from(deleted).unwrap_or(i64::MAX);
    if deleted_rows >= count {
        statements.delete_summary(namespace, turn_id).await?;
        return Ok(Deleted { checkpoints: deleted, waits: 0, gone: true, next: None, kept: false });
    }
    let oldest_left = statements.oldest_after(namespace, turn_id, last).await?;
    statements.shrink_turn(namespace, turn_id, deleted_rows, oldest_gone, oldest_left.unwrap_or(oldest_gone)).await?;
    Ok(Deleted { checkpoints: deleted, waits: 0, gone: false, next: Some(last), kept: false })
}

/// The statements a backend runs for a batch, on one connection: its SQL,
/// nothing of what the batch means.
#[async_trait]
pub trait Statements: TurnChunks + WaitStatements {
    /// Serializes the batch's idempotency keys against every other writer
    /// (where the backend has more than one), then reads the store's clock
    /// and draws `tokens` fresh fencing tokens, in increasing order: drawn
    /// after the locks, so a key's tokens increase in the order its locks
    /// are held.
    async fn lock_keys(&mut self, keys: &[(&str, &str)], tokens: usize) -> Result<(UnixNanos, Vec<u64>), DbError>;
    /// Inserts the batch's new checkpoints (and keeps their turns' summaries);
    /// answers the `seq` of each key it inserted.
    async fn insert_checkpoints<'b>(
        &mut self,
        unique: &[&'b NewCheckpoint],
        recorded_at: UnixNanos,
    ) -> Result<HashMap<CheckpointKey<'b>, i64>, DbError>;
    /// The stored rows of keys the batch found already there; no statement
    /// runs when there are none.
    async fn fetch_checkpoints<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, DbError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        self.fetch_stored(keys).await
    }
    /// `fetch_checkpoints` for at least one key.
    async fn fetch_stored<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, DbError>;
    /// The records of the batch's keys, past retention or not.
    async fn load_keys(&mut self, keys: &[(&str, &str)]) -> Result<HashMap<(String, String), KeyRecord>, DbError>;
    /// Writes whole records, replacing the rows of their keys.
    async fn save_keys(&mut self, records: &[KeyRecord]) -> Result<(), DbError>;
    /// Writes the batch's records (`records::final_records`: one per
    /// address, sorted), upserting or inserting if absent as each says.
    async fn put_records(&mut self, records: &[(&str, &NewRecord)], recorded_at: UnixNanos) -> Result<(), DbError>;
    /// Which of `wanted` hold a record, read after `turns` (every turn the
    /// batch's puts may write, sorted) are locked against other writers, as
    /// `put_records` locks them, so no other writer fills one meanwhile.
    async fn stored_addresses(
        &mut self,
        turns: &[(&str, &str)],
        wanted: &[Address],
    ) -> Result<HashSet<Address>, DbError>;
    /// Deletes what a DeleteRecords selects; answers how many records went.
    async fn delete_records(&mut self, delete: &RecordDelete) -> Result<u64, DbError>;
    /// Copies every record of `source` to `target` (replacing what is at an
    /// address there); answers how many.
    async fn copy_turn(
        &mut self,
        namespace: &str,
        source: &str,
        target: &str,
        recorded_at: UnixNanos,
    ) -> Result<u64, DbError>;
    /// Writes the batch's memory writes (`memory::final_writes`: one per
    /// address, at its place), dated `recorded_at`, their expiry from the
    /// store's clock; an expired item is replaced as if absent.
    async fn write_items(&mut self, finals: &[Final<'_>], recorded_at: UnixNanos) -> Result<(), DbError>;
    /// Moves the expiry of the live items named that have a time to live
    /// to their time to live from the store's clock.
    async fn touch_items(&mut self, touch: &ItemsTouch) -> Result<(), DbError>;
    /// Deletes every memory item under `prefix`, with their vectors and
    /// paths; answers how many items went.
    async fn delete_items(&mut self, namespace: &str, prefix: &Path) -> Result<u64, DbError>;
}

/// Whether a batch must be a transaction: a batch of appends alone is one
/// insert statement, atomic and durable by itself.
pub fn needs_transaction(batch: &[Write]) -> bool {
    batch.iter().any(|write| !matches!(write, Write::Append(_)))
}

/// What a batch's statements answered, before its commit: every request's
/// answer but the appends', which `Ran::answers` makes once the batch has
/// committed, moving each checkpoint into its answer.
#[derive(Debug)]
pub struct Ran {
    written: Written,
    sources: HashMap<usize, AppendSource>,
}

impl Ran {
    /// What a batch without appends answered (a backend that ran it its own way).
    pub fn keys_only(written: Written) -> Ran {
        Ran { written, sources: HashMap::new() }
    }

    /// Every request's answer, in `batch`'s order: the batch `run` ran, now committed.
    pub fn answers(self, batch: Vec<Write>, recorded_at: UnixNanos) -> Written {
        let Ran { mut written, sources } = self;
        written.appended = appended(batch, sources, recorded_at);
        written
    }
}

/// Runs a batch's statements: locks first, in one order; then its appends,
/// its idempotency requests and its deletion chunk, which the writer sends
/// alone (see the module comment). The batch is only borrowed, so that a
/// batch whose transaction the database broke off can be run again whole.
pub async fn run(statements: &mut impl Statements, batch: &[Write], recorded_at: UnixNanos) -> Result<Ran, Error> {
    let mut written = Written::default();
    let unique = unique_appends(batch);
    let keys = idempotency_keys(batch);
    let (now, tokens) =
        if keys.is_empty() { (0, Vec::new()) } else { statements.lock_keys(&keys, tokens_needed(batch)).await? };
    let sources = if unique.is_empty() {
        HashMap::new()
    } else {
        let inserted = statements.insert_checkpoints(&unique, recorded_at).await?;
        let missing: Vec<CheckpointKey<'_>> =
            unique.iter().map(|cp| checkpoint_key(cp)).filter(|key| !inserted.contains_key(key)).collect();
        let existing = statements.fetch_checkpoints(&missing).await?;
        append_sources(batch, &inserted, &existing)?
    };
    if !keys.is_empty() {
        let records = statements.load_keys(&keys).await?;
        let changed = plan_idempotency(batch, records, now, &mut tokens.into_iter(), &mut written);
        statements.save_keys(&changed).await?;
    }
    put_records(statements, batch, recorded_at, &mut written).await?;
    run_waits(statements, batch, recorded_at, now, &mut written).await?;
    run_items(statements, batch, recorded_at, &mut written).await?;
    for write in batch {
        match write {
            Write::DeleteTurn { namespace, turn_id, rows, after, only_if } => {
                written.deleted.push(delete_chunk(statements, namespace, turn_id, *rows, *after, *only_if).await?);
            }
            Write::DeleteRecords(delete) => written.records_deleted.push(statements.delete_records(delete).await?),
            Write::CopyTurn { namespace, source, target } => {
                written.copied.push(statements.copy_turn(namespace, source, target, recorded_at).await?);
            }
            Write::DeleteItems { namespace, prefix } => {
                written.items_deleted.push(statements.delete_items(namespace, prefix).await?);
            }
            _ => {}
        }
    }
    Ok(Ran { written, sources })
}

/// Writes the batch's memory puts and deletes (the last write of an
/// address wins), then its refreshes, answering each in `written.items`.
async fn run_items(
    statements: &mut impl Statements,
    batch: &[Write],
    recorded_at: UnixNanos,
    written: &mut Written,
) -> Result<(), DbError> {
    let finals = memory::final_writes(batch.iter().filter_map(|write| match write {
        Write::PutItems(put) => Some(put),
        _ => None,
    }));
    if !finals.is_empty() {
        statements.write_items(&finals, recorded_at).await?;
    }
    for write in batch {
        match write {
            Write::PutItems(_) => written.items.push(recorded_at),
            Write::TouchItems(touch) => {
                statements.touch_items(touch).await?;
                written.items.push(recorded_at);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Runs the batch's wait writes in order, answering each in `written.waits`.
/// `now` is the store's time the batch's key locks read (for a fence).
async fn run_waits(
    statements: &mut impl Statements,
    batch: &[Write],
    recorded_at: UnixNanos,
    now: UnixNanos,
    written: &mut Written,
) -> Result<(), DbError> {
    for write in batch {
        let Write::Wait(write) = write else { continue };
        let answer = match write {
            WaitWrite::Create(new) => waits::create(statements, new, recorded_at).await?,
            WaitWrite::Settle(settle) => match wait_fence(statements, settle.fence.as_ref(), now).await? {
                Ok(()) => waits::settle_one(statements, settle, recorded_at).await?,
                Err(refusal) => Err(WaitRefusal::Fence(refusal)),
            },
            WaitWrite::FireDue { now, limit } => Ok(WaitDone::Fired(statements.fire_due(*now, *limit).await?)),
        };
        written.waits.push(answer);
    }
    Ok(())
}

/// Whether a Signal's fence lets it through: the key's lease, read under
/// the lock the batch took on the key.
async fn wait_fence(
    statements: &mut impl Statements,
    fence: Option<&Fence>,
    now: UnixNanos,
) -> Result<Result<(), keys::Refusal>, DbError> {
    let Some(fence) = fence else { return Ok(Ok(())) };
    let records = statements.load_keys(&[(fence.namespace.as_str(), fence.key.as_str())]).await?;
    let record = records.get(&(fence.namespace.clone(), fence.key.clone())).filter(|r| !r.is_purgeable(now));
    Ok(keys::check_fence(record, fence))
}

/// Writes the records of the batch's PutRecords that their fences let
/// through (each answered by `plan_idempotency`, or now when the batch has
/// no fences) and whose creates and updates find their addresses free or
/// held as they need (`claim`), and
/// dates each answer `recorded_at`.
async fn put_records(
    statements: &mut impl Statements,
    batch: &[Write],
    recorded_at: UnixNanos,
    written: &mut Written,
) -> Result<(), Error> {
    let puts: Vec<&RecordPut> = batch
        .iter()
        .filter_map(|write| match write {
            Write::PutRecords(put) => Some(put),
            _ => None,
        })
        .collect();
    if written.put.is_empty() {
        written.put = puts.iter().map(|_| Ok(recorded_at)).collect();
    }
    claim(statements, &puts, &mut written.put).await?;
    let mut accepted = Vec::new();
    for (put, answer) in puts.iter().zip(written.put.iter_mut()) {
        if let Ok(at) = answer {
            *at = recorded_at;
            accepted.extend(put.records.iter().map(|record| (put.namespace.as_str(), record)));
        }
    }
    if !accepted.is_empty() {
        statements.put_records(&records::final_records(accepted.into_iter()), recorded_at).await?;
    }
    Ok(())
}

/// Refuses each put (not refused already) whose create finds its address
/// taken or whose update finds it empty (`records::claims`), reading the stored addresses under the turn
/// locks; no statement runs when no put creates or updates.
async fn claim(
    statements: &mut impl Statements,
    puts: &[&RecordPut],
    answers: &mut [Result<UnixNanos, PutRefusal>],
) -> Result<(), Error> {
    let open: Vec<Option<&RecordPut>> =
        puts.iter().zip(answers.iter()).map(|(put, answer)| answer.is_ok().then_some(*put)).collect();
    let checking = |put: &&RecordPut| put.records.iter().any(|r| r.mode.checks_address());
    if !open.iter().flatten().any(checking) {
        return Ok(());
    }
    let mut turns: Vec<(&str, &str)> = open
        .iter()
        .flatten()
        .flat_map(|put| put.records.iter().map(|r| (put.namespace.as_str(), r.turn_id.as_str())))
        .collect();
    turns.sort_unstable();
    turns.dedup();
    let wanted: Vec<Address> = open
        .iter()
        .flatten()
        .flat_map(|put| put.records.iter().filter(|r| r.mode.checks_address()).map(|r| Address::of(&put.namespace, r)))
        .collect();
    let stored = statements.stored_addresses(&turns, &wanted).await?;
    for (answer, refusal) in answers.iter_mut().zip(records::claims(&open, &stored)) {
        if let Some(refusal) = refusal {
            *answer = Err(refusal);
        }
    }
    Ok(())
}

/// Keeps a plan's answer in its list; returns the record to write, if any.
fn keep<T>(plan: Plan<T>, answers: &mut Vec<Fenced<T>>) -> Option<KeyRecord> {
    let (answer, record) = match plan {
        Plan::Answer(answer) => (answer, None),
        Plan::Write(record, answer) => (Ok(answer), Some(record)),
    };
    answers.push(answer);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(turn: &str, phase: &str, ts: i64, state: &str) -> NewCheckpoint {
        NewCheckpoint {
            namespace: "default".into(),
            turn_id: turn.into(),
            session_id: String::new(),
            phase: phase.into(),
            state: state.as_bytes().to_vec(),
            timestamp: ts,
            terminal: false,
            workflow_version: String::new(),
        }
    }

    #[test]
    fn a_repeated_append_in_one_batch_is_a_duplicate_or_a_conflict() {
        let batch = vec![
            Write::Append(cp("t", "p", 1, "{}")),
            Write::Append(cp("t", "p", 1, "{}")),
            Write::Append(cp("t", "p", 1, "[]")),
        ];
        assert_eq!(unique_appends(&batch).len(), 1);
        let inserted = HashMap::from([(("default", "t", "p", 1), 7)]);
        let sources = append_sources(&batch, &inserted, &HashMap::new()).unwrap();
        drop(inserted);
        let outcomes = appended(batch, sources, 0);
        assert!(matches!(&outcomes[0], Appended::Inserted(s) if s.seq == 7));
        assert!(matches!(&outcomes[1], Appended::Duplicate(s) if s.seq == 7 && s.checkpoint.state == b"{}"));
        assert!(matches!(outcomes[2], Appended::Conflict));
    }
}
