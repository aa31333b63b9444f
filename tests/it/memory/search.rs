//! SearchItems: under a prefix matched label by label; without a query in
//! item order (paths by their first put, items by theirs, an update keeping
//! its place and an item put again after a delete going last); filters by
//! equality and comparison; with a query vector by best cosine similarity
//! over an item's vectors, ties in item order, the unscored after the
//! scored; and limit and offset paging one ordering.

use serde_json::json;
use stepwell_test_support::sidecar::Sidecar;

use super::{delete, keys, put, put_all, search, search_under, with_vector};

#[tokio::test]
async fn a_prefix_matches_whole_labels_and_the_empty_prefix_everything() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(
        &mut client,
        vec![
            put("foo", "1", json!({})),
            put("foo/child", "2", json!({})),
            put("foobar", "3", json!({})),
            put("foo2", "4", json!({})),
            put("fo", "5", json!({})),
        ],
    )
    .await;
    assert_eq!(keys(&search(&mut client, search_under("foo")).await), vec!["1", "2"]);
    assert_eq!(keys(&search(&mut client, search_under("foobar")).await), vec!["3"]);
    assert_eq!(keys(&search(&mut client, search_under("f")).await), Vec::<String>::new());
    assert_eq!(search(&mut client, search_under("")).await.len(), 5);
}

#[tokio::test]
async fn without_a_query_items_come_in_the_order_they_were_first_put() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(&mut client, vec![put("b", "b1", json!({})), put("a", "a1", json!({})), put("b", "b2", json!({}))]).await;
    put_all(&mut client, vec![put("a", "a2", json!({})), put("c", "c1", json!({}))]).await;
    // An update keeps its place; a delete and a put again go last in the path.
    put_all(&mut client, vec![put("b", "b1", json!({"v": 2})), delete("a", "a1")]).await;
    put_all(&mut client, vec![put("a", "a1", json!({}))]).await;
    assert_eq!(keys(&search(&mut client, search_under("")).await), vec!["b1", "b2", "a2", "a1", "c1"]);
    // Paths keep their place while they are empty.
    put_all(&mut client, vec![delete("b", "b1"), delete("b", "b2")]).await;
    put_all(&mut client, vec![put("b", "b3", json!({}))]).await;
    assert_eq!(keys(&search(&mut client, search_under("")).await), vec!["b3", "a2", "a1", "c1"]);
}

#[tokio::test]
async fn filters_match_by_equality_and_comparison() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(
        &mut client,
        vec![
            put("docs", "doc1", json!({"color": "red", "score": 4.5, "tags": {"a": 1, "b": 2}})),
            put("docs", "doc2", json!({"color": "red", "score": 3})),
            put("docs", "doc3", json!({"color": "green", "score": 4.0})),
            put("docs", "doc4", json!({"color": "blue", "score": 3.5, "day": "2024-05-01"})),
        ],
    )
    .await;
    let filtered = |filter: serde_json::Value| {
        let mut request = search_under("docs");
        request.filter = filter.to_string().into_bytes();
        request
    };
    let cases = [
        (json!({"color": "red"}), vec!["doc1", "doc2"]),
        (json!({"score": {"$gt": 3.2}}), vec!["doc1", "doc3", "doc4"]),
        (json!({"score": {"$gte": 4.0}, "color": "green"}), vec!["doc3"]),
        (json!({"score": {"$lt": 3.5}}), vec!["doc2"]),
        (json!({"score": {"$lte": 3.5, "$ne": 3}}), vec!["doc4"]),
        (json!({"score": 3.0}), vec!["doc2"]),
        (json!({"tags": {"a": 1}}), vec!["doc1"]),
        (json!({"day": {"$gt": "2024-01-01"}}), vec!["doc4"]),
        (json!({"day": null}), vec!["doc1", "doc2", "doc3"]),
        (json!({"color": {"$ne": "red"}}), vec!["doc3", "doc4"]),
        (json!({"color": {"$eq": "blue"}}), vec!["doc4"]),
        (json!({"missing": {"$gt": 0}}), vec![]),
    ];
    for (filter, expected) in cases {
        assert_eq!(keys(&search(&mut client, filtered(filter.clone())).await), expected, "{filter}");
    }
}

#[tokio::test]
async fn a_query_orders_by_best_similarity_then_item_order_and_the_unscored_follow() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(
        &mut client,
        vec![
            with_vector(put("m", "unscored", json!({})), "text", &[1.0, 0.0, 0.0]),
            with_vector(with_vector(put("m", "two-fields", json!({})), "a", &[0.0, 1.0]), "b", &[1.0, 1.0]),
            with_vector(put("m", "exact", json!({})), "text", &[3.0, 0.0]),
            put("m", "none", json!({})),
            with_vector(put("m", "tie", json!({})), "text", &[2.0, 2.0]),
            with_vector(put("m", "opposite", json!({})), "text", &[-1.0, 0.0]),
        ],
    )
    .await;
    let mut request = search_under("m");
    request.query_vector = vec![1.0, 0.0];
    let hits = search(&mut client, request.clone()).await;
    assert_eq!(keys(&hits), vec!["exact", "two-fields", "tie", "opposite", "unscored", "none"]);
    let score = |i: usize| hits[i].score;
    assert!((score(0).unwrap() - 1.0).abs() < 1e-6, "{hits:?}");
    assert!((score(1).unwrap() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6, "the best of its vectors");
    assert_eq!(score(1), score(2), "a tie goes in item order");
    assert!((score(3).unwrap() + 1.0).abs() < 1e-6);
    assert_eq!((score(4), score(5)), (None, None), "a vector of other dimensions does not score");

    request.limit = 2;
    request.offset = 3;
    assert_eq!(keys(&search(&mut client, request.clone()).await), vec!["opposite", "unscored"]);
    request.offset = 5;
    assert_eq!(keys(&search(&mut client, request.clone()).await), vec!["none"]);
    request.filter = br#"{"nothing": 1}"#.to_vec();
    assert!(search(&mut client, request).await.is_empty());
}

#[tokio::test]
async fn vectors_merge_by_field_unless_replaced() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(&mut client, vec![with_vector(put("m", "k", json!({})), "old", &[1.0, 0.0])]).await;
    put_all(&mut client, vec![with_vector(put("m", "k", json!({})), "new", &[0.0, 1.0])]).await;
    let mut request = search_under("m");
    request.query_vector = vec![1.0, 0.0];
    let merged = search(&mut client, request.clone()).await;
    assert!((merged[0].score.unwrap() - 1.0).abs() < 1e-6, "the old field's vector stays: {merged:?}");
    let mut replace = with_vector(put("m", "k", json!({})), "new", &[0.0, 1.0]);
    replace.replace_vectors = true;
    put_all(&mut client, vec![replace]).await;
    let replaced = search(&mut client, request).await;
    assert!(replaced[0].score.unwrap().abs() < 1e-6, "only the new field's vector is left: {replaced:?}");
}

#[tokio::test]
async fn pages_of_a_search_without_a_query_partition_its_items() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    for half in [0..550, 550..1100] {
        let writes = half.map(|i| put(&format!("p/{}", i % 7), &format!("k{i:04}"), json!({"i": i}))).collect();
        put_all(&mut client, writes).await;
    }
    let mut all = Vec::new();
    for page in 0..12 {
        let mut request = search_under("p");
        request.filter = br#"{"i": {"$gte": 50}}"#.to_vec();
        request.limit = 100;
        request.offset = page * 100;
        all.extend(keys(&search(&mut client, request).await));
    }
    assert_eq!(all.len(), 1050);
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 1050, "no item on two pages");
}
