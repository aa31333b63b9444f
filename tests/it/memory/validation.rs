//! Invalid memory requests are refused INVALID_ARGUMENT naming the field,
//! and store nothing; and every limit (a value's bytes, a vector's
//! dimensions, an item's vectors, a request's items, a search's results, a
//! path's labels) has its flag and its refusal.

use serde_json::json;
use stepwell::api::pb::{
    GetItemsRequest, ItemAddress, ListPathsRequest, MemoryVector, MemoryWrite, PathMatch, PutItemsRequest,
    SearchItemsRequest,
};
use stepwell_test_support::MemoryClient;
use stepwell_test_support::errors::assert_invalid;
use stepwell_test_support::sidecar::Sidecar;

use super::{path, put, search, search_under, with_vector};

async fn refused_put(client: &mut MemoryClient, writes: Vec<MemoryWrite>, field: &str, reason: &str) {
    let request = PutItemsRequest { namespace: String::new(), writes };
    let status = client.put_items(request).await.expect_err("refused");
    assert_invalid(&status, field, reason);
}

#[tokio::test]
async fn invalid_writes_are_refused_by_field_and_store_nothing() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    let good = || put("p", "k", json!({}));
    let cases: Vec<(MemoryWrite, &str, &str)> = vec![
        (MemoryWrite { path: vec![], ..good() }, "writes[1].path", "FIELD_REQUIRED"),
        (MemoryWrite { path: vec!["a".into(), String::new()], ..good() }, "writes[1].path[1]", "FIELD_REQUIRED"),
        (MemoryWrite { path: vec!["a\u{1f}b".into()], ..good() }, "writes[1].path[0]", "FIELD_MALFORMED"),
        (MemoryWrite { path: vec!["x".repeat(257)], ..good() }, "writes[1].path[0]", "FIELD_TOO_LONG"),
        (MemoryWrite { key: String::new(), ..good() }, "writes[1].key", "FIELD_REQUIRED"),
        (MemoryWrite { key: "a\nb".into(), ..good() }, "writes[1].key", "FIELD_MALFORMED"),
        (MemoryWrite { value: vec![], ..good() }, "writes[1].value", "FIELD_REQUIRED"),
        (MemoryWrite { value: b"[1, 2]".to_vec(), ..good() }, "writes[1].value", "STATE_NOT_JSON"),
        (MemoryWrite { value: b"{\"a\": ".to_vec(), ..good() }, "writes[1].value", "STATE_NOT_JSON"),
        (MemoryWrite { delete: true, ..good() }, "writes[1].delete", "FIELD_MALFORMED"),
        (with_vector(good(), "", &[1.0]), "writes[1].vectors[0].field", "FIELD_REQUIRED"),
        (with_vector(good(), "f", &[]), "writes[1].vectors[0].values", "FIELD_REQUIRED"),
        (with_vector(good(), "f", &[1.0, f32::NAN]), "writes[1].vectors[0].values[1]", "FIELD_OUT_OF_RANGE"),
        (with_vector(with_vector(good(), "f", &[1.0]), "f", &[2.0]), "writes[1].vectors[1].field", "FIELD_MALFORMED"),
        (
            MemoryWrite { ttl: Some(prost_types::Duration { seconds: 0, nanos: 999 }), ..good() },
            "writes[1].ttl",
            "FIELD_OUT_OF_RANGE",
        ),
        (
            MemoryWrite { ttl: Some(prost_types::Duration { seconds: -1, nanos: 0 }), ..good() },
            "writes[1].ttl",
            "FIELD_OUT_OF_RANGE",
        ),
    ];
    for (bad, field, reason) in cases {
        refused_put(&mut client, vec![put("p", "first", json!({})), bad], field, reason).await;
    }
    refused_put(&mut client, vec![], "writes", "FIELD_REQUIRED").await;
    assert!(search(&mut client, search_under("")).await.is_empty(), "nothing of a refused request was stored");
}

#[tokio::test]
async fn invalid_reads_are_refused_by_field() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    let filter = |text: &str| SearchItemsRequest { filter: text.as_bytes().to_vec(), ..search_under("p") };
    let cases = [
        (filter(r#"{"a": {"$in": [1]}}"#), "filter", "FIELD_MALFORMED"),
        (filter(r#"{"a": {"$gt": 1, "b": 2}}"#), "filter", "FIELD_MALFORMED"),
        (filter("[1]"), "filter", "STATE_NOT_JSON"),
        (
            SearchItemsRequest { query_vector: vec![f32::INFINITY], ..search_under("p") },
            "query_vector[0]",
            "FIELD_OUT_OF_RANGE",
        ),
        (SearchItemsRequest { limit: -1, ..search_under("p") }, "limit", "FIELD_OUT_OF_RANGE"),
        (SearchItemsRequest { offset: -1, ..search_under("p") }, "offset", "FIELD_OUT_OF_RANGE"),
        (SearchItemsRequest { offset: 1_000_001, ..search_under("p") }, "offset", "FIELD_OUT_OF_RANGE"),
        (
            SearchItemsRequest { path_prefix: vec![String::new()], ..Default::default() },
            "path_prefix[0]",
            "FIELD_REQUIRED",
        ),
    ];
    for (request, field, reason) in cases {
        let status = client.search_items(request).await.expect_err("refused");
        assert_invalid(&status, field, reason);
    }
    let get = GetItemsRequest { namespace: String::new(), items: vec![], refresh_ttl: false };
    assert_invalid(&client.get_items(get).await.expect_err("refused"), "items", "FIELD_REQUIRED");
    let get = GetItemsRequest {
        namespace: String::new(),
        items: vec![ItemAddress { path: path("p"), key: String::new() }],
        refresh_ttl: false,
    };
    assert_invalid(&client.get_items(get).await.expect_err("refused"), "items[0].key", "FIELD_REQUIRED");
    let unspecified = ListPathsRequest { matches: vec![PathMatch { end: 0, labels: path("a") }], ..Default::default() };
    assert_invalid(&client.list_paths(unspecified).await.expect_err("refused"), "matches[0].end", "FIELD_REQUIRED");
    let deep = ListPathsRequest { max_depth: -1, ..Default::default() };
    assert_invalid(&client.list_paths(deep).await.expect_err("refused"), "max_depth", "FIELD_OUT_OF_RANGE");
}

#[tokio::test]
async fn every_memory_limit_has_a_flag_and_a_refusal() {
    let server = Sidecar::builder()
        .configure(|config| {
            let memory = &mut config.limits.memory;
            memory.value_bytes_max = 64;
            memory.dims_max = 4;
            memory.vectors_per_item_max = 2;
            memory.items_per_request_max = 3;
            memory.search_results_max = 5;
            memory.path_depth_max = 2;
        })
        .start()
        .await;
    let mut client = server.memory();
    let big = json!({"text": "x".repeat(64)});
    refused_put(&mut client, vec![put("p", "k", big)], "writes[0].value", "FIELD_TOO_LONG").await;
    let dims = with_vector(put("p", "k", json!({})), "f", &[1.0; 5]);
    refused_put(&mut client, vec![dims], "writes[0].vectors[0].values", "FIELD_TOO_LONG").await;
    let vectors = (0..3).fold(put("p", "k", json!({})), |w, i| with_vector(w, &format!("f{i}"), &[1.0]));
    refused_put(&mut client, vec![vectors], "writes[0].vectors", "FIELD_TOO_LONG").await;
    let four = (0..4).map(|i| put("p", &format!("k{i}"), json!({}))).collect();
    refused_put(&mut client, four, "writes", "FIELD_TOO_LONG").await;
    refused_put(&mut client, vec![put("a/b/c", "k", json!({}))], "writes[0].path", "FIELD_TOO_LONG").await;

    let within = vec![
        MemoryWrite {
            vectors: vec![MemoryVector { field: "f".into(), values: vec![1.0; 4] }],
            ..put("a/b", "k", json!({}))
        },
        put("a/b", "k2", json!({"text": "x".repeat(40)})),
        put("a", "k3", json!({})),
    ];
    client.put_items(PutItemsRequest { namespace: String::new(), writes: within }).await.expect("at the limits");
    let too_many = SearchItemsRequest { limit: 6, ..search_under("") };
    assert_invalid(&client.search_items(too_many).await.expect_err("refused"), "limit", "FIELD_OUT_OF_RANGE");
    let query = SearchItemsRequest { query_vector: vec![1.0; 5], ..search_under("") };
    assert_invalid(&client.search_items(query).await.expect_err("refused"), "query_vector", "FIELD_TOO_LONG");
    let filter =
        SearchItemsRequest { filter: format!(r#"{{"text": "{}"}}"#, "x".repeat(60)).into_bytes(), ..search_under("") };
    assert_invalid(&client.search_items(filter).await.expect_err("refused"), "filter", "FIELD_TOO_LONG");
    let get = GetItemsRequest {
        namespace: String::new(),
        items: (0..4).map(|i| ItemAddress { path: path("a"), key: format!("k{i}") }).collect(),
        refresh_ttl: false,
    };
    assert_invalid(&client.get_items(get).await.expect_err("refused"), "items", "FIELD_TOO_LONG");
    let paths = ListPathsRequest { limit: 6, ..Default::default() };
    assert_invalid(&client.list_paths(paths).await.expect_err("refused"), "limit", "FIELD_OUT_OF_RANGE");
    let deep = ListPathsRequest { max_depth: 3, ..Default::default() };
    assert_invalid(&client.list_paths(deep).await.expect_err("refused"), "max_depth", "FIELD_OUT_OF_RANGE");
    assert_eq!(search(&mut client, SearchItemsRequest { limit: 5, ..search_under("") }).await.len(), 3);
}
