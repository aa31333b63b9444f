//! The sweeper: the background passes that purge idempotency keys past
//! their retention, delete turns past turn retention (`retention`), and
//! refresh the store's planner statistics, one short batch at a time.

use std::sync::Arc;

use super::retention;
use crate::config::sections::Sweep;
use crate::domain::clock;
use crate::observe::metrics::Metrics;
use crate::store::writer::Writer;
use crate::store::{Handle, Store};

/// Purges idempotency keys past their retention, forever: a pass every
/// interval, and further passes at once while a pass comes back full. Each
/// pass is one short transaction of at most `batch_max` rows, so the sweeper
/// never holds the writer for long. After each interval's passes, the
/// store's planner statistics are refreshed where it needs that. Each pass
/// is counted in `metrics` by result, with the records it purged. With turn
/// retention on, each interval then deletes the turns past it
/// (`retention::purge_turns`), again at once while a batch comes back full.
pub(super) async fn sweep(store: Arc<dyn Store>, sweep: Sweep, metrics: Arc<Metrics>, turns: TurnSweep) {
    use crate::observe::metrics::Sweep as Pass;
    let mut interval = tokio::time::interval(sweep.interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let now = || clock::system_now() as f64 / 1e9;
    loop {
        interval.tick().await;
        loop {
            match store.purge_expired(sweep.batch_max).await {
                Ok(purged) if purged >= u64::from(sweep.batch_max) => {
                    metrics.records_purged.increment(purged);
                    metrics.sweep(Pass::Full, now());
                    tokio::task::yield_now().await;
                }
                Ok(purged) => {
                    metrics.records_purged.increment(purged);
                    metrics.sweep(Pass::Drained, now());
                    if purged > 0 {
                        tracing::debug!(purged, "purged idempotency keys past their retention");
                    }
                    break;
                }
                Err(error) => {
                    metrics.sweep(Pass::Failed, now());
                    tracing::warn!(%error, "sweeper pass failed; retrying next interval");
                    break;
                }
            }
        }
        if sweep.turns.is_on() {
            turns.pass(&sweep, &metrics).await;
        }
        if let Err(error) = store.optimize().await {
            tracing::warn!(%error, "refreshing the query planner's statistics failed; retrying next interval");
        }
    }
}

/// What turn retention works through: the store, the writer its deletes
/// queue in, and the store's clock.
pub(super) struct TurnSweep {
    pub store: Handle,
    pub writer: Writer,
    pub clock: clock::Clock,
}

impl TurnSweep {
    /// Deletes the turns past retention, batch after batch while batches
    /// come back full; logs what went.
    async fn pass(&self, sweep: &Sweep, metrics: &Metrics) {
        let mut total = retention::Purged::default();
        loop {
            let purged =
                retention::purge_turns(&self.store, &self.writer, &sweep.turns, &self.clock, sweep.batch_max, metrics)
                    .await;
            match purged {
                Ok(purged) => {
                    total.turns += purged.turns;
                    total.checkpoints += purged.checkpoints;
                    total.kept += purged.kept;
                    total.record_turns += purged.record_turns;
                    total.records += purged.records;
                    if !purged.more || purged.turns + purged.record_turns == 0 {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                Err(error) => {
                    metrics.retention_failures.increment(1);
                    tracing::warn!(%error, "turn retention failed; retrying next interval");
                    break;
                }
            }
        }
        if total.turns > 0 || total.kept > 0 || total.record_turns > 0 {
            tracing::info!(
                turns = total.turns,
                checkpoints = total.checkpoints,
                kept = total.kept,
                record_turns = total.record_turns,
                records = total.records,
                "turn retention deleted turns past their retention"
            );
        }
    }
}
