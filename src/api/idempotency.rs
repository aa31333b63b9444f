//! IdempotencyService: leases, fencing tokens and recorded results. Every RPC
//! answers UNIMPLEMENTED until the idempotency store lands.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Shared;
use super::pb::idempotency_service_server::IdempotencyService;
use super::pb::*;
use crate::error::Error;

/// The IdempotencyService implementation.
pub struct IdempotencyApi {
    #[allow(dead_code)]
    shared: Arc<Shared>,
}

impl IdempotencyApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        IdempotencyApi { shared }
    }
}

#[tonic::async_trait]
impl IdempotencyService for IdempotencyApi {
    async fn begin(&self, _: Request<BeginRequest>) -> Result<Response<BeginResponse>, Status> {
        Err(Error::Unimplemented("IdempotencyService.Begin").into())
    }

    async fn complete(&self, _: Request<CompleteRequest>) -> Result<Response<CompleteResponse>, Status> {
        Err(Error::Unimplemented("IdempotencyService.Complete").into())
    }

    async fn release(&self, _: Request<ReleaseRequest>) -> Result<Response<ReleaseResponse>, Status> {
        Err(Error::Unimplemented("IdempotencyService.Release").into())
    }

    async fn extend(&self, _: Request<ExtendRequest>) -> Result<Response<ExtendResponse>, Status> {
        Err(Error::Unimplemented("IdempotencyService.Extend").into())
    }

    async fn get(&self, _: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        Err(Error::Unimplemented("IdempotencyService.Get").into())
    }
}
