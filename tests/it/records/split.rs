//! ListRecords with `split_entries`: an entry that does not fit a page of
//! its own is cut at the response byte budget and continued in the pages
//! that follow, so that every page fits what a client accepts by default
//! (4 MiB), however many children and refs an entry has. Checked: the pieces
//! put together are the entries a listing without it returns; every page
//! keeps to the budget unless it holds one record larger than it; only the
//! first entry of a page is continued and only its last is cut; an entry
//! that fits a page of its own is never cut; a cut entry's page token is
//! refused by a listing without `split_entries`; and a page costs the
//! sidecar memory for that page, not for the entry behind it.

use prost::Message;
use stepwell::api::pb::{ListRecordsRequest, Record, RecordEntry};
use tonic::Code;

use stepwell_test_support::RecordClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_invalid;
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use super::{KIND, list_all, list_turn, page, put_ok, record, with_payload};
use crate::STEPWELL;

const BUDGET: usize = 16 * 1024;

/// What a gRPC client accepts by default, and the sidecar's default
/// --message-bytes-max.
const DEFAULT_MESSAGE_BYTES: usize = 4 << 20;

const CHILD: &str = "write";
const REF: &str = "blob";

/// A ListRecords of `turn`'s checkpoints with their writes and blobs, split.
fn split(turn: &str) -> ListRecordsRequest {
    ListRecordsRequest {
        children_kind: CHILD.to_owned(),
        refs_kind: REF.to_owned(),
        split_entries: true,
        ..list_turn(turn, KIND)
    }
}

/// A checkpoint `id` of `turn` that uses the blobs `refs`, with a payload of `bytes`.
fn checkpoint(turn: &str, id: &str, bytes: usize, refs: &[&str]) -> Record {
    Record {
        refs: refs.iter().map(|r| (*r).to_owned()).collect(),
        ..with_payload(record(turn, KIND, id), &vec![b'c'; bytes])
    }
}

/// A write `id` of the checkpoint `parent`, with a payload of `bytes`.
fn write(turn: &str, parent: &str, id: &str, bytes: usize) -> Record {
    Record { parent_id: parent.to_owned(), ..with_payload(record(turn, CHILD, id), &vec![b'w'; bytes]) }
}

/// A blob `id` with a payload of `bytes`.
fn blob(turn: &str, id: &str, bytes: usize) -> Record {
    with_payload(record(turn, REF, id), &vec![b'b'; bytes])
}

/// Every page of `request`, each checked: never empty, within `budget` as
/// encoded unless it holds one record larger than it, a continued entry
/// only first (and only after a cut), a cut entry only last (and then a
/// page token).
async fn pages(client: &mut RecordClient, mut request: ListRecordsRequest, budget: usize) -> Vec<Vec<RecordEntry>> {
    let mut pages: Vec<Vec<RecordEntry>> = Vec::new();
    loop {
        let answer = page(client, request.clone()).await;
        let n = pages.len();
        assert!(!answer.entries.is_empty(), "page {n} is empty");
        let records: usize =
            answer.entries.iter().map(|e| usize::from(e.record.is_some()) + e.children.len() + e.refs.len()).sum();
        let encoded = answer.encoded_len();
        assert!(encoded <= budget || records == 1, "page {n} of {records} records is {encoded} bytes, over {budget}");
        let after_cut = pages.last().and_then(|p| p.last()).is_some_and(|e| e.cut);
        for (i, entry) in answer.entries.iter().enumerate() {
            assert_eq!(entry.continued, i == 0 && after_cut, "page {n} entry {i}: continued only after a cut");
            assert_eq!(entry.record.is_none(), entry.continued, "page {n} entry {i}: a record unless continued");
            assert!(!entry.cut || i + 1 == answer.entries.len(), "page {n} entry {i}: cut but not last");
        }
        let cut = answer.entries.last().is_some_and(|e| e.cut);
        assert!(!cut || !answer.next_page_token.is_empty(), "page {n} ends with a cut entry and no token");
        pages.push(answer.entries);
        if answer.next_page_token.is_empty() {
            return pages;
        }
        request.page_token = answer.next_page_token;
    }
}

/// The entries of `pages`, each continued piece joined to the entry it continues.
fn joined(pages: Vec<Vec<RecordEntry>>) -> Vec<RecordEntry> {
    let mut entries: Vec<RecordEntry> = Vec::new();
    for entry in pages.into_iter().flatten() {
        if entry.continued {
            let whole = entries.last_mut().expect("a continued entry follows the entry it continues");
            whole.children.extend(entry.children);
            whole.refs.extend(entry.refs);
            whole.cut = entry.cut;
        } else {
            entries.push(entry);
        }
    }
    entries
}

/// How each page is made: per entry, its id (or `+` for a continued piece),
/// its related records' ids, and `/` when cut.
fn shape(pages: &[Vec<RecordEntry>]) -> Vec<Vec<String>> {
    pages
        .iter()
        .map(|p| {
            p.iter()
                .map(|e| {
                    let id = e.record.as_ref().map_or("+", |r| r.id.as_str());
                    let related: Vec<&str> = e.children.iter().chain(&e.refs).map(|r| r.id.as_str()).collect();
                    format!("{id}[{}]{}", related.join(","), if e.cut { "/" } else { "" })
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn an_entry_larger_than_the_budget_is_cut_and_continued_and_joins_into_the_whole_entry() {
    let server = Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await;
    let mut client = server.records();
    put_ok(
        &mut client,
        vec![
            checkpoint("t", "p3", 100, &[]),
            checkpoint("t", "p2", 100, &["b1", "b2"]),
            checkpoint("t", "p1", 100, &["b2"]),
            write("t", "p2", "w1", 6_000),
            write("t", "p2", "w2", 6_000),
            write("t", "p2", "w3", 100),
            blob("t", "b1", 6_000),
            blob("t", "b2", 100),
        ],
    )
    .await;

    let listed = pages(&mut client, split("t"), BUDGET).await;
    // The budget leaves 11 kB for entries: p2 (18 kB) does not fit beside p3,
    // starts the next page and is cut there, after as much as fits.
    assert_eq!(shape(&listed), [vec!["p3[]"], vec!["p2[w1]/"], vec!["+[w2,w3]/"], vec!["+[b1,b2]", "p1[b2]"],]);
    let whole = ListRecordsRequest { split_entries: false, ..split("t") };
    assert_eq!(joined(listed), list_all(&mut client, whole).await, "the pieces make the whole entries");

    // page_size counts a continued piece: one entry a page.
    let one = pages(&mut client, ListRecordsRequest { page_size: 1, ..split("t") }, BUDGET).await;
    assert_eq!(shape(&one), [vec!["p3[]"], vec!["p2[w1]/"], vec!["+[w2,w3]/"], vec!["+[b1,b2]"], vec!["p1[b2]"]]);
}

#[tokio::test]
async fn only_an_entry_that_does_not_fit_a_page_of_its_own_is_cut() {
    let server = Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await;
    let mut client = server.records();
    put_ok(
        &mut client,
        vec![
            checkpoint("t", "p4", 6_000, &[]),
            checkpoint("t", "p3", 100, &["b"]),
            checkpoint("t", "p2", 20_000, &[]),
            checkpoint("t", "p1", 100, &[]),
            checkpoint("t", "p0", 100, &["b", "c"]),
            blob("t", "b", 6_000),
            blob("t", "c", 6_000),
        ],
    )
    .await;
    let listed = pages(&mut client, split("t"), BUDGET).await;
    // p3 with its blob (12 kB) would fit only a part of p4's page, so it
    // starts the next; p2 is one record larger than the budget, which comes
    // alone and whole; p0 with its blobs (18 kB) fits no page, so it begins
    // one and is cut there.
    assert_eq!(shape(&listed), [vec!["p4[]"], vec!["p3[b]"], vec!["p2[]"], vec!["p1[]"], vec!["p0[b]/"], vec!["+[c]"]]);
}

#[tokio::test]
async fn a_cut_entrys_page_token_is_refused_without_split_entries() {
    let server = Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await;
    let mut client = server.records();
    put_ok(
        &mut client,
        vec![checkpoint("t", "p", 100, &[]), write("t", "p", "w1", 8_000), write("t", "p", "w2", 8_000)],
    )
    .await;
    let first = page(&mut client, split("t")).await;
    assert!(first.entries[0].cut, "the entry is cut: {:?}", shape(std::slice::from_ref(&first.entries)));
    let without = ListRecordsRequest { split_entries: false, page_token: first.next_page_token, ..split("t") };
    let refused = client.list_records(without).await.expect_err("a cut entry's token needs split_entries");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert_invalid(&refused, "page_token", "INVALID_PAGE_TOKEN");
}

#[tokio::test]
async fn a_checkpoint_of_eighteen_megabytes_reads_through_a_default_client_in_pages_of_at_most_four_mib() {
    const MB3: usize = 3 << 20;
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    // Five channels of 3 MB and 3 MB of pending writes, each record put on its own.
    let blobs = ["b1", "b2", "b3", "b4", "b5"];
    for id in blobs {
        put_ok(&mut client, vec![blob("t", id, MB3)]).await;
    }
    put_ok(
        &mut client,
        vec![write("t", "p2", "w1", MB3 / 3), write("t", "p2", "w2", MB3 / 3), write("t", "p2", "w3", MB3 / 3)],
    )
    .await;
    put_ok(&mut client, vec![checkpoint("t", "p2", 1_000, &blobs), checkpoint("t", "p1", 1_000, &blobs[..1])]).await;

    // Without split_entries the entry comes whole, larger than a message.
    let whole = client.list_records(ListRecordsRequest { split_entries: false, ..split("t") }).await;
    assert!(whole.is_err(), "an 18 MB entry does not fit one message");

    for page_size in [0, 1] {
        let listed = pages(&mut client, ListRecordsRequest { page_size, ..split("t") }, DEFAULT_MESSAGE_BYTES).await;
        assert!(listed.len() >= 5, "18 MB in pages of at most 4 MiB: {:?}", shape(&listed));
        let entries = joined(listed);
        let ids: Vec<&str> = entries.iter().map(|e| e.record.as_ref().expect("record").id.as_str()).collect();
        assert_eq!(ids, ["p2", "p1"]);
        let p2 = &entries[0];
        let children: Vec<(&str, usize)> = p2.children.iter().map(|r| (r.id.as_str(), r.payload.len())).collect();
        assert_eq!(children, [("w1", MB3 / 3), ("w2", MB3 / 3), ("w3", MB3 / 3)]);
        let refs: Vec<(&str, usize)> = p2.refs.iter().map(|r| (r.id.as_str(), r.payload.len())).collect();
        assert_eq!(refs, blobs.iter().map(|b| (*b, MB3)).collect::<Vec<_>>());
        assert!(p2.refs.iter().chain(&p2.children).all(|r| r.payload.iter().all(|&b| b == r.payload[0])));
        assert_eq!(entries[1].refs.len(), 1);
    }
}

/// The peak resident memory, in kB, of the sidecar process serving `socket`.
fn peak_memory_kb(socket: &std::path::Path) -> u64 {
    let socket = socket.to_string_lossy();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmdline).contains(&*socket) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let peak = status.lines().find_map(|line| line.strip_prefix("VmHWM:"));
        return peak.and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmHWM in kB");
    }
    panic!("no process serves {socket}");
}

#[tokio::test]
async fn a_cut_page_costs_the_sidecar_memory_for_the_page_not_for_the_entry_behind_it() {
    const BLOBS: usize = 40;
    const PAYLOAD: usize = 3 << 20;
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = server.records();
    let ids: Vec<String> = (0..BLOBS).map(|n| format!("b{n:03}")).collect();
    for id in &ids {
        put_ok(&mut client, vec![blob("t", id, PAYLOAD)]).await;
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    put_ok(&mut client, vec![checkpoint("t", "p", 100, &refs)]).await;
    let before = peak_memory_kb(server.socket_path());
    let first = page(&mut client, split("t")).await;
    assert!(first.entries[0].cut && first.entries[0].refs.len() == 1, "one 3 MiB blob a page");
    let second = page(&mut client, ListRecordsRequest { page_token: first.next_page_token, ..split("t") }).await;
    assert!(second.entries[0].continued && second.entries[0].refs.len() == 1);
    let grown_mb = peak_memory_kb(server.socket_path()).saturating_sub(before) / 1024;
    // 120 MB of blobs lie behind the pages; a page of 3 MiB may cost a few copies of itself.
    assert!(grown_mb < 64, "two pages of 3 MiB raised the sidecar's peak memory by {grown_mb} MB");
}
