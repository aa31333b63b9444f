//! The fault suite of stepwell: the sidecar's one promise, that an
//! acknowledged write survives anything and a write it could not make is
//! reported, tested under faults. Writers run while the sidecar is killed
//! (`kill_loop`), while Postgres crashes (`postgres_only`), while replies
//! are lost after the commit (`ambiguous`), and while the disk fills or
//! fails (`sqlite_only`); the `checker` holds every logged outcome to what
//! the store holds afterwards. Runs once per backend, one test at a time;
//! `profile` picks the CI or the long profile.
//!
//! It shares the integration suite's harness: how a server is started and
//! which store it runs on.

#[path = "../it/backend.rs"]
#[allow(dead_code)]
mod backend;
#[path = "../it/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../it/pg_cluster.rs"]
#[allow(dead_code)]
mod pg_cluster;
#[path = "../it/support.rs"]
#[allow(dead_code)]
mod support;

mod checker;
mod profile;
mod proxy;
mod workload;

mod ambiguous;
mod kill_loop;
mod postgres_only;
mod sqlite_only;
