//! Memory searches on a Postgres with pgvector (the pgvector lane of the
//! test command, whose server comes from scripts/pgvector-bindir; the other
//! lanes skip this module by name): the sidecar creates the extension, the
//! column and an HNSW index per length of --postgres-vector-index-dims;
//! searches of an indexed length take the index's candidates (the metric
//! says so) and score them exactly, so every score is the exact one and
//! recall@10 against the exact answer stays at 0.95 or better; a page the
//! candidates cannot fill (a narrow prefix, a selective filter) is answered
//! exactly; and vectors stored before the index are filled in and found.

use std::collections::HashSet;

use serde_json::json;
use stepwell::api::pb::{MemoryVector, MemoryWrite, PutItemsRequest, SearchHit, SearchItemsRequest};
use stepwell_test_support::MemoryClient;
use stepwell_test_support::admin::{Scrape, free_local_address};
use stepwell_test_support::backend::{Inspector, TestStore};
use stepwell_test_support::rng::Rng;
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

const SEARCHES: &str = "stepwell_memory_searches_total";

/// Seeded vectors in clusters, as embeddings of related texts are.
fn vectors(rng: &mut Rng, count: usize, dims: usize) -> Vec<Vec<f32>> {
    let centres = clusters(rng, dims);
    near(rng, &centres, count)
}

/// The centres of eight clusters.
fn clusters(rng: &mut Rng, dims: usize) -> Vec<Vec<f32>> {
    (0..8).map(|_| (0..dims).map(|_| unit(rng)).collect()).collect()
}

/// `count` vectors, each near one of `centres`.
fn near(rng: &mut Rng, centres: &[Vec<f32>], count: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|_| {
            let centre = &centres[rng.below(centres.len())];
            centre.iter().map(|c| c + unit(rng) * 0.35).collect()
        })
        .collect()
}

/// A number in [-1, 1).
fn unit(rng: &mut Rng) -> f32 {
    (rng.below(20_000) as f32 / 10_000.0) - 1.0
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// Puts `vectors` as items `0..` at `path`, a thousand a request, each with
/// a `tag` of "rare" every 500th and "common" otherwise.
async fn put_vectors(client: &mut MemoryClient, path: &str, vectors: &[Vec<f32>]) {
    for (chunk, batch) in vectors.chunks(1000).enumerate() {
        let writes = batch
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let n = chunk * 1000 + i;
                MemoryWrite {
                    path: vec![path.to_owned()],
                    key: n.to_string(),
                    value: json!({"n": n, "tag": if n % 500 == 7 { "rare" } else { "common" }})
                        .to_string()
                        .into_bytes(),
                    vectors: vec![MemoryVector { field: "text".into(), values: v.clone() }],
                    ..Default::default()
                }
            })
            .collect();
        let request = PutItemsRequest { namespace: String::new(), writes };
        client.put_items(request).await.expect("the put is committed");
    }
}

/// The hits of a search under `path` for `query`.
async fn search(client: &mut MemoryClient, path: &str, query: &[f32], filter: &str, limit: i32) -> Vec<SearchHit> {
    let request = SearchItemsRequest {
        path_prefix: vec![path.to_owned()],
        query_vector: query.to_vec(),
        filter: filter.as_bytes().to_vec(),
        limit,
        ..Default::default()
    };
    client.search_items(request).await.expect("the search is answered").into_inner().hits
}

fn key(hit: &SearchHit) -> usize {
    hit.item.as_ref().expect("an item").key.parse().expect("a numbered key")
}

/// The exact top `k` of `stored` for `query`, by score then key.
fn exact_top(stored: &[Vec<f32>], query: &[f32], k: usize) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = stored.iter().enumerate().map(|(i, v)| (cosine(v, query), i)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(k).map(|(_, i)| i).collect()
}

/// Checks a search's hits against the exact answer: each score the exact
/// one, best first; answers how many of the exact top ten it found.
fn check(hits: &[SearchHit], stored: &[Vec<f32>], query: &[f32]) -> usize {
    assert_eq!(hits.len(), 10, "a full page");
    for pair in hits.windows(2) {
        assert!(pair[0].score >= pair[1].score, "best first: {:?} then {:?}", pair[0].score, pair[1].score);
    }
    for hit in hits {
        let exact = cosine(&stored[key(hit)], query);
        let score = hit.score.expect("a scored hit");
        assert!((score - exact).abs() < 1e-9, "item {}: score {score}, exact {exact}", key(hit));
    }
    let found: HashSet<usize> = hits.iter().map(key).collect();
    exact_top(stored, query, 10).iter().filter(|i| found.contains(i)).count()
}

async fn has_index(store: &TestStore, dims: u32) -> bool {
    let Inspector::Postgres(pool) = store.inspect().await else { panic!("the pgvector lane runs on Postgres") };
    let (has,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') \
            AND EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = $1)",
    )
    .bind(format!("memory_vectors_hnsw_{dims}"))
    .fetch_one(&pool)
    .await
    .expect("read the catalog");
    has
}

#[tokio::test]
async fn searches_of_an_indexed_length_take_the_index_and_keep_exact_scores_and_recall() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server =
        SidecarProcess::builder(STEPWELL, &store).flags(&["--postgres-vector-index-dims", "16"]).admin_listen(&admin);
    let server = server.spawn().await;
    assert!(has_index(&store, 16).await, "the sidecar made the extension and the index of length 16");
    let mut rng = Rng::from_env("STEPWELL_PGVECTOR_SEED");
    // Queries are about what is stored, as an agent's are: near its clusters.
    let centres = clusters(&mut rng, 16);
    let stored = near(&mut rng, &centres, 3000);
    let mut client = server.memory();
    put_vectors(&mut client, "docs", &stored).await;
    let queries = near(&mut rng, &centres, 40);
    let mut found = 0;
    for query in &queries {
        found += check(&search(&mut client, "docs", query, "", 10).await, &stored, query);
    }
    let recall = found as f64 / (queries.len() * 10) as f64;
    println!("recall@10 over {} queries of 3,000 vectors: {recall:.3} (seed {})", queries.len(), rng.seed());
    assert!(recall >= 0.95, "recall@10 {recall} (seed {})", rng.seed());
    let scrape = Scrape::of(&admin).await;
    let by = |scan: &str| scrape.value(SEARCHES, &[("scan", scan)]);
    assert_eq!((by("index"), by("exact")), (queries.len() as f64, 0.0), "every search took the index");
}

#[tokio::test]
async fn a_page_the_candidates_cannot_fill_is_answered_exactly() {
    let store = TestStore::new().await;
    let server = Sidecar::builder().store(&store).configure(|c| c.store.postgres.vector_index_dims = vec![4]).start();
    let server = server.await;
    let mut rng = Rng::from_env("STEPWELL_PGVECTOR_SEED");
    let (big, small) = (vectors(&mut rng, 1500, 4), vectors(&mut rng, 3, 4));
    let mut client = server.memory();
    put_vectors(&mut client, "big", &big).await;
    put_vectors(&mut client, "small", &small).await;
    let query = &vectors(&mut rng, 1, 4)[0];
    // The nearest vectors are mostly under "big": the three under "small" all come back, best first.
    let hits = search(&mut client, "small", query, "", 10).await;
    assert_eq!(hits.iter().map(key).collect::<Vec<_>>(), exact_top(&small, query, 3), "seed {}", rng.seed());
    // Three of 1,500 are rare: the filter leaves them alone, whatever the index offered.
    let rare: Vec<usize> = (0..big.len()).filter(|n| n % 500 == 7).collect();
    let hits = search(&mut client, "big", query, r#"{"tag": "rare"}"#, 10).await;
    let mut expected: Vec<(f64, usize)> = rare.iter().map(|&n| (cosine(&big[n], query), n)).collect();
    expected.sort_by(|a, b| b.0.total_cmp(&a.0));
    assert_eq!(hits.iter().map(key).collect::<Vec<_>>(), expected.iter().map(|e| e.1).collect::<Vec<_>>());
}

#[tokio::test]
async fn vectors_stored_before_the_index_are_filled_in_and_found() {
    let store = TestStore::new().await;
    let mut rng = Rng::from_env("STEPWELL_PGVECTOR_SEED");
    let centres = clusters(&mut rng, 8);
    let stored = near(&mut rng, &centres, 1200);
    let exact = Sidecar::builder().store(&store).configure(|c| c.store.postgres.vector_index_dims = Vec::new()).start();
    let exact = exact.await;
    put_vectors(&mut exact.memory(), "docs", &stored).await;
    exact.stop().await.expect("the exact sidecar stops");
    assert!(!has_index(&store, 8).await, "a sidecar without index lengths makes no index");

    let admin = free_local_address();
    let server =
        SidecarProcess::builder(STEPWELL, &store).flags(&["--postgres-vector-index-dims", "8"]).admin_listen(&admin);
    let server = server.spawn().await;
    assert!(has_index(&store, 8).await, "the second sidecar made the index");
    let Inspector::Postgres(pool) = store.inspect().await else { panic!("the pgvector lane runs on Postgres") };
    let (unfilled,): (i64,) = sqlx::query_as("SELECT count(*) FROM memory_vectors WHERE embedding IS NULL")
        .fetch_one(&pool)
        .await
        .expect("count the vectors without an embedding");
    assert_eq!(unfilled, 0, "every vector stored before was filled in");
    let mut client = server.memory();
    let queries = near(&mut rng, &centres, 20);
    let mut found = 0;
    for query in &queries {
        found += check(&search(&mut client, "docs", query, "", 10).await, &stored, query);
    }
    let recall = found as f64 / (queries.len() * 10) as f64;
    assert!(recall >= 0.95, "recall@10 {recall} (seed {})", rng.seed());
    assert_eq!(Scrape::of(&admin).await.value(SEARCHES, &[("scan", "index")]), queries.len() as f64);
}
