//! The guard style: a held lock as a value that releases on drop, and `with_lock`.
//!
//! A guard stands for one acquisition (an epoch of its handle): it releases that one only, so
//! a guard kept past an explicit release never frees a later acquisition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::lease::Wait;
use crate::transport::send::now;
use crate::{Backend, Error, Lock};

/// Proof that a [`Lock`] is held; the lock is released when the guard is dropped.
///
/// A release that fails in drop (the lock was lost, the server is away) is logged, never a
/// panic; call [`unlock`](Self::unlock) to see the error instead.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
/// let guard = lock.lock()?;
/// // ... sell the ticket ...
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<'a> {
    lock: &'a Lock,
    epoch: u64,
}

/// A [`LockGuard`] that owns an `Arc` of its lock, so it is `'static` and can move into a
/// thread; from [`Lock::lock_arc`] and its `try_` forms.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::sync::Arc;
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = Arc::new(redis_blpop_lock::Lock::new(&client, "tickets")?);
/// let guard = lock.lock_arc()?;
/// let worker = std::thread::spawn(move || {
///     // ... work under the lock ...
///     drop(guard); // released here, on this thread
/// });
/// let _ = worker.join();
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ArcLockGuard {
    lock: Arc<Lock>,
    epoch: u64,
}

impl Lock {
    /// Blocks until the lock is ours and returns a guard that releases it on drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// {
    ///     let _guard = lock.lock()?;
    ///     // ... critical section ...
    /// } // released here
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<LockGuard<'_>, Error> {
        let epoch = self.take(Wait::Forever)?;
        Ok(LockGuard {
            lock: self,
            epoch: epoch.unwrap_or_default(),
        })
    }

    /// The guard if the lock is free now, `None` if someone else holds it; never blocks.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// match lock.try_lock()? {
    ///     Some(_guard) => println!("got it"),
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self) -> Result<Option<LockGuard<'_>>, Error> {
        self.guard(Wait::Never)
    }

    /// The guard if the lock comes free within `timeout`, else `None`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// if let Some(_guard) = lock.try_lock_for(std::time::Duration::from_millis(500))? {
    ///     // ... critical section ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_>>, Error> {
        self.guard(Wait::timeout(Instant::now(), timeout))
    }

    /// The guard if the lock comes free by `deadline`, else `None`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// let deadline = Instant::now() + Duration::from_secs(2);
    /// if let Some(_guard) = lock.try_lock_until(deadline)? {
    ///     // ... critical section ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard<'_>>, Error> {
        self.guard(Wait::Until(deadline))
    }

    /// [`lock`](Self::lock), with a guard that owns an `Arc` of the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "jobs")?);
    /// let guard = lock.lock_arc()?;
    /// let _ = std::thread::spawn(move || drop(guard)).join();
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_arc(self: &Arc<Self>) -> Result<ArcLockGuard, Error> {
        let epoch = self.take(Wait::Forever)?;
        Ok(ArcLockGuard {
            lock: Arc::clone(self),
            epoch: epoch.unwrap_or_default(),
        })
    }

    /// [`try_lock`](Self::try_lock), with a guard that owns an `Arc` of the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "jobs")?);
    /// if let Some(guard) = lock.try_lock_arc()? {
    ///     std::thread::spawn(move || drop(guard));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_arc(self: &Arc<Self>) -> Result<Option<ArcLockGuard>, Error> {
        self.arc_guard(Wait::Never)
    }

    /// [`try_lock_for`](Self::try_lock_for), with a guard that owns an `Arc` of the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "jobs")?);
    /// let guard = lock.try_lock_arc_for(std::time::Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_arc_for(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Result<Option<ArcLockGuard>, Error> {
        self.arc_guard(Wait::timeout(Instant::now(), timeout))
    }

    /// [`try_lock_until`](Self::try_lock_until), with a guard that owns an `Arc` of the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "jobs")?);
    /// let guard = lock.try_lock_arc_until(Instant::now() + Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_arc_until(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Result<Option<ArcLockGuard>, Error> {
        self.arc_guard(Wait::Until(deadline))
    }

    /// Runs `work` while holding this lock, and returns its value. The lock is released even
    /// if `work` panics; a failed release is returned as the error, as python-redis-lock's
    /// `with Lock(...)` raises it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let total = lock.with_lock(|| 2 + 2)?;
    /// assert_eq!(total, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_lock<T>(&self, work: impl FnOnce() -> T) -> Result<T, Error> {
        let guard = self.lock()?;
        let value = work();
        guard.unlock()?;
        Ok(value)
    }

    fn guard(&self, wait: Wait) -> Result<Option<LockGuard<'_>>, Error> {
        Ok(self
            .take(wait)?
            .map(|epoch| LockGuard { lock: self, epoch }))
    }

    fn arc_guard(self: &Arc<Self>, wait: Wait) -> Result<Option<ArcLockGuard>, Error> {
        Ok(self.take(wait)?.map(|epoch| ArcLockGuard {
            lock: Arc::clone(self),
            epoch,
        }))
    }
}

impl<'a> LockGuard<'a> {
    /// The lock this guard holds.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// assert_eq!(guard.lock().name(), "tickets");
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> &'a Lock {
        self.lock
    }

    /// Whether this acquisition is over or lost; see [`Lock::lost`]. No round trip.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// assert!(!guard.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.lock.inner.lost_since(self.epoch)
    }

    /// This acquisition's fencing token; see [`Lock::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "batch")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<(), Error> {
        let (lock, epoch) = (self.lock, self.epoch);
        std::mem::forget(self);
        now(lock.inner.release(Some(epoch)))
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        release_on_drop(self.lock, self.epoch);
    }
}

impl ArcLockGuard {
    /// The lock this guard holds.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "tickets")?);
    /// let guard = lock.lock_arc()?;
    /// assert_eq!(guard.lock().name(), "tickets");
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> &Arc<Lock> {
        &self.lock
    }

    /// Whether this acquisition is over or lost; see [`Lock::lost`]. No round trip.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "tickets")?);
    /// let guard = lock.lock_arc()?;
    /// assert!(!guard.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.lock.inner.lost_since(self.epoch)
    }

    /// This acquisition's fencing token; see [`Lock::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let lock = std::sync::Arc::new(lock);
    /// let guard = lock.lock_arc()?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token()
    }

    /// Releases now and reports how that went, instead of logging it in drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "tickets")?);
    /// lock.lock_arc()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<(), Error> {
        let epoch = self.epoch;
        let lock = Arc::clone(&self.lock);
        std::mem::forget(self);
        now(lock.inner.release(Some(epoch)))
    }
}

impl Drop for ArcLockGuard {
    fn drop(&mut self) {
        release_on_drop(&self.lock, self.epoch);
    }
}

/// A guard's release on drop: only its own acquisition, and a failure is logged.
fn release_on_drop(lock: &Lock, epoch: u64) {
    match now(lock.inner.release(Some(epoch))) {
        Ok(()) => {}
        Err(e @ Error::NotAcquired { .. }) => log::warn!("lock {:?}: on drop: {e}", lock.name()),
        Err(e) => log::error!("lock {:?}: release on drop failed: {e}", lock.name()),
    }
}

impl std::fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", self.lock)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ArcLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArcLockGuard")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

/// How long the lock of [`with_lock`] lives without a renewal: a crashed process frees it
/// after this long, while the renewal thread keeps it for a live one.
pub(crate) const WITH_LOCK_EXPIRE: Duration = Duration::from_secs(30);

/// Runs `work` while holding the lock `name`, and returns its value: the lock has a 30 s
/// expiry kept alive by a renewal thread (so a crashed process frees it), and the wait is as
/// long as it takes. The lock is released even if `work` panics; a failed release is
/// returned as the error. For other settings, build a [`Lock`] and call
/// [`Lock::with_lock`].
///
/// Connections are pooled per server, so calling this in a loop does not open a new TCP
/// connection each time.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let total = redis_blpop_lock::with_lock(&client, "ledger", || 2 + 2)?;
/// assert_eq!(total, 4);
/// # Ok(())
/// # }
/// ```
pub fn with_lock<T>(
    backend: &(impl Backend + ?Sized),
    name: impl Into<String>,
    work: impl FnOnce() -> T,
) -> Result<T, Error> {
    Lock::builder(backend, name)
        .expire(WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?
        .with_lock(work)
}
