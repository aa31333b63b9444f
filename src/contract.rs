//! The contract the binary serves, as source: `stepwell proto DIR` writes
//! the `.proto` files of `stepwell.v1` and a `buf.yaml`, so a team in any
//! language can generate its stubs from the binary it runs.

use std::process::ExitCode;

use crate::config::ProtoArgs;

/// Runs `stepwell proto DIR`.
pub fn write(args: &ProtoArgs) -> ExitCode {
    let _ = args;
    eprintln!("stepwell proto: not built yet");
    ExitCode::FAILURE
}
