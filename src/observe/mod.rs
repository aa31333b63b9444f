//! What the sidecar tells its operator: log lines, Prometheus metrics and
//! OpenTelemetry spans. Nothing here changes what a request does.

pub mod activity;
pub mod metrics;
pub mod telemetry;
pub mod traces;
