//! PutItems and GetItems: an item reads back as written (its value as an
//! equal JSON object, its path, key and times); an update keeps created_at
//! and moves updated_at; the last write of an address in one request wins;
//! a delete removes the item and its vectors, and a delete of an absent
//! item changes nothing; namespaces do not see each other's items; and
//! DeleteItems removes everything under a prefix, nothing beside it.

use serde_json::json;
use stepwell::api::pb::{DeleteItemsRequest, GetItemsRequest, ItemAddress, PutItemsRequest};
use stepwell_test_support::requests::nanos;
use stepwell_test_support::sidecar::Sidecar;

use super::{delete, get, get_one, keys, path, put, put_all, search, search_under, value_of, with_vector};

#[tokio::test]
async fn an_item_reads_back_as_written_and_an_update_keeps_its_creation() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    let value = json!({"text": "likes tea", "n": 2, "nested": {"a": [1, 2.5, null, true]}, "s": "é\n"});
    let first = client
        .put_items(PutItemsRequest {
            namespace: String::new(),
            writes: vec![put("users/alice/prefs", "k1", value.clone())],
        })
        .await
        .expect("put")
        .into_inner();
    let item = get_one(&mut client, "users/alice/prefs", "k1").await.expect("the item is there");
    assert_eq!(item.path, path("users/alice/prefs"));
    assert_eq!(item.key, "k1");
    assert_eq!(value_of(&item), value);
    assert_eq!(item.created_at, first.recorded_at);
    assert_eq!(item.updated_at, first.recorded_at);
    assert_eq!((item.expires_at, item.ttl), (None, None));

    put_all(&mut client, vec![put("users/alice/prefs", "k1", json!({"text": "likes coffee"}))]).await;
    let updated = get_one(&mut client, "users/alice/prefs", "k1").await.expect("still there");
    assert_eq!(value_of(&updated), json!({"text": "likes coffee"}));
    assert_eq!(updated.created_at, item.created_at, "an update keeps created_at");
    assert!(nanos(updated.updated_at) > nanos(item.updated_at), "an update moves updated_at");
    assert_eq!(get_one(&mut client, "users/alice", "k1").await, None, "a path is matched whole");
    assert_eq!(get_one(&mut client, "users/alice/prefs", "k2").await, None);
}

#[tokio::test]
async fn the_last_write_of_an_item_in_a_request_wins_and_deletes_remove_it() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(
        &mut client,
        vec![
            put("p", "a", json!({"v": 1})),
            put("p", "b", json!({"v": 1})),
            put("p", "a", json!({"v": 2})),
            delete("p", "b"),
            delete("p", "never-there"),
        ],
    )
    .await;
    let found = get(&mut client, &[("p", "b"), ("p", "a"), ("p", "a"), ("p", "never-there")]).await;
    assert_eq!(found.len(), 1, "each item found once: {found:?}");
    assert_eq!(value_of(&found[0]), json!({"v": 2}));

    put_all(&mut client, vec![with_vector(put("p", "c", json!({})), "$", &[1.0, 0.0])]).await;
    put_all(&mut client, vec![delete("p", "c")]).await;
    assert_eq!(get_one(&mut client, "p", "c").await, None);
    // Put again without vectors, it has none: the deleted item's went with it.
    put_all(&mut client, vec![put("p", "c", json!({}))]).await;
    let mut query = search_under("p");
    query.query_vector = vec![1.0, 0.0];
    let hits = search(&mut client, query).await;
    let c = hits.iter().find(|hit| hit.item.as_ref().unwrap().key == "c").expect("c is found");
    assert_eq!(c.score, None, "no vector survived the delete");
}

#[tokio::test]
async fn namespaces_do_not_see_each_others_items() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    let request = |namespace: &str| PutItemsRequest {
        namespace: namespace.to_owned(),
        writes: vec![put("shared/path", "k", json!({"owner": namespace}))],
    };
    client.put_items(request("team-a")).await.expect("put a");
    client.put_items(request("team-b")).await.expect("put b");
    for namespace in ["team-a", "team-b"] {
        let get = GetItemsRequest {
            namespace: namespace.to_owned(),
            items: vec![ItemAddress { path: path("shared/path"), key: "k".to_owned() }],
            refresh_ttl: false,
        };
        let items = client.get_items(get).await.expect("get").into_inner().items;
        assert_eq!(items.len(), 1);
        assert_eq!(super::value_of(&items[0]), json!({"owner": namespace}));
    }
    assert_eq!(get_one(&mut client, "shared/path", "k").await, None, "nothing in the default namespace");
}

#[tokio::test]
async fn delete_items_removes_everything_under_a_prefix_and_nothing_beside_it() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    put_all(
        &mut client,
        vec![
            put("users/alice", "a", json!({})),
            put("users/alice/prefs", "b", json!({})),
            put("users/alicia", "c", json!({})),
            put("users", "d", json!({})),
        ],
    )
    .await;
    let deleted = client
        .delete_items(DeleteItemsRequest { namespace: String::new(), path_prefix: path("users/alice") })
        .await
        .expect("delete")
        .into_inner()
        .deleted;
    assert_eq!(deleted, 2);
    assert_eq!(keys(&search(&mut client, search_under("users")).await), vec!["c", "d"]);
    let everything = client
        .delete_items(DeleteItemsRequest { namespace: String::new(), path_prefix: vec![] })
        .await
        .expect("delete all")
        .into_inner()
        .deleted;
    assert_eq!(everything, 2);
    assert!(search(&mut client, search_under("")).await.is_empty());
}
