//! The contract the binary serves, as source: `stepwell proto DIR` writes
//! the `.proto` files of `stepwell.v1` (the very files it was built from,
//! embedded at build time) under `DIR/stepwell/v1/`, and a `buf.yaml` that
//! makes `DIR` a module, so a team in any language can generate its stubs
//! from the binary it runs, without the repository: `buf generate DIR`, or
//! `protoc -I DIR` (the well-known types the files import ship with both).

use std::path::Path;
use std::process::ExitCode;

use crate::config::commands::ProtoArgs;

/// The contract's files, by their path under the directory.
pub const PROTOS: [(&str, &str); 4] = [
    ("stepwell/v1/checkpoint.proto", include_str!("../../proto/stepwell/v1/checkpoint.proto")),
    ("stepwell/v1/idempotency.proto", include_str!("../../proto/stepwell/v1/idempotency.proto")),
    ("stepwell/v1/records.proto", include_str!("../../proto/stepwell/v1/records.proto")),
    ("stepwell/v1/waits.proto", include_str!("../../proto/stepwell/v1/waits.proto")),
];

/// A module rooted at the directory, with the lint rules the contract keeps.
const BUF_YAML: &str = "\
# The stepwell.v1 contract, as written by `stepwell proto`.
version: v2
lint:
  use:
    - STANDARD
breaking:
  use:
    - WIRE_JSON
";

/// Writes the files under `dir`, creating directories; an existing file of
/// the same name is replaced.
pub fn write_to(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut written = Vec::new();
    for (name, text) in PROTOS.into_iter().chain([("buf.yaml", BUF_YAML)]) {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// Runs `stepwell proto DIR`: prints each file written.
pub fn write(args: &ProtoArgs) -> ExitCode {
    match write_to(&args.dir) {
        Ok(written) => {
            for path in written {
                println!("{path}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("stepwell proto: could not write into {}: {error}", args.dir.display());
            ExitCode::FAILURE
        }
    }
}
