//! ListPaths: the paths that hold live items, matched by prefix and suffix
//! (`*` any one label), cut to a depth and listed once, in label order,
//! paged; a path whose items are all deleted is not listed.

use serde_json::json;
use stepwell::api::pb::path_match::End;
use stepwell::api::pb::{ListPathsRequest, PathMatch};
use stepwell_test_support::MemoryClient;
use stepwell_test_support::sidecar::Sidecar;

use super::{delete, path, put, put_all};

async fn list(
    client: &mut MemoryClient,
    matches: &[(End, &str)],
    max_depth: i32,
    limit: i32,
    offset: i32,
) -> Vec<String> {
    let matches = matches.iter().map(|(end, labels)| PathMatch { end: *end as i32, labels: path(labels) }).collect();
    let request = ListPathsRequest { namespace: String::new(), matches, max_depth, limit, offset };
    let paths = client.list_paths(request).await.expect("listed").into_inner().paths;
    paths.into_iter().map(|p| p.labels.join("/")).collect()
}

#[tokio::test]
async fn paths_are_matched_cut_listed_once_in_label_order_and_paged() {
    let server = Sidecar::builder().start().await;
    let mut client = server.memory();
    let paths =
        ["a/b/c", "a/b/d/e", "a/b/d/i", "a/b/f", "a/c/f", "b/a/f", "users/123", "users/456/settings", "users/789"];
    put_all(&mut client, paths.iter().map(|p| put(p, "k", json!({}))).collect()).await;
    put_all(&mut client, vec![put("gone", "k", json!({}))]).await;
    put_all(&mut client, vec![delete("gone", "k")]).await;
    let (prefix, suffix) = (End::Prefix, End::Suffix);
    assert_eq!(list(&mut client, &[], 0, 0, 0).await, paths.to_vec(), "all, in label order, not the empty one");
    assert_eq!(list(&mut client, &[(prefix, "a/b")], 0, 0, 0).await.len(), 4);
    assert_eq!(list(&mut client, &[(suffix, "f")], 0, 0, 0).await, vec!["a/b/f", "a/c/f", "b/a/f"]);
    assert_eq!(list(&mut client, &[(prefix, "a"), (suffix, "f")], 0, 0, 0).await, vec!["a/b/f", "a/c/f"]);
    assert_eq!(list(&mut client, &[(prefix, "a/b")], 3, 0, 0).await, vec!["a/b/c", "a/b/d", "a/b/f"]);
    assert_eq!(list(&mut client, &[], 2, 0, 0).await, vec!["a/b", "a/c", "b/a", "users/123", "users/456", "users/789"]);
    assert_eq!(list(&mut client, &[(prefix, "a/*/f")], 0, 0, 0).await, vec!["a/b/f", "a/c/f"]);
    assert_eq!(list(&mut client, &[(suffix, "*/f")], 0, 0, 0).await.len(), 3);
    assert_eq!(list(&mut client, &[(prefix, "users/*")], 0, 0, 0).await.len(), 3);
    assert_eq!(list(&mut client, &[(prefix, "*/users"), (suffix, "*/settings")], 0, 0, 0).await.len(), 0);
    assert_eq!(list(&mut client, &[(prefix, "users/123")], 0, 0, 0).await, vec!["users/123"]);
    assert_eq!(list(&mut client, &[(prefix, "a/b")], 0, 2, 0).await, vec!["a/b/c", "a/b/d/e"]);
    assert_eq!(list(&mut client, &[(prefix, "a/b")], 0, 2, 2).await, vec!["a/b/d/i", "a/b/f"]);
    assert!(list(&mut client, &[(prefix, "nothing")], 0, 0, 0).await.is_empty());
}
