//! The renewal thread: keeps an expiring lock alive while its holder works.
//!
//! It holds only a `Weak` reference to the lock, so dropping the handle stops the renewing and
//! the lock then expires on its own; release stops it through a channel and joins it.

use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::lock::{Extended, Inner};

/// What the renewal threads are called (Linux shows the first 15 bytes).
const THREAD_NAME: &str = "redis-lock-renew";

pub(crate) struct Renewal {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Renewal {
    /// Starts renewing `lock` for `expire` every two thirds of `expire`.
    pub(crate) fn start(lock: &Arc<Inner>, expire: Duration) -> std::io::Result<Renewal> {
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let weak = Arc::downgrade(lock);
        // A fixed name: lock names may hold bytes a thread name cannot (NUL).
        let thread = thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || renew_until_stopped(&weak, &stopped, expire))?;
        log::debug!("lock {:?}: renewal started", lock.name());
        Ok(Renewal { stop, thread })
    }

    /// Stops the thread and waits for it, unless this is that thread (the last reference to
    /// the lock can be dropped there), which is about to end anyway.
    pub(crate) fn stop(self) {
        drop(self.stop);
        if self.thread.thread().id() != thread::current().id() && self.thread.join().is_err() {
            log::error!("a lock renewal thread panicked");
        }
    }
}

fn renew_until_stopped(lock: &Weak<Inner>, stopped: &Receiver<()>, expire: Duration) {
    let interval = expire * 2 / 3;
    // After a failed renewal, try again soon: the lock is lost if the expiry passes first.
    let retry = (interval / 8).max(Duration::from_millis(1));
    let mut wait = interval;
    loop {
        if stopped.recv_timeout(wait) != Err(RecvTimeoutError::Timeout) {
            break;
        }
        let Some(lock) = lock.upgrade() else { break };
        let Some(ms) = lock.expire_ms() else { break };
        match lock.extend_ms(ms) {
            Ok(Extended::Yes) => {
                log::debug!("lock {:?}: renewal refreshed", lock.name());
                wait = interval;
            }
            Ok(Extended::NotOurs) => {
                lock.mark_lost();
                log::error!("lock {:?}: lost (it is no longer ours)", lock.name());
                break;
            }
            Ok(Extended::NoExpiry) => {
                log::warn!(
                    "lock {:?}: its expiry was removed; renewal not needed",
                    lock.name()
                );
                break;
            }
            Err(e) if lock.expired() => {
                lock.mark_lost();
                log::error!(
                    "lock {:?}: lost (expired before a renewal got through: {e})",
                    lock.name()
                );
                break;
            }
            Err(e) => {
                log::warn!("lock {:?}: renewal failed, retrying: {e}", lock.name());
                wait = retry;
            }
        }
    }
    if let Some(lock) = lock.upgrade() {
        log::debug!("lock {:?}: renewal stopped", lock.name());
    }
}
