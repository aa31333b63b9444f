//! ListRecords: newest id first, ids compared as bytes (so "B" < "a", and
//! "|", "\x1f" and non-ASCII sort by their UTF-8 bytes); across turns by id,
//! then turn, then scope, all descending; the scope filter (the empty scope
//! is a scope of its own with has_scope), the id and before_id filters;
//! pages of page_size that together hold every record exactly once, even
//! while newer ids are inserted; each record's children (by id) and refs,
//! with refs to absent records simply missing.

use std::collections::HashSet;

use stepwell::api::pb::{ListRecordsRequest, Record, RecordEntry};
use tokio::task::JoinSet;

use stepwell_test_support::sidecar::Sidecar;

use super::{
    KIND, ids, ids_of, in_scope, list, list_all, list_turn, page, payloads, put_ok, record, records, with_payload,
};

/// Ids chosen so that bytewise order differs from every other plausible
/// order (case-insensitive, locale, length-first, char-by-char UTF-16).
const MIXED_IDS: [&str; 10] = ["B", "a", "A", "ab", "a|b", "a\u{1f}b", "é", "z", "\u{10000}", "\u{ff5e}"];

fn bytewise_descending(ids: &[&str]) -> Vec<String> {
    let mut sorted: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    sorted.sort_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
    sorted
}

#[tokio::test]
async fn ids_list_newest_first_comparing_bytes() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, MIXED_IDS.iter().map(|id| record("t", KIND, id)).collect()).await;
    let expected = bytewise_descending(&MIXED_IDS);
    // Spelled out once, so that the helper's order is checked too.
    assert_eq!(expected, ["\u{10000}", "\u{ff5e}", "é", "z", "a|b", "ab", "a\u{1f}b", "a", "B", "A"]);
    assert_eq!(ids(&mut client, list_turn("t", KIND)).await, expected, "within a turn");
    assert_eq!(ids(&mut client, list(KIND)).await, expected, "across turns");
    for size in [1, 3] {
        let paged = ListRecordsRequest { page_size: size, ..list_turn("t", KIND) };
        assert_eq!(ids(&mut client, paged).await, expected, "in pages of {size}");
    }
    // before_id compares bytes too.
    let below_a = ListRecordsRequest { before_id: "a".to_owned(), ..list_turn("t", KIND) };
    assert_eq!(ids(&mut client, below_a).await, ["B", "A"]);
    let below_z = ListRecordsRequest { before_id: "z".to_owned(), ..list_turn("t", KIND) };
    assert_eq!(ids(&mut client, below_z).await, ["a|b", "ab", "a\u{1f}b", "a", "B", "A"]);
}

/// (id, turn, scope) of each listed record.
fn addresses(records: &[Record]) -> Vec<(String, String, String)> {
    records.iter().map(|r| (r.id.clone(), r.turn_id.clone(), r.scope.clone())).collect()
}

#[tokio::test]
async fn across_turns_records_order_by_id_then_turn_then_scope_descending() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let mut written = Vec::new();
    for turn in ["T", "t", "t-2"] {
        for scope in ["", "S", "s", "s|1"] {
            for id in ["1", "2", "B", "a"] {
                written.push(in_scope(record(turn, KIND, id), scope));
            }
        }
    }
    // In two calls, and in an order that is none of the orders listed.
    let (one, two): (Vec<_>, Vec<_>) = written.iter().cloned().enumerate().partition(|(i, _)| i % 3 == 1);
    put_ok(&mut client, one.into_iter().map(|(_, r)| r).collect()).await;
    put_ok(&mut client, two.into_iter().map(|(_, r)| r).collect()).await;
    put_ok(&mut client, vec![record("t", "other-kind", "z")]).await;

    let mut expected = addresses(&written);
    expected.sort_by(|a, b| b.cmp(a));
    let listed = records(&mut client, list(KIND)).await;
    assert_eq!(addresses(&listed), expected, "id desc, then turn_id desc, then scope desc");
    for size in [1, 5, 48] {
        let paged = records(&mut client, ListRecordsRequest { page_size: size, ..list(KIND) }).await;
        assert_eq!(addresses(&paged), expected, "in pages of {size}");
    }

    let in_turn = records(&mut client, list_turn("t", KIND)).await;
    let expected_in_turn: Vec<_> = expected.iter().filter(|(_, turn, _)| turn == "t").cloned().collect();
    assert_eq!(addresses(&in_turn), expected_in_turn, "within a turn: by id, then scope");
    let paged = records(&mut client, ListRecordsRequest { page_size: 3, ..list_turn("t", KIND) }).await;
    assert_eq!(addresses(&paged), expected_in_turn);
}

#[tokio::test]
async fn scope_id_and_before_id_filter() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let mut written = Vec::new();
    for turn in ["t1", "t2"] {
        for scope in ["", "inner", "inner|deep"] {
            for id in ["01", "02", "03"] {
                written.push(with_payload(
                    in_scope(record(turn, KIND, id), scope),
                    format!("{turn}/{scope}/{id}").as_bytes(),
                ));
            }
        }
    }
    put_ok(&mut client, written).await;

    let scoped = |turn: &str, scope: &str, has_scope: bool| ListRecordsRequest {
        scope: scope.to_owned(),
        has_scope,
        ..list_turn(turn, KIND)
    };
    assert_eq!(payloads(&mut client, scoped("t1", "", true)).await, ["t1//03", "t1//02", "t1//01"], "the empty scope");
    assert_eq!(payloads(&mut client, scoped("t1", "", false)).await.len(), 9, "no scope filter: every scope");
    assert_eq!(
        payloads(&mut client, scoped("t1", "inner", false)).await,
        ["t1/inner/03", "t1/inner/02", "t1/inner/01"],
        "a non-empty scope filters without has_scope"
    );
    assert_eq!(payloads(&mut client, scoped("t1", "inner", true)).await.len(), 3);
    assert!(payloads(&mut client, scoped("t1", "missing", true)).await.is_empty());
    let across = ListRecordsRequest { scope: "inner|deep".to_owned(), has_scope: true, ..list(KIND) };
    assert_eq!(
        payloads(&mut client, across).await,
        [
            "t2/inner|deep/03",
            "t1/inner|deep/03",
            "t2/inner|deep/02",
            "t1/inner|deep/02",
            "t2/inner|deep/01",
            "t1/inner|deep/01"
        ],
        "a scope across turns"
    );

    let by_id = ListRecordsRequest { id: "02".to_owned(), ..scoped("t2", "inner", true) };
    assert_eq!(payloads(&mut client, by_id).await, ["t2/inner/02"]);
    let id_across = ListRecordsRequest { id: "02".to_owned(), ..list_turn("t1", KIND) };
    assert_eq!(payloads(&mut client, id_across).await, ["t1/inner|deep/02", "t1/inner/02", "t1//02"]);
    let missing = ListRecordsRequest { id: "04".to_owned(), ..list_turn("t1", KIND) };
    assert!(payloads(&mut client, missing).await.is_empty());

    let before = ListRecordsRequest { before_id: "03".to_owned(), ..scoped("t1", "", true) };
    assert_eq!(payloads(&mut client, before).await, ["t1//02", "t1//01"], "strictly below");
    let latest = ListRecordsRequest { before_id: "03".to_owned(), page_size: 1, ..scoped("t1", "", true) };
    let first = page(&mut client, latest).await;
    assert_eq!(first.entries.len(), 1);
    assert!(!first.next_page_token.is_empty(), "one page of one, more follow");
    let none_below = ListRecordsRequest { before_id: "01".to_owned(), ..list(KIND) };
    assert!(payloads(&mut client, none_below).await.is_empty());
    assert!(payloads(&mut client, list("other")).await.is_empty(), "another kind lists nothing");
    let other_turn = list_turn("t3", KIND);
    assert!(page(&mut client, other_turn).await.next_page_token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_hold_every_record_once_while_newer_ids_are_inserted() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let id = |n: usize| format!("id-{n:05}");
    let initial: Vec<String> = (0..300).map(id).collect();
    for chunk in initial.chunks(100) {
        let records = chunk.iter().enumerate().map(|(i, id)| record(&format!("turn-{}", i % 3), KIND, id)).collect();
        put_ok(&mut client, records).await;
    }

    // Newer ids go in while the pages are read.
    let mut inserters = JoinSet::new();
    for writer in 0..2 {
        let mut client = server.records();
        inserters.spawn(async move {
            for n in 0..40 {
                let newer = format!("id-{:05}", 1000 + writer * 100 + n);
                put_ok(&mut client, vec![record(&format!("turn-{writer}"), KIND, &newer)]).await;
            }
        });
    }
    let mut seen = Vec::new();
    let mut request = ListRecordsRequest { page_size: 7, ..list(KIND) };
    loop {
        let answer = page(&mut client, request.clone()).await;
        assert!(!answer.entries.is_empty(), "a page after a token holds entries");
        assert!(answer.entries.len() <= 7, "at most page_size: {}", answer.entries.len());
        seen.extend(answer.entries.into_iter().map(|e| e.record.expect("a record").id));
        if answer.next_page_token.is_empty() {
            break;
        }
        request.page_token = answer.next_page_token;
    }
    inserters.join_all().await;

    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "no record twice");
    let mut descending = seen.clone();
    descending.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, descending, "newest id first across pages");
    let old: Vec<&String> = seen.iter().filter(|s| s.as_str() < "id-01000").collect();
    let mut expected: Vec<&String> = initial.iter().collect();
    expected.reverse();
    assert_eq!(old, expected, "every record there before the listing began, once");
}

/// The (id, payload) of each record in `records`.
fn id_payloads(records: &[Record]) -> Vec<(String, String)> {
    records.iter().map(|r| (r.id.clone(), String::from_utf8_lossy(&r.payload).into_owned())).collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

fn entry<'e>(entries: &'e [RecordEntry], id: &str) -> &'e RecordEntry {
    entries.iter().find(|e| e.record.as_ref().is_some_and(|r| r.id == id)).unwrap_or_else(|| panic!("{id} is listed"))
}

#[tokio::test]
async fn entries_carry_their_children_by_id_and_the_refs_that_exist() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let child = |scope: &str, id: &str, parent: &str| Record {
        parent_id: parent.to_owned(),
        ..with_payload(in_scope(record("t", "write", id), scope), format!("{scope}:{id}").as_bytes())
    };
    let with_refs = |scope: &str, id: &str, refs: &[&str]| Record {
        refs: refs.iter().map(|r| (*r).to_owned()).collect(),
        ..in_scope(record("t", KIND, id), scope)
    };
    put_ok(
        &mut client,
        vec![
            with_refs("", "c1", &["b2", "b1"]),
            with_refs("", "c2", &["b1", "missing", "b3"]),
            with_refs("", "c3", &[]),
            with_refs("inner", "c1", &["b1"]),
            child("", "w-b", "c1"),
            child("", "w-a", "c1"),
            child("", "w-C", "c1"),
            child("", "w-x", "c2"),
            child("inner", "w-i", "c1"),
            // The same kind and ids in another scope and turn are not related.
            with_payload(in_scope(record("t", "blob", "b1"), ""), b"blob 1"),
            with_payload(in_scope(record("t", "blob", "b2"), ""), b"blob 2"),
            with_payload(in_scope(record("t", "blob", "b3"), ""), b"blob 3"),
            with_payload(in_scope(record("t", "blob", "b1"), "inner"), b"inner blob 1"),
            with_payload(in_scope(record("t", "blob", "b2"), "inner"), b"inner blob 2"),
            with_payload(record("other", "blob", "b1"), b"other turn's blob"),
            Record { parent_id: "c1".to_owned(), ..record("other", "write", "w-other") },
            // Another kind with the parent id is not a child of the kind asked.
            Record { parent_id: "c1".to_owned(), ..record("t", "note", "n1") },
        ],
    )
    .await;

    let request =
        ListRecordsRequest { children_kind: "write".to_owned(), refs_kind: "blob".to_owned(), ..list_turn("t", KIND) };
    let entries = list_all(&mut client, request.clone()).await;
    let order: Vec<(String, String)> =
        entries.iter().map(|e| e.record.as_ref().map(|r| (r.id.clone(), r.scope.clone())).expect("a record")).collect();
    assert_eq!(order, pairs(&[("c3", ""), ("c2", ""), ("c1", "inner"), ("c1", "")]));

    let c1 =
        entries.iter().find(|e| e.record.as_ref().is_some_and(|r| r.id == "c1" && r.scope.is_empty())).expect("c1");
    assert_eq!(
        id_payloads(&c1.children),
        pairs(&[("w-C", ":w-C"), ("w-a", ":w-a"), ("w-b", ":w-b")]),
        "by id, bytewise"
    );
    assert_eq!(id_payloads(&c1.refs), pairs(&[("b1", "blob 1"), ("b2", "blob 2")]));
    let c2 = entry(&entries, "c2");
    assert_eq!(id_payloads(&c2.children), pairs(&[("w-x", ":w-x")]));
    assert_eq!(id_payloads(&c2.refs), pairs(&[("b1", "blob 1"), ("b3", "blob 3")]), "the missing ref is simply absent");
    let c3 = entry(&entries, "c3");
    assert!(c3.children.is_empty() && c3.refs.is_empty(), "{c3:?}");
    let inner = entries.iter().find(|e| e.record.as_ref().is_some_and(|r| r.scope == "inner")).expect("inner c1");
    assert_eq!(id_payloads(&inner.children), pairs(&[("w-i", "inner:w-i")]), "children of its own scope only");
    assert_eq!(id_payloads(&inner.refs), pairs(&[("b1", "inner blob 1")]), "refs of its own scope only");
    for related in entries.iter().flat_map(|e| e.children.iter().chain(&e.refs)) {
        assert!(related.recorded_at.is_some() && related.turn_id == "t", "{related:?}");
    }

    // In pages of one, each entry still comes with its own.
    let paged = list_all(&mut client, ListRecordsRequest { page_size: 1, ..request.clone() }).await;
    assert_eq!(paged, entries);
    // Without children_kind and refs_kind, nothing is attached.
    let bare = list_all(&mut client, list_turn("t", KIND)).await;
    assert!(bare.iter().all(|e| e.children.is_empty() && e.refs.is_empty()), "{bare:?}");
    assert_eq!(ids_of(&records(&mut client, list_turn("t", KIND)).await), ["c3", "c2", "c1", "c1"]);
}

#[tokio::test]
async fn a_ref_named_twice_is_attached_once() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let checkpoint = Record { refs: vec!["b1".to_owned(), "b1".to_owned()], ..record("t", KIND, "c1") };
    put_ok(&mut client, vec![checkpoint, record("t", "blob", "b1")]).await;
    let request = ListRecordsRequest { refs_kind: "blob".to_owned(), ..list_turn("t", KIND) };
    let entries = list_all(&mut client, request).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(ids_of(&entries[0].refs), ["b1"], "the record b1, once: {:?}", entries[0].refs);
}
