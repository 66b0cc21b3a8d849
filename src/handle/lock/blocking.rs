//! The blocking API's plain lock: [`Lock`]'s methods that block, and its guards:
//! [`LockGuard`], which borrows its lock, and [`ArcLockGuard`], which owns an `Arc` of it.
//! Each guard holds one acquisition (the driver's [`Acquisition`], as every primitive's holds
//! do) and releases that one only, so a guard kept past an explicit release never frees a
//! later acquisition.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Lock, WITH_LOCK_EXPIRE};
use crate::driver::acquirer::Acquisition;
use crate::driver::blocking::Blocking;
use crate::handle::Hold;
use crate::protocol::lease::Wait;
use crate::transport::send::now;
use crate::{Backend, Error, Holder, LockBuilder};

impl Lock {
    /// A handle on the lock `name` on `backend` (one server, a cluster, a Sentinel-managed
    /// primary: see [`Backend`]), with no expiry and a random owner id. The blocking and the
    /// async handles of one name are the same lock, and wake each other.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "cron:cleanup")?;
    /// if lock.try_acquire()? {
    ///     // ... only one process in the fleet gets here at a time ...
    ///     lock.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for a handle on the lock `name` on `backend`; see
    /// [`LockBuilder`](crate::LockBuilder).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "cron:cleanup")
    ///     .expire(std::time::Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into())
    }

    /// Waits until the lock is ours. Waiting happens in `BLPOP`, woken by a release
    /// and ended by the client at the holder's expiry, so a crashed holder's lock is
    /// taken within milliseconds of its expiry. Each round trip is bounded by the
    /// handle's I/O timeout. An async acquire dropped before it returns leaves the
    /// lock as it found it.
    ///
    /// Fails with [`Error::AlreadyAcquired`] if this owner id already holds the lock,
    /// and with [`Error::Cancelled`] when the handle's
    /// [`CancelToken`](crate::CancelToken) is cancelled.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// lock.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self) -> Result<(), Error> {
        now(self.held(Wait::Forever)).map(drop)
    }

    /// Takes the lock if it is free, never waiting for it. `Ok(false)` when someone
    /// else holds it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// if !lock.try_acquire()? {
    ///     println!("busy, held by {:?}", lock.holder()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub fn try_acquire(&self) -> Result<bool, Error> {
        now(self.held(Wait::Never))
    }

    /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in
    /// time. A zero timeout is a single try; any size is allowed, including longer
    /// than the expiry. The call returns by `timeout` plus at most the round trip
    /// under way (see [`LockBuilder::io_timeout`](crate::LockBuilder::io_timeout)).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// if lock.acquire_timeout(std::time::Duration::from_secs(5))? {
    ///     lock.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        now(self.held(Wait::timeout(Instant::now(), timeout)))
    }

    /// Releases the lock and wakes one waiter. An async release runs to its end even
    /// if its future is dropped.
    ///
    /// Fails with [`Error::NotAcquired`], changing nothing, when the lock is not held
    /// under this handle's id. Never says so about a lock its own unlock released:
    /// when a reply was lost and the retry finds the lock gone, that is success. When
    /// Redis could not be reached in time it is [`Error::OutcomeUnknown`], and the next
    /// acquire asks Redis.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// let released = lock.release();
    /// assert!(matches!(released, Err(redis_blpop_lock::Error::NotAcquired { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self) -> Result<(), Error> {
        now(self.release_held())
    }

    /// Gives the lock a new expiry: `expire`, or the handle's configured one when
    /// `None`.
    ///
    /// Fails with [`Error::NotAcquired`] when the lock is not held under this id,
    /// [`Error::NotExpirable`] when it was taken without an expiry, and
    /// [`Error::InvalidArgument`] when neither `expire` nor a configured expiry is
    /// there.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// lock.acquire()?;
    /// lock.extend(Some(Duration::from_secs(60)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        now(self.inner.extend(expire))
    }

    /// Frees the lock whoever holds it and wakes one waiter: an operator's tool for a
    /// lock left by a holder that will never release it. Returns whether the lock was
    /// held.
    ///
    /// It reads the owner, then deletes the lock only if that owner still holds it, so
    /// it can never delete a lock taken after it looked. A key at `lock:<name>` that
    /// is not a string is not a lock: it is left alone and reported as
    /// [`Error::Corrupt`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "stuck-job")?;
    /// if lock.reset()? {
    ///     println!("freed a stuck lock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "says whether there was a lock to reset"]
    pub fn reset(&self) -> Result<bool, Error> {
        now(self.inner.reset())
    }

    /// Who holds the lock and for how much longer, read in one round trip; `None`
    /// when it is free.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// match lock.holder()? {
    ///     Some(holder) => println!("held by {} for {:?}", holder.id, holder.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder(&self) -> Result<Option<Holder>, Error> {
        now(self.inner.holder())
    }

    /// Whether anyone holds the lock (one round trip).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// println!("held: {}", lock.locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn locked(&self) -> Result<bool, Error> {
        Ok(now(self.inner.holder())?.is_some())
    }

    /// The id of the lock's current owner, or `None` when it is free (one round
    /// trip); see [`holder`](Self::holder) for the remaining expiry too.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// assert_eq!(lock.owner_id()?.as_deref(), Some(lock.id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner_id(&self) -> Result<Option<String>, Error> {
        Ok(now(self.inner.holder())?.map(|h| h.id))
    }

    /// Waits until the lock is ours and returns a guard that releases it when dropped.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// // ... sell the ticket ...
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<LockGuard<'_>, Error> {
        match now(self.guard(Wait::Forever))? {
            Some(guard) => Ok(guard),
            // A wait without end only ends with the lock or an error.
            None => Err(self.inner.error(|name| Error::Cancelled { name })),
        }
    }

    /// The guard if the lock is free now, `None` if someone else holds it; never
    /// waits.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// match lock.try_lock()? {
    ///     Some(guard) => guard.unlock()?,
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self) -> Result<Option<LockGuard<'_>>, Error> {
        now(self.guard(Wait::Never))
    }

    /// The guard if the lock comes free within `timeout`, else `None`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// if let Some(guard) = lock.try_lock_for(std::time::Duration::from_secs(2))? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_>>, Error> {
        now(self.guard(Wait::timeout(Instant::now(), timeout)))
    }

    /// The guard if the lock comes free by `deadline`, else `None`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let deadline = Instant::now() + Duration::from_secs(2);
    /// if let Some(guard) = lock.try_lock_until(deadline)? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard<'_>>, Error> {
        now(self.guard(Wait::Until(deadline)))
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

    /// The acquire path, into a guard.
    async fn guard(&self, wait: Wait) -> Result<Option<LockGuard<'_>>, Error> {
        let cancel = &self.inner.settings.cancel;
        let held = Acquisition::take_apart(Arc::clone(&self.inner), wait, cancel).await?;
        Ok(held.map(|held| LockGuard::new(self, held)))
    }

    /// The acquire path, the lock then held by the handle without a guard.
    async fn held(&self, wait: Wait) -> Result<bool, Error> {
        Ok(self.guard(wait).await?.map(LockGuard::keep).is_some())
    }

    async fn release_held(&self) -> Result<(), Error> {
        self.inner.release(None).await
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
    crate::Lock::builder(backend, name)
        .expire(WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?
        .with_lock(work)
}

/// Proof that a [`Lock`](crate::Lock) is held; the lock is released when the guard is
/// dropped.
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
    hold: Hold<Blocking>,
}

/// A [`LockGuard`] that owns an `Arc` of its lock, so it is `'static` and can move into a
/// thread; from [`Lock::lock_arc`](crate::Lock::lock_arc) and its `try_` forms.
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
    hold: Hold<Blocking>,
}

impl<'a> LockGuard<'a> {
    pub(super) fn new(lock: &'a Lock, held: Acquisition<Blocking>) -> Self {
        LockGuard {
            lock,
            hold: Hold::new(held),
        }
    }

    /// Leaves the lock held by its handle, with no guard to release it.
    pub(super) fn keep(self) {
        self.hold.acquisition.keep();
    }

    pub(super) fn into_arc(self, lock: Arc<Lock>) -> ArcLockGuard {
        ArcLockGuard {
            lock,
            hold: self.hold,
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

    /// Gives the held lock a new expiry; see [`Lock::extend`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// guard.extend(Some(std::time::Duration::from_secs(30)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        now(self.hold.acquisition.extend(expire))
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
        now(self.hold.acquisition.release())
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

    /// Gives the held lock a new expiry; see [`Lock::extend`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = std::sync::Arc::new(redis_blpop_lock::Lock::new(&client, "tickets")?);
    /// lock.lock_arc()?.extend(Some(std::time::Duration::from_secs(30)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        now(self.hold.acquisition.extend(expire))
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
        now(self.hold.acquisition.release())
    }
}

/// The acquisition it holds, and what it knows of it: [`Hold::lost`], [`Hold::lost_token`],
/// [`Hold::fencing_token`].
impl Deref for LockGuard<'_> {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        &self.hold
    }
}

/// The acquisition it holds; see [`LockGuard`]'s.
impl Deref for ArcLockGuard {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        &self.hold
    }
}

impl fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", self.lock)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ArcLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArcLockGuard")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}
