//! The blocking lock handle, over the driver on its [`Blocking`] runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::blocking::Blocking;
pub use crate::driver::Holder;
use crate::driver::Inner;
use crate::protocol::keys::QueueKeys;
use crate::protocol::lease::Wait;
use crate::protocol::primitive::Primitive;
use crate::protocol::queue::Ask;
use crate::settings::Settings;
use crate::transport::send::now;
use crate::transport::Transport;
use crate::Error;

/// A fair lock's place in the queue engine (its keys, and what it asks for), for a lock
/// with `settings`; `None` for a plain lock.
pub(crate) fn fair_queue(settings: &Settings) -> Result<Option<(QueueKeys, Ask)>, Error> {
    if !settings.on_queue_engine {
        return Ok(None);
    }
    let keys = QueueKeys::new(Primitive::FairLock, &settings.name);
    let capacity = Primitive::FairLock.capacity(1)?;
    let ask = Ask::new(
        &settings.id,
        1,
        capacity,
        settings.expire(),
        settings.lapse(),
    )?;
    Ok(Some((keys, ask)))
}

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
    /// A fair lock's place in the queue engine: its keys and what it asks for.
    fair: Option<(QueueKeys, Ask)>,
}

impl Lock {
    pub(crate) fn from_settings(
        settings: Settings,
        transport: Arc<dyn Transport>,
    ) -> Result<Lock, Error> {
        let fair = fair_queue(&settings)?;
        let inner = match &fair {
            Some((keys, ask)) => Inner::for_line(settings, transport, keys, ask),
            None => Inner::new(settings, transport),
        };
        Ok(Lock {
            inner: Arc::new(inner),
            fair,
        })
    }

    /// Takes the lock as `wait` allows: its epoch, or `None` when the wait ended first.
    pub(crate) fn take(&self, wait: Wait) -> Result<Option<u64>, Error> {
        let cancel = &self.inner.settings.cancel;
        match &self.fair {
            Some((keys, ask)) => now(self.inner.acquire_in_line(keys, ask, wait, cancel)),
            None => now(self.inner.acquire(wait, cancel)),
        }
    }

    /// The lock's name (the key is `lock:<name>`).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert_eq!(lock.name(), "jobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.settings.name
    }

    /// This handle's owner id: what Redis holds while this handle owns the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert_eq!(lock.id().len(), 24);
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Blocks until the lock is ours. Waiting happens in `BLPOP`, woken by a release and
    /// ended by the client at the holder's expiry, so a crashed holder's lock is taken within
    /// milliseconds of its expiry. Each round trip is bounded by the handle's I/O timeout.
    ///
    /// Fails with [`Error::AlreadyAcquired`] if this owner id already holds the lock, and with
    /// [`Error::Cancelled`] when the handle's [`CancelToken`](crate::CancelToken) is cancelled.
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
        self.take(Wait::Forever).map(|_| ())
    }

    /// Takes the lock if it is free, never blocking. `Ok(false)` when someone else holds it.
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
        Ok(self.take(Wait::Never)?.is_some())
    }

    /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in time. A zero
    /// timeout is a single try; any size is allowed, including longer than the expiry. The
    /// call returns by `timeout` plus at most the round trip under way (see
    /// [`LockBuilder::io_timeout`](crate::LockBuilder::io_timeout)).
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
        Ok(self.take(Wait::timeout(Instant::now(), timeout))?.is_some())
    }

    /// Releases the lock and wakes one waiter.
    ///
    /// Fails with [`Error::NotAcquired`], changing nothing, when the lock is not held under
    /// this handle's id. Never says so about a lock its own unlock released: when a reply was
    /// lost and the retry finds the lock gone, that is success. When Redis could not be
    /// reached in time it is [`Error::OutcomeUnknown`], and the next acquire asks Redis.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert!(matches!(lock.release(), Err(redis_blpop_lock::Error::NotAcquired { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self) -> Result<(), Error> {
        now(self.inner.release(None))
    }

    /// Gives the lock a new expiry: `expire`, or the handle's configured one when `None`.
    ///
    /// Fails with [`Error::NotAcquired`] when the lock is not held under this id,
    /// [`Error::NotExpirable`] when it was taken without an expiry, and
    /// [`Error::InvalidArgument`] when neither `expire` nor a configured expiry is there.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// let _guard = lock.lock()?;
    /// lock.extend(Some(Duration::from_secs(60)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        now(self.inner.extend(expire))
    }

    /// Frees the lock whoever holds it and wakes one waiter: an operator's tool for a lock
    /// left by a holder that will never release it. Returns whether the lock was held.
    ///
    /// It reads the owner, then deletes the lock only if that owner still holds it, so it can
    /// never delete a lock taken after it looked. A key at `lock:<name>` that is not a string
    /// is not a lock: it is left alone and reported as [`Error::Corrupt`].
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

    /// Who holds the lock and for how much longer, read in one round trip; `None` when it is
    /// free.
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
        Ok(self.holder()?.is_some())
    }

    /// The id of the lock's current owner, or `None` when it is free (one round trip); see
    /// [`holder`](Self::holder) for the remaining expiry too.
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
        Ok(self.holder()?.map(|h| h.id))
    }

    /// Whether the lock this handle acquired has been lost since: its expiry passed without a
    /// renewal getting through, or a renewal or [`extend`](Self::extend) found another id in
    /// the key. No round trip: it is what this handle knows. Stays true until the lock is
    /// released or acquired again; false when the handle holds nothing.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// if guard.lost() {
    ///     // stop writing: someone else may hold the lock now
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.inner.lost()
    }

    /// The fencing token of the current acquisition, when the lock was built with
    /// [`fencing(true)`](crate::LockBuilder::fencing) and is held.
    ///
    /// Tokens grow with every acquisition of the name, so a storage system that remembers the
    /// highest token it has seen can refuse a write from a holder that lost the lock (paused
    /// past its expiry) after someone else took it:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger")
    ///     .expire(std::time::Duration::from_secs(10))
    ///     .fencing(true)
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// if let Some(token) = guard.fencing_token() {
    ///     // The store keeps the highest token it has accepted and rejects lower ones, e.g.
    ///     // in SQL: UPDATE ledger SET ..., fence = $token WHERE id = $id AND fence < $token
    ///     println!("writing with token {token}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id stays out: anyone who knows it can release the lock.
        f.debug_struct("Lock")
            .field("name", &self.inner.settings.name)
            .field("expire_ms", &self.inner.settings.expire_ms)
            .field("auto_renewal", &self.inner.settings.auto_renewal)
            .field("fencing", &self.inner.settings.fencing)
            .finish_non_exhaustive()
    }
}
