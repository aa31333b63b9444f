//! MemoryService end to end, over real gRPC on a real store, one topic a
//! module: what a put stores and a get reads back, which write of an item
//! wins, and deletions (`items`); searches by filter, by vector and both,
//! ordered and paged (`search`); paths listed by prefix, suffix and depth
//! (`paths`); times to live, refreshed by reads and swept, on the store's
//! moved clock (`ttl`); and invalid input and every limit's refusal
//! (`validation`). This module holds what they share: request builders and
//! readers.

mod items;
mod paths;
mod search;
mod ttl;
mod validation;

use serde_json::Value;
use stepwell::api::pb::{
    GetItemsRequest, ItemAddress, MemoryItem, MemoryVector, MemoryWrite, PutItemsRequest, SearchHit, SearchItemsRequest,
};
use stepwell_test_support::MemoryClient;

/// Labels from a slash-separated text.
fn path(text: &str) -> Vec<String> {
    text.split('/').filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// A put of `value` at `path`/`key`.
fn put(at: &str, key: &str, value: Value) -> MemoryWrite {
    MemoryWrite { path: path(at), key: key.to_owned(), value: value.to_string().into_bytes(), ..Default::default() }
}

/// `write` with a vector for `field`.
fn with_vector(mut write: MemoryWrite, field: &str, values: &[f32]) -> MemoryWrite {
    write.vectors.push(MemoryVector { field: field.to_owned(), values: values.to_vec() });
    write
}

/// A delete of `path`/`key`.
fn delete(at: &str, key: &str) -> MemoryWrite {
    MemoryWrite { path: path(at), key: key.to_owned(), delete: true, ..Default::default() }
}

/// Commits `writes` in one PutItems of the default namespace.
async fn put_all(client: &mut MemoryClient, writes: Vec<MemoryWrite>) {
    let request = PutItemsRequest { namespace: String::new(), writes };
    client.put_items(request).await.expect("the put is committed");
}

/// The items GetItems finds at these addresses.
async fn get(client: &mut MemoryClient, addresses: &[(&str, &str)]) -> Vec<MemoryItem> {
    let items = addresses.iter().map(|(p, k)| ItemAddress { path: path(p), key: (*k).to_owned() }).collect();
    let request = GetItemsRequest { namespace: String::new(), items, refresh_ttl: false };
    client.get_items(request).await.expect("the get is answered").into_inner().items
}

/// The one item at `path`/`key`, if it is there.
async fn get_one(client: &mut MemoryClient, at: &str, key: &str) -> Option<MemoryItem> {
    get(client, &[(at, key)]).await.into_iter().next()
}

/// An item's value as parsed JSON.
fn value_of(item: &MemoryItem) -> Value {
    serde_json::from_slice(&item.value).expect("a JSON value")
}

/// A search request under `prefix`.
fn search_under(prefix: &str) -> SearchItemsRequest {
    SearchItemsRequest { path_prefix: path(prefix), ..Default::default() }
}

/// The hits of a search.
async fn search(client: &mut MemoryClient, request: SearchItemsRequest) -> Vec<SearchHit> {
    client.search_items(request).await.expect("the search is answered").into_inner().hits
}

/// The keys of hits, in order.
fn keys(hits: &[SearchHit]) -> Vec<String> {
    hits.iter().map(|hit| hit.item.as_ref().expect("an item").key.clone()).collect()
}
