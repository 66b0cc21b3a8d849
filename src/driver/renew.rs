//! The renewal thread: keeps an expiring lock alive while its holder works.
//!
//! It holds only a `Weak` reference to what it renews, so dropping the handle stops the
//! renewing and the lock then expires on its own; release stops it through a channel and
//! joins it. What one renewal does is the lock's business: this is only the thread.

use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// What the renewal threads are called (Linux shows the first 15 bytes).
const THREAD_NAME: &str = "redis-lock-renew";

pub(crate) struct Renewal {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Renewal {
    /// Calls `renew` on `target` after `first`, and again after each wait it returns, until
    /// it returns `None`, the renewal is stopped, or `target` is dropped.
    pub(crate) fn start<T: Send + Sync + 'static>(
        target: &Arc<T>,
        first: Duration,
        renew: fn(&T) -> Option<Duration>,
    ) -> std::io::Result<Renewal> {
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let weak = Arc::downgrade(target);
        // A fixed name: lock names may hold bytes a thread name cannot (NUL).
        let thread = thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || renew_until_stopped(&weak, &stopped, first, renew))?;
        Ok(Renewal { stop, thread })
    }
}

impl super::Renewing for Renewal {
    /// Stops the thread and waits for it, unless this is that thread (the last reference to
    /// the lock can be dropped there), which is about to end anyway.
    fn stop(self: Box<Self>) {
        drop(self.stop);
        if self.thread.thread().id() != thread::current().id() && self.thread.join().is_err() {
            log::error!("a lock renewal thread panicked");
        }
    }
}

fn renew_until_stopped<T>(
    target: &Weak<T>,
    stopped: &Receiver<()>,
    first: Duration,
    renew: fn(&T) -> Option<Duration>,
) {
    let mut wait = first;
    loop {
        if stopped.recv_timeout(wait) != Err(RecvTimeoutError::Timeout) {
            return;
        }
        let Some(target) = target.upgrade() else {
            return;
        };
        match renew(&target) {
            Some(next) => wait = next,
            None => return,
        }
    }
}
