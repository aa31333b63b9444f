//! Acknowledged record writes survive a SIGKILL of the real binary:
//! concurrent writers put records (upserting the same addresses again, and
//! inserting if absent), one DeleteRecords and one CopyTurn are
//! acknowledged, the sidecar is killed, and after a restart on the same
//! store the last acknowledged state of every address is there byte for
//! byte, on whichever backend the suite runs.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;

use stepwell::api::pb::{CopyTurnRequest, DeleteRecordsRequest, PutMode};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::sidecar::SidecarProcess;

use super::{KIND, list_turn, put_ok, record, records, with_metadata, with_mode, with_payload};
use crate::STEPWELL;

const WRITERS: usize = 4;
const ROUNDS: usize = 20;

/// What writer `w` puts at `id` in round `round`: unique, not UTF-8, of varied length.
fn payload(w: usize, id: usize, round: usize) -> Vec<u8> {
    let mut bytes = format!("w{w}/{id}/r{round}:").into_bytes();
    bytes.extend(std::iter::repeat_n(0xfe - round as u8, (id * 7 + round) % 50));
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_puts_deletes_and_copies_survive_sigkill() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut client = server.records();
            tokio::spawn(async move {
                // The last payload acknowledged at each id of the writer's turn.
                let mut acknowledged = BTreeMap::new();
                for round in 0..ROUNDS {
                    let ids = [round % 5, 5 + round];
                    let puts = ids
                        .iter()
                        .map(|&id| {
                            let r = with_payload(
                                record(&format!("turn-{w}"), KIND, &format!("{id:03}")),
                                &payload(w, id, round),
                            );
                            with_metadata(r, &format!(r#"{{"round": {round}}}"#))
                        })
                        .collect();
                    put_ok(&mut client, puts).await;
                    // An insert-if-absent of a stored address changes nothing.
                    let kept = with_mode(
                        record(&format!("turn-{w}"), KIND, &format!("{:03}", ids[0])),
                        PutMode::InsertIfAbsent,
                    );
                    put_ok(&mut client, vec![kept]).await;
                    for id in ids {
                        acknowledged.insert(format!("{id:03}"), payload(w, id, round));
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.push(writer.await.expect("a writer does not panic"));
    }
    let mut client = server.records();
    let delete = DeleteRecordsRequest { turn_ids: vec!["turn-3".to_owned()], ..Default::default() };
    assert_eq!(client.delete_records(delete).await.expect("DeleteRecords").into_inner().deleted, 25);
    let copy = CopyTurnRequest {
        source_turn_id: "turn-0".to_owned(),
        target_turn_id: "copy".to_owned(),
        ..Default::default()
    };
    assert_eq!(client.copy_turn(copy).await.expect("CopyTurn").into_inner().copied, 25);

    let status = server.kill().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the sidecar died by SIGKILL: {status:?}");

    let restarted = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = restarted.records();
    for (w, expected) in acknowledged.iter().enumerate() {
        let stored: BTreeMap<String, Vec<u8>> = records(&mut client, list_turn(&format!("turn-{w}"), KIND))
            .await
            .into_iter()
            .map(|r| (r.id, r.payload))
            .collect();
        if w == 3 {
            assert!(stored.is_empty(), "the acknowledged delete of turn-3 held");
        } else {
            assert_eq!(expected.len(), 25);
            assert!(&stored == expected, "turn-{w}: every acknowledged put, byte for byte");
        }
    }
    let copied: BTreeMap<String, Vec<u8>> =
        records(&mut client, list_turn("copy", KIND)).await.into_iter().map(|r| (r.id, r.payload)).collect();
    assert!(copied == acknowledged[0], "the acknowledged copy held");
}
