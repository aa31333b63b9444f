//! `stepwell proto DIR` as a team without the repository uses it: the
//! binary writes the contract's files and a buf.yaml, they are the files
//! the binary was built from, and buf builds and lints them as a module.

use std::path::Path;
use std::process::Command;

use crate::STEPWELL;

#[test]
fn stepwell_proto_writes_the_contract_as_a_module_buf_builds() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("contract");
    let output = Command::new(STEPWELL).arg("proto").arg(&out).output().expect("run stepwell proto");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(listed.lines().count(), 5, "each file written is named: {listed}");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in [
        "stepwell/v1/checkpoint.proto",
        "stepwell/v1/idempotency.proto",
        "stepwell/v1/records.proto",
        "stepwell/v1/waits.proto",
    ] {
        let written = std::fs::read(out.join(name)).expect("the file is written");
        let source = std::fs::read(root.join("proto").join(name)).expect("the repository's file");
        assert_eq!(written, source, "{name} is the contract the binary was built from");
    }
    assert!(out.join("buf.yaml").is_file());

    // The test command installs buf (npm) before the Rust tests run.
    let buf = root.join("node_modules/.bin/buf");
    assert!(buf.is_file(), "buf is installed by `npm install` at the repository root (scripts/test does it)");
    for args in [["build", "."], ["lint", "."]] {
        let checked = Command::new(&buf).args(args).current_dir(&out).output().expect("run buf");
        assert!(
            checked.status.success(),
            "buf {args:?} on the written module: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

#[test]
fn stepwell_proto_says_why_it_cannot_write() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").expect("write a file");
    let output = Command::new(STEPWELL).arg("proto").arg(&file).output().expect("run stepwell proto");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("could not write into") && stderr.contains("a-file"), "{stderr}");
}

/// One version story: `stepwell --version` names the contract's major and
/// minor version (proto/VERSION), which the clients' versions carry too
/// (scripts/check-versions).
#[test]
fn stepwell_version_is_the_contracts() {
    let output = Command::new(STEPWELL).arg("--version").output().expect("run stepwell --version");
    assert!(output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout);
    let version = printed.trim().strip_prefix("stepwell ").expect("`stepwell <version>`");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let contract = std::fs::read_to_string(root.join("proto/VERSION")).expect("proto/VERSION");
    let major_minor = |v: &str| v.trim().rsplit_once('.').map(|(mm, _)| mm.to_owned());
    assert_eq!(major_minor(version), major_minor(&contract), "sidecar {version}, contract {}", contract.trim());
}
