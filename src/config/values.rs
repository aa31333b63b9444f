//! The values a single flag takes, each parsed and checked on its own:
//! addresses to listen on or dial, ages and retentions, sizes, counts and
//! durations within their bounds, permission modes, JSON objects and the
//! names a certificate may carry. A value that cannot stand is refused with
//! its flag, before any check across flags runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::builder::TypedValueParser;
use rustls_pki_types::ServerName;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/run/stepwell.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>()
            .map(Listen::Tcp)
            .map_err(|_| format!("{s:?} is neither HOST:PORT (e.g. 127.0.0.1:50051) nor unix:/path"))
    }
}

/// What the web console allows (`--console`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsoleMode {
    Off,
    // Pages only. (Plain comments: a variant's doc would turn clap's help
    // into its long form.)
    Read,
    // Pages, and actions for a principal with the admin role.
    Admin,
}

/// Which of Postgres's features the store uses (`--postgres-profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PostgresProfileArg {
    Standard,
    Portable,
}

/// What stands between the sidecar and Postgres (`--postgres-pooler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolerArg {
    None,
    Transaction,
}

/// Vector lengths, comma-separated, or `none` (`--postgres-vector-index-dims`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimsList(pub Vec<u32>);

/// `--postgres-vector-index-dims`'s default (its text in serve.rs): the
/// lengths of the common embedding models.
pub(super) const DEFAULT_VECTOR_INDEX_DIMS: [u32; 5] = [384, 512, 768, 1024, 1536];

/// The most dimensions pgvector's HNSW index takes.
const INDEXED_DIMS_MAX: u32 = 2000;

/// `384,768` or `none`: each length in 1..=2000, listed once.
pub(super) fn dims_list(text: &str) -> Result<DimsList, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(DimsList(Vec::new()));
    }
    let mut dims = Vec::new();
    for part in text.split(',') {
        let d: u32 =
            part.trim().parse().map_err(|_| format!("{part:?} is not a vector length; give 384,768 or none"))?;
        if !(1..=INDEXED_DIMS_MAX).contains(&d) {
            return Err(format!("{d}: pgvector indexes vectors of 1 to {INDEXED_DIMS_MAX} dimensions"));
        }
        if dims.contains(&d) {
            return Err(format!("{d} is listed twice"));
        }
        dims.push(d);
    }
    Ok(DimsList(dims))
}

/// Where the admin HTTP listener listens, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminListen {
    Off,
    Tcp(SocketAddr),
}

/// HOST:PORT, or `off` for no admin listener.
pub(super) fn admin_listen(text: &str) -> Result<AdminListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(AdminListen::Off);
    }
    text.parse()
        .map(AdminListen::Tcp)
        .map_err(|_| format!("{text:?} is neither HOST:PORT (e.g. 127.0.0.1:9464) nor off"))
}

/// How long something is kept: `None` for forever (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention(pub Option<Duration>);

/// An age, or `off` to keep forever.
pub(super) fn retention(text: &str) -> Result<Retention, String> {
    age_or_off(text).map(Retention)
}

/// An age, or `off` for none.
pub(super) fn age_or_off(text: &str) -> Result<Option<Duration>, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match age(text)? {
        Duration::ZERO => Err(format!("{text:?}: an age of 0 would delete at once; use off to keep forever")),
        age => Ok(Some(age)),
    }
}

/// An age such as 90s, 30m, 1h or 2d.
pub(super) fn age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not an age such as 90s, 30m, 1h or 2d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?} is not an age such as 90s, 30m, 1h or 2d")),
    };
    number.checked_mul(seconds).map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

/// A DNS name or an IP address, as a certificate names a server.
pub(super) fn server_name(text: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(text.to_owned()).map_err(|_| format!("{text:?} is neither a DNS name nor an IP address"))
}

/// File permissions in octal, such as 600 or 0660.
pub(super) fn octal_mode(text: &str) -> Result<u32, String> {
    match u32::from_str_radix(text, 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(format!("{text:?} is not a permission mode in octal, such as 600 or 660")),
    }
}

/// A JSON object, kept as the text given.
pub(super) fn json_object(text: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(text.to_owned()),
        Ok(_) => Err("must be a JSON object, such as '{\"source\": \"loop\"}'".to_owned()),
        Err(e) => Err(format!("is not JSON: {e}")),
    }
}

/// A whole number in `min..=max`.
pub(super) fn count(min: u32, max: u32) -> impl TypedValueParser<Value = u32> {
    clap::value_parser!(u32).range(i64::from(min)..=i64::from(max))
}

/// A size or count in `min..=max`.
pub(super) fn size(min: u64, max: u64) -> impl TypedValueParser<Value = usize> {
    clap::value_parser!(u64).range(min..=max).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Whole seconds in `min..=max`.
pub(super) fn seconds(min: u64, max: u64) -> impl TypedValueParser<Value = Duration> {
    clap::value_parser!(u64).range(min..=max).map(Duration::from_secs)
}

/// Whole milliseconds in `min..=max`.
pub(super) fn millis(min: u64, max: u64) -> impl TypedValueParser<Value = Duration> {
    clap::value_parser!(u64).range(min..=max).map(Duration::from_millis)
}
