//! The operator commands that act on a running sidecar over gRPC, so that
//! its authentication, roles and namespaces apply to them as to any caller:
//! `stepwell turns ls|show|rm` and `stepwell keys get|release`. Each prints
//! a table on a terminal or NDJSON with `--json`, and a failure as one line
//! with the gRPC code and reason.

use std::process::ExitCode;

use crate::config::{KeysCommand, TurnsCommand};

/// Runs `stepwell turns …`.
pub fn turns(command: &TurnsCommand) -> ExitCode {
    let _ = command;
    eprintln!("stepwell turns: not built yet");
    ExitCode::FAILURE
}

/// Runs `stepwell keys …`.
pub fn keys(command: &KeysCommand) -> ExitCode {
    let _ = command;
    eprintln!("stepwell keys: not built yet");
    ExitCode::FAILURE
}
