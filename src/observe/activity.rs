//! The last hour of requests, minute by minute: how many writes were
//! answered and how many requests failed on the sidecar's or the store's
//! side. The console draws it; Prometheus keeps the same counts as
//! histograms, which a page could only read by parsing the exposition.
//!
//! Sixty slots, one per minute of the hour, each reset by the first request
//! of a new minute. Recording is three atomic operations, no lock; a request
//! racing the reset of its slot may go uncounted, which a chart can bear.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use tonic::Code;

const MINUTES: usize = 60;

#[derive(Debug, Default)]
struct Slot {
    minute: AtomicI64,
    writes: AtomicU64,
    errors: AtomicU64,
}

/// Writes and failures per minute over the last hour.
#[derive(Debug)]
pub struct Activity {
    slots: [Slot; MINUTES],
}

impl Default for Activity {
    fn default() -> Activity {
        Activity { slots: std::array::from_fn(|_| Slot { minute: AtomicI64::new(-1), ..Slot::default() }) }
    }
}

/// Whether an answer with `code` is a failure the operator should see: the
/// store or the sidecar could not serve (not a caller's mistake, nor an
/// answer such as NOT_FOUND that the contract gives in the normal course).
pub fn is_failure(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Internal
            | Code::Unknown
            | Code::DataLoss
            | Code::ResourceExhausted
            | Code::DeadlineExceeded
            | Code::Aborted
    )
}

impl Activity {
    /// Counts one request answered in `minute` (minutes since the epoch).
    pub fn record(&self, minute: i64, write: bool, failed: bool) {
        let slot = &self.slots[minute.rem_euclid(MINUTES as i64) as usize];
        let seen = slot.minute.load(Ordering::Relaxed);
        if seen != minute && slot.minute.compare_exchange(seen, minute, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            slot.writes.store(0, Ordering::Relaxed);
            slot.errors.store(0, Ordering::Relaxed);
        }
        if write {
            slot.writes.fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            slot.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (writes, failures) for each of the sixty minutes up to and including
    /// `minute`, oldest first; a minute without requests counts zero.
    pub fn last_hour(&self, minute: i64) -> Vec<(u64, u64)> {
        (minute - MINUTES as i64 + 1..=minute)
            .map(|m| {
                let slot = &self.slots[m.rem_euclid(MINUTES as i64) as usize];
                if slot.minute.load(Ordering::Relaxed) == m {
                    (slot.writes.load(Ordering::Relaxed), slot.errors.load(Ordering::Relaxed))
                } else {
                    (0, 0)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fall_in_their_minute_and_an_hour_later_the_slot_starts_again() {
        let activity = Activity::default();
        activity.record(1000, true, false);
        activity.record(1000, true, true);
        activity.record(1001, false, true);
        let hour = activity.last_hour(1001);
        assert_eq!(hour.len(), 60);
        assert_eq!(hour[58], (2, 1));
        assert_eq!(hour[59], (0, 1));
        assert!(hour[..58].iter().all(|&m| m == (0, 0)));
        activity.record(1060, true, false);
        let later = activity.last_hour(1060);
        assert_eq!(later[59], (1, 0), "the slot of minute 1000 was reset for minute 1060");
        assert_eq!(later[0], (0, 1), "minute 1001 is still within the hour");
    }

    #[test]
    fn only_the_sidecars_own_failures_count() {
        assert!(is_failure(Code::Unavailable));
        assert!(is_failure(Code::ResourceExhausted));
        assert!(!is_failure(Code::NotFound));
        assert!(!is_failure(Code::InvalidArgument));
        assert!(!is_failure(Code::Ok));
    }
}
