//! The blocking [`Lock`] and its guards: the lock shell ([`crate::shell::lock`]) on the
//! blocking runtime, and what only the blocking API has: guards that borrow their handle or
//! own an `Arc` of it, and `with_lock` over a closure.
//!
//! A guard stands for one acquisition (an epoch of its handle): it releases that one only, so
//! a guard kept past an explicit release never frees a later acquisition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::blocking::Blocking;
use crate::driver::{Inner, Taken};
use crate::protocol::lease::Wait;
use crate::transport::send::now;
use crate::{Backend, CancelToken, Error};

crate::shell::for_api!(lock, blocking;
    guard = [LockGuard<'_>],
    guards = [
        LockGuard<'_> => "lock", "redis_blpop_lock::Lock::new(&client, \"tickets\")?";
        ArcLockGuard => "lock_arc", "std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, \"tickets\")?)";
    ],
);

/// A distributed lock on one Redis key, `lock:<name>`.
///
/// Acquiring blocks in `BLPOP lock-signal:<name>` instead of polling; a release wakes exactly
/// one waiter. Each handle has an owner id (random unless given); Redis holds the id of the
/// handle that owns the lock. A handle is `Send + Sync` and may be shared between threads, but
/// the lock is not reentrant: acquiring it again under the same id is an error.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::Lock::builder(&client, "nightly-report")
///     .expire(Duration::from_secs(60))
///     .auto_renewal(true)
///     .build()?;
/// let guard = lock.lock()?;
/// // ... work while the renewal thread keeps the lock alive ...
/// drop(guard);
/// # Ok(())
/// # }
/// ```
pub struct Lock {
    pub(crate) inner: Arc<Inner<Blocking>>,
}

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
    /// Cancelled when the acquisition is lost.
    notice: CancelToken,
    /// Whether dropping it releases; not once it has been released or handed on.
    armed: bool,
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
    notice: CancelToken,
    armed: bool,
}

impl Lock {
    pub(crate) fn from_inner(inner: Arc<Inner<Blocking>>) -> Lock {
        Lock { inner }
    }

    /// The acquire path, into a guard.
    async fn guard(&self, wait: Wait) -> Result<Option<LockGuard<'_>>, Error> {
        let taken = self.inner.take(wait, &self.inner.settings.cancel).await?;
        Ok(taken.map(|Taken { epoch, notice }| LockGuard {
            lock: self,
            epoch,
            notice,
            armed: true,
        }))
    }

    async fn release_held(&self) -> Result<(), Error> {
        self.inner.release(None).await
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
        let guard = self.lock()?;
        Ok(guard.into_arc(Arc::clone(self)))
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
        Ok(self
            .try_lock()?
            .map(|guard| guard.into_arc(Arc::clone(self))))
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
        let guard = self.try_lock_for(timeout)?;
        Ok(guard.map(|guard| guard.into_arc(Arc::clone(self))))
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
        let guard = self.try_lock_until(deadline)?;
        Ok(guard.map(|guard| guard.into_arc(Arc::clone(self))))
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
}

impl<'a> LockGuard<'a> {
    fn inner(&self) -> &Arc<Inner<Blocking>> {
        &self.lock.inner
    }

    /// Leaves the lock held by its handle, with no guard to release it.
    fn keep(mut self) {
        self.armed = false;
    }

    fn into_arc(mut self, lock: Arc<Lock>) -> ArcLockGuard {
        self.armed = false;
        ArcLockGuard {
            lock,
            epoch: self.epoch,
            notice: self.notice.clone(),
            armed: true,
        }
    }

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
    pub fn unlock(mut self) -> Result<(), Error> {
        self.armed = false;
        now(self.lock.inner.release(Some(self.epoch)))
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_on_drop(self.lock, self.epoch);
        }
    }
}

impl ArcLockGuard {
    fn inner(&self) -> &Arc<Inner<Blocking>> {
        &self.lock.inner
    }

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
    pub fn unlock(mut self) -> Result<(), Error> {
        self.armed = false;
        now(self.lock.inner.release(Some(self.epoch)))
    }
}

impl Drop for ArcLockGuard {
    fn drop(&mut self) {
        if self.armed {
            release_on_drop(&self.lock, self.epoch);
        }
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
        .expire(crate::shell::lock::WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?
        .with_lock(work)
}
