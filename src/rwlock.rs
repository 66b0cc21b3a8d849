//! A read-write lock across processes: many readers or one writer, served in the order they
//! asked, so a waiting writer is never starved by a stream of readers.

use std::collections::HashMap;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::acquisition::{Held, Shares};
use crate::backend::Backend;
use crate::builder::LockBuilder;
use crate::protocol::keys::Primitive;
use crate::protocol::lease::Wait;
use crate::protocol::queue::RW_CAPACITY;
use crate::Error;

/// A read-write lock shared by every handle of the same name, on the fair queue engine (see
/// the crate docs' "Read-write lock" section for its keys and scripts).
///
/// A reader holds one share of a million and a writer all of them, in one queue served in
/// order: readers that come while a writer waits queue behind it. Each hold is a lease of its
/// own (30 s by default, renewed while held), so a reader's renewal renews only its own entry,
/// and a crashed holder's hold comes back at its expiry.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
/// {
///     let read = config.read()?;
///     // ... many processes read at once ...
/// }
/// let write = config.write()?;
/// // ... one process writes, nobody reads ...
/// # Ok(())
/// # }
/// ```
pub struct RwLock {
    shares: Shares,
    /// How many read locks each thread holds through this handle: a write lock one of them
    /// waited for would wait for itself. (A read guard sent to another thread still counts
    /// for the one that took it.)
    readers: Mutex<HashMap<ThreadId, usize>>,
}

/// A read lock held: given back when dropped.
#[must_use = "the read lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a> {
    held: Held,
    _reading: Reading<'a>,
}

/// A read lock counted as its thread's while it lives.
struct Reading<'a> {
    lock: &'a RwLock,
    thread: ThreadId,
}

/// The write lock held: given back when dropped.
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::RwLock::builder(&client, "config")
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(redis_blpop_lock::RwLock::new(&client, "config")?.name(), "config");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.shares.settings.name
    }

    /// Blocks until a read lock is ours: at once when only readers hold it and no writer
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
        self.reading(Wait::Forever)?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
    }

    /// A read lock if nobody writes or waits to.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// if let Some(read) = config.try_read()? {
    ///     // ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read(&self) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        self.reading(Wait::Never)
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
        self.reading(Wait::timeout(Instant::now(), timeout))
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
        self.reading(Wait::Until(deadline))
    }

    /// Blocks until the write lock is ours. Refused with [`Error::WouldDeadlock`] when this
    /// thread holds a read lock of this handle (an upgrade would wait for itself); so are
    /// the timed forms, while [`try_write`](Self::try_write) then finds the lock taken.
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
        self.writing(Wait::Forever)?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
    }

    /// The write lock if nobody holds the lock or waits for it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// if let Some(write) = config.try_write()? {
    ///     // ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write(&self) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        self.writing(Wait::Never)
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
        self.writing(Wait::timeout(Instant::now(), timeout))
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
        self.writing(Wait::Until(deadline))
    }

    fn reading(&self, wait: Wait) -> Result<Option<RwLockReadGuard<'_>>, Error> {
        Ok(self.shares.take(1, wait)?.map(|held| self.read_guard(held)))
    }

    fn read_guard(&self, held: Held) -> RwLockReadGuard<'_> {
        let thread = thread::current().id();
        *self.readers.lock().entry(thread).or_default() += 1;
        RwLockReadGuard {
            held,
            _reading: Reading { lock: self, thread },
        }
    }

    fn writing(&self, wait: Wait) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
        // A try cannot wait for itself: it only finds the lock taken.
        if wait != Wait::Never && self.readers.lock().contains_key(&thread::current().id()) {
            return Err(Error::WouldDeadlock {
                name: self.name().into(),
            });
        }
        Ok(self
            .shares
            .take(RW_CAPACITY, wait)?
            .map(|held| RwLockWriteGuard { lock: self, held }))
    }
}

impl LockBuilder<RwLock> {
    /// Lets `token` cancel this handle's waits from another thread; see
    /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let handle = redis_blpop_lock::RwLock::builder(&client, "config")
    ///     .cancel_token(token.clone())
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel_token(self, token: crate::CancelToken) -> Self {
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
    /// reset). Once true, it stays true.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert!(!config.read()?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// This hold's fencing token, larger for every grant of this lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert!(config.read()?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

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
        self.held.release()
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut readers = self.lock.readers.lock();
        if let Some(count) = readers.get_mut(&self.thread) {
            *count -= 1;
            if *count == 0 {
                readers.remove(&self.thread);
            }
        }
    }
}

impl<'a> RwLockWriteGuard<'a> {
    /// Whether the write lock may have slipped away; see [`RwLockReadGuard::lost`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert!(!config.write()?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// This hold's fencing token, larger for every grant of this lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert!(config.write()?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
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
        if !self.held.shrink(1)? {
            return Err(Error::NotAcquired {
                name: self.lock.name().into(),
            });
        }
        Ok(self.lock.read_guard(self.held))
    }

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
        self.held.release()
    }
}
