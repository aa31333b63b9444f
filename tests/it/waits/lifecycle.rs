//! Waits go with their turn: DeleteTurn deletes them, whether the turn has
//! checkpoints or only waits.

use stepwell::api::pb::DeleteTurnRequest;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::checkpoint;
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{create, get, signal, signalled};

#[tokio::test]
async fn delete_turn_deletes_the_turns_waits_and_no_other() {
    let server = Sidecar::builder().start().await;
    let mut waits = server.waits();
    server.client().checkpoint(checkpoint("t1", "step", 1, "{}")).await.expect("Checkpoint");
    waits.create_wait(create("t1", "a")).await.expect("CreateWait");
    signalled(&mut waits, signal("t1", "b", b"x")).await;
    waits.create_wait(create("t2", "a")).await.expect("CreateWait");
    waits.create_wait(create("only-waits", "a")).await.expect("CreateWait");
    for turn in ["t1", "only-waits"] {
        let request = DeleteTurnRequest { turn_id: turn.to_owned(), ..Default::default() };
        server.client().delete_turn(request).await.expect("DeleteTurn");
    }
    for (turn, name) in [("t1", "a"), ("t1", "b"), ("only-waits", "a")] {
        let status = get(&mut waits, turn, name).await.expect_err("deleted with its turn");
        assert_error(&status, Code::NotFound, "WAIT_NOT_FOUND");
    }
    get(&mut waits, "t2", "a").await.expect("another turn's wait stays");
}
