//! The [`RwLock`]: a reader takes one unit of the queue engine's
//! [`Acquirer`](crate::driver::acquirer::Acquirer), a writer all of them, on either API.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use super::{ended, Blocking, Hold, Runtime};
use crate::driver::acquirer::Acquirer;
use crate::protocol::lease::Wait;
use crate::protocol::primitive::{Primitive, WRITER_UNITS};
use crate::protocol::readers::{Reader, Readers, Reading};
use crate::transport::send::now;
use crate::{Backend, CancelToken, Error, LockBuilder};

/// A read-write lock shared by every handle of the same name, on the fair queue engine (see
/// the crate docs' "Read-write lock" section for its keys and scripts): many readers or one
/// writer, served in the order they asked, so a waiting writer is never starved by a stream
/// of readers. The blocking handles ([`crate::RwLock`]) and the async ones
/// ([`crate::aio::RwLock`]) of one name are the same lock.
///
/// A reader holds one share of a million and a writer all of them, in one queue served in
/// order: readers that come while a writer waits queue behind it. Each hold is a lease of its
/// own (30 s by default, renewed while held), so a reader's renewal renews only its own
/// entry, and a crashed holder's hold comes back at its expiry. An async wait dropped at an
/// `.await` leaves the queue, giving back a hold that came meanwhile; an async guard dropped
/// unreleased is given back from a task (or, as the runtime ends, from the dropping thread).
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
/// let read = config.read()?;
/// // ... many read at once ...
/// read.unlock()?;
/// let write = config.write()?;
/// // ... one writes, nobody reads ...
/// write.unlock()?;
/// # Ok(())
/// # }
/// ```
pub struct RwLock<R: Runtime = Blocking> {
    acquirer: Acquirer<R>,
    readers: Readers,
}

/// A read lock held: given back by [`unlock`](Self::unlock), or when dropped.
#[must_use = "the read lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a, R: Runtime = Blocking> {
    hold: Hold<R>,
    _reading: Reading<'a>,
}

/// The write lock held: given back by [`unlock`](Self::unlock), or when dropped.
#[must_use = "the write lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a, R: Runtime = Blocking> {
    lock: &'a RwLock<R>,
    hold: Hold<R>,
}

impl RwLock {
    /// A handle on the read-write lock `name`, with the default settings. Refused on a
    /// [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for a read-write lock handle: expiry, renewal, heartbeat, I/O timeout, id,
    /// cancel token.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::RwLock::builder(&client, "config")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into()).on_queue_engine()
    }

    /// Waits until a read lock is ours: at once when only readers hold it and no writer
    /// waits.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let read = config.read()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(&self) -> Result<RwLockReadGuard<'_>, Error> {
        now(self.reading(Wait::Forever))?.ok_or_else(ended)
    }

    /// A read lock if no writer holds the lock or waits for it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// if let Some(read) = config.try_read()? {
    ///     read.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read(&self) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        now(self.reading(Wait::Never))
    }

    /// Waits up to `timeout` for a read lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let read = config.try_read_for(Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read_for(&self, timeout: Duration) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        now(self.reading(Wait::timeout(Instant::now(), timeout)))
    }

    /// Waits until `deadline` at the latest for a read lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let read = config.try_read_until(Instant::now() + Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read_until(&self, deadline: Instant) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        now(self.reading(Wait::Until(deadline)))
    }

    /// Waits until the write lock is ours. Refused with [`Error::WouldDeadlock`] when this
    /// thread (or task) holds a read lock of this handle: an upgrade would wait for itself
    /// (release the read lock first). So are the timed forms, while
    /// [`try_write`](Self::try_write) then finds the lock taken.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let write = config.write()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(&self) -> Result<RwLockWriteGuard<'_>, Error> {
        now(self.writing(Wait::Forever))?.ok_or_else(ended)
    }

    /// The write lock if nobody holds the lock or waits for it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// if let Some(write) = config.try_write()? {
    ///     write.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write(&self) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        now(self.writing(Wait::Never))
    }

    /// Waits up to `timeout` for the write lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let write = config.try_write_for(Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write_for(&self, timeout: Duration) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        now(self.writing(Wait::timeout(Instant::now(), timeout)))
    }

    /// Waits until `deadline` at the latest for the write lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let write = config.try_write_until(Instant::now() + Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        now(self.writing(Wait::Until(deadline)))
    }
}

/// The async API's read-write lock ([`crate::aio::RwLock`]): the same methods, as futures.
#[cfg(feature = "tokio")]
impl RwLock<super::Tokio> {
    /// A handle on the read-write lock `name`, with the default settings; see
    /// [`RwLock::new`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for an async read-write lock handle; see [`RwLock::builder`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::builder(&client, "config")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into()).on_queue_engine()
    }

    /// Waits until a read lock is ours; see [`RwLock::read`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.read().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> Result<RwLockReadGuard<'_, super::Tokio>, Error> {
        self.reading(Wait::Forever).await?.ok_or_else(ended)
    }

    /// A read lock if no writer holds the lock or waits for it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// if let Some(read) = config.try_read().await? {
    ///     read.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read(&self) -> Result<Option<RwLockReadGuard<'_, super::Tokio>>, Error> {
        self.reading(Wait::Never).await
    }

    /// Waits up to `timeout` for a read lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.try_read_for(Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read_for(
        &self,
        timeout: Duration,
    ) -> Result<Option<RwLockReadGuard<'_, super::Tokio>>, Error> {
        self.reading(Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` at the latest for a read lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.try_read_until(Instant::now() + Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<RwLockReadGuard<'_, super::Tokio>>, Error> {
        self.reading(Wait::Until(deadline)).await
    }

    /// Waits until the write lock is ours; refused with [`Error::WouldDeadlock`] when this
    /// task holds a read lock of this handle (see [`RwLock::write`]).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.write().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self) -> Result<RwLockWriteGuard<'_, super::Tokio>, Error> {
        self.writing(Wait::Forever).await?.ok_or_else(ended)
    }

    /// The write lock if nobody holds the lock or waits for it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// if let Some(write) = config.try_write().await? {
    ///     write.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write(&self) -> Result<Option<RwLockWriteGuard<'_, super::Tokio>>, Error> {
        self.writing(Wait::Never).await
    }

    /// Waits up to `timeout` for the write lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.try_write_for(Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write_for(
        &self,
        timeout: Duration,
    ) -> Result<Option<RwLockWriteGuard<'_, super::Tokio>>, Error> {
        self.writing(Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` at the latest for the write lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.try_write_until(Instant::now() + Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<RwLockWriteGuard<'_, super::Tokio>>, Error> {
        self.writing(Wait::Until(deadline)).await
    }
}

impl<R: Runtime> RwLock<R> {
    /// The lock's name (its keys are `rwlock:{<name>}:*`, or `rwlock:=<name>:*` for a name
    /// with a hash tag of its own).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert_eq!(config.name(), "config");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.acquirer.settings.name
    }

    async fn reading(&self, wait: Wait) -> Result<Option<RwLockReadGuard<'_, R>>, Error> {
        let reader = Reader::current();
        let held = self.acquirer.acquire(1, wait).await?;
        Ok(held.map(|held| self.read_guard(Hold::new(held), reader)))
    }

    fn read_guard(&self, hold: Hold<R>, reader: Reader) -> RwLockReadGuard<'_, R> {
        RwLockReadGuard {
            hold,
            _reading: self.readers.enter(reader),
        }
    }

    async fn writing(&self, wait: Wait) -> Result<Option<RwLockWriteGuard<'_, R>>, Error> {
        // A try cannot wait for itself: it only finds the lock taken.
        if wait != Wait::Never && self.readers.reading_here() {
            return Err(Error::WouldDeadlock {
                name: self.name().into(),
            });
        }
        let held = self.acquirer.acquire(WRITER_UNITS, wait).await?;
        Ok(held.map(|held| RwLockWriteGuard {
            lock: self,
            hold: Hold::new(held),
        }))
    }
}

impl<R: Runtime> LockBuilder<RwLock<R>> {
    /// Lets `token` cancel this handle's waits from anywhere; see
    /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue, and its wait
    /// returns [`Error::Cancelled`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let config = redis_blpop_lock::RwLock::builder(&client, "config")
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
    /// let config = redis_blpop_lock::RwLock::builder(&client, "config").build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<RwLock<R>, Error> {
        let (settings, transport, capacity) = self.checked_for(Primitive::RwLock)?;
        Ok(RwLock {
            acquirer: Acquirer::new(Primitive::RwLock, settings, transport, capacity),
            readers: Readers::default(),
        })
    }
}

impl<'a, R: Runtime> RwLockWriteGuard<'a, R> {
    /// Keeps one reader's share and gives back the rest: the guard of the read lock left.
    async fn downgraded(self) -> Result<RwLockReadGuard<'a, R>, Error> {
        if !self.hold.acquisition.shrink(1).await? {
            return Err(Error::NotAcquired {
                name: self.lock.name().into(),
            });
        }
        Ok(self.lock.read_guard(self.hold, Reader::current()))
    }
}

impl RwLockReadGuard<'_> {
    /// Releases now and reports how that went, instead of logging it in drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// config.read()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<(), Error> {
        now(self.hold.acquisition.release())
    }
}

impl<'a> RwLockWriteGuard<'a> {
    /// Releases now and reports how that went, instead of logging it in drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// config.write()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<(), Error> {
        now(self.hold.acquisition.release())
    }

    /// Turns the write lock into a read lock without letting a writer in between; the
    /// readers queued behind it come in at once.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// let write = config.write()?;
    /// // ... write ...
    /// let read = write.downgrade()?;
    /// // ... go on reading what was written ...
    /// # Ok(())
    /// # }
    /// ```
    pub fn downgrade(self) -> Result<RwLockReadGuard<'a>, Error> {
        now(self.downgraded())
    }
}

#[cfg(feature = "tokio")]
impl RwLockReadGuard<'_, super::Tokio> {
    /// Releases now and reports how that went, instead of logging it in drop. A release whose
    /// future is dropped is done again unattended.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// config.read().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<(), Error> {
        self.hold.acquisition.release().await
    }
}

#[cfg(feature = "tokio")]
impl<'a> RwLockWriteGuard<'a, super::Tokio> {
    /// Releases now and reports how that went, instead of logging it in drop. A release whose
    /// future is dropped is done again unattended.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// config.write().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<(), Error> {
        self.hold.acquisition.release().await
    }

    /// Turns the write lock into a read lock without letting a writer in between; see
    /// [`RwLockWriteGuard::downgrade`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.write().await?.downgrade().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(self) -> Result<RwLockReadGuard<'a, super::Tokio>, Error> {
        self.downgraded().await
    }
}

/// The acquisition it holds, and what it knows of it: [`Hold::lost`], [`Hold::lost_token`],
/// [`Hold::fencing_token`], and for an async guard [`Hold::when_lost`].
impl<R: Runtime> Deref for RwLockReadGuard<'_, R> {
    type Target = Hold<R>;

    fn deref(&self) -> &Hold<R> {
        &self.hold
    }
}

/// The acquisition it holds; see [`RwLockReadGuard`]'s.
impl<R: Runtime> Deref for RwLockWriteGuard<'_, R> {
    type Target = Hold<R>;

    fn deref(&self) -> &Hold<R> {
        &self.hold
    }
}

impl<R: Runtime> fmt::Debug for RwLock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}RwLock", R::API))
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}
