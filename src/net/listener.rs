//! The socket stepwell serves on: a TCP port, or a Unix socket file made
//! safe to share a directory with others.
//!
//! A Unix socket is bound inside a private directory (mode 0700) beside its
//! path, given its permissions (`--unix-socket-mode`), and only then renamed
//! into place, so no one can connect to it before its mode is set and no
//! process-wide umask is touched. A path where a sidecar still answers is
//! refused; only a stale socket (one that refuses connections) is replaced.
//! At shutdown the file is removed only if it is still the one this process
//! bound (same device and inode), so an old sidecar stopping never removes
//! the socket of a new one that replaced it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, UnixListener};

use crate::config::values::Listen;

/// A bound socket to serve on.
pub enum Listener {
    Tcp(TcpListener),
    /// A Unix socket and its file, removed again when dropped.
    Unix(UnixListener, SocketFile),
}

impl Listener {
    /// Binds the configured address; a Unix socket file gets `socket_mode`.
    /// A Unix path where a sidecar answers is refused (`AddrInUse`), as is
    /// one that is not a socket (`AlreadyExists`).
    pub async fn bind(listen: &Listen, socket_mode: u32) -> io::Result<Listener> {
        match listen {
            Listen::Tcp(addr) => Ok(Listener::Tcp(TcpListener::bind(addr).await?)),
            Listen::Unix(path) => {
                let (listener, file) = bind_unix(path, socket_mode)?;
                Ok(Listener::Unix(listener, file))
            }
        }
    }

    /// The bound address, for logs and for tests that bind port 0.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(_, file) => format!("unix:{}", file.path.display()),
        }
    }
}

/// A socket file this process bound, known by its device and inode.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    /// Removes the file if it is still ours; another process's socket that
    /// replaced it stays.
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.dev() == self.device && m.ino() == self.inode);
        if ours && let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(%error, path = %self.path.display(), "could not remove the socket file");
        }
    }
}

/// Tells apart the private directories of several binds in one process.
static BINDS: AtomicU64 = AtomicU64::new(0);

fn bind_unix(path: &Path, mode: u32) -> io::Result<(UnixListener, SocketFile)> {
    refuse_unless_stale(path)?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let private = parent.join(format!(".stepwell-{}-{}", std::process::id(), BINDS.fetch_add(1, Ordering::Relaxed)));
    std::fs::DirBuilder::new().mode(0o700).create(&private)?;
    let staged = private.join("s");
    let bound = (|| {
        let listener = UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))?;
        let metadata = std::fs::symlink_metadata(&staged)?;
        // Atomic, and replaces a stale socket in the same step.
        std::fs::rename(&staged, path)?;
        Ok((listener, SocketFile { path: path.to_owned(), device: metadata.dev(), inode: metadata.ino() }))
    })();
    if bound.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    let _ = std::fs::remove_dir(&private);
    bound
}

/// Whether `path` may be bound: nothing there, or a socket no one answers on.
fn refuse_unless_stale(path: &Path) -> io::Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !metadata.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket; not replacing it", path.display()),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("a server already answers on {}; stop it first or choose another --listen path", path.display()),
        )),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
        Err(error) => Err(io::Error::new(
            error.kind(),
            format!("could not tell whether a server answers on {}: {error}", path.display()),
        )),
    }
}
