//! The operator commands that act on a running sidecar over gRPC, so that
//! its authentication, roles and namespaces apply to them as to any caller:
//! `stepwell turns ls|show|rm` (`turns`), `stepwell keys get|release`
//! (`keys`), `stepwell records ls|rm` (`records`), `stepwell sessions
//! ls|show|rm` (`sessions`), `stepwell adk ls|show|rm` (`adk`) and
//! `stepwell waits ls|show|signal|cancel` (`waits`). This module holds what they share: dialling the target (the
//! same code as `stepwell healthcheck`, `probe::connect`), the bearer token
//! and namespace of every request, the `--timeout-ms` bound on each call, the
//! output (an aligned table, `key: value` lines for one record, or NDJSON
//! with `--json`), and the one line a failure prints on stderr:
//! `stepwell turns ls: PERMISSION_DENIED (PERMISSION_DENIED): <message>`,
//! the gRPC code and the ErrorInfo reason.
//!
//! Exit codes:
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | done |
//! | 1    | the sidecar could not be reached, did not answer in time, or failed otherwise (UNAVAILABLE, INTERNAL, …) |
//! | 2    | not found: a turn without checkpoints, an unknown key or wait (NOT_FOUND) |
//! | 3    | refused: UNAUTHENTICATED or PERMISSION_DENIED |
//! | 4    | a conflict: FAILED_PRECONDITION, ABORTED or ALREADY_EXISTS (LEASE_LOST, NOT_ACQUIRED, …) |
//! | 64   | bad flags, found by stepwell or by the sidecar (INVALID_ARGUMENT) |

mod adk;
mod keys;
mod memory;
mod records;
mod sessions;
mod turns;
mod waits;

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;

use serde_json::{Map, Value};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

use crate::api::pb::checkpoint_service_client::CheckpointServiceClient;
use crate::api::pb::idempotency_service_client::IdempotencyServiceClient;
use crate::api::pb::memory_service_client::MemoryServiceClient;
use crate::api::pb::record_service_client::RecordServiceClient;
use crate::api::pb::wait_service_client::WaitServiceClient;
use crate::config::commands::{
    AdkCommand, KeysCommand, MemoryCommand, RecordsCommand, Remote, SessionsCommand, TurnsCommand, WaitsCommand,
};
use crate::domain::clock::civil_from_days;
use crate::domain::limits::MESSAGE_BYTES_LIMIT;
use crate::ops::probe::{self, ClientTls};

/// Exit code: the sidecar could not be reached or failed.
const EXIT_FAILED: u8 = 1;
/// Exit code: the turn or key does not exist.
const EXIT_NOT_FOUND: u8 = 2;
/// Exit code: the sidecar refused the caller.
const EXIT_REFUSED: u8 = 3;
/// Exit code: the call conflicts with the record's state.
const EXIT_CONFLICT: u8 = 4;
/// Exit code (EX_USAGE): the flags are wrong.
const EXIT_USAGE: u8 = 64;

/// Runs `stepwell turns …`.
pub fn turns(command: &TurnsCommand) -> ExitCode {
    match command {
        TurnsCommand::Ls(args) => run("stepwell turns ls", &args.remote, async |s| turns::ls(s, args).await),
        TurnsCommand::Show(args) => run("stepwell turns show", &args.remote, async |s| turns::show(s, args).await),
        TurnsCommand::Rm(args) => run("stepwell turns rm", &args.remote, async |s| turns::rm(s, args).await),
    }
}

/// Runs `stepwell keys …`.
pub fn keys(command: &KeysCommand) -> ExitCode {
    match command {
        KeysCommand::Get(args) => run("stepwell keys get", &args.remote, async |s| keys::get(s, args).await),
        KeysCommand::Release(args) => {
            run("stepwell keys release", &args.remote, async |s| keys::release(s, args).await)
        }
    }
}

/// Runs `stepwell records …`.
pub fn memory(command: &MemoryCommand) -> ExitCode {
    match command {
        MemoryCommand::Ls(args) => run("stepwell memory ls", &args.remote, async |s| memory::ls(s, args).await),
        MemoryCommand::Show(args) => run("stepwell memory show", &args.remote, async |s| memory::show(s, args).await),
        MemoryCommand::Search(args) => {
            run("stepwell memory search", &args.remote, async |s| memory::search(s, args).await)
        }
        MemoryCommand::Rm(args) => run("stepwell memory rm", &args.remote, async |s| memory::rm(s, args).await),
    }
}

pub fn records(command: &RecordsCommand) -> ExitCode {
    match command {
        RecordsCommand::Ls(args) => run("stepwell records ls", &args.remote, async |s| records::ls(s, args).await),
        RecordsCommand::Rm(args) => run("stepwell records rm", &args.remote, async |s| records::rm(s, args).await),
    }
}

/// Runs `stepwell sessions …`.
pub fn sessions(command: &SessionsCommand) -> ExitCode {
    match command {
        SessionsCommand::Ls(args) => run("stepwell sessions ls", &args.remote, async |s| sessions::ls(s, args).await),
        SessionsCommand::Show(args) => {
            run("stepwell sessions show", &args.remote, async |s| sessions::show(s, args).await)
        }
        SessionsCommand::Rm(args) => run("stepwell sessions rm", &args.remote, async |s| sessions::rm(s, args).await),
    }
}

/// Runs `stepwell adk …`.
pub fn adk(command: &AdkCommand) -> ExitCode {
    match command {
        AdkCommand::Ls(args) => run("stepwell adk ls", &args.remote, async |s| adk::ls(s, args).await),
        AdkCommand::Show(args) => run("stepwell adk show", &args.remote, async |s| adk::show(s, args).await),
        AdkCommand::Rm(args) => run("stepwell adk rm", &args.remote, async |s| adk::rm(s, args).await),
    }
}

/// Runs `stepwell waits …`.
pub fn waits(command: &WaitsCommand) -> ExitCode {
    match command {
        WaitsCommand::Ls(args) => run("stepwell waits ls", &args.remote, async |s| waits::ls(s, args).await),
        WaitsCommand::Show(args) => run("stepwell waits show", &args.remote, async |s| waits::show(s, args).await),
        WaitsCommand::Signal(args) => {
            run("stepwell waits signal", &args.wait.remote, async |s| waits::signal(s, args).await)
        }
        WaitsCommand::Cancel(args) => {
            run("stepwell waits cancel", &args.remote, async |s| waits::cancel(s, args).await)
        }
    }
}

/// Why a command failed: its exit code and the line it prints after the
/// command's name.
#[derive(Debug)]
struct Failure {
    exit: u8,
    line: String,
}

impl Failure {
    fn new(exit: u8, line: impl Into<String>) -> Failure {
        Failure { exit, line: one_line(&line.into()) }
    }

    /// The exit code and line for a status the sidecar answered with.
    fn from_status(status: &Status) -> Failure {
        let exit = match status.code() {
            Code::NotFound => EXIT_NOT_FOUND,
            Code::Unauthenticated | Code::PermissionDenied => EXIT_REFUSED,
            Code::FailedPrecondition | Code::Aborted | Code::AlreadyExists => EXIT_CONFLICT,
            Code::InvalidArgument => EXIT_USAGE,
            _ => EXIT_FAILED,
        };
        let code = code_name(status.code());
        let line = match status.get_error_details().error_info() {
            Some(info) if !info.reason.is_empty() => format!("{code} ({}): {}", info.reason, status.message()),
            _ => format!("{code}: {}", status.message()),
        };
        Failure::new(exit, line)
    }
}

/// Text on one line: line breaks and other control characters as spaces.
fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// A gRPC status code as the protocol spells it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Checks the flags, dials the sidecar and runs `command` on a
/// current-thread runtime; a failure is printed as `name: line`.
fn run(name: &str, remote: &Remote, command: impl AsyncFnOnce(&Session) -> Result<(), Failure>) -> ExitCode {
    let result = prepare(remote).and_then(|(tls, auth)| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::new(EXIT_FAILED, format!("could not start the async runtime: {e}")))?;
        runtime.block_on(async {
            let session = Session::connect(remote, tls.as_ref(), auth).await?;
            command(&session).await
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{name}: {}", failure.line);
            ExitCode::from(failure.exit)
        }
    }
}

/// The TLS files and the authorization header the flags name, checked
/// before anything is dialled.
fn prepare(remote: &Remote) -> Result<(Option<ClientTls>, Option<MetadataValue<Ascii>>), Failure> {
    let tls = match remote.tls() {
        Ok(None) => None,
        Ok(Some(files)) => Some(
            ClientTls::load(&files)
                .map_err(|e| Failure::new(EXIT_USAGE, format!("invalid configuration: --tls: {e}")))?,
        ),
        Err(errors) => {
            let text = errors.to_string();
            let mut lines = text.lines().map(str::trim);
            let head = lines.next().unwrap_or_default();
            return Err(Failure::new(EXIT_USAGE, format!("{head} {}", lines.collect::<Vec<_>>().join("; "))));
        }
    };
    let auth =
        match token(remote)? {
            Some((token, flag)) => Some(format!("Bearer {token}").parse().map_err(|_| {
                Failure::new(EXIT_USAGE, format!("invalid configuration: {flag} must be visible ASCII"))
            })?),
            None => None,
        };
    Ok((tls, auth))
}

/// The bearer token, from `--auth-token` (or STEPWELL_TOKEN) or read from
/// `--auth-token-file`, and the flag it came from; a token given both
/// ways is refused rather than one of them silently ignored.
fn token(remote: &Remote) -> Result<Option<(String, &'static str)>, Failure> {
    let usage = |line: String| Failure::new(EXIT_USAGE, format!("invalid configuration: {line}"));
    match (&remote.auth_token, &remote.auth_token_file) {
        (Some(_), Some(_)) => Err(usage(
            "give the token once: --auth-token (or STEPWELL_TOKEN) or --auth-token-file, not both".to_owned(),
        )),
        (Some(token), None) => Ok(Some((token.clone(), "--auth-token"))),
        (None, None) => Ok(None),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("--auth-token-file {}: could not read it: {e}", path.display())))?;
            // Files written by `echo` or an editor end with a newline that is no part of the token.
            let token = text.trim_end_matches(['\n', '\r']);
            if token.is_empty() {
                return Err(usage(format!("--auth-token-file {}: the file holds no token", path.display())));
            }
            Ok(Some((token.to_owned(), "the token of --auth-token-file")))
        }
    }
}

/// A channel to the sidecar and what every request on it carries.
struct Session {
    channel: Channel,
    remote: Remote,
    auth: Option<MetadataValue<Ascii>>,
}

impl Session {
    /// Dials the target within `--timeout-ms`.
    async fn connect(
        remote: &Remote,
        tls: Option<&ClientTls>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<Session, Failure> {
        let target = probe::describe(&remote.target);
        let millis = remote.timeout.as_millis();
        let channel = match tokio::time::timeout(remote.timeout, probe::connect(&remote.target, tls)).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => {
                return Err(Failure::new(EXIT_FAILED, format!("could not connect to {target}: {}", probe::chain(&e))));
            }
            Err(_) => {
                return Err(Failure::new(EXIT_FAILED, format!("could not connect to {target} within {millis} ms")));
            }
        };
        Ok(Session { channel, remote: remote.clone(), auth })
    }

    // Every client reads and sends messages up to the contract's ceiling,
    // so that a command reads whatever the sidecar accepted (a state at
    // --state-bytes-max, a record at --record-bytes-max).

    fn checkpoints(&self) -> CheckpointServiceClient<Channel> {
        CheckpointServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MESSAGE_BYTES_LIMIT)
            .max_encoding_message_size(MESSAGE_BYTES_LIMIT)
    }

    fn idempotency(&self) -> IdempotencyServiceClient<Channel> {
        IdempotencyServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MESSAGE_BYTES_LIMIT)
            .max_encoding_message_size(MESSAGE_BYTES_LIMIT)
    }

    fn records(&self) -> RecordServiceClient<Channel> {
        RecordServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MESSAGE_BYTES_LIMIT)
            .max_encoding_message_size(MESSAGE_BYTES_LIMIT)
    }

    fn memory(&self) -> MemoryServiceClient<Channel> {
        MemoryServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MESSAGE_BYTES_LIMIT)
            .max_encoding_message_size(MESSAGE_BYTES_LIMIT)
    }

    fn waits(&self) -> WaitServiceClient<Channel> {
        WaitServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MESSAGE_BYTES_LIMIT)
            .max_encoding_message_size(MESSAGE_BYTES_LIMIT)
    }

    /// The namespace the command acts in ("" is the default one).
    fn namespace(&self) -> String {
        self.remote.namespace.clone()
    }

    /// `message` with the token and the deadline.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.remote.timeout);
        if let Some(auth) = &self.auth {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        request
    }

    /// Awaits one call for at most `--timeout-ms`.
    async fn call<T>(&self, call: impl Future<Output = Result<Response<T>, Status>>) -> Result<T, Failure> {
        match tokio::time::timeout(self.remote.timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(Failure::from_status(&status)),
            Err(_) => Err(Failure::new(
                EXIT_FAILED,
                format!("DEADLINE_EXCEEDED: no answer within {} ms", self.remote.timeout.as_millis()),
            )),
        }
    }

    /// Whether to print NDJSON.
    fn json(&self) -> bool {
        self.remote.json
    }
}

/// Writes `lines` to stdout; a closed stdout (a pipe into `head`) ends
/// the output quietly.
fn print_lines(lines: impl IntoIterator<Item = String>) {
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            return;
        }
    }
    let _ = out.flush();
}

/// Prints one JSON object per line.
fn print_ndjson(rows: impl IntoIterator<Item = Map<String, Value>>) {
    print_lines(rows.into_iter().map(|row| Value::Object(row).to_string()));
}

/// Prints `rows` under `headers`, each column as wide as its widest cell.
fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.trim_end().to_owned()
    };
    let header = line(headers.to_vec());
    let body = rows.iter().map(|row| line(row.iter().map(String::as_str).collect()));
    print_lines(std::iter::once(header).chain(body));
}

/// Prints one record as `key: value` lines, the values aligned.
fn print_record(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    print_lines(
        fields.iter().map(|(key, value)| format!("{:<width$} {value}", format!("{key}:")).trim_end().to_owned()),
    );
}

/// Nanoseconds since the epoch of a protobuf timestamp.
fn nanos_of(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp.seconds.saturating_mul(1_000_000_000).saturating_add(i64::from(timestamp.nanos))
}

/// Puts `name` (RFC 3339 text, or null) and `name_ns` (an integer, or null)
/// into a JSON row.
fn put_time(row: &mut Map<String, Value>, name: &str, timestamp: Option<&prost_types::Timestamp>) {
    row.insert(name.to_owned(), timestamp.map_or(Value::Null, |t| Value::from(rfc3339(nanos_of(t)))));
    row.insert(format!("{name}_ns"), timestamp.map_or(Value::Null, |t| Value::from(nanos_of(t))));
}

/// A table cell for a timestamp: RFC 3339, or `-`.
fn time_cell(timestamp: Option<&prost_types::Timestamp>) -> String {
    timestamp.map_or_else(|| "-".to_owned(), |t| rfc3339(nanos_of(t)))
}

/// A table cell for text that may be empty.
fn text_cell(text: &str) -> String {
    if text.is_empty() { "-".to_owned() } else { one_line(text) }
}

/// `bytes` parsed as JSON, or null when they are not JSON.
fn json_or_null(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

/// Nanoseconds since the epoch as RFC 3339 in UTC, with 0, 3, 6 or 9
/// fractional digits as the value needs (as protobuf's JSON mapping writes
/// timestamps): `2023-11-14T22:13:20.000000001Z`.
pub(super) fn rfc3339(nanos: i64) -> String {
    let seconds = nanos.div_euclid(1_000_000_000);
    let fraction = nanos.rem_euclid(1_000_000_000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60);
    let fraction = match fraction {
        0 => String::new(),
        f if f % 1_000_000 == 0 => format!(".{:03}", f / 1_000_000),
        f if f % 1_000 == 0 => format!(".{:06}", f / 1_000),
        f => format!(".{f:09}"),
    };
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{fraction}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc_with_the_digits_they_need() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_700_000_000_000_000_001), "2023-11-14T22:13:20.000000001Z");
        assert_eq!(rfc3339(1_700_000_000_120_000_000), "2023-11-14T22:13:20.120Z");
        assert_eq!(rfc3339(1_700_000_000_000_120_000), "2023-11-14T22:13:20.000120Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(rfc3339(4_102_444_800_000_000_000), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn statuses_map_to_exit_codes_and_one_line() {
        let refused = Status::with_error_details(
            Code::PermissionDenied,
            "role read may not\ncall DeleteTurn",
            tonic_types::ErrorDetails::with_error_info(
                "PERMISSION_DENIED",
                "stepwell.dev",
                std::collections::HashMap::new(),
            ),
        );
        let failure = Failure::from_status(&refused);
        assert_eq!(failure.exit, EXIT_REFUSED);
        assert_eq!(failure.line, "PERMISSION_DENIED (PERMISSION_DENIED): role read may not call DeleteTurn");
        let plain = Failure::from_status(&Status::unavailable("gone"));
        assert_eq!((plain.exit, plain.line.as_str()), (EXIT_FAILED, "UNAVAILABLE: gone"));
        for (code, exit) in [
            (Code::NotFound, EXIT_NOT_FOUND),
            (Code::Unauthenticated, EXIT_REFUSED),
            (Code::Aborted, EXIT_CONFLICT),
            (Code::FailedPrecondition, EXIT_CONFLICT),
            (Code::InvalidArgument, EXIT_USAGE),
            (Code::Internal, EXIT_FAILED),
        ] {
            assert_eq!(Failure::from_status(&Status::new(code, "x")).exit, exit, "{code:?}");
        }
    }
}
