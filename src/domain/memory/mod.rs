//! Memory (MemoryService): items that outlive a turn, free of protobuf and
//! SQL. An item lives at (namespace, path, key), where the path is a list of
//! labels; it holds a JSON object, its times, an optional time to live and
//! vectors, one per embedded field. A path is stored encoded (`Path`), each
//! label followed by a separator no label holds, so that a prefix of labels
//! is a prefix of bytes and byte order is label order. What a batch of
//! writes means (the last write of an address wins, at the place of its
//! first) is decided here; what a filter matches is `filter`'s and how a
//! search orders and pages its hits is `search`'s, once for both backends.

pub mod filter;
pub mod search;

use std::collections::HashMap;

use crate::domain::model::UnixNanos;

/// What follows every label of an encoded path: below every byte a label
/// may hold (labels hold no control characters).
pub const LABEL_END: char = '\u{1f}';

/// A path as the store keeps it: each label followed by `LABEL_END`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path(String);

impl Path {
    /// The path of `labels`.
    pub fn of(labels: &[String]) -> Path {
        let mut encoded = String::with_capacity(labels.iter().map(|l| l.len() + 1).sum());
        for label in labels {
            encoded.push_str(label);
            encoded.push(LABEL_END);
        }
        Path(encoded)
    }

    /// A path the store gave back, as encoded.
    pub fn from_stored(encoded: String) -> Path {
        Path(encoded)
    }

    /// The encoded text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The labels.
    pub fn labels(&self) -> Vec<String> {
        self.0.split_terminator(LABEL_END).map(str::to_owned).collect()
    }

    /// The first encoded text after every path this one is a prefix of:
    /// paths under `self` are those from `self` up to it, not included.
    /// The empty path has every path under it, and no bound.
    pub fn upper(&self) -> Option<String> {
        // Every path under this one continues with a label's bytes, all
        // above LABEL_END.
        let mut upper = self.0.clone();
        upper.pop()?;
        upper.push(char::from_u32(LABEL_END as u32 + 1).expect("a valid char"));
        Some(upper)
    }

    /// Whether `self` begins with the labels of `prefix`.
    pub fn is_under(&self, prefix: &Path) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

/// One embedding of an item, for one field.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    pub field: String,
    pub values: Vec<f32>,
}

impl Vector {
    /// The values as the store keeps them: little-endian `f32`s.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Values the store kept (`to_bytes`); a trailing partial value is dropped.
    pub fn values_of(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
}

/// A put of one item.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemPut {
    /// The JSON object, as sent (checked).
    pub value: String,
    /// Merged into the stored vectors field by field.
    pub vectors: Vec<Vector>,
    /// Drop the stored vectors first.
    pub replace_vectors: bool,
    /// Nanoseconds the item lives after this put, if it expires.
    pub ttl: Option<i64>,
}

/// One write of an item: a put, or its deletion.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemWrite {
    pub path: Path,
    pub key: String,
    /// `None`: delete the item.
    pub put: Option<ItemPut>,
}

impl ItemWrite {
    /// The bytes it holds while it waits in the write queue.
    pub fn bytes(&self) -> usize {
        let put = self
            .put
            .as_ref()
            .map_or(0, |p| p.value.len() + p.vectors.iter().map(|v| v.field.len() + 4 * v.values.len()).sum::<usize>());
        self.path.as_str().len() + self.key.len() + put
    }
}

/// A PutItems: writes of one namespace, all or none.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsPut {
    pub namespace: String,
    pub writes: Vec<ItemWrite>,
}

impl ItemsPut {
    pub fn bytes(&self) -> usize {
        self.namespace.len() + self.writes.iter().map(ItemWrite::bytes).sum::<usize>()
    }
}

/// A refresh of the time to live of items a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemsTouch {
    pub namespace: String,
    pub items: Vec<(Path, String)>,
}

impl ItemsTouch {
    /// The bytes it holds while it waits in the write queue.
    pub fn bytes(&self) -> usize {
        self.namespace.len() + self.items.iter().map(|(path, key)| path.as_str().len() + key.len()).sum::<usize>()
    }
}

/// What one write of a batch does, after every write of the batch to the
/// same address: the last one's content, at the place of the first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Final<'a> {
    pub namespace: &'a str,
    pub write: &'a ItemWrite,
    /// The place of the address's first write in the batch: the order of
    /// items (and paths) first put by this batch.
    pub place: i64,
}

/// The writes a batch's puts make: one per address, the last write of it
/// at its first write's place, in that order.
pub fn final_writes<'a>(puts: impl Iterator<Item = &'a ItemsPut>) -> Vec<Final<'a>> {
    let mut at: HashMap<(&str, &Path, &str), usize> = HashMap::new();
    let mut finals: Vec<Final<'a>> = Vec::new();
    for put in puts {
        for write in &put.writes {
            let address = (put.namespace.as_str(), &write.path, write.key.as_str());
            match at.get(&address) {
                Some(&i) => finals[i].write = write,
                None => {
                    at.insert(address, finals.len());
                    let place = finals.len() as i64;
                    finals.push(Final { namespace: &put.namespace, write, place });
                }
            }
        }
    }
    finals
}

/// An item as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    pub path: Path,
    pub key: String,
    /// The JSON object's text.
    pub value: String,
    pub created_at: UnixNanos,
    pub updated_at: UnixNanos,
    pub expires_at: Option<UnixNanos>,
    pub ttl: Option<i64>,
    /// Where it stands in item order: its path's first put, then its own.
    pub order: Order,
}

/// Item order: when the item's path was first put, then when the item was
/// (each as the batch's time and a place within it), then its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Order {
    pub path_ns: i64,
    pub path_place: i64,
    pub item_ns: i64,
    pub item_place: i64,
}

/// A search: the items under `prefix` that `filter` matches, by score
/// against `query` when there is one, then `offset` skipped and `limit` kept.
#[derive(Debug, Clone)]
pub struct ItemsQuery {
    pub namespace: String,
    pub prefix: Path,
    pub filter: Option<filter::Filter>,
    pub query: Option<Vec<f32>>,
    pub limit: u32,
    pub offset: u32,
}

/// Which end of a path a `PathMatch` looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Prefix,
    Suffix,
}

/// A condition on a path: its first or last labels are these, `*` any one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMatch {
    pub end: End,
    pub labels: Vec<String>,
}

/// The label that matches any one label in a `PathMatch`.
pub const ANY_LABEL: &str = "*";

impl PathMatch {
    /// Whether `path` meets the condition.
    pub fn matches(&self, path: &[String]) -> bool {
        if path.len() < self.labels.len() {
            return false;
        }
        let same = |(want, got): (&String, &String)| want == ANY_LABEL || want == got;
        match self.end {
            End::Prefix => self.labels.iter().zip(path.iter()).all(same),
            End::Suffix => self.labels.iter().rev().zip(path.iter().rev()).all(same),
        }
    }
}

/// A ListPaths: the paths holding live items that meet every match, cut to
/// `max_depth`, listed once each in label order, then paged.
#[derive(Debug, Clone)]
pub struct PathsQuery {
    pub namespace: String,
    pub matches: Vec<PathMatch>,
    pub max_depth: Option<usize>,
    pub limit: u32,
    pub offset: u32,
}

impl PathsQuery {
    /// The labels every listed path begins with: a prefix match's, up to
    /// its first wildcard (the store reads only the paths under it).
    pub fn fixed_prefix(&self) -> Path {
        let longest = self
            .matches
            .iter()
            .filter(|m| m.end == End::Prefix)
            .map(|m| m.labels.iter().take_while(|l| *l != ANY_LABEL).cloned().collect::<Vec<_>>())
            .max_by_key(Vec::len)
            .unwrap_or_default();
        Path::of(&longest)
    }

    /// The page from the paths under `fixed_prefix` that hold live items,
    /// in any order.
    pub fn page(&self, stored: Vec<Path>) -> Vec<Vec<String>> {
        let mut paths: Vec<Vec<String>> = stored
            .iter()
            .map(Path::labels)
            .filter(|labels| self.matches.iter().all(|m| m.matches(labels)))
            .map(|mut labels| {
                if let Some(depth) = self.max_depth {
                    labels.truncate(depth);
                }
                labels
            })
            .collect();
        // Label order: labels compared as bytes, a path before the longer ones it begins.
        paths.sort_unstable();
        paths.dedup();
        paths.into_iter().skip(self.offset as usize).take(self.limit as usize).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(text: &str) -> Vec<String> {
        text.split('/').filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }

    #[test]
    fn a_prefix_of_labels_is_a_prefix_of_the_encoding_and_byte_order_is_label_order() {
        let users = Path::of(&labels("users"));
        let upper = users.upper().unwrap();
        let within = |p: &Path| p.as_str() >= users.as_str() && p.as_str() < upper.as_str();
        for under in ["users", "users/alice", "users/alice/prefs"] {
            let p = Path::of(&labels(under));
            assert!(within(&p) && p.is_under(&users), "{under}");
        }
        for outside in ["usersx", "user", "uses", "a"] {
            let p = Path::of(&labels(outside));
            assert!(!within(&p) && !p.is_under(&users), "{outside}");
        }
        let mut paths = vec![labels("ab"), labels("a/z"), labels("a"), labels("b/a"), labels("a/b")];
        let mut encoded: Vec<Path> = paths.iter().map(|l| Path::of(l)).collect();
        paths.sort();
        encoded.sort();
        assert_eq!(encoded.iter().map(Path::labels).collect::<Vec<_>>(), paths);
        assert_eq!(Path::of(&[]).upper(), None);
        assert!(Path::of(&labels("\u{10ffff}")).is_under(&Path::of(&[])));
    }

    #[test]
    fn the_last_write_of_an_address_wins_at_the_place_of_its_first() {
        let write = |key: &str, value: Option<&str>| ItemWrite {
            path: Path::of(&labels("p")),
            key: key.into(),
            put: value.map(|v| ItemPut { value: v.into(), vectors: vec![], replace_vectors: false, ttl: None }),
        };
        let first = ItemsPut { namespace: "n".into(), writes: vec![write("a", Some("1")), write("b", Some("2"))] };
        let second = ItemsPut { namespace: "n".into(), writes: vec![write("c", None), write("a", None)] };
        let finals = final_writes([&first, &second].into_iter());
        let seen: Vec<(&str, Option<&str>, i64)> = finals
            .iter()
            .map(|f| (f.write.key.as_str(), f.write.put.as_ref().map(|p| p.value.as_str()), f.place))
            .collect();
        assert_eq!(seen, vec![("a", None, 0), ("b", Some("2"), 1), ("c", None, 2)]);
    }

    #[test]
    fn paths_are_matched_cut_listed_once_in_order_and_paged() {
        let stored = ["a/b/c", "a/b/d/e", "a/b/d/i", "a/b/f", "a/c/f", "b/a/f", "users/123"]
            .iter()
            .map(|p| Path::of(&labels(p)))
            .collect::<Vec<_>>();
        let query = |matches: Vec<PathMatch>, max_depth, limit, offset| PathsQuery {
            namespace: "n".into(),
            matches,
            max_depth,
            limit,
            offset,
        };
        let prefix = |p: &str| PathMatch { end: End::Prefix, labels: labels(p) };
        let suffix = |p: &str| PathMatch { end: End::Suffix, labels: labels(p) };
        assert_eq!(query(vec![prefix("a/b")], None, 100, 0).page(stored.clone()).len(), 4);
        assert_eq!(query(vec![suffix("f")], None, 100, 0).page(stored.clone()).len(), 3);
        assert_eq!(query(vec![prefix("a"), suffix("f")], None, 100, 0).page(stored.clone()).len(), 2);
        assert_eq!(
            query(vec![prefix("a/b")], Some(3), 100, 0).page(stored.clone()),
            vec![labels("a/b/c"), labels("a/b/d"), labels("a/b/f")]
        );
        assert_eq!(query(vec![prefix("a/*/f")], None, 100, 0).page(stored.clone()).len(), 2);
        assert_eq!(query(vec![], None, 2, 2).page(stored.clone()), vec![labels("a/b/d/i"), labels("a/b/f")]);
        assert_eq!(query(vec![prefix("users/123")], None, 100, 0).page(stored), vec![labels("users/123")]);
        let fixed = query(vec![prefix("a/*/f"), prefix("a/b/*")], None, 1, 0).fixed_prefix();
        assert_eq!(fixed, Path::of(&labels("a/b")));
    }
}
