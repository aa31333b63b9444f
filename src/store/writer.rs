//! The group-commit writer: every write request enters one bounded queue,
//! and writer tasks each take whatever is waiting (up to `batch_max`, with no
//! fixed delay, so batch size follows load), commit it as one transaction
//! through `Store::write`, then answer each caller. Many callers' writes
//! share one commit (one fsync), which is what lets a sidecar outrun a client
//! that commits each write alone.
//!
//! A full queue refuses at once (RESOURCE_EXHAUSTED) rather than growing. A
//! batch whose commit fails answers every request in it with the error, and
//! nothing of it is acknowledged. The rest of the service reaches the store
//! through the cheap, cloneable `Writer` handle, never through the queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Error, Fenced, Store, Write, Written};
use crate::idempotency::{self, BeginArgs, BeginOutcome, BeginPlan, Fence, RecordState};
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
}

struct Request {
    write: Write,
    reply: oneshot::Sender<Result<Written, Arc<Error>>>,
}

/// The handle every write goes through; clones share one queue.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Request>,
    store: Arc<dyn Store>,
    /// The breaker: set while the health monitor finds the store down, so
    /// requests hear UNAVAILABLE at once instead of waiting on a dead server.
    down: Arc<AtomicBool>,
}

impl Writer {
    /// Starts the writer tasks; they stop when every handle is dropped.
    pub fn start(store: Arc<dyn Store>, config: &WriterConfig) -> (Writer, Vec<JoinHandle<()>>) {
        let (queue, receiver) = mpsc::channel(config.queue_max);
        let receiver = Arc::new(Mutex::new(receiver));
        let down = Arc::new(AtomicBool::new(false));
        let tasks = (0..config.concurrency.max(1))
            .map(|_| tokio::spawn(commit_batches(store.clone(), receiver.clone(), config.batch_max, down.clone())))
            .collect();
        (Writer { queue, store, down }, tasks)
    }

    /// The store, for reads; `Error::Down` while the breaker is open.
    pub fn store(&self) -> Result<&Arc<dyn Store>, Error> {
        self.check_up()?;
        Ok(&self.store)
    }

    /// Opens (`false`) or closes (`true`) the breaker: the health monitor's verdict.
    pub fn set_store_up(&self, up: bool) {
        self.down.store(!up, Ordering::SeqCst);
    }

    fn check_up(&self) -> Result<(), Error> {
        if self.down.load(Ordering::SeqCst) { Err(Error::Down) } else { Ok(()) }
    }

    /// Queues one write and waits for its batch to commit.
    async fn submit(&self, write: Write) -> Result<Written, Error> {
        self.check_up()?;
        let (reply, answer) = oneshot::channel();
        self.queue.try_send(Request { write, reply }).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => Error::QueueFull,
            mpsc::error::TrySendError::Closed(_) => Error::WriterStopped,
        })?;
        match answer.await {
            Ok(result) => result.map_err(Error::Batch),
            Err(_) => Err(Error::WriterStopped),
        }
    }

    pub async fn append(&self, checkpoint: NewCheckpoint) -> Result<Appended, Error> {
        match self.submit(Write::Append(checkpoint)).await? {
            Written::Appended(appended) => Ok(appended),
            other => unreachable!("an append was answered {other:?}"),
        }
    }

    pub async fn delete_turn(&self, namespace: String, turn_id: String) -> Result<u64, Error> {
        match self.submit(Write::DeleteTurn { namespace, turn_id }).await? {
            Written::Deleted(count) => Ok(count),
            other => unreachable!("a deletion was answered {other:?}"),
        }
    }

    /// Begin. A key that is completed or failed never changes again (until
    /// it is purged), so its answer comes from a read and writes nothing.
    pub async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error> {
        if let Some((record, now)) = self.store()?.get(&args.namespace, &args.key).await?
            && matches!(record.state(now), RecordState::Completed | RecordState::Failed)
            && let BeginPlan::Answer(answer) = idempotency::plan_begin(Some(&record), &args, now)
        {
            return Ok(answer);
        }
        match self.submit(Write::Begin(args)).await? {
            Written::Begun(outcome) => Ok(outcome),
            other => unreachable!("a Begin was answered {other:?}"),
        }
    }

    pub async fn complete(&self, fence: Fence, result: Vec<u8>) -> Result<Fenced<UnixNanos>, Error> {
        match self.submit(Write::Complete { fence, result }).await? {
            Written::Completed(answer) => Ok(answer),
            other => unreachable!("a Complete was answered {other:?}"),
        }
    }

    pub async fn release(&self, fence: Fence, error: String, permanent: bool) -> Result<Fenced<RecordState>, Error> {
        match self.submit(Write::Release { fence, error, permanent }).await? {
            Written::Released(answer) => Ok(answer),
            other => unreachable!("a Release was answered {other:?}"),
        }
    }

    pub async fn extend(&self, fence: Fence, lease: i64) -> Result<Fenced<UnixNanos>, Error> {
        match self.submit(Write::Extend { fence, lease }).await? {
            Written::Extended(answer) => Ok(answer),
            other => unreachable!("an Extend was answered {other:?}"),
        }
    }
}

/// One writer task: take what is waiting, commit it, answer, repeat.
async fn commit_batches(
    store: Arc<dyn Store>,
    receiver: Arc<Mutex<mpsc::Receiver<Request>>>,
    batch_max: usize,
    down: Arc<AtomicBool>,
) {
    let mut requests = Vec::with_capacity(batch_max);
    loop {
        {
            let mut receiver = receiver.lock().await;
            if receiver.recv_many(&mut requests, batch_max).await == 0 {
                return; // every handle is gone
            }
        }
        let (writes, replies): (Vec<Write>, Vec<_>) = requests.drain(..).map(|r| (r.write, r.reply)).unzip();
        tracing::trace!(size = writes.len(), "committing a batch");
        let written = if down.load(Ordering::SeqCst) { Err(Error::Down) } else { store.write(writes).await };
        match written {
            Ok(answers) => {
                assert_eq!(answers.len(), replies.len(), "a batch answers each of its requests");
                for (reply, answer) in replies.into_iter().zip(answers) {
                    // A caller that gave up has dropped its receiver; nothing to do.
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(error) => {
                tracing::warn!(%error, requests = replies.len(), "batch not committed; answering UNAVAILABLE");
                let error = Arc::new(error);
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}
