//! The guard style: a held lock as a value that releases on drop, and `with_lock`.

use std::time::Duration;

use crate::{Error, Lock};

/// Proof that a [`Lock`] is held; the lock is released when the guard is dropped.
///
/// A release that fails in drop (the lock was lost, the server is away) is logged, never a
/// panic; call [`unlock`](Self::unlock) to see the error instead.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_lock::Lock::new(&client, "tickets")?;
/// let guard = lock.lock()?;
/// // ... sell the ticket ...
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<'a> {
    lock: &'a Lock,
}

impl<'a> LockGuard<'a> {
    pub(crate) fn new(lock: &'a Lock) -> Self {
        LockGuard { lock }
    }

    /// The lock this guard holds.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// assert_eq!(guard.lock().name(), "tickets");
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> &'a Lock {
        self.lock
    }

    /// Whether the lock has been lost since it was taken; see [`Lock::lost`]. No round trip.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// assert!(!guard.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.lock.lost()
    }

    /// This acquisition's fencing token; see [`Lock::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let guard = lock.lock()?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token()
    }

    /// Extends the held lock; see [`Lock::extend`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "batch")
    ///     .expire(Duration::from_secs(10))
    ///     .build()
    ///     ?;
    /// let guard = lock.lock()?;
    /// guard.extend(Some(Duration::from_secs(30)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        self.lock.extend(expire)
    }

    /// Releases now and reports how that went, instead of logging it in drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<(), Error> {
        let lock = self.lock;
        std::mem::forget(self);
        lock.release()
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.lock.release() {
            log::error!("lock {:?}: release on drop failed: {e}", self.lock.name());
        }
    }
}

impl std::fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", self.lock)
            .finish()
    }
}

/// Runs `work` while holding the lock `name` (no expiry, waiting as long as it takes), and
/// returns its value. The lock is released even if `work` panics; a failed release is
/// returned as the error, as python-redis-lock's `with Lock(...)` raises it.
///
/// Connections are pooled per server, so calling this in a loop does not open a new TCP
/// connection each time.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let total = redis_lock::with_lock(&client, "ledger", || 2 + 2)?;
/// assert_eq!(total, 4);
/// # Ok(())
/// # }
/// ```
pub fn with_lock<T>(
    client: &redis::Client,
    name: impl Into<String>,
    work: impl FnOnce() -> T,
) -> Result<T, Error> {
    let lock = Lock::new(client, name)?;
    let guard = lock.lock()?;
    let value = work();
    guard.unlock()?;
    Ok(value)
}
