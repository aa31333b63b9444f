//! Times to live on the store's moved clock: an item expires its ttl after
//! its put; a read with refresh_ttl moves the expiry of what it returns
//! (and only of live items with a ttl), one without does not; an expired
//! item is never returned by GetItems, SearchItems or ListPaths, a put on
//! it makes a new item, and the sweeper's purge deletes it and its vectors.

use std::time::Duration;

use serde_json::json;
use stepwell::api::pb::{GetItemsRequest, ItemAddress, ListPathsRequest};
use stepwell::config::sections::Config;
use stepwell::domain::clock::Clock;
use stepwell::store;
use stepwell_test_support::MemoryClient;
use stepwell_test_support::requests::{duration, nanos};
use stepwell_test_support::sidecar::Sidecar;

use super::{get_one, keys, path, put, put_all, search, search_under, with_vector};

const MINUTE: Duration = Duration::from_secs(60);

async fn start() -> (Sidecar, Clock) {
    let clock = Clock::system();
    let server = Sidecar::builder()
        .configure(|config| {
            config.store.clock = clock.clone();
            // The test purges itself; the sidecar's sweeper passes only as it starts.
            config.sweep.interval = Duration::from_secs(24 * 3600);
        })
        .start()
        .await;
    (server, clock)
}

async fn refreshing_get(client: &mut MemoryClient, at: &str, key: &str) {
    let items = vec![ItemAddress { path: path(at), key: key.to_owned() }];
    let request = GetItemsRequest { namespace: String::new(), items, refresh_ttl: true };
    assert_eq!(client.get_items(request).await.expect("get").into_inner().items.len(), 1);
}

#[tokio::test]
async fn an_item_expires_its_ttl_after_its_put_unless_a_read_refreshes_it() {
    let (server, clock) = start().await;
    let mut client = server.memory();
    let mut short = put("t", "short", json!({}));
    short.ttl = Some(duration(MINUTE));
    put_all(&mut client, vec![short, put("t", "forever", json!({}))]).await;
    let item = get_one(&mut client, "t", "short").await.expect("live");
    assert_eq!(item.ttl, Some(duration(MINUTE)));
    let expires = nanos(item.expires_at);
    assert!(expires >= nanos(item.updated_at) + 59_000_000_000, "{item:?}");

    clock.advance(MINUTE / 2);
    refreshing_get(&mut client, "t", "short").await;
    let refreshed = nanos(get_one(&mut client, "t", "short").await.expect("live").expires_at);
    assert!(refreshed >= expires + 29_000_000_000, "the read moved the expiry: {expires} -> {refreshed}");
    let unrefreshed = get_one(&mut client, "t", "short").await.expect("live");
    assert_eq!(nanos(unrefreshed.expires_at), refreshed, "a read without refresh_ttl moves nothing");

    // Past the first expiry but not the refreshed one; then past both.
    clock.advance(MINUTE * 3 / 4);
    let mut refreshing_search = search_under("t");
    refreshing_search.refresh_ttl = true;
    assert_eq!(keys(&search(&mut client, refreshing_search).await), vec!["short", "forever"]);
    clock.advance(MINUTE / 2);
    assert!(get_one(&mut client, "t", "short").await.is_some(), "the search refreshed it too");
    clock.advance(MINUTE * 2);
    assert_eq!(get_one(&mut client, "t", "short").await, None);
    assert_eq!(keys(&search(&mut client, search_under("t")).await), vec!["forever"]);
    assert!(get_one(&mut client, "t", "forever").await.is_some(), "an item without a ttl never expires");
}

#[tokio::test]
async fn an_expired_item_is_listed_nowhere_replaced_whole_and_swept() {
    let (server, clock) = start().await;
    let mut client = server.memory();
    let mut expiring = with_vector(put("gone/soon", "k", json!({"old": true})), "old", &[1.0, 0.0]);
    expiring.ttl = Some(duration(MINUTE));
    put_all(&mut client, vec![expiring.clone(), put("kept", "k", json!({}))]).await;
    let first = get_one(&mut client, "gone/soon", "k").await.expect("live");
    clock.advance(MINUTE * 2);
    let request = ListPathsRequest::default();
    let paths = client.list_paths(request.clone()).await.expect("listed").into_inner().paths;
    assert_eq!(paths.iter().map(|p| p.labels.join("/")).collect::<Vec<_>>(), vec!["kept"]);

    // A put on the expired item makes a new one: new creation, no old vectors.
    put_all(&mut client, vec![put("gone/soon", "k", json!({"new": true}))]).await;
    let again = get_one(&mut client, "gone/soon", "k").await.expect("put again");
    assert!(nanos(again.created_at) > nanos(first.created_at), "{again:?}");
    assert_eq!((again.ttl, again.expires_at), (None, None));
    let mut query = search_under("gone");
    query.query_vector = vec![1.0, 0.0];
    assert_eq!(search(&mut client, query).await[0].score, None, "the expired item's vector went with it");

    // The sweeper's purge deletes what expired, with its vectors.
    let mut short = with_vector(put("gone/later", "k", json!({})), "v", &[1.0]);
    short.ttl = Some(duration(MINUTE));
    put_all(&mut client, vec![short]).await;
    clock.advance(MINUTE * 2);
    let mut config = Config::for_database(server.store().database());
    config.store.clock = clock.clone();
    let swept = store::open(&config.store).await.expect("the store opens");
    // The sidecar's own sweeper makes its first pass as it starts, which a
    // busy machine may delay until now: either pass removes the item, once.
    assert!(swept.purge_expired(1000).await.expect("purged") <= 1);
    assert_eq!(swept.purge_expired(1000).await.expect("purged again"), 0, "nothing is left to purge");
    let inspect = server.store().inspect().await;
    assert_eq!((inspect.count("memory_items").await, inspect.count("memory_vectors").await), (2, 0));
}
