//! The arguments of the commands that move a store's contents, run with the
//! sidecars stopped: `migrate` (one store to another), `export` (a store to
//! NDJSON) and `import` (NDJSON into a store), and the chunks all three cut
//! their work into.

use std::path::PathBuf;

use clap::Args;

use super::values::size;
use crate::store::Database;

/// How `migrate`, `export` and `import` cut their work into chunks, each
/// read, held and (but for export) written in one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ChunkArgs {
    /// Most rows in one chunk (one transaction each). At most 2000: SQLite
    /// takes at most 32766 values in one statement, and a row binds up to 13.
    #[arg(long = "chunk-rows", value_name = "ROWS", default_value = "500", value_parser = size(1, 2000))]
    pub chunk_rows: usize,
    /// Bytes a chunk may hold, counting each row's variable-length columns
    /// (states, results, payloads, metadata, refs, ids) and a small fixed
    /// overhead: a chunk ends at the first row that reaches this, and always
    /// holds at least one row, however large. From 1 MiB to 256 MiB.
    #[arg(long = "chunk-bytes-max", value_name = "BYTES", default_value = "67108864",
          value_parser = size(1 << 20, 256 << 20))]
    pub chunk_bytes_max: usize,
}

/// Flags of `stepwell migrate`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MigrateArgs {
    /// The store to copy from: sqlite://PATH or postgres://…
    #[arg(long, value_name = "URL")]
    pub from: Database,
    /// The store to copy to (created and migrated if need be).
    #[arg(long, value_name = "URL")]
    pub to: Database,
    #[command(flatten)]
    pub chunks: ChunkArgs,
}

/// Flags of `stepwell export`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ExportArgs {
    /// The store to read: sqlite://PATH or postgres://…
    #[arg(long, value_name = "URL")]
    pub from: Database,
    /// Where to write the NDJSON; - for standard output.
    #[arg(long, value_name = "PATH", default_value = "-")]
    pub out: PathBuf,
    #[command(flatten)]
    pub chunks: ChunkArgs,
}

/// Flags of `stepwell import`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ImportArgs {
    /// The store to load into (created and migrated if need be).
    #[arg(long, value_name = "URL")]
    pub to: Database,
    /// The NDJSON to read; - for standard input.
    #[arg(long = "in", value_name = "PATH", default_value = "-")]
    pub input: PathBuf,
    #[command(flatten)]
    pub chunks: ChunkArgs,
}
