//! What the figures were measured on, for the report: CPUs, memory, kernel
//! and the disk under the stores (as `nproc`, `lscpu`, `free -h`, `uname`
//! and `df` print them), the sidecar's version and the `STEPWELL_*`
//! settings it inherited, and, in full mode, how fast the disk syncs
//! (`pg_test_fsync`), which bounds every durable commit.

use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value};

/// The output of a command, trimmed, or why there was none.
fn output(program: &str, args: &[&str]) -> String {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => format!("{program} failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("{program} unavailable: {e}"),
    }
}

/// The machine, described by the usual commands; `dir` is where the stores live.
pub fn describe(dir: &Path) -> Map<String, Value> {
    let mut machine = Map::new();
    let lscpu = output("lscpu", &[]);
    let lscpu_head: Vec<&str> = lscpu.lines().take(12).collect();
    machine.insert("nproc".into(), output("nproc", &[]).into());
    machine.insert("lscpu".into(), lscpu_head.join("\n").into());
    machine.insert("free".into(), output("free", &["-h"]).into());
    machine.insert("kernel".into(), output("uname", &["-srm"]).into());
    machine.insert("df".into(), output("df", &["-h", &dir.display().to_string()]).into());
    machine
}

/// One line for people: "2 CPUs (model), 23Gi RAM, Linux 6.x".
pub fn summary(machine: &Map<String, Value>) -> String {
    let text = |key: &str| machine.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let model = text("lscpu")
        .lines()
        .find_map(|l| l.strip_prefix("Model name:").map(|m| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let memory = text("free")
        .lines()
        .find_map(|l| l.strip_prefix("Mem:").and_then(|m| m.split_whitespace().next()).map(str::to_owned))
        .unwrap_or_default();
    format!("{} CPUs ({model}), {memory} RAM, {}", text("nproc"), text("kernel"))
}

/// The sidecar binary's version line.
pub fn sidecar_version(binary: &Path) -> String {
    output(&binary.display().to_string(), &["--version"])
}

/// `STEPWELL_*` variables the sidecars inherit (database URLs left out).
pub fn sidecar_environment() -> Map<String, Value> {
    std::env::vars()
        .filter(|(name, _)| name.starts_with("STEPWELL_") && !name.contains("URL"))
        .map(|(name, value)| (name, Value::String(value)))
        .collect()
}

/// `pg_test_fsync`'s comparison of sync methods for one 8 kB write, run in
/// `dir` for one second per method; stopped once that section is printed
/// (the other sections would take another ten seconds).
pub fn fsync_rates(bindir: &Path, dir: &Path) -> Value {
    use std::io::BufRead;
    let file = dir.join("pg_test_fsync.out");
    let program = bindir.join("pg_test_fsync");
    let child = Command::new(&program)
        .args(["-s", "1", "-f", &file.display().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return format!("{} unavailable: {e}", program.display()).into(),
    };
    let mut lines = Vec::new();
    let mut in_section = false;
    for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines().map_while(Result::ok) {
        if line.starts_with("Compare file sync methods using one 8kB write") {
            in_section = true;
        } else if line.starts_with("Compare file sync methods using two") {
            break;
        } else if in_section && line.contains("ops/sec") {
            lines.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&file);
    Value::String(lines.join("\n"))
}
