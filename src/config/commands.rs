//! The arguments of the operator commands: `turns`, `keys`, `records`, `memory` and `waits`,
//! which reach a running sidecar (`Remote`: where, as whom, over what TLS),
//! `healthcheck`, which asks one whether it serves, and `auth` and `proto`,
//! which run alone. The client side's TLS flags are checked together here,
//! as the serve flags are in `sections`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use rustls_pki_types::ServerName;

use super::Errors;
use super::values::{Listen, age, count, json_object, millis, server_name};

/// Where an operator command reaches a running sidecar, and as whom.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Remote {
    /// Sidecar to talk to: HOST:PORT, or unix:/path/to.sock.
    #[arg(long, env = "STEPWELL_TARGET", default_value = "127.0.0.1:50051")]
    pub target: Listen,

    /// Bearer token, when the sidecar runs with --auth-file. A token on the
    /// command line is visible to every user of the host (`ps`): prefer
    /// --auth-token-file or the STEPWELL_TOKEN variable.
    #[arg(long = "auth-token", env = "STEPWELL_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,

    /// A file holding the bearer token (a trailing newline is ignored): the
    /// way to pass a token that `ps` does not show.
    #[arg(long = "auth-token-file", env = "STEPWELL_TOKEN_FILE", value_name = "PATH")]
    pub auth_token_file: Option<PathBuf>,

    /// Namespace to act in [default: the default namespace].
    #[arg(long, env = "STEPWELL_NAMESPACE", default_value = "")]
    pub namespace: String,

    /// CAs (PEM) to trust for the sidecar's certificate; dials over TLS.
    #[arg(long = "tls-ca", env = "STEPWELL_CLI_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,

    /// The name to verify in the sidecar's certificate [default: localhost].
    #[arg(long = "tls-server-name", env = "STEPWELL_CLI_TLS_SERVER_NAME", value_name = "NAME", value_parser = server_name)]
    pub tls_server_name: Option<ServerName<'static>>,

    /// A client certificate chain (PEM) for mutual TLS; needs --tls-key.
    #[arg(long = "tls-cert", env = "STEPWELL_CLI_TLS_CERT", value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long = "tls-key", env = "STEPWELL_CLI_TLS_KEY", value_name = "PATH")]
    pub tls_key: Option<PathBuf>,

    /// How long one call may take, in milliseconds.
    #[arg(long = "timeout-ms", value_name = "MS", default_value = "10000", value_parser = millis(1, 600_000))]
    pub timeout: Duration,

    /// Print NDJSON (one JSON object per line) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `stepwell turns` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum TurnsCommand {
    /// List turns: open ones by default.
    Ls(TurnsLs),
    /// Show one turn's checkpoints as a timeline, states summarised.
    Show(TurnArgs),
    /// Delete one turn's checkpoints (needs the admin role); its records
    /// stay unless --records is given.
    Rm(TurnRm),
}

/// Which turns a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TurnsFilter {
    /// No terminal checkpoint yet.
    Open,
    /// Ended with a terminal checkpoint.
    Terminal,
    /// Open and not updated for --older-than (1h unless given).
    Stalled,
    /// Every turn.
    #[value(alias = "all")]
    Any,
}

/// Flags of `stepwell turns ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct TurnsLs {
    #[command(flatten)]
    pub remote: Remote,
    /// Which turns of the checkpoint log (CheckpointService). Runs kept in
    /// records (LangGraph threads, agent sessions) are listed by `stepwell
    /// records ls`, `sessions ls` and `adk ls`.
    #[arg(long, value_enum, default_value = "any")]
    pub status: TurnsFilter,
    /// Only turns not updated for this long: 90s, 30m, 1h, 2d.
    #[arg(long = "older-than", value_name = "AGE", value_parser = age)]
    pub older_than: Option<Duration>,
    /// Most turns to list.
    #[arg(long, default_value = "1000", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// A turn of a running sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct TurnArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The turn's id.
    pub turn: String,
}

/// Flags of `stepwell turns rm`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct TurnRm {
    #[command(flatten)]
    pub remote: Remote,
    /// The turn's id.
    pub turn: String,
    /// Keep the turn's records (a LangGraph thread's checkpoints, an agent
    /// session's items): delete only its checkpoints and waits. Without it
    /// everything the turn holds is deleted. Should the delete fail midway,
    /// the same command again finishes the job.
    #[arg(long = "checkpoints-only")]
    pub checkpoints_only: bool,
    /// Accepted for older scripts: records are deleted unless
    /// --checkpoints-only is given.
    #[arg(long, hide = true, conflicts_with = "checkpoints_only")]
    pub records: bool,
}

/// What `stepwell records` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum RecordsCommand {
    /// List records of one kind: of one turn, or of every turn of the
    /// namespace when no turn is given; newest id first.
    Ls(RecordsLs),
    /// Delete every record of the turns, of every kind (needs the write
    /// role); the turns' checkpoints stay (`turns rm` deletes a turn whole).
    Rm(RecordsRm),
}

/// Flags of `stepwell records ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RecordsLs {
    #[command(flatten)]
    pub remote: Remote,
    /// The turn's id [default: every turn of the namespace].
    pub turn: Option<String>,
    /// The kind to list, such as checkpoint, blob or write (ListRecords
    /// lists one kind at a time).
    #[arg(long)]
    pub kind: String,
    /// Only records of this scope ("" is a scope of its own) [default: every scope].
    #[arg(long)]
    pub scope: Option<String>,
    /// Only records whose metadata contains this JSON object, as Postgres's
    /// jsonb @> defines containment: '{"source": "loop"}'.
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    pub metadata: Option<String>,
    /// Most records to list.
    #[arg(long, default_value = "1000", value_parser = count(1, 1_000_000))]
    pub limit: u32,
    /// With --json, also print each payload, in base64.
    #[arg(long)]
    pub payload: bool,
}

/// Flags of `stepwell records rm`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RecordsRm {
    #[command(flatten)]
    pub remote: Remote,
    /// The turns whose records to delete.
    #[arg(required = true, value_name = "TURN")]
    pub turns: Vec<String>,
}

/// What `stepwell memory` does. A path is its labels joined by `/`
/// (`users/alice/prefs`); the empty path (`/` or "") is every path.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum MemoryCommand {
    /// List the paths that hold memory items under a path, in label order.
    Ls(MemoryLs),
    /// Show one item: its value, times and time to live.
    Show(MemoryItemArgs),
    /// List the items under a path that match a filter, in the order they
    /// were first put.
    Search(MemorySearch),
    /// Delete one item, or with --recursive every item under the path
    /// (needs the write role).
    Rm(MemoryRm),
}

/// Flags of `stepwell memory ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MemoryLs {
    #[command(flatten)]
    pub remote: Remote,
    /// The path whose paths to list [default: every path].
    #[arg(default_value = "")]
    pub path: String,
    /// Cut the paths to their first N labels, each listed once.
    #[arg(long, value_parser = count(1, 256))]
    pub depth: Option<u32>,
    /// Most paths to list.
    #[arg(long, default_value = "100", value_parser = count(1, 100_000))]
    pub limit: u32,
}

/// One memory item: PATH KEY.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MemoryItemArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The item's path, labels joined by `/`.
    pub path: String,
    /// The item's key within its path.
    pub key: String,
}

/// Flags of `stepwell memory search`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MemorySearch {
    #[command(flatten)]
    pub remote: Remote,
    /// The path to search under [default: every path].
    #[arg(default_value = "")]
    pub path: String,
    /// Only items whose value matches this filter: '{"kind": "fact"}',
    /// '{"score": {"$gte": 4}}' (docs/guides/memory.md).
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    pub filter: Option<String>,
    /// Most items to list (at most the sidecar's --memory-search-results-max).
    #[arg(long, default_value = "10", value_parser = count(1, 100_000))]
    pub limit: u32,
    /// Items to skip first.
    #[arg(long, default_value = "0", value_parser = count(0, 1_000_000))]
    pub offset: u32,
}

/// Flags of `stepwell memory rm`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct MemoryRm {
    #[command(flatten)]
    pub remote: Remote,
    /// The item's path, or with --recursive the path to delete under.
    pub path: String,
    /// The item's key; not with --recursive.
    #[arg(required_unless_present = "recursive", conflicts_with = "recursive")]
    pub key: Option<String>,
    /// Delete every item under PATH ("" or / for the whole namespace).
    #[arg(long)]
    pub recursive: bool,
}

/// What `stepwell sessions` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SessionsCommand {
    /// List the agent sessions of the namespace (the clients' session
    /// adapters), newest written first, with their item counts; reads
    /// every item of the namespace.
    Ls(SessionsLs),
    /// Show a session's newest items, oldest first.
    Show(SessionsShow),
    /// Clear sessions: delete their items (needs the write role); other
    /// records and checkpoints of the same turns stay.
    Rm(SessionsRm),
}

/// Flags of `stepwell sessions ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SessionsLs {
    #[command(flatten)]
    pub remote: Remote,
    /// Most sessions to list.
    #[arg(long, default_value = "1000", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// Flags of `stepwell sessions show`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SessionsShow {
    #[command(flatten)]
    pub remote: Remote,
    /// The session's id.
    pub session: String,
    /// Most items to show, the newest.
    #[arg(long, default_value = "100", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// Flags of `stepwell sessions rm`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct SessionsRm {
    #[command(flatten)]
    pub remote: Remote,
    /// The sessions to clear.
    #[arg(required = true, value_name = "SESSION")]
    pub sessions: Vec<String>,
}

/// What `stepwell adk` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AdkCommand {
    /// List the Google ADK sessions of the namespace (the clients' ADK
    /// session services), newest update first.
    Ls(AdkLs),
    /// Show a session's newest events, oldest first, and its session state.
    Show(AdkShow),
    /// Delete sessions, their events and session state (needs the write
    /// role); the app: and user: state they share stays.
    Rm(AdkRm),
}

/// Flags of `stepwell adk ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AdkLs {
    #[command(flatten)]
    pub remote: Remote,
    /// Only the sessions of this app.
    #[arg(long)]
    pub app: Option<String>,
    /// Only the sessions of this user.
    #[arg(long)]
    pub user: Option<String>,
    /// Most sessions to list.
    #[arg(long, default_value = "1000", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// Flags of `stepwell adk show`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AdkShow {
    #[command(flatten)]
    pub remote: Remote,
    /// The session's app name.
    pub app: String,
    /// The session's user id.
    pub user: String,
    /// The session's id.
    pub session: String,
    /// Most events to show, the newest.
    #[arg(long, default_value = "100", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// Flags of `stepwell adk rm`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AdkRm {
    #[command(flatten)]
    pub remote: Remote,
    /// The sessions' app name.
    pub app: String,
    /// The sessions' user id.
    pub user: String,
    /// The sessions to delete.
    #[arg(required = true, value_name = "SESSION")]
    pub sessions: Vec<String>,
}

/// What `stepwell waits` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum WaitsCommand {
    /// List the waits of the namespace, or of one turn, by turn and name.
    Ls(WaitsLs),
    /// Show one wait, by turn and name or by handle.
    Show(WaitArgs),
    /// Resolve a pending wait with a payload (needs the write role); a
    /// wait that does not exist yet is created resolved.
    Signal(WaitSignal),
    /// Cancel a pending wait (needs the write role).
    Cancel(WaitArgs),
}

/// Flags of `stepwell waits ls`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct WaitsLs {
    #[command(flatten)]
    pub remote: Remote,
    /// The turn's id [default: every turn of the namespace].
    pub turn: Option<String>,
    /// Only waits in this status [default: any].
    #[arg(long, value_enum)]
    pub status: Option<WaitStatusArg>,
    /// Most waits to list.
    #[arg(long, default_value = "1000", value_parser = count(1, 1_000_000))]
    pub limit: u32,
}

/// A wait's status, as `--status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WaitStatusArg {
    Pending,
    Resolved,
    Cancelled,
    Expired,
    /// Every status.
    #[value(alias = "all")]
    Any,
}

/// One wait of a running sidecar: TURN NAME, or --handle.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The wait's turn (with NAME), unless --handle is given.
    #[arg(required_unless_present = "handle", conflicts_with = "handle", requires = "name")]
    pub turn: Option<String>,
    /// The wait's name within its turn.
    pub name: Option<String>,
    /// The wait's handle, in place of TURN NAME.
    #[arg(long)]
    pub handle: Option<String>,
}

/// Flags of `stepwell waits signal`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct WaitSignal {
    #[command(flatten)]
    pub wait: WaitArgs,
    /// The payload, as UTF-8 text (e.g. a JSON document) [default: empty].
    #[arg(long, default_value = "")]
    pub payload: String,
    /// The payload's content type, such as application/json.
    #[arg(long, default_value = "")]
    pub content_type: String,
}

/// What `stepwell keys` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum KeysCommand {
    /// Show an idempotency key's record.
    Get(KeyArgs),
    /// Release a key held under lease token N, for a new attempt or
    /// (--permanent) for good.
    Release(KeyRelease),
}

/// An idempotency key of a running sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct KeyArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The key.
    pub key: String,
}

/// Flags of `stepwell keys release`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct KeyRelease {
    #[command(flatten)]
    pub remote: Remote,
    /// The key.
    pub key: String,
    /// The lease token the key is held under (from `keys get`).
    #[arg(long)]
    pub token: u64,
    /// Fail the key for good: later Begins answer FAILED.
    #[arg(long)]
    pub permanent: bool,
    /// The error recorded with a permanent release.
    #[arg(long, default_value = "released by an operator")]
    pub error: String,
}

/// Flags of `stepwell proto`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ProtoArgs {
    /// The directory to write into (created if missing).
    pub dir: PathBuf,
}

/// What `stepwell auth` does.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AuthCommand {
    /// Print a fresh random bearer token and the lines for the auth file.
    ///
    /// The token goes to standard output only, once; the lines to paste
    /// carry its SHA-256 hash, which is all the sidecar keeps.
    NewToken(NewToken),
}

/// Flags of `stepwell auth new-token`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct NewToken {
    /// The principal's id: a name for logs and audit events (not empty).
    // No value parser: `parse` relaxes only the flags of first-level
    // subcommands, so the empty id is refused by the command itself.
    #[arg(long)]
    pub id: String,
}

/// Flags of `stepwell healthcheck`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Healthcheck {
    /// Sidecar to ask: HOST:PORT, or unix:/path/to.sock. A wildcard address
    /// such as 0.0.0.0 asks the loopback address, so the serve address works.
    #[arg(long, env = "STEPWELL_LISTEN", default_value = "127.0.0.1:50051")]
    pub target: Listen,

    /// Service whose status to ask for; empty means the whole server.
    #[arg(long, default_value = "")]
    pub service: String,

    /// How long connecting and answering may take together, in milliseconds.
    #[arg(long = "timeout-ms", value_name = "MS", default_value = "3000", value_parser = millis(1, 600_000))]
    pub timeout: Duration,

    /// CAs (PEM) to trust for the sidecar's certificate; dials over TLS.
    // The variables are the healthcheck's own: a container that serves with
    // STEPWELL_TLS_CERT must not present its server certificate as a client one.
    #[arg(long = "tls-ca", env = "STEPWELL_HEALTHCHECK_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,

    /// The name (DNS name or IP address) to verify in the sidecar's
    /// certificate [default: localhost, since the target is an address]
    #[arg(long = "tls-server-name", env = "STEPWELL_HEALTHCHECK_TLS_SERVER_NAME", value_name = "NAME",
          value_parser = server_name)]
    pub tls_server_name: Option<ServerName<'static>>,

    /// A client certificate chain (PEM) for mutual TLS; needs --tls-key.
    #[arg(long = "tls-cert", env = "STEPWELL_HEALTHCHECK_TLS_CERT", value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long = "tls-key", env = "STEPWELL_HEALTHCHECK_TLS_KEY", value_name = "PATH")]
    pub tls_key: Option<PathBuf>,
}

/// How `stepwell healthcheck` and the operator commands speak TLS: the CAs
/// they trust, the name they verify, and for mutual TLS their certificate
/// chain and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTls {
    pub ca: PathBuf,
    pub server_name: ServerName<'static>,
    pub client: Option<(PathBuf, PathBuf)>,
}

impl Healthcheck {
    /// The probe's TLS, `None` for plaintext. Flags that need others are
    /// reported all at once: a certificate without its key or the other way
    /// round, and any TLS flag without `--tls-ca`, which is what turns TLS on.
    pub fn tls(&self) -> Result<Option<ProbeTls>, Errors> {
        client_tls(&self.tls_ca, &self.tls_server_name, &self.tls_cert, &self.tls_key)
    }
}

impl Remote {
    /// How an operator command dials the sidecar: `None` for plaintext,
    /// the flags checked as for `stepwell healthcheck`.
    pub fn tls(&self) -> Result<Option<ProbeTls>, Errors> {
        client_tls(&self.tls_ca, &self.tls_server_name, &self.tls_cert, &self.tls_key)
    }
}

/// The client side's TLS from its four flags, `None` without `--tls-ca`.
fn client_tls(
    tls_ca: &Option<PathBuf>,
    tls_server_name: &Option<ServerName<'static>>,
    tls_cert: &Option<PathBuf>,
    tls_key: &Option<PathBuf>,
) -> Result<Option<ProbeTls>, Errors> {
    let mut errors = Errors(Vec::new());
    let client = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        (Some(_), None) => {
            errors.add("tls-cert", "needs --tls-key, the client certificate's private key".to_owned());
            None
        }
        (None, Some(_)) => {
            errors.add("tls-key", "needs --tls-cert, the client certificate it belongs to".to_owned());
            None
        }
    };
    if tls_ca.is_none() {
        let without = [("tls-server-name", tls_server_name.is_some()), ("tls-cert", tls_cert.is_some())];
        for (flag, given) in without {
            if given {
                errors.add(flag, "needs --tls-ca, the CAs that turn TLS on".to_owned());
            }
        }
    }
    if !errors.0.is_empty() {
        return Err(errors);
    }
    let localhost = || ServerName::try_from("localhost").expect("localhost is a DNS name");
    Ok(tls_ca.as_ref().map(|ca| ProbeTls {
        ca: ca.clone(),
        server_name: tls_server_name.clone().unwrap_or_else(localhost),
        client,
    }))
}
