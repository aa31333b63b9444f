//! How long turns and their records are kept: the three retention flags,
//! and the per-namespace rules of `--retention-file`, a TOML file parsed and
//! checked here, each mistake reported with the file and the namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Errors;
use super::serve::ServeArgs;
use super::values::age_or_off;

/// How long turns are kept: terminal turns and open ones, each `None` for
/// forever, and the namespaces with rules of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnRetention {
    pub terminal: Option<Duration>,
    pub open: Option<Duration>,
    /// The records of a turn none of whose records was written for this long.
    pub records: Option<Duration>,
    pub namespaces: BTreeMap<String, NamespaceRetention>,
}

/// One namespace's turn retention, in place of the flags'.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceRetention {
    pub terminal: Option<Duration>,
    pub open: Option<Duration>,
    pub records: Option<Duration>,
}

impl TurnRetention {
    /// Whether any turn can ever be deleted.
    pub fn is_on(&self) -> bool {
        self.terminal.is_some()
            || self.open.is_some()
            || self.records.is_some()
            || self
                .namespaces
                .values()
                .any(|rule| rule.terminal.is_some() || rule.open.is_some() || rule.records.is_some())
    }
}

/// The retention file: `[namespaces.NAME]` tables of ages or "off"; a key
/// left out keeps the flag's value for that namespace.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionFile {
    #[serde(default)]
    namespaces: BTreeMap<String, RetentionEntry>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionEntry {
    turn_retention: Option<String>,
    open_turn_retention: Option<String>,
    record_retention: Option<String>,
}

/// The turn retention of the flags and, if named, the file.
pub(super) fn turn_retention(args: &ServeArgs, errors: &mut Errors) -> TurnRetention {
    let mut retention = TurnRetention {
        terminal: args.turn_retention.0,
        open: args.open_turn_retention.0,
        records: args.record_retention.0,
        namespaces: Default::default(),
    };
    let Some(path) = &args.retention_file else { return retention };
    let mut fail = |message: String| errors.add("retention-file", format!("{}: {message}", path.display()));
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            fail(format!("cannot be read: {error}"));
            return retention;
        }
    };
    let file: RetentionFile = match toml::from_str(&text) {
        Ok(file) => file,
        Err(error) => {
            fail(format!("is not valid: {error}"));
            return retention;
        }
    };
    for (namespace, entry) in file.namespaces {
        let rule = |value: &Option<String>, default: Option<Duration>| match value {
            None => Ok(default),
            Some(text) => age_or_off(text).map_err(|why| format!("[namespaces.{namespace}]: {why}")),
        };
        let rules = (
            rule(&entry.turn_retention, retention.terminal),
            rule(&entry.open_turn_retention, retention.open),
            rule(&entry.record_retention, retention.records),
        );
        match rules {
            (Ok(terminal), Ok(open), Ok(records)) => {
                retention.namespaces.insert(namespace, NamespaceRetention { terminal, open, records });
            }
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => fail(why),
        }
    }
    retention
}
