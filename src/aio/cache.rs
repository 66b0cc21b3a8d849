//! The dogpile cache for async callers: the blocking [`Cache`](crate::Cache)'s keys, requests
//! and rules, with an async lock and computations that are futures.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, ToRedisArgs, Value};

use super::{Lock, LockGuard};
use crate::cache::{refresher, released};
use crate::config::settings::{millis, DEFAULT_IO_TIMEOUT};
use crate::protocol::cache::{self, Lookup};
use crate::protocol::keys::CacheKeys;
use crate::protocol::request::Request;
use crate::transport::aio::AsyncTransport;
use crate::transport::send::send_repeatable;
use crate::{Backend, Error};

/// The async twin of [`crate::Cache`]: the same keys, so async and blocking callers (and
/// python-redis-lock's Django cache, for the locks) share entries.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let cache = redis_blpop_lock::aio::Cache::new(&client)?.prefix("cache:");
/// let html: String = cache
///     .get_or_set("front-page", Duration::from_secs(60), || async {
///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>("<h1>hello</h1>".to_string())
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Cache {
    /// The keys and settings, as the blocking cache has them.
    base: crate::Cache,
    transport: Arc<dyn AsyncTransport>,
}

impl Cache {
    /// A cache on `backend`, with no key prefix and a 30 s lock expiry; see
    /// [`crate::Cache::new`]. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized)) -> Result<Cache, Error> {
        let base = crate::Cache::new(backend)?;
        let transport = Arc::clone(base.transport()).to_async();
        Ok(Cache { base, transport })
    }

    /// Puts `prefix` in front of every value key; see [`crate::Cache::prefix`].
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?.prefix("cache:");
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.base = self.base.prefix(prefix);
        self
    }

    /// How long the computing worker's lock lives without a renewal (default 30 s); see
    /// [`crate::Cache::lock_expire`].
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let cache = redis_blpop_lock::aio::Cache::new(&client)?.lock_expire(Duration::from_secs(5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_expire(mut self, expire: Duration) -> Self {
        self.base = self.base.lock_expire(expire);
        self
    }

    /// The cached value of `key`, or, when there is none, the value `compute` returns, stored
    /// for `ttl`: however many tasks and processes miss at once, one computes and the others
    /// get its value. The rules are [`crate::Cache::get_or_set`]'s. Dropped while it waits or
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
        let ttl_ms = millis("ttl", ttl)?;
        let keys = self.base.keys(key)?;
        if let Some(value) = self.query(&cache::get_request(&keys)).await? {
            return Ok(value);
        }
        let guard = self.lock(&keys)?.lock().await?;
        // Whoever held the lock while we waited has most likely filled the key.
        if let Some(value) = self.query(&cache::get_request(&keys)).await? {
            release(guard, &keys).await;
            return Ok(value);
        }
        let value = compute().await?;
        self.query::<()>(&cache::set_request(&keys, &value, ttl_ms)?)
            .await?;
        release(guard, &keys).await;
        Ok(value)
    }

    /// Stale-while-revalidate: the cached value of `key`, recomputed on a spawned task once it
    /// is older than `fresh_for`, and served stale until `keep_for` has passed. The rules are
    /// [`crate::Cache::get_or_revalidate`]'s; the background refresh is a tokio task that owns
    /// the lock, and a failure or a panic there is logged.
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
        let (fresh_ms, keep_ms) = cache::revalidate_ms(fresh_for, keep_for)?;
        let keys = self.base.keys(key)?;
        match self.lookup(&keys).await? {
            Lookup::Fresh(value) => return Ok(value),
            Lookup::Stale(value) => {
                self.refresh_in_background(keys, fresh_ms, keep_ms, compute)
                    .await;
                return Ok(value);
            }
            Lookup::Missing => {}
        }
        let guard = self.lock(&keys)?.lock().await?;
        match self.lookup(&keys).await? {
            // Even a stale value is returned rather than computed in the foreground: the next
            // call refreshes it in the background.
            Lookup::Fresh(value) | Lookup::Stale(value) => {
                release(guard, &keys).await;
                Ok(value)
            }
            Lookup::Missing => {
                let value = compute().await?;
                let request = cache::store_request(&keys, &value, fresh_ms, keep_ms)?;
                cache::stored(self.query(&request).await?)?;
                release(guard, &keys).await;
                Ok(value)
            }
        }
    }

    fn lock(&self, keys: &CacheKeys) -> Result<Lock, Error> {
        self.base.lock_builder::<Lock>(keys).build()
    }

    async fn lookup<T: FromRedisValue>(&self, keys: &CacheKeys) -> Result<Lookup<T>, Error> {
        cache::parse_lookup(self.query(&cache::lookup_request(keys)).await?)
    }

    /// Sends `request` and reads its last reply as `T`; see [`crate::Cache`]'s `query`.
    async fn query<T: FromRedisValue>(&self, request: &Request) -> Result<T, Error> {
        let deadline = Instant::now() + DEFAULT_IO_TIMEOUT;
        let answered = send_repeatable(&*self.transport, request, deadline).await?;
        cache::last_reply(answered.replies)
    }

    /// Starts the refresh of a stale value on a task, unless someone else is already at it.
    /// Never waits for the lock, and never fails: the caller has a value to return either way.
    async fn refresh_in_background<T, E, F, Fut>(
        &self,
        keys: CacheKeys,
        fresh_ms: u64,
        keep_ms: u64,
        compute: F,
    ) where
        T: ToRedisArgs + Send + 'static,
        E: fmt::Display + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let taken = match self.lock(&keys) {
            Ok(lock) => lock.try_lock().await,
            Err(e) => Err(e),
        };
        let Some(guard) = refresher(taken, &keys) else {
            return;
        };
        let cache = self.clone();
        // The guard goes with the task: released when the refresh ends, however it ends.
        tokio::spawn(async move {
            cache.refresh(&keys, fresh_ms, keep_ms, compute).await;
            release(guard, &keys).await;
        });
    }

    /// The background half of a refresh; every failure ends here as a log line.
    async fn refresh<T, E, F, Fut>(&self, keys: &CacheKeys, fresh_ms: u64, keep_ms: u64, compute: F)
    where
        T: ToRedisArgs + Send + 'static,
        E: fmt::Display + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        // Our read and our try of the lock were two round trips: another worker may have
        // refreshed the value and released in between.
        match self.query::<bool>(&cache::fresh_request(keys)).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                log::error!("cache {:?}: refresh failed: {e}", keys.name);
                return;
            }
        }
        // On a task of its own, so that a panic is reported here, not lost with the task.
        match tokio::spawn(compute()).await {
            Ok(Ok(value)) => {
                let stored = match cache::store_request(keys, &value, fresh_ms, keep_ms) {
                    Ok(request) => self
                        .query::<Vec<Value>>(&request)
                        .await
                        .and_then(cache::stored),
                    Err(e) => Err(e),
                };
                if let Err(e) = stored {
                    log::error!(
                        "cache {:?}: storing the refreshed value failed: {e}",
                        keys.name
                    );
                }
            }
            Ok(Err(e)) => log::error!("cache {:?}: refresh failed: {e}", keys.name),
            Err(e) => log::error!("cache {:?}: refresh panicked: {e}", keys.name),
        }
    }
}

/// Releases a computing worker's lock; a failure is logged, not returned: the caller already
/// has a good value, and the lock expires by itself.
async fn release(guard: LockGuard, keys: &CacheKeys) {
    released(guard.unlock().await, keys);
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Cache")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}
