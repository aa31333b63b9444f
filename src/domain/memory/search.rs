//! How a search orders and pages what it found, whichever backend read the
//! items: a `Collector` is offered every item under the search's prefix
//! that is not expired, filters it, scores it against the query vector
//! (its best cosine similarity over its vectors of the query's length) and
//! keeps only what the page can still hold, so that memory stays bounded by
//! `offset + limit` however many items are read. Without a query the items
//! come in item order and the collector says when the page is full; with
//! one they may come in any order, and the hits are ordered by score, then
//! item order, the unscored after the scored.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use serde_json::Value;

use super::{ItemsQuery, StoredItem};

/// One item a search found, and its score.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub item: StoredItem,
    pub score: Option<f64>,
}

/// How a store found a search's page: in item order (no query), by
/// scoring every item under the prefix, or from an approximate index's
/// candidates (scored exactly all the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    Ordered,
    Exact,
    Index,
}

impl Scan {
    /// The label of `stepwell_memory_searches_total`.
    pub fn label(self) -> &'static str {
        match self {
            Scan::Ordered => "ordered",
            Scan::Exact => "exact",
            Scan::Index => "index",
        }
    }
}

/// A search's page, and how the store found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched {
    pub hits: Vec<Hit>,
    pub scan: Scan,
}

/// The cosine similarity of `a` and `b`, given `b`'s norm; `None` when their
/// lengths differ, 0 when either is all zeros.
pub fn cosine(a: &[f32], b: &[f32], b_norm: f64) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let (mut dot, mut a_squares) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let x = f64::from(*x);
        dot += x * f64::from(*y);
        a_squares += x * x;
    }
    let norms = a_squares.sqrt() * b_norm;
    Some(if norms == 0.0 { 0.0 } else { dot / norms })
}

/// The Euclidean norm of a vector.
pub fn norm(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt()
}

/// A hit kept while collecting, ordered best first: by score (higher
/// first, unscored last), then by item order.
struct Ranked(Hit);

impl Ranked {
    fn rank(&self, other: &Ranked) -> Ordering {
        let by_score = match (self.0.score, other.0.score) {
            (Some(a), Some(b)) => b.total_cmp(&a),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_score
            .then_with(|| self.0.item.order.cmp(&other.0.item.order))
            .then_with(|| (&self.0.item.path, &self.0.item.key).cmp(&(&other.0.item.path, &other.0.item.key)))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.rank(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    /// The max-heap's top is the worst hit kept, the first to let go.
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank(other)
    }
}

/// Collects a search's page from the items offered to it.
pub struct Collector<'q> {
    query: &'q ItemsQuery,
    query_norm: f64,
    /// The best `offset + limit` hits so far, the worst on top.
    kept: BinaryHeap<Ranked>,
    room: usize,
}

impl<'q> Collector<'q> {
    pub fn new(query: &'q ItemsQuery) -> Collector<'q> {
        let room = query.offset as usize + query.limit as usize;
        let query_norm = query.query.as_deref().map_or(0.0, norm);
        Collector { query, query_norm, kept: BinaryHeap::with_capacity(room.min(4096) + 1), room }
    }

    /// Whether the store must send each item's vectors.
    pub fn wants_vectors(&self) -> bool {
        self.query.query.is_some()
    }

    /// Whether the page is settled: without a query, items come in item
    /// order, so once it holds `offset + limit` no later item can enter.
    pub fn is_full(&self) -> bool {
        self.query.query.is_none() && self.kept.len() >= self.room
    }

    /// How many hits a page needs kept: its offset and its limit.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Whether as many hits are kept as the page needs (offered in any
    /// order, a better item may still come).
    pub fn holds_page(&self) -> bool {
        self.kept.len() >= self.room
    }

    /// Offers the next item with its vectors. An item whose value is not an
    /// object (never stored) does not match a filter.
    pub fn offer<'v>(&mut self, item: StoredItem, vectors: impl Iterator<Item = &'v [f32]>) {
        if self.room == 0 {
            return;
        }
        if let Some(filter) = self.query.filter.as_ref().filter(|f| !f.is_empty()) {
            match serde_json::from_str::<Value>(&item.value) {
                Ok(Value::Object(value)) if filter.matches(&value) => {}
                _ => return,
            }
        }
        let score =
            self.query.query.as_deref().and_then(|query| {
                vectors.filter_map(|v| cosine(v, query, self.query_norm)).max_by(|a, b| a.total_cmp(b))
            });
        let hit = Ranked(Hit { item, score });
        if self.kept.len() < self.room {
            self.kept.push(hit);
        } else if self.kept.peek().is_some_and(|worst| hit < *worst) {
            self.kept.pop();
            self.kept.push(hit);
        }
    }

    /// The page: the kept hits best first, the first `offset` skipped.
    pub fn page(self) -> Vec<Hit> {
        let offset = self.query.offset as usize;
        self.kept.into_sorted_vec().into_iter().skip(offset).map(|ranked| ranked.0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::filter::Filter;
    use super::super::{Order, Path};
    use super::*;

    fn item(key: &str, place: i64, value: &str) -> StoredItem {
        StoredItem {
            path: Path::of(&["p".to_owned()]),
            key: key.into(),
            value: value.into(),
            created_at: 0,
            updated_at: 0,
            expires_at: None,
            ttl: None,
            order: Order { item_place: place, ..Order::default() },
        }
    }

    fn query(filter: Option<&str>, vector: Option<Vec<f32>>, limit: u32, offset: u32) -> ItemsQuery {
        ItemsQuery {
            namespace: "n".into(),
            prefix: Path::of(&[]),
            filter: filter.map(|f| Filter::parse(f).unwrap()),
            query: vector,
            limit,
            offset,
        }
    }

    fn keys(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.item.key.as_str()).collect()
    }

    #[test]
    fn without_a_query_the_page_is_the_filtered_items_in_order_and_fills() {
        let q = query(Some(r#"{"c": "red"}"#), None, 2, 1);
        let mut collector = Collector::new(&q);
        for (i, colour) in ["red", "blue", "red", "red"].iter().enumerate() {
            assert!(!collector.is_full(), "not full before k{i}");
            collector.offer(item(&format!("k{i}"), i as i64, &format!(r#"{{"c": "{colour}"}}"#)), std::iter::empty());
        }
        assert!(collector.is_full(), "offset + limit matches hold the page");
        let page = collector.page();
        assert_eq!(keys(&page), vec!["k2", "k3"]);
        assert!(page.iter().all(|h| h.score.is_none()));
    }

    #[test]
    fn with_a_query_hits_go_by_best_score_then_order_and_the_unscored_follow() {
        let q = query(None, Some(vec![1.0, 0.0]), 10, 0);
        let mut collector = Collector::new(&q);
        let offered: [(&str, i64, Vec<Vec<f32>>); 5] = [
            ("late-tie", 9, vec![vec![0.0, 1.0], vec![1.0, 1.0]]),
            ("best", 5, vec![vec![2.0, 0.0]]),
            ("none", 1, vec![]),
            ("other-dims", 0, vec![vec![1.0, 0.0, 0.0]]),
            ("early-tie", 2, vec![vec![2.0, 2.0]]),
        ];
        for (key, place, vectors) in offered {
            collector.offer(item(key, place, "{}"), vectors.iter().map(Vec::as_slice));
        }
        let page = collector.page();
        assert_eq!(keys(&page), vec!["best", "early-tie", "late-tie", "other-dims", "none"]);
        assert!((page[0].score.unwrap() - 1.0).abs() < 1e-12);
        assert!((page[1].score.unwrap() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(page[1].score, page[2].score);
        assert_eq!((page[3].score, page[4].score), (None, None));
    }

    #[test]
    fn a_page_keeps_only_offset_plus_limit_and_skips_the_offset() {
        let q = query(None, Some(vec![1.0]), 2, 3);
        let mut collector = Collector::new(&q);
        for i in 0..50 {
            let v = [i as f32 - 25.0];
            collector.offer(item(&format!("k{i:02}"), i, "{}"), std::iter::once(&v[..]));
            assert!(collector.kept.len() <= 5);
        }
        // Positive values score 1, ties in order: k26, k27, k28 skipped.
        assert_eq!(keys(&collector.page()), vec!["k29", "k30"]);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0], 1.0), Some(0.0));
    }
}
