//! IdempotencyService: Begin, Complete, Release, Extend and Get. Each RPC
//! checks its request, asks the store (which follows the rules in
//! `crate::domain::keys`), and converts the answer; refusals become errors
//! through the one status table.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::pb::idempotency_service_server::IdempotencyService;
use super::pb::{self, *};
use super::validate::Required;
use super::{Call, Shared, timestamp, validate};
use crate::domain::error::{Error, Result};
use crate::domain::keys::{self as rules, BeginArgs, Fence, KeyState};
use crate::domain::limits;
use crate::domain::rpc::Rpc;
use crate::observe::metrics::BeginOutcome as Outcome;
use crate::store::Fenced;

/// The IdempotencyService implementation.
pub struct IdempotencyApi {
    shared: Arc<Shared>,
}

impl IdempotencyApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        IdempotencyApi { shared }
    }

    fn fence(namespace: String, key: String, lease_token: u64) -> Result<Fence> {
        Ok(Fence {
            namespace,
            key: validate::id("key", key, limits::KEY_BYTES_MAX, Required)?,
            lease_token: validate::lease_token(lease_token)?,
        })
    }

    async fn begin(&self, namespace: String, req: BeginRequest) -> Result<BeginResponse> {
        let limits = self.shared.limits();
        validate::bytes("fingerprint", &req.fingerprint, limits::FINGERPRINT_BYTES_MAX)?;
        let args = BeginArgs {
            namespace,
            key: validate::id("key", req.key, limits::KEY_BYTES_MAX, Required)?,
            fingerprint: req.fingerprint,
            lease: validate::duration("lease", req.lease, limits.lease_default, limits.lease_max)?,
            retention: validate::duration("retention", req.retention, limits.retention_default, limits.retention_max)?,
        };
        let outcome = match self.finished(&args).await? {
            Some(answer) => answer?,
            None => self.shared.writer()?.begin(args).await??,
        };
        let metrics = self.shared.metrics();
        let response = match outcome {
            rules::BeginOutcome::Acquired { lease_token, attempt, lease_expires_at, previous_lease_expired } => {
                metrics.begin(Outcome::Acquired);
                if previous_lease_expired {
                    metrics.takeovers.increment(1);
                }
                BeginResponse {
                    outcome: BeginOutcome::Acquired.into(),
                    lease_token,
                    attempt,
                    lease_expires_at: Some(timestamp(lease_expires_at)),
                    previous_lease_expired,
                    ..BeginResponse::default()
                }
            }
            rules::BeginOutcome::Completed { attempt, result } => {
                metrics.begin(Outcome::Completed);
                BeginResponse { outcome: BeginOutcome::Completed.into(), attempt, result, ..BeginResponse::default() }
            }
            rules::BeginOutcome::InProgress { attempt, lease_expires_at } => {
                metrics.begin(Outcome::InProgress);
                BeginResponse {
                    outcome: BeginOutcome::InProgress.into(),
                    attempt,
                    lease_expires_at: Some(timestamp(lease_expires_at)),
                    ..BeginResponse::default()
                }
            }
            rules::BeginOutcome::Failed { attempt, error } => {
                metrics.begin(Outcome::Failed);
                BeginResponse { outcome: BeginOutcome::Failed.into(), attempt, error, ..BeginResponse::default() }
            }
        };
        Ok(response)
    }

    /// Begin's fast path. A key that is completed or failed never changes
    /// again (until it is purged), so its answer comes from a read, without
    /// queueing or writing; `None` sends the Begin to the writer.
    async fn finished(&self, args: &BeginArgs) -> Result<Option<Fenced<rules::BeginOutcome>>> {
        let Some((record, now)) = self.shared.store()?.get(&args.namespace, &args.key).await? else {
            return Ok(None);
        };
        if !matches!(record.state(now), KeyState::Completed | KeyState::Failed) {
            return Ok(None);
        }
        Ok(match rules::plan_begin(Some(&record), args, now) {
            rules::BeginPlan::Answer(answer) => Some(answer),
            rules::BeginPlan::Acquire { .. } => None,
        })
    }

    async fn complete(&self, namespace: String, req: CompleteRequest) -> Result<CompleteResponse> {
        let fence = Self::fence(namespace, req.key, req.lease_token)?;
        validate::bytes("result", &req.result, self.shared.limits().result_bytes_max)?;
        let completed_at = self.shared.writer()?.complete(fence, req.result).await??;
        Ok(CompleteResponse { completed_at: Some(timestamp(completed_at)) })
    }

    async fn release(&self, namespace: String, req: ReleaseRequest) -> Result<ReleaseResponse> {
        let fence = Self::fence(namespace, req.key, req.lease_token)?;
        validate::bytes("error", req.error.as_bytes(), limits::ERROR_BYTES_MAX)?;
        let state = self.shared.writer()?.release(fence, req.error, req.permanent).await??;
        Ok(ReleaseResponse { state: record_state(state).into() })
    }

    async fn extend(&self, namespace: String, req: ExtendRequest) -> Result<ExtendResponse> {
        let limits = self.shared.limits();
        let fence = Self::fence(namespace, req.key, req.lease_token)?;
        let lease = validate::duration("lease", req.lease, limits.lease_default, limits.lease_max)?;
        let lease_expires_at = self.shared.writer()?.extend(fence, lease).await??;
        Ok(ExtendResponse { lease_expires_at: Some(timestamp(lease_expires_at)) })
    }

    async fn get(&self, namespace: String, req: GetRequest) -> Result<GetResponse> {
        let key = validate::id("key", req.key, limits::KEY_BYTES_MAX, Required)?;
        let (record, now) = self.shared.store()?.get(&namespace, &key).await?.ok_or(Error::KeyNotFound)?;
        let state = record.state(now);
        let leased = matches!(state, KeyState::InProgress | KeyState::Expired);
        Ok(GetResponse {
            state: record_state(state).into(),
            attempt: record.attempt,
            lease_expires_at: leased.then(|| timestamp(record.lease_expires_at)),
            result: record.result,
            error: record.error,
            fingerprint: record.fingerprint,
            created_at: Some(timestamp(record.created_at)),
            updated_at: Some(timestamp(record.updated_at)),
            retained_until: (!leased).then(|| timestamp(record.purge_after)),
            lease_token: if leased { record.lease_token } else { 0 },
        })
    }
}

fn record_state(state: KeyState) -> pb::RecordState {
    match state {
        KeyState::InProgress => pb::RecordState::InProgress,
        KeyState::Completed => pb::RecordState::Completed,
        KeyState::Failed => pb::RecordState::Failed,
        KeyState::Expired => pb::RecordState::Expired,
        KeyState::Released => pb::RecordState::Released,
    }
}

#[tonic::async_trait]
impl IdempotencyService for IdempotencyApi {
    async fn begin(&self, request: Request<BeginRequest>) -> Result<Response<BeginResponse>, Status> {
        let call = Call::new(Rpc::Begin, &request, &request.get_ref().namespace).key(&request.get_ref().key);
        self.shared.answer(call, |namespace| IdempotencyApi::begin(self, namespace, request.into_inner())).await
    }

    async fn complete(&self, request: Request<CompleteRequest>) -> Result<Response<CompleteResponse>, Status> {
        let call = Call::new(Rpc::Complete, &request, &request.get_ref().namespace).key(&request.get_ref().key);
        self.shared.answer(call, |namespace| IdempotencyApi::complete(self, namespace, request.into_inner())).await
    }

    async fn release(&self, request: Request<ReleaseRequest>) -> Result<Response<ReleaseResponse>, Status> {
        let call = Call::new(Rpc::Release, &request, &request.get_ref().namespace)
            .key(&request.get_ref().key)
            .audited(request.get_ref().permanent);
        self.shared.answer(call, |namespace| IdempotencyApi::release(self, namespace, request.into_inner())).await
    }

    async fn extend(&self, request: Request<ExtendRequest>) -> Result<Response<ExtendResponse>, Status> {
        let call = Call::new(Rpc::Extend, &request, &request.get_ref().namespace).key(&request.get_ref().key);
        self.shared.answer(call, |namespace| IdempotencyApi::extend(self, namespace, request.into_inner())).await
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let call = Call::new(Rpc::Get, &request, &request.get_ref().namespace).key(&request.get_ref().key);
        self.shared.answer(call, |namespace| IdempotencyApi::get(self, namespace, request.into_inner())).await
    }
}
