//! Building a lock handle: its settings and the checks on them.

use std::time::Duration;

use crate::lock::{Lock, Settings};
use crate::pool::Pool;
use crate::{id, Error};

/// How long the wake-up signal waits for a waiter, as in python-redis-lock.
pub(crate) const DEFAULT_SIGNAL_EXPIRE: Duration = Duration::from_millis(1000);
/// The largest expiry or signal expiry accepted, about 34 years: far beyond any real use, and
/// far below what would overflow Redis's millisecond clock arithmetic.
const MAX_MILLIS: u64 = 1 << 40;

/// Builds a [`Lock`] with an expiry, auto-renewal, a chosen owner id, and so on.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_lock::Lock::builder(&client, "invoices")
///     .expire(Duration::from_secs(30))
///     .id("worker-7")
///     .build()?;
/// assert_eq!(lock.id(), "worker-7");
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct LockBuilder<'c> {
    client: &'c redis::Client,
    name: String,
    expire: Option<Duration>,
    auto_renewal: bool,
    id: Option<String>,
    signal_expire: Duration,
    fencing: bool,
}

impl<'c> LockBuilder<'c> {
    pub(crate) fn new(client: &'c redis::Client, name: String) -> Self {
        LockBuilder {
            client,
            name,
            expire: None,
            auto_renewal: false,
            id: None,
            signal_expire: DEFAULT_SIGNAL_EXPIRE,
            fencing: false,
        }
    }

    /// Makes the lock expire this long after it is taken (or last extended), so a crashed
    /// holder cannot keep it forever. Rounded up to whole milliseconds; at least 1 ms.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn expire(mut self, expire: Duration) -> Self {
        self.expire = Some(expire);
        self
    }

    /// Keeps an expiring lock alive while it is held: a thread extends it every two thirds of
    /// the expiry until it is released or the handle is dropped. Needs [`expire`](Self::expire).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .auto_renewal(true) // extended every 20 s while held
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn auto_renewal(mut self, on: bool) -> Self {
        self.auto_renewal = on;
        self
    }

    /// Uses this owner id instead of a random one. Handles with the same id are the same
    /// owner: either may extend or release the lock. Compared byte for byte; not empty.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "job").id("host-a:worker-3").build()?;
    /// assert_eq!(lock.id(), "host-a:worker-3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long a release's wake-up signal waits for a waiter that is about to block
    /// (default 1000 ms, as in python-redis-lock).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "job")
    ///     .signal_expire(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn signal_expire(mut self, signal_expire: Duration) -> Self {
        self.signal_expire = signal_expire;
        self
    }

    /// Takes a fencing token with every acquisition: a number from `lock-fence:<name>`,
    /// greater than any token handed out before for this name. See
    /// [`Lock::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let guard = lock.lock()?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Checks the settings and makes the handle. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .build()?;
    /// assert!(redis_lock::Lock::builder(&client, "").build().is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Lock, Error> {
        if self.name.is_empty() {
            return Err(Error::invalid("the lock name is empty"));
        }
        let expire_ms = self.expire.map(|d| millis("expire", d)).transpose()?;
        let signal_expire_ms = millis("signal_expire", self.signal_expire)?;
        if self.auto_renewal && expire_ms.is_none() {
            return Err(Error::invalid("auto_renewal needs an expire"));
        }
        let id = match self.id {
            Some(id) if id.is_empty() => return Err(Error::invalid("the owner id is empty")),
            Some(id) => id,
            None => id::random_id()?,
        };
        let settings = Settings {
            name: self.name,
            id,
            expire_ms,
            signal_expire_ms,
            auto_renewal: self.auto_renewal,
            fencing: self.fencing,
        };
        Ok(Lock::from_settings(settings, Pool::shared(self.client)?))
    }
}

/// Whole milliseconds for Redis, rounded up so a sub-millisecond duration is not zero.
pub(crate) fn millis(what: &str, d: Duration) -> Result<u64, Error> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms == 0 {
        return Err(Error::invalid(format!("{what} must be at least 1 ms")));
    }
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_MILLIS => Ok(ms),
        _ => Err(Error::invalid(format!(
            "{what} must be at most {MAX_MILLIS} ms"
        ))),
    }
}
