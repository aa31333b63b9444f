//! Response size: a Restore page stops at `--response-bytes-max` and always
//! holds at least one checkpoint, so a turn of any size restores through
//! clients that accept 4 MiB, the gRPC default; a checkpoint larger than the
//! budget comes back alone. ListTurns pages keep to the same budget.

use prost::Message;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::{CheckpointRequest, ListTurnsRequest, RestoreRequest, TurnStatus};

use stepwell_test_support::Client;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, list_all, list_turns, restore, restore_all};
use stepwell_test_support::sidecar::Sidecar;

/// A JSON string state of `bytes` bytes, distinct per `n`.
fn state(n: usize, bytes: usize) -> String {
    format!("\"{n:06}{}\"", "x".repeat(bytes - 8))
}

/// Restores `turn` page by page as `request` says, checking each page
/// against `budget`; returns the pages' sizes in checkpoints.
async fn pages(client: &mut Client, mut request: RestoreRequest, budget: usize) -> (Vec<usize>, Vec<Vec<u8>>) {
    let (mut sizes, mut states) = (Vec::new(), Vec::new());
    loop {
        let page = client.restore(request.clone()).await.expect("every page is accepted").into_inner();
        assert!(!page.checkpoints.is_empty(), "a page holds at least one checkpoint");
        let encoded = page.encoded_len();
        assert!(
            encoded <= budget || page.checkpoints.len() == 1,
            "a page of {} checkpoints is {encoded} bytes, over the {budget}-byte budget",
            page.checkpoints.len()
        );
        sizes.push(page.checkpoints.len());
        states.extend(page.checkpoints.into_iter().map(|c| c.state));
        if page.next_page_token.is_empty() {
            return (sizes, states);
        }
        request.page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn a_turn_of_twenty_four_mib_restores_in_pages_a_default_client_accepts() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let written: Vec<String> = (0..24).map(|n| state(n, 1_000_000)).collect();
    for (n, state) in written.iter().enumerate() {
        assert_inserted(&mut client, checkpoint("big", "step", T0 + n as i64, state)).await;
    }

    // A client with gRPC's default 4 MiB receive limit, as every standard client has.
    let mut default_client = CheckpointServiceClient::new(server.channel());
    let budget = 4 * 1024 * 1024 - 64 * 1024;
    let (sizes, states) = pages(&mut default_client, restore("big"), budget).await;
    assert_eq!(sizes, [4; 6], "four checkpoints of 1 MB fit a page, a fifth would not");
    let expected: Vec<Vec<u8>> = written.iter().map(|s| s.clone().into_bytes()).collect();
    assert!(states == expected, "every checkpoint, in order, once");

    let newest = RestoreRequest { newest_first: true, ..restore("big") };
    let (_, states) = pages(&mut default_client, newest, budget).await;
    assert!(states.iter().eq(expected.iter().rev()), "newest first too");
    let paged = RestoreRequest { page_size: 5, ..restore("big") };
    let (sizes, _) = pages(&mut default_client, paged, budget).await;
    assert_eq!(sizes, [4; 6], "the byte budget ends pages before the page size of 5");
    let paged = RestoreRequest { page_size: 3, ..restore("big") };
    let (sizes, _) = pages(&mut default_client, paged, budget).await;
    assert_eq!(sizes, [3; 8], "and the page size before the byte budget");
}

#[tokio::test]
async fn a_checkpoint_larger_than_the_budget_comes_back_alone() {
    const BUDGET: usize = 16 * 1024;
    let server = Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await;
    let mut client = server.client();
    let sizes = [100, 100, 100, 40_000, 100, 9_000, 9_000, 100];
    let written: Vec<String> = sizes.iter().enumerate().map(|(n, &bytes)| state(n, bytes)).collect();
    for (n, state) in written.iter().enumerate() {
        assert_inserted(&mut client, checkpoint("mixed", "step", T0 + n as i64, state)).await;
    }

    let (pages_of, states) = pages(&mut client, restore("mixed"), BUDGET).await;
    assert_eq!(pages_of, [3, 1, 2, 2], "the large checkpoint alone; the two 9 KB ones apart");
    let expected: Vec<Vec<u8>> = written.iter().map(|s| s.clone().into_bytes()).collect();
    assert!(states == expected, "every checkpoint, in order, once");
    let all = restore_all(&mut client, RestoreRequest { newest_first: true, ..restore("mixed") }).await;
    assert!(all.into_iter().map(|c| c.state).eq(expected.into_iter().rev()), "newest first too");
}

#[tokio::test]
async fn list_turns_pages_keep_to_the_budget() {
    const BUDGET: usize = 4096;
    let server = Sidecar::builder().configure(|config| config.limits.response_bytes_max = BUDGET).start().await;
    let mut client = server.client();
    let turns: Vec<String> = (0..60).map(|n| format!("{n:03}-{}", "t".repeat(200))).collect();
    for turn in &turns {
        let request = CheckpointRequest { phase: "p".repeat(100), ..checkpoint(turn, "p", T0, "{}") };
        assert_inserted(&mut client, request).await;
    }

    let mut request = ListTurnsRequest { page_size: 1000, ..list_turns(TurnStatus::Any) };
    let mut pages = 0;
    loop {
        let page = client.list_turns(request.clone()).await.expect("ListTurns succeeds").into_inner();
        assert!(page.encoded_len() <= BUDGET, "a page of {} bytes", page.encoded_len());
        pages += 1;
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    assert!(pages > 1, "60 long turns take more than one page");
    let listed = list_all(&mut client, list_turns(TurnStatus::Any)).await;
    assert!(listed.iter().map(|t| &t.turn_id).eq(turns.iter()), "every turn once, in order");
}
