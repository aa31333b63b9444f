//! The gRPC services as `server` mounts them: stepwell's five services,
//! each behind admission and the message size limit, their names (which
//! health reports on), and the descriptors server reflection describes.
//! Built here, where protobuf is known, so that `server` wires services
//! without naming a protobuf type of the contract.

use std::sync::Arc;

use tonic::server::NamedService;
use tonic::transport::server::Router;

use super::Shared;
use super::admission::Admission;
use super::checkpoint::CheckpointApi;
use super::idempotency::IdempotencyApi;
use super::memory::MemoryApi;
use super::pb::checkpoint_service_server::CheckpointServiceServer;
use super::pb::idempotency_service_server::IdempotencyServiceServer;
use super::pb::memory_service_server::MemoryServiceServer;
use super::pb::record_service_server::RecordServiceServer;
use super::pb::wait_service_server::WaitServiceServer;
use super::records::RecordApi;
use super::waits::WaitApi;

/// The full names of stepwell's services, as health and reflection know them.
pub const NAMES: [&str; 5] = [
    <CheckpointServiceServer<CheckpointApi> as NamedService>::NAME,
    <IdempotencyServiceServer<IdempotencyApi> as NamedService>::NAME,
    <RecordServiceServer<RecordApi> as NamedService>::NAME,
    <WaitServiceServer<WaitApi> as NamedService>::NAME,
    <MemoryServiceServer<MemoryApi> as NamedService>::NAME,
];

/// `router` with stepwell's five services added, each behind `admission`
/// and decoding and encoding messages of at most `message_max` bytes.
pub fn mount<L>(router: Router<L>, shared: &Arc<Shared>, admission: &Admission, message_max: usize) -> Router<L> {
    router
        .add_service(
            admission.wrap(
                CheckpointServiceServer::new(CheckpointApi::new(shared.clone()))
                    .max_decoding_message_size(message_max)
                    .max_encoding_message_size(message_max),
            ),
        )
        .add_service(
            admission.wrap(
                IdempotencyServiceServer::new(IdempotencyApi::new(shared.clone()))
                    .max_decoding_message_size(message_max)
                    .max_encoding_message_size(message_max),
            ),
        )
        .add_service(
            admission.wrap(
                RecordServiceServer::new(RecordApi::new(shared.clone()))
                    .max_decoding_message_size(message_max)
                    .max_encoding_message_size(message_max),
            ),
        )
        .add_service(
            admission.wrap(
                WaitServiceServer::new(WaitApi::new(shared.clone()))
                    .max_decoding_message_size(message_max)
                    .max_encoding_message_size(message_max),
            ),
        )
        .add_service(
            admission.wrap(
                MemoryServiceServer::new(MemoryApi::new(shared.clone()))
                    .max_decoding_message_size(message_max)
                    .max_encoding_message_size(message_max),
            ),
        )
}

/// Server reflection over the contract's descriptors and the health
/// service's, ready to build.
pub fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(super::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}
