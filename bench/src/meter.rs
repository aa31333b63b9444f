//! CPU accounting from `/proc`: the sidecar's CPU, the Postgres server's
//! (the postmaster, its live children, and the children it has reaped), the
//! load generator's own (plus pgbench's when pgbench is the load), and how
//! busy the whole machine was. A snapshot is taken when a measurement window
//! opens and another when it closes; their difference is the window's usage.
//!
//! Context switches of the sidecar are read from every thread's
//! `/proc/PID/task/TID/status` (`voluntary_ctxt_switches` +
//! `nonvoluntary_ctxt_switches`) and differenced thread by thread; a thread
//! born in the window counts from zero, and a thread that exits within the
//! window takes its switches with it: those are lost, and counted as such.
//!
//! Times are in clock ticks (`_SC_CLK_TCK`, normally 100 per second), so a
//! figure per operation is only meaningful over windows of many ticks.

use std::collections::BTreeMap;
use std::time::Instant;

/// User + system CPU of one process (all its threads), in ticks; with
/// `reaped`, also the CPU of the children it has waited for.
fn process_ticks(pid: u32, reaped: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat_fields(&stat)?;
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // After the command name: state (0), ppid (1), ..., utime (11), stime
    // (12), cutime (13), cstime (14).
    let own = number(11)? + number(12)?;
    Some(if reaped { own + number(13)? + number(14)? } else { own })
}

/// The fields of a `/proc/PID/stat` line after the command name, which may
/// itself hold spaces and parentheses.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    Some(after_name.split_whitespace().collect())
}

/// The parent of `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat)?.get(1)?.parse().ok()
}

/// CPU of a server that forks a process per connection (Postgres): the
/// server, its live children, and the children it already reaped.
fn process_tree_ticks(root: u32) -> Option<u64> {
    let mut total = process_ticks(root, true)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if pid != root && parent(pid) == Some(root) {
            // A child that exits between the two reads is counted by neither.
            total += process_ticks(pid, false).unwrap_or(0);
        }
    }
    Some(total)
}

/// Voluntary plus involuntary context switches of one thread, from its `status` text.
fn switches_in_status(status: &str) -> Option<u64> {
    let field = |name: &str| status.lines().find_map(|line| line.strip_prefix(name)?.trim().parse::<u64>().ok());
    Some(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}

/// Context switches of every live thread of `pid`, by thread id.
fn thread_switches(pid: u32) -> Option<BTreeMap<u32, u64>> {
    let mut threads = BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        // A thread that exits between the listing and the read is skipped.
        if let Some(switches) =
            std::fs::read_to_string(entry.path().join("status")).ok().as_deref().and_then(switches_in_status)
        {
            threads.insert(tid, switches);
        }
    }
    Some(threads)
}

/// Switches from `before` to `after`, thread by thread: (switches, threads
/// that were there before and gone after, whose switches are lost).
fn switches_between(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> (u64, usize) {
    let counted = after.iter().map(|(tid, now)| now.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum();
    let exited = before.keys().filter(|tid| !after.contains_key(tid)).count();
    (counted, exited)
}

/// (busy, total) ticks of all CPUs since boot, from `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4)?;
    Some((total - idle, total))
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Which processes to account for during a measurement.
#[derive(Debug, Clone, Copy, Default)]
pub struct Meters {
    /// The sidecar under test.
    pub sidecar: Option<u32>,
    /// The postmaster of the local Postgres server.
    pub postgres: Option<u32>,
    /// An external load generator (pgbench), counted with this process.
    pub external_load: Option<u32>,
}

/// CPU counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    at: Instant,
    sidecar: Option<u64>,
    sidecar_switches: Option<BTreeMap<u32, u64>>,
    postgres: Option<u64>,
    load: u64,
    machine: Option<(u64, u64)>,
}

/// CPU used during a window, in seconds of CPU, and the machine's busy share.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub seconds: f64,
    pub sidecar_cpu: Option<f64>,
    /// The sidecar's context switches (all its threads).
    pub sidecar_switches: Option<u64>,
    /// Sidecar threads that exited during the window (their switches are lost).
    pub sidecar_threads_exited: usize,
    pub postgres_cpu: Option<f64>,
    pub load_cpu: f64,
    /// Busy share of all the machine's CPUs, in percent.
    pub machine_busy_pct: Option<f64>,
}

impl Meters {
    pub fn snapshot(&self) -> Snapshot {
        let own = process_ticks(std::process::id(), false).unwrap_or(0);
        let external = self.external_load.and_then(|pid| process_ticks(pid, false)).unwrap_or(0);
        Snapshot {
            at: Instant::now(),
            sidecar: self.sidecar.and_then(|pid| process_ticks(pid, false)),
            sidecar_switches: self.sidecar.and_then(thread_switches),
            postgres: self.postgres.and_then(process_tree_ticks),
            load: own + external,
            machine: machine_ticks(),
        }
    }
}

impl Snapshot {
    /// What was used from `self` to `later`.
    pub fn until(&self, later: &Snapshot) -> Usage {
        let hz = ticks_per_second();
        let cpu = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64 / hz);
        let switches = match (&self.sidecar_switches, &later.sidecar_switches) {
            (Some(before), Some(after)) => Some(switches_between(before, after)),
            _ => None,
        };
        Usage {
            sidecar_switches: switches.map(|(n, _)| n),
            sidecar_threads_exited: switches.map_or(0, |(_, exited)| exited),
            seconds: later.at.duration_since(self.at).as_secs_f64(),
            sidecar_cpu: cpu(self.sidecar, later.sidecar),
            postgres_cpu: cpu(self.postgres, later.postgres),
            load_cpu: later.load.saturating_sub(self.load) as f64 / hz,
            machine_busy_pct: match (self.machine, later.machine) {
                (Some((busy0, total0)), Some((busy1, total1))) if total1 > total0 => {
                    Some(100.0 * (busy1 - busy0) as f64 / (total1 - total0) as f64)
                }
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_the_machine() {
        let meters = Meters { sidecar: Some(std::process::id()), ..Meters::default() };
        let before = meters.snapshot();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let usage = before.until(&meters.snapshot());
        assert!(usage.sidecar_cpu.unwrap() > 0.0, "{usage:?}");
        assert!(usage.sidecar_switches.is_some(), "{usage:?}");
        assert!(usage.machine_busy_pct.is_some());
    }

    #[test]
    fn counts_switches_thread_by_thread() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(switches_in_status(status), Some(10));
        assert_eq!(switches_in_status("Name:\tx\n"), None);
        // Thread 1 lives on (+5), thread 2 exits (lost), thread 3 is born (all 4 count).
        let before = BTreeMap::from([(1, 10), (2, 100)]);
        let after = BTreeMap::from([(1, 15), (3, 4)]);
        assert_eq!(switches_between(&before, &after), (9, 1));
    }

    #[test]
    fn reads_this_process_threads() {
        let threads = thread_switches(std::process::id()).unwrap();
        assert!(threads.contains_key(&std::process::id()), "{threads:?}");
    }

    #[test]
    fn parses_names_with_spaces() {
        let fields = stat_fields("12 (a b) c) S 1 2 3").unwrap();
        assert_eq!(fields, ["S", "1", "2", "3"]);
    }
}
