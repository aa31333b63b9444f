//! The fault suite of stepwell: the sidecar's one promise, that an
//! acknowledged write survives anything and a write it could not make is
//! reported, tested under faults. Writers run while the sidecar is killed
//! (`kill_loop`), while Postgres crashes (`postgres_only`), while replies
//! are lost after the commit (`ambiguous`), while the disk fills or
//! fails (`sqlite_only`), and while the power is cut under SQLite
//! (`power_loss`: `powercut.c` journals the store's changes, `journal` undoes
//! what no fsync made durable); the `checker` (with `wait_checker` for waits)
//! holds every logged outcome to what the store holds afterwards. The
//! `workload` writes checkpoints, idempotent operations, records and, through
//! `waits`, waits with timers, contended Signals and Awaits. Runs once per
//! backend, one test at a time; `profile` picks the CI or the long profile.
//!
//! How a sidecar is started and which store it runs on come from the
//! `stepwell-test-support` crate (tests/support), shared with the
//! integration suite.

mod checker;
mod journal;
mod profile;
mod proxy;
mod wait_checker;
mod waits;
mod workload;

mod ambiguous;
mod kill_loop;
mod postgres_only;
mod power_loss;
mod sqlite_only;

/// The real binary, which cargo builds for this test binary; every fault
/// run kills or starts it through `SidecarProcess::builder`.
const STEPWELL: &str = env!("CARGO_BIN_EXE_stepwell");

/// Builds the LD_PRELOAD shim `tests/faults/NAME.c` with the system C
/// compiler (`CC`, or `cc`) into a temporary shared object, linked with
/// `libs`; `what` names the tests that need it, for the error.
fn build_shim(name: &str, libs: &[&str], what: &str) -> std::path::PathBuf {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/faults/{name}.c"));
    let out = std::env::temp_dir().join(format!("stepwell-{name}-{}.so", std::process::id()));
    let status = std::process::Command::new(stepwell_test_support::setting("CC").unwrap_or_else(|| "cc".into()))
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .args(libs)
        .status()
        .unwrap_or_else(|error| panic!("{what} need a C compiler (cc): install gcc ({error})"));
    assert!(status.success(), "compiling {} failed", source.display());
    out
}
