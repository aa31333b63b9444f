//! A private PgBouncer in transaction mode, in front of a Postgres server,
//! for tests of what a pooler does to a sidecar that does not know it is
//! there: Debian's package with its defaults, plus whatever settings a test
//! adds (`ignore_startup_parameters`, say). Run as the `postgres` user when
//! the tests run as root, since PgBouncer refuses root; on a free port;
//! stopped and removed when dropped.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::backend::with_database;

pub struct PgBouncer {
    dir: TempDir,
    port: u16,
}

/// The installed PgBouncer; fails saying how to install it.
fn binary() -> PathBuf {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("PgBouncer is missing: install it with `apt-get install -y pgbouncer`"))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("a bound address").port()
}

impl PgBouncer {
    /// Starts one in front of the server `postgres` names (its host and
    /// port), with `extra` lines added to its `[pgbouncer]` section.
    pub fn start(postgres: &str, extra: &[&str]) -> PgBouncer {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let port = free_port();
        let host_port = postgres.split('@').next_back().and_then(|rest| rest.split('/').next()).expect("HOST:PORT");
        let (host, pg_port) = host_port.rsplit_once(':').expect("HOST:PORT");
        let path = |name: &str| dir.path().join(name).display().to_string();
        let ini = format!(
            "[databases]\n* = host={host} port={pg_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = transaction\nlogfile = {}\n\
             pidfile = {}\n{}\n",
            path("users.txt"),
            path("pgbouncer.log"),
            path("pgbouncer.pid"),
            extra.join("\n")
        );
        std::fs::write(dir.path().join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").expect("write users.txt");
        let mut command = crate::pg_cluster::as_owner_of(dir.path(), &binary());
        let status = command.arg("-d").arg(dir.path().join("pgbouncer.ini")).status().expect("run pgbouncer");
        assert!(
            status.success(),
            "pgbouncer failed to start: {}",
            std::fs::read_to_string(path("pgbouncer.log")).unwrap_or_default()
        );
        let bouncer = PgBouncer { dir, port };
        bouncer.wait_until_listening();
        bouncer
    }

    /// `pgbouncer -d` returns once it has forked, before it listens.
    fn wait_until_listening(&self) {
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "PgBouncer did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of database `name` through this pooler.
    pub fn url(&self, name: &str) -> String {
        with_database(&format!("postgres://postgres@127.0.0.1:{}/postgres", self.port), name)
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pgbouncer.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}
