//! Opening a Postgres store: the database URL read into connect options
//! (dropping, unlogged, the parameters sqlx does not know), the refusal of a
//! server that would lose acknowledged writes, and the check that the
//! connection's settings hold, which a pooler that drops the startup
//! packet's `options` would silently undo. The migrations are `migrate`'s.

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use super::session::Session;
use crate::store::{DbError, Error, Options};

/// Settings under which the server keeps every acknowledged commit.
const DURABLE_SYNCHRONOUS_COMMIT: [&str; 4] = ["on", "local", "remote_write", "remote_apply"];

/// The URL parameters sqlx reads; it ignores any other, but logs its value.
const KNOWN_PARAMETERS: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The parameters that name a certificate or key: a file, or PEM text.
const CERTIFICATE_PARAMETERS: [&str; 7] =
    ["sslrootcert", "ssl-root-cert", "ssl-ca", "sslcert", "ssl-cert", "sslkey", "ssl-key"];

/// The connect options `url` names. sqlx would log the value of a parameter
/// it does not know, which may be a secret (libpq's `sslpassword`, say), so
/// such a parameter is dropped here and named without its value. A
/// certificate file that cannot be read is reported here as a wrong setting;
/// sqlx would report it at each connection as an I/O error, which looks like
/// an outage.
pub(super) async fn connect_options(url: &str) -> Result<PgConnectOptions, Error> {
    let mut parsed =
        url::Url::parse(url).map_err(|error| DbError::sqlx(sqlx::Error::Configuration(Box::new(error))))?;
    let mut kept = Vec::new();
    for (key, value) in parsed.query_pairs() {
        if !KNOWN_PARAMETERS.contains(&&*key) && !key.starts_with("options[") {
            tracing::warn!(parameter = %key, "ignoring a parameter of the database URL that stepwell does not know");
            continue;
        }
        let is_file = CERTIFICATE_PARAMETERS.contains(&&*key) && !value.trim_start().starts_with("-----BEGIN");
        if is_file && let Err(error) = tokio::fs::File::open(&*value).await {
            let message = format!("{key} names {value}, which cannot be read: {error}");
            return Err(DbError::sqlx(sqlx::Error::Configuration(message.into())).into());
        }
        kept.push((key.into_owned(), value.into_owned()));
    }
    if parsed.query().is_some() {
        parsed.query_pairs_mut().clear().extend_pairs(&kept);
    }
    Ok(PgConnectOptions::from_url(&parsed).map_err(DbError::sqlx)?)
}

/// Whether a server that may lose acknowledged writes is refused (the
/// default) or served on anyway, as `--unsafe-accept-nondurable-postgres` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nondurable {
    Refuse,
    Accept,
}

impl Nondurable {
    /// What the store's options ask for.
    pub(super) fn of(options: &Options) -> Nondurable {
        if options.unsafe_accept_nondurable_postgres { Nondurable::Accept } else { Nondurable::Refuse }
    }
}

/// Refuses a server that could lose acknowledged commits: `fsync=off`, or
/// `synchronous_commit=off` for this role or database (read on a connection
/// without stepwell's own settings, so role and database defaults show).
pub(super) async fn check_durability(
    options: &PgConnectOptions,
    session: &Session,
    nondurable: Nondurable,
) -> Result<(), Error> {
    let options = session.bare_options(options);
    let shown = settings_shown(&options, session, &["fsync", "synchronous_commit"]).await?;
    let (fsync, synchronous_commit) = (&shown[0], &shown[1]);
    let mut problems = Vec::new();
    if fsync != "on" {
        problems.push(format!("fsync is {fsync}: a crash of the database host can lose committed transactions"));
    }
    if !DURABLE_SYNCHRONOUS_COMMIT.contains(&synchronous_commit.as_str()) {
        problems.push(format!(
            "synchronous_commit is {synchronous_commit} for this role or database: commits are acknowledged before \
             they are durable"
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let problems = problems.join("; ");
    if nondurable == Nondurable::Accept {
        tracing::warn!(%problems, "UNSAFE: serving on a Postgres that may lose acknowledged writes");
        return Ok(());
    }
    Err(Error::NotDurable(problems))
}

/// Checks that a unit of work on a connection made with `options` runs
/// under the session's settings. A pooler that drops the startup packet's
/// `options` (PgBouncer with `ignore_startup_parameters = options`) would
/// otherwise leave every statement without its timeouts, silently.
pub(super) async fn check_settings_hold(options: &PgConnectOptions, session: &Session) -> Result<(), Error> {
    let names: Vec<&str> = session.settings().iter().map(|(name, _)| *name).collect();
    let shown = settings_shown(options, session, &names).await?;
    for ((name, want), got) in session.settings().iter().zip(&shown) {
        if want != got {
            let message = format!(
                "{name} is {got} on a new connection, where stepwell set {want}: something between the sidecar \
                 and Postgres dropped the connection's options"
            );
            return Err(DbError::pooler(message).into());
        }
    }
    Ok(())
}

/// The values of the settings `names` (in `pg_settings`' units: milliseconds
/// for the timeouts) in a unit of work on a new connection.
async fn settings_shown(options: &PgConnectOptions, session: &Session, names: &[&str]) -> Result<Vec<String>, Error> {
    let shown = async {
        let mut conn = PgConnection::connect_with(options).await?;
        let mut tx = session.begin(&mut conn).await?;
        let mut shown = Vec::with_capacity(names.len());
        for name in names {
            let value: String = sqlx::query_scalar("SELECT setting FROM pg_settings WHERE name = $1")
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
            shown.push(value);
        }
        tx.commit().await?;
        conn.close().await?;
        Ok::<_, sqlx::Error>(shown)
    };
    Ok(shown.await.map_err(DbError::sqlx)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Misconfigured;

    #[tokio::test]
    async fn an_unreadable_root_certificate_is_a_wrong_setting() {
        let url = "postgres://app@db/stepwell?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
        let error = connect_options(url).await.expect_err("the file is missing");
        assert_eq!(error.misconfigured(), Some(Misconfigured::Url), "{error}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "the error names the file: {error}");
    }

    #[tokio::test]
    async fn parameters_sqlx_does_not_know_are_dropped_and_the_rest_kept() {
        let url = "postgres://app@db/stepwell?sslpassword=k3y&sslmode=require&application_name=x";
        let options = connect_options(url).await.expect("the URL is usable");
        assert!(matches!(options.get_ssl_mode(), sqlx::postgres::PgSslMode::Require));
        assert_eq!(options.get_application_name(), Some("x"));
        assert!(!format!("{options:?}").contains("k3y"), "the unknown parameter is gone");
    }
}
