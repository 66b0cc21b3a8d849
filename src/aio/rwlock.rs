//! The async read-write lock: the blocking [`RwLock`](crate::RwLock)'s twin, on the same
//! queue, with futures that are safe to drop.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::acquisition::{Held, Shares};
use crate::protocol::keys::Primitive;
use crate::protocol::lease::Wait;
use crate::protocol::queue::RW_CAPACITY;
use crate::{Backend, Error, LockBuilder};

/// A read-write lock shared by every handle of the same name, for async code: the same lock
/// as [`crate::RwLock`], many readers or one writer, served in the order they asked, so a
/// waiting writer is never starved by a stream of readers.
///
/// A future dropped while it waits leaves the queue, giving back a hold that came meanwhile;
/// a guard dropped unreleased is given back from a task (or, as the runtime ends, from the
/// dropping thread).
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
/// let read = config.read().await?;
/// // ... many tasks and processes read at once ...
/// read.unlock().await?;
/// let write = config.write().await?;
/// // ... one writes, nobody reads ...
/// write.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct RwLock {
    shares: Shares,
    /// How many read locks each task (or, outside a task, each thread) holds through this
    /// handle: a write lock one of them waited for would wait for itself.
    readers: Mutex<HashMap<Reader, usize>>,
}

/// Who holds a read lock: a task, or a future run outside any (`block_on`'s), by its thread.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Reader {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Reader {
    fn current() -> Reader {
        tokio::task::try_id()
            .map_or_else(|| Reader::Thread(std::thread::current().id()), Reader::Task)
    }
}

/// A read lock held: given back by [`unlock`](Self::unlock) or, unattended, when dropped.
#[must_use = "the read lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a> {
    held: Held,
    _reading: Reading<'a>,
}

/// A read lock counted as its task's while it lives.
struct Reading<'a> {
    lock: &'a RwLock,
    reader: Reader,
}

/// The write lock held: given back by [`unlock`](Self::unlock) or, unattended, when dropped.
#[must_use = "the write lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a> {
    lock: &'a RwLock,
    held: Held,
}

impl RwLock {
    /// A handle on the read-write lock `name`, with the default settings. Refused on a
    /// [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        backend: &(impl Backend + ?Sized),
        name: impl Into<String>,
    ) -> Result<RwLock, Error> {
        RwLock::builder(backend, name).build()
    }

    /// A builder for a read-write lock handle: expiry, renewal, heartbeat, I/O timeout, id.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::builder(&client, "config")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(
        backend: &B,
        name: impl Into<String>,
    ) -> LockBuilder<RwLock> {
        LockBuilder::new(backend, name.into()).queued()
    }

    /// The lock's name (its keys are `rwlock:{<name>}:*`, or `rwlock:=<name>:*`
    /// for a name with a hash tag of its own).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// assert_eq!(config.name(), "config");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.shares.settings.name
    }

    /// Waits until a read lock is ours: at once unless a writer holds the lock or waits.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.read().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> Result<RwLockReadGuard<'_>, Error> {
        self.reading(Wait::Forever)
            .await?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
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
    pub async fn try_read(&self) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        self.reading(Wait::Never).await
    }

    /// Waits up to `timeout` for a read lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.try_read_for(Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read_for(
        &self,
        timeout: Duration,
    ) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        self.reading(Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` at the latest for a read lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.try_read_until(Instant::now() + Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        self.reading(Wait::Until(deadline)).await
    }

    /// Waits until the write lock is ours. A task that holds a read lock of this handle and
    /// asks for the write lock would wait for itself: [`Error::WouldDeadlock`] (release the
    /// read lock first).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.write().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self) -> Result<RwLockWriteGuard<'_>, Error> {
        self.writing(Wait::Forever)
            .await?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
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
    pub async fn try_write(&self) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        self.writing(Wait::Never).await
    }

    /// Waits up to `timeout` for the write lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.try_write_for(Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write_for(
        &self,
        timeout: Duration,
    ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        self.writing(Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` at the latest for the write lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.try_write_until(Instant::now() + Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        self.writing(Wait::Until(deadline)).await
    }

    async fn reading(&self, wait: Wait) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        let reader = Reader::current();
        let held = self.shares.take(1, wait).await?;
        Ok(held.map(|held| self.read_guard(held, reader)))
    }

    fn read_guard(&self, held: Held, reader: Reader) -> RwLockReadGuard<'_> {
        *self.readers.lock().entry(reader).or_default() += 1;
        RwLockReadGuard {
            held,
            _reading: Reading { lock: self, reader },
        }
    }

    async fn writing(&self, wait: Wait) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        // A try cannot wait for itself: it only finds the lock taken.
        if wait != Wait::Never && self.readers.lock().contains_key(&Reader::current()) {
            return Err(Error::WouldDeadlock {
                name: self.name().into(),
            });
        }
        let held = self.shares.take(RW_CAPACITY, wait).await?;
        Ok(held.map(|held| RwLockWriteGuard { lock: self, held }))
    }
}

impl LockBuilder<RwLock> {
    /// Checks the settings and makes the handle. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::builder(&client, "config").build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<RwLock, Error> {
        let (settings, transport) = self.checked()?;
        Ok(RwLock {
            shares: Shares::new(Primitive::RwLock, settings, transport, RW_CAPACITY),
            readers: Mutex::new(HashMap::new()),
        })
    }
}

impl RwLockReadGuard<'_> {
    /// Whether the read lock may have slipped away (its lease expired unrenewed, or it was
    /// reset). Once true, it stays true. No round trip.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// assert!(!config.read().await?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// This hold's fencing token, larger for every grant of this lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// assert!(config.read().await?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Releases now and returns the error, if any, instead of logging it.
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
        self.held.release().await
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut readers = self.lock.readers.lock();
        if let Some(count) = readers.get_mut(&self.reader) {
            *count -= 1;
            if *count == 0 {
                readers.remove(&self.reader);
            }
        }
    }
}

impl<'a> RwLockWriteGuard<'a> {
    /// Whether the write lock may have slipped away; see [`RwLockReadGuard::lost`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// assert!(!config.write().await?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// This hold's fencing token, larger for every grant of this lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// assert!(config.write().await?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Turns the write lock into a read lock without letting a writer in between; the
    /// readers queued behind it come in at once. The read lock counts as this task's.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.write().await?;
    /// // ... write ...
    /// let read = write.downgrade().await?;
    /// // ... go on reading what was written ...
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(self) -> Result<RwLockReadGuard<'a>, Error> {
        if !self.held.shrink(1).await? {
            return Err(Error::NotAcquired {
                name: self.lock.name().into(),
            });
        }
        Ok(self.lock.read_guard(self.held, Reader::current()))
    }

    /// Releases now and returns the error, if any, instead of logging it.
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
        self.held.release().await
    }
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::RwLock")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}
