//! Moving a store: `stepwell migrate --from URL --to URL` copies every
//! checkpoint, turn summary, idempotency key, record (RecordService) and
//! wait (WaitService) from one store to another, and `stepwell export` / `stepwell import`
//! write and read them as NDJSON, with the sidecars stopped. The move works
//! on the databases directly, not through a sidecar, through `store::bulk`,
//! which holds its SQL; this module decides what is copied in what order,
//! shows progress, and verifies (`tally`).
//!
//! Every copy is idempotent and resumable: rows go in chunks, each its own
//! transaction, in key order, with `ON CONFLICT DO NOTHING` on their natural
//! keys, so a second run copies nothing and a run killed halfway completes
//! when run again. A chunk is bounded by rows and by bytes (`Plan`,
//! `--chunk-rows` and `--chunk-bytes-max`), so large states and payloads
//! never gather more than about the byte budget and one row in memory. Checkpoints keep their dedup key, timestamps and their
//! order within a turn (they are copied in the source's insertion order);
//! turn summaries are rebuilt by the target from the checkpoints it holds,
//! as its own appends would; the fencing sequence only moves forward, past
//! every token copied; records (RecordService) keep their timestamps,
//! metadata and refs (Postgres keeps the JSON as jsonb, which normalizes
//! its text); waits, copied last, keep every column, so a pending one is
//! still pending and its timer or expiry falls due on the target at the
//! same time (a wait the target holds already is left as it is, settled
//! or not). At the end both sides are counted and checksummed
//! per namespace (SHA-256 over a canonical ordered serialization) and the
//! table is printed; any difference exits 1.

mod ndjson;
mod tally;

use std::io::IsTerminal;
use std::process::ExitCode;

pub use tally::{Tallies, Tally};

use crate::config::moving::{ChunkArgs, ExportArgs, ImportArgs, MigrateArgs};
use crate::store::Database;
use crate::store::bulk::{
    self, BulkKeyRow, BulkWaitKey, BulkWaitRow, CheckpointRow, ChunkSize, RecordKey, StoredRecordRow, Table, Tables,
};

/// Why a move stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store's tables failed, or could not be opened.
    #[error(transparent)]
    Store(#[from] bulk::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Format(String),
    #[error("stopped after {0} chunks, as asked")]
    Stopped(usize),
    /// The source holds what this version cannot move yet.
    #[error("{0}")]
    Unsupported(String),
}

/// Refuses, before anything is copied or written, a source that holds
/// memory items (MemoryService): this version of migrate and export does not
/// move them yet, and a move that left them behind would look complete.
pub async fn refuse_memory(source: &Tables) -> Result<(), Error> {
    let items = source.count(Table::MemoryItems).await?;
    if items > 0 {
        return Err(Error::Unsupported(format!(
            "the source store holds {items} memory items (MemoryService), which this version of stepwell does not \
             move yet; nothing was copied. Keep the store (or back up its file or database with the database's own \
             tools) until a version that moves memory"
        )));
    }
    Ok(())
}

/// Rows per chunk unless `--chunk-rows` says otherwise.
pub const CHUNK_ROWS_DEFAULT: usize = 500;
/// Bytes per chunk unless `--chunk-bytes-max` says otherwise: 64 MiB.
pub const CHUNK_BYTES_DEFAULT: usize = 64 << 20;

/// How a copy runs: the most rows in a chunk (one transaction each) and the
/// bytes a chunk may reach (its rows as `store::bulk::RowBytes` counts them; a
/// chunk stops at the first row that reaches it, and always holds at least
/// one row, so a chunk holds about the budget plus one row at most), and,
/// for stepwell's tests, a chunk count after which it stops as if killed.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub chunk_rows: usize,
    pub chunk_bytes: usize,
    pub stop_after_chunks: Option<usize>,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan { chunk_rows: CHUNK_ROWS_DEFAULT, chunk_bytes: CHUNK_BYTES_DEFAULT, stop_after_chunks: None }
    }
}

impl Plan {
    /// The plan the flags of `migrate`, `export` or `import` give.
    pub fn from_args(chunks: &ChunkArgs) -> Plan {
        Plan { chunk_rows: chunks.chunk_rows, chunk_bytes: chunks.chunk_bytes_max, ..Plan::default() }
    }

    /// The plan to read the chunk after one of `taken` rows with: its row
    /// limit at most twice `taken` (and at most this plan's). A read that
    /// stops at the byte budget drops the rest of its query, which Postgres
    /// still sends; so after a chunk cut short by large rows the next query
    /// asks for few more than fit, and the limit grows back by doubling as
    /// rows get smaller.
    fn after(self, taken: usize) -> Plan {
        Plan { chunk_rows: taken.saturating_mul(2).clamp(1, self.chunk_rows.max(1)), ..self }
    }

    /// A chunk's bounds, as the store reads them.
    fn chunk(self) -> ChunkSize {
        ChunkSize { rows: self.chunk_rows, bytes: self.chunk_bytes }
    }
}

/// What one copy did: rows inserted and rows the target already held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub checkpoints_copied: u64,
    pub checkpoints_present: u64,
    /// Idempotency keys.
    pub keys_copied: u64,
    pub keys_present: u64,
    /// Records of RecordService.
    pub stored_records_copied: u64,
    pub stored_records_present: u64,
    /// Waits of WaitService.
    pub waits_copied: u64,
    pub waits_present: u64,
    /// The target's fencing sequence before and after.
    pub fence_before: i64,
    pub fence_after: i64,
}

impl Copied {
    fn nothing_copied(&self) -> bool {
        self.checkpoints_copied == 0
            && self.keys_copied == 0
            && self.stored_records_copied == 0
            && self.waits_copied == 0
            && self.fence_before == self.fence_after
    }

    fn print(&self) {
        println!("checkpoints: {} copied, {} already present", self.checkpoints_copied, self.checkpoints_present);
        println!("idempotency keys: {} copied, {} already present", self.keys_copied, self.keys_present);
        println!(
            "records (RecordService): {} copied, {} already present",
            self.stored_records_copied, self.stored_records_present
        );
        println!("waits (WaitService): {} copied, {} already present", self.waits_copied, self.waits_present);
        if self.fence_after > self.fence_before {
            println!("fencing sequence: moved from {} to {}", self.fence_before, self.fence_after);
        } else {
            println!("fencing sequence: already at {} (no token will be reused)", self.fence_after);
        }
        if self.nothing_copied() {
            println!("nothing to copy: the target already holds everything");
        }
    }
}

/// Counts chunks against the plan's stop, and shows progress on a terminal:
/// one line per table, rewritten in place after each chunk.
struct Progress {
    plan: Plan,
    chunks: usize,
    on_terminal: bool,
    /// The table whose progress line is showing, if one is.
    showing: Option<&'static str>,
}

impl Progress {
    fn new(plan: Plan) -> Progress {
        Progress { plan, chunks: 0, on_terminal: std::io::stderr().is_terminal(), showing: None }
    }

    /// After a committed chunk: shows `what done/total`, then stops if the
    /// plan says so.
    fn chunk_done(&mut self, what: &'static str, done: u64, total: Option<u64>) -> Result<(), Error> {
        self.chunks += 1;
        if self.on_terminal {
            if self.showing.is_some_and(|showing| showing != what) {
                eprintln!();
            }
            self.showing = Some(what);
            match total {
                Some(total) => eprint!("\r\x1b[K{what}: {done}/{total}"),
                None => eprint!("\r\x1b[K{what}: {done}"),
            }
        }
        match self.plan.stop_after_chunks {
            Some(stop) if self.chunks >= stop => Err(Error::Stopped(self.chunks)),
            _ => Ok(()),
        }
    }
}

impl Drop for Progress {
    /// Ends the progress line, so the summary starts on a line of its own.
    fn drop(&mut self) {
        if self.showing.is_some() {
            eprintln!();
        }
    }
}

/// Copies everything from `from` to `to` (created and migrated if need be)
/// and verifies both sides. Returns what was copied and the two tallies.
pub async fn migrate_stores(from: &Database, to: &Database, plan: Plan) -> Result<(Copied, Tallies, Tallies), Error> {
    let source = Tables::open_source(from).await?;
    refuse_memory(&source).await?;
    let target = Tables::open_target(to).await?;
    let mut progress = Progress::new(plan);
    let mut copied = Copied::default();
    // The fence first: a run stopped later has still moved it.
    let fence = source.fence().await?.max(source.max_token().await?);
    copied.fence_before = target.fence().await?;
    target.advance_fence(fence).await?;
    copied.fence_after = target.fence().await?;
    copy_checkpoints(&source, &target, plan, &mut copied, &mut progress).await?;
    copy_keys(&source, &target, plan, &mut copied, &mut progress).await?;
    copy_records(&source, &target, plan, &mut copied, &mut progress).await?;
    copy_waits(&source, &target, plan, &mut copied, &mut progress).await?;
    let expected = tally::tally(&source).await?;
    let found = tally::tally(&target).await?;
    source.close().await;
    target.close().await;
    Ok((copied, expected, found))
}

/// A table's rows as the move reads them: chunk by chunk, each chunk the
/// rows after the position of the last one read, in the table's key order
/// (checkpoints: the source's insertion order).
trait Paged: Sized {
    /// Where a chunk starts: the position of the row before it.
    type After;
    /// The position before the first row.
    fn start() -> Self::After;
    /// This row's position.
    fn position(&self) -> Self::After;
    /// Up to `size` rows after `after`.
    async fn page(source: &Tables, after: &Self::After, size: ChunkSize) -> Result<Vec<Self>, Error>;
}

impl Paged for CheckpointRow {
    type After = i64;
    fn start() -> i64 {
        i64::MIN
    }
    fn position(&self) -> i64 {
        self.seq
    }
    async fn page(source: &Tables, after: &i64, size: ChunkSize) -> Result<Vec<Self>, Error> {
        Ok(source.checkpoints_after(*after, size).await?)
    }
}

impl Paged for BulkKeyRow {
    type After = Option<(String, String)>;
    fn start() -> Self::After {
        None
    }
    fn position(&self) -> Self::After {
        Some((self.namespace.clone(), self.key.clone()))
    }
    async fn page(source: &Tables, after: &Self::After, size: ChunkSize) -> Result<Vec<Self>, Error> {
        Ok(source.keys_after(after.as_ref(), size).await?)
    }
}

impl Paged for StoredRecordRow {
    type After = Option<RecordKey>;
    fn start() -> Self::After {
        None
    }
    fn position(&self) -> Self::After {
        Some(self.key())
    }
    async fn page(source: &Tables, after: &Self::After, size: ChunkSize) -> Result<Vec<Self>, Error> {
        Ok(source.records_after(after.as_ref(), size).await?)
    }
}

impl Paged for BulkWaitRow {
    type After = Option<BulkWaitKey>;
    fn start() -> Self::After {
        None
    }
    fn position(&self) -> Self::After {
        Some(self.key())
    }
    async fn page(source: &Tables, after: &Self::After, size: ChunkSize) -> Result<Vec<Self>, Error> {
        Ok(source.waits_after(after.as_ref(), size).await?)
    }
}

/// Reads every row of `R`'s table from `source`, chunk by chunk as `plan`
/// sizes them, and hands each chunk to `take`: the one read loop of
/// `migrate` and `export`.
async fn each_chunk<R: Paged>(
    source: &Tables,
    plan: Plan,
    mut take: impl AsyncFnMut(Vec<R>) -> Result<(), Error>,
) -> Result<(), Error> {
    let (mut after, mut read) = (R::start(), plan);
    loop {
        let page = R::page(source, &after, read.chunk()).await?;
        read = plan.after(page.len());
        let Some(last) = page.last() else { return Ok(()) };
        after = last.position();
        take(page).await?;
    }
}

/// Copies every checkpoint, in the source's insertion order.
async fn copy_checkpoints(
    source: &Tables,
    target: &Tables,
    plan: Plan,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let total = source.count(Table::Checkpoints).await?;
    each_chunk(source, plan, async |page: Vec<CheckpointRow>| {
        let inserted = target.insert_checkpoints(&page).await?;
        copied.checkpoints_copied += inserted;
        copied.checkpoints_present += page.len() as u64 - inserted;
        progress.chunk_done("checkpoints", copied.checkpoints_copied + copied.checkpoints_present, Some(total))
    })
    .await
}

/// Copies every idempotency key, in key order.
async fn copy_keys(
    source: &Tables,
    target: &Tables,
    plan: Plan,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let total = source.count(Table::Keys).await?;
    each_chunk(source, plan, async |page: Vec<BulkKeyRow>| {
        let inserted = target.insert_keys(&page).await?;
        copied.keys_copied += inserted;
        copied.keys_present += page.len() as u64 - inserted;
        progress.chunk_done("idempotency keys", copied.keys_copied + copied.keys_present, Some(total))
    })
    .await
}

/// Copies every record (RecordService), in key order.
async fn copy_records(
    source: &Tables,
    target: &Tables,
    plan: Plan,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let total = source.count(Table::Records).await?;
    each_chunk(source, plan, async |page: Vec<StoredRecordRow>| {
        let inserted = target.insert_records(&page).await?;
        copied.stored_records_copied += inserted;
        copied.stored_records_present += page.len() as u64 - inserted;
        let done = copied.stored_records_copied + copied.stored_records_present;
        progress.chunk_done("records", done, Some(total))
    })
    .await
}

/// Copies every wait (WaitService), in key order.
async fn copy_waits(
    source: &Tables,
    target: &Tables,
    plan: Plan,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let total = source.count(Table::Waits).await?;
    each_chunk(source, plan, async |page: Vec<BulkWaitRow>| {
        let inserted = target.insert_waits(&page).await?;
        copied.waits_copied += inserted;
        copied.waits_present += page.len() as u64 - inserted;
        progress.chunk_done("waits", copied.waits_copied + copied.waits_present, Some(total))
    })
    .await
}

/// Prints the verification table and says whether both sides agree; the
/// target's fence must also be at least the source's.
fn verified(source_name: &str, target_name: &str, expected: &Tallies, found: &Tallies) -> bool {
    let same = tally::print_table(source_name, target_name, expected, found);
    if same {
        println!("verified: every namespace matches");
    } else {
        println!("verification FAILED: the target differs from the source (rows marked DIFFERS)");
    }
    same
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// Runs `stepwell migrate`.
pub fn migrate(args: &MigrateArgs) -> ExitCode {
    println!("migrating {} -> {}", args.from.describe(), args.to.describe());
    let outcome = runtime().block_on(migrate_stores(&args.from, &args.to, Plan::from_args(&args.chunks)));
    match outcome {
        Ok((copied, expected, found)) => {
            copied.print();
            if verified("source", "target", &expected, &found) { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(error) => {
            eprintln!("stepwell migrate: {error}");
            eprintln!("a copy stopped part way is finished by running the same command again");
            ExitCode::from(1)
        }
    }
}

/// Runs `stepwell export`.
pub fn export(args: &ExportArgs) -> ExitCode {
    let to_stdout = args.out.as_os_str() == "-";
    let outcome = runtime().block_on(async {
        let source = Tables::open_source(&args.from).await?;
        // Before the file is made: a refused export leaves nothing behind.
        refuse_memory(&source).await?;
        let written = if to_stdout {
            let stdout = std::io::stdout().lock();
            ndjson::export(&source, stdout, Plan::from_args(&args.chunks)).await
        } else {
            let file = std::fs::File::create(&args.out)?;
            ndjson::export(&source, file, Plan::from_args(&args.chunks)).await
        };
        source.close().await;
        written
    });
    match outcome {
        Ok(ndjson::Exported { checkpoints, turns, records, stored_records, waits }) => {
            let summary = format!(
                "exported {checkpoints} checkpoints, {turns} turns, {records} idempotency records, \
                 {stored_records} records and {waits} waits"
            );
            // Written to stdout, the data keeps stdout to itself.
            if to_stdout {
                eprintln!("{summary}")
            } else {
                println!("{summary}")
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("stepwell export: {error}");
            ExitCode::from(1)
        }
    }
}

/// Runs `stepwell import`.
pub fn import(args: &ImportArgs) -> ExitCode {
    let plan = Plan::from_args(&args.chunks);
    let outcome = runtime().block_on(async {
        let from_stdin = args.input.as_os_str() == "-";
        if from_stdin {
            import_into(&args.to, std::io::stdin().lock(), plan).await
        } else {
            let file = std::fs::File::open(&args.input)?;
            import_into(&args.to, std::io::BufReader::new(file), plan).await
        }
    });
    match outcome {
        Ok((copied, expected, found)) => {
            copied.print();
            if verified("file", "target", &expected, &found) { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(error) => {
            eprintln!("stepwell import: {error}");
            ExitCode::from(1)
        }
    }
}

/// Loads an export into `to`, then tallies the file and the target.
pub async fn import_into(
    to: &Database,
    input: impl std::io::BufRead,
    plan: Plan,
) -> Result<(Copied, Tallies, Tallies), Error> {
    let target = Tables::open_target(to).await?;
    let result = ndjson::import(&target, input, plan).await;
    let found = match &result {
        Ok(_) => Some(tally::tally(&target).await),
        Err(_) => None,
    };
    target.close().await;
    let (copied, expected) = result?;
    Ok((copied, expected, found.expect("tallied after a good import")?))
}

#[cfg(test)]
mod tests {
    use super::Plan;

    #[test]
    fn a_chunk_cut_short_by_bytes_asks_for_few_more_rows_next() {
        let plan = Plan { chunk_rows: 500, ..Plan::default() };
        assert_eq!(plan.after(3).chunk_rows, 6, "three rows reached the budget: ask for six");
        assert_eq!(plan.after(1).chunk_rows, 2);
        assert_eq!(plan.after(0).chunk_rows, 1, "at least one row");
        assert_eq!(plan.after(300).chunk_rows, 500, "never more than the plan's rows");
        assert_eq!(plan.after(500).chunk_rows, 500);
        assert_eq!(plan.after(3).chunk_bytes, plan.chunk_bytes);
    }
}
