//! The soak's mixed workload: request `i` is of the kind at `i` in a fixed
//! cycle of 40, and what it touches follows from what earlier requests
//! wrote. Checkpoints fill turns of `TURN_LENGTH`, the last one terminal,
//! stamped with the wall clock so that turn retention purges them once they
//! are old; a turn whose every checkpoint was acknowledged becomes readable.
//! Even turns are deleted by DeleteTurn, odd ones are restored, carry waits,
//! and are left to retention. Idempotency keys and record turns are read
//! back the same way. Reads only pick what was written within `fresh` (half
//! the retention), so that no purge can take it while it is read.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::BoxFuture;
use tonic::transport::Channel;

use super::ops;
use super::stats::{Kind, Outcome};
use crate::payload::mix;

pub use super::ops::TURN_LENGTH;

/// The cycle of kinds: 16 checkpoints (two turns) to one DeleteTurn (half
/// the turns), spread so that no kind comes in bursts.
#[rustfmt::skip]
const CYCLE: [Kind; 40] = {
    use Kind::*;
    [
        Checkpoint, Restore, BeginComplete, Checkpoint, PutRecords, Checkpoint, Restore, SignalAwait,
        Checkpoint, BeginRepeat, Checkpoint, Restore, ListRecords, Checkpoint, BeginComplete, Checkpoint,
        Restore, TimerAwait, Checkpoint, PutRecords, DeleteTurn, Checkpoint, Restore, BeginComplete,
        Checkpoint, SignalAwait, Checkpoint, Restore, PutRecords, Checkpoint, BeginRepeat, Checkpoint,
        Restore, ListRecords, Checkpoint, BeginComplete, Checkpoint, Restore, PutRecords, Checkpoint,
    ]
};

/// Things written, oldest first, with when they were acknowledged.
#[derive(Default)]
struct Written(Mutex<VecDeque<(u64, Instant)>>);

impl Written {
    fn push(&self, n: u64) {
        self.0.lock().expect("not poisoned").push_back((n, Instant::now()));
    }

    /// One written within `fresh`, chosen by `i`; older ones are forgotten.
    fn pick(&self, i: u64, fresh: Duration) -> Option<u64> {
        let mut list = self.0.lock().expect("not poisoned");
        while list.front().is_some_and(|(_, at)| at.elapsed() > fresh) {
            list.pop_front();
        }
        (!list.is_empty()).then(|| list[(mix(i) % list.len() as u64) as usize].0)
    }

    /// The oldest one written within `fresh`, taken out of the list.
    fn take_oldest(&self, fresh: Duration) -> Option<u64> {
        let mut list = self.0.lock().expect("not poisoned");
        while list.front().is_some_and(|(_, at)| at.elapsed() > fresh) {
            list.pop_front();
        }
        list.pop_front().map(|(n, _)| n)
    }
}

/// The workload and what it has written so far.
pub struct Mix {
    channels: Vec<Channel>,
    /// How old a thing may be and still be read.
    fresh: Duration,
    /// How old a turn may be and still be deleted (before retention takes it).
    deletable: Duration,
    checkpoints: AtomicU64,
    clock: AtomicI64,
    acked: Mutex<HashMap<u64, u64>>,
    kept_turns: Written,
    doomed_turns: Written,
    keys: AtomicU64,
    completed_keys: Written,
    record_turns: AtomicU64,
    put_turns: Written,
    waits: AtomicU64,
}

impl Mix {
    pub fn new(channels: Vec<Channel>, retention: Duration) -> Mix {
        Mix {
            channels,
            fresh: retention / 2,
            deletable: retention * 4 / 5,
            checkpoints: AtomicU64::new(0),
            clock: AtomicI64::new(0),
            acked: Mutex::new(HashMap::new()),
            kept_turns: Written::default(),
            doomed_turns: Written::default(),
            keys: AtomicU64::new(0),
            completed_keys: Written::default(),
            record_turns: AtomicU64::new(0),
            put_turns: Written::default(),
            waits: AtomicU64::new(0),
        }
    }

    /// The kind of request `i`.
    pub fn kind(i: u64) -> Kind {
        CYCLE[(i % CYCLE.len() as u64) as usize]
    }

    fn channel(&self, i: u64) -> Channel {
        self.channels[(i % self.channels.len() as u64) as usize].clone()
    }

    /// The wall clock in nanoseconds, strictly increasing from call to call.
    fn now_ns(&self) -> i64 {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        let previous = self.clock.fetch_max(wall, Ordering::SeqCst);
        if previous >= wall { self.clock.fetch_add(1, Ordering::SeqCst) + 1 } else { wall }
    }

    /// Request `i`, built now (so sequence numbers and timestamps follow
    /// the order requests are sent in), to be run by the caller.
    pub fn request(self: &std::sync::Arc<Self>, i: u64) -> BoxFuture<'static, Outcome> {
        let channel = self.channel(i);
        match Mix::kind(i) {
            Kind::Checkpoint => self.checkpoint(channel),
            Kind::Restore => match self.kept_turns.pick(i, self.fresh) {
                Some(n) => ops::restore(channel, n).boxed(),
                None => skipped(),
            },
            Kind::DeleteTurn => match self.doomed_turns.take_oldest(self.deletable) {
                Some(n) => ops::delete_turn(channel, n).boxed(),
                None => skipped(),
            },
            Kind::BeginComplete => {
                let (n, mix) = (self.keys.fetch_add(1, Ordering::SeqCst), self.clone());
                async move {
                    let outcome = ops::begin_complete(channel, n).await;
                    if outcome == Outcome::Ok {
                        mix.completed_keys.push(n);
                    }
                    outcome
                }
                .boxed()
            }
            Kind::BeginRepeat => match self.completed_keys.pick(i, self.fresh) {
                Some(n) => ops::begin_repeat(channel, n).boxed(),
                None => skipped(),
            },
            Kind::PutRecords => {
                let (n, mix) = (self.record_turns.fetch_add(1, Ordering::SeqCst), self.clone());
                async move {
                    let outcome = ops::put_records(channel, n).await;
                    if outcome == Outcome::Ok {
                        mix.put_turns.push(n);
                    }
                    outcome
                }
                .boxed()
            }
            Kind::ListRecords => match self.put_turns.pick(i, self.fresh) {
                Some(n) => ops::list_records(channel, n).boxed(),
                None => skipped(),
            },
            Kind::SignalAwait | Kind::TimerAwait => self.wait(i, channel),
        }
    }

    fn checkpoint(self: &std::sync::Arc<Self>, channel: Channel) -> BoxFuture<'static, Outcome> {
        let c = self.checkpoints.fetch_add(1, Ordering::SeqCst);
        let (turn, step) = (c / TURN_LENGTH, c % TURN_LENGTH);
        let ts = self.now_ns();
        let mix = self.clone();
        async move {
            let outcome = ops::checkpoint(channel, turn, step, ts).await;
            if outcome == Outcome::Ok {
                mix.acknowledged(turn);
            }
            outcome
        }
        .boxed()
    }

    /// Counts one more checkpoint of `turn` stored; once all are, the turn
    /// is readable (odd) or to be deleted (even).
    fn acknowledged(&self, turn: u64) {
        let mut acked = self.acked.lock().expect("not poisoned");
        let count = acked.entry(turn).or_insert(0);
        *count += 1;
        if *count == TURN_LENGTH {
            acked.remove(&turn);
            drop(acked);
            if turn.is_multiple_of(2) { self.doomed_turns.push(turn) } else { self.kept_turns.push(turn) }
        }
    }

    fn wait(&self, i: u64, channel: Channel) -> BoxFuture<'static, Outcome> {
        let Some(turn) = self.kept_turns.pick(i ^ 0x5eed, self.fresh) else { return skipped() };
        let w = self.waits.fetch_add(1, Ordering::SeqCst);
        match Mix::kind(i) {
            Kind::TimerAwait => ops::timer_await(channel, turn, w, self.now_ns()).boxed(),
            _ => ops::signal_await(channel, turn, w).boxed(),
        }
    }
}

fn skipped() -> BoxFuture<'static, Outcome> {
    futures::future::ready(Outcome::Skipped).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_deletes_half_the_turns_it_fills() {
        let count = |kind: Kind| CYCLE.iter().filter(|k| **k == kind).count() as u64;
        assert_eq!(count(Kind::Checkpoint), 2 * TURN_LENGTH);
        assert_eq!(count(Kind::DeleteTurn), 1);
        assert!(Kind::ALL.iter().all(|&k| count(k) > 0), "every kind is in the cycle");
    }

    #[test]
    fn reads_pick_only_fresh_writes_and_deletes_take_the_oldest() {
        let written = Written::default();
        assert_eq!(written.pick(0, Duration::from_secs(60)), None);
        for n in 0..5 {
            written.push(n);
        }
        assert!((0..100).all(|i| written.pick(i, Duration::from_secs(60)).is_some_and(|n| n < 5)));
        assert_eq!(written.take_oldest(Duration::from_secs(60)), Some(0));
        assert_eq!(written.take_oldest(Duration::from_secs(60)), Some(1));
    }
}
