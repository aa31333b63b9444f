//! CheckpointService: Checkpoint, Restore, ListTurns and DeleteTurn. Each RPC
//! checks its request into domain values, asks the store, and converts the
//! answer back; the rules of the log (deduplication, order, the version
//! check) are the store's and `model`'s.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::pb::checkpoint_service_server::CheckpointService;
use super::pb::{self, *};
use super::validate::{Optional, Required};
use super::{Call, Shared, timestamp, validate};
use crate::domain::error::{Error, InvalidReason, Result};
use crate::domain::limits;
use crate::domain::model::{self, Appended, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint};
use crate::domain::rpc::Rpc;

/// The CheckpointService implementation.
pub struct CheckpointApi {
    shared: Arc<Shared>,
}

impl CheckpointApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        CheckpointApi { shared }
    }

    async fn checkpoint(&self, namespace: String, req: CheckpointRequest) -> Result<CheckpointResponse> {
        let checkpoint = NewCheckpoint {
            namespace,
            turn_id: validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Required)?,
            session_id: validate::id("session_id", req.session_id, limits::SESSION_ID_BYTES_MAX, Optional)?,
            phase: validate::phase("phase", req.phase, Required)?,
            state: {
                validate::state(&req.state, self.shared.limits().state_bytes_max)?;
                req.state
            },
            timestamp: validate::timestamp("timestamp", req.timestamp)?,
            terminal: req.terminal,
            workflow_version: validate::id(
                "workflow_version",
                req.workflow_version,
                limits::WORKFLOW_VERSION_BYTES_MAX,
                Optional,
            )?,
        };
        let metrics = self.shared.metrics();
        let (inserted, stored) = match self.shared.writer()?.append(checkpoint).await? {
            Appended::Inserted(stored) => {
                metrics.checkpoints_appended.increment(1);
                (true, stored)
            }
            Appended::Duplicate(stored) => {
                metrics.checkpoints_duplicate.increment(1);
                (false, stored)
            }
            Appended::Conflict => return Err(Error::CheckpointConflict),
        };
        Ok(CheckpointResponse { inserted, checkpoint: Some(to_pb(stored)) })
    }

    async fn restore(&self, namespace: String, req: RestoreRequest) -> Result<RestoreResponse> {
        let limits = self.shared.limits();
        let turn_id = validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Required)?;
        let limit = validate::page_size(req.page_size, limits.page_size_default, limits.page_size_max)?;
        let after = validate::restore_cursor(&req.page_token, req.newest_first)?;
        let phase = validate::phase("phase", req.phase, Optional)?;
        let expected = validate::id(
            "expect_workflow_version",
            req.expect_workflow_version,
            limits::WORKFLOW_VERSION_BYTES_MAX,
            Optional,
        )?;
        let store = self.shared.store()?;

        if !expected.is_empty()
            && let Some(turn) = store.turn(&namespace, &turn_id).await?
            && !model::workflow_versions_compatible(&expected, &turn.workflow_version)
        {
            return Err(Error::WorkflowVersionMismatch { expected, recorded: turn.workflow_version });
        }

        let query = RestoreQuery {
            namespace,
            turn_id,
            newest_first: req.newest_first,
            phase: (!phase.is_empty()).then_some(phase),
            after,
            limit,
            bytes_max: limits.response_bytes_max,
        };
        let (checkpoints, more) = store.restore(&query).await?;
        let next_page_token = match checkpoints.last() {
            Some(last) if more => validate::restore_token(last.cursor(), req.newest_first),
            _ => String::new(),
        };
        Ok(RestoreResponse { checkpoints: checkpoints.into_iter().map(to_pb).collect(), next_page_token })
    }

    async fn list_turns(&self, namespace: String, req: ListTurnsRequest) -> Result<ListTurnsResponse> {
        let limits = self.shared.limits();
        let status = match pb::TurnStatus::try_from(req.status) {
            Ok(pb::TurnStatus::Open) => model::TurnStatus::Open,
            Ok(pb::TurnStatus::Terminal) => model::TurnStatus::Terminal,
            Ok(pb::TurnStatus::Any | pb::TurnStatus::Unspecified) => model::TurnStatus::Any,
            Err(_) => {
                return Err(Error::invalid("status", InvalidReason::OutOfRange, "is not a TurnStatus value"));
            }
        };
        let session_id = validate::id("session_id", req.session_id, limits::SESSION_ID_BYTES_MAX, Optional)?;
        let query = ListTurnsQuery {
            namespace,
            status,
            session_id: (!session_id.is_empty()).then_some(session_id),
            updated_before: validate::optional_timestamp("updated_before", req.updated_before)?,
            after_turn_id: validate::turns_after(&req.page_token)?,
            limit: validate::page_size(req.page_size, limits.page_size_default, limits.page_size_max)?,
        };
        let (mut turns, mut more) = self.shared.store()?.list_turns(&query).await?;
        // Summaries are small, but a full page of the longest ids could pass
        // the page's byte budget: the page ends before it would.
        let mut bytes = 0;
        if let Some(fit) = turns.iter().position(|t| {
            bytes += t.turn_id.len() + t.session_id.len() + t.last_phase.len() + t.workflow_version.len();
            bytes += TURN_OVERHEAD_BYTES;
            bytes > limits.response_bytes_max
        }) {
            turns.truncate(fit.max(1));
            more = true;
        }
        let next_page_token = match turns.last() {
            Some(last) if more => validate::turns_token(&last.turn_id),
            _ => String::new(),
        };
        let turns = turns
            .into_iter()
            .map(|t| pb::TurnSummary {
                turn_id: t.turn_id,
                session_id: t.session_id,
                first_timestamp: Some(timestamp(t.first_timestamp)),
                last_timestamp: Some(timestamp(t.last_timestamp)),
                last_phase: t.last_phase,
                checkpoint_count: t.checkpoint_count,
                terminal: t.terminal,
                workflow_version: t.workflow_version,
            })
            .collect();
        Ok(ListTurnsResponse { turns, next_page_token })
    }

    async fn delete_turn(&self, namespace: String, req: DeleteTurnRequest) -> Result<DeleteTurnResponse> {
        let turn_id = validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Required)?;
        let deleted = self.shared.delete_turn(namespace, turn_id, req.include_records).await?;
        Ok(DeleteTurnResponse {
            deleted: deleted.checkpoints,
            records_deleted: deleted.records,
            waits_deleted: deleted.waits,
        })
    }
}

/// What a turn summary costs in a ListTurns page beyond its ids, phase and
/// version: at most this for tags, lengths, counts and timestamps.
const TURN_OVERHEAD_BYTES: usize = 64;

fn to_pb(stored: StoredCheckpoint) -> pb::Checkpoint {
    let c = stored.checkpoint;
    pb::Checkpoint {
        namespace: c.namespace,
        turn_id: c.turn_id,
        session_id: c.session_id,
        phase: c.phase,
        state: c.state,
        timestamp: Some(timestamp(c.timestamp)),
        terminal: c.terminal,
        workflow_version: c.workflow_version,
        recorded_at: Some(timestamp(stored.recorded_at)),
    }
}

#[tonic::async_trait]
impl CheckpointService for CheckpointApi {
    async fn checkpoint(&self, request: Request<CheckpointRequest>) -> Result<Response<CheckpointResponse>, Status> {
        let call =
            Call::new(Rpc::Checkpoint, &request, &request.get_ref().namespace).turn_id(&request.get_ref().turn_id);
        self.shared.answer(call, |namespace| CheckpointApi::checkpoint(self, namespace, request.into_inner())).await
    }

    async fn restore(&self, request: Request<RestoreRequest>) -> Result<Response<RestoreResponse>, Status> {
        let call = Call::new(Rpc::Restore, &request, &request.get_ref().namespace).turn_id(&request.get_ref().turn_id);
        self.shared.answer(call, |namespace| CheckpointApi::restore(self, namespace, request.into_inner())).await
    }

    async fn list_turns(&self, request: Request<ListTurnsRequest>) -> Result<Response<ListTurnsResponse>, Status> {
        let call = Call::new(Rpc::ListTurns, &request, &request.get_ref().namespace);
        self.shared.answer(call, |namespace| CheckpointApi::list_turns(self, namespace, request.into_inner())).await
    }

    async fn delete_turn(&self, request: Request<DeleteTurnRequest>) -> Result<Response<DeleteTurnResponse>, Status> {
        let call = Call::new(Rpc::DeleteTurn, &request, &request.get_ref().namespace)
            .turn_id(&request.get_ref().turn_id)
            .audited(true);
        self.shared.answer(call, |namespace| CheckpointApi::delete_turn(self, namespace, request.into_inner())).await
    }
}
