//! `stepwell memory ls|show|search|rm`: ListPaths under a path, GetItems of
//! one item, SearchItems under a path by a filter (in the order items were
//! first put), and a PutItems delete of one item or DeleteItems of every
//! item under a path. A path is its labels joined by `/`; the empty path
//! (`""` or `/`) is every path.

use serde_json::{Map, Value};

use super::{Failure, Session, json_or_null, one_line, print_ndjson, print_record, print_table, put_time, time_cell};
use crate::api::pb::path_match::End;
use crate::api::pb::{
    DeleteItemsRequest, GetItemsRequest, ItemAddress, ListPathsRequest, MemoryItem, MemoryWrite, PathMatch,
    PutItemsRequest, SearchItemsRequest,
};
use crate::config::commands::{MemoryItemArgs, MemoryLs, MemoryRm, MemorySearch};

/// How many characters of a value the table shows.
const VALUE_CHARS: usize = 60;

/// The labels of a path written with `/` between them.
fn labels(path: &str) -> Vec<String> {
    path.split('/').filter(|label| !label.is_empty()).map(str::to_owned).collect()
}

/// `stepwell memory ls`.
pub(super) async fn ls(session: &Session, args: &MemoryLs) -> Result<(), Failure> {
    let prefix = labels(&args.path);
    let matches = match prefix.is_empty() {
        true => Vec::new(),
        false => vec![PathMatch { end: End::Prefix as i32, labels: prefix }],
    };
    let request = ListPathsRequest {
        namespace: session.namespace(),
        matches,
        max_depth: args.depth.map_or(0, |d| d as i32),
        limit: args.limit as i32,
        offset: 0,
    };
    let paths = session.call(session.memory().list_paths(session.request(request))).await?.paths;
    if session.json() {
        print_ndjson(paths.iter().map(|p| {
            let mut row = Map::new();
            row.insert("path".to_owned(), p.labels.clone().into());
            row
        }));
    } else {
        let rows: Vec<Vec<String>> = paths.iter().map(|p| vec![one_line(&p.labels.join("/"))]).collect();
        print_table(&["PATH"], &rows);
    }
    Ok(())
}

/// `stepwell memory show`: exit 1 (not found) when the item is absent or expired.
pub(super) async fn show(session: &Session, args: &MemoryItemArgs) -> Result<(), Failure> {
    let items = vec![ItemAddress { path: labels(&args.path), key: args.key.clone() }];
    let request = GetItemsRequest { namespace: session.namespace(), items, refresh_ttl: false };
    let found = session.call(session.memory().get_items(session.request(request))).await?.items;
    let Some(item) = found.into_iter().next() else {
        return Err(Failure::new(super::EXIT_NOT_FOUND, format!("no memory item {} at {}", args.key, args.path)));
    };
    if session.json() {
        print_ndjson([item_row(&item)]);
    } else {
        let value = serde_json::from_slice::<Value>(&item.value)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_else(|_| String::from_utf8_lossy(&item.value).into_owned());
        print_record(&[
            ("path", one_line(&item.path.join("/"))),
            ("key", one_line(&item.key)),
            ("created", time_cell(item.created_at.as_ref())),
            ("updated", time_cell(item.updated_at.as_ref())),
            ("expires", time_cell(item.expires_at.as_ref())),
            ("value", value),
        ]);
    }
    Ok(())
}

/// `stepwell memory search`.
pub(super) async fn search(session: &Session, args: &MemorySearch) -> Result<(), Failure> {
    let request = SearchItemsRequest {
        namespace: session.namespace(),
        path_prefix: labels(&args.path),
        filter: args.filter.clone().unwrap_or_default().into_bytes(),
        limit: args.limit as i32,
        offset: args.offset as i32,
        ..Default::default()
    };
    let hits = session.call(session.memory().search_items(session.request(request))).await?.hits;
    let items: Vec<MemoryItem> = hits.into_iter().filter_map(|hit| hit.item).collect();
    if session.json() {
        print_ndjson(items.iter().map(item_row));
    } else {
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|i| {
                vec![
                    one_line(&i.path.join("/")),
                    one_line(&i.key),
                    time_cell(i.updated_at.as_ref()),
                    time_cell(i.expires_at.as_ref()),
                    value_cell(&i.value),
                ]
            })
            .collect();
        print_table(&["PATH", "KEY", "UPDATED", "EXPIRES", "VALUE"], &rows);
    }
    Ok(())
}

/// `stepwell memory rm`: how many items went (0 when there were none, so a
/// repeat succeeds).
pub(super) async fn rm(session: &Session, args: &MemoryRm) -> Result<(), Failure> {
    let mut memory = session.memory();
    let deleted = match &args.key {
        Some(key) if !args.recursive => {
            let write = MemoryWrite { path: labels(&args.path), key: key.clone(), delete: true, ..Default::default() };
            let request = PutItemsRequest { namespace: session.namespace(), writes: vec![write] };
            session.call(memory.put_items(session.request(request))).await?;
            None
        }
        _ => {
            let request = DeleteItemsRequest { namespace: session.namespace(), path_prefix: labels(&args.path) };
            Some(session.call(memory.delete_items(session.request(request))).await?.deleted)
        }
    };
    if session.json() {
        let mut row = Map::new();
        row.insert("path".to_owned(), labels(&args.path).into());
        row.insert("key".to_owned(), args.key.clone().into());
        row.insert("deleted".to_owned(), deleted.into());
        print_ndjson([row]);
    } else {
        let what = match deleted {
            Some(n) => format!("{n} items under {}", one_line(&args.path)),
            None => format!("{} at {}", one_line(args.key.as_deref().unwrap_or_default()), one_line(&args.path)),
        };
        print_record(&[("deleted", what)]);
    }
    Ok(())
}

/// An item as an NDJSON row: its value as JSON, its times in RFC 3339.
fn item_row(item: &MemoryItem) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("path".to_owned(), item.path.clone().into());
    row.insert("key".to_owned(), item.key.clone().into());
    row.insert("value".to_owned(), json_or_null(&item.value));
    put_time(&mut row, "created_at", item.created_at.as_ref());
    put_time(&mut row, "updated_at", item.updated_at.as_ref());
    put_time(&mut row, "expires_at", item.expires_at.as_ref());
    row
}

/// A value on one line, compact, cut after 60 characters.
fn value_cell(value: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(value) {
        Ok(value) => value.to_string(),
        Err(_) => String::from_utf8_lossy(value).into_owned(),
    };
    match text.char_indices().nth(VALUE_CHARS) {
        Some((end, _)) => format!("{}…", one_line(&text[..end])),
        None => one_line(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_labels_between_slashes_and_the_empty_path_is_every_path() {
        assert_eq!(labels("users/alice/prefs"), ["users", "alice", "prefs"]);
        assert_eq!(labels("/users/"), ["users"]);
        assert!(labels("").is_empty() && labels("/").is_empty());
        assert_eq!(value_cell(br#"{ "a":  1 }"#), r#"{"a":1}"#);
        assert!(value_cell(format!(r#"{{"k": "{}"}}"#, "x".repeat(100)).as_bytes()).ends_with('…'));
    }
}
