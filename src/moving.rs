//! Moving a store: `stepwell migrate --from URL --to URL` copies every
//! checkpoint, turn summary and idempotency record from one store to
//! another, and `stepwell export` / `stepwell import` write and read them as
//! NDJSON, with the sidecars stopped.

use std::process::ExitCode;

use crate::config::{ExportArgs, ImportArgs, MigrateArgs};

/// Runs `stepwell migrate`.
pub fn migrate(args: &MigrateArgs) -> ExitCode {
    let _ = args;
    eprintln!("stepwell migrate: not built yet");
    ExitCode::FAILURE
}

/// Runs `stepwell export`.
pub fn export(args: &ExportArgs) -> ExitCode {
    let _ = args;
    eprintln!("stepwell export: not built yet");
    ExitCode::FAILURE
}

/// Runs `stepwell import`.
pub fn import(args: &ImportArgs) -> ExitCode {
    let _ = args;
    eprintln!("stepwell import: not built yet");
    ExitCode::FAILURE
}
