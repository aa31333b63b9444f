//! The waiters of this sidecar's Awaits, by wait, and how a settlement
//! wakes them. An Await subscribes to its wait before it reads the store, so
//! a settlement that commits between the read and the wait is not missed:
//! it finds the subscription and wakes it. Whoever learns of a settlement
//! wakes the hub after its commit: the writer, for every settlement a batch
//! committed (Signal, CancelWait, timers and expiries), carrying the settled
//! wait; on Postgres also the listener of other sidecars' notifications and
//! the poll, which carry only the key, so the waiter reads the wait again.
//! A wait's entry goes when its last waiter leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use crate::domain::waits::{Wait, WaitKey};

/// What a wake carries: the settled wait when the waker has it.
type Woken = Option<Arc<Wait>>;

/// One wait's waiters: the channel they watch, and how many they are.
struct Slot {
    sender: watch::Sender<Woken>,
    waiters: usize,
}

/// Every wait this sidecar's Awaits wait for.
#[derive(Default)]
pub struct Hub {
    slots: Mutex<HashMap<WaitKey, Slot>>,
    /// Tells the timer task a wait was created that may fall due sooner.
    timers: Notify,
}

impl Hub {
    /// Registers a waiter for `key`; it hears every wake from now on.
    pub fn subscribe(self: &Arc<Hub>, key: WaitKey) -> Subscription {
        let mut slots = self.lock();
        let slot = slots.entry(key.clone()).or_insert_with(|| Slot { sender: watch::channel(None).0, waiters: 0 });
        slot.waiters += 1;
        let receiver = slot.sender.subscribe();
        Subscription { hub: self.clone(), key, receiver }
    }

    /// Wakes `key`'s waiters, if it has any, with the settled wait if known.
    pub fn wake(&self, key: &WaitKey, wait: Woken) {
        if let Some(slot) = self.lock().get(key) {
            slot.sender.send_replace(wait);
        }
    }

    /// The waits that have waiters now: what the poll reads again.
    pub fn keys(&self) -> Vec<WaitKey> {
        self.lock().keys().cloned().collect()
    }

    /// How many waiters wait, over every wait.
    pub fn waiters(&self) -> usize {
        self.lock().values().map(|slot| slot.waiters).sum()
    }

    /// Wakes the timer task to look again for the next due time.
    pub fn nudge_timers(&self) {
        self.timers.notify_one();
    }

    /// Completes when a nudge came since the last call.
    pub async fn timers_nudged(&self) {
        self.timers.notified().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WaitKey, Slot>> {
        // A panic while holding the map leaves it whole: each change is one call.
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One waiter's place in the hub, given back when dropped.
pub struct Subscription {
    hub: Arc<Hub>,
    key: WaitKey,
    receiver: watch::Receiver<Woken>,
}

impl Subscription {
    /// Waits for the next wake since subscribing (or since the last one
    /// seen); answers the settled wait when the waker carried it.
    pub async fn woken(&mut self) -> Woken {
        // The sender lives in the hub while this subscription does.
        if self.receiver.changed().await.is_err() {
            return None;
        }
        self.receiver.borrow_and_update().clone()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut slots = self.hub.lock();
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WaitKey {
        WaitKey { namespace: "default".into(), turn_id: "t".into(), name: name.into() }
    }

    #[tokio::test]
    async fn a_wake_after_subscribing_is_heard_and_the_last_waiter_leaving_removes_the_entry() {
        let hub = Arc::new(Hub::default());
        hub.wake(&key("a"), None); // nobody waits: nothing kept
        let mut first = hub.subscribe(key("a"));
        let second = hub.subscribe(key("a"));
        assert_eq!(hub.waiters(), 2);
        hub.wake(&key("a"), None);
        assert_eq!(first.woken().await, None);
        drop(first);
        drop(second);
        assert_eq!(hub.waiters(), 0);
        assert!(hub.keys().is_empty());
    }
}
