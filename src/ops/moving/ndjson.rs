//! The export format: NDJSON, one JSON object per line, each with a `kind`.
//! A `header` line first (format version, the source's backend and its
//! fencing sequence), then every `checkpoint` in the source's insertion
//! order, every `turn` summary, every `idempotency` record, every `record`
//! of RecordService in key order, every `wait` of WaitService in key order,
//! and an `end` line with the counts (`records` counts the idempotency
//! lines, `stored_records` the record lines, `waits` the wait lines), so a
//! truncated file is told from a whole one. Bytes are base64; a record's
//! metadata and refs are its JSON as text, and its kind is `record_kind`; a
//! wait's times are integers (nanoseconds) or null. Turn lines serve to
//! verify an import: the target rebuilds its summaries from the
//! checkpoints, and they must come out equal.
//!
//! Format 2 added the record lines and `stored_records`; format 3, the wait
//! lines and `waits`. Files of formats 1 and 2, written before records or
//! waits existed, hold neither of what came later and still import; an
//! importer older than a file's format refuses it at its header, before
//! writing anything, rather than meet lines it does not know.
//!
//! An export reads the store in chunks bounded by rows and bytes, as a
//! migration does; an import writes a chunk once it holds `Plan::chunk_rows`
//! rows or `Plan::chunk_bytes` bytes (counted by `RowBytes`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use super::tally::{
    Tallier, Tallies, checkpoint_digest, record_digest, stored_record_digest, turn_digest, wait_digest,
};
use super::{Copied, Error, Paged, Plan, Progress, each_chunk};
use crate::store::bulk::{
    BulkKeyRow, BulkTurnRow, BulkWaitKey, BulkWaitRow, CheckpointRow, RecordKey, RowBytes, StoredRecordRow, Tables,
};

/// The version of the format this stepwell writes.
pub const FORMAT: u32 = 3;
/// The oldest version it reads: format 1 lacks only the records and waits,
/// format 2 only the waits.
pub const FORMAT_OLDEST: u32 = 1;

/// What an export wrote, by kind of line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exported {
    pub checkpoints: u64,
    pub turns: u64,
    /// Idempotency keys.
    pub records: u64,
    /// Records of RecordService.
    pub stored_records: u64,
    /// Waits of WaitService.
    pub waits: u64,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Out<'a> {
    Header { format: u32, backend: &'a str, fence: i64 },
    Checkpoint(&'a CheckpointRow),
    Turn(&'a BulkTurnRow),
    Idempotency(&'a BulkKeyRow),
    Record(&'a StoredRecordRow),
    Wait(&'a BulkWaitRow),
    End { checkpoints: u64, turns: u64, records: u64, stored_records: u64, waits: u64 },
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum In {
    Header {
        format: u32,
        fence: i64,
    },
    Checkpoint(CheckpointRow),
    Turn(BulkTurnRow),
    Idempotency(BulkKeyRow),
    Record(StoredRecordRow),
    Wait(BulkWaitRow),
    /// `stored_records` is absent in format 1, `waits` before format 3.
    End {
        checkpoints: u64,
        turns: u64,
        records: u64,
        stored_records: Option<u64>,
        waits: Option<u64>,
    },
}

fn write_line(out: &mut impl Write, line: &Out<'_>) -> Result<(), Error> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes every row of `source`, read in the plan's chunks; returns the counts.
pub async fn export(source: &Tables, out: impl Write, plan: Plan) -> Result<Exported, Error> {
    super::refuse_memory(source).await?;
    let mut out = std::io::BufWriter::new(out);
    let fence = source.fence().await?.max(source.max_token().await?);
    write_line(&mut out, &Out::Header { format: FORMAT, backend: source.backend(), fence })?;
    let exported = Exported {
        checkpoints: export_rows(source, &mut out, plan, |row| Out::Checkpoint(row)).await?,
        turns: export_turns(source, &mut out).await?,
        records: export_rows(source, &mut out, plan, |row| Out::Idempotency(row)).await?,
        stored_records: export_rows(source, &mut out, plan, |row| Out::Record(row)).await?,
        waits: export_rows(source, &mut out, plan, |row| Out::Wait(row)).await?,
    };
    let Exported { checkpoints, turns, records, stored_records, waits } = exported;
    write_line(&mut out, &Out::End { checkpoints, turns, records, stored_records, waits })?;
    out.flush()?;
    Ok(exported)
}

/// Writes every row of `R`'s table as `line` makes its line, chunk by
/// chunk in the table's order; returns how many.
async fn export_rows<R: Paged>(
    source: &Tables,
    out: &mut impl Write,
    plan: Plan,
    line: fn(&R) -> Out<'_>,
) -> Result<u64, Error> {
    let mut written = 0;
    each_chunk(source, plan, async |page: Vec<R>| {
        for row in &page {
            write_line(out, &line(row))?;
        }
        written += page.len() as u64;
        Ok(())
    })
    .await?;
    Ok(written)
}

/// Writes every turn summary, in key order; returns how many.
async fn export_turns(source: &Tables, out: &mut impl Write) -> Result<u64, Error> {
    let (mut written, mut failed) = (0, None);
    source
        .each_turn(|row| {
            if failed.is_none()
                && let Err(error) = write_line(out, &Out::Turn(&row))
            {
                failed = Some(error);
            }
            written += 1;
        })
        .await?;
    match failed {
        Some(error) => Err(error),
        None => Ok(written),
    }
}

/// Loads an export into `target` in chunks, with the same idempotent
/// inserts and fence rule as a migration; returns what was copied and the
/// tally of the file's own rows.
pub async fn import(target: &Tables, input: impl BufRead, plan: Plan) -> Result<(Copied, Tallies), Error> {
    let mut import = Import::new(target, plan).await?;
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        if !line.trim().is_empty() {
            import.line(number + 1, &line).await?;
        }
    }
    import.finish().await
}

/// An import under way: what it has copied, the rows read and not yet
/// written, and what the file has said so far.
struct Import<'t> {
    target: &'t Tables,
    plan: Plan,
    progress: Progress,
    copied: Copied,
    checkpoints: Chunk<CheckpointRow>,
    keys: Chunk<BulkKeyRow>,
    records: Chunk<StoredRecordRow>,
    waits: Chunk<BulkWaitRow>,
    digests: FileDigests,
    /// The header's format, once read.
    header: Option<u32>,
    /// The end line's counts, once read.
    end: Option<Counts>,
}

impl<'t> Import<'t> {
    async fn new(target: &'t Tables, plan: Plan) -> Result<Import<'t>, Error> {
        let fence = target.fence().await?;
        Ok(Import {
            target,
            plan,
            progress: Progress::new(plan),
            copied: Copied { fence_before: fence, fence_after: fence, ..Copied::default() },
            checkpoints: Chunk::default(),
            keys: Chunk::default(),
            records: Chunk::default(),
            waits: Chunk::default(),
            digests: FileDigests::default(),
            header: None,
            end: None,
        })
    }

    /// Takes in line `number` (counted from 1) of the file.
    async fn line(&mut self, number: usize, line: &str) -> Result<(), Error> {
        if self.end.is_some() {
            return Err(Error::Format(format!("line {number}: data after the end line")));
        }
        let parsed: In =
            serde_json::from_str(line).map_err(|error| Error::Format(format!("line {number}: {error}")))?;
        match parsed {
            In::Header { format, fence } => self.header(number, format, fence).await,
            _ if self.header.is_none() => {
                Err(Error::Format("the file does not start with a stepwell export header".into()))
            }
            In::Checkpoint(row) => self.checkpoint(row).await,
            In::Turn(row) => {
                self.digests.turns.push((row.namespace.clone(), row.turn_id.clone(), turn_digest(&row)));
                Ok(())
            }
            In::Idempotency(row) => self.key(row).await,
            In::Record(row) => self.record(number, row).await,
            In::Wait(row) => self.wait(number, row).await,
            In::End { checkpoints, turns, records, stored_records, waits } => {
                self.end(number, (checkpoints, turns, records), (stored_records, waits))
            }
        }
    }

    /// The header: a format this stepwell reads, and the source's fence,
    /// which the target's moves up to.
    async fn header(&mut self, number: usize, format: u32, fence: i64) -> Result<(), Error> {
        if self.header.is_some() {
            return Err(Error::Format(format!("line {number}: a second header")));
        }
        if !(FORMAT_OLDEST..=FORMAT).contains(&format) {
            return Err(Error::Format(format!(
                "the file is in format {format}; this stepwell reads formats {FORMAT_OLDEST} to {FORMAT}"
            )));
        }
        self.header = Some(format);
        self.target.advance_fence(fence).await?;
        self.copied.fence_after = self.target.fence().await?;
        Ok(())
    }

    async fn checkpoint(&mut self, row: CheckpointRow) -> Result<(), Error> {
        let order = self.digests.checkpoints.len();
        let digest = checkpoint_digest(&row);
        self.digests.checkpoints.push((row.namespace.clone(), row.turn_id.clone(), row.ts_ns, order, digest));
        if self.checkpoints.push(row, self.plan) {
            self.flush_checkpoints().await?;
        }
        Ok(())
    }

    /// An idempotency key, written after the checkpoints read before it.
    async fn key(&mut self, row: BulkKeyRow) -> Result<(), Error> {
        let token = row.lease_token;
        if token > self.copied.fence_after {
            // A record past the header's fence: still never reuse its token.
            self.target.advance_fence(token).await?;
            self.copied.fence_after = self.target.fence().await?;
        }
        self.digests.keys.push((row.namespace.clone(), row.key.clone(), record_digest(&row)));
        if self.keys.push(row, self.plan) {
            self.flush_checkpoints().await?;
            self.flush_keys().await?;
        }
        Ok(())
    }

    /// A record (RecordService), written after the rows read before it.
    async fn record(&mut self, number: usize, row: StoredRecordRow) -> Result<(), Error> {
        if self.header == Some(1) {
            return Err(Error::Format(format!("line {number}: a record in a format 1 file")));
        }
        self.digests.records.push((row.key(), stored_record_digest(&row)));
        if self.records.push(row, self.plan) {
            self.flush_checkpoints().await?;
            self.flush_keys().await?;
            self.flush_records().await?;
        }
        Ok(())
    }

    /// A wait (WaitService), written after the rows read before it.
    async fn wait(&mut self, number: usize, row: BulkWaitRow) -> Result<(), Error> {
        match self.header {
            Some(format) if format < 3 => {
                return Err(Error::Format(format!("line {number}: a wait in a format {format} file")));
            }
            _ if !(1..=4).contains(&row.status) => {
                return Err(Error::Format(format!("line {number}: wait status {} is not known", row.status)));
            }
            _ => {}
        }
        self.digests.waits.push((row.key(), wait_digest(&row)));
        if self.waits.push(row, self.plan) {
            self.flush_checkpoints().await?;
            self.flush_keys().await?;
            self.flush_records().await?;
            self.flush_waits().await?;
        }
        Ok(())
    }

    /// The end line's counts: format 1 counts neither records nor waits,
    /// format 2 records only, format 3 both.
    fn end(
        &mut self,
        number: usize,
        (checkpoints, turns, keys): (u64, u64, u64),
        later: (Option<u64>, Option<u64>),
    ) -> Result<(), Error> {
        let (records, waits) = match (self.header, later) {
            (Some(1), (None, None)) => (0, 0),
            (Some(2), (Some(records), None)) => (records, 0),
            (Some(3), (Some(records), Some(waits))) => (records, waits),
            _ => {
                return Err(Error::Format(format!("line {number}: the end line does not match the header's format")));
            }
        };
        self.end = Some((checkpoints, turns, keys, records, waits));
        Ok(())
    }

    /// Writes what is left, checks the end line against the rows read, and
    /// tallies the file.
    async fn finish(mut self) -> Result<(Copied, Tallies), Error> {
        self.flush_checkpoints().await?;
        self.flush_keys().await?;
        self.flush_records().await?;
        self.flush_waits().await?;
        let counted = self.digests.counted();
        match self.end {
            None => return Err(Error::Format("the file has no end line: it was cut short".into())),
            Some(end) if end != counted => {
                return Err(Error::Format(format!(
                    "the end line counts {end:?} (checkpoints, turns, idempotency records, records, waits) but \
                     the file holds {counted:?}"
                )));
            }
            Some(_) => {}
        }
        Ok((self.copied, self.digests.tally()))
    }

    async fn flush_checkpoints(&mut self) -> Result<(), Error> {
        let rows = self.checkpoints.take();
        if rows.is_empty() {
            return Ok(());
        }
        let inserted = self.target.insert_checkpoints(&rows).await?;
        let copied = &mut self.copied;
        copied.checkpoints_copied += inserted;
        copied.checkpoints_present += rows.len() as u64 - inserted;
        self.progress.chunk_done("checkpoints", copied.checkpoints_copied + copied.checkpoints_present, None)
    }

    async fn flush_keys(&mut self) -> Result<(), Error> {
        let rows = self.keys.take();
        if rows.is_empty() {
            return Ok(());
        }
        let inserted = self.target.insert_keys(&rows).await?;
        let copied = &mut self.copied;
        copied.keys_copied += inserted;
        copied.keys_present += rows.len() as u64 - inserted;
        self.progress.chunk_done("idempotency keys", copied.keys_copied + copied.keys_present, None)
    }

    async fn flush_records(&mut self) -> Result<(), Error> {
        let rows = self.records.take();
        if rows.is_empty() {
            return Ok(());
        }
        let inserted = self.target.insert_records(&rows).await?;
        let copied = &mut self.copied;
        copied.stored_records_copied += inserted;
        copied.stored_records_present += rows.len() as u64 - inserted;
        self.progress.chunk_done("records", copied.stored_records_copied + copied.stored_records_present, None)
    }

    async fn flush_waits(&mut self) -> Result<(), Error> {
        let rows = self.waits.take();
        if rows.is_empty() {
            return Ok(());
        }
        let inserted = self.target.insert_waits(&rows).await?;
        let copied = &mut self.copied;
        copied.waits_copied += inserted;
        copied.waits_present += rows.len() as u64 - inserted;
        self.progress.chunk_done("waits", copied.waits_copied + copied.waits_present, None)
    }
}

/// Counts of a file's rows: checkpoints, turns, idempotency keys, records
/// and waits.
type Counts = (u64, u64, u64, u64, u64);

/// Each row of the file by its canonical order key, with its digest, to be
/// sorted and tallied once the whole file is read.
#[derive(Default)]
struct FileDigests {
    /// By (namespace, turn, timestamp, order in the file).
    checkpoints: Vec<(String, String, i64, usize, [u8; 32])>,
    turns: Vec<(String, String, [u8; 32])>,
    keys: Vec<(String, String, [u8; 32])>,
    records: Vec<(RecordKey, [u8; 32])>,
    waits: Vec<(BulkWaitKey, [u8; 32])>,
}

impl FileDigests {
    /// How many rows of each kind the file held.
    fn counted(&self) -> Counts {
        let (checkpoints, turns) = (self.checkpoints.len() as u64, self.turns.len() as u64);
        (checkpoints, turns, self.keys.len() as u64, self.records.len() as u64, self.waits.len() as u64)
    }

    /// The file's tally, each kind of row in canonical order.
    fn tally(mut self) -> Tallies {
        let mut tallier = Tallier::default();
        self.checkpoints.sort_unstable_by(|a, b| (&a.0, &a.1, a.2, a.3).cmp(&(&b.0, &b.1, b.2, b.3)));
        for (namespace, _, _, _, digest) in self.checkpoints {
            tallier.checkpoint(&namespace, digest);
        }
        self.turns.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        for (namespace, _, digest) in self.turns {
            tallier.turn(&namespace, digest);
        }
        self.keys.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        for (namespace, _, digest) in self.keys {
            tallier.record(&namespace, digest);
        }
        self.records.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for ((namespace, ..), digest) in self.records {
            tallier.stored_record(&namespace, digest);
        }
        self.waits.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for ((namespace, ..), digest) in self.waits {
            tallier.wait(&namespace, digest);
        }
        tallier.finish()
    }
}

/// The rows of one kind read from the file and not yet written, and their
/// bytes as `RowBytes` counts them.
struct Chunk<R> {
    rows: Vec<R>,
    bytes: usize,
}

impl<R> Default for Chunk<R> {
    fn default() -> Chunk<R> {
        Chunk { rows: Vec::new(), bytes: 0 }
    }
}

impl<R: RowBytes> Chunk<R> {
    /// Adds a row; says whether the chunk is full (by rows or by bytes).
    fn push(&mut self, row: R, plan: Plan) -> bool {
        self.bytes += row.bytes();
        self.rows.push(row);
        self.rows.len() >= plan.chunk_rows || self.bytes >= plan.chunk_bytes
    }

    /// Takes the rows out, leaving the chunk empty.
    fn take(&mut self) -> Vec<R> {
        self.bytes = 0;
        std::mem::take(&mut self.rows)
    }
}
