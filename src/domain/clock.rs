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

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; the
/// well-known civil-to-days arithmetic on 400-year eras).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date (year, month, day) of a day counted from
/// 1970-01-01 (the well-known days-to-civil arithmetic on 400-year eras).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
