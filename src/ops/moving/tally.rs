//! Verifying a move: per namespace, the counts of checkpoints, turns,
//! idempotency keys, records (RecordService) and waits (WaitService) and a
//! SHA-256 checksum of their content, computed the same way on both sides and shown as a
//! table.
//!
//! Each row is serialized canonically (every column but the store-local
//! `seq`, each field length-prefixed) and hashed; a namespace's checksum
//! hashes its rows' digests in canonical order: checkpoints by (turn,
//! timestamp, insertion order), turns, both kinds of records and waits by
//! key. A
//! record's metadata and refs are hashed as canonical JSON (keys sorted, no
//! whitespace, numbers by value), since Postgres's jsonb rewrites the text
//! SQLite keeps as written; a wait's metadata is text on both backends and
//! hashed as it is. A store's rows come from `store::bulk`, read
//! whole in canonical order; an import's, from the file.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use serde_json::Value;

use super::Error;
use crate::store::bulk::{BulkKeyRow, BulkTurnRow, BulkWaitRow, CheckpointRow, StoredRecordRow, Tables};

/// One namespace's figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    pub checkpoints: u64,
    pub turns: u64,
    /// Idempotency keys.
    pub records: u64,
    /// Records of RecordService.
    pub stored_records: u64,
    /// Waits of WaitService.
    pub waits: u64,
    /// Hex SHA-256 over the namespace's checkpoints, turns, both kinds of
    /// records and waits.
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
    stored_records: (u64, Sha256),
    waits: (u64, Sha256),
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

    pub fn stored_record(&mut self, namespace: &str, digest: RowDigest) {
        let (count, hash) = &mut self.hashes(namespace).stored_records;
        *count += 1;
        hash.update(digest);
    }

    pub fn wait(&mut self, namespace: &str, digest: RowDigest) {
        let (count, hash) = &mut self.hashes(namespace).waits;
        *count += 1;
        hash.update(digest);
    }

    pub fn finish(self) -> Tallies {
        self.0
            .into_iter()
            .map(|(namespace, hashes)| {
                let mut all = Sha256::new();
                let tables =
                    [&hashes.checkpoints, &hashes.turns, &hashes.records, &hashes.stored_records, &hashes.waits];
                for (_, hash) in tables {
                    all.update(hash.clone().finalize());
                }
                let checksum = all.finalize().iter().map(|b| format!("{b:02x}")).collect();
                let tally = Tally {
                    checkpoints: hashes.checkpoints.0,
                    turns: hashes.turns.0,
                    records: hashes.records.0,
                    stored_records: hashes.stored_records.0,
                    waits: hashes.waits.0,
                    checksum,
                };
                (namespace, tally)
            })
            .collect()
    }
}

/// Counts and checksums every namespace of a store, reading each table in
/// its canonical order: checkpoints as Restore orders them (namespace, turn,
/// timestamp, insertion), turns, idempotency keys, records (RecordService)
/// and waits (WaitService) by key.
pub async fn tally(tables: &Tables) -> Result<Tallies, Error> {
    let mut tallier = Tallier::default();
    tables.each_checkpoint(|row| tallier.checkpoint(&row.namespace, checkpoint_digest(&row))).await?;
    tables.each_turn(|row| tallier.turn(&row.namespace, turn_digest(&row))).await?;
    tables.each_key(|row| tallier.record(&row.namespace, record_digest(&row))).await?;
    tables.each_record(|row| tallier.stored_record(&row.namespace, stored_record_digest(&row))).await?;
    tables.each_wait(|row| tallier.wait(&row.namespace, wait_digest(&row))).await?;
    Ok(tallier.finish())
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
    /// A value that may be absent: a flag, then the value if present, so
    /// that absent and empty (or zero) differ.
    fn maybe<T>(self, value: Option<T>, write: impl FnOnce(Self, T) -> Self) -> Self {
        match value {
            None => self.flag(false),
            Some(value) => write(self.flag(true), value),
        }
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

pub fn turn_digest(r: &BulkTurnRow) -> RowDigest {
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

pub fn record_digest(r: &BulkKeyRow) -> RowDigest {
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

pub fn stored_record_digest(r: &StoredRecordRow) -> RowDigest {
    let row = Canonical::default()
        .text(&r.namespace)
        .text(&r.turn_id)
        .text(&r.kind)
        .text(&r.scope)
        .text(&r.id)
        .text(&r.parent_id)
        .text(&r.content_type)
        .bytes(&r.payload);
    let row = match &r.metadata {
        None => row.flag(false),
        Some(metadata) => row.flag(true).text(&canonical_json(metadata)),
    };
    row.text(&canonical_json(&r.refs)).int(r.recorded_at_ns).done()
}

pub fn wait_digest(r: &BulkWaitRow) -> RowDigest {
    Canonical::default()
        .text(&r.namespace)
        .text(&r.turn_id)
        .text(&r.name)
        .int(r.status)
        .maybe(r.metadata.as_deref(), Canonical::text)
        .int(r.created_at_ns)
        .maybe(r.expire_at_ns, Canonical::int)
        .maybe(r.resolve_at_ns, Canonical::int)
        .maybe(r.due_at_ns, Canonical::int)
        .maybe(r.settled_at_ns, Canonical::int)
        .bytes(&r.payload)
        .text(&r.content_type)
        .text(&r.settled_by)
        .maybe(r.settled_span.as_deref(), Canonical::text)
        .done()
}

/// JSON text in one form whatever wrote it: keys sorted (bytewise), no
/// whitespace, strings with the fewest escapes, and equal numbers alike (an
/// integral number as an integer, `1e2` and `100.0` as `100`; others as
/// their shortest round-tripping double), which is how jsonb compares
/// them. Text that does not parse, which no put stores, stays as it is.
pub fn canonical_json(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => {
            let mut out = String::with_capacity(text.len());
            write_canonical(&value, &mut out);
            out
        }
        Err(_) => text.to_owned(),
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => out.push_str(&canonical_number(n)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's map is ordered by key unless `preserve_order`
            // is on; sort anyway, so no feature can change the checksum.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn canonical_number(n: &serde_json::Number) -> String {
    if let Some(int) = n.as_i64() {
        return int.to_string();
    }
    if let Some(int) = n.as_u64() {
        return int.to_string();
    }
    let float = n.as_f64().unwrap_or(f64::NAN);
    // Integral doubles inside i64's range print as integers (`2^63` itself is outside).
    if float.is_finite() && float.fract() == 0.0 && float.abs() < 9_223_372_036_854_775_808.0 {
        return (float as i64).to_string();
    }
    n.to_string()
}

/// Prints one line per namespace on either side (on stdout: the report of
/// `migrate` and `import`, whose progress and errors go to stderr) and
/// returns whether both sides agree.
pub fn print_table(left: &str, right: &str, expected: &Tallies, found: &Tallies) -> bool {
    let none = Tally { checksum: "-".repeat(16), ..Tally::default() };
    let mut namespaces: Vec<&String> = expected.keys().chain(found.keys()).collect();
    namespaces.sort();
    namespaces.dedup();
    println!("src = the {left}, dst = the {right}; sum = SHA-256 of the namespace's rows (first 16 hex digits)");
    println!(
        "{:<20} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:<16} {:<16} verdict",
        "namespace",
        "ckpt src",
        "ckpt dst",
        "turns src",
        "turns dst",
        "keys src",
        "keys dst",
        "recs src",
        "recs dst",
        "waits src",
        "waits dst",
        "sum src",
        "sum dst",
    );
    let mut same = true;
    for namespace in namespaces {
        let a = expected.get(namespace).unwrap_or(&none);
        let b = found.get(namespace).unwrap_or(&none);
        let equal = expected.get(namespace) == found.get(namespace);
        same &= equal;
        let shown = if namespace.is_empty() { "(default)" } else { namespace.as_str() };
        println!(
            "{:<20} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:<16} {:<16} {}",
            shown,
            a.checkpoints,
            b.checkpoints,
            a.turns,
            b.turns,
            a.records,
            b.records,
            a.stored_records,
            b.stored_records,
            a.waits,
            b.waits,
            &a.checksum[..16],
            &b.checksum[..16],
            if equal { "ok" } else { "DIFFERS" }
        );
    }
    if expected.is_empty() && found.is_empty() {
        println!("(both stores are empty)");
    }
    same
}

#[cfg(test)]
mod tests {
    use super::canonical_json;

    #[test]
    fn json_is_canonical_whatever_wrote_it() {
        // As written through SQLite, and as Postgres prints the same jsonb.
        let written = r#"{ "b" : [1, 2.50, 1e2, -0], "a": {"z": "\u00e9\n", "y": null}, "aa": true }"#;
        let jsonb = r#"{"a": {"y": null, "z": "é\n"}, "b": [1, 2.50, 100, 0], "aa": true}"#;
        assert_eq!(canonical_json(written), r#"{"a":{"y":null,"z":"é\n"},"aa":true,"b":[1,2.5,100,0]}"#);
        assert_eq!(canonical_json(written), canonical_json(jsonb));
        assert_eq!(canonical_json(r#"["x", "y|z"]"#), r#"["x","y|z"]"#);
        assert_ne!(canonical_json(r#"{"a":1}"#), canonical_json(r#"{"a":2}"#));
        assert_ne!(canonical_json(r#"{"a":1}"#), canonical_json(r#"{"a":"1"}"#));
        assert_eq!(canonical_json("not json"), "not json");
    }
}
