//! What the memory benchmark reads of a running sidecar, from `/proc`: its
//! resident memory now and at its peak (`VmRSS`, `VmHWM`), its threads, its
//! open file descriptors and how many of them are sockets, and how many TCP
//! connections to its gRPC port are established. The socket count is what
//! proves that the sidecar itself accepted the connections: the kernel
//! completes a TCP handshake (and lists it as established) before the
//! process accepts it, so the established count alone would not.

use std::time::{Duration, Instant};

use serde::Serialize;

/// One reading of a sidecar process.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Probe {
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub threads: u64,
    pub fds: u64,
    pub sockets: u64,
    /// TCP connections in state ESTABLISHED whose local port is the sidecar's.
    pub established: u64,
}

/// Reads process `pid`, whose gRPC port is `port`.
pub fn read(pid: u32, port: u16) -> Result<Probe, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}: {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/status has no {name}"))
    };
    let (fds, sockets) = descriptors(pid)?;
    Ok(Probe {
        rss_kib: field("VmRSS:")?,
        peak_rss_kib: field("VmHWM:")?,
        threads: field("Threads:")?,
        fds,
        sockets,
        established: established(pid, port)?,
    })
}

/// The process's open file descriptors, and how many of them are sockets.
fn descriptors(pid: u32) -> Result<(u64, u64), String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("/proc/{pid}/fd: {e}"))?;
    let (mut fds, mut sockets) = (0, 0);
    for entry in dir.flatten() {
        fds += 1;
        // A descriptor closed between the listing and the readlink is simply not a socket.
        if std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            sockets += 1;
        }
    }
    Ok((fds, sockets))
}

/// Established TCP connections (IPv4 and IPv6) with local port `port`, as
/// the process's network namespace lists them.
fn established(pid: u32, port: u16) -> Result<u64, String> {
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{table}");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        count += text.lines().skip(1).filter(|line| is_established_on(line, port)).count() as u64;
    }
    Ok(count)
}

/// Whether one line of /proc/net/tcp is an ESTABLISHED (state 01)
/// connection whose local address (`IP:PORT`, the port in hex) has `port`.
fn is_established_on(line: &str, port: u16) -> bool {
    let mut fields = line.split_whitespace();
    let local = fields.nth(1);
    let state = fields.nth(1);
    let local_port = local.and_then(|l| l.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
    local_port == Some(port) && state == Some("01")
}

/// Reads the process until its resident memory holds still: `WINDOW`
/// readings in a row within `TOLERANCE_KIB` of each other, each `STEP`
/// apart, for at most `limit`. Answers the last reading, and whether it
/// settled; one that never does is reported as such rather than failed,
/// since a busy machine may keep a heap moving.
pub async fn settled(pid: u32, port: u16, limit: Duration) -> Result<(Probe, bool), String> {
    const WINDOW: usize = 10;
    const STEP: Duration = Duration::from_millis(100);
    const TOLERANCE_KIB: u64 = 256;
    let deadline = Instant::now() + limit;
    let mut recent: Vec<u64> = Vec::with_capacity(WINDOW);
    loop {
        let probe = read(pid, port)?;
        if recent.len() == WINDOW {
            recent.remove(0);
        }
        recent.push(probe.rss_kib);
        let spread = recent.iter().max().unwrap_or(&0) - recent.iter().min().unwrap_or(&0);
        if recent.len() == WINDOW && spread <= TOLERANCE_KIB {
            return Ok((probe, true));
        }
        if Instant::now() >= deadline {
            return Ok((probe, false));
        }
        // Polling the process's own counters: it signals nothing else.
        tokio::time::sleep(STEP).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_lines_are_told_by_local_port_and_state() {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid";
        let listening = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0";
        let accepted = "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  0";
        let client_end = "   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0";
        assert!(!is_established_on(header, 8080));
        assert!(!is_established_on(listening, 8080));
        assert!(is_established_on(accepted, 8080));
        assert!(!is_established_on(client_end, 8080));
    }

    #[test]
    fn this_process_reads_as_itself() {
        let probe = read(std::process::id(), 1).unwrap();
        assert!(probe.rss_kib > 0 && probe.peak_rss_kib >= probe.rss_kib);
        assert!(probe.threads >= 1 && probe.fds >= 1);
    }
}
