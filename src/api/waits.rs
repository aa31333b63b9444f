//! WaitService: CreateWait, Signal, Await, GetWait, ListWaits and
//! CancelWait. Each RPC checks its request into `waits` values (a wait is
//! named by (turn_id, name) or by its handle, never both), asks the writer
//! or the store, and converts the answer back. Creating and settling go
//! through the group-commit writer like every write, and the writer wakes
//! the Awaits of what a batch settled once it has committed.
//!
//! An Await subscribes to its wait in the store's hub before it reads the
//! wait, so no settlement that commits after the read goes unheard; it then
//! answers when woken with a settled wait, or with the wait still pending
//! once its timeout passes. It holds one of `--awaits-max` places (taken in
//! admission) instead of one of `--max-concurrent-requests`, so that many
//! pending Awaits never starve the other requests.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::pb::wait_service_server::WaitService;
use super::pb::{self, *};
use super::validate::{Optional, Required};
use super::{Authenticated, Call, Shared, timestamp, validate};
use crate::domain::error::{Error, InvalidReason, Result};
use crate::domain::keys::Fence;
use crate::domain::limits;
use crate::domain::rpc::Rpc;
use crate::domain::waits::{NewWait, Settle, Wait, WaitDone, WaitKey, WaitQuery, WaitStatus, WaitWrite};
use crate::observe::metrics::WaitSettledBy;
use crate::observe::traces;

/// The WaitService implementation.
pub struct WaitApi {
    shared: Arc<Shared>,
}

/// How a request names its wait: its four naming fields, as sent.
struct Naming {
    namespace: String,
    turn_id: String,
    name: String,
    handle: String,
}

impl WaitApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        WaitApi { shared }
    }

    async fn create_wait(&self, namespace: String, req: CreateWaitRequest) -> Result<CreateWaitResponse> {
        let limits = self.shared.limits();
        let turn_id = validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Required)?;
        let mut name = validate::id("name", req.name, limits::WAIT_NAME_BYTES_MAX, Optional)?;
        if name.is_empty() {
            name = uuid::Uuid::now_v7().to_string();
        }
        let new = NewWait {
            key: WaitKey { namespace, turn_id, name },
            metadata: validate::json_object("metadata", req.metadata, limits.wait_metadata_bytes_max)?,
            expire_at: validate::optional_timestamp("expire_at", req.expire_at)?,
            resolve_at: validate::optional_timestamp("resolve_at", req.resolve_at)?,
            per_turn_max: limits.waits_per_turn_max,
        };
        let timed = new.resolve_at.is_some() || new.expire_at.is_some();
        let done = self.shared.writer()?.wait(WaitWrite::Create(new)).await??;
        let WaitDone::Created { wait, created } = done else { unreachable!("a CreateWait is answered Created") };
        if created && timed {
            // The timer task learns at once of a wait that may fall due
            // before the time it sleeps until.
            self.shared.hub()?.nudge_timers();
        }
        Ok(CreateWaitResponse { wait: Some(to_pb(wait)), created })
    }

    async fn signal(&self, namespace: String, req: SignalRequest, principal: String) -> Result<SignalResponse> {
        let limits = self.shared.limits();
        let naming = Naming { namespace, turn_id: req.turn_id, name: req.name, handle: req.handle };
        let key = wait_key(naming)?;
        validate::bytes("payload", &req.payload, limits.wait_payload_bytes_max)?;
        let fence = match req.fence {
            None => None,
            Some(fence) => {
                if fence.lease_token == 0 {
                    return Err(Error::invalid("fence.lease_token", InvalidReason::Required, "is required"));
                }
                let fence_key = validate::id("fence.key", fence.key, limits::KEY_BYTES_MAX, Required)?;
                Some(Fence { namespace: key.namespace.clone(), key: fence_key, lease_token: fence.lease_token })
            }
        };
        let settle = Settle {
            key,
            status: WaitStatus::Resolved,
            payload: req.payload,
            content_type: validate::content_type(
                "content_type",
                req.content_type,
                limits::WAIT_CONTENT_TYPE_BYTES_MAX,
            )?,
            settled_by: principal,
            fence,
            per_turn_max: limits.waits_per_turn_max,
            span: traces::current_span(),
        };
        let (wait, settled) = self.settle(settle).await?;
        Ok(SignalResponse { wait: Some(to_pb(wait)), settled })
    }

    async fn cancel_wait(
        &self,
        namespace: String,
        req: CancelWaitRequest,
        principal: String,
    ) -> Result<CancelWaitResponse> {
        let naming = Naming { namespace, turn_id: req.turn_id, name: req.name, handle: req.handle };
        let settle = Settle {
            key: wait_key(naming)?,
            status: WaitStatus::Cancelled,
            payload: Vec::new(),
            content_type: String::new(),
            settled_by: principal,
            fence: None,
            per_turn_max: self.shared.limits().waits_per_turn_max,
            span: traces::current_span(),
        };
        let (wait, cancelled) = self.settle(settle).await?;
        Ok(CancelWaitResponse { wait: Some(to_pb(wait)), cancelled })
    }

    /// Settles a wait through the writer: the wait, and whether this call settled it.
    async fn settle(&self, settle: Settle) -> Result<(Wait, bool)> {
        match self.shared.writer()?.wait(WaitWrite::Settle(settle)).await?? {
            WaitDone::Settled { wait, settled } => {
                if settled {
                    self.shared.metrics().wait_settled(WaitSettledBy::Request, 0);
                }
                Ok((wait, settled))
            }
            _ => unreachable!("a settlement is answered Settled"),
        }
    }

    async fn get_wait(&self, namespace: String, req: GetWaitRequest) -> Result<GetWaitResponse> {
        let naming = Naming { namespace, turn_id: req.turn_id, name: req.name, handle: req.handle };
        let key = wait_key(naming)?;
        let wait = self.shared.store()?.get_wait(&key).await?.ok_or(Error::WaitNotFound)?;
        Ok(GetWaitResponse { wait: Some(to_pb(wait)) })
    }

    async fn await_wait(&self, namespace: String, req: AwaitRequest) -> Result<AwaitResponse> {
        let limits = self.shared.limits();
        let naming = Naming { namespace, turn_id: req.turn_id, name: req.name, handle: req.handle };
        let key = wait_key(naming)?;
        let default = limits::AWAIT_TIMEOUT_DEFAULT.min(limits.await_timeout_max);
        let timeout = validate::duration("timeout", req.timeout, default, limits.await_timeout_max)?;
        let deadline = tokio::time::Instant::now() + Duration::from_nanos(timeout as u64);
        // Subscribed before the read: a settlement committed after it wakes us.
        let mut subscription = self.shared.hub()?.subscribe(key.clone());
        let mut wait = self.shared.store()?.get_wait(&key).await?.ok_or(Error::WaitNotFound)?;
        while !wait.is_settled() {
            tokio::select! {
                woken = subscription.woken() => {
                    wait = match woken {
                        Some(settled) => Wait::clone(&settled),
                        None => self.shared.store()?.get_wait(&key).await?.ok_or(Error::WaitNotFound)?,
                    };
                }
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        if wait.is_settled()
            && let Some(settled_at) = wait.settled_at
        {
            self.shared.metrics().wait_woken(settled_at);
        }
        if let Some(span) = &wait.settled_span {
            // The Await's span links to the request that settled its wait.
            traces::link_settlement(span);
        }
        Ok(AwaitResponse { wait: Some(to_pb(wait)) })
    }

    async fn list_waits(&self, namespace: String, req: ListWaitsRequest) -> Result<ListWaitsResponse> {
        let limits = self.shared.limits();
        let turn_id = validate::id("turn_id", req.turn_id, limits::TURN_ID_BYTES_MAX, Optional)?;
        let status = match pb::WaitStatus::try_from(req.status) {
            Ok(pb::WaitStatus::Unspecified) => None,
            Ok(status) => Some(from_pb_status(status)),
            Err(_) => return Err(Error::invalid("status", InvalidReason::OutOfRange, "is not a WaitStatus value")),
        };
        let query = WaitQuery {
            namespace,
            turn_id: (!turn_id.is_empty()).then_some(turn_id),
            status,
            resolve_before: validate::optional_timestamp("resolve_before", req.resolve_before)?,
            after: validate::waits_after(&req.page_token)?,
            limit: validate::page_size(req.page_size, limits.page_size_default, limits.page_size_max)?,
        };
        let (waits, more) = self.shared.store()?.list_waits(&query).await?;
        let next_page_token = match waits.last() {
            Some(last) if more => validate::waits_token(&last.key.turn_id, &last.key.name),
            _ => String::new(),
        };
        Ok(ListWaitsResponse { waits: waits.into_iter().map(to_pb).collect(), next_page_token })
    }
}

/// The wait a request names, by (turn_id, name) or by handle, never both;
/// with a handle, the namespace is empty or the handle's. `naming.namespace`
/// is the call's, as `Shared::answer` validated it: the request's, or the
/// handle's when the request names none (see `call`).
fn wait_key(naming: Naming) -> Result<WaitKey> {
    if naming.handle.is_empty() {
        return Ok(WaitKey {
            namespace: naming.namespace,
            turn_id: validate::id("turn_id", naming.turn_id, limits::TURN_ID_BYTES_MAX, Required)?,
            name: validate::id("name", naming.name, limits::WAIT_NAME_BYTES_MAX, Required)?,
        });
    }
    let not_with_handle = |field: &str| Error::invalid(field, InvalidReason::Malformed, "must be empty with handle");
    if !naming.turn_id.is_empty() {
        return Err(not_with_handle("turn_id"));
    }
    if !naming.name.is_empty() {
        return Err(not_with_handle("name"));
    }
    let key = WaitKey::from_handle(&naming.handle).ok_or_else(validate::malformed_handle)?;
    if naming.namespace != key.namespace {
        return Err(Error::invalid("namespace", InvalidReason::Malformed, "must be empty or the handle's namespace"));
    }
    // A handle is checked as the fields it stands for, under its own name
    // (its namespace, as the call's, already was).
    let checked = validate::id("handle", key.turn_id.clone(), limits::TURN_ID_BYTES_MAX, Required).is_ok()
        && validate::id("handle", key.name.clone(), limits::WAIT_NAME_BYTES_MAX, Required).is_ok();
    if checked { Ok(key) } else { Err(validate::malformed_handle()) }
}

/// The principal that admission authenticated, as `settled_by` names it
/// (empty without authentication).
fn principal<T>(request: &Request<T>) -> String {
    request.extensions().get::<Authenticated>().map(|found| found.0.id.clone()).unwrap_or_default()
}

fn from_pb_status(status: pb::WaitStatus) -> WaitStatus {
    match status {
        pb::WaitStatus::Unspecified | pb::WaitStatus::Pending => WaitStatus::Pending,
        pb::WaitStatus::Resolved => WaitStatus::Resolved,
        pb::WaitStatus::Cancelled => WaitStatus::Cancelled,
        pb::WaitStatus::Expired => WaitStatus::Expired,
    }
}

fn to_pb_status(status: WaitStatus) -> pb::WaitStatus {
    match status {
        WaitStatus::Pending => pb::WaitStatus::Pending,
        WaitStatus::Resolved => pb::WaitStatus::Resolved,
        WaitStatus::Cancelled => pb::WaitStatus::Cancelled,
        WaitStatus::Expired => pb::WaitStatus::Expired,
    }
}

/// A wait as the contract shows it, with its handle.
pub fn to_pb(wait: Wait) -> pb::Wait {
    pb::Wait {
        handle: wait.key.handle(),
        namespace: wait.key.namespace,
        turn_id: wait.key.turn_id,
        name: wait.key.name,
        status: to_pb_status(wait.status) as i32,
        metadata: wait.metadata.map(String::into_bytes).unwrap_or_default(),
        created_at: Some(timestamp(wait.created_at)),
        expire_at: wait.expire_at.map(timestamp),
        resolve_at: wait.resolve_at.map(timestamp),
        settled_at: wait.settled_at.map(timestamp),
        payload: wait.payload,
        content_type: wait.content_type,
        settled_by: wait.settled_by,
    }
}

/// A call of `rpc` on the wait a request names, for admission and the audit
/// log: in the request's namespace, or, when it names its wait by handle
/// alone, in the handle's (a handle whose namespace is not valid is refused
/// as a malformed handle).
fn call<T>(rpc: Rpc, request: &Request<T>, namespace: &str, turn_id: &str, handle: &str) -> Call {
    match WaitKey::from_handle(handle) {
        Some(key) if namespace.is_empty() => {
            Call::new(rpc, request, &key.namespace).namespace_from_handle().turn_id(turn_id)
        }
        _ => Call::new(rpc, request, namespace).turn_id(turn_id),
    }
}

#[tonic::async_trait]
impl WaitService for WaitApi {
    async fn create_wait(&self, request: Request<CreateWaitRequest>) -> Result<Response<CreateWaitResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::CreateWait, &request, &r.namespace, &r.turn_id, "");
        self.shared.answer(call, |namespace| WaitApi::create_wait(self, namespace, request.into_inner())).await
    }

    async fn signal(&self, request: Request<SignalRequest>) -> Result<Response<SignalResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::Signal, &request, &r.namespace, &r.turn_id, &r.handle);
        let principal = principal(&request);
        self.shared.answer(call, |namespace| WaitApi::signal(self, namespace, request.into_inner(), principal)).await
    }

    async fn r#await(&self, request: Request<AwaitRequest>) -> Result<Response<AwaitResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::Await, &request, &r.namespace, &r.turn_id, &r.handle);
        self.shared.answer(call, |namespace| WaitApi::await_wait(self, namespace, request.into_inner())).await
    }

    async fn get_wait(&self, request: Request<GetWaitRequest>) -> Result<Response<GetWaitResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::GetWait, &request, &r.namespace, &r.turn_id, &r.handle);
        self.shared.answer(call, |namespace| WaitApi::get_wait(self, namespace, request.into_inner())).await
    }

    async fn list_waits(&self, request: Request<ListWaitsRequest>) -> Result<Response<ListWaitsResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::ListWaits, &request, &r.namespace, &r.turn_id, "");
        self.shared.answer(call, |namespace| WaitApi::list_waits(self, namespace, request.into_inner())).await
    }

    async fn cancel_wait(&self, request: Request<CancelWaitRequest>) -> Result<Response<CancelWaitResponse>, Status> {
        let r = request.get_ref();
        let call = call(Rpc::CancelWait, &request, &r.namespace, &r.turn_id, &r.handle);
        let principal = principal(&request);
        self.shared
            .answer(call, |namespace| WaitApi::cancel_wait(self, namespace, request.into_inner(), principal))
            .await
    }
}
