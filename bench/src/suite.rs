//! The plan of a run and how each point is measured. Per backend, in order:
//! W1 1 KB appends at each concurrency, each followed by the direct-SQL
//! baseline (a) and, on Postgres, pgbench (b) at the same concurrency (so
//! slow drifts of the machine hit all three alike); then the W1 variants
//! (200 B, 20 KB, 10% duplicate retries), W1 at a fixed rate of half the
//! 64-caller throughput, W2 restores, W3 idempotency; then W1 appends at a
//! fixed rate beside a DeleteTurn of a large turn, and without it.
//!
//! Each point and its baselines run `rounds` times, interleaved round by
//! round (stepwell, its baselines; stepwell, its baselines; ...), so that a
//! ratio can be taken per round under the same swings of the machine; the
//! rows of a point's rounds are combined into one at the end (`report`).
//!
//! Every point gets a fresh store (an SQLite file in the run's temporary
//! directory, or a new database on the Postgres server), removed once the
//! point is measured, and every stepwell point its own sidecar process, so
//! points do not inherit each other's data, and the sidecar's CPU and the
//! store's size belong to that point alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::direct::{DirectInsert, DirectRead, POSTGRES_IDEMPOTENCY_SCHEMA, POSTGRES_SCHEMA};
use crate::load::{Pace, Window, Workload, drive, run_all};
use crate::meter::Meters;
use crate::payload::Payloads;
use crate::pgbench;
use crate::report::{Backend, Point, Row, System, combine_rounds, median, relate_to_floor};
use crate::shape::{self, DirectSqlite};
use crate::sidecar::{Address, Sidecar};
use crate::stores::{
    Database, PgServer, SqliteFiles, lsn, pg_execute, pg_footprint, pg_idempotency_counts, remove_sqlite,
    sqlite_footprint, sqlite_truncate_wal,
};
use crate::workloads::{self, Append, BeginComplete, FillTurn, NAMESPACE, Restore, TURN_LENGTH};
use stepwell::api::pb::DeleteTurnRequest;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;

/// How long and how wide a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every workload once, about a second each, at 64 callers: a check, not a measurement.
    Smoke,
    /// Every point, short windows, 1 round: about three to four minutes.
    Quick,
    /// Every point, 2 s warm-up and 6 s windows, 3 rounds: about 27 minutes.
    Full,
}

/// What a mode measures.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// How many times each point and its baselines run, interleaved.
    pub rounds: usize,
    pub warmup_s: f64,
    pub measure_s: f64,
    /// Concurrencies of the W1 1 KB series and its baselines.
    pub callers: Vec<usize>,
    /// W2: turns of 100 checkpoints written per populating caller.
    pub restore_turns_per_caller: u64,
    /// The delete point: checkpoints of the turn deleted.
    pub delete_turn_checkpoints: u64,
    /// Concurrencies of W2 restore and its direct-read baseline.
    pub restore_callers: Vec<usize>,
    /// Concurrencies of W1 1 KB over a Unix socket.
    pub unix_callers: Vec<usize>,
}

impl Mode {
    pub fn plan(self) -> Plan {
        match self {
            Mode::Smoke => Plan {
                rounds: 1,
                warmup_s: 0.2,
                measure_s: 0.6,
                callers: vec![64],
                restore_turns_per_caller: 1,
                delete_turn_checkpoints: 5_000,
                restore_callers: vec![RESTORE_CALLERS],
                unix_callers: vec![WIDE],
            },
            Mode::Quick => Plan {
                rounds: 1,
                warmup_s: 1.0,
                measure_s: 2.0,
                callers: vec![1, 16, 64, 256],
                restore_turns_per_caller: 2,
                delete_turn_checkpoints: 100_000,
                restore_callers: vec![RESTORE_CALLERS, 1],
                unix_callers: vec![1, WIDE],
            },
            Mode::Full => Plan {
                rounds: 3,
                warmup_s: 2.0,
                measure_s: 6.0,
                callers: vec![1, 16, 64, 256],
                restore_turns_per_caller: 8,
                delete_turn_checkpoints: 100_000,
                restore_callers: vec![RESTORE_CALLERS, 1],
                unix_callers: vec![1, WIDE],
            },
        }
    }
}

impl Plan {
    fn window(&self) -> Window {
        Window { warmup: Duration::from_secs_f64(self.warmup_s), measure: Duration::from_secs_f64(self.measure_s) }
    }
}

/// Callers of the W1 variants and of W3.
const WIDE: usize = 64;
/// Callers of W2 (and its 1-caller row).
const RESTORE_CALLERS: usize = 16;
/// The series of W1 1 KB appends over a Unix socket.
const UNIX_SERIES: &str = "w1-1kb-unix";
/// Callers that fill the store W2 restores from.
const POPULATE_CALLERS: usize = 64;
/// The fixed-rate point runs at this share of the 64-caller closed-loop throughput.
const FIXED_RATE_SHARE: f64 = 0.5;
/// The delete point: W1 appends at this fixed rate, over `DELETE_LANES` callers.
const DELETE_POINT_RATE: f64 = 1000.0;
const DELETE_LANES: usize = 16;
/// Most outstanding calls of the fixed-rate point.
const FIXED_MAX_IN_FLIGHT: usize = 4096;
/// Without pg_waldump: WAL a Postgres server may write on its own
/// (checkpointer, bgwriter records) while W3's repeated Begins run, and
/// still count as "nothing"; a single committed write per Begin would be
/// over 100 bytes each.
const PG_BACKGROUND_WAL_BYTES: u64 = 1024;
/// How many WAL records of the pairs phase the control reads.
const WAL_CONTROL_RECORDS: u64 = 10_000;

/// Whether an `--only` entry picks the point `id`: an entry ending in `$`
/// must end the id, so that `w1-1kb/c1$` is not also `w1-1kb/c16`; any
/// other must occur in it.
fn selects(only: &str, id: &str) -> bool {
    match only.strip_suffix('$') {
        Some(end) => id.ends_with(end),
        None => id.contains(only),
    }
}

/// What the suite needs from the command line.
pub struct Settings {
    pub mode: Mode,
    pub stepwell: PathBuf,
    pub pg_bindir: Option<PathBuf>,
    pub backends: Vec<Backend>,
    /// Only points whose id contains one of these.
    pub only: Vec<String>,
    /// Rounds instead of the mode's.
    pub rounds: Option<usize>,
}

/// A store under test.
enum Store {
    Sqlite(PathBuf),
    Postgres(Database),
}

impl Store {
    fn url(&self) -> String {
        match self {
            Store::Sqlite(path) => format!("sqlite://{}", path.display()),
            Store::Postgres(database) => database.url.clone(),
        }
    }
}

pub struct Suite {
    settings: Settings,
    plan: Plan,
    dir: PathBuf,
    pg: Option<PgServer>,
    pub rows: Vec<Row>,
    started: Instant,
    /// The round running, from 1.
    round: usize,
}

/// An error that stops a point, as text for its row.
type Fallible<T> = Result<T, String>;

impl Suite {
    pub fn new(settings: Settings, dir: &Path, pg: Option<PgServer>) -> Suite {
        let mut plan = settings.mode.plan();
        if let Some(rounds) = settings.rounds {
            plan.rounds = rounds.max(1);
        }
        Suite { settings, plan, dir: dir.to_owned(), pg, rows: Vec::new(), started: Instant::now(), round: 1 }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs every planned point, each with its baselines for every round
    /// in turn, recording a row for each round, and combines each point's
    /// rounds into one row at the end.
    pub async fn run(&mut self) {
        let rounds = 1..=self.plan.rounds;
        for backend in self.settings.backends.clone() {
            for callers in self.plan.callers.clone() {
                for round in rounds.clone() {
                    self.round = round;
                    self.append(backend, "w1-1kb", 1024, callers, 0, None).await;
                    self.direct(backend, callers).await;
                    if backend == Backend::Postgres {
                        self.pgbench(callers).await;
                    }
                    self.floor(backend, "w1-1kb", callers).await;
                }
            }
            for callers in self.plan.unix_callers.clone() {
                for round in rounds.clone() {
                    self.round = round;
                    self.append(backend, UNIX_SERIES, 1024, callers, 0, None).await;
                }
            }
            for (series, size, duplicate_percent) in
                [("w1-200b", 200, 0), ("w1-20kb", 20 * 1024, 0), ("w1-dup10", 1024, 10)]
            {
                for round in rounds.clone() {
                    self.round = round;
                    self.append(backend, series, size, WIDE, duplicate_percent, None).await;
                }
            }
            let base: Vec<f64> = self
                .rows
                .iter()
                .filter(|r| {
                    r.backend == backend
                        && r.system == System::Stepwell
                        && r.series == "w1-1kb"
                        && r.callers == WIDE
                        && r.pace == "closed"
                })
                .map(|r| r.throughput_per_s)
                .collect();
            let rate = median(&base).map_or(1000.0, |t| (t * FIXED_RATE_SHARE).max(10.0)).round();
            for round in rounds.clone() {
                self.round = round;
                self.append(backend, "w1-1kb", 1024, WIDE, 0, Some(rate)).await;
            }
            for round in rounds.clone() {
                self.round = round;
                self.restore(backend).await;
            }
            for round in rounds.clone() {
                self.round = round;
                self.idempotency(backend).await;
                if backend == Backend::Postgres {
                    self.pgbench_pairs(WIDE).await;
                }
                self.floor(backend, "w3-pairs", WIDE).await;
            }
            for round in rounds.clone() {
                self.round = round;
                self.beside_delete(backend).await;
            }
        }
        self.rows = combine_rounds(std::mem::take(&mut self.rows));
        relate_to_floor(&mut self.rows);
    }

    fn selected(&self, point: &Point) -> bool {
        let id = point.id();
        self.settings.only.is_empty() || self.settings.only.iter().any(|only| selects(only, &id))
    }

    /// Records a row, printing a line of progress.
    fn record(&mut self, row: Row) {
        let cpu = row.server_cpu_us_per_op.map_or(String::new(), |c| format!(", server {c:.1} µs/op"));
        let problem = row.first_problem.as_ref().map_or(String::new(), |p| format!("  PROBLEM: {p}"));
        eprintln!(
            "[{:>4.0}s] {}{:<44} {:>8.0}/s  p50 {:>7.3} ms  p99 {:>7.3} ms{cpu}{problem}",
            self.started.elapsed().as_secs_f64(),
            if self.plan.rounds > 1 { format!("round {}/{} ", self.round, self.plan.rounds) } else { String::new() },
            row.id,
            row.throughput_per_s,
            row.latency.p50_ms,
            row.latency.p99_ms,
        );
        self.rows.push(row);
    }

    fn point(series: &'static str, workload: String, backend: Backend, system: System, callers: usize) -> Point {
        Point { series, workload, backend, system, callers, pace: "closed".into() }
    }

    fn pg(&self) -> Fallible<&PgServer> {
        self.pg.as_ref().ok_or_else(|| "no Postgres server (set STEPWELL_TEST_POSTGRES_URL or use bench/run)".into())
    }

    async fn fresh_store(&self, backend: Backend, label: &str) -> Fallible<Store> {
        match backend {
            Backend::Sqlite => Ok(Store::Sqlite(self.dir.join(format!("{}.db", file_name(label))))),
            Backend::Postgres => Ok(Store::Postgres(self.pg()?.fresh_database(label).await?)),
        }
    }

    /// Runs `measure` on a fresh store named after `label`, then removes the
    /// store: a dropped database leaves autovacuum nothing to do in later
    /// points, and removed files keep the disk from filling up.
    async fn with_fresh_store<R>(
        &self,
        backend: Backend,
        label: &str,
        measure: impl AsyncFnOnce(&Store) -> Fallible<R>,
    ) -> Fallible<R> {
        let store = self.fresh_store(backend, label).await?;
        let result = measure(&store).await;
        let removed = match &store {
            Store::Sqlite(path) => remove_sqlite(path),
            Store::Postgres(database) => self.pg()?.drop_database(database).await,
        };
        if let Err(why) = removed {
            eprintln!("warning: could not remove the store of {label}: {why}");
        }
        result
    }

    /// What to meter for a point on `backend` (the Postgres server only for Postgres rows).
    fn meters(&self, backend: Backend, sidecar: Option<u32>) -> Meters {
        let postgres = self.pg.as_ref().and_then(|pg| pg.postmaster).filter(|_| backend == Backend::Postgres);
        Meters { sidecar, postgres, external_load: None }
    }

    /// A sidecar on `store` and connections to it for `callers` callers.
    async fn sidecar(&self, store: &Store, label: &str, callers: usize) -> Fallible<(Sidecar, Vec<Channel>)> {
        let log = self.dir.join(format!("{}.log", file_name(label)));
        let sidecar = Sidecar::start(&self.settings.stepwell, &store.url(), &log).await?;
        let channels = sidecar.connect(shape::get().connections(callers)).await?;
        Ok((sidecar, channels))
    }

    /// A sidecar on `store` listening on a Unix socket, and connections to it for `callers` callers.
    async fn unix_sidecar(&self, store: &Store, label: &str, callers: usize) -> Fallible<(Sidecar, Vec<Channel>)> {
        let log = self.dir.join(format!("{}.log", file_name(label)));
        let socket = Address::Unix(self.dir.join(format!("{}.sock", file_name(label))));
        let sidecar = Sidecar::start_on(&self.settings.stepwell, &store.url(), &log, socket).await?;
        let channels = sidecar.connect(shape::get().connections(callers)).await?;
        Ok((sidecar, channels))
    }

    /// W1: appends of `size`-byte states; `rate` makes it fixed-rate.
    async fn append(
        &mut self,
        backend: Backend,
        series: &'static str,
        size: usize,
        callers: usize,
        duplicate_percent: u64,
        rate: Option<f64>,
    ) {
        let mut workload = format!("W1 append {}", human_size(size));
        if series == UNIX_SERIES {
            workload.push_str(" over a Unix socket");
        }
        if duplicate_percent > 0 {
            workload.push_str(&format!(", {duplicate_percent}% duplicate retries"));
        }
        let mut point = Self::point(series, workload, backend, System::Stepwell, callers);
        let pace = match rate {
            Some(rate) => {
                point.pace = format!("fixed {rate:.0}/s");
                Pace::Fixed { rate, lanes: callers, max_in_flight: FIXED_MAX_IN_FLIGHT }
            }
            None => Pace::Closed { callers },
        };
        if !self.selected(&point) {
            return;
        }
        let measure = async |store: &Store| self.measure_append(&point, store, size, duplicate_percent, pace).await;
        let row = self.with_fresh_store(backend, &point.id(), measure).await;
        self.record(row.unwrap_or_else(|why| point.failed(why)));
    }

    async fn measure_append(
        &self,
        point: &Point,
        store: &Store,
        size: usize,
        duplicate_percent: u64,
        pace: Pace,
    ) -> Fallible<Row> {
        let unix = point.series == UNIX_SERIES;
        let (sidecar, channels) = if unix {
            self.unix_sidecar(store, &point.id(), point.callers).await?
        } else {
            self.sidecar(store, &point.id(), point.callers).await?
        };
        let payloads = Arc::new(Payloads::new(size));
        let workload = Append { channels, run: "w1".into(), payloads, duplicate_percent };
        let measured =
            drive(Arc::new(workload), pace, self.plan.window(), self.meters(point.backend, sidecar.pid())).await;
        let mut row = point.row(&measured, false);
        if duplicate_percent > 0 {
            row.extra.insert("duplicate_retry_percent".into(), duplicate_percent.into());
        }
        if unix {
            row.notes
                .push("the sidecar listens on a Unix socket (--listen unix:PATH); the client dials the path".into());
        }
        if let Pace::Fixed { rate, .. } = pace {
            row.extra.insert("target_rate_per_s".into(), rate.into());
            row.notes.push(format!(
                "open loop at {rate:.0}/s ({:.0}% of the 64-caller closed-loop rate); latency from each call's intended send time",
                FIXED_RATE_SHARE * 100.0
            ));
        }
        self.footprint(store, &mut row).await;
        stop(sidecar, &mut row).await;
        Ok(row)
    }

    /// Stores the bytes per checkpoint of `store` into `row`.
    async fn footprint(&self, store: &Store, row: &mut Row) {
        let measured = match store {
            Store::Sqlite(path) => sqlite_footprint(path).await.map(|f| {
                row.extra.insert("sqlite_files".into(), json!(f));
                (f.checkpointed.total(), f.checkpoints)
            }),
            Store::Postgres(database) => pg_footprint(&database.url).await.map(|(count, bytes)| {
                row.extra.insert("postgres_relation_bytes".into(), bytes.into());
                (bytes as u64, count)
            }),
        };
        match measured {
            Ok((bytes, count)) if count > 0 => {
                row.disk_bytes_per_checkpoint = Some(bytes as f64 / count as f64);
                row.extra.insert("checkpoints_stored".into(), count.into());
            }
            Ok(_) => {}
            Err(why) => row.notes.push(format!("size on disk not measured: {why}")),
        }
    }

    /// Baseline (a): one INSERT per transaction from sqlx.
    async fn direct(&mut self, backend: Backend, callers: usize) {
        let point = Self::point("w1-1kb", "W1 append 1 KB".into(), backend, System::Direct, callers);
        if !self.selected(&point) {
            return;
        }
        let row = self
            .with_fresh_store(backend, &point.id(), async |store: &Store| self.measure_direct(&point, store).await)
            .await;
        self.record(row.unwrap_or_else(|why| point.failed(why)));
    }

    async fn measure_direct(&self, point: &Point, store: &Store) -> Fallible<Row> {
        let payloads = Arc::new(Payloads::new(1024));
        let direct = Arc::new(match store {
            Store::Sqlite(path) => match shape::get().direct_sqlite {
                DirectSqlite::Sqlx => DirectInsert::sqlite(path, "w1".into(), payloads).await?,
                DirectSqlite::Rusqlite => DirectInsert::rusqlite(path, "w1".into(), payloads)?,
            },
            Store::Postgres(database) => {
                DirectInsert::postgres(&database.url, point.callers as u32, "w1".into(), payloads).await?
            }
        });
        let in_process = point.backend == Backend::Sqlite;
        let workload: Arc<dyn Workload> = direct.clone();
        let measured = drive(
            workload,
            Pace::Closed { callers: point.callers },
            self.plan.window(),
            self.meters(point.backend, None),
        )
        .await;
        let mut row = point.row(&measured, in_process);
        row.notes.push(if in_process {
            match shape::get().direct_sqlite {
                DirectSqlite::Sqlx => "server CPU is this process's: sqlx and SQLite run inside the load generator \
                                       (one writer connection)"
                    .into(),
                DirectSqlite::Rusqlite => "server CPU is this process's: one rusqlite connection inside the load \
                                           generator, owned by a writer thread, one transaction per insert"
                    .into(),
            }
        } else {
            format!("sqlx pool of {} connections, synchronous_commit=on", point.callers)
        });
        self.footprint(store, &mut row).await;
        direct.close().await;
        Ok(row)
    }

    /// Baseline (b): pgbench with the same insert.
    async fn pgbench(&mut self, clients: usize) {
        let point = Self::point("w1-1kb", "W1 append 1 KB".into(), Backend::Postgres, System::Pgbench, clients);
        if !self.selected(&point) {
            return;
        }
        let measure = async |store: &Store| self.measure_pgbench(&point, store).await;
        let row = self.with_fresh_store(Backend::Postgres, &point.id(), measure).await;
        self.record(row.unwrap_or_else(|why| point.failed(why)));
    }

    async fn measure_pgbench(&self, point: &Point, store: &Store) -> Fallible<Row> {
        let bindir = self.settings.pg_bindir.as_ref().ok_or("pgbench needs --pg-bindir")?;
        let label = point.id();
        pg_execute(&store.url(), POSTGRES_SCHEMA).await?;
        let payload = Payloads::new(1024).get(0, 0).to_vec();
        let payload = std::str::from_utf8(&payload).map_err(|e| e.to_string())?;
        let dir = self.dir.join(file_name(&label));
        let (measured, summary) = pgbench::run(
            bindir,
            &store.url(),
            point.callers,
            self.plan.window(),
            self.meters(Backend::Postgres, None),
            &dir,
            pgbench::insert(payload),
        )
        .await?;
        let mut row = point.row(&measured, false);
        row.notes.push("latency from pgbench's per-transaction log (-l), same window as the other rows".into());
        row.extra.insert("pgbench".into(), json!(summary));
        self.footprint(store, &mut row).await;
        Ok(row)
    }

    /// W2: fill a store with whole turns, restore them through the sidecar
    /// at each planned concurrency, then read the same turns directly.
    async fn restore(&mut self, backend: Backend) {
        let workload = "W2 restore 100 × 1 KB";
        let mut points = Vec::new();
        for system in [System::Stepwell, System::Direct] {
            for &callers in &self.plan.restore_callers {
                points.push(Self::point("w2-restore", workload.into(), backend, system, callers));
            }
        }
        points.retain(|point| self.selected(point));
        let Some(first) = points.first() else { return };
        let label = first.id();
        let measure = async |store: &Store| self.measure_restore(&points, store).await;
        match self.with_fresh_store(backend, &label, measure).await {
            Ok(rows) => rows.into_iter().for_each(|row| self.record(row)),
            Err(why) => {
                for point in &points {
                    self.record(point.failed(why.clone()));
                }
            }
        }
    }

    async fn measure_restore(&self, points: &[Point], store: &Store) -> Fallible<Vec<Row>> {
        let (sidecar, channels) = self.sidecar(store, &points[0].id(), POPULATE_CALLERS).await?;
        let turns = self.plan.restore_turns_per_caller;
        let fill = Append {
            channels: channels.clone(),
            run: "w2".into(),
            payloads: Arc::new(Payloads::new(1024)),
            duplicate_percent: 0,
        };
        let filling = Instant::now();
        run_all(Arc::new(fill), POPULATE_CALLERS, turns * TURN_LENGTH)
            .await
            .map_err(|f| format!("populating: {f:?}"))?;
        let filled_in = filling.elapsed().as_secs_f64();
        let populated = POPULATE_CALLERS as u64 * turns;
        let note = |row: &mut Row| {
            row.extra.insert("turns_populated".into(), populated.into());
            row.extra.insert("populate_seconds".into(), filled_in.into());
            row.notes.push(format!(
                "{populated} turns of {TURN_LENGTH} × 1 KB written first through the sidecar ({} checkpoints in \
                 {filled_in:.1} s); each call reads a random whole turn",
                populated * TURN_LENGTH
            ));
        };
        let mut rows = Vec::new();
        for point in points.iter().filter(|p| p.system == System::Stepwell) {
            let restore = Restore {
                channels: channels.clone(),
                run: "w2".into(),
                callers: POPULATE_CALLERS,
                turns_per_caller: turns,
            };
            let pace = Pace::Closed { callers: point.callers };
            let measured =
                drive(Arc::new(restore), pace, self.plan.window(), self.meters(point.backend, sidecar.pid())).await;
            let mut row = point.row(&measured, false);
            note(&mut row);
            row.notes.push("one page of 100 (page_size 100) per Restore".into());
            rows.push(row);
        }
        // The sidecar stops before the direct reads, which then have the store to themselves.
        if let Err(why) = sidecar.stop().await {
            match rows.last_mut() {
                Some(row) => {
                    row.errors += 1;
                    row.first_problem.get_or_insert(why);
                }
                None => return Err(why),
            }
        }
        for point in points.iter().filter(|p| p.system == System::Direct) {
            let connections = point.callers as u32;
            let direct = Arc::new(match store {
                Store::Sqlite(path) => {
                    DirectRead::sqlite(path, connections, "w2".into(), (POPULATE_CALLERS, turns)).await?
                }
                Store::Postgres(database) => {
                    DirectRead::postgres(&database.url, connections, "w2".into(), (POPULATE_CALLERS, turns)).await?
                }
            });
            let in_process = point.backend == Backend::Sqlite;
            let workload: Arc<dyn Workload> = direct.clone();
            let pace = Pace::Closed { callers: point.callers };
            let measured = drive(workload, pace, self.plan.window(), self.meters(point.backend, None)).await;
            let mut row = point.row(&measured, in_process);
            note(&mut row);
            row.notes.push(if in_process {
                "sqlx reads in the load generator, one read-only connection per caller: SELECT … ORDER BY ts_ns, seq \
                 LIMIT 101, every column decoded; server CPU is this process's"
                    .into()
            } else {
                "sqlx pool of one connection per caller: SELECT … ORDER BY ts_ns, seq LIMIT 101, every column decoded"
                    .into()
            });
            direct.close().await;
            rows.push(row);
        }
        Ok(rows)
    }

    /// The floor: the same workload against a tonic server answering fixed
    /// OK responses with no store (`floor::NoOp`), in a process of its own.
    async fn floor(&mut self, backend: Backend, series: &'static str, callers: usize) {
        let workload = if series == "w3-pairs" { "W3 Begin→Complete pair" } else { "W1 append 1 KB" };
        let point = Self::point(series, workload.into(), backend, System::Floor, callers);
        if !self.selected(&point) {
            return;
        }
        let row = self.measure_floor(&point).await;
        self.record(row.unwrap_or_else(|why| point.failed(why)));
    }

    async fn measure_floor(&self, point: &Point) -> Fallible<Row> {
        let log = self.dir.join(format!("{}.log", file_name(&point.id())));
        let server = Sidecar::start_floor(&log).await?;
        let channels = server.connect(shape::get().connections(point.callers)).await?;
        let workload: Arc<dyn Workload> = if point.series == "w3-pairs" {
            Arc::new(BeginComplete::new(channels, "floor".into(), point.callers))
        } else {
            Arc::new(Append {
                channels,
                run: "floor".into(),
                payloads: Arc::new(Payloads::new(1024)),
                duplicate_percent: 0,
            })
        };
        let meters = Meters { sidecar: server.pid(), ..Meters::default() };
        let measured = drive(workload, Pace::Closed { callers: point.callers }, self.plan.window(), meters).await;
        let mut row = point.row(&measured, false);
        row.notes.push(
            "no store: stepwell-bench floor-server, a tonic server answering the same services with fixed OK \
             responses, in its own process, over the same TCP loopback and connections; server CPU and context \
             switches are its own"
                .into(),
        );
        stop(server, &mut row).await;
        Ok(row)
    }

    /// Baseline (b) of W3: pgbench running Begin→Complete's pair of statements.
    async fn pgbench_pairs(&mut self, clients: usize) {
        let point =
            Self::point("w3-pairs", "W3 Begin→Complete pair".into(), Backend::Postgres, System::Pgbench, clients);
        if !self.selected(&point) {
            return;
        }
        let measure = async |store: &Store| self.measure_pgbench_pairs(&point, store).await;
        let row = self.with_fresh_store(Backend::Postgres, &point.id(), measure).await;
        self.record(row.unwrap_or_else(|why| point.failed(why)));
    }

    async fn measure_pgbench_pairs(&self, point: &Point, store: &Store) -> Fallible<Row> {
        let bindir = self.settings.pg_bindir.as_ref().ok_or("pgbench needs --pg-bindir")?;
        pg_execute(&store.url(), POSTGRES_IDEMPOTENCY_SCHEMA).await?;
        let dir = self.dir.join(file_name(&point.id()));
        let result = String::from_utf8(workloads::receipt("pgbench")).map_err(|e| e.to_string())?;
        let script = (pgbench::PAIR_SCRIPT, vec![("result", result)]);
        let meters = self.meters(Backend::Postgres, None);
        let (measured, summary) =
            pgbench::run(bindir, &store.url(), point.callers, self.plan.window(), meters, &dir, script).await?;
        let mut row = point.row(&measured, false);
        row.notes.push(
            "one op = an insert-or-select of a new key (lease token from stepwell's sequence) then an update of its \
             result, each committed on its own; latency from pgbench's per-transaction log (-l)"
                .into(),
        );
        row.extra.insert("pgbench".into(), json!(summary));
        // Every pair must have completed its key; only pairs cut off when
        // pgbench's time ran out may have left one begun.
        let (keys, completed) = pg_idempotency_counts(&store.url()).await?;
        row.extra.insert("keys".into(), keys.into());
        row.extra.insert("keys_completed".into(), completed.into());
        if completed == 0 || keys - completed > point.callers as i64 {
            row.check_failures += 1;
            row.first_problem.get_or_insert(format!("pgbench's pairs completed {completed} of {keys} keys"));
        }
        Ok(row)
    }

    /// W1 appends at a fixed rate, first alone, then while a DeleteTurn of
    /// a large turn runs: whether a delete holds up the other turns' writes.
    async fn beside_delete(&mut self, backend: Backend) {
        let workload = format!("W1 append 1 KB at {DELETE_POINT_RATE:.0}/s");
        let mut idle = Self::point("w1-beside-idle", workload.clone(), backend, System::Stepwell, DELETE_LANES);
        let mut deleting = Self::point("w1-beside-delete", workload, backend, System::Stepwell, DELETE_LANES);
        for point in [&mut idle, &mut deleting] {
            point.pace = format!("fixed {DELETE_POINT_RATE:.0}/s");
        }
        if !self.selected(&idle) && !self.selected(&deleting) {
            return;
        }
        let measure = async |store: &Store| self.measure_beside_delete(&idle, &deleting, store).await;
        match self.with_fresh_store(backend, &deleting.id(), measure).await {
            Ok(rows) => rows.into_iter().for_each(|row| self.record(row)),
            Err(why) => {
                self.record(idle.failed(why.clone()));
                self.record(deleting.failed(why));
            }
        }
    }

    async fn measure_beside_delete(&self, idle: &Point, deleting: &Point, store: &Store) -> Fallible<Vec<Row>> {
        let (sidecar, channels) = self.sidecar(store, &deleting.id(), POPULATE_CALLERS).await?;
        let big = self.plan.delete_turn_checkpoints;
        let payloads = Arc::new(Payloads::new(1024));
        let fill = FillTurn {
            channels: channels.clone(),
            turn_id: "delete-big".into(),
            callers: POPULATE_CALLERS,
            payloads: payloads.clone(),
        };
        run_all(Arc::new(fill), POPULATE_CALLERS, big.div_ceil(POPULATE_CALLERS as u64))
            .await
            .map_err(|f| format!("filling the turn to delete: {f:?}"))?;
        let filled = big.div_ceil(POPULATE_CALLERS as u64) * POPULATE_CALLERS as u64;
        let pace = Pace::Fixed { rate: DELETE_POINT_RATE, lanes: DELETE_LANES, max_in_flight: FIXED_MAX_IN_FLIGHT };
        let meters = self.meters(deleting.backend, sidecar.pid());
        let appends = |run: &str| Append {
            channels: channels[..DELETE_LANES.min(channels.len())].to_vec(),
            run: run.into(),
            payloads: payloads.clone(),
            duplicate_percent: 0,
        };

        let measured = drive(Arc::new(appends("idle")), pace, self.plan.window(), meters).await;
        let mut idle_row = idle.row(&measured, false);
        idle_row.notes.push(format!("beside a turn of {filled} checkpoints, not deleted"));

        // The delete starts as the window opens, on a connection of its own.
        let window = self.plan.window();
        let mut client = CheckpointServiceClient::new(channels[channels.len() - 1].clone());
        let delete = tokio::spawn(async move {
            tokio::time::sleep(window.warmup).await;
            let started = Instant::now();
            let request =
                DeleteTurnRequest { namespace: NAMESPACE.into(), turn_id: "delete-big".into(), include_records: false };
            let answer = client.delete_turn(request).await;
            (answer, started.elapsed())
        });
        let measured = drive(Arc::new(appends("beside")), pace, window, meters).await;
        let (answer, took) = delete.await.map_err(|e| format!("the delete's task: {e}"))?;
        let deleted = answer.map_err(|s| format!("DeleteTurn: {:?}: {}", s.code(), s.message()))?.into_inner().deleted;
        let mut row = deleting.row(&measured, false);
        if deleted != filled {
            row.check_failures += 1;
            row.first_problem.get_or_insert(format!("DeleteTurn deleted {deleted} checkpoints, not {filled}"));
        }
        let within = took <= window.measure;
        row.extra.insert("delete_checkpoints".into(), deleted.into());
        row.extra.insert("delete_ms".into(), (took.as_secs_f64() * 1000.0).into());
        row.notes.push(format!(
            "a DeleteTurn of {deleted} checkpoints ran from the window's start for {:.0} ms ({} the {:.0} s window)",
            took.as_secs_f64() * 1000.0,
            if within { "within" } else { "longer than" },
            window.measure.as_secs_f64()
        ));
        stop(sidecar, &mut row).await;
        Ok(vec![idle_row, row])
    }

    /// W3: Begin→Complete pairs on new keys, then Begins on the completed keys.
    async fn idempotency(&mut self, backend: Backend) {
        let pairs = Self::point("w3-pairs", "W3 Begin→Complete pair".into(), backend, System::Stepwell, WIDE);
        let repeats = Self::point("w3-repeat", "W3 Begin on a completed key".into(), backend, System::Stepwell, WIDE);
        if !self.selected(&pairs) && !self.selected(&repeats) {
            return;
        }
        let measure = async |store: &Store| self.measure_idempotency(&pairs, &repeats, store).await;
        match self.with_fresh_store(backend, &pairs.id(), measure).await {
            Ok(rows) => rows.into_iter().for_each(|row| self.record(row)),
            Err(why) => {
                self.record(pairs.failed(why.clone()));
                self.record(repeats.failed(why));
            }
        }
    }

    async fn measure_idempotency(
        &self,
        pairs_point: &Point,
        repeat_point: &Point,
        store: &Store,
    ) -> Fallible<Vec<Row>> {
        let (sidecar, channels) = self.sidecar(store, &pairs_point.id(), WIDE).await?;
        let meters = self.meters(pairs_point.backend, sidecar.pid());
        let pace = Pace::Closed { callers: WIDE };

        let pairs_started = self.write_marker(store).await?;
        let pairs = Arc::new(BeginComplete::new(channels, "w3".into(), WIDE));
        let workload: Arc<dyn Workload> = pairs.clone();
        let measured = drive(workload, pace, self.plan.window(), meters).await;
        let mut pairs_row = pairs_point.row(&measured, false);
        pairs_row.notes.push("one op = Begin (ACQUIRED) then Complete of a new key".into());

        let repeats = pairs.repeats();
        let keys = repeats.keys();
        let pairs_wal = (pairs_started, self.write_marker(store).await?);
        self.quiesce(store).await?;
        let before = self.write_marker(store).await?;
        let measured = drive(Arc::new(repeats), pace, self.plan.window(), meters).await;
        let after = self.write_marker(store).await?;
        let mut repeat_row = repeat_point.row(&measured, false);
        repeat_row.extra.insert("completed_keys".into(), keys.into());
        let (wrote_nothing, evidence) = self.judge_writes(store, pairs_wal, (before, after), &mut repeat_row).await;
        repeat_row.extra.insert("wrote_nothing".into(), Value::Bool(wrote_nothing));
        repeat_row.extra.insert("write_evidence".into(), evidence.clone().into());
        repeat_row.notes.push(evidence.clone());
        if !wrote_nothing {
            repeat_row.check_failures += 1;
            repeat_row.first_problem.get_or_insert(format!("repeated Begins wrote to the store? {evidence}"));
        }

        stop(sidecar, &mut repeat_row).await;
        Ok(vec![pairs_row, repeat_row])
    }

    /// Settles the store so that reads leave no trace: SQLite's WAL is
    /// emptied into the database (so any commit would grow it again), and
    /// the Postgres database is vacuumed and analysed (so no later read
    /// prunes pages, and autovacuum has nothing left to do there).
    async fn quiesce(&self, store: &Store) -> Fallible<()> {
        match store {
            Store::Sqlite(path) => sqlite_truncate_wal(path).await.map(|_| ()),
            Store::Postgres(database) => pg_execute(&database.url, "VACUUM (ANALYZE)").await,
        }
    }

    /// Decides whether anything was written between the markers of
    /// `window`, and says why. SQLite: the WAL, emptied before, must still
    /// be empty and the database file unchanged. Postgres: no WAL record in
    /// the window may change the database's own relations (`pg_waldump`),
    /// while the pairs phase, as a control, must show such records; without
    /// `pg_waldump`, the server's whole WAL may grow by at most
    /// `PG_BACKGROUND_WAL_BYTES`.
    async fn judge_writes(
        &self,
        store: &Store,
        pairs: (WriteMarker, WriteMarker),
        window: (WriteMarker, WriteMarker),
        row: &mut Row,
    ) -> (bool, String) {
        match (store, pairs, window) {
            (Store::Sqlite(_), _, (WriteMarker::Sqlite(before), WriteMarker::Sqlite(after))) => (
                before == after && after.wal == 0,
                format!("SQLite db {} → {} B, WAL {} → {} B", before.db, after.db, before.wal, after.wal),
            ),
            (
                Store::Postgres(database),
                (WriteMarker::Postgres(pairs_from), WriteMarker::Postgres(pairs_to)),
                (WriteMarker::Postgres(from), WriteMarker::Postgres(to)),
            ) => {
                let grew = to.saturating_sub(from);
                row.extra.insert("wal_lsn_before".into(), lsn(from).into());
                row.extra.insert("wal_lsn_after".into(), lsn(to).into());
                let counted = match (self.pg(), &self.settings.pg_bindir) {
                    (Ok(pg), Some(bindir)) => {
                        let control =
                            pg.wal_records(bindir, database, (pairs_from, pairs_to), Some(WAL_CONTROL_RECORDS));
                        match control.await {
                            Ok(control) => {
                                pg.wal_records(bindir, database, (from, to), None).await.map(|w| (w, control))
                            }
                            Err(why) => Err(why),
                        }
                    }
                    (Err(why), _) => Err(why),
                    (_, None) => Err("no --pg-bindir for pg_waldump".into()),
                };
                match counted {
                    Ok((_, control)) if control.own == 0 => (
                        false,
                        "pg_waldump saw no record of the database even in the pairs phase: cannot judge".to_string(),
                    ),
                    Ok((window, control)) => (
                        window.own == 0,
                        format!(
                            "{} of {} WAL records in the window change stepwell's tables ({} only catalogs, as \
                             Postgres prunes pages it reads; the pairs phase: {} of its first {}); the server's WAL \
                             grew {grew} B",
                            window.own, window.total, window.catalogs, control.own, control.total
                        ),
                    ),
                    Err(why) => (
                        grew <= PG_BACKGROUND_WAL_BYTES,
                        format!("the server's WAL grew {grew} B (pg_waldump not used: {why})"),
                    ),
                }
            }
            _ => unreachable!("one store gives markers of its own kind"),
        }
    }

    /// Where the store's writes stand: SQLite's file sizes, Postgres's WAL position.
    async fn write_marker(&self, store: &Store) -> Fallible<WriteMarker> {
        match store {
            Store::Sqlite(path) => Ok(WriteMarker::Sqlite(SqliteFiles::of(path))),
            Store::Postgres(_) => Ok(WriteMarker::Postgres(self.pg()?.wal_position().await?)),
        }
    }
}

/// Where a store's writes stood at one moment: SQLite's file sizes, or
/// the Postgres server's WAL insert position.
#[derive(Debug, Clone, Copy)]
enum WriteMarker {
    Sqlite(SqliteFiles),
    Postgres(u64),
}

/// Stops the sidecar; a sidecar that died or would not stop is a problem of the row.
async fn stop(sidecar: Sidecar, row: &mut Row) {
    if let Err(why) = sidecar.stop().await {
        row.errors += 1;
        row.first_problem.get_or_insert(why);
    }
}

/// A point id as a file name.
fn file_name(label: &str) -> String {
    label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

fn human_size(bytes: usize) -> String {
    if bytes >= 1024 { format!("{} KB", bytes / 1024) } else { format!("{bytes} B") }
}

#[cfg(test)]
mod tests {
    use super::selects;

    #[test]
    fn only_entries_ending_in_a_dollar_must_end_the_id() {
        assert!(selects("w1-1kb/c1", "sqlite/stepwell/w1-1kb/c16"));
        assert!(!selects("w1-1kb/c1$", "sqlite/stepwell/w1-1kb/c16"));
        assert!(selects("w1-1kb/c1$", "sqlite/direct/w1-1kb/c1"));
        assert!(!selects("w1-1kb/c64$", "sqlite/stepwell/w1-1kb/c64/fixed-3500/s"));
    }
}
