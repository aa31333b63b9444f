//! The group-commit writer: every write request enters one bounded queue,
//! and writer tasks each take whatever is waiting (up to `batch_max`, with no
//! fixed delay, so batch size follows load), commit it as one transaction
//! through `Store::write`, then answer each caller. Many callers' writes
//! share one commit (one fsync), which is what lets a sidecar outrun a client
//! that commits each write alone.
//!
//! A full queue refuses at once (RESOURCE_EXHAUSTED) rather than growing. A
//! batch whose commit fails answers every request in it with the error, and
//! nothing of it is acknowledged. The rest of the service reaches the queue
//! only through the cheap, cloneable `Writer` handle. Each caller waits on a
//! reply of its own request's type, and a batch's answers come back typed per
//! kind, so an answer can only reach a caller waiting for that kind.
//!
//! A DeleteTurn goes through the queue in chunks of at most
//! `delete_chunk_rows` checkpoints, one after another, and each chunk is
//! committed alone, apart from the batch it was taken with. Other writes
//! queued meanwhile are committed between two chunks, so deleting a huge turn
//! never holds the (single SQLite) writer for long, and a delete never shares
//! a transaction, or its locks, with appends.

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Deleted, Error, Fenced, Handle, Write, Written};
use crate::idempotency::{BeginArgs, BeginOutcome, Fence, RecordState};
use crate::model::{Appended, NewCheckpoint, UnixNanos};

/// How the writer batches.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Requests that may wait for a writer; more are refused.
    pub queue_max: usize,
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
    Released(Reply<Fenced<RecordState>>),
    Extended(Reply<Fenced<UnixNanos>>),
}

struct Request {
    write: Write,
    reply: Pending,
}

/// The handle every write goes through; clones share one queue.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Request>,
    store: Handle,
    delete_chunk_rows: u32,
}

impl Writer {
    /// Starts the writer tasks; they stop when every handle is dropped.
    pub fn start(store: Handle, config: &WriterConfig) -> (Writer, Vec<JoinHandle<()>>) {
        let (queue, receiver) = mpsc::channel(config.queue_max);
        let receiver = Arc::new(Mutex::new(receiver));
        let tasks = (0..config.concurrency.max(1))
            .map(|_| tokio::spawn(commit_batches(store.clone(), receiver.clone(), config.batch_max)))
            .collect();
        (Writer { queue, store, delete_chunk_rows: config.delete_chunk_rows.max(1) }, tasks)
    }

    /// Queues one write and waits for its batch to commit.
    async fn submit<T>(&self, write: Write, pending: impl FnOnce(Reply<T>) -> Pending) -> Result<T, Error> {
        self.store.check_up()?;
        let (reply, answer) = oneshot::channel();
        self.queue.try_send(Request { write, reply: pending(reply) }).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => Error::QueueFull,
            mpsc::error::TrySendError::Closed(_) => Error::WriterStopped,
        })?;
        match answer.await {
            Ok(result) => result.map_err(Error::Batch),
            Err(_) => Err(Error::WriterStopped),
        }
    }

    pub async fn append(&self, checkpoint: NewCheckpoint) -> Result<Appended, Error> {
        self.submit(Write::Append(checkpoint), Pending::Appended).await
    }

    /// Deletes a turn chunk by chunk until it is gone; answers how many
    /// checkpoints went. Each chunk commits on its own, so a delete that
    /// fails or is cancelled midway leaves the turn partly deleted, with a
    /// true summary, and a retry finishes it. Checkpoints appended to the
    /// turn while it is being deleted are deleted too.
    pub async fn delete_turn(&self, namespace: String, turn_id: String) -> Result<u64, Error> {
        let mut total = 0;
        loop {
            let chunk = Write::DeleteTurn {
                namespace: namespace.clone(),
                turn_id: turn_id.clone(),
                rows: self.delete_chunk_rows,
            };
            let deleted = self.submit(chunk, Pending::Deleted).await?;
            total += deleted.checkpoints;
            if deleted.gone {
                return Ok(total);
            }
        }
    }

    pub async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error> {
        self.submit(Write::Begin(args), Pending::Begun).await
    }

    pub async fn complete(&self, fence: Fence, result: Vec<u8>) -> Result<Fenced<UnixNanos>, Error> {
        self.submit(Write::Complete { fence, result }, Pending::Completed).await
    }

    pub async fn release(&self, fence: Fence, error: String, permanent: bool) -> Result<Fenced<RecordState>, Error> {
        self.submit(Write::Release { fence, error, permanent }, Pending::Released).await
    }

    pub async fn extend(&self, fence: Fence, lease: i64) -> Result<Fenced<UnixNanos>, Error> {
        self.submit(Write::Extend { fence, lease }, Pending::Extended).await
    }
}

/// One writer task: take what is waiting, commit it, answer, repeat.
async fn commit_batches(store: Handle, receiver: Arc<Mutex<mpsc::Receiver<Request>>>, batch_max: usize) {
    let mut requests = Vec::with_capacity(batch_max);
    loop {
        {
            let mut receiver = receiver.lock().await;
            if receiver.recv_many(&mut requests, batch_max).await == 0 {
                return; // every handle is gone
            }
        }
        // Delete chunks are committed each on its own, after the rest.
        let (chunks, batch): (Vec<Request>, Vec<Request>) =
            requests.drain(..).partition(|request| matches!(request.write, Write::DeleteTurn { .. }));
        if !batch.is_empty() {
            commit(&store, batch).await;
        }
        for chunk in chunks {
            commit(&store, vec![chunk]).await;
        }
    }
}

/// Commits one batch and answers each of its callers.
async fn commit(store: &Handle, requests: Vec<Request>) {
    let mut replies = Replies::default();
    let writes: Vec<Write> = requests
        .into_iter()
        .map(|request| {
            replies.push(request.reply);
            request.write
        })
        .collect();
    tracing::trace!(size = writes.len(), "committing a batch");
    let written = match store.check_up() {
        Ok(()) => store.backend().write(writes).await,
        Err(down) => Err(down),
    };
    match written {
        Ok(written) => replies.answer(written),
        Err(error) => {
            tracing::warn!(%error, requests = replies.len(), "batch not committed; answering UNAVAILABLE");
            replies.fail(Arc::new(error));
        }
    }
}

/// A batch's callers, by kind, each list in batch order like `Written`'s.
#[derive(Default)]
struct Replies {
    appended: Vec<Reply<Appended>>,
    deleted: Vec<Reply<Deleted>>,
    begun: Vec<Reply<Fenced<BeginOutcome>>>,
    completed: Vec<Reply<Fenced<UnixNanos>>>,
    released: Vec<Reply<Fenced<RecordState>>>,
    extended: Vec<Reply<Fenced<UnixNanos>>>,
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
        }
    }

    fn len(&self) -> usize {
        let Replies { appended, deleted, begun, completed, released, extended } = self;
        appended.len() + deleted.len() + begun.len() + completed.len() + released.len() + extended.len()
    }

    /// Hands every caller its answer once the batch committed.
    fn answer(self, written: Written) {
        send(self.appended, written.appended);
        send(self.deleted, written.deleted);
        send(self.begun, written.begun);
        send(self.completed, written.completed);
        send(self.released, written.released);
        send(self.extended, written.extended);
    }

    /// Tells every caller the batch failed; nothing of it was committed.
    fn fail(self, error: Arc<Error>) {
        fail(self.appended, &error);
        fail(self.deleted, &error);
        fail(self.begun, &error);
        fail(self.completed, &error);
        fail(self.released, &error);
        fail(self.extended, &error);
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
