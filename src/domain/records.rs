//! Records (RecordService): addressed, updatable records within a turn, free
//! of protobuf and SQL. A record lives at (namespace, turn_id, kind, scope,
//! id); it carries a binary payload with its content type, a JSON metadata
//! object that filters match by containment, a parent id and refs to
//! records of another kind. What a batch of puts means (the last upsert of
//! an address wins, else its first insert-if-absent) is decided here once
//! for both backends, and so is metadata containment, which Postgres
//! evaluates as `@>` and SQLite through `json_contains`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::domain::keys::{Fence, Refusal};
use crate::domain::model::UnixNanos;

/// What a put does when the address is already stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// Replace the stored record.
    Upsert,
    /// Keep the stored record.
    InsertIfAbsent,
    /// Write only if the address is free, else refuse the whole put
    /// (`claims` decides, before anything is written).
    Create,
    /// Replace the stored record only if there is one, else refuse the
    /// whole put (`claims` decides, before anything is written).
    Update,
}

impl PutMode {
    /// What the store's statement does at a taken address: a create that
    /// got this far found its address free, so it inserts.
    pub fn on_conflict(self) -> PutMode {
        match self {
            PutMode::Upsert | PutMode::Update => PutMode::Upsert,
            PutMode::InsertIfAbsent | PutMode::Create => PutMode::InsertIfAbsent,
        }
    }
}

/// Where a record lives, within a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    pub namespace: String,
    pub turn_id: String,
    pub scope: String,
    pub kind: String,
    pub id: String,
}

impl Address {
    pub fn of(namespace: &str, record: &NewRecord) -> Address {
        Address {
            namespace: namespace.to_owned(),
            turn_id: record.turn_id.clone(),
            scope: record.scope.clone(),
            kind: record.kind.clone(),
            id: record.id.clone(),
        }
    }
}

/// Why a PutRecords was refused, with nothing of it written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutRefusal {
    /// Its fence's lease is not held.
    Fence(Refusal),
    /// A record to create found its address taken.
    Exists(Box<Address>),
    /// A record to update found its address empty.
    Missing(Box<Address>),
}

impl PutMode {
    /// Whether a put of this mode must know if its address holds a record
    /// before anything is written.
    pub fn checks_address(self) -> bool {
        matches!(self, PutMode::Create | PutMode::Update)
    }
}

/// Which of `puts` (those not already refused, in the batch's order) a
/// check refuses: the first record of a put whose mode is `Create` and
/// whose address is taken, or whose mode is `Update` and whose address is
/// empty. An address is taken when it is `stored`, or written by an earlier
/// put of the batch that went through, or by an earlier record of the same
/// put. A refused put claims nothing, so a later one may take its addresses.
pub fn claims(puts: &[Option<&RecordPut>], stored: &HashSet<Address>) -> Vec<Option<PutRefusal>> {
    let mut taken: HashSet<Address> = stored.clone();
    let mut refusals = Vec::with_capacity(puts.len());
    for put in puts {
        let Some(put) = put else {
            refusals.push(None);
            continue;
        };
        let mut own: HashSet<Address> = HashSet::new();
        let mut refused = None;
        for record in &put.records {
            let address = Address::of(&put.namespace, record);
            let held = taken.contains(&address) || own.contains(&address);
            if record.mode == PutMode::Create && held {
                refused = Some(PutRefusal::Exists(Box::new(address)));
                break;
            }
            if record.mode == PutMode::Update && !held {
                refused = Some(PutRefusal::Missing(Box::new(address)));
                break;
            }
            own.insert(address);
        }
        if refused.is_none() {
            taken.extend(own);
        }
        refusals.push(refused);
    }
    refusals
}

/// A record as written (and, with `recorded_at`, as stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    pub turn_id: String,
    pub scope: String,
    pub kind: String,
    pub id: String,
    pub parent_id: String,
    pub content_type: String,
    pub payload: Vec<u8>,
    /// A JSON object, compact; `None` for no metadata.
    pub metadata: Option<String>,
    /// The ids this record uses, as a JSON array of strings.
    pub refs: String,
    pub mode: PutMode,
}

impl NewRecord {
    /// The bytes it carries, for the write queue's byte budget and page budgets.
    pub fn bytes(&self) -> usize {
        self.turn_id.len()
            + self.scope.len()
            + self.kind.len()
            + self.id.len()
            + self.parent_id.len()
            + self.content_type.len()
            + self.payload.len()
            + self.metadata.as_ref().map_or(0, String::len)
            + self.refs.len()
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub record: NewRecord,
    pub recorded_at: UnixNanos,
}

/// A PutRecords: its records, all or none, in one namespace, maybe fenced.
#[derive(Debug, Clone)]
pub struct RecordPut {
    pub namespace: String,
    pub records: Vec<NewRecord>,
    pub fence: Option<Fence>,
}

impl RecordPut {
    pub fn bytes(&self) -> usize {
        self.namespace.len() + self.records.iter().map(NewRecord::bytes).sum::<usize>()
    }
}

/// A DeleteRecords: whole turns, or a kind's records that match, with their
/// children and the refs nothing of the kind uses any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDelete {
    pub namespace: String,
    /// Empty: every turn of the namespace (only with a kind and filters).
    pub turn_ids: Vec<String>,
    /// `None`: every record of the turns.
    pub selection: Option<Selection>,
    /// Retention's condition, with no selection: delete a turn's records
    /// only while none of them was written at or after this.
    pub idle_before: Option<UnixNanos>,
}

/// Which records of a kind a DeleteRecords selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub kind: String,
    /// JSON objects; a record matches if its metadata contains any. Empty: all.
    pub metadata_any: Vec<String>,
    /// Keep the newest record (by id) of each turn and scope.
    pub keep_latest: bool,
    pub children_kind: Option<String>,
    pub refs_kind: Option<String>,
}

/// A ListRecords query, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordQuery {
    pub namespace: String,
    pub turn_id: Option<String>,
    pub scope: Option<String>,
    pub kind: String,
    pub id: Option<String>,
    /// Only ids below this.
    pub before_id: Option<String>,
    /// A JSON object the metadata must contain.
    pub metadata_contains: Option<String>,
    pub children_kind: Option<String>,
    pub refs_kind: Option<String>,
    /// The page continues below this (id, turn_id, scope).
    pub after: Option<RecordCursor>,
    /// With `after`: the entry at `after` was cut, and the page begins with
    /// its related records that follow this one.
    pub within: Option<RelatedCursor>,
    pub limit: u32,
    /// Most bytes of entries (records, children and refs) in the page; at least one entry.
    pub bytes_max: usize,
    /// Cut an entry that does not fit a page of its own at `bytes_max`
    /// (else it comes whole, alone in its page).
    pub split_entries: bool,
}

/// Where a page of records ended, in list order (id, turn, scope, descending).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordCursor {
    pub id: String,
    pub turn_id: String,
    pub scope: String,
}

/// Which of an entry's related records a position is among: its children
/// (by id) come first, then its refs (by id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Children,
    Refs,
}

/// A position among an entry's related records: the next one is the first
/// of `part` whose id is above `after` (`""`: the part's first), else the
/// first of a later part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelatedCursor {
    pub part: Part,
    pub after: String,
}

impl RelatedCursor {
    /// Before an entry's first related record.
    pub fn start() -> RelatedCursor {
        RelatedCursor { part: Part::Children, after: String::new() }
    }
}

/// One related record of an entry, as sized before it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelatedSize {
    pub part: Part,
    pub id: String,
    /// Its cost in a page, as `RecordEntry::bytes` counts it.
    pub bytes: usize,
}

/// A listed record with its related records, or a piece of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordEntry {
    /// The record; of a `continued` entry only its address counts (it was
    /// sent with the entry's first piece, and is not sent again).
    pub record: StoredRecord,
    pub children: Vec<StoredRecord>,
    pub refs: Vec<StoredRecord>,
    /// The rest of the previous page's last entry.
    pub continued: bool,
    /// Where the entry was cut: its related records after this come in the next page.
    pub cut: Option<RelatedCursor>,
}

impl RecordEntry {
    /// An entry whole, or the first piece of one.
    pub fn new(record: StoredRecord, children: Vec<StoredRecord>, refs: Vec<StoredRecord>) -> RecordEntry {
        RecordEntry { record, children, refs, continued: false, cut: None }
    }

    pub fn cursor(&self) -> RecordCursor {
        let r = &self.record.record;
        RecordCursor { id: r.id.clone(), turn_id: r.turn_id.clone(), scope: r.scope.clone() }
    }

    /// What the entry costs in a page: its records' bytes and each one's
    /// framing (a continued entry's record is not sent).
    pub fn bytes(&self) -> usize {
        let record = (!self.continued).then_some(&self.record);
        record
            .into_iter()
            .chain(&self.children)
            .chain(&self.refs)
            .map(|r| r.record.bytes() + RECORD_OVERHEAD_BYTES)
            .sum()
    }

    /// Adds related records read in `part`'s order.
    pub fn attach(&mut self, part: Part, record: StoredRecord) {
        match part {
            Part::Children => self.children.push(record),
            Part::Refs => self.refs.push(record),
        }
    }
}

/// How many of an entry's related records, in order, fit in `room` bytes,
/// at least one if `at_least_one` (a page's first record); and where the
/// entry is then cut (`None`: nothing is left), given that `related`
/// follows `from`.
pub fn fitting_related(
    related: &[RelatedSize],
    room: usize,
    at_least_one: bool,
    from: &RelatedCursor,
) -> (usize, Option<RelatedCursor>) {
    let mut used = 0usize;
    let mut take = 0;
    for r in related {
        if !(at_least_one && take == 0) && used.saturating_add(r.bytes) > room {
            break;
        }
        used = used.saturating_add(r.bytes);
        take += 1;
    }
    let cut = match take {
        n if n == related.len() => None,
        0 => Some(from.clone()),
        n => Some(RelatedCursor { part: related[n - 1].part, after: related[n - 1].id.clone() }),
    };
    (take, cut)
}

/// A record of `kind` at `at` that stands for its address alone: a
/// continued entry's, whose record is not sent again.
pub fn address(kind: &str, at: &RecordCursor) -> StoredRecord {
    StoredRecord {
        record: NewRecord {
            turn_id: at.turn_id.clone(),
            scope: at.scope.clone(),
            kind: kind.to_owned(),
            id: at.id.clone(),
            parent_id: String::new(),
            content_type: String::new(),
            payload: Vec::new(),
            metadata: None,
            refs: "[]".to_owned(),
            mode: PutMode::Upsert,
        },
        recorded_at: 0,
    }
}

/// What a record costs in a page beyond its fields: tags, lengths, the timestamp.
pub const RECORD_OVERHEAD_BYTES: usize = 64;

/// The batch's records to write, one per address: the last upsert of an
/// address if any (replacing what is stored), else its first
/// insert-if-absent (keeping what is stored); sorted by address, so that
/// concurrent batches take row locks in one order.
pub fn final_records<'a>(puts: impl Iterator<Item = (&'a str, &'a NewRecord)>) -> Vec<(&'a str, &'a NewRecord)> {
    type Address<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);
    let mut chosen: HashMap<Address<'a>, (&'a str, &'a NewRecord)> = HashMap::new();
    for (namespace, record) in puts {
        let address =
            (namespace, record.turn_id.as_str(), record.kind.as_str(), record.scope.as_str(), record.id.as_str());
        if record.mode.on_conflict() == PutMode::Upsert || !chosen.contains_key(&address) {
            chosen.insert(address, (namespace, record));
        }
    }
    let mut records: Vec<(Address<'a>, (&'a str, &'a NewRecord))> = chosen.into_iter().collect();
    records.sort_by(|a, b| a.0.cmp(&b.0));
    records.into_iter().map(|(_, chosen)| chosen).collect()
}

/// Whether `target` contains `filter`, as Postgres's jsonb `@>` says: an
/// object contains an object whose every key it has with a value that
/// contains the filter's; an array contains an array whose every element
/// some element of it contains; scalars contain equal scalars (numbers by
/// value). (Postgres's one exception, a top-level array containing a
/// scalar, never arises: metadata is an object.) SQLite's `json_contains`
/// is this function.
pub fn json_contains(target: &Value, filter: &Value) -> bool {
    match (target, filter) {
        (Value::Object(target), Value::Object(filter)) => {
            filter.iter().all(|(key, wanted)| target.get(key).is_some_and(|have| json_contains(have, wanted)))
        }
        (Value::Array(target), Value::Array(filter)) => {
            filter.iter().all(|wanted| target.iter().any(|have| json_contains(have, wanted)))
        }
        (Value::Number(a), Value::Number(b)) => same_number(a, b),
        (a, b) => a == b,
    }
}

/// Whether two JSON numbers are the same value: integers exactly (64-bit
/// integers parse exactly), an integer and a double only if the double is
/// that very integer, doubles by value. The API admits only decimals of at
/// most 17 significant digits (the shortest form of any double), so the
/// numbers a program's floats produce compare as Postgres compares them.
fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    let integer = |n: &serde_json::Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => a == b,
        (Some(i), None) => b.as_f64().is_some_and(|f| f.fract() == 0.0 && f as i128 == i && i as f64 == f),
        (None, Some(i)) => a.as_f64().is_some_and(|f| f.fract() == 0.0 && f as i128 == i && i as f64 == f),
        (None, None) => a.as_f64() == b.as_f64(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(id: &str, payload: &str, mode: PutMode) -> NewRecord {
        NewRecord {
            turn_id: "t".into(),
            scope: String::new(),
            kind: "k".into(),
            id: id.into(),
            parent_id: String::new(),
            content_type: String::new(),
            payload: payload.as_bytes().to_vec(),
            metadata: None,
            refs: "[]".into(),
            mode,
        }
    }

    #[test]
    fn the_last_upsert_wins_else_the_first_insert() {
        let puts = [
            record("a", "1", PutMode::InsertIfAbsent),
            record("a", "2", PutMode::InsertIfAbsent),
            record("b", "1", PutMode::Upsert),
            record("b", "2", PutMode::Upsert),
            record("b", "3", PutMode::InsertIfAbsent),
            record("c", "1", PutMode::InsertIfAbsent),
            record("c", "2", PutMode::Upsert),
        ];
        let chosen = final_records(puts.iter().map(|r| ("ns", r)));
        let got: Vec<(&str, &[u8])> = chosen.iter().map(|(_, r)| (r.id.as_str(), r.payload.as_slice())).collect();
        assert_eq!(got, vec![("a", &b"1"[..]), ("b", &b"2"[..]), ("c", &b"2"[..])]);
    }

    #[test]
    fn containment_follows_jsonb() {
        let doc = json!({"run_id": "r1", "step": 2, "tags": ["a", "b"], "nested": {"x": 1, "y": [1, 2]}});
        assert!(json_contains(&doc, &json!({})));
        assert!(json_contains(&doc, &json!({"run_id": "r1"})));
        assert!(json_contains(&doc, &json!({"step": 2.0})));
        assert!(!json_contains(&json!({"n": 9007199254740993u64}), &json!({"n": 9007199254740992u64})));
        assert!(!json_contains(&json!({"n": 9007199254740993u64}), &json!({"n": 9007199254740992.0})));
        assert!(json_contains(&json!({"n": 9007199254740992u64}), &json!({"n": 9007199254740992.0})));
        assert!(json_contains(&doc, &json!({"tags": ["b"]})));
        assert!(json_contains(&doc, &json!({"nested": {"y": [2]}})));
        assert!(!json_contains(&doc, &json!({"run_id": "r2"})));
        assert!(!json_contains(&doc, &json!({"missing": null})));
        assert!(!json_contains(&doc, &json!({"nested": {"x": 2}})));
        assert!(!json_contains(&doc, &json!({"tags": "a"})));
    }
}
