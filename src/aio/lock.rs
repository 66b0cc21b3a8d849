//! The async lock handle.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{Backend, Error, Holder, LockBuilder};

use super::LockGuard;

/// A distributed lock on one Redis key, `lock:<name>`, for async code: the async twin of
/// [`crate::Lock`].
pub struct Lock {}

impl Lock {
    /// A handle on the lock `name` on `backend`, with no expiry and a random owner id.
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Lock, Error> {
        Lock::builder(backend, name).build()
    }

    /// A builder for a handle on the lock `name` on `backend`; see [`LockBuilder`].
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Lock> {
        todo!("{:p}{}", backend, name.into())
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        todo!()
    }

    /// This handle's owner id.
    pub fn id(&self) -> &str {
        todo!()
    }

    /// Waits until the lock is ours.
    pub async fn acquire(&self) -> Result<(), Error> {
        todo!()
    }

    /// Takes the lock if it is free.
    #[must_use = "the lock may not have been taken"]
    pub async fn try_acquire(&self) -> Result<bool, Error> {
        todo!()
    }

    /// Waits up to `timeout` for the lock.
    #[must_use = "the lock may not have been taken"]
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        todo!("{timeout:?}")
    }

    /// Releases the lock and wakes one waiter.
    pub async fn release(&self) -> Result<(), Error> {
        todo!()
    }

    /// Gives the lock a new expiry.
    pub async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        todo!("{expire:?}")
    }

    /// Frees the lock whoever holds it.
    #[must_use = "says whether there was a lock to reset"]
    pub async fn reset(&self) -> Result<bool, Error> {
        todo!()
    }

    /// Who holds the lock.
    pub async fn holder(&self) -> Result<Option<Holder>, Error> {
        todo!()
    }

    /// Whether anyone holds the lock.
    pub async fn locked(&self) -> Result<bool, Error> {
        todo!()
    }

    /// The id of the lock's current owner.
    pub async fn owner_id(&self) -> Result<Option<String>, Error> {
        todo!()
    }

    /// Whether the lock this handle acquired has been lost since.
    pub fn lost(&self) -> bool {
        todo!()
    }

    /// The fencing token of the current acquisition.
    pub fn fencing_token(&self) -> Option<u64> {
        todo!()
    }

    /// Waits until the lock is ours; the guard releases it.
    pub async fn lock(&self) -> Result<LockGuard, Error> {
        todo!()
    }

    /// Takes the lock if it is free.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>, Error> {
        todo!()
    }

    /// Waits up to `timeout`.
    pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        todo!("{timeout:?}")
    }

    /// Waits until `deadline`.
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>, Error> {
        todo!("{deadline:?}")
    }

    /// Runs `work` while holding this lock; `Error::Lost` (work dropped) if the lock is lost.
    pub async fn with_lock<F: Future>(&self, work: F) -> Result<F::Output, Error> {
        let _ = work;
        todo!()
    }
}

impl LockBuilder<Lock> {
    /// Checks the settings and makes the async handle. No connection is opened yet.
    pub fn build(self) -> Result<Lock, Error> {
        let _ = self.checked()?;
        todo!()
    }
}
