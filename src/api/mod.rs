//! The gRPC face of stepwell: the generated protobuf types (`pb`), the
//! service implementations that convert between protobuf and the domain, the
//! request checks, and the one error-to-status table. Only `api` knows
//! protobuf types.
//!
//! With `--auth-file`, who is calling is decided from the request's headers
//! alone, before its body is read (`Shared::authenticate`, which admission
//! calls), so an unknown caller's body is never buffered. Every RPC then
//! passes through `Shared::answer`, which admits the call (may this caller
//! call this RPC in this namespace) and runs the handler only then, so a
//! refused call never reaches the store; both write the audit events.

pub mod admission;
pub mod checkpoint;
pub mod codec;
pub mod idempotency;
pub mod memory;
pub mod records;
pub mod services;
pub mod status;
pub mod validate;
pub mod waits;

use std::borrow::Cow;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;
use tonic::codegen::http::{Extensions, HeaderMap};
use tonic::{Request, Response, Status};

use crate::auth::{self, AUDIT_TARGET, Authenticator, Credentials, Principal};
use crate::config::sections::Limits;
use crate::domain::error::{Error, Result};
use crate::domain::model::UnixNanos;
use crate::domain::rpc::Rpc;
use crate::observe::metrics::Metrics;
use crate::observe::traces;
use crate::store::writer::Writer;
use crate::store::{Handle, Store, TurnDeleted};

/// The generated protobuf types, servers and clients of `stepwell.v1`.
pub mod pb {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("stepwell.v1");

    /// The encoded descriptors of the contract, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stepwell_descriptor.bin"));
}

/// The opened store: reads through its handle, writes through its writer.
struct Opened {
    store: Handle,
    writer: Writer,
}

/// What every service shares: the store, once it is open, the limits, the
/// principals when authentication is on, and a signal that a request found
/// the store unavailable.
pub struct Shared {
    opened: OnceLock<Opened>,
    limits: Limits,
    authenticator: Option<Arc<Authenticator>>,
    store_trouble: Notify,
    metrics: Arc<Metrics>,
}

/// How metrics and spans name a namespace that is not valid.
const INVALID_NAMESPACE: &str = "(invalid)";

/// What a call's audit event names besides its namespace.
enum Subject {
    None,
    TurnId(String),
    Key(String),
}

/// The principal that `Shared::authenticate` found for a request from its
/// headers, before its body was read; admission puts it in the request's
/// extensions for the handler's `Call`.
#[derive(Debug, Clone)]
pub struct Authenticated(pub Arc<Principal>);

/// One call as admission and the audit log see it, read from the request
/// before its handler takes the message.
pub struct Call {
    rpc: Rpc,
    credentials: Credentials,
    /// Who admission found the caller to be, when authentication is on.
    principal: Option<Arc<Principal>>,
    namespace: String,
    /// `namespace` as validated, once per call: `None` when it is not valid.
    valid_namespace: Option<String>,
    /// The field a namespace that is not valid came from.
    namespace_from: NamespaceFrom,
    subject: Subject,
    audited: bool,
}

/// Where a call's namespace came from: the request's `namespace` field, or
/// the wait handle a request names its wait by (whose namespace part is
/// checked as the handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamespaceFrom {
    Field,
    Handle,
}

impl Call {
    /// A call of `rpc` in the namespace the request names (empty: `default`).
    pub fn new<T>(rpc: Rpc, request: &Request<T>, namespace: &str) -> Call {
        Call {
            rpc,
            credentials: Credentials::of(request.metadata().as_ref(), request.extensions()),
            principal: request.extensions().get::<Authenticated>().map(|found| found.0.clone()),
            namespace: namespace.to_owned(),
            valid_namespace: validate::namespace(namespace.to_owned()).ok(),
            namespace_from: NamespaceFrom::Field,
            subject: Subject::None,
            audited: false,
        }
    }

    /// The same call, its namespace read from the wait handle the request
    /// names its wait by.
    fn namespace_from_handle(mut self) -> Call {
        self.namespace_from = NamespaceFrom::Handle;
        self
    }

    /// The call's namespace as validated when the call was made, or what is
    /// wrong with it (worked out again only then, to name it).
    fn checked_namespace(&self) -> Result<String> {
        if let Some(namespace) = &self.valid_namespace {
            return Ok(namespace.clone());
        }
        match self.namespace_from {
            NamespaceFrom::Field => validate::namespace(self.namespace.clone()),
            NamespaceFrom::Handle => Err(validate::malformed_handle()),
        }
    }

    /// The turn the call is about, for the audit log.
    pub fn turn_id(mut self, turn_id: &str) -> Call {
        self.subject = Subject::TurnId(turn_id.to_owned());
        self
    }

    /// The idempotency key the call is about, for the audit log.
    pub fn key(mut self, key: &str) -> Call {
        self.subject = Subject::Key(key.to_owned());
        self
    }

    /// Whether the call is audited even when allowed (DeleteTurn, a permanent Release).
    pub fn audited(mut self, audited: bool) -> Call {
        self.audited = audited;
        self
    }
}

impl Shared {
    /// Services start before the store is open; they answer UNAVAILABLE until then.
    pub fn new(limits: Limits) -> Arc<Shared> {
        Shared::with_authenticator(limits, None, Metrics::off())
    }

    /// Services that admit only the principals of `authenticator`, if
    /// given, and count what they answer in `metrics`.
    pub fn with_authenticator(
        limits: Limits,
        authenticator: Option<Arc<Authenticator>>,
        metrics: Arc<Metrics>,
    ) -> Arc<Shared> {
        Arc::new(Shared { opened: OnceLock::new(), limits, authenticator, store_trouble: Notify::new(), metrics })
    }

    /// Completes when a request has found the store unavailable since the last call.
    pub async fn store_trouble(&self) {
        self.store_trouble.notified().await
    }

    /// Every call passes here: it is admitted first, and `handler` runs
    /// only if it is and its namespace is valid, given that namespace as
    /// the call validated it (once: handlers do not check it again); errors
    /// become statuses through the one table, a store failure wakes the
    /// health monitor at once, and denials and audited calls are written to
    /// the audit log.
    pub async fn answer<T, F>(&self, call: Call, handler: impl FnOnce(String) -> F) -> Result<Response<T>, Status>
    where
        F: Future<Output = Result<T>>,
    {
        let (principal, admitted) = self.admit(&call);
        let labelled = admitted.is_ok();
        let result = match admitted.and_then(|()| call.checked_namespace()) {
            Ok(namespace) => handler(namespace).await,
            Err(error) => Err(error),
        };
        // A request the open breaker refused tells the monitor nothing new.
        if let Err(Error::Unavailable(source)) = &result
            && !source.is_down()
        {
            self.store_trouble.notify_one();
        }
        match &result {
            Err(Error::CheckpointConflict) => self.metrics.checkpoint_conflicts.increment(1),
            Err(Error::LeaseLost) => self.metrics.lease_lost.increment(1),
            _ => {}
        }
        // A namespace that is not valid is named as such: a label or an
        // attribute never carries an arbitrary value. Only an admitted call
        // names a metrics series, so a caller the sidecar refuses cannot
        // make series by naming namespaces.
        let namespace = || call.valid_namespace.clone().unwrap_or_else(|| INVALID_NAMESPACE.to_owned());
        traces::annotate(namespace, result.as_ref().err().map_or("ok", status::reason_of), labelled);
        let denied = matches!(result, Err(Error::Unauthenticated { .. } | Error::PermissionDenied { .. }));
        if denied || call.audited {
            let namespace = if call.namespace.is_empty() {
                Cow::Borrowed(validate::DEFAULT_NAMESPACE)
            } else {
                loggable(&call.namespace)
            };
            let about = About { namespace: Some(namespace), subject: &call.subject };
            audit(call.rpc, &call.credentials, principal.as_deref(), &about, result.as_ref().err(), denied);
        }
        result.map(Response::new).map_err(Status::from)
    }

    /// Who is calling, when authentication is on, decided from a request's
    /// headers and connection before its body is read: an unknown caller
    /// is refused (and audited) here, so its body is never buffered and it
    /// learns nothing of its request, not even whether it is valid.
    pub fn authenticate(
        &self,
        rpc: Rpc,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Result<Option<Arc<Principal>>> {
        let Some(authenticator) = &self.authenticator else { return Ok(None) };
        let credentials = Credentials::of(headers, extensions);
        authenticator.authenticate(&credentials).map(Some).map_err(|why| {
            let error = Error::Unauthenticated { why, namespace: None, role: rpc.role() };
            let about = About { namespace: None, subject: &Subject::None };
            audit(rpc, &credentials, None, &about, Some(&error), true);
            error
        })
    }

    /// Who is calling, when authentication is on, and whether they may make
    /// this call. The caller is the one admission authenticated (or, for a
    /// request that did not pass admission, is authenticated here); a known
    /// caller hears about a malformed namespace before its grants are
    /// checked, since grants name valid namespaces.
    fn admit(&self, call: &Call) -> (Option<Arc<Principal>>, Result<()>) {
        let Some(authenticator) = &self.authenticator else { return (None, Ok(())) };
        let authenticated = match &call.principal {
            Some(principal) => Ok(principal.clone()),
            None => authenticator.authenticate(&call.credentials),
        };
        let principal = match authenticated {
            Ok(principal) => principal,
            Err(why) => {
                let namespace = call.valid_namespace.clone();
                return (None, Err(Error::Unauthenticated { why, namespace, role: call.rpc.role() }));
            }
        };
        let verdict = match &call.valid_namespace {
            Some(namespace) => auth::authorize(&principal, call.rpc, namespace).map_err(permission_denied),
            None => call.checked_namespace().map(drop),
        };
        (Some(principal), verdict)
    }

    /// Makes the opened store available to the services.
    pub fn set_store(&self, store: Handle, writer: Writer) {
        // Only serve() sets the store, once; a second set would be a bug.
        assert!(self.opened.set(Opened { store, writer }).is_ok(), "the store is set once");
    }

    fn opened(&self) -> Result<&Opened> {
        self.opened.get().ok_or(Error::NotReady("the store is not open yet"))
    }

    /// Every write goes through the writer, once the store is open.
    pub fn writer(&self) -> Result<&Writer> {
        Ok(&self.opened()?.writer)
    }

    /// Deletes a turn (its checkpoints and waits, and with `records` its
    /// records) through the writer and counts it in the metrics: the one
    /// DeleteTurn of the API and of the console.
    pub async fn delete_turn(&self, namespace: String, turn_id: String, records: bool) -> Result<TurnDeleted> {
        let deleted = self.writer()?.delete_turn(namespace, turn_id, records).await?;
        if deleted.checkpoints > 0 || deleted.records > 0 || deleted.waits > 0 {
            self.metrics.turns_deleted.increment(1);
            self.metrics.checkpoints_deleted.increment(deleted.checkpoints);
            self.metrics.records_removed.increment(deleted.records);
        }
        Ok(deleted)
    }

    /// The store, for reads, once it is open and while it answers.
    pub fn store(&self) -> Result<&dyn Store> {
        Ok(self.opened()?.store.reads()?)
    }

    /// The waiters of this sidecar's Awaits, once the store is open.
    pub fn hub(&self) -> Result<&Arc<crate::store::hub::Hub>> {
        Ok(self.opened()?.store.hub())
    }

    /// Who may call, when authentication is on.
    pub fn authenticator(&self) -> Option<&Arc<Authenticator>> {
        self.authenticator.as_ref()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// What a scrape reports of the queue and the store, read now.
    pub async fn metrics_state(&self) -> crate::observe::metrics::State {
        let Some(opened) = self.opened.get() else { return crate::observe::metrics::State::default() };
        let (queue_depth, queue_bytes) = opened.writer.queued();
        let breaker_open = opened.store.check_up().is_err();
        crate::observe::metrics::State {
            queue_depth,
            awaits: opened.store.hub().waiters(),
            queue_bytes,
            store_up: !breaker_open,
            breaker_open,
            store: opened.store.backend().figures().await,
        }
    }

    /// Whether the store is open and answering: what /readyz reports.
    pub fn ready(&self) -> bool {
        self.opened.get().is_some_and(|opened| opened.store.check_up().is_ok())
    }
}

/// What an audit event says a call was about: its namespace and its turn
/// or key, or nothing for a call refused before its message was read.
struct About<'a> {
    namespace: Option<Cow<'a, str>>,
    subject: &'a Subject,
}

/// Writes one audit event on `stepwell::audit`: a warning for a denied
/// call, information otherwise. It names the principal (never a credential),
/// the peer, the RPC, the namespace, the turn or key, and the outcome.
fn audit(
    rpc: Rpc,
    credentials: &Credentials,
    principal: Option<&Principal>,
    about: &About<'_>,
    error: Option<&Error>,
    denied: bool,
) {
    let principal = principal.map_or("anonymous", |p| p.id.as_str());
    let peer = credentials.remote.map_or_else(|| "unknown".to_owned(), |remote| remote.to_string());
    let rpc = rpc.as_str();
    let outcome = error.map_or("ok", status::reason_of);
    // The level and the fields are part of each event's static description,
    // so each combination is its own event.
    macro_rules! event {
        ($level:expr) => {
            match (&about.namespace, about.subject) {
                (Some(namespace), Subject::TurnId(turn_id)) => tracing::event!(target: AUDIT_TARGET, $level,
                    principal, %peer, rpc, %namespace, turn_id = %loggable(turn_id), outcome, "audit"),
                (Some(namespace), Subject::Key(key)) => tracing::event!(target: AUDIT_TARGET, $level,
                    principal, %peer, rpc, %namespace, key = %loggable(key), outcome, "audit"),
                (Some(namespace), Subject::None) => tracing::event!(target: AUDIT_TARGET, $level,
                    principal, %peer, rpc, %namespace, outcome, "audit"),
                (None, _) => tracing::event!(target: AUDIT_TARGET, $level, principal, %peer, rpc, outcome, "audit"),
            }
        };
    }
    if denied {
        event!(tracing::Level::WARN);
    } else {
        event!(tracing::Level::INFO);
    }
}

/// Caller-given text as a log may show it: control characters escaped, so
/// that no request can forge a line of the log.
fn loggable(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) { Cow::Owned(text.escape_debug().to_string()) } else { Cow::Borrowed(text) }
}

/// A protobuf timestamp from nanoseconds since the epoch.
pub fn timestamp(nanos: UnixNanos) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: nanos.div_euclid(1_000_000_000), nanos: nanos.rem_euclid(1_000_000_000) as i32 }
}

/// Authorization's refusal as the domain error that `status` answers.
fn permission_denied(denied: auth::Denied) -> Error {
    Error::PermissionDenied { namespace: denied.namespace, role: denied.role }
}
