//! Every setting of stepwell in one place: the command line of each command,
//! its `STEPWELL_*` environment variables and their defaults, parsed and
//! checked before anything runs.
//!
//! Each flag has its type, parsed by clap's typed parsers; what no single
//! flag can check (one limit against another) is checked by the section it
//! belongs to. Every mistake in a configuration is reported at once rather
//! than one per run. The environment is a source passed in (`Env`), so only
//! `Env::process` reads the process's variables, and tests read none.
//!
//! This file holds the command line as a whole (`Cli`, `Command`, `parse`)
//! and the mistakes found (`Errors`); the parts, by what each parses:
//! - `serve`: the serve flags and their help;
//! - `sections`: the typed configuration the server runs with, made from the
//!   serve flags with the checks across them, and `retention`: how long turns
//!   are kept, from the flags and the retention file;
//! - `commands`: the operator commands' arguments, and `moving`: those of
//!   migrate, export and import;
//! - `values`: what one flag's value may be, and `env`: the environment.

use std::ffi::OsString;

use clap::builder::ValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub mod commands;
pub mod env;
pub mod moving;
pub mod retention;
pub mod sections;
pub mod serve;
pub mod values;

use commands::{
    AdkCommand, AuthCommand, Healthcheck, KeysCommand, MemoryCommand, ProtoArgs, RecordsCommand, SessionsCommand,
    TurnsCommand, WaitsCommand,
};
use env::{Env, with_env};
use moving::{ExportArgs, ImportArgs, MigrateArgs};
use serve::ServeArgs;

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "stepwell",
    version,
    about = "Durable-execution sidecar: checkpoint logs and idempotency records over gRPC.",
    long_about = "Durable-execution sidecar: checkpoint logs and idempotency records over gRPC.\n\n\
                  With no subcommand, stepwell serves on 127.0.0.1:50051 with sqlite://stepwell.db."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// What the binary does.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the gRPC API (the default).
    Serve(Box<ServeArgs>),
    /// Ask a running sidecar whether it serves: exit 0 when SERVING, 1 otherwise.
    ///
    /// Calls grpc.health.v1.Health/Check, for container health checks (the
    /// image has no shell). Why it is not SERVING is printed to stderr.
    Healthcheck(Healthcheck),
    /// Manage the credentials of --auth-file.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// List, show and delete the turns of a running sidecar.
    #[command(subcommand)]
    Turns(TurnsCommand),
    /// Read and release the idempotency keys of a running sidecar.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// List and delete the records (RecordService) of a running sidecar.
    #[command(subcommand)]
    Records(RecordsCommand),
    /// List, show, search and delete the memory items (MemoryService) of a
    /// running sidecar.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// List, show and clear the agent sessions a running sidecar keeps for
    /// the clients' session adapters.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// List, show and delete the Google ADK sessions a running sidecar
    /// keeps for the clients' ADK session services.
    #[command(subcommand)]
    Adk(AdkCommand),
    /// List, show, signal and cancel the waits (WaitService) of a running
    /// sidecar.
    #[command(subcommand)]
    Waits(WaitsCommand),
    /// Copy every checkpoint, turn, idempotency key, record and wait from one
    /// store to another (SQLite to Postgres or back), with the sidecars stopped.
    Migrate(MigrateArgs),
    /// Write every record of a store as NDJSON, for backups and moves.
    Export(ExportArgs),
    /// Load records written by `stepwell export` into a store.
    Import(ImportArgs),
    /// Write the contract's .proto files and a buf.yaml to a directory.
    Proto(ProtoArgs),
}

/// Parses a command line against `env`. With no subcommand, stepwell serves.
/// Every flag with a bad value is reported at once, in one error.
pub fn parse<I, T>(argv: I, env: &Env) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let mut command = with_env(Cli::command(), env);
    let mut mistakes = Vec::new();
    let mut relaxed = Vec::new();
    loop {
        match command.try_get_matches_from_mut(&argv) {
            Ok(matches) if matches.subcommand().is_none() => argv.push("serve".into()),
            Ok(matches) if mistakes.is_empty() => {
                let cli = Cli::from_arg_matches(&matches)?;
                return Ok(cli.command.expect("a subcommand was matched"));
            }
            Ok(_) => {
                let named = named_subcommand(&mut command, &argv);
                return Err(named.error(ErrorKind::ValueValidation, mistakes.join("\n  ")));
            }
            Err(error) => {
                // The flag as clap shows it, "--name <NAME>": its first word is the flag.
                let Some(ContextValue::String(shown)) = error.get(ContextKind::InvalidArg) else {
                    return Err(error);
                };
                let flag = shown.split_whitespace().next().unwrap_or_default().to_owned();
                if !matches!(error.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
                    return Err(error);
                }
                // A database URL may hold a password, so its value is never repeated.
                let mistake = match std::error::Error::source(&error) {
                    Some(reason) if flag == "--database-url" => format!("invalid value for '{shown}': {reason}"),
                    _ => error
                        .render()
                        .to_string()
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ")
                        .to_owned(),
                };
                mistakes.push(mistake);
                // Let this flag take any text, so the next pass finds the next
                // mistake; a flag relaxed already cannot fail again, so a
                // repeat means clap failed otherwise, and that error stands.
                if relaxed.contains(&flag) {
                    return Err(error);
                }
                command = relax(command, &flag);
                relaxed.push(flag);
            }
        }
    }
}

/// The subcommand `argv` names (`stepwell waits ls …`: `waits ls`), so that
/// an error's usage line is that subcommand's; the whole command when it
/// names none.
fn named_subcommand<'a>(command: &'a mut clap::Command, argv: &[OsString]) -> &'a mut clap::Command {
    let mut current = command;
    for arg in argv.iter().skip(1) {
        let Some(name) = arg.to_str() else { continue };
        if current.find_subcommand(name).is_some() {
            current = current.find_subcommand_mut(name).expect("the subcommand was just found");
        }
    }
    current
}

/// Lets the flag `flag` (as `--name`) take any text, in every subcommand at any depth.
fn relax(command: clap::Command, flag: &str) -> clap::Command {
    command
        .mut_args(|arg| match arg.get_long() {
            Some(long) if flag == format!("--{long}") => arg.value_parser(ValueParser::os_string()),
            _ => arg,
        })
        .mut_subcommands(|sub| relax(sub, flag))
}

/// Every mistake found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Errors(pub Vec<String>);

impl std::fmt::Display for Errors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for error in &self.0 {
            writeln!(f, "  {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Errors {}

impl Errors {
    fn add(&mut self, flag: &str, message: String) {
        self.0.push(format!("--{flag}: {message}"));
    }
}

#[cfg(test)]
mod tests;
