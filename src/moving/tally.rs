//! Verifying a move: per namespace, the counts of checkpoints, turns and
//! idempotency records and a SHA-256 checksum of their content, computed
//! the same way on both sides and shown as a table.
//!
//! Each row is serialized canonically (every column but the store-local
//! `seq`, each field length-prefixed) and hashed; a namespace's checksum
//! hashes its rows' digests in canonical order: checkpoints by (turn,
//! timestamp, insertion order), turns and records by key.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::side::{CheckpointRow, RecordRow, TurnRow};

/// One namespace's figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    pub checkpoints: u64,
    pub turns: u64,
    pub records: u64,
    /// Hex SHA-256 over the namespace's checkpoints, turns and records.
    pub checksum: String,
}

/// Every namespace's figures, by namespace.
pub type Tallies = BTreeMap<String, Tally>;

type RowDigest = [u8; 32];

/// Running hashes for one namespace.
#[derive(Default)]
struct Hashes {
    checkpoints: (u64, Sha256),
    turns: (u64, Sha256),
    records: (u64, Sha256),
}

/// Takes row digests in canonical order, per namespace.
#[derive(Default)]
pub struct Tallier(BTreeMap<String, Hashes>);

impl Tallier {
    fn hashes(&mut self, namespace: &str) -> &mut Hashes {
        if !self.0.contains_key(namespace) {
            self.0.insert(namespace.to_owned(), Hashes::default());
        }
        self.0.get_mut(namespace).expect("just inserted")
    }

    pub fn checkpoint(&mut self, namespace: &str, digest: RowDigest) {
        let (count, hash) = &mut self.hashes(namespace).checkpoints;
        *count += 1;
        hash.update(digest);
    }

    pub fn turn(&mut self, namespace: &str, digest: RowDigest) {
        let (count, hash) = &mut self.hashes(namespace).turns;
        *count += 1;
        hash.update(digest);
    }

    pub fn record(&mut self, namespace: &str, digest: RowDigest) {
        let (count, hash) = &mut self.hashes(namespace).records;
        *count += 1;
        hash.update(digest);
    }

    pub fn finish(self) -> Tallies {
        self.0
            .into_iter()
            .map(|(namespace, hashes)| {
                let mut all = Sha256::new();
                for (_, hash) in [&hashes.checkpoints, &hashes.turns, &hashes.records] {
                    all.update(hash.clone().finalize());
                }
                let checksum = all.finalize().iter().map(|b| format!("{b:02x}")).collect();
                let tally = Tally {
                    checkpoints: hashes.checkpoints.0,
                    turns: hashes.turns.0,
                    records: hashes.records.0,
                    checksum,
                };
                (namespace, tally)
            })
            .collect()
    }
}

/// Length-prefixed fields, so that no two rows serialize alike.
#[derive(Default)]
struct Canonical(Sha256);

impl Canonical {
    fn bytes(mut self, value: &[u8]) -> Self {
        self.0.update((value.len() as u64).to_le_bytes());
        self.0.update(value);
        self
    }
    fn text(self, value: &str) -> Self {
        self.bytes(value.as_bytes())
    }
    fn int(mut self, value: i64) -> Self {
        self.0.update(value.to_le_bytes());
        self
    }
    fn flag(mut self, value: bool) -> Self {
        self.0.update([u8::from(value)]);
        self
    }
    fn done(self) -> RowDigest {
        self.0.finalize().into()
    }
}

pub fn checkpoint_digest(r: &CheckpointRow) -> RowDigest {
    Canonical::default()
        .text(&r.namespace)
        .text(&r.turn_id)
        .text(&r.phase)
        .int(r.ts_ns)
        .text(&r.session_id)
        .bytes(&r.state)
        .flag(r.terminal)
        .text(&r.workflow_version)
        .int(r.recorded_at_ns)
        .done()
}

pub fn turn_digest(r: &TurnRow) -> RowDigest {
    Canonical::default()
        .text(&r.namespace)
        .text(&r.turn_id)
        .text(&r.session_id)
        .int(r.first_ts_ns)
        .int(r.last_ts_ns)
        .text(&r.last_phase)
        .int(r.checkpoint_count)
        .flag(r.terminal)
        .text(&r.workflow_version)
        .int(r.session_ts_ns)
        .int(r.version_ts_ns)
        .done()
}

pub fn record_digest(r: &RecordRow) -> RowDigest {
    Canonical::default()
        .text(&r.namespace)
        .text(&r.key)
        .int(r.held)
        .bytes(&r.fingerprint)
        .int(r.attempt)
        .int(r.lease_token)
        .int(r.lease_expires_at_ns)
        .bytes(&r.result)
        .bytes(&r.error)
        .int(r.retention_ns)
        .int(r.created_at_ns)
        .int(r.updated_at_ns)
        .int(r.purge_after_ns)
        .done()
}

/// Prints one line per namespace on either side (on stderr, so `export -`
/// keeps stdout for the data) and returns whether both sides agree.
pub fn print_table(left: &str, right: &str, expected: &Tallies, found: &Tallies) -> bool {
    let none = Tally { checksum: "-".repeat(16), ..Tally::default() };
    let mut namespaces: Vec<&String> = expected.keys().chain(found.keys()).collect();
    namespaces.sort();
    namespaces.dedup();
    eprintln!("src = the {left}, dst = the {right}; sum = SHA-256 of the namespace's rows (first 16 hex digits)");
    eprintln!(
        "{:<20} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:<16} {:<16} verdict",
        "namespace", "ckpt src", "ckpt dst", "turns src", "turns dst", "keys src", "keys dst", "sum src", "sum dst",
    );
    let mut same = true;
    for namespace in namespaces {
        let a = expected.get(namespace).unwrap_or(&none);
        let b = found.get(namespace).unwrap_or(&none);
        let equal = expected.get(namespace) == found.get(namespace);
        same &= equal;
        let shown = if namespace.is_empty() { "(default)" } else { namespace.as_str() };
        eprintln!(
            "{:<20} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:<16} {:<16} {}",
            shown,
            a.checkpoints,
            b.checkpoints,
            a.turns,
            b.turns,
            a.records,
            b.records,
            &a.checksum[..16],
            &b.checksum[..16],
            if equal { "ok" } else { "DIFFERS" }
        );
    }
    if expected.is_empty() && found.is_empty() {
        eprintln!("(both stores are empty)");
    }
    same
}
