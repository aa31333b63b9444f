//! A private throwaway Postgres cluster for tests that must stop the server
//! or run it with unsafe settings, which the shared test server cannot allow.
//! Made from the installed PostgreSQL server binaries (as the `postgres` user
//! when the tests run as root, since initdb refuses root), on a free port,
//! and removed when dropped.
//!
//! `PgCluster::start_tls` makes one that speaks TLS only: a throwaway CA
//! (made with `openssl`) signs a server certificate for localhost and
//! 127.0.0.1, pg_hba.conf accepts TCP connections over TLS alone, and roles
//! other than `postgres` must give a password (SCRAM).

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub struct PgCluster {
    dir: TempDir,
    bindir: PathBuf,
    port: u16,
}

/// The TLS-only cluster's pg_hba.conf: over TCP only TLS is accepted, the
/// `postgres` superuser without a password, every other role with one.
const TLS_ONLY_HBA: &str = "local all all trust\n\
                            hostssl all postgres 127.0.0.1/32 trust\n\
                            hostssl all all 127.0.0.1/32 scram-sha-256\n";

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

/// A command run as the owner of a throwaway server's files (PgBouncer's
/// too): `postgres` when the tests run as root, which then owns `dir`.
pub(crate) fn as_owner_of(dir: &Path, program: &Path) -> Command {
    if is_root() {
        let mut chown = Command::new("chown");
        chown.args(["-R", "postgres"]).arg(dir);
        run(chown, "chown the server's directory");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("open the directory");
    }
    as_owner(program)
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
        let cluster = PgCluster::create();
        cluster.configure(settings);
        cluster.start_again();
        cluster
    }

    /// Creates and starts a cluster that accepts TCP connections over TLS
    /// only, its certificate signed by the CA at `ca_file`.
    pub fn start_tls() -> PgCluster {
        let cluster = PgCluster::create();
        let tls = cluster.tls_dir();
        std::fs::create_dir(&tls).expect("create the TLS directory");
        make_ca(&tls, "ca", "stepwell test CA");
        make_ca(&tls, "other-ca", "another CA");
        make_server_certificate(&tls);
        if is_root() {
            let mut chown = Command::new("chown");
            chown.arg("postgres").arg(tls.join("server.key"));
            run(chown, "chown the server key");
        }
        std::fs::write(cluster.data().join("pg_hba.conf"), TLS_ONLY_HBA).expect("write pg_hba.conf");
        let cert = format!("ssl_cert_file={}", tls.join("server.crt").display());
        let key = format!("ssl_key_file={}", tls.join("server.key").display());
        cluster.configure(&["ssl=on", &cert, &key]);
        cluster.start_again();
        cluster
    }

    /// The CA that signed a TLS cluster's certificate, as a PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.tls_dir().join("ca.pem")
    }

    /// A CA that signed nothing this cluster presents.
    pub fn other_ca_file(&self) -> PathBuf {
        self.tls_dir().join("other-ca.pem")
    }

    fn tls_dir(&self) -> PathBuf {
        self.dir.path().join("tls")
    }

    /// A new cluster's directory and data, not yet started.
    fn create() -> PgCluster {
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
        cluster
    }

    /// Writes the server's options: its port and socket, and `settings`.
    fn configure(&self, settings: &[&str]) {
        let mut options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        std::fs::write(self.dir.path().join("options"), options).expect("write the server options");
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut command = as_owner(&self.bindir.join("pg_ctl"));
        command.arg("-D").arg(self.data()).args(args);
        command
    }

    /// The port the server listens on, at 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
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

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str], what: &str) {
    let mut command = Command::new("openssl");
    command.current_dir(dir).args(args);
    run(command, what);
}

/// A self-signed CA, `NAME.pem` and `NAME.key` in `dir`.
fn make_ca(dir: &Path, name: &str, subject: &str) {
    let (pem, key, subject) = (format!("{name}.pem"), format!("{name}.key"), format!("/CN={subject}"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subject,
            "-keyout",
            &key,
            "-out",
            &pem,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        "make a CA",
    );
}

/// `server.crt` and `server.key` in `dir`, for localhost and 127.0.0.1,
/// signed by `ca`; the key readable by its owner alone, as Postgres demands.
fn make_server_certificate(dir: &Path) {
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("write the certificate's extensions");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        "make the server's key",
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
        "sign the server's certificate",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600)).expect("chmod the key");
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]).output();
    }
}
