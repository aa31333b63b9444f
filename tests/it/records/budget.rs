//! The response byte budget (`--response-bytes-max`) of ListRecords: a page
//! stops early when the next entry would not fit, but always holds one
//! entry; an entry larger than the budget, with its children and refs,
//! comes alone; the page that holds the last entry says so, whatever its
//! size; and a page costs the sidecar memory for that page, not for the
//! records behind it (measured on the real binary's peak RSS).

use prost::Message;
use stepwell::api::pb::{ListRecordsRequest, Record, RecordEntry};

use stepwell_test_support::RecordClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use super::{KIND, largest_accepted, list_turn, page, put_ok, record, with_payload};
use crate::STEPWELL;

const BUDGET: usize = 16 * 1024;

async fn start() -> Sidecar {
    Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await
}

/// A record of `turn` at `id` with a payload of `bytes` bytes.
fn sized(turn: &str, id: &str, bytes: usize) -> Record {
    with_payload(record(turn, KIND, id), &vec![b'x'; bytes])
}

/// Every page `request` lists, checked against the budget: none empty, and
/// each of more than one entry within the budget as encoded.
async fn pages(client: &mut RecordClient, mut request: ListRecordsRequest) -> Vec<Vec<RecordEntry>> {
    let mut pages = Vec::new();
    loop {
        let answer = page(client, request.clone()).await;
        assert!(!answer.entries.is_empty(), "page {} is empty; the one before it held the last entry", pages.len());
        let encoded = answer.encoded_len();
        assert!(
            encoded <= BUDGET || answer.entries.len() == 1,
            "a page of {} entries is {encoded} bytes, over the {BUDGET}-byte budget",
            answer.entries.len()
        );
        pages.push(answer.entries);
        if answer.next_page_token.is_empty() {
            return pages;
        }
        request.page_token = answer.next_page_token;
    }
}

fn shape(pages: &[Vec<RecordEntry>]) -> Vec<Vec<String>> {
    pages.iter().map(|p| p.iter().map(|e| e.record.as_ref().expect("a record").id.clone()).collect()).collect()
}

#[tokio::test]
async fn a_page_stops_at_the_budget_and_a_larger_entry_comes_alone() {
    let server = start().await;
    let mut client = server.records();
    let sizes = [100, 100, 100, 40_000, 100, 9_000, 9_000, 100];
    let written: Vec<Record> =
        sizes.iter().enumerate().map(|(n, &bytes)| sized("t", &format!("{n:02}"), bytes)).collect();
    put_ok(&mut client, written.clone()).await;

    let listed = pages(&mut client, list_turn("t", KIND)).await;
    assert_eq!(
        shape(&listed),
        [vec!["07", "06"], vec!["05", "04"], vec!["03"], vec!["02", "01", "00"]],
        "two 9 kB entries do not share a 16 KiB page; the 40 kB one comes alone"
    );
    let payloads: Vec<usize> =
        listed.iter().flatten().map(|e| e.record.as_ref().expect("record").payload.len()).collect();
    assert_eq!(payloads, sizes.iter().rev().copied().collect::<Vec<_>>(), "whole payloads, newest first");

    // page_size still bounds a page that the budget would allow.
    let small = pages(&mut client, ListRecordsRequest { page_size: 1, ..list_turn("t", KIND) }).await;
    assert_eq!(small.len(), 8);
}

#[tokio::test]
async fn the_page_holding_the_last_entry_ends_the_listing_even_when_it_is_over_the_budget() {
    let server = start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![sized("alone", "0", 40_000)]).await;
    let only = page(&mut client, list_turn("alone", KIND)).await;
    assert_eq!(only.entries.len(), 1);
    assert_eq!(only.next_page_token, "", "one record, one page, no token");

    put_ok(&mut client, vec![sized("last", "0", 40_000), sized("last", "1", 100)]).await;
    let listed = pages(&mut client, list_turn("last", KIND)).await;
    assert_eq!(shape(&listed), [vec!["1"], vec!["0"]]);
}

#[tokio::test]
async fn an_entry_counts_its_children_and_refs() {
    let server = start().await;
    let mut client = server.records();
    let parent = Record { refs: vec!["b".to_owned()], ..sized("t", "p2", 100) };
    let child = |id: &str, parent: &str| Record {
        parent_id: parent.to_owned(),
        ..with_payload(record("t", "write", id), &[b'w'; 6_000])
    };
    put_ok(
        &mut client,
        vec![
            sized("t", "p3", 100),
            parent,
            sized("t", "p1", 100),
            child("w1", "p2"),
            child("w2", "p2"),
            with_payload(record("t", "blob", "b"), &[b'b'; 6_000]),
        ],
    )
    .await;
    let request =
        ListRecordsRequest { children_kind: "write".to_owned(), refs_kind: "blob".to_owned(), ..list_turn("t", KIND) };
    let listed = pages(&mut client, request).await;
    assert_eq!(shape(&listed), [vec!["p3"], vec!["p2"], vec!["p1"]], "p2 with 18 kB of children and refs is alone");
    let p2 = &listed[1][0];
    assert_eq!((p2.children.len(), p2.refs.len()), (2, 1), "an entry's related records are never cut");
}

#[tokio::test]
async fn a_page_with_its_token_keeps_to_the_budget_even_with_the_longest_ids() {
    let server = start().await;
    let mut client = server.records();
    // Ids, scope and turn at their limits make a page token of about 3 kB.
    let (turn, scope) = ("t".repeat(256), "s".repeat(1024));
    let long = |n: u8, payload: usize| Record {
        scope: scope.clone(),
        ..with_payload(record(&turn, KIND, &format!("{n}{}", "i".repeat(1023))), &vec![b'p'; payload])
    };
    put_ok(&mut client, (0..6).map(|n| long(n, 5_800)).collect()).await;
    let listed = pages(&mut client, list_turn(&turn, KIND)).await;
    assert_eq!(listed.iter().map(Vec::len).sum::<usize>(), 6, "every record, whatever the page sizes");
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
async fn a_page_costs_the_sidecar_memory_for_the_page_not_for_the_records_behind_it() {
    const RECORDS: usize = 60;
    const PAYLOAD: usize = 3 << 20;
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = server.records().max_decoding_message_size(16 << 20);
    for n in 0..RECORDS {
        put_ok(&mut client, vec![sized("t", &format!("{n:03}"), PAYLOAD)]).await;
    }
    let before = peak_memory_kb(server.socket_path());
    // The default budget (4 MiB less 64 KiB) holds one 3 MiB record a page.
    let first = page(&mut client, list_turn("t", KIND)).await;
    assert_eq!(first.entries.len(), 1);
    let grown_mb = peak_memory_kb(server.socket_path()).saturating_sub(before) / 1024;
    // 180 MB of records lie behind the page; a page of 3 MiB may cost a few copies of itself.
    assert!(grown_mb < 64, "one page of 3 MiB raised the sidecar's peak memory by {grown_mb} MB");
}

#[tokio::test]
async fn the_largest_record_a_put_accepts_lists_through_a_default_client_with_the_longest_ids_and_a_token() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    // A turn, scope and ids at their limits make the longest page tokens.
    let (turn, scope) = ("t".repeat(256), "s".repeat(1024));
    let at = |kind: &str, id: String, payload: usize| Record {
        scope: scope.clone(),
        ..with_payload(record(&turn, kind, &id), &vec![b'p'; payload])
    };
    let largest = largest_accepted(&mut client, |n| at(KIND, format!("z{}", "i".repeat(1023)), n)).await;
    put_ok(&mut client, vec![at(KIND, "a".to_owned(), 10)]).await;
    // Read with the client's default limit (4 MiB); a page token follows.
    let first = client.list_records(list_turn(&turn, KIND)).await.expect("the largest record's page is read");
    let first = first.into_inner();
    assert_eq!((first.entries.len(), first.entries[0].record.as_ref().map(|r| r.payload.len())), (1, Some(largest)));
    assert!(!first.next_page_token.is_empty());

    // As a child of a split entry, it ends a page whose token also names it.
    let child = |n: usize| Record { parent_id: "p".to_owned(), ..at("write", format!("a{}", "w".repeat(1023)), n) };
    let largest_child = largest_accepted(&mut client, child).await;
    let small_child = Record { parent_id: "p".to_owned(), ..at("write", "b".to_owned(), 10) };
    put_ok(&mut client, vec![at("parent", "p".to_owned(), 10), small_child]).await;
    let mut request =
        ListRecordsRequest { children_kind: "write".to_owned(), split_entries: true, ..list_turn(&turn, "parent") };
    let mut children = Vec::new();
    loop {
        let answer = client.list_records(request.clone()).await.expect("each page is read").into_inner();
        children.extend(answer.entries.iter().flat_map(|e| e.children.iter().map(|c| c.payload.len())));
        if answer.next_page_token.is_empty() {
            break;
        }
        request.page_token = answer.next_page_token;
    }
    assert_eq!(children, [largest_child, 10]);
}
