//! The plain [`Lock`], on either API: python-redis-lock's lock (or, built fair, a lock on the
//! queue engine) over the driver's one acquire path,
//! [`Inner::take`](crate::driver::Inner::take). What both APIs share is here; each API's
//! methods and guards are in a file of its own: [`blocking`] (guards that borrow the handle
//! or own an `Arc` of it, on the driver's [`Acquisition`](crate::driver::acquirer::Acquisition)
//! as every primitive's holds are) and `aio` (a guard that owns its acquisition, taken and
//! released in the handle's turn).

#[cfg(feature = "tokio")]
mod aio;
mod blocking;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Blocking, Runtime};
use crate::driver::Inner;
use crate::{CancelToken, Error, LockBuilder};

#[cfg(feature = "tokio")]
pub use aio::OwnedLockGuard;
pub use blocking::{with_lock, ArcLockGuard, LockGuard};

/// How long the lock of `with_lock` lives without a renewal: a crashed process frees it
/// after this long, while the renewal keeps it for a live one.
pub(crate) const WITH_LOCK_EXPIRE: Duration = Duration::from_secs(30);

/// A distributed lock on one Redis key, `lock:<name>`: [`crate::Lock`] (blocking) and
/// [`crate::aio::Lock`] (async) are this type, and the handles of one name on either API are
/// the same lock, and wake each other.
///
/// Acquiring blocks in `BLPOP lock-signal:<name>` instead of polling; a release wakes exactly
/// one waiter. Each handle has an owner id (random unless given); Redis holds the id of the
/// handle that owns the lock. A handle is `Send + Sync` and may be shared between threads and
/// tasks, but the lock is not reentrant: acquiring it again under the same id is an error. An
/// async handle's waiting tasks in one process share one `BLPOP` per name and queue for it in
/// arrival order; every future is safe to drop at any `.await` (see [`crate::aio`] for what
/// each one does when dropped).
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
pub struct Lock<R: Runtime = Blocking> {
    pub(crate) inner: Arc<Inner<R>>,
    /// The handle's calls, one at a time: only the async API's take turns.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) turns: R::Turns,
}

impl<R: Runtime> Lock<R> {
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
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs").id("worker-7").build()?;
    /// assert_eq!(lock.id(), "worker-7");
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Whether the lock this handle acquired has been lost since: its expiry passed
    /// without a renewal getting through, or a renewal or [`extend`](Self::extend)
    /// found another id in the key. No round trip: it is what this handle knows. Stays
    /// true until the lock is released or acquired again; false when the handle holds
    /// nothing.
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
        self.inner.known.lost()
    }

    /// The fencing token of the current acquisition, when the lock was built with
    /// [`fencing(true)`](crate::LockBuilder::fencing) and is held.
    ///
    /// Tokens grow with every acquisition of the name, so a storage system that
    /// remembers the highest token it has seen can refuse a write from a holder that
    /// lost the lock (paused past its expiry) after someone else took it:
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
    ///     // The store keeps the highest token it has accepted and rejects lower
    ///     // ones, e.g. in SQL:
    ///     // UPDATE ledger SET ..., fence = $token WHERE id = $id AND fence < $token
    ///     println!("writing with token {token}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.known.fencing_token()
    }
}

impl<R: Runtime> LockBuilder<Lock<R>> {
    /// A fair lock: waiters take it in the order they asked, across threads, tasks and
    /// processes, and a newcomer never takes it ahead of them. It is the queue engine's (see
    /// the crate docs' "Fair lock" section), on keys `fair-lock:{name}:*`
    /// (`fair-lock:=name:*` for a name with a hash tag of its own), so it is not
    /// python-redis-lock's and does not exclude a plain lock of the same name: every handle of
    /// one name must agree. Its expiry defaults to 30 s, renewed, unless
    /// [`expire`](Self::expire) says otherwise.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "tickets").fair(true).build()?;
    /// let guard = lock.lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(self, on: bool) -> Self {
        self.fair_or_not(on)
    }

    /// Lets `token` cancel this handle's waits from anywhere; see
    /// [`CancelToken`](crate::CancelToken).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .cancel_token(token.clone())
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel_token(self, token: CancelToken) -> Self {
        self.cancelled_by(token)
    }

    /// Checks the settings and makes the handle. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .build()?;
    /// assert!(redis_blpop_lock::Lock::builder(&client, "").build().is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Lock<R>, Error> {
        let (settings, transport) = self.checked()?;
        let inner = Inner::<R>::of_lock(settings, transport)?;
        Ok(Lock {
            inner: Arc::new(inner),
            turns: R::Turns::default(),
        })
    }
}

impl<R: Runtime> fmt::Debug for Lock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The id stays out: anyone who knows it can release the lock.
        f.debug_struct(&format!("{}Lock", R::API))
            .field("name", &self.inner.settings.name)
            .field("expire_ms", &self.inner.settings.expire_ms)
            .field("auto_renewal", &self.inner.settings.auto_renewal)
            .field("fencing", &self.inner.settings.fencing)
            .finish_non_exhaustive()
    }
}
