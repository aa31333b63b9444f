//! The unit tests of configuration: each flag's default, bounds and
//! environment variable, and the checks across flags, run against the
//! environment each test passes in rather than the process's.

use std::path::PathBuf;
use std::time::Duration;

use super::env::Env;
use super::retention::{NamespaceRetention, TurnRetention};
use super::sections::{Config, ConsoleMode};
use super::serve::ServeArgs;
use super::values::Listen;
use super::*;

fn serve(argv: &[&str], env: &Env) -> Result<ServeArgs, clap::Error> {
    let argv = ["stepwell", "serve"].iter().chain(argv);
    match parse(argv, env)? {
        Command::Serve(args) => Ok(*args),
        other => panic!("parsed as {other:?}"),
    }
}

fn mistakes(error: &clap::Error) -> Vec<String> {
    let text = error.render().to_string();
    text.lines().take_while(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn late_health_checks_before_the_store_counts_as_down() {
    let health = |argv: &[&str], env: &Env| Config::from_args(&serve(argv, env).unwrap()).unwrap().health;
    assert_eq!(health(&[], &Env::default()).check_timeouts_max, 3);
    assert_eq!(health(&["--health-check-timeouts-max", "1"], &Env::default()).check_timeouts_max, 1);
    let env: Env = [("STEPWELL_HEALTH_CHECK_TIMEOUTS_MAX", "7")].into_iter().collect();
    assert_eq!(health(&[], &env).check_timeouts_max, 7);
    for bad in ["0", "101", "x"] {
        assert!(serve(&["--health-check-timeouts-max", bad], &Env::default()).is_err(), "{bad}");
    }
}

#[test]
fn the_response_budget_fits_the_message_size() {
    let limits = Config::from_args(&ServeArgs::defaults()).unwrap().limits;
    assert_eq!(limits.response_bytes_max, 4 * 1024 * 1024 - 64 * 1024);
    let env: Env = [("STEPWELL_RESPONSE_BYTES_MAX", "65536")].into_iter().collect();
    assert_eq!(Config::from_args(&serve(&[], &env).unwrap()).unwrap().limits.response_bytes_max, 65536);
    let over = serve(&["--response-bytes-max", "8388608"], &Env::default()).unwrap();
    assert_eq!(Config::from_args(&over).unwrap().limits.response_bytes_max, 4 * 1024 * 1024 - 64 * 1024);
    let raised = ["--response-bytes-max", "8388608", "--message-bytes-max", "16777216"];
    let raised = Config::from_args(&serve(&raised, &Env::default()).unwrap()).unwrap();
    assert_eq!(raised.limits.response_bytes_max, 8388608);
    assert!(serve(&["--response-bytes-max", "10"], &Env::default()).is_err(), "below 1 KiB");
}

#[test]
fn store_waits_have_defaults_bounds_and_environment_names() {
    let store = Config::from_args(&ServeArgs::defaults()).unwrap().store;
    assert_eq!(store.migration_lock_timeout, Duration::from_secs(60));
    assert_eq!(
        (store.postgres_statement_timeout, store.postgres_lock_timeout),
        (Duration::from_secs(20), Duration::from_secs(5))
    );
    let env: Env = [
        ("STEPWELL_MIGRATION_LOCK_TIMEOUT_MS", "300"),
        ("STEPWELL_POSTGRES_STATEMENT_TIMEOUT_MS", "1500"),
        ("STEPWELL_POSTGRES_LOCK_TIMEOUT_MS", "250"),
    ]
    .into_iter()
    .collect();
    let store = Config::from_args(&serve(&[], &env).unwrap()).unwrap().store;
    assert_eq!(store.migration_lock_timeout, Duration::from_millis(300));
    assert_eq!(store.postgres_statement_timeout, Duration::from_millis(1500));
    assert_eq!(store.postgres_lock_timeout, Duration::from_millis(250));
    for flag in ["--migration-lock-timeout-ms", "--postgres-statement-timeout-ms", "--postgres-lock-timeout-ms"] {
        let refused = mistakes(&serve(&[flag, "0"], &Env::default()).unwrap_err());
        assert!(refused[0].contains(flag.trim_start_matches("--")), "{flag}: {refused:?}");
    }
}

#[test]
fn connection_limits_have_defaults_bounds_and_environment_names() {
    let config = Config::from_args(&ServeArgs::defaults()).unwrap().connections;
    assert_eq!((config.streams_max, config.requests_max), (100, 64));
    assert_eq!((config.request_timeout, config.body_read_timeout), (Duration::from_secs(30), Duration::from_secs(10)));
    assert_eq!(
        (config.http2_keepalive_interval, config.http2_keepalive_timeout),
        (Duration::from_secs(60), Duration::from_secs(20))
    );
    assert_eq!((config.tcp_keepalive, config.preface_timeout), (Duration::from_secs(60), Duration::from_secs(10)));
    assert_eq!(config.body_buffer_bytes_max, 256 << 20);
    let handshakes = config.tls_handshakes;
    assert_eq!((handshakes.timeout, handshakes.max, handshakes.per_address_max), (Duration::from_secs(10), 256, 32));
    let small = serve(&["--body-buffer-bytes-max", "4096"], &Env::default()).unwrap();
    let lines = Config::from_args(&small).unwrap_err().0;
    assert!(lines.len() == 1 && lines[0].starts_with("--body-buffer-bytes-max"), "{lines:?}");
    let env: Env = [
        ("STEPWELL_CONNECTION_STREAMS_MAX", "8"),
        ("STEPWELL_CONNECTION_REQUESTS_MAX", "4"),
        ("STEPWELL_REQUEST_TIMEOUT_MS", "500"),
        ("STEPWELL_BODY_READ_TIMEOUT_MS", "200"),
        ("STEPWELL_HTTP2_KEEPALIVE_INTERVAL_MS", "300"),
        ("STEPWELL_HTTP2_KEEPALIVE_TIMEOUT_MS", "100"),
        ("STEPWELL_TCP_KEEPALIVE_MS", "5000"),
        ("STEPWELL_CONNECTION_PREFACE_TIMEOUT_MS", "250"),
        ("STEPWELL_TLS_HANDSHAKE_TIMEOUT_MS", "400"),
        ("STEPWELL_TLS_HANDSHAKES_MAX", "16"),
        ("STEPWELL_TLS_HANDSHAKES_PER_ADDRESS_MAX", "2"),
    ]
    .into_iter()
    .collect();
    let args = serve(&[], &env).unwrap();
    assert_eq!((args.connection_streams_max, args.connection_requests_max), (8, 4));
    assert_eq!(
        (args.request_timeout, args.body_read_timeout),
        (Duration::from_millis(500), Duration::from_millis(200))
    );
    assert_eq!(
        (args.http2_keepalive_interval, args.http2_keepalive_timeout),
        (Duration::from_millis(300), Duration::from_millis(100))
    );
    assert_eq!(
        (args.tcp_keepalive, args.connection_preface_timeout),
        (Duration::from_secs(5), Duration::from_millis(250))
    );
    assert_eq!(
        (args.tls_handshake_timeout, args.tls_handshakes_max, args.tls_handshakes_per_address_max),
        (Duration::from_millis(400), 16, 2)
    );
}

#[test]
fn connection_limits_refuse_zero() {
    for flag in [
        "--connection-streams-max",
        "--connection-requests-max",
        "--request-timeout-ms",
        "--body-read-timeout-ms",
        "--http2-keepalive-interval-ms",
        "--http2-keepalive-timeout-ms",
        "--tcp-keepalive-ms",
        "--connection-preface-timeout-ms",
        "--tls-handshake-timeout-ms",
        "--tls-handshakes-max",
        "--tls-handshakes-per-address-max",
    ] {
        let lines = mistakes(&serve(&[flag, "0"], &Env::default()).unwrap_err());
        assert!(lines.len() == 1 && lines[0].contains(flag), "{flag}: {lines:?}");
    }
}

#[test]
fn the_admin_listener_and_tracing_follow_their_flags_and_variables() {
    let defaults = Config::from_args(&ServeArgs::defaults()).unwrap().observability;
    assert_eq!(defaults.admin_listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(
        (defaults.namespace_labels, defaults.otlp_endpoint, defaults.service_name.as_str()),
        (None, None, "stepwell")
    );
    let labels = serve(&["--metrics-namespace-labels"], &Env::default()).unwrap();
    assert_eq!(Config::from_args(&labels).unwrap().observability.namespace_labels, Some(100));
    let capped = serve(&["--metrics-namespace-labels", "--metrics-namespace-labels-max", "3"], &Env::default());
    assert_eq!(Config::from_args(&capped.unwrap()).unwrap().observability.namespace_labels, Some(3));
    let none = serve(&["--metrics-namespace-labels-max", "0"], &Env::default()).unwrap_err();
    assert!(mistakes(&none).iter().any(|l| l.contains("--metrics-namespace-labels-max")));
    let off = serve(&["--admin-listen", "off"], &Env::default()).unwrap();
    assert_eq!(Config::from_args(&off).unwrap().observability.admin_listen, None);

    // Beyond loopback only on the operator's word.
    let wide = serve(&["--admin-listen", "0.0.0.0:9464"], &Env::default()).unwrap();
    let lines = Config::from_args(&wide).unwrap_err().0;
    assert!(lines.iter().any(|l| l.contains("--admin-listen") && l.contains("--insecure-allow-network")), "{lines:?}");
    let allowed = serve(&["--admin-listen", "0.0.0.0:9464", "--insecure-allow-network"], &Env::default()).unwrap();
    assert!(Config::from_args(&allowed).is_ok());
    let bad = serve(&["--admin-listen", "nowhere"], &Env::default()).unwrap_err();
    assert!(mistakes(&bad).iter().any(|l| l.contains("--admin-listen")));

    // The standard variables: the traces endpoint wins over the general
    // one, and the exporter `none` turns tracing off.
    let env: Env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ("OTEL_SERVICE_NAME", "checkout-sidecar"),
    ]
    .into_iter()
    .collect();
    let traced = Config::from_args(&serve(&[], &env).unwrap()).unwrap().observability;
    assert_eq!(traced.otlp_endpoint.as_deref(), Some("http://traces:4317"));
    assert_eq!(traced.service_name, "checkout-sidecar");
    let env: Env = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"), ("OTEL_TRACES_EXPORTER", "none")]
        .into_iter()
        .collect();
    assert_eq!(Config::from_args(&serve(&[], &env).unwrap()).unwrap().observability.otlp_endpoint, None);
    let env: Env = [("OTEL_TRACES_EXPORTER", "zipkin")].into_iter().collect();
    assert!(Config::from_args(&serve(&[], &env).unwrap()).is_err(), "an exporter stepwell has not is refused");
}

#[test]
fn the_console_and_the_admin_listeners_tls_follow_their_flags() {
    let defaults = Config::from_args(&ServeArgs::defaults()).unwrap().observability;
    assert_eq!(defaults.console.mode, ConsoleMode::Read, "read is the default");
    assert_eq!(defaults.console.session_ttl, Duration::from_secs(8 * 3600));
    assert_eq!(defaults.console.sessions_max, 1000);
    assert_eq!(defaults.console.stalled_after, Duration::from_secs(300));
    assert_eq!(defaults.admin_tls, None, "plain HTTP unless asked");
    let set = serve(
        &[
            "--console",
            "admin",
            "--console-session-ttl-seconds",
            "600",
            "--console-sessions-max",
            "5",
            "--console-stalled-after-seconds",
            "9",
        ],
        &Env::default(),
    );
    let console = Config::from_args(&set.unwrap()).unwrap().observability.console;
    assert_eq!(
        (console.mode, console.session_ttl, console.sessions_max),
        (ConsoleMode::Admin, Duration::from_secs(600), 5)
    );
    assert_eq!(console.stalled_after, Duration::from_secs(9));
    for (flag, value) in [
        ("--console-session-ttl-seconds", "59"),
        ("--console-sessions-max", "0"),
        ("--console-stalled-after-seconds", "0"),
        ("--console", "write"),
    ] {
        let lines = mistakes(&serve(&[flag, value], &Env::default()).unwrap_err());
        assert!(lines.iter().any(|l| l.contains(flag)), "{flag} {value}: {lines:?}");
    }

    // TLS: the server's certificate, or the admin listener's own.
    let server_cert = ["--tls-cert", "c.pem", "--tls-key", "k.pem", "--admin-tls"];
    let tls = Config::from_args(&serve(&server_cert, &Env::default()).unwrap()).unwrap().observability.admin_tls;
    assert_eq!(tls.map(|t| (t.cert, t.client_ca)), Some(("c.pem".into(), None)), "no client certificate asked");
    let own = ["--admin-tls", "--admin-tls-cert", "a.pem", "--admin-tls-key", "ak.pem"];
    let tls = Config::from_args(&serve(&own, &Env::default()).unwrap()).unwrap().observability.admin_tls;
    assert_eq!(tls.map(|t| t.key), Some("ak.pem".into()));
    for (args, flag) in [
        (&["--admin-tls"][..], "--admin-tls"),
        (&["--admin-tls", "--admin-tls-cert", "a.pem"][..], "--admin-tls-cert"),
        (&["--admin-tls-cert", "a.pem", "--admin-tls-key", "k.pem"][..], "--admin-tls-cert"),
    ] {
        let lines = Config::from_args(&serve(args, &Env::default()).unwrap()).unwrap_err().0;
        assert!(lines.iter().any(|l| l.contains(flag)), "{args:?}: {lines:?}");
    }

    // Beyond loopback: TLS and an auth file, or the operator's word.
    let wide =
        ["--admin-listen", "0.0.0.0:9464", "--admin-tls", "--admin-tls-cert", "a.pem", "--admin-tls-key", "k.pem"];
    assert!(Config::from_args(&serve(&wide, &Env::default()).unwrap()).is_err(), "TLS alone is not enough");
    let secured = [&wide[..], &["--auth-file", "auth.toml"]].concat();
    assert!(Config::from_args(&serve(&secured, &Env::default()).unwrap()).is_ok());
}

#[test]
fn turn_retention_follows_its_flags_and_its_file() {
    let off = Config::from_args(&ServeArgs::defaults()).unwrap().sweep.turns;
    assert_eq!(off, TurnRetention::default());
    assert!(!off.is_on());
    let env: Env = [("STEPWELL_OPEN_TURN_RETENTION", "2d")].into_iter().collect();
    let on = Config::from_args(&serve(&["--turn-retention", "30d"], &env).unwrap()).unwrap().sweep.turns;
    assert_eq!((on.terminal, on.open), (Some(Duration::from_secs(30 * 86_400)), Some(Duration::from_secs(2 * 86_400))));
    assert!(
        mistakes(&serve(&["--turn-retention", "0s"], &Env::default()).unwrap_err())[0].contains("--turn-retention")
    );
    assert!(serve(&["--turn-retention", "soon"], &Env::default()).is_err());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("retention.toml");
    std::fs::write(&file, "[namespaces.billing]\nturn_retention = \"90d\"\n[namespaces.audit]\nturn_retention = \"off\"\nopen_turn_retention = \"1h\"\nrecord_retention = \"2h\"\n").unwrap();
    let path = file.to_str().unwrap();
    let args =
        serve(&["--turn-retention", "1d", "--record-retention", "7d", "--retention-file", path], &Env::default())
            .unwrap();
    let rules = Config::from_args(&args).unwrap().sweep.turns;
    let day = Duration::from_secs(86_400);
    assert_eq!(
        rules.namespaces["billing"],
        NamespaceRetention { terminal: Some(day * 90), open: None, records: Some(day * 7) }
    );
    assert_eq!(
        rules.namespaces["audit"],
        NamespaceRetention {
            terminal: None,
            open: Some(Duration::from_secs(3600)),
            records: Some(Duration::from_secs(7200))
        }
    );
    assert_eq!(rules.terminal, Some(day));
    assert_eq!(rules.records, Some(day * 7));
    assert!(serve(&["--record-retention", "soon"], &Env::default()).is_err());

    std::fs::write(&file, "[namespaces.billing]\nturn_retention = \"later\"\n").unwrap();
    let errors = Config::from_args(&serve(&["--retention-file", path], &Env::default()).unwrap()).unwrap_err().0;
    assert!(errors[0].contains("--retention-file") && errors[0].contains("[namespaces.billing]"), "{errors:?}");
    std::fs::write(&file, "[namespaces.billing]\nretention = \"1d\"\n").unwrap();
    assert!(Config::from_args(&serve(&["--retention-file", path], &Env::default()).unwrap()).is_err(), "unknown keys");
}

#[test]
fn reports_every_bad_value_at_once() {
    let argv = ["--listen", "nowhere", "--database-url", "mysql://x", "--state-bytes-max=-1", "--log-format", "xml"];
    let error = serve(&argv, &Env::default()).unwrap_err();
    let lines = mistakes(&error);
    assert_eq!(lines.len(), 4, "{lines:?}");
    for flag in ["--listen", "--database-url", "--state-bytes-max", "--log-format"] {
        assert!(lines.iter().any(|l| l.contains(flag)), "{flag} missing from {lines:?}");
    }
}

#[test]
fn a_bad_database_url_is_reported_without_its_password() {
    let lines = mistakes(&serve(&["--database-url", "postgresq://u:SECRET@h/db"], &Env::default()).unwrap_err());
    assert!(lines.len() == 1 && lines[0].contains("--database-url"), "{lines:?}");
    assert!(!lines[0].contains("SECRET") && lines[0].contains("must start with"), "{lines:?}");
}

#[test]
fn record_limits_have_flags_and_defaults() {
    let defaults = Config::from_args(&ServeArgs::defaults()).unwrap().limits;
    assert_eq!(
        (defaults.record_bytes_max, defaults.record_metadata_bytes_max, defaults.records_per_request_max),
        (4 << 20, 64 << 10, 1000)
    );
    let argv = ["--record-bytes-max", "1024", "--record-metadata-bytes-max", "256", "--records-per-request-max", "3"];
    let limits = Config::from_args(&serve(&argv, &Env::default()).unwrap()).unwrap().limits;
    assert_eq!(
        (limits.record_bytes_max, limits.record_metadata_bytes_max, limits.records_per_request_max),
        (1024, 256, 3)
    );
    let lines = mistakes(&serve(&["--records-per-request-max", "0"], &Env::default()).unwrap_err());
    assert!(lines[0].contains("--records-per-request-max"), "{lines:?}");
}

#[test]
fn no_subcommand_means_serve() {
    assert!(matches!(parse(["stepwell"], &Env::default()), Ok(Command::Serve(_))));
}

#[test]
fn the_environment_is_the_source_passed_in() {
    let env: Env = [("STEPWELL_STATE_BYTES_MAX", "4096"), ("STEPWELL_UNSAFE_ACCEPT_NONDURABLE_POSTGRES", "1")]
        .into_iter()
        .collect();
    let args = serve(&[], &env).unwrap();
    assert_eq!(args.state_bytes_max, 4096);
    assert!(args.unsafe_accept_nondurable_postgres);
    // The command line wins over the environment.
    assert_eq!(serve(&["--state-bytes-max", "8192"], &env).unwrap().state_bytes_max, 8192);
    let off: Env = [("STEPWELL_UNSAFE_ACCEPT_NONDURABLE_POSTGRES", "false")].into_iter().collect();
    assert!(!serve(&[], &off).unwrap().unsafe_accept_nondurable_postgres);
    assert!(serve(&["--unsafe-sqlite-synchronous-normal"], &off).unwrap().unsafe_sqlite_synchronous_normal);
    assert!(!serve(&[], &off).unwrap().unsafe_sqlite_synchronous_normal);
    assert_eq!(ServeArgs::defaults().state_bytes_max, 1 << 20);
}

#[test]
fn a_bad_environment_value_is_reported_with_its_flag() {
    let env: Env = [("STEPWELL_POOL_MAX", "0")].into_iter().collect();
    let lines = mistakes(&serve(&[], &env).unwrap_err());
    assert!(lines.len() == 1 && lines[0].contains("--pool-max"), "{lines:?}");
}

#[test]
fn parses_listen_addresses() {
    assert_eq!("unix:/tmp/s.sock".parse(), Ok(Listen::Unix("/tmp/s.sock".into())));
    assert_eq!("127.0.0.1:1".parse(), Ok(Listen::Tcp("127.0.0.1:1".parse().unwrap())));
    assert!("unix:".parse::<Listen>().is_err());
}

#[test]
fn checks_healthcheck_flags() {
    let cli =
        parse(["stepwell", "healthcheck", "--target", "unix:/run/s.sock", "--timeout-ms", "250"], &Env::default());
    let Ok(Command::Healthcheck(check)) = cli else { panic!("not a healthcheck: {cli:?}") };
    assert_eq!(check.target, Listen::Unix("/run/s.sock".into()));
    assert_eq!(check.timeout, Duration::from_millis(250));
    let argv = ["stepwell", "healthcheck", "--target", "nowhere", "--timeout-ms", "0"];
    let lines = mistakes(&parse(argv, &Env::default()).unwrap_err());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("--target") && lines[1].contains("--timeout-ms"), "{lines:?}");
}

#[test]
fn healthcheck_tls_flags_come_together() {
    let check = |argv: &[&str], env: &Env| {
        let argv = ["stepwell", "healthcheck"].iter().chain(argv);
        let Ok(Command::Healthcheck(check)) = parse(argv, env) else { panic!("not a healthcheck") };
        check.tls()
    };
    let none = Env::default();
    assert_eq!(check(&[], &none), Ok(None), "plaintext without --tls-ca");
    let tls = check(&["--tls-ca", "ca.pem"], &none).unwrap().expect("TLS");
    assert_eq!((tls.server_name.to_str().as_ref(), tls.client), ("localhost", None));
    let argv = ["--tls-ca", "ca.pem", "--tls-server-name", "10.0.0.7", "--tls-cert", "c.pem", "--tls-key", "k.pem"];
    let tls = check(&argv, &none).unwrap().expect("TLS");
    assert_eq!(tls.server_name.to_str(), "10.0.0.7");
    assert_eq!(tls.client, Some(("c.pem".into(), "k.pem".into())));

    let errors = check(&["--tls-cert", "c.pem", "--tls-server-name", "stepwell"], &none).unwrap_err().0;
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].starts_with("--tls-cert") && errors[0].contains("--tls-key"), "{errors:?}");
    assert!(errors[1].starts_with("--tls-server-name") && errors[2].starts_with("--tls-cert"), "{errors:?}");
    assert!(check(&["--tls-ca", "ca.pem", "--tls-key", "k.pem"], &none).unwrap_err().0[0].starts_with("--tls-key"));

    // The serve variables are the server's own certificate, never the probe's.
    let serving: Env = [("STEPWELL_TLS_CERT", "s.pem"), ("STEPWELL_TLS_KEY", "s.key")].into_iter().collect();
    assert_eq!(check(&[], &serving), Ok(None));
    let probing: Env = [("STEPWELL_HEALTHCHECK_TLS_CA", "ca.pem")].into_iter().collect();
    assert_eq!(check(&[], &probing).unwrap().expect("TLS").ca, PathBuf::from("ca.pem"));
    let lines = mistakes(&parse(["stepwell", "healthcheck", "--tls-server-name", "a b"], &none).unwrap_err());
    assert!(lines[0].contains("--tls-server-name"), "{lines:?}");
}

#[test]
fn limits_are_checked_against_each_other_all_at_once() {
    let argv = ["--message-bytes-max", "1048576", "--lease-default-seconds", "7200", "--page-size-default", "20000"];
    let errors = Config::from_args(&serve(&argv, &Env::default()).unwrap()).unwrap_err().0;
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].contains("no room"), "{errors:?}");
    assert!(errors[1].starts_with("--lease-default-seconds"), "{errors:?}");
    assert!(errors[2].starts_with("--page-size-default"), "{errors:?}");
}

#[test]
fn the_write_queue_holds_at_least_the_largest_request() {
    let defaults = Config::from_args(&serve(&[], &Env::default()).unwrap()).unwrap();
    assert_eq!(defaults.writes.queue_bytes_max, 64 << 20);
    let argv = ["--write-queue-bytes-max", "4194303"];
    let errors = Config::from_args(&serve(&argv, &Env::default()).unwrap()).unwrap_err().0;
    assert!(errors.len() == 1 && errors[0].starts_with("--write-queue-bytes-max"), "{errors:?}");
    let argv = ["--write-queue-bytes-max", "2097152", "--message-bytes-max", "2097152"];
    assert_eq!(Config::from_args(&serve(&argv, &Env::default()).unwrap()).unwrap().writes.queue_bytes_max, 2 << 20);
}

#[test]
fn store_options_follow_the_backend() {
    let sqlite = Config::for_database("sqlite://a.db".parse().unwrap());
    assert_eq!(sqlite.store.acquire_timeout, Duration::from_secs(5));
    assert_eq!(sqlite.writes.concurrency, 1);
    let postgres = Config::for_database("postgres://u@h/d".parse().unwrap());
    assert_eq!(postgres.store.acquire_timeout, Duration::from_secs(2));
    assert_eq!(postgres.writes.concurrency, 4);
    let args = serve(&["--database-url", "postgres://u@h/d", "--sqlite-bytes-max", "1"], &Env::default()).unwrap();
    assert!(Config::from_args(&args).unwrap_err().0[0].starts_with("--sqlite-bytes-max"));
}

#[test]
fn a_network_port_needs_tls_and_auth_or_the_operators_word() {
    let errors = |argv: &[&str]| Config::from_args(&serve(argv, &Env::default()).unwrap()).err();
    let refused = errors(&["--listen", "0.0.0.0:50051"]).expect("refused");
    assert!(refused.0[0].starts_with("--listen") && refused.0[0].contains("--insecure-allow-network"), "{refused:?}");
    assert!(errors(&["--listen", "0.0.0.0:50051", "--insecure-allow-network"]).is_none());
    let secured = ["--listen", "[::]:50051", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--auth-file", "a.toml"];
    assert!(errors(&secured).is_none());
    assert!(errors(&["--listen", "0.0.0.0:1", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).is_some(), "TLS alone");
    assert!(errors(&["--listen", "[::1]:50051"]).is_none(), "loopback needs neither");
    assert!(errors(&["--listen", "unix:/tmp/s.sock"]).is_none(), "a socket file needs neither");
}

#[test]
fn tls_flags_come_together() {
    let errors = |argv: &[&str]| Config::from_args(&serve(argv, &Env::default()).unwrap()).unwrap_err().0;
    assert!(errors(&["--tls-cert", "c.pem"])[0].starts_with("--tls-cert"));
    assert!(errors(&["--tls-key", "k.pem"])[0].starts_with("--tls-key"));
    assert!(errors(&["--tls-client-ca", "ca.pem"])[0].starts_with("--tls-client-ca"));
    assert!(mistakes(&serve(&["--unix-socket-mode", "999"], &Env::default()).unwrap_err())[0].contains("octal"));
    assert_eq!(serve(&["--unix-socket-mode", "660"], &Env::default()).unwrap().unix_socket_mode, 0o660);
}

#[test]
fn a_bad_log_filter_is_a_configuration_error() {
    let args = serve(&["--log", "stepwell=loud"], &Env::default()).unwrap();
    assert!(Config::from_args(&args).unwrap_err().0[0].starts_with("--log"));
}

#[test]
fn the_postgres_profile_pooler_and_listen_url_reach_the_store_and_name_nothing_on_sqlite() {
    use crate::store::{Pooler, PostgresProfile};
    let pg = ["--database-url", "postgres://app@db/stepwell"];
    let flags = ["--postgres-profile", "portable", "--postgres-pooler", "transaction"];
    let listen = ["--postgres-listen-url", "postgres://app@db-direct/stepwell"];
    let args = serve(&[&pg[..], &flags[..], &listen[..]].concat(), &Env::default()).unwrap();
    let postgres = Config::from_args(&args).unwrap().store.postgres;
    assert_eq!(postgres.profile, PostgresProfile::Portable);
    assert_eq!(postgres.pooler, Pooler::Transaction);
    assert_eq!(postgres.listen_url.as_deref(), Some("postgres://app@db-direct/stepwell"));
    let defaults = Config::from_args(&serve(&pg, &Env::default()).unwrap()).unwrap().store.postgres;
    assert_eq!(
        (defaults.profile, defaults.pooler, defaults.listen_url),
        (PostgresProfile::Standard, Pooler::None, None)
    );

    let on_sqlite = serve(&[&flags[..], &listen[..]].concat(), &Env::default()).unwrap();
    let lines = Config::from_args(&on_sqlite).unwrap_err().0;
    for flag in ["postgres-profile", "postgres-pooler", "postgres-listen-url"] {
        assert!(lines.iter().any(|line| line.contains(flag) && line.contains("postgres://")), "{flag}: {lines:?}");
    }
    let not_a_url = serve(&[&pg[..], &["--postgres-listen-url", "sqlite://x.db"][..]].concat(), &Env::default());
    let lines = Config::from_args(&not_a_url.unwrap()).unwrap_err().0;
    assert!(lines.iter().any(|line| line.contains("postgres-listen-url")), "{lines:?}");
    assert!(serve(&["--postgres-profile", "cockroach"], &Env::default()).is_err(), "an unknown profile is refused");
}

#[test]
fn a_bad_value_names_the_subcommand_in_its_usage_line() {
    let error = parse(["stepwell", "waits", "ls", "--limit", "0"], &Env::default()).unwrap_err();
    let text = error.render().to_string();
    assert!(text.contains("Usage: stepwell waits ls"), "{text}");
    let error =
        parse(["stepwell", "turns", "ls", "--limit", "x", "--older-than", "soon"], &Env::default()).unwrap_err();
    let text = error.render().to_string();
    assert!(text.contains("Usage: stepwell turns ls") && text.contains("--older-than"), "{text}");
}

#[test]
fn status_filters_take_any_and_all_in_turns_and_waits() {
    use commands::{TurnsFilter, WaitStatusArg};
    for word in ["any", "all"] {
        match parse(["stepwell", "waits", "ls", "--status", word], &Env::default()).unwrap() {
            Command::Waits(WaitsCommand::Ls(ls)) => assert_eq!(ls.status, Some(WaitStatusArg::Any)),
            other => panic!("parsed as {other:?}"),
        }
        match parse(["stepwell", "turns", "ls", "--status", word], &Env::default()).unwrap() {
            Command::Turns(TurnsCommand::Ls(ls)) => assert_eq!(ls.status, TurnsFilter::Any),
            other => panic!("parsed as {other:?}"),
        }
    }
    match parse(["stepwell", "turns", "ls"], &Env::default()).unwrap() {
        Command::Turns(TurnsCommand::Ls(ls)) => assert_eq!(ls.status, TurnsFilter::Any, "every status by default"),
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn the_admin_listeners_help_says_what_beyond_loopback_takes() {
    let command = Cli::command();
    let serve = command.find_subcommand("serve").expect("the serve command");
    let arg = serve.get_arguments().find(|a| a.get_long() == Some("admin-listen")).expect("--admin-listen");
    let help = arg.get_long_help().or(arg.get_help()).expect("its help").to_string();
    assert!(help.contains("--admin-tls and --auth-file") && help.contains("--insecure-allow-network"), "{help}");
}

#[test]
fn the_vector_index_lengths_default_to_the_common_embeddings_and_name_nothing_on_sqlite() {
    let pg = ["--database-url", "postgres://app@db/stepwell"];
    let defaults = Config::from_args(&serve(&pg, &Env::default()).unwrap()).unwrap().store.postgres;
    assert_eq!(defaults.vector_index_dims, super::values::DEFAULT_VECTOR_INDEX_DIMS);
    let chosen = serve(&[&pg[..], &["--postgres-vector-index-dims", "3, 768"][..]].concat(), &Env::default());
    assert_eq!(Config::from_args(&chosen.unwrap()).unwrap().store.postgres.vector_index_dims, vec![3, 768]);
    let none = serve(&[&pg[..], &["--postgres-vector-index-dims", "none"][..]].concat(), &Env::default());
    assert!(Config::from_args(&none.unwrap()).unwrap().store.postgres.vector_index_dims.is_empty());
    for bad in ["0", "2001", "768,768", "768,", "big"] {
        let refused = serve(&[&pg[..], &["--postgres-vector-index-dims", bad][..]].concat(), &Env::default());
        assert!(refused.is_err(), "{bad:?} is refused");
    }
    let on_sqlite = serve(&["--postgres-vector-index-dims", "768"], &Env::default()).unwrap();
    let lines = Config::from_args(&on_sqlite).unwrap_err().0;
    assert!(lines.iter().any(|l| l.contains("postgres-vector-index-dims")), "{lines:?}");
    assert!(Config::from_args(&serve(&[], &Env::default()).unwrap()).is_ok(), "the default names nothing on SQLite");
}
