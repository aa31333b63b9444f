//! The `stepwell` binary: parses the command line, starts logging, and calls
//! `serve` until SIGTERM or SIGINT; or, as `stepwell healthcheck`, asks a
//! running sidecar whether it serves (exit 0) or not (exit 1); or, as
//! `stepwell auth new-token`, prints a fresh token and its auth-file lines;
//! or runs an operator command (`turns`, `keys`, `records`, `waits`: `cli`; `migrate`,
//! `export`, `import`: `moving`; `proto`: `contract`).
//! Configuration errors, a bad auth file among them, exit with code 64; a
//! task the sidecar cannot serve without (a writer, the sweeper, the health
//! monitor) that panics or stops exits 70, so the orchestrator restarts it;
//! other failures (the listener, the transport, a store that fails at
//! start-up) exit 1.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use stepwell::config::commands::{AuthCommand, Healthcheck, NewToken};
use stepwell::config::env::Env;
use stepwell::config::sections::Config;
use stepwell::config::serve::ServeArgs;
use stepwell::config::{self, Command};
use stepwell::observe::telemetry;
use stepwell::ops::probe::{self, ServingStatus};
use stepwell::ops::{cli, contract, moving};
use stepwell::{Listener, ServeError, auth, serve};

/// EX_USAGE from sysexits.h: the configuration is wrong.
const EXIT_CONFIG: u8 = 64;

/// EX_SOFTWARE from sysexits.h: stepwell itself failed (a task it needs died).
const EXIT_SOFTWARE: u8 = 70;

fn main() -> ExitCode {
    let command = match config::parse(std::env::args_os(), &Env::process()) {
        Ok(command) => command,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { ExitCode::from(EXIT_CONFIG) } else { ExitCode::SUCCESS };
        }
    };
    match command {
        Command::Serve(args) => run_server(&args),
        Command::Healthcheck(check) => run_healthcheck(&check),
        Command::Auth(AuthCommand::NewToken(new)) => run_new_token(&new),
        Command::Turns(turns) => cli::turns(&turns),
        Command::Keys(keys) => cli::keys(&keys),
        Command::Records(records) => cli::records(&records),
        Command::Memory(memory) => cli::memory(&memory),
        Command::Sessions(sessions) => cli::sessions(&sessions),
        Command::Adk(adk) => cli::adk(&adk),
        Command::Waits(waits) => cli::waits(&waits),
        Command::Migrate(args) => moving::migrate(&args),
        Command::Export(args) => moving::export(&args),
        Command::Import(args) => moving::import(&args),
        Command::Proto(args) => contract::write(&args),
    }
}

/// Prints a fresh token and the auth-file lines with its hash; the token is
/// written nowhere else.
fn run_new_token(new: &NewToken) -> ExitCode {
    if new.id.trim().is_empty() {
        eprintln!("stepwell auth new-token: --id must name the principal");
        return ExitCode::from(EXIT_CONFIG);
    }
    match auth::new_token() {
        Ok(token) => {
            print!("{}", auth::new_token_text(&new.id, &token));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("stepwell auth new-token: the operating system gave no random bytes: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Exit 0 when the target answers SERVING; otherwise say why on stderr and
/// exit 1. TLS flags that do not go together, or TLS files that do not load,
/// exit 64 before anything is dialled.
fn run_healthcheck(check: &Healthcheck) -> ExitCode {
    let tls = match check.tls() {
        Ok(None) => None,
        Ok(Some(files)) => match probe::ClientTls::load(&files) {
            Ok(tls) => Some(tls),
            Err(error) => {
                eprintln!("stepwell healthcheck: invalid configuration:\n  --tls: {error}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        Err(errors) => {
            eprint!("stepwell healthcheck: {errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("stepwell healthcheck: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(probe::check(&check.target, tls.as_ref(), &check.service, check.timeout)) {
        Ok(ServingStatus::Serving) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("stepwell healthcheck: {} is {}", probe::describe(&check.target), status.as_str_name());
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("stepwell healthcheck: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_server(args: &ServeArgs) -> ExitCode {
    let config = match Config::from_args(args) {
        Ok(config) => config,
        Err(errors) => {
            eprint!("stepwell: {errors}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    telemetry::init(config.log_format, &config.log_filter);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads {
        builder.worker_threads(threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "could not start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let listener = match Listener::bind(&config.listen, config.security.unix_socket_mode).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, listen = ?config.listen, "could not listen");
                return ExitCode::FAILURE;
            }
        };
        match serve(listener, config, shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(ServeError::Tls(error)) => {
                eprintln!("stepwell: invalid configuration:\n  --tls: {error}");
                ExitCode::from(EXIT_CONFIG)
            }
            Err(error @ ServeError::AuthFile(_)) => {
                eprintln!("stepwell: invalid configuration:\n  --auth-file: {error}");
                ExitCode::from(EXIT_CONFIG)
            }
            Err(error) => {
                tracing::error!(%error, "stopped with an error");
                if error.is_configuration() {
                    ExitCode::from(EXIT_CONFIG)
                } else if error.is_internal() {
                    ExitCode::from(EXIT_SOFTWARE)
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    })
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("could not install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
