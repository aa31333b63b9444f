//! A private throwaway Postgres cluster for tests that must stop the server
//! or run it with unsafe settings, which the shared test server cannot allow.
//! Made from the installed PostgreSQL server binaries (as the `postgres` user
//! when the tests run as root, since initdb refuses root), on a free port,
//! and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub struct PgCluster {
    dir: TempDir,
    bindir: PathBuf,
    port: u16,
}

/// The newest installed PostgreSQL server binaries; fails saying how to install them.
fn bindir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.into_iter().rev().find(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists()).unwrap_or_else(|| {
        panic!("the PostgreSQL server binaries are missing: install them with `apt-get install -y postgresql`")
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A command run as the cluster's owner.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(mut command: Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(output.status.success(), "{what} failed: {}", String::from_utf8_lossy(&output.stderr));
}

impl PgCluster {
    /// Creates and starts a cluster with extra server settings, e.g. `["fsync=off"]`.
    pub fn start(settings: &[&str]) -> PgCluster {
        let dir = tempfile::Builder::new().prefix("stepwell-pg-").tempdir().expect("create a cluster directory");
        if is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
            run(
                {
                    let mut chown = Command::new("chown");
                    chown.arg("postgres").arg(dir.path());
                    chown
                },
                "chown the cluster directory",
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let cluster = PgCluster { dir, bindir: bindir(), port };
        let mut initdb = as_owner(&cluster.bindir.join("initdb"));
        initdb.arg("-D").arg(cluster.data()).args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run(initdb, "initdb");
        let mut options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", port, cluster.dir.path().display());
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        std::fs::write(cluster.dir.path().join("options"), options).expect("write the server options");
        cluster.start_again();
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut command = as_owner(&self.bindir.join("pg_ctl"));
        command.arg("-D").arg(self.data()).args(args);
        command
    }

    /// The `postgres` database of this cluster.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_again(&self) {
        let options = std::fs::read_to_string(self.dir.path().join("options")).expect("read the server options");
        let log = self.dir.path().join("server.log");
        let mut start = self.pg_ctl(&["-w", "-t", "60", "-o", &options, "-l"]);
        start.arg(log).arg("start");
        run(start, "pg_ctl start");
    }

    /// Stops the server the way a crash would: no shutdown checkpoint.
    pub fn stop_immediate(&self) {
        run(self.pg_ctl(&["-m", "immediate", "-w", "stop"]), "pg_ctl stop -m immediate");
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]).output();
    }
}
