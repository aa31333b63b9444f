//! What a search's filter matches: a JSON object whose every key names a
//! top-level key of an item's value and holds its condition, either a value
//! the item's must equal or an object of operators (`$eq`, `$ne`, `$gt`,
//! `$gte`, `$lt`, `$lte`). Equality is JSON's, numbers by value (1 equals
//! 1.0), with a filter's object matching an item's object that holds at
//! least its keys, each matching, recursively, and an array one of the same
//! length, element by element; a missing key is null. The comparisons hold
//! between numbers or between strings (by code point) and fail otherwise.
//! Evaluated here, in the sidecar, so that a search answers the same on
//! every backend.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// A comparison of the operator object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "$eq" => Op::Eq,
            "$ne" => Op::Ne,
            "$gt" => Op::Gt,
            "$gte" => Op::Gte,
            "$lt" => Op::Lt,
            "$lte" => Op::Lte,
            _ => return None,
        })
    }
}

/// One key's condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// The value must equal this scalar (null, a boolean, a number, a string).
    Equals(Value),
    /// The value must be an object whose keys meet these conditions.
    Object(Vec<(String, Condition)>),
    /// The value must be an array as long, each element meeting its condition.
    Array(Vec<Condition>),
    /// Every comparison must hold.
    Compare(Vec<(Op, Value)>),
}

/// A parsed filter: every condition must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    conditions: Vec<(String, Condition)>,
}

impl Filter {
    /// The filter a JSON object's text gives, or why it is none: an object
    /// with a key starting with `$` is an operator object, and each of its
    /// keys must be an operator.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let Value::Object(object) = serde_json::from_str::<Value>(text).map_err(|e| e.to_string())? else {
            return Err("must be a JSON object".into());
        };
        Ok(Filter { conditions: keyed(object)? })
    }

    /// Whether an item whose value is `value` passes.
    pub fn matches(&self, value: &Map<String, Value>) -> bool {
        self.conditions.iter().all(|(key, condition)| holds(condition, value.get(key)))
    }

    /// Whether the filter has no condition (and so passes everything).
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }
}

/// The conditions of an object's keys.
fn keyed(object: Map<String, Value>) -> Result<Vec<(String, Condition)>, String> {
    object.into_iter().map(|(key, value)| Ok((key, condition(value)?))).collect()
}

/// A condition from its JSON value.
fn condition(value: Value) -> Result<Condition, String> {
    match value {
        Value::Object(object) if object.keys().any(|k| k.starts_with('$')) => object
            .into_iter()
            .map(|(name, operand)| match Op::parse(&name) {
                Some(op) => Ok((op, operand)),
                None => Err(format!("unsupported operator {name:?} (supported: $eq, $ne, $gt, $gte, $lt, $lte)")),
            })
            .collect::<Result<Vec<_>, String>>()
            .map(Condition::Compare),
        Value::Object(object) => keyed(object).map(Condition::Object),
        Value::Array(elements) => elements.into_iter().map(condition).collect::<Result<_, _>>().map(Condition::Array),
        scalar => Ok(Condition::Equals(scalar)),
    }
}

/// Whether `item` (absent: a missing key, which is null) meets `condition`.
fn holds(condition: &Condition, item: Option<&Value>) -> bool {
    let item = item.unwrap_or(&Value::Null);
    match (condition, item) {
        (Condition::Equals(want), _) => equal(want, item),
        (Condition::Object(subs), Value::Object(have)) => subs.iter().all(|(key, sub)| holds(sub, have.get(key))),
        (Condition::Array(elements), Value::Array(have)) => {
            elements.len() == have.len() && elements.iter().zip(have).all(|(c, h)| holds(c, Some(h)))
        }
        (Condition::Object(_) | Condition::Array(_), _) => false,
        (Condition::Compare(ops), _) => ops.iter().all(|(op, operand)| compare(*op, item, operand)),
    }
}

/// One comparison.
fn compare(op: Op, item: &Value, operand: &Value) -> bool {
    match op {
        Op::Eq => equal(item, operand),
        Op::Ne => !equal(item, operand),
        Op::Gt => order(item, operand) == Some(Ordering::Greater),
        Op::Gte => matches!(order(item, operand), Some(Ordering::Greater | Ordering::Equal)),
        Op::Lt => order(item, operand) == Some(Ordering::Less),
        Op::Lte => matches!(order(item, operand), Some(Ordering::Less | Ordering::Equal)),
    }
}

/// JSON equality, numbers by value.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// How two numbers or two strings compare; `None` for any other pair.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y),
        // Rust's str order is byte order, which for UTF-8 is code point order.
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        _ => None,
    }
}

/// Integers compare exactly; any other pair as doubles.
fn number_order(x: &Number, y: &Number) -> Option<Ordering> {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return Some(a.cmp(&b));
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return Some(a.cmp(&b));
    }
    x.as_f64()?.partial_cmp(&y.as_f64()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(filter: &str, value: &str) -> bool {
        let Value::Object(value) = serde_json::from_str(value).unwrap() else { panic!("an object") };
        Filter::parse(filter).unwrap().matches(&value)
    }

    #[test]
    fn values_match_by_equality_objects_by_their_keys_and_arrays_element_by_element() {
        assert!(passes(r#"{"color": "red"}"#, r#"{"color": "red", "n": 1}"#));
        assert!(!passes(r#"{"color": "red"}"#, r#"{"color": "blue"}"#));
        assert!(passes(r#"{"n": 1}"#, r#"{"n": 1.0}"#));
        assert!(!passes(r#"{"n": true}"#, r#"{"n": 1}"#));
        assert!(passes(r#"{"n": {"y": 2}}"#, r#"{"n": {"y": 2, "z": 3}}"#));
        assert!(!passes(r#"{"n": {"y": 2}}"#, r#"{"n": 2}"#));
        assert!(passes(r#"{"n": {"y": {"$gt": 1}}}"#, r#"{"n": {"y": 2}}"#));
        assert!(passes(r#"{"t": ["a", 1]}"#, r#"{"t": ["a", 1.0]}"#));
        assert!(!passes(r#"{"t": ["a"]}"#, r#"{"t": ["a", "b"]}"#));
        assert!(passes(r#"{"gone": null}"#, r#"{}"#));
        assert!(!passes(r#"{"a.b": 1}"#, r#"{"a": {"b": 1}}"#));
        assert!(passes(r#"{}"#, r#"{"a": 1}"#));
    }

    #[test]
    fn operators_compare_numbers_with_numbers_and_strings_with_strings() {
        assert!(passes(r#"{"s": {"$gt": 3.2}}"#, r#"{"s": 4}"#));
        assert!(!passes(r#"{"s": {"$gt": 4}}"#, r#"{"s": 4}"#));
        assert!(passes(r#"{"s": {"$gte": 4, "$lt": 5}}"#, r#"{"s": 4.0}"#));
        assert!(passes(r#"{"s": {"$lte": 9007199254740993}}"#, r#"{"s": 9007199254740993}"#));
        assert!(!passes(r#"{"s": {"$lt": 9007199254740992}}"#, r#"{"s": 9007199254740993}"#));
        assert!(passes(r#"{"d": {"$lt": "2024-02"}}"#, r#"{"d": "2024-01-31"}"#));
        assert!(!passes(r#"{"d": {"$gt": 1}}"#, r#"{"d": "5"}"#));
        assert!(!passes(r#"{"d": {"$gt": 1}}"#, r#"{}"#));
        assert!(!passes(r#"{"d": {"$lte": 1}}"#, r#"{"d": null}"#));
        assert!(passes(r#"{"d": {"$ne": 1}}"#, r#"{}"#));
        assert!(passes(r#"{"d": {"$eq": {"a": 1}}}"#, r#"{"d": {"a": 1.0}}"#));
        assert!(!passes(r#"{"d": {"$eq": {"a": 1}}}"#, r#"{"d": {"a": 1, "b": 2}}"#));
    }

    #[test]
    fn an_operator_object_holds_only_operators() {
        assert!(Filter::parse(r#"{"a": {"$in": [1]}}"#).unwrap_err().contains("$in"));
        assert!(Filter::parse(r#"{"a": {"$gt": 1, "b": 2}}"#).unwrap_err().contains("\"b\""));
        assert!(Filter::parse(r#"{"n": {"y": {"$in": [1]}}}"#).unwrap_err().contains("$in"));
        assert!(Filter::parse("[1]").is_err());
    }
}
