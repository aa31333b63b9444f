//! Turn retention: the sweeper's pass that deletes turns past their rule
//! (`--turn-retention` for terminal turns, `--open-turn-retention` for open
//! ones, and per-namespace rules from `--retention-file`). The cutoff is
//! read on the store's clock, so tests move it instead of waiting.
//!
//! Each rule asks the store for at most `batch_max` turns past it, and each
//! turn goes through the writer as a DeleteTurn whose chunks delete only
//! while the turn is still past the rule (`store::Expired`), checked under
//! the turn's lock: a turn that gets a checkpoint meanwhile, or changes
//! status, is kept with everything not yet deleted. Deletion shares the
//! writer's queue and its bounds, in chunks of `--delete-chunk-rows`, so a
//! purge never holds the SQLite writer for long.
//!
//! Record retention (`--record-retention`, and `record_retention` in the
//! file) deletes every record of a turn none of whose records was written
//! for that long, one turn per DeleteRecords through the writer, which
//! keeps the turn if a record was written since it was chosen.

use std::time::Duration;

use crate::config::retention::TurnRetention;
use crate::domain::clock::Clock;
use crate::domain::records::RecordDelete;
use crate::observe::metrics::Metrics;
use crate::store::writer::Writer;
use crate::store::{Error, Expired, ExpiredQuery, Handle, IdleQuery};

/// What one retention pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Turns deleted.
    pub turns: u64,
    /// Checkpoints they held.
    pub checkpoints: u64,
    /// Turns chosen but kept: written since, or their status changed.
    pub kept: u64,
    /// Turns whose records were deleted, and how many records they held.
    pub record_turns: u64,
    pub records: u64,
    /// Whether some rule found a whole batch: more may be waiting.
    pub more: bool,
}

/// One rule as the store is asked it: where, which status, how old.
struct Rule {
    namespace: Option<String>,
    except: Vec<String>,
    terminal: bool,
    age: Duration,
}

/// The rules of `retention`, flags first, then each namespace's own.
fn rules(retention: &TurnRetention) -> Vec<Rule> {
    let except: Vec<String> = retention.namespaces.keys().cloned().collect();
    let mut rules = Vec::new();
    for (terminal, age) in [(true, retention.terminal), (false, retention.open)] {
        if let Some(age) = age {
            rules.push(Rule { namespace: None, except: except.clone(), terminal, age });
        }
    }
    for (namespace, own) in &retention.namespaces {
        for (terminal, age) in [(true, own.terminal), (false, own.open)] {
            if let Some(age) = age {
                rules.push(Rule { namespace: Some(namespace.clone()), except: Vec::new(), terminal, age });
            }
        }
    }
    rules
}

/// Deletes up to `batch_max` turns per rule that are past it at the
/// store's time `clock.now()`.
pub async fn purge_turns(
    store: &Handle,
    writer: &Writer,
    retention: &TurnRetention,
    clock: &Clock,
    batch_max: u32,
    metrics: &Metrics,
) -> Result<Purged, Error> {
    let mut purged = Purged::default();
    for rule in rules(retention) {
        let age = i64::try_from(rule.age.as_nanos()).unwrap_or(i64::MAX);
        let expired = Expired { last_before: clock.now().saturating_sub(age), terminal: rule.terminal };
        let query = ExpiredQuery { namespace: rule.namespace, except: rule.except, expired, limit: batch_max };
        let turns = store.reads()?.expired_turns(&query).await?;
        purged.more |= turns.len() >= batch_max as usize;
        for (namespace, turn_id) in turns {
            let (checkpoints, gone) = writer.expire_turn(namespace, turn_id, expired).await?;
            purged.checkpoints += checkpoints;
            if gone {
                purged.turns += 1;
                metrics.turns_expired(rule.terminal);
            } else {
                purged.kept += 1;
            }
        }
    }
    for (namespace, except, age) in record_rules(retention) {
        let idle_before = clock.now().saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX));
        let query = IdleQuery { namespace, except, idle_before, limit: batch_max };
        let turns = store.reads()?.idle_record_turns(&query).await?;
        purged.more |= turns.len() >= batch_max as usize;
        for (namespace, turn_id) in turns {
            let delete =
                RecordDelete { namespace, turn_ids: vec![turn_id], selection: None, idle_before: Some(idle_before) };
            match writer.delete_records(delete).await? {
                0 => purged.kept += 1,
                deleted => {
                    purged.record_turns += 1;
                    purged.records += deleted;
                    metrics.record_turns_expired.increment(1);
                    metrics.records_removed.increment(deleted);
                }
            }
        }
    }
    metrics.checkpoints_expired.increment(purged.checkpoints);
    Ok(purged)
}

/// The record rules of `retention`: the flag's, for every namespace without
/// a rule of its own, then each namespace's own, as (namespace, except, age).
fn record_rules(retention: &TurnRetention) -> Vec<(Option<String>, Vec<String>, Duration)> {
    let except: Vec<String> = retention.namespaces.keys().cloned().collect();
    let mut rules: Vec<_> = retention.records.map(|age| (None, except, age)).into_iter().collect();
    for (namespace, own) in &retention.namespaces {
        if let Some(age) = own.records {
            rules.push((Some(namespace.clone()), Vec::new(), age));
        }
    }
    rules
}
