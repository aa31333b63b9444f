//! The group-commit writer: every write request enters one bounded queue,
//! and writer tasks each take whatever is waiting (up to `batch_max`, with no
//! fixed delay, so batch size follows load), commit it as one transaction
//! through `Store::attempt`, then answer each caller. Many callers' writes
//! share one commit (one fsync), which is what lets a sidecar outrun a client
//! that commits each write alone.
//!
//! The queue is bounded twice: by the number of requests, and by the bytes
//! they carry (`Write::bytes`), which a request holds from the moment it is
//! queued until its batch has committed or failed. A full queue, by either
//! bound, refuses at once (RESOURCE_EXHAUSTED) rather than growing. A caller
//! that gave up while its request waited (its deadline passed, or it hung
//! up) has dropped its reply; a writer drops such requests when it takes a
//! batch, so they are never stored, and their bytes go back at once. A
//! batch whose commit fails answers every request in it with the error, and
//! nothing of it is acknowledged. The rest of the service reaches the queue
//! only through the cheap, cloneable `Writer` handle. Each caller waits on a
//! reply of its own request's type, and a batch's answers come back typed per
//! kind, so an answer can only reach a caller waiting for that kind.
//!
//! Contention between writers costs latency, not errors. A batch the
//! database broke off for contention (`Cause::is_contention`: a deadlock,
//! a serialization failure, a lock wait past Postgres's `lock_timeout`,
//! SQLite's file busy past its busy timeout, a row another sidecar deleted
//! meanwhile) left nothing behind, and the store hands it back
//! (`Store::attempt`); the writer tries it again whole, as one transaction,
//! after a pause that doubles each time and is partly random (`backoff`), at
//! most `RETRIES_MAX` times. Each caller's deadline bounds the retries: a
//! caller that gave up (the request timeout, or its own deadline) is left
//! out of the next attempt, so its write is never stored, and a batch whose
//! callers have all gone is not tried again. No caller hears anything before
//! its batch commits or the writer gives up on it, which the log's warning
//! then names with its cause. A retry commits alone: the sidecar's other
//! writer tasks wait while it runs, so that under SERIALIZABLE (the default
//! of some distributed engines) a batch is not broken off again and again
//! by its own sidecar's batches.
//!
//! A DeleteTurn goes through the queue in chunks of at most
//! `delete_chunk_rows` checkpoints, one after another, and each chunk is
//! committed alone, apart from the batch it was taken with. Other writes
//! queued meanwhile are committed between two chunks, so deleting a huge turn
//! never holds the (single SQLite) writer for long, and a delete never shares
//! a transaction, or its locks, with appends.
//!
//! A writer is a task on the runtime for a store that awaits its database
//! (Postgres), and a thread of its own for one whose `attempt` blocks
//! (`Store::writes_block`: SQLite, whose statements run on the thread that
//! commits). A write then costs two handoffs: the request's task to the
//! committer thread, and the committer's answer back.
//!
//! Each batch is observed after it ends: its size, each write's wait in the
//! queue and the commit's duration go to the metrics, and, for the writes
//! whose requests are traced, a queue-wait and a commit span each, and one
//! batch span linked to them all (`Traces::batch`). A write notes when it
//! was queued only while metrics or its trace want it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::SpanContext;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Deleted, Error, Expired, Fenced, Handle, NotCommitted, TurnDeleted, Write, Written};
use crate::domain::keys::{BeginArgs, BeginOutcome, Fence, KeyState};
use crate::domain::memory::{ItemsPut, ItemsTouch, Path};
use crate::domain::model::{Appended, NewCheckpoint, UnixNanos};
use crate::domain::records::{PutRefusal, RecordDelete, RecordPut};
use crate::domain::waits::{WaitAnswer, WaitWrite};
use crate::observe::metrics::Metrics;
use crate::observe::traces::{self, Traces};

/// How the writer batches.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Requests that may wait for a writer; more are refused.
    pub queue_max: usize,
    /// Bytes the requests waiting or being committed may hold; more are refused.
    pub queue_bytes_max: usize,
    /// Most requests one transaction commits.
    pub batch_max: usize,
    /// Writer tasks committing batches side by side (1 for SQLite, which has
    /// one writer; more for Postgres, whose commits overlap).
    pub concurrency: usize,
    /// Most checkpoints one DeleteTurn chunk (one transaction) deletes.
    pub delete_chunk_rows: u32,
}

/// Where one caller waits for its answer.
type Reply<T> = oneshot::Sender<Result<T, Arc<Error>>>;

/// A caller's reply, by the kind of its request.
enum Pending {
    Appended(Reply<Appended>),
    Deleted(Reply<Deleted>),
    Begun(Reply<Fenced<BeginOutcome>>),
    Completed(Reply<Fenced<UnixNanos>>),
    Released(Reply<Fenced<KeyState>>),
    Extended(Reply<Fenced<UnixNanos>>),
    Put(Reply<Result<UnixNanos, PutRefusal>>),
    RecordsDeleted(Reply<u64>),
    Copied(Reply<u64>),
    Waited(Reply<WaitAnswer>),
    Items(Reply<UnixNanos>),
    ItemsDeleted(Reply<u64>),
}

impl Pending {
    /// Whether the caller gave up waiting: it dropped its end of the reply.
    fn is_abandoned(&self) -> bool {
        match self {
            Pending::Appended(reply) => reply.is_closed(),
            Pending::Deleted(reply) => reply.is_closed(),
            Pending::Begun(reply) => reply.is_closed(),
            Pending::Completed(reply) => reply.is_closed(),
            Pending::Released(reply) => reply.is_closed(),
            Pending::Extended(reply) => reply.is_closed(),
            Pending::Put(reply) => reply.is_closed(),
            Pending::RecordsDeleted(reply) => reply.is_closed(),
            Pending::Copied(reply) => reply.is_closed(),
            Pending::Waited(reply) => reply.is_closed(),
            Pending::Items(reply) => reply.is_closed(),
            Pending::ItemsDeleted(reply) => reply.is_closed(),
        }
    }
}

struct Request {
    write: Write,
    reply: Pending,
    /// The request's share of the queue's bytes, given back when dropped.
    bytes: OwnedSemaphorePermit,
    /// When it was queued, if metrics or a trace want its wait.
    queued: Option<Instant>,
    /// Its request's span, if that is traced.
    trace: Option<SpanContext>,
}

/// What every write counts beyond its variable-length fields: its place in
/// the queue, its reply, and its fixed-size fields.
const WRITE_OVERHEAD_BYTES: usize = 256;

impl Write {
    /// The bytes this write holds while it waits: every variable-length
    /// field (state, result, error, ids, fingerprint) and a fixed overhead.
    /// Below the request message that carried it, so a queue of at least
    /// `--message-bytes-max` bytes can hold any valid request.
    pub fn bytes(&self) -> usize {
        let variable = match self {
            Write::Append(c) => {
                c.namespace.len()
                    + c.turn_id.len()
                    + c.session_id.len()
                    + c.phase.len()
                    + c.state.len()
                    + c.workflow_version.len()
            }
            Write::DeleteTurn { namespace, turn_id, .. } => namespace.len() + turn_id.len(),
            Write::Begin(args) => args.namespace.len() + args.key.len() + args.fingerprint.len(),
            Write::Complete { fence, result } => fence.namespace.len() + fence.key.len() + result.len(),
            Write::Release { fence, error, .. } => fence.namespace.len() + fence.key.len() + error.len(),
            Write::Extend { fence, .. } => fence.namespace.len() + fence.key.len(),
            Write::PutRecords(put) => put.bytes() + put.fence.as_ref().map_or(0, |f| f.key.len()),
            Write::DeleteRecords(delete) => {
                delete.namespace.len()
                    + delete.turn_ids.iter().map(String::len).sum::<usize>()
                    + delete.selection.as_ref().map_or(0, |s| s.metadata_any.iter().map(String::len).sum::<usize>())
            }
            Write::CopyTurn { namespace, source, target } => namespace.len() + source.len() + target.len(),
            Write::Wait(write) => write.bytes(),
            Write::PutItems(put) => put.bytes(),
            Write::TouchItems(touch) => touch.bytes(),
            Write::DeleteItems { namespace, prefix } => namespace.len() + prefix.as_str().len(),
        };
        variable + WRITE_OVERHEAD_BYTES
    }
}

/// The handle every write goes through; clones share one queue.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Request>,
    /// The queue's byte budget: one permit per byte.
    bytes: Arc<Semaphore>,
    bytes_max: usize,
    store: Handle,
    delete_chunk_rows: u32,
    /// Whether a write notes when it was queued.
    timed: bool,
}

/// What the writer tasks share: the store and where batches are observed.
struct Committer {
    store: Handle,
    metrics: Arc<Metrics>,
    traces: Option<Arc<Traces>>,
    /// Whose turn it is: a first attempt commits side by side with the
    /// other writer tasks' (a read), a retry alone (a write), so that a
    /// batch broken off for contention is not broken off again by this
    /// sidecar's own batches.
    turns: tokio::sync::RwLock<()>,
}

impl Writer {
    /// Starts the writer tasks; they stop when every handle is dropped.
    /// Batches are observed in `metrics` and, when tracing is on, `traces`.
    pub fn start(
        store: Handle,
        config: &WriterConfig,
        metrics: Arc<Metrics>,
        traces: Option<Arc<Traces>>,
    ) -> (Writer, Vec<JoinHandle<()>>) {
        let (queue, receiver) = mpsc::channel(config.queue_max);
        let receiver = Arc::new(Mutex::new(receiver));
        let timed = metrics.enabled();
        let turns = tokio::sync::RwLock::new(());
        let committer = Arc::new(Committer { store: store.clone(), metrics, traces, turns });
        let blocking = store.backend().writes_block();
        let tasks = (0..config.concurrency.max(1))
            .map(|_| {
                let commits = commit_batches(committer.clone(), receiver.clone(), config.batch_max);
                if blocking {
                    // The committer thread: it waits for writes, commits and
                    // answers, and no statement leaves it.
                    let runtime = tokio::runtime::Handle::current();
                    tokio::task::spawn_blocking(move || runtime.block_on(commits))
                } else {
                    tokio::spawn(commits)
                }
            })
            .collect();
        let bytes_max = config.queue_bytes_max.min(Semaphore::MAX_PERMITS);
        let bytes = Arc::new(Semaphore::new(bytes_max));
        (Writer { queue, bytes, bytes_max, store, delete_chunk_rows: config.delete_chunk_rows.max(1), timed }, tasks)
    }

    /// The writes waiting for or in a batch, and the bytes they hold.
    pub fn queued(&self) -> (usize, usize) {
        let depth = self.queue.max_capacity() - self.queue.capacity();
        (depth, self.bytes_max.saturating_sub(self.bytes.available_permits()))
    }

    /// Queues one write and waits for its batch to commit. Refused at once
    /// when the queue holds too many requests or too many bytes.
    async fn submit<T>(&self, write: Write, pending: impl FnOnce(Reply<T>) -> Pending) -> Result<T, Error> {
        self.store.check_up()?;
        // A write too large for the whole budget gets no permit at all.
        let size = u32::try_from(write.bytes()).unwrap_or(u32::MAX);
        let bytes = self.bytes.clone().try_acquire_many_owned(size).map_err(|_| Error::QueueBytesFull)?;
        let (reply, answer) = oneshot::channel();
        let trace = traces::current();
        let queued = (self.timed || trace.is_some()).then(Instant::now);
        self.queue.try_send(Request { write, reply: pending(reply), bytes, queued, trace }).map_err(
            |error| match error {
                mpsc::error::TrySendError::Full(_) => Error::QueueFull,
                mpsc::error::TrySendError::Closed(_) => Error::WriterStopped,
            },
        )?;
        match answer.await {
            Ok(result) => result.map_err(Error::Batch),
            Err(_) => Err(Error::WriterStopped),
        }
    }

    pub async fn append(&self, checkpoint: NewCheckpoint) -> Result<Appended, Error> {
        self.submit(Write::Append(checkpoint), Pending::Appended).await
    }

    /// Deletes a turn chunk by chunk until it is gone, its waits with the
    /// last chunk, and with `records` then its records of every kind, in a
    /// transaction of their own; answers how much went. Each chunk commits
    /// on its own, so a delete that fails or is cancelled midway leaves the
    /// turn partly deleted, with a true summary, and a retry finishes it.
    /// Checkpoints appended to the turn while it is being deleted are
    /// deleted too.
    pub async fn delete_turn(&self, namespace: String, turn_id: String, records: bool) -> Result<TurnDeleted, Error> {
        let mut deleted = self.delete_chunks(namespace.clone(), turn_id.clone(), None).await?.0;
        if records {
            let every = RecordDelete { namespace, turn_ids: vec![turn_id], selection: None, idle_before: None };
            deleted.records = self.delete_records(every).await?;
        }
        Ok(deleted)
    }

    /// Deletes a turn retention chose, chunk by chunk, while it still is
    /// `expired`: answers the checkpoints deleted and whether the turn is
    /// gone. A turn written since it was chosen (or whose status changed) is
    /// kept from the next chunk on; a turn within one chunk, as most are,
    /// is deleted whole or not at all.
    pub async fn expire_turn(
        &self,
        namespace: String,
        turn_id: String,
        expired: Expired,
    ) -> Result<(u64, bool), Error> {
        let (deleted, gone) = self.delete_chunks(namespace, turn_id, Some(expired)).await?;
        Ok((deleted.checkpoints, gone))
    }

    async fn delete_chunks(
        &self,
        namespace: String,
        turn_id: String,
        only_if: Option<Expired>,
    ) -> Result<(TurnDeleted, bool), Error> {
        let (mut total, mut after) = (TurnDeleted::default(), None);
        loop {
            let chunk = Write::DeleteTurn {
                namespace: namespace.clone(),
                turn_id: turn_id.clone(),
                rows: self.delete_chunk_rows,
                after,
                only_if,
            };
            let deleted = self.submit(chunk, Pending::Deleted).await?;
            total.checkpoints += deleted.checkpoints;
            total.waits += deleted.waits;
            if deleted.gone || deleted.kept {
                return Ok((total, deleted.gone));
            }
            after = deleted.next;
        }
    }

    pub async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error> {
        self.submit(Write::Begin(args), Pending::Begun).await
    }

    pub async fn complete(&self, fence: Fence, result: Vec<u8>) -> Result<Fenced<UnixNanos>, Error> {
        self.submit(Write::Complete { fence, result }, Pending::Completed).await
    }

    pub async fn release(&self, fence: Fence, error: String, permanent: bool) -> Result<Fenced<KeyState>, Error> {
        self.submit(Write::Release { fence, error, permanent }, Pending::Released).await
    }

    pub async fn extend(&self, fence: Fence, lease: i64) -> Result<Fenced<UnixNanos>, Error> {
        self.submit(Write::Extend { fence, lease }, Pending::Extended).await
    }

    /// Writes records, all or none; answers when they were recorded, or why
    /// the fence refused them (then nothing was written).
    pub async fn put_records(&self, put: RecordPut) -> Result<Result<UnixNanos, PutRefusal>, Error> {
        self.submit(Write::PutRecords(put), Pending::Put).await
    }

    /// Deletes what `delete` selects, in one transaction of its own; answers how many records went.
    pub async fn delete_records(&self, delete: RecordDelete) -> Result<u64, Error> {
        self.submit(Write::DeleteRecords(delete), Pending::RecordsDeleted).await
    }

    /// Creates, settles or fires waits; answers what it did, or why it
    /// changed nothing. The waiters of every wait it settled are woken
    /// after the commit, whether or not this caller still waits.
    pub async fn wait(&self, write: WaitWrite) -> Result<WaitAnswer, Error> {
        self.submit(Write::Wait(write), Pending::Waited).await
    }

    /// Copies every record of `source` to `target`, in one transaction of its own; answers how many.
    pub async fn copy_turn(&self, namespace: String, source: String, target: String) -> Result<u64, Error> {
        self.submit(Write::CopyTurn { namespace, source, target }, Pending::Copied).await
    }

    /// Puts and deletes memory items, all or none; answers when.
    pub async fn put_items(&self, put: ItemsPut) -> Result<UnixNanos, Error> {
        self.submit(Write::PutItems(put), Pending::Items).await
    }

    /// Refreshes the expiry of memory items a read returned; answers when.
    pub async fn touch_items(&self, touch: ItemsTouch) -> Result<UnixNanos, Error> {
        self.submit(Write::TouchItems(touch), Pending::Items).await
    }

    /// Deletes every memory item under `prefix`, in one transaction of its
    /// own; answers how many items went.
    pub async fn delete_items(&self, namespace: String, prefix: Path) -> Result<u64, Error> {
        self.submit(Write::DeleteItems { namespace, prefix }, Pending::ItemsDeleted).await
    }
}

/// One writer task: take what is waiting, commit it, answer, repeat.
async fn commit_batches(committer: Arc<Committer>, receiver: Arc<Mutex<mpsc::Receiver<Request>>>, batch_max: usize) {
    let mut requests = Vec::with_capacity(batch_max);
    loop {
        {
            let mut receiver = receiver.lock().await;
            if receiver.recv_many(&mut requests, batch_max).await == 0 {
                return; // every handle is gone
            }
        }
        // A request whose caller has gone is dropped, never stored; its
        // bytes go back now. The others hold theirs until answered.
        requests.retain(|request| !request.reply.is_abandoned());
        // Delete chunks, record deletions and turn copies are committed each
        // on its own, after the rest.
        let (chunks, batch): (Vec<Request>, Vec<Request>) =
            requests.drain(..).partition(|request| request.write.alone());
        if !batch.is_empty() {
            committer.commit(batch).await;
        }
        for chunk in chunks {
            committer.commit(vec![chunk]).await;
        }
    }
}

impl Committer {
    /// Commits one batch and answers each of its callers; a batch that
    /// contention broke off is tried again first (`attempt`).
    async fn commit(&self, requests: Vec<Request>) {
        let size = requests.len();
        let began = Instant::now();
        let mut traced = Vec::new();
        let (writes, waiters): (Vec<Write>, Vec<Waiter>) = requests
            .into_iter()
            .map(|request| {
                if let Some(queued) = request.queued {
                    self.metrics.queue_wait.record(began.saturating_duration_since(queued).as_secs_f64());
                    if let Some(trace) = request.trace {
                        traced.push((trace, queued));
                    }
                }
                (request.write, Waiter { reply: request.reply, bytes: request.bytes })
            })
            .collect();
        #[cfg(feature = "fault-injection")]
        panic_if_asked(&writes);
        tracing::trace!(size, "committing a batch");
        let (outcome, waiters) = self.attempt(writes, waiters).await;
        // The batch's writes are gone with its transaction: their bytes go back
        // before the callers hear, so none of them finds them still held.
        let mut replies = Replies::default();
        for Waiter { reply, bytes } in waiters {
            drop(bytes);
            replies.push(reply);
        }
        let ended = Instant::now();
        self.observe(&traced, size, began, ended, !matches!(outcome, Outcome::Committed(_)));
        match outcome {
            Outcome::Committed(written) => {
                self.wake(&written);
                replies.answer(*written);
            }
            Outcome::Failed { error, retries } => {
                tracing::warn!(
                    cause = %error.cause(),
                    code = error.code().as_deref(),
                    retries,
                    requests = replies.len(),
                    %error,
                    "batch not committed; answering UNAVAILABLE"
                );
                replies.fail(Arc::new(error));
            }
            Outcome::Abandoned { error, retries } => {
                tracing::debug!(cause = %error.cause(), retries, "batch not committed, and none of its callers waits");
            }
        }
    }

    /// Commits the batch, trying it again while it fails for contention
    /// (`Cause::is_contention`: nothing of it was committed), at most
    /// `RETRIES_MAX` times, after a growing pause with a random part
    /// (`backoff`), and only while a caller still waits: a caller's deadline
    /// (the request timeout, or its own) ends its wait, and the writer leaves
    /// out whoever gave up. A retry runs the whole transaction again, for the
    /// callers left, so a batch is still all or nothing. Answers the outcome
    /// and the callers to answer.
    async fn attempt(&self, mut writes: Vec<Write>, mut waiters: Vec<Waiter>) -> (Outcome, Vec<Waiter>) {
        let mut retries = 0;
        loop {
            if let Err(down) = self.store.check_up() {
                return (Outcome::Failed { error: down, retries }, waiters);
            }
            let attempted = if retries == 0 {
                let _side_by_side = self.turns.read().await;
                self.store.backend().attempt(writes).await
            } else {
                let _alone = self.turns.write().await;
                self.store.backend().attempt(writes).await
            };
            let NotCommitted { error, batch } = match attempted {
                Ok(written) => return (Outcome::Committed(Box::new(written)), waiters),
                Err(not_committed) => not_committed,
            };
            if !error.cause().is_contention() || retries >= RETRIES_MAX {
                return (Outcome::Failed { error, retries }, waiters);
            }
            let pause = backoff(retries);
            tracing::debug!(
                cause = %error.cause(),
                code = error.code().as_deref(),
                retry = retries + 1,
                pause_ms = pause.as_millis() as u64,
                "batch not committed, for contention; trying it again"
            );
            tokio::time::sleep(pause).await;
            (writes, waiters) = still_waiting(batch, waiters);
            if waiters.is_empty() {
                return (Outcome::Abandoned { error, retries }, waiters);
            }
            retries += 1;
        }
    }

    /// Wakes the Awaits of every wait the committed batch settled, each with its wait.
    fn wake(&self, written: &Written) {
        let hub = self.store.hub();
        for done in written.waits.iter().flatten() {
            for wait in done.settled() {
                hub.wake(&wait.key, Some(Arc::new(wait.clone())));
            }
        }
    }

    /// Records a batch in the metrics and, for its traced writes, in traces.
    fn observe(&self, traced: &[(SpanContext, Instant)], size: usize, began: Instant, ended: Instant, failed: bool) {
        self.metrics.batch_writes.record(size as f64);
        self.metrics.commit_duration.record(ended.duration_since(began).as_secs_f64());
        if failed {
            self.metrics.batches_failed.increment(1);
        }
        if let Some(traces) = &self.traces {
            traces.batch(traced, size, began, ended, failed);
        }
    }
}

/// Most times the writer tries a batch again after contention broke it off.
/// Each caller's deadline bounds the retries too, and is usually what ends them.
pub const RETRIES_MAX: u32 = 10;
/// The pause before the first retry; each further one doubles it.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
/// The longest pause between two attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The pause before retry `retry` (from 0): `BACKOFF_FIRST` doubled per
/// retry up to `BACKOFF_MAX`, of which a random half to all, so that
/// writers that collided once (two sidecars' batches in a deadlock, say) do
/// not collide again in step.
pub fn backoff(retry: u32) -> Duration {
    let ceiling = BACKOFF_FIRST.saturating_mul(1 << retry.min(16)).min(BACKOFF_MAX);
    let jitter = getrandom::u32().map_or(0.5, |random| f64::from(random) / f64::from(u32::MAX));
    ceiling / 2 + (ceiling / 2).mul_f64(jitter)
}

/// How a batch ended.
enum Outcome {
    Committed(Box<Written>),
    /// Not committed, after `retries` retries.
    Failed {
        error: Error,
        retries: u32,
    },
    /// Not committed, and every caller gave up before it could be tried again.
    Abandoned {
        error: Error,
        retries: u32,
    },
}

/// A caller in a batch: its reply, and its share of the queue's bytes.
struct Waiter {
    reply: Pending,
    bytes: OwnedSemaphorePermit,
}

/// The writes whose callers still wait, with those callers: a retried batch
/// leaves out whoever gave up, whose bytes go back to the queue now.
fn still_waiting(writes: Vec<Write>, waiters: Vec<Waiter>) -> (Vec<Write>, Vec<Waiter>) {
    writes.into_iter().zip(waiters).filter(|(_, waiter)| !waiter.reply.is_abandoned()).unzip()
}

/// The turn id whose append makes a writer task panic, in builds with the
/// `fault-injection` feature (stepwell's own tests; never a serving build):
/// how the tests show that a sidecar whose writer died stops serving.
#[cfg(feature = "fault-injection")]
pub const PANIC_TURN_ID: &str = "stepwell-fault-injection-panic-the-writer";

#[cfg(feature = "fault-injection")]
fn panic_if_asked(writes: &[Write]) {
    if writes.iter().any(|write| matches!(write, Write::Append(c) if c.turn_id == PANIC_TURN_ID)) {
        panic!("fault injection: a writer task panics on an append to turn {PANIC_TURN_ID:?}");
    }
}

/// A batch's callers, by kind, each list in batch order like `Written`'s.
#[derive(Default)]
struct Replies {
    appended: Vec<Reply<Appended>>,
    deleted: Vec<Reply<Deleted>>,
    begun: Vec<Reply<Fenced<BeginOutcome>>>,
    completed: Vec<Reply<Fenced<UnixNanos>>>,
    released: Vec<Reply<Fenced<KeyState>>>,
    extended: Vec<Reply<Fenced<UnixNanos>>>,
    put: Vec<Reply<Result<UnixNanos, PutRefusal>>>,
    records_deleted: Vec<Reply<u64>>,
    copied: Vec<Reply<u64>>,
    waits: Vec<Reply<WaitAnswer>>,
    items: Vec<Reply<UnixNanos>>,
    items_deleted: Vec<Reply<u64>>,
}

impl Replies {
    fn push(&mut self, pending: Pending) {
        match pending {
            Pending::Appended(reply) => self.appended.push(reply),
            Pending::Deleted(reply) => self.deleted.push(reply),
            Pending::Begun(reply) => self.begun.push(reply),
            Pending::Completed(reply) => self.completed.push(reply),
            Pending::Released(reply) => self.released.push(reply),
            Pending::Extended(reply) => self.extended.push(reply),
            Pending::Put(reply) => self.put.push(reply),
            Pending::RecordsDeleted(reply) => self.records_deleted.push(reply),
            Pending::Copied(reply) => self.copied.push(reply),
            Pending::Waited(reply) => self.waits.push(reply),
            Pending::Items(reply) => self.items.push(reply),
            Pending::ItemsDeleted(reply) => self.items_deleted.push(reply),
        }
    }

    fn len(&self) -> usize {
        let Replies {
            appended,
            deleted,
            begun,
            completed,
            released,
            extended,
            put,
            records_deleted,
            copied,
            waits,
            items,
            items_deleted,
        } = self;
        appended.len()
            + deleted.len()
            + begun.len()
            + completed.len()
            + released.len()
            + extended.len()
            + put.len()
            + records_deleted.len()
            + copied.len()
            + waits.len()
            + items.len()
            + items_deleted.len()
    }

    /// Hands every caller its answer once the batch committed.
    fn answer(self, written: Written) {
        send(self.appended, written.appended);
        send(self.deleted, written.deleted);
        send(self.begun, written.begun);
        send(self.completed, written.completed);
        send(self.released, written.released);
        send(self.extended, written.extended);
        send(self.put, written.put);
        send(self.records_deleted, written.records_deleted);
        send(self.copied, written.copied);
        send(self.waits, written.waits);
        send(self.items, written.items);
        send(self.items_deleted, written.items_deleted);
    }

    /// Tells every caller the batch failed; nothing of it was committed.
    fn fail(self, error: Arc<Error>) {
        fail(self.appended, &error);
        fail(self.deleted, &error);
        fail(self.begun, &error);
        fail(self.completed, &error);
        fail(self.released, &error);
        fail(self.extended, &error);
        fail(self.put, &error);
        fail(self.records_deleted, &error);
        fail(self.copied, &error);
        fail(self.waits, &error);
        fail(self.items, &error);
        fail(self.items_deleted, &error);
    }
}

fn send<T>(replies: Vec<Reply<T>>, answers: Vec<T>) {
    assert_eq!(replies.len(), answers.len(), "a batch answers each of its requests");
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A caller that gave up has dropped its receiver; nothing to do.
        let _ = reply.send(Ok(answer));
    }
}

fn fail<T>(replies: Vec<Reply<T>>, error: &Arc<Error>) {
    for reply in replies {
        let _ = reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_pause_doubles_up_to_its_ceiling_and_half_of_it_is_random() {
        for retry in 0..RETRIES_MAX + 8 {
            let ceiling = (BACKOFF_FIRST * 2u32.pow(retry.min(16))).min(BACKOFF_MAX);
            for _ in 0..64 {
                let pause = backoff(retry);
                assert!(ceiling / 2 <= pause && pause <= ceiling, "retry {retry}: {pause:?} within {ceiling:?}");
            }
        }
        let pauses: HashSet<Duration> = (0..64).map(|_| backoff(4)).collect();
        assert!(pauses.len() > 1, "two writers that collided pause for different times");
    }
}
