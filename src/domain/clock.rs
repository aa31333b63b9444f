//! The clock lease arithmetic runs on. Each store reads one clock: SQLite the
//! sidecar's, Postgres the database server's, so sidecars sharing a store
//! never disagree about whether a lease is live. A `Clock` adds an offset to
//! that base time: zero in production, moved forward by tests, so tests
//! travel in time instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::domain::model::UnixNanos;

/// An offset added to the store's clock; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset: Arc<AtomicI64>,
}

impl Clock {
    /// The store's own time, unshifted.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// Moves this clock (and every clone) forward.
    pub fn advance(&self, by: Duration) {
        let nanos = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        self.offset.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Nanoseconds added to the store's time.
    pub fn offset(&self) -> i64 {
        self.offset.load(Ordering::SeqCst)
    }

    /// The sidecar's time plus the offset: the store clock of a local store.
    pub fn now(&self) -> UnixNanos {
        system_now().saturating_add(self.offset())
    }
}

/// The sidecar's wall-clock time: the one place it is read.
#[allow(clippy::disallowed_methods)]
pub fn system_now() -> UnixNanos {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX)
}
