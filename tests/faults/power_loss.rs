//! Power loss under SQLite, the embedded store: the sidecar runs with
//! `powercut.c` preloaded, which journals every change to the store's
//! files; each power cut is a SIGKILL followed by `journal::cut_power`,
//! which undoes whatever no fsync had made durable (in some cycles leaving
//! torn writes: random sectors of the undone writes put back), as the disk
//! of a machine that lost power could hold it. Then the sidecar restarts on
//! the same file.
//!
//! - Under load: the kill loop's 32 writers run through the cuts; every
//!   acknowledged write must be there afterwards, byte for byte, nothing
//!   twice, no record put half-applied, and `PRAGMA integrity_check` must
//!   pass after every cut.
//! - The first start: the sidecar is cut while it creates the store's file
//!   and WAL; it must start afterwards on what is left and serve.
//! - The proof that the test can fail: the same cuts with SQLite at
//!   `synchronous=NORMAL` (`--unsafe-sqlite-synchronous-normal`) must lose
//!   acknowledged writes, and the checker must see it.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use stepwell::api::pb::CheckpointRequest;
use stepwell::store::Database;

use stepwell_test_support::backend::{Backend, TestStore, backend};
use stepwell_test_support::channel::lazy_unix_channel;
use stepwell_test_support::requests::{T0, stored_states, ts};
use stepwell_test_support::rng::Rng;
use stepwell_test_support::sidecar::{SidecarProcess, SidecarProcessBuilder};

use crate::STEPWELL;
use crate::checker::{History, ReadBack};
use crate::journal::{Rolled, cut_power};
use crate::profile::{Profile, fault_rng, report};
use crate::workload::{Workload, assert_clean, settle};

/// In how many cuts out of 100 the undone writes are partly put back.
const TORN_PERCENT: u64 = 40;

/// Cuts per round of the proof: after each round the checker reads back.
const PROOF_ROUND: usize = 10;

/// Turns whose summary row is missing or disagrees with their checkpoints
/// (count, first and last timestamp), and checkpoints without a summary row.
const SUMMARIES_DISAGREEING: &str = "
    SELECT (SELECT count(*) FROM turns t
            LEFT JOIN (SELECT namespace, turn_id, count(*) AS n, min(ts_ns) AS lo, max(ts_ns) AS hi
                       FROM checkpoints GROUP BY namespace, turn_id) c USING (namespace, turn_id)
            WHERE c.n IS NULL OR c.n <> t.checkpoint_count OR c.lo <> t.first_ts_ns OR c.hi <> t.last_ts_ns)
         + (SELECT count(*) FROM (SELECT DISTINCT namespace, turn_id FROM checkpoints) c
            LEFT JOIN turns t USING (namespace, turn_id) WHERE t.turn_id IS NULL)";

/// Builds `powercut.c` with the system C compiler, once per test binary run.
fn shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| crate::build_shim("powercut", &["-ldl", "-lpthread"], "the power-loss tests")).clone()
}

/// A store whose sidecars run under the power-cut shim, and its journal
/// (in a directory of its own, outside the store's).
struct Powered {
    store: TestStore,
    path: PathBuf,
    journal: PathBuf,
    _journal_dir: tempfile::TempDir,
}

impl Powered {
    async fn new() -> Powered {
        assert_eq!(backend(), Backend::Sqlite, "power-loss tests need STEPWELL_TEST_BACKEND=sqlite");
        let store = TestStore::new().await;
        let Database::Sqlite { path } = store.database() else { panic!("an SQLite store") };
        let journal_dir = tempfile::tempdir().expect("a directory for the journal");
        let journal = journal_dir.path().join("powercut.journal");
        Powered { store, path, journal, _journal_dir: journal_dir }
    }

    /// The shim's environment.
    fn env(&self) -> [(&'static str, std::ffi::OsString); 3] {
        [
            ("LD_PRELOAD", shim().into()),
            ("STEPWELL_POWERCUT_DIR", self.store.dir().into()),
            ("STEPWELL_POWERCUT_LOG", self.journal.clone().into()),
        ]
    }

    /// A sidecar on the store, under the shim, with `flags`.
    fn sidecar(&self, flags: &[&str]) -> SidecarProcessBuilder {
        let builder = SidecarProcess::builder(STEPWELL, &self.store).name("powered").flags(flags);
        self.env().into_iter().fold(builder, |builder, (key, value)| builder.env(key, value))
    }

    /// The power cut, after the sidecar was killed.
    fn cut(&self, tearing: Option<&mut Rng>) -> Rolled {
        cut_power(&self.journal, tearing)
    }

    /// `PRAGMA integrity_check` on the store's file, with no sidecar
    /// running, and then whether every turn's summary agrees with its
    /// checkpoints (a checkpoint and its turn's row are one statement, so a
    /// cut that kept one without the other would show here): "ok" or what
    /// was wrong.
    async fn integrity(&self) -> String {
        // Read-only, so that the check leaves the WAL as the cut left it
        // (a writer would checkpoint it into the file when it closes): the
        // sidecar that starts next recovers from it itself.
        let options = SqliteConnectOptions::new().filename(&self.path).read_only(true);
        let mut conn = SqliteConnection::connect_with(&options).await.expect("open the store's file");
        let check: String =
            sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.expect("run integrity_check");
        let disagreeing: i64 = if check == "ok" {
            sqlx::query_scalar(SUMMARIES_DISAGREEING).fetch_one(&mut conn).await.expect("compare turns and checkpoints")
        } else {
            0
        };
        conn.close().await.expect("close the store's file");
        if disagreeing > 0 { format!("{disagreeing} turns disagree with their checkpoints") } else { check }
    }
}

/// What a run of power cuts did, for the report.
#[derive(Debug, Default)]
struct Tally {
    cuts: usize,
    torn_cuts: usize,
    rolled: Rolled,
    integrity_checks: usize,
}

impl Tally {
    fn add(&mut self, rolled: Rolled, torn: bool) {
        self.cuts += 1;
        self.torn_cuts += usize::from(torn);
        self.rolled.undone += rolled.undone;
        self.rolled.deleted += rolled.deleted;
        self.rolled.reapplied += rolled.reapplied;
    }

    fn figures(&self) -> serde_json::Value {
        json!({
            "power_cuts": self.cuts,
            "torn_cuts": self.torn_cuts,
            "changes_undone": self.rolled.undone,
            "files_deleted": self.rolled.deleted,
            "writes_torn_back": self.rolled.reapplied,
            "integrity_checks_ok": self.integrity_checks,
        })
    }
}

/// One power cut: SIGKILL, roll back (torn at random), check the file,
/// restart under the shim.
async fn cut_once(
    powered: &Powered,
    server: SidecarProcess,
    flags: &[&str],
    rng: &mut Rng,
    tally: &mut Tally,
) -> SidecarProcess {
    server.kill().await;
    let torn = rng.chance(TORN_PERCENT);
    let rolled = powered.cut(if torn { Some(rng) } else { None });
    tally.add(rolled, torn);
    let check = powered.integrity().await;
    assert_eq!(check, "ok", "integrity_check after power cut {} ({rolled:?})", tally.cuts);
    tally.integrity_checks += 1;
    powered.sidecar(flags).spawn().await
}

/// The workload on a fresh store through `cuts` power cuts at random
/// moments; one more cut once it stops, and then the read-back, once the
/// run's timers have fired.
async fn cuts_under_load(cuts: usize, flags: &[&str], rng: &mut Rng) -> (Arc<History>, ReadBack, Tally) {
    let profile = Profile::from_env();
    let powered = Powered::new().await;
    let mut server = powered.sidecar(flags).spawn().await;
    let socket = server.socket_path().to_owned();
    let history = Arc::new(History::default());
    let workload = Workload::start(profile.writers, rng.next_u64(), &history, || lazy_unix_channel(&socket));
    let mut tally = Tally::default();
    for _ in 0..cuts {
        // The fault schedule, not a synchronisation: how long the power stays on.
        tokio::time::sleep(rng.millis(10, 500)).await;
        let cut = Instant::now();
        server = cut_once(&powered, server, flags, rng, &mut tally).await;
        history.window(cut, Instant::now());
    }
    workload.stop().await;
    let server = cut_once(&powered, server, flags, rng, &mut tally).await;
    let read = settle(server.channel(), &history).await;
    (history, read, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_under_load_lose_and_duplicate_nothing() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    let (history, read, tally) = cuts_under_load(profile.power_cycles, &[], &mut rng).await;
    assert_clean("power loss under load", seed, &history, &read, tally.figures());
    // A shim that journalled nothing would make every cut a plain SIGKILL.
    assert!(tally.rolled.undone > 0, "no cut undid anything: the shim journalled none of the store's writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_normal_loses_acknowledged_writes_at_a_power_cut() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    let flags = ["--unsafe-sqlite-synchronous-normal"];
    let (mut cuts, mut rounds, mut ok, mut lost, mut example) = (0, 0, 0, 0, None);
    while lost == 0 && cuts < profile.power_cycles.max(PROOF_ROUND) {
        let (history, read, tally) = cuts_under_load(PROOF_ROUND, &flags, &mut rng).await;
        let verdict = history.verify(&read);
        cuts += tally.cuts;
        rounds += 1;
        ok += verdict.ok;
        lost += verdict.lost;
        example = example.or(verdict.violations.first().cloned());
    }
    report(
        "power loss, synchronous=NORMAL (must lose)",
        json!({
            "seed": seed, "rounds": rounds, "power_cuts": cuts, "acknowledged": ok, "lost": lost,
            "first_violation": example,
        }),
    );
    assert!(lost > 0, "synchronous=NORMAL lost no acknowledged write in {cuts} power cuts (seed {seed})");
}

/// Where a first-start cut landed: before the store's file existed, after
/// it but before its WAL, or after both.
#[derive(Debug, Default)]
struct Landed {
    no_file: usize,
    file_no_wal: usize,
    file_and_wal: usize,
}

/// Starts the sidecar under the shim without waiting for it to serve, lets
/// it run for `alive`, and kills it.
async fn start_and_kill(powered: &Powered, alive: Duration) {
    let socket = powered.store.dir().join("first.sock");
    let mut command = Command::new(STEPWELL);
    command
        .args(["serve", "--listen", &format!("unix:{}", socket.display()), "--database-url", &powered.store.url()])
        .env("STEPWELL_ADMIN_LISTEN", "off")
        .env("STEPWELL_LOG", "error")
        .envs(powered.env())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let mut child = command.spawn().expect("start the stepwell binary");
    // The fault schedule, not a synchronisation: how long the power stays on.
    tokio::time::sleep(alive).await;
    child.kill().expect("SIGKILL delivered");
    child.wait().expect("reap the killed sidecar");
}

/// After a first-start cut: the sidecar starts on what is left, takes a
/// checkpoint and reads it back, and the file passes `integrity_check`.
async fn assert_starts_and_serves(powered: &Powered, cycle: usize) {
    let server = SidecarProcess::builder(STEPWELL, &powered.store).name("after").spawn().await;
    let mut client = server.client();
    let state = format!("{{\"cycle\":{cycle}}}").into_bytes();
    let request = CheckpointRequest {
        turn_id: "first".into(),
        phase: "start".into(),
        timestamp: Some(ts(T0)),
        state: state.clone(),
        ..Default::default()
    };
    client.checkpoint(request).await.expect("a checkpoint after a first-start power cut");
    assert_eq!(stored_states(&mut client, "first").await, [state], "cycle {cycle}: read back");
    server.kill().await;
    assert_eq!(powered.integrity().await, "ok", "cycle {cycle}: integrity_check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_during_the_first_start_leaves_a_store_that_starts() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    // How long a first start takes under the shim bounds the cut's moment.
    let calibration = Powered::new().await;
    let started = Instant::now();
    calibration.sidecar(&[]).spawn().await.kill().await;
    let first_start = started.elapsed();
    let (mut landed, mut tally) = (Landed::default(), Tally::default());
    for cycle in 0..profile.power_cycles {
        let powered = Powered::new().await;
        // Within the first half of a start, where the file and its WAL are made.
        let alive = rng.millis(0, u64::try_from(first_start.as_millis() / 2).unwrap_or(u64::MAX).max(1));
        start_and_kill(&powered, alive).await;
        let wal = PathBuf::from(format!("{}-wal", powered.path.display()));
        match (powered.path.exists(), wal.exists()) {
            (false, _) => landed.no_file += 1,
            (true, false) => landed.file_no_wal += 1,
            (true, true) => landed.file_and_wal += 1,
        }
        let torn = rng.chance(TORN_PERCENT);
        tally.add(powered.cut(if torn { Some(&mut rng) } else { None }), torn);
        assert_starts_and_serves(&powered, cycle).await;
        tally.integrity_checks += 1;
    }
    let mut figures = tally.figures();
    figures["seed"] = json!(seed);
    figures["first_start_ms"] = json!(first_start.as_millis());
    figures["cut_before_the_file"] = json!(landed.no_file);
    figures["cut_with_the_file_before_its_wal"] = json!(landed.file_no_wal);
    figures["cut_with_the_file_and_wal"] = json!(landed.file_and_wal);
    report("power loss at first start", figures);
    assert!(landed.file_and_wal > 0, "no cut landed after the WAL existed: {landed:?}");
}
