//! What `run` takes and holds while its command runs: the lock (python-redis-lock's, or the
//! fair one), permits of a semaphore, or a read or write hold of a read-write lock; one shape
//! for the waiting and the watching of each.

use std::time::Duration;

use redis_blpop_lock::{Error, Lock};

use crate::admin;

/// What `run` takes.
pub(crate) enum Target {
    /// A lock, fair or not.
    Lock(Lock),
}

/// A hold that `run` keeps while its command runs.
pub(crate) trait Hold: Send {
    /// Whether the hold was lost (reset, or not renewed in time): a local check.
    fn lost(&self) -> bool;
    /// Gives the hold back; `Error::NotAcquired` when it was no longer ours.
    fn release(self: Box<Self>) -> Result<(), Error>;
}

/// A held lock: the handle is the hold.
struct LockHold<'a>(&'a Lock);

impl Hold for LockHold<'_> {
    fn lost(&self) -> bool {
        self.0.lost()
    }

    fn release(self: Box<Self>) -> Result<(), Error> {
        self.0.release()
    }
}

impl Target {
    /// Its name, as the user gave it.
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Lock(lock) => lock.name(),
        }
    }

    /// One try, never waiting: `None` when it is busy.
    pub(crate) fn try_take(&self) -> Result<Option<Box<dyn Hold + '_>>, Error> {
        match self {
            Target::Lock(lock) => Ok(lock.try_acquire()?.then(|| held(lock))),
        }
    }

    /// Waits up to `timeout` (`None`: for as long as it takes): `None` when it passed.
    pub(crate) fn take(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<Box<dyn Hold + '_>>, Error> {
        match self {
            Target::Lock(lock) => {
                let taken = match timeout {
                    Some(timeout) => lock.acquire_timeout(timeout)?,
                    None => lock.acquire().map(|()| true)?,
                };
                Ok(taken.then(|| held(lock)))
            }
        }
    }

    /// ", held by ..." for the user who finds it busy; nothing when that cannot be said.
    pub(crate) fn held_by(&self) -> String {
        match self {
            Target::Lock(lock) => match lock.holder() {
                Ok(Some(holder)) => format!(", {}", admin::describe(&holder)),
                // Freed just now, or Redis went away: the busy answer stands either way.
                Ok(None) | Err(_) => String::new(),
            },
        }
    }
}

fn held(lock: &Lock) -> Box<dyn Hold + '_> {
    Box::new(LockHold(lock))
}
