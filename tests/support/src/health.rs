//! Following a sidecar's health: a Watch on the overall status, the next
//! status it reports, and waiting until the server is SERVING (its store
//! open and migrated).

use tonic::Streaming;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::WAIT_LIMIT;

/// Opens a health Watch on the overall server status ("").
pub async fn watch_health(channel: &Channel) -> Streaming<HealthCheckResponse> {
    HealthClient::new(channel.clone())
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .expect("health Watch opens")
        .into_inner()
}

/// The next status a Watch reports, or `None` when the stream ends.
pub async fn next_status(watch: &mut Streaming<HealthCheckResponse>) -> Option<ServingStatus> {
    let message = tokio::time::timeout(WAIT_LIMIT, watch.message())
        .await
        .expect("the health Watch reports a status or ends")
        .expect("the health Watch does not fail");
    message.map(|m| ServingStatus::try_from(m.status).expect("a known ServingStatus"))
}

/// Waits until health reports SERVING: the store is open and migrated.
pub async fn wait_for_serving(channel: &Channel) {
    let mut watch = watch_health(channel).await;
    loop {
        match next_status(&mut watch).await {
            Some(ServingStatus::Serving) => return,
            Some(_) => continue,
            None => panic!("the health Watch ended before the server was SERVING"),
        }
    }
}
