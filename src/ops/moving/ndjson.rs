//! The export format: NDJSON, one JSON object per line, each with a `kind`.
//! A `header` line first (format version, the source's backend and its
//! fencing sequence), then every `checkpoint` in the source's insertion
//! order, every `turn` summary, every `idempotency` record, every `record`
//! of RecordService in key order, and an `end` line with the counts
//! (`records` counts the idempotency lines, `stored_records` the record
//! lines), so a truncated file is told from a whole one. Bytes are base64;
//! a record's metadata and refs are its JSON as text, and its kind is
//! `record_kind`. Turn lines serve to verify an import: the target rebuilds
//! its summaries from the checkpoints, and they must come out equal.
//!
//! Format 2 added the record lines and `stored_records`; a format 1 file,
//! written before records existed, holds neither and still imports.
//!
//! An export reads the store in chunks bounded by rows and bytes, as a
//! migration does; an import writes a chunk once it holds `Plan::chunk_rows`
//! rows or `Plan::chunk_bytes` bytes (counted by `RowBytes`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use super::rows::{CheckpointRow, KeyRow, RecordKey, RowBytes, StoredRecordRow, TurnRow};
use super::side::Side;
use super::tally::{Tallier, Tallies, checkpoint_digest, record_digest, stored_record_digest, turn_digest};
use super::{Copied, Error, Plan, Progress};

/// The version of the format this stepwell writes.
pub const FORMAT: u32 = 2;
/// The oldest version it reads: format 1 lacks only the records.
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
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Out<'a> {
    Header { format: u32, backend: &'a str, fence: i64 },
    Checkpoint(&'a CheckpointRow),
    Turn(&'a TurnRow),
    Idempotency(&'a KeyRow),
    Record(&'a StoredRecordRow),
    End { checkpoints: u64, turns: u64, records: u64, stored_records: u64 },
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum In {
    Header {
        format: u32,
        fence: i64,
    },
    Checkpoint(CheckpointRow),
    Turn(TurnRow),
    Idempotency(KeyRow),
    Record(StoredRecordRow),
    /// `stored_records` is absent in format 1.
    End {
        checkpoints: u64,
        turns: u64,
        records: u64,
        stored_records: Option<u64>,
    },
}

fn write_line(out: &mut impl Write, line: &Out<'_>) -> Result<(), Error> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes every row of `source`, read in the plan's chunks; returns the counts.
pub async fn export(source: &Side, out: impl Write, plan: Plan) -> Result<Exported, Error> {
    let mut out = std::io::BufWriter::new(out);
    let fence = source.fence().await?.max(source.max_token().await?);
    write_line(&mut out, &Out::Header { format: FORMAT, backend: source.backend(), fence })?;
    let (mut checkpoints, mut turns, mut records) = (0, 0, 0);
    let mut after = i64::MIN;
    let mut read = plan;
    loop {
        let page = source.checkpoints_after(after, read).await?;
        read = plan.after(page.len());
        let Some(last) = page.last() else { break };
        after = last.seq;
        for row in &page {
            write_line(&mut out, &Out::Checkpoint(row))?;
        }
        checkpoints += page.len() as u64;
    }
    let mut failed = None;
    source
        .for_each_turn(|row| {
            if failed.is_none()
                && let Err(error) = write_line(&mut out, &Out::Turn(&row))
            {
                failed = Some(error);
            }
            turns += 1;
        })
        .await?;
    if let Some(error) = failed {
        return Err(error);
    }
    let mut after: Option<(String, String)> = None;
    let mut read = plan;
    loop {
        let page = source.records_after(after.as_ref(), read).await?;
        read = plan.after(page.len());
        let Some(last) = page.last() else { break };
        after = Some((last.namespace.clone(), last.key.clone()));
        for row in &page {
            write_line(&mut out, &Out::Idempotency(row))?;
        }
        records += page.len() as u64;
    }
    let mut stored_records = 0;
    let mut after: Option<RecordKey> = None;
    let mut read = plan;
    loop {
        let page = source.stored_records_after(after.as_ref(), read).await?;
        read = plan.after(page.len());
        let Some(last) = page.last() else { break };
        after = Some(last.key());
        for row in &page {
            write_line(&mut out, &Out::Record(row))?;
        }
        stored_records += page.len() as u64;
    }
    write_line(&mut out, &Out::End { checkpoints, turns, records, stored_records })?;
    out.flush()?;
    Ok(Exported { checkpoints, turns, records, stored_records })
}

/// Loads an export into `target` in chunks, with the same idempotent
/// inserts and fence rule as a migration; returns what was copied and the
/// tally of the file's own rows.
pub async fn import(target: &Side, input: impl BufRead, plan: Plan) -> Result<(Copied, Tallies), Error> {
    let mut progress = Progress::new(plan);
    let mut copied = Copied { fence_before: target.fence().await?, ..Copied::default() };
    copied.fence_after = copied.fence_before;
    let (mut checkpoints, mut records, mut stored_records) = (Chunk::default(), Chunk::default(), Chunk::default());
    // Canonical order keys and digests, sorted once the file is read.
    let mut checkpoint_keys: Vec<(String, String, i64, usize, [u8; 32])> = Vec::new();
    let mut turn_keys: Vec<(String, String, [u8; 32])> = Vec::new();
    let mut record_keys: Vec<(String, String, [u8; 32])> = Vec::new();
    let mut stored_record_keys: Vec<(RecordKey, [u8; 32])> = Vec::new();
    let (mut header, mut end) = (None, None);
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if end.is_some() {
            return Err(Error::Format(format!("line {}: data after the end line", number + 1)));
        }
        let parsed: In =
            serde_json::from_str(&line).map_err(|error| Error::Format(format!("line {}: {error}", number + 1)))?;
        match parsed {
            In::Header { format, fence } => {
                if header.is_some() {
                    return Err(Error::Format(format!("line {}: a second header", number + 1)));
                }
                if !(FORMAT_OLDEST..=FORMAT).contains(&format) {
                    return Err(Error::Format(format!(
                        "the file is in format {format}; this stepwell reads formats {FORMAT_OLDEST} to {FORMAT}"
                    )));
                }
                header = Some(format);
                target.advance_fence(fence).await?;
                copied.fence_after = target.fence().await?;
                continue;
            }
            _ if header.is_none() => {
                return Err(Error::Format("the file does not start with a stepwell export header".into()));
            }
            In::Checkpoint(row) => {
                let key = (row.namespace.clone(), row.turn_id.clone(), row.ts_ns, checkpoint_keys.len());
                checkpoint_keys.push((key.0, key.1, key.2, key.3, checkpoint_digest(&row)));
                if checkpoints.push(row, plan) {
                    flush_checkpoints(target, &mut checkpoints, &mut copied, &mut progress).await?;
                }
            }
            In::Turn(row) => turn_keys.push((row.namespace.clone(), row.turn_id.clone(), turn_digest(&row))),
            In::Idempotency(row) => {
                let token = row.lease_token;
                if token > copied.fence_after {
                    // A record past the header's fence: still never reuse its token.
                    target.advance_fence(token).await?;
                    copied.fence_after = target.fence().await?;
                }
                record_keys.push((row.namespace.clone(), row.key.clone(), record_digest(&row)));
                if records.push(row, plan) {
                    flush_checkpoints(target, &mut checkpoints, &mut copied, &mut progress).await?;
                    flush_records(target, &mut records, &mut copied, &mut progress).await?;
                }
            }
            In::Record(row) => {
                if header == Some(1) {
                    return Err(Error::Format(format!("line {}: a record in a format 1 file", number + 1)));
                }
                stored_record_keys.push((row.key(), stored_record_digest(&row)));
                if stored_records.push(row, plan) {
                    flush_checkpoints(target, &mut checkpoints, &mut copied, &mut progress).await?;
                    flush_records(target, &mut records, &mut copied, &mut progress).await?;
                    flush_stored_records(target, &mut stored_records, &mut copied, &mut progress).await?;
                }
            }
            In::End { checkpoints, turns, records, stored_records } => {
                // Format 1 has no records to count; format 2 must count them.
                let stored_records = match (header, stored_records) {
                    (Some(1), None) => 0,
                    (Some(1), Some(_)) | (_, None) => {
                        return Err(Error::Format(format!(
                            "line {}: the end line does not match the header's format",
                            number + 1
                        )));
                    }
                    (_, Some(count)) => count,
                };
                end = Some((checkpoints, turns, records, stored_records));
            }
        }
    }
    flush_checkpoints(target, &mut checkpoints, &mut copied, &mut progress).await?;
    flush_records(target, &mut records, &mut copied, &mut progress).await?;
    flush_stored_records(target, &mut stored_records, &mut copied, &mut progress).await?;
    let counted = (
        checkpoint_keys.len() as u64,
        turn_keys.len() as u64,
        record_keys.len() as u64,
        stored_record_keys.len() as u64,
    );
    match end {
        None => return Err(Error::Format("the file has no end line: it was cut short".into())),
        Some(end) if end != counted => {
            return Err(Error::Format(format!(
                "the end line counts {end:?} (checkpoints, turns, idempotency records, records) but the file \
                 holds {counted:?}"
            )));
        }
        Some(_) => {}
    }
    let mut tallier = Tallier::default();
    checkpoint_keys.sort_unstable_by(|a, b| (&a.0, &a.1, a.2, a.3).cmp(&(&b.0, &b.1, b.2, b.3)));
    for (namespace, _, _, _, digest) in checkpoint_keys {
        tallier.checkpoint(&namespace, digest);
    }
    turn_keys.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    for (namespace, _, digest) in turn_keys {
        tallier.turn(&namespace, digest);
    }
    record_keys.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    for (namespace, _, digest) in record_keys {
        tallier.record(&namespace, digest);
    }
    stored_record_keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for ((namespace, ..), digest) in stored_record_keys {
        tallier.stored_record(&namespace, digest);
    }
    Ok((copied, tallier.finish()))
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

async fn flush_checkpoints(
    target: &Side,
    chunk: &mut Chunk<CheckpointRow>,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let rows = chunk.take();
    if rows.is_empty() {
        return Ok(());
    }
    let inserted = target.insert_checkpoints(&rows).await?;
    copied.checkpoints_copied += inserted;
    copied.checkpoints_present += rows.len() as u64 - inserted;
    progress.chunk_done("checkpoints", copied.checkpoints_copied + copied.checkpoints_present, None)
}

async fn flush_records(
    target: &Side,
    chunk: &mut Chunk<KeyRow>,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let rows = chunk.take();
    if rows.is_empty() {
        return Ok(());
    }
    let inserted = target.insert_records(&rows).await?;
    copied.records_copied += inserted;
    copied.records_present += rows.len() as u64 - inserted;
    progress.chunk_done("idempotency records", copied.records_copied + copied.records_present, None)
}

async fn flush_stored_records(
    target: &Side,
    chunk: &mut Chunk<StoredRecordRow>,
    copied: &mut Copied,
    progress: &mut Progress,
) -> Result<(), Error> {
    let rows = chunk.take();
    if rows.is_empty() {
        return Ok(());
    }
    let inserted = target.insert_stored_records(&rows).await?;
    copied.stored_records_copied += inserted;
    copied.stored_records_present += rows.len() as u64 - inserted;
    progress.chunk_done("records", copied.stored_records_copied + copied.stored_records_present, None)
}

/// Bytes as a base64 string.
pub mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// UTF-8 bytes as a JSON string.
pub mod utf8_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        let text = std::str::from_utf8(bytes).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        Ok(String::deserialize(deserializer)?.into_bytes())
    }
}
