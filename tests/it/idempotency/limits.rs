//! Invalid input, as a table: every case is one bad field of an otherwise
//! valid request to any IdempotencyService RPC, must fail with its field and
//! reason, and must change nothing; values exactly at each limit are
//! accepted and recorded as given.

use std::time::Duration;

use stepwell::api::pb::{BeginRequest, CompleteRequest, ExtendRequest, GetRequest, RecordState, ReleaseRequest};
use stepwell_test_support::errors::Rejection;
use stepwell_test_support::requests::{begin, begin_leased, complete, duration, extend, get, nanos, release};
use stepwell_test_support::sidecar::Sidecar;

use super::{
    Call, assert_acquired, begin_ok, complete_ok, extend_ok, ns, read, record, release_ok, secs, stored_count,
};

/// The limits of the validation server: small, so that they are cheap to reach.
const RESULT_MAX: usize = 1024;
const LEASE_MAX: Duration = Duration::from_secs(120);
const RETENTION_MAX: Duration = Duration::from_secs(3600);
/// The contract's limit on a Release's error.
const ERROR_MAX: usize = 16 * 1024;

async fn start_with_small_limits() -> Sidecar {
    Sidecar::builder()
        .configure(|config| {
            config.limits.result_bytes_max = RESULT_MAX;
            config.limits.lease_max = LEASE_MAX;
            config.limits.retention_max = RETENTION_MAX;
        })
        .start()
        .await
}

const REQUIRED: &str = "FIELD_REQUIRED";
const TOO_LONG: &str = "FIELD_TOO_LONG";
const MALFORMED: &str = "FIELD_MALFORMED";
const OUT_OF_RANGE: &str = "FIELD_OUT_OF_RANGE";

/// A duration from raw protobuf fields, which may be out of range.
fn raw(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

/// `request` with one change.
fn changed<R>(mut request: R, change: fn(&mut R)) -> R {
    change(&mut request);
    request
}

struct Case {
    name: &'static str,
    call: Call,
    field: &'static str,
    reason: &'static str,
}

fn case(name: &'static str, call: Call, field: &'static str, reason: &'static str) -> Case {
    Case { name, call, field, reason }
}

/// The key Begin cases name: it must stay without a record.
const NEW: &str = "new";
/// The key Complete, Release and Extend cases name, held by the table's
/// test, so that a check that let a bad request through would change it.
const HELD: &str = "held";

fn bad_inputs(token: u64) -> Vec<Case> {
    let begin_with = |change: fn(&mut BeginRequest)| Call::Begin(changed(begin(NEW), change));
    let complete_with =
        |change: fn(&mut CompleteRequest)| Call::Complete(changed(complete(HELD, token, b"ok"), change));
    let release_with =
        |change: fn(&mut ReleaseRequest)| Call::Release(changed(release(HELD, token, true, "declined"), change));
    let extend_with = |change: fn(&mut ExtendRequest)| Call::Extend(changed(extend(HELD, token, secs(10)), change));
    let get_with = |change: fn(&mut GetRequest)| Call::Get(changed(get(HELD), change));
    vec![
        // Begin: the key.
        case("key missing", begin_with(|r| r.key.clear()), "key", REQUIRED),
        case("key 513 bytes", begin_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("key 513 bytes of 2-byte chars", begin_with(|r| r.key = format!("k{}", "é".repeat(256))), "key", TOO_LONG),
        case("key with NUL", begin_with(|r| r.key = "a\0b".into()), "key", MALFORMED),
        case("key with a newline", begin_with(|r| r.key = "a\nb".into()), "key", MALFORMED),
        case("key with DEL", begin_with(|r| r.key = "a\u{7f}".into()), "key", MALFORMED),
        case("key with a C1 control", begin_with(|r| r.key = "a\u{85}".into()), "key", MALFORMED),
        // Begin: the namespace.
        case("namespace uppercase", begin_with(|r| r.namespace = "Tenant".into()), "namespace", MALFORMED),
        case("namespace leading dash", begin_with(|r| r.namespace = "-tenant".into()), "namespace", MALFORMED),
        case("namespace with a slash", begin_with(|r| r.namespace = "a/b".into()), "namespace", MALFORMED),
        case("namespace 64 bytes", begin_with(|r| r.namespace = "n".repeat(64)), "namespace", TOO_LONG),
        // Begin: lease and retention.
        case("lease 0", begin_with(|r| r.lease = raw(0, 0)), "lease", OUT_OF_RANGE),
        case("lease negative", begin_with(|r| r.lease = raw(-1, 0)), "lease", OUT_OF_RANGE),
        case("lease negative nanos", begin_with(|r| r.lease = raw(0, -1)), "lease", OUT_OF_RANGE),
        case("lease nanos 1e9", begin_with(|r| r.lease = raw(1, 1_000_000_000)), "lease", OUT_OF_RANGE),
        case("lease 1 ns above the max", begin_with(|r| r.lease = raw(120, 1)), "lease", OUT_OF_RANGE),
        case("retention 0", begin_with(|r| r.retention = raw(0, 0)), "retention", OUT_OF_RANGE),
        case("retention negative", begin_with(|r| r.retention = raw(-60, 0)), "retention", OUT_OF_RANGE),
        case("retention 1 ns above the max", begin_with(|r| r.retention = raw(3600, 1)), "retention", OUT_OF_RANGE),
        case("fingerprint 257 bytes", begin_with(|r| r.fingerprint = vec![7; 257]), "fingerprint", TOO_LONG),
        // Complete.
        case("complete lease_token 0", complete_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("complete result 1 byte over", complete_with(|r| r.result = vec![1; RESULT_MAX + 1]), "result", TOO_LONG),
        case("complete key missing", complete_with(|r| r.key.clear()), "key", REQUIRED),
        case("complete key with a tab", complete_with(|r| r.key = "held\t".into()), "key", MALFORMED),
        case("complete namespace bad", complete_with(|r| r.namespace = "A".into()), "namespace", MALFORMED),
        // Release.
        case("release lease_token 0", release_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("release error 1 byte over", release_with(|r| r.error = "e".repeat(ERROR_MAX + 1)), "error", TOO_LONG),
        case(
            "release error over in 2-byte chars",
            release_with(|r| r.error = "é".repeat(ERROR_MAX / 2 + 1)),
            "error",
            TOO_LONG,
        ),
        case("release key 513 bytes", release_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("release namespace bad", release_with(|r| r.namespace = ".x".into()), "namespace", MALFORMED),
        // Extend.
        case("extend lease_token 0", extend_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("extend lease 0", extend_with(|r| r.lease = raw(0, 0)), "lease", OUT_OF_RANGE),
        case("extend lease negative", extend_with(|r| r.lease = raw(-10, 0)), "lease", OUT_OF_RANGE),
        case("extend lease nanos 1e9", extend_with(|r| r.lease = raw(0, 1_000_000_000)), "lease", OUT_OF_RANGE),
        case("extend lease 1 ns above the max", extend_with(|r| r.lease = raw(120, 1)), "lease", OUT_OF_RANGE),
        case("extend key missing", extend_with(|r| r.key.clear()), "key", REQUIRED),
        // Get.
        case("get key missing", get_with(|r| r.key.clear()), "key", REQUIRED),
        case("get key 513 bytes", get_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("get key with NUL", get_with(|r| r.key = "held\0".into()), "key", MALFORMED),
        case("get namespace bad", get_with(|r| r.namespace = "a b".into()), "namespace", MALFORMED),
    ]
}

#[tokio::test]
async fn every_bad_input_is_rejected_with_its_field_and_reason_and_stores_nothing() {
    let server = start_with_small_limits().await;
    let mut client = server.idempotency();
    let store = server.store().inspect().await;
    let held = assert_acquired(&mut client, begin(HELD)).await;
    let before = record(&mut client, HELD).await;

    // Every case runs and every mismatch is reported, so that one failure
    // does not hide the next.
    let mut failures = Vec::new();
    for Case { name, call, field, reason } in bad_inputs(held.lease_token) {
        match call.send(&mut client).await {
            Ok(()) => failures.push(format!("{name}: accepted")),
            Err(status) => {
                let (got, expected) = (Rejection::of(&status), Rejection::invalid(field, reason));
                if got != expected {
                    failures.push(format!("{name}: got {got:?}, expected {expected:?} ({})", status.message()));
                }
            }
        }
        let (count, now) = (stored_count(&store).await, record(&mut client, HELD).await);
        if count != 1 || now != before {
            failures.push(format!("{name}: stored {count} records, the held one now {now:?}"));
        }
    }
    assert!(failures.is_empty(), "{} bad inputs mishandled:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test]
async fn values_exactly_at_each_limit_are_accepted() {
    let server = start_with_small_limits().await;
    let mut client = server.idempotency();

    let (namespace, key) = (format!("0{}zz", "a._-".repeat(15)), "é".repeat(256));
    assert_eq!((namespace.len(), key.len()), (63, 512));
    let begun = BeginRequest {
        namespace: namespace.clone(),
        key: key.clone(),
        fingerprint: vec![0xab; 256],
        lease: Some(duration(LEASE_MAX)),
        retention: Some(duration(RETENTION_MAX)),
    };
    let held = assert_acquired(&mut client, begun.clone()).await;
    let lease_token = held.lease_token;
    let to_extend = ExtendRequest { namespace: namespace.clone(), key: key.clone(), lease_token, lease: None };
    extend_ok(&mut client, ExtendRequest { lease: Some(duration(LEASE_MAX)), ..to_extend }).await;
    let result = vec![0xcd; RESULT_MAX];
    complete_ok(
        &mut client,
        CompleteRequest { namespace: namespace.clone(), key: key.clone(), lease_token, result: result.clone() },
    )
    .await;
    let stored = read(&mut client, GetRequest { namespace, key }).await;
    assert_eq!(
        (stored.state(), &stored.result, &stored.fingerprint),
        (RecordState::Completed, &result, &begun.fingerprint)
    );
    assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(RETENTION_MAX));
    assert_eq!(begin_ok(&mut client, begun).await.result, result);

    // An error of exactly the limit, with a NUL and non-ASCII text, is
    // recorded as given.
    let error = format!("déclinée\0{}", "x".repeat(ERROR_MAX - 11));
    assert_eq!(error.len(), ERROR_MAX);
    let held = assert_acquired(&mut client, begin("error")).await;
    release_ok(&mut client, release("error", held.lease_token, true, &error)).await;
    assert_eq!(begin_ok(&mut client, begin("error")).await.error, error);

    // The shortest lease there is.
    assert_acquired(&mut client, begin_leased("brief", Duration::from_nanos(1))).await;
    let stored = record(&mut client, "brief").await;
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.created_at), 1);
}
