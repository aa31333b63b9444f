//! The environment configuration is read from. Every flag of every command
//! may also come from its variable; the variables are a source passed in
//! (`Env`), so only `Env::process` reads the process's own, and tests and
//! embedders choose what stepwell sees. A variable becomes its flag's
//! default, so the command line still wins, and the help names it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};

/// The environment variables configuration is read from: a source passed
/// in, so that tests and embedders choose what stepwell sees.
#[derive(Debug, Clone, Default)]
pub struct Env(HashMap<OsString, OsString>);

impl Env {
    /// The process's own environment: the one place stepwell reads it.
    #[allow(clippy::disallowed_methods)]
    pub fn process() -> Env {
        Env(std::env::vars_os().collect())
    }

    fn get(&self, name: &OsStr) -> Option<&OsString> {
        self.0.get(name)
    }
}

impl<K: Into<OsString>, V: Into<OsString>> FromIterator<(K, V)> for Env {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Env(pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// Reads each flag's variable from `env` instead of the process: the value
/// becomes the flag's default, so the command line still wins.
pub(super) fn with_env(command: clap::Command, env: &Env) -> clap::Command {
    command.mut_subcommands(|sub| {
        sub.mut_args(|arg| {
            let Some(name) = arg.get_env().map(OsStr::to_owned) else { return arg };
            let shown = format!("[env: {}]", name.to_string_lossy());
            let help = arg.get_help().map_or_else(|| shown.clone(), |help| format!("{help} {shown}"));
            let long_help = arg.get_long_help().map(|help| format!("{help}\n\n{shown}"));
            let arg = arg.env(None).help(help);
            let arg = match long_help {
                Some(long_help) => arg.long_help(long_help),
                None => arg,
            };
            match env.get(&name) {
                Some(value) if arg.get_action().takes_values() => arg.default_value(value.clone()),
                // A switch is off for the usual words of no, as clap reads them.
                Some(value) => {
                    let off = ["", "0", "n", "no", "f", "false", "off"]
                        .contains(&value.to_string_lossy().to_ascii_lowercase().as_str());
                    arg.default_value(if off { "false" } else { "true" })
                }
                None => arg,
            }
        })
    })
}
