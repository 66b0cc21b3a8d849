//! The dogpile [`Cache`] handle, on either API: its settings, and what differs between the
//! APIs (a computation is a closure or a future; a refresh runs on a thread or a task) over
//! the core both share ([`super::dogpile`]).

use std::fmt;
use std::future::ready;
#[cfg(feature = "tokio")]
use std::future::Future;
use std::thread;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs};

use super::dogpile::CacheCore;
use super::{Blocking, Runtime};
use crate::backend::transport_of;
use crate::transport::send::now;
use crate::{Backend, Error};

/// A cache on Redis that computes a missing value once, however many callers ask for it at
/// the same moment (dogpile, or cache stampede, protection): one caller computes it under a
/// lock while the others wait for it. The blocking caches ([`crate::Cache`]) and the async
/// ones ([`crate::aio::Cache`]) share their keys, locks and rules.
///
/// Values are anything the `redis` crate writes as one argument and reads back: strings,
/// byte vectors, numbers. Connections come from the pool the locks use, so calls reuse them
/// instead of opening one each. The handle is cheap to clone and may be shared between
/// threads and tasks.
///
/// Keys, for a cache with prefix `P` and an entry `K`:
///
/// | key | holds | written by |
/// |-----|-------|------------|
/// | `P` + `K` | the value, with the entry's TTL (`SET PX`) | both methods |
/// | `P` + `K` + `:fresh` | `1` while the value is fresh | [`get_or_revalidate`](Self::get_or_revalidate) |
/// | `lock:get_or_set:K` | the computing worker's lock id | a [`Lock`](crate::Lock) named `get_or_set:K` |
/// | `lock-signal:get_or_set:K` | the lock's wake-up signal | the same lock |
///
/// The lock name is built from the bare key, without the prefix: it is the name
/// python-redis-lock's Django cache uses in `locked_get_or_set`, so Python and Rust workers
/// filling the same key take turns. (The values themselves are not shared: django-redis
/// pickles them.)
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let cache = redis_blpop_lock::Cache::new(&client)?.prefix("cache:");
/// // ... cache.get_or_set("front-page", ttl, compute) ...
/// # Ok(())
/// # }
/// ```
pub struct Cache<R: Runtime = Blocking> {
    core: CacheCore<R>,
}

impl Cache {
    /// A cache on `backend` (a server, a cluster, a Sentinel-managed primary; see
    /// [`Backend`](crate::Backend)), with no key prefix and a 30 s lock expiry. No connection
    /// is opened yet. On a cluster the freshness marker is `{P+K}:fresh`, in the value's hash
    /// slot.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::Cache::new(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized)) -> Result<Self, Error> {
        Self::on(backend)
    }

    /// The cached value of `key`, or, when there is none, the value `compute` returns, stored
    /// for `ttl` (`SET PX`).
    ///
    /// On a miss the caller takes the lock `get_or_set:<key>` (waiting in `BLPOP` while another
    /// caller computes), looks again, and only computes if the value is still missing. So
    /// however many callers miss at once, `compute` runs once and the others get its value.
    ///
    /// When `compute` fails, its error comes back to this caller, nothing is stored, and the
    /// lock is released so that the next waiter computes; a panic in `compute` releases the
    /// lock as it unwinds. Lock and Redis failures come back as `E` through
    /// `From<redis_blpop_lock::Error>`. A failed release after the value was stored is only logged:
    /// the value is good, and the lock expires by itself.
    ///
    /// A `ttl` under 1 ms, or a value that is not exactly one Redis argument (a `Vec` of
    /// strings, an empty `Option`), fails with [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    ///
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::Cache::new(&client)?;
    /// let total: i64 = cache.get_or_set("sales:total", Duration::from_secs(300), || {
    ///     // ... a slow query that must not run 500 times at once ...
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(42)
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_or_set<T, E, F>(&self, key: &str, ttl: Duration, compute: F) -> Result<T, E>
    where
        T: ToRedisArgs + FromRedisValue,
        E: From<Error>,
        F: FnOnce() -> Result<T, E>,
    {
        now(self.core.get_or_set(key, ttl, || ready(compute())))
    }

    /// Stale-while-revalidate: the cached value of `key`, recomputed in the background once it
    /// is older than `fresh_for`, and kept (served stale) until `keep_for` has passed.
    ///
    /// - Fresh value: returned, nothing else happens.
    /// - Stale value: returned at once to every caller. One of them (the one that wins a
    ///   non-blocking try of the lock `get_or_set:<key>`) starts a background thread that owns
    ///   the lock, runs `compute`, stores the result and releases. That caller does not wait
    ///   for it either. A failure or a panic there is logged with `log::error!`, the stale
    ///   value stays, and the lock is released, so a later call tries again.
    /// - No value: callers wait as in [`get_or_set`](Self::get_or_set): one computes in the
    ///   foreground and the others get its value.
    ///
    /// The value key lives for `keep_for` and the marker `<key>:fresh` for `fresh_for`; both
    /// are written in one `MULTI`, and one `MGET` of the two tells fresh, stale and missing
    /// apart. Use either this or `get_or_set` for a given key, not both: `get_or_set` does not
    /// write the marker, so its values read as stale here.
    ///
    /// A background refresh still running when the process exits is cut off; its lock then
    /// blocks refreshes of that key until it expires ([`lock_expire`](Self::lock_expire)).
    ///
    /// `keep_for` shorter than `fresh_for`, either under 1 ms, or a value that is not exactly
    /// one Redis argument fails with [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    ///
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::Cache::new(&client)?;
    /// // Fresh for a minute; after that served stale for up to an hour while one worker
    /// // refreshes it.
    /// let rates: String = cache.get_or_revalidate(
    ///     "exchange-rates",
    ///     Duration::from_secs(60),
    ///     Duration::from_secs(3600),
    ///     || Ok::<_, Box<dyn std::error::Error + Send + Sync>>("EUR=1.08".to_string()),
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_or_revalidate<T, E, F>(
        &self,
        key: &str,
        fresh_for: Duration,
        keep_for: Duration,
        compute: F,
    ) -> Result<T, E>
    where
        T: ToRedisArgs + FromRedisValue,
        E: From<Error> + fmt::Display,
        F: FnOnce() -> Result<T, E> + Send + 'static,
    {
        let compute = move || ready(compute());
        let served = now(self
            .core
            .get_or_revalidate(key, fresh_for, keep_for, compute))?;
        let (value, refresh) = served.split();
        if let Some(refresh) = refresh {
            let core = self.core.clone();
            // The refresh's future is made on its thread, so its value need not be `Send`.
            // A fixed name: keys may hold bytes a thread name cannot (NUL).
            let spawned = thread::Builder::new()
                .name("redis-lock-refresh".to_string())
                .spawn(move || now(core.refresh(refresh)));
            // When the thread could not start, the refresh and its lock are dropped: released.
            if let Err(e) = spawned {
                log::error!("cache {key:?}: could not start a refresh thread: {e}");
            }
        }
        Ok(value)
    }
}

/// The async API's cache ([`crate::aio::Cache`]): computations are futures, and a refresh is
/// a task.
#[cfg(feature = "tokio")]
impl Cache<super::Tokio> {
    /// An async cache on `backend`; see [`Cache::new`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized)) -> Result<Self, Error> {
        Self::on(backend)
    }

    /// The cached value of `key`, or, when there is none, the value `compute` returns, stored
    /// for `ttl`: however many tasks and processes miss at once, one computes and the others
    /// get its value. The rules are [`Cache::get_or_set`]'s. Dropped while it waits or
    /// computes, it drops `compute`'s future, stores nothing and releases the lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    ///
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?;
    /// let total: i64 = cache
    ///     .get_or_set("sales:total", Duration::from_secs(300), || async {
    ///         // ... a slow query that must not run 500 times at once ...
    ///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(42)
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_or_set<T, E, F, Fut>(
        &self,
        key: &str,
        ttl: Duration,
        compute: F,
    ) -> Result<T, E>
    where
        T: ToRedisArgs + FromRedisValue,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.core.get_or_set(key, ttl, compute).await
    }

    /// Stale-while-revalidate: the cached value of `key`, recomputed on a spawned task once it
    /// is older than `fresh_for`, and served stale until `keep_for` has passed. The rules are
    /// [`Cache::get_or_revalidate`]'s; the background refresh is a tokio task that owns the
    /// lock, and a failure or a panic there is logged.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    ///
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?;
    /// let rates: String = cache
    ///     .get_or_revalidate(
    ///         "exchange-rates",
    ///         Duration::from_secs(60),
    ///         Duration::from_secs(3600),
    ///         || async { Ok::<_, Box<dyn std::error::Error + Send + Sync>>("EUR=1.08".to_string()) },
    ///     )
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_or_revalidate<T, E, F, Fut>(
        &self,
        key: &str,
        fresh_for: Duration,
        keep_for: Duration,
        compute: F,
    ) -> Result<T, E>
    where
        T: ToRedisArgs + FromRedisValue + Send + 'static,
        E: From<Error> + fmt::Display + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let served = self
            .core
            .get_or_revalidate(key, fresh_for, keep_for, compute);
        let (value, refresh) = served.await?.split();
        if let Some(refresh) = refresh {
            let core = self.core.clone();
            // The refresh and its lock go with the task: released when it ends, however it
            // ends.
            tokio::spawn(async move { core.refresh(refresh).await });
        }
        Ok(value)
    }
}

impl<R: Runtime> Cache<R> {
    /// Puts `prefix` in front of every value key (`cache:` makes `report` live at
    /// `cache:report`). Lock names keep the bare key, as python-redis-lock's do.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::Cache::new(&client)?.prefix("cache:");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.core.prefix = prefix.into();
        self
    }

    /// How long the computing worker's lock lives without a renewal (default 30 s). The
    /// renewal extends it while the computation runs, so a slow computation keeps its lock; a
    /// crashed worker's lock expires after this long and the next waiter computes. Under 1 ms
    /// is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument) at the first
    /// miss.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let cache = redis_blpop_lock::Cache::new(&client)?.lock_expire(Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_expire(mut self, expire: Duration) -> Self {
        self.core.lock_expire = expire;
        self
    }

    fn on(backend: &(impl Backend + ?Sized)) -> Result<Self, Error> {
        let transport = transport_of(backend)?;
        Ok(Cache {
            core: CacheCore::new(transport),
        })
    }
}

impl<R: Runtime> Clone for Cache<R> {
    fn clone(&self) -> Self {
        Cache {
            core: self.core.clone(),
        }
    }
}

impl<R: Runtime> fmt::Debug for Cache<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Cache", R::API))
            .field("prefix", &self.core.prefix)
            .field("lock_expire", &self.core.lock_expire)
            .finish_non_exhaustive()
    }
}
