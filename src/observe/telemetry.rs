//! Logging: `tracing` events to standard error as text or JSON, filtered by
//! `--log` (`STEPWELL_LOG`, default `info`).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; call once, before serving.
pub fn init(format: LogFormat, filter: &str) {
    // A filter that does not parse keeps the default rather than silencing logs.
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
