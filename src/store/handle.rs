//! The store as the rest of the sidecar reaches it: the backend behind a
//! breaker. While the health monitor finds the store down, the breaker is
//! open and every read and write hears UNAVAILABLE at once instead of each
//! waiting out a dead server. Reads go straight to the backend through
//! `Handle::reads`; writes go through the group-commit `Writer`, which
//! checks the same breaker. The handle also carries the hub of this
//! sidecar's Awaits, which the writer wakes after each settlement commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::hub::Hub;
use super::{Error, Store};

/// The backend and its breaker; clones share both.
#[derive(Clone)]
pub struct Handle {
    store: Arc<dyn Store>,
    down: Arc<AtomicBool>,
    hub: Arc<Hub>,
}

impl Handle {
    /// A handle on an opened store, breaker closed.
    pub fn new(store: Arc<dyn Store>) -> Handle {
        Handle { store, down: Arc::new(AtomicBool::new(false)), hub: Arc::new(Hub::default()) }
    }

    /// The store, for reads; `Error::Down` while the breaker is open.
    pub fn reads(&self) -> Result<&dyn Store, Error> {
        self.check_up()?;
        Ok(self.store.as_ref())
    }

    /// `Error::Down` while the breaker is open.
    pub fn check_up(&self) -> Result<(), Error> {
        if self.down.load(Ordering::SeqCst) { Err(Error::Down) } else { Ok(()) }
    }

    /// Opens (`false`) or closes (`true`) the breaker: the health monitor's verdict.
    pub fn set_up(&self, up: bool) {
        self.down.store(!up, Ordering::SeqCst);
    }

    /// The waiters of this sidecar's Awaits.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The backend itself, past the breaker: for the health monitor's ping,
    /// the sweeper and closing, which must reach a store that looks down.
    pub fn backend(&self) -> &Arc<dyn Store> {
        &self.store
    }
}
