//! Dogpile (cache stampede) protection: when a cached value is missing, one caller computes it
//! under a lock while the others wait for it, instead of all of them computing at once.

use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, ToRedisArgs};

use crate::backend::transport_of;
use crate::config::settings::{millis, DEFAULT_IO_TIMEOUT};
use crate::protocol::cache::{
    fresh_request, get_request, last_reply, lookup_request, parse_lookup, revalidate_ms,
    set_request, store_request, stored, Lookup,
};
use crate::protocol::keys::CacheKeys;
use crate::protocol::request::Request;
use crate::transport::{send_repeatable, Transport};
use crate::{Backend, Error, Lock, LockBuilder, LockGuard};

/// How long a computing worker's lock lives without a renewal, unless
/// [`Cache::lock_expire`] says otherwise. The renewal thread keeps it alive while the worker
/// runs; this only bounds how long a crashed worker blocks the key.
const DEFAULT_LOCK_EXPIRE: Duration = Duration::from_secs(30);

/// A cache on Redis that computes a missing value once, however many callers ask for it at the
/// same moment.
///
/// Values are anything the `redis` crate writes as one argument and reads back: strings, byte
/// vectors, numbers. Connections come from the pool the locks use, so calls reuse them
/// instead of opening one each. The handle is cheap to clone and may be shared between
/// threads.
///
/// Keys, for a cache with prefix `P` and an entry `K`:
///
/// | key | holds | written by |
/// |-----|-------|------------|
/// | `P` + `K` | the value, with the entry's TTL (`SET PX`) | both methods |
/// | `P` + `K` + `:fresh` | `1` while the value is fresh | [`get_or_revalidate`](Self::get_or_revalidate) |
/// | `lock:get_or_set:K` | the computing worker's lock id | a [`Lock`] named `get_or_set:K` |
/// | `lock-signal:get_or_set:K` | the lock's wake-up signal | the same lock |
///
/// The lock name is built from the bare key, without the prefix: it is the name
/// python-redis-lock's Django cache uses in `locked_get_or_set`, so Python and Rust workers
/// filling the same key take turns. (The values themselves are not shared: django-redis
/// pickles them.)
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let cache = redis_blpop_lock::Cache::new(&client)?.prefix("cache:");
/// let html: String = cache.get_or_set("front-page", Duration::from_secs(60), || {
///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>("<h1>hello</h1>".to_string())
/// })?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Cache {
    /// Where the values and the entries' locks live.
    transport: Arc<dyn Transport>,
    prefix: String,
    lock_expire: Duration,
}

impl Cache {
    /// A cache on `backend` (a server, a cluster, a Sentinel-managed primary; see
    /// [`Backend`]), with no key prefix and a 30 s lock expiry. No connection is opened yet.
    /// On a cluster the freshness marker is `{P+K}:fresh`, in the value's hash slot.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let cache = redis_blpop_lock::Cache::new(&client)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized)) -> Result<Cache, Error> {
        Ok(Cache {
            transport: transport_of(backend)?,
            prefix: String::new(),
            lock_expire: DEFAULT_LOCK_EXPIRE,
        })
    }

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
        self.prefix = prefix.into();
        self
    }

    /// How long the computing worker's lock lives without a renewal (default 30 s). A
    /// renewal thread extends it while the computation runs, so a slow computation keeps
    /// its lock; a crashed worker's lock expires after this long and the next waiter computes.
    /// Under 1 ms is refused with [`Error::InvalidArgument`] at the first miss.
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
        self.lock_expire = expire;
        self
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
        let ttl_ms = millis("ttl", ttl)?;
        let keys = self.keys(key)?;
        if let Some(value) = self.get(&keys)? {
            return Ok(value);
        }
        let lock = self.lock(&keys)?;
        let guard = lock.lock()?;
        // Whoever held the lock while we waited has most likely filled the key.
        if let Some(value) = self.get(&keys)? {
            release(guard, &keys);
            return Ok(value);
        }
        let value = compute()?;
        self.query::<()>(&set_request(&keys, &value, ttl_ms)?)?;
        release(guard, &keys);
        Ok(value)
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
        let (fresh_ms, keep_ms) = revalidate_ms(fresh_for, keep_for)?;
        let keys = self.keys(key)?;
        match self.lookup(&keys)? {
            Lookup::Fresh(value) => return Ok(value),
            Lookup::Stale(value) => {
                self.refresh_in_background(keys, fresh_ms, keep_ms, compute);
                return Ok(value);
            }
            Lookup::Missing => {}
        }
        let lock = self.lock(&keys)?;
        let guard = lock.lock()?;
        match self.lookup(&keys)? {
            // Even a stale value is returned rather than computed in the foreground: the next
            // call refreshes it in the background.
            Lookup::Fresh(value) | Lookup::Stale(value) => {
                release(guard, &keys);
                Ok(value)
            }
            Lookup::Missing => {
                let value = compute()?;
                self.store_fresh(&keys, &value, fresh_ms, keep_ms)?;
                release(guard, &keys);
                Ok(value)
            }
        }
    }

    /// Where the values and the entries' locks live.
    #[cfg(feature = "tokio")]
    pub(crate) fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    pub(crate) fn keys(&self, key: &str) -> Result<CacheKeys, Error> {
        if key.is_empty() {
            return Err(Error::invalid("the cache key is empty"));
        }
        Ok(CacheKeys::new(
            &self.prefix,
            key,
            self.transport.hash_tags(),
        ))
    }

    fn lock(&self, keys: &CacheKeys) -> Result<Lock, Error> {
        self.lock_builder::<Lock>(keys).build()
    }

    /// The computing worker's lock on entry `keys`, of either API.
    pub(crate) fn lock_builder<K>(&self, keys: &CacheKeys) -> LockBuilder<K> {
        LockBuilder::on(Arc::clone(&self.transport), keys.lock_name())
            .expire(self.lock_expire)
            .auto_renewal(true)
    }

    fn get<T: FromRedisValue>(&self, keys: &CacheKeys) -> Result<Option<T>, Error> {
        self.query(&get_request(keys))
    }

    fn lookup<T: FromRedisValue>(&self, keys: &CacheKeys) -> Result<Lookup<T>, Error> {
        parse_lookup(self.query(&lookup_request(keys))?)
    }

    /// Stores the value and its freshness marker ([`store_request`]).
    fn store_fresh<T: ToRedisArgs>(
        &self,
        keys: &CacheKeys,
        value: &T,
        fresh_ms: u64,
        keep_ms: u64,
    ) -> Result<(), Error> {
        stored(self.query(&store_request(keys, value, fresh_ms, keep_ms)?)?)
    }

    /// Sends `request` and reads its last reply as `T`. Every cache request is a read or a
    /// plain overwrite, so a lost reply is simply asked again.
    fn query<T: FromRedisValue>(&self, request: &Request) -> Result<T, Error> {
        let deadline = Instant::now() + DEFAULT_IO_TIMEOUT;
        last_reply(send_repeatable(&*self.transport, request, deadline)?.replies)
    }

    /// Starts the refresh of a stale value unless someone else is already at it. Never waits
    /// for the lock, and never fails: the caller has a value to return either way.
    fn refresh_in_background<T, E, F>(
        &self,
        keys: CacheKeys,
        fresh_ms: u64,
        keep_ms: u64,
        compute: F,
    ) where
        T: ToRedisArgs,
        E: fmt::Display,
        F: FnOnce() -> Result<T, E> + Send + 'static,
    {
        let taken = self
            .lock(&keys)
            .and_then(|lock| Arc::new(lock).try_lock_arc());
        let Some(guard) = refresher(taken, &keys) else {
            return;
        };
        let cache = self.clone();
        let name = keys.name.clone();
        let spawned = thread::Builder::new()
            // A fixed name: keys may hold bytes a thread name cannot (NUL).
            .name("redis-lock-refresh".to_string())
            .spawn(move || {
                cache.refresh(&keys, fresh_ms, keep_ms, compute);
                released(guard.unlock(), &keys);
            });
        // When the thread could not start, the closure and its guard are dropped: released.
        if let Err(e) = spawned {
            log::error!("cache {name:?}: could not start a refresh thread: {e}");
        }
    }

    /// The background half of a refresh; every failure ends here as a log line.
    fn refresh<T, E, F>(&self, keys: &CacheKeys, fresh_ms: u64, keep_ms: u64, compute: F)
    where
        T: ToRedisArgs,
        E: fmt::Display,
        F: FnOnce() -> Result<T, E>,
    {
        // Our read and our try of the lock were two round trips: another worker may have
        // refreshed the value and released in between.
        match self.query::<bool>(&fresh_request(keys)) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                log::error!("cache {:?}: refresh failed: {e}", keys.name);
                return;
            }
        }
        // The panic must not escape: this thread has nobody to report to but the log.
        match panic::catch_unwind(AssertUnwindSafe(compute)) {
            Ok(Ok(value)) => {
                if let Err(e) = self.store_fresh(keys, &value, fresh_ms, keep_ms) {
                    log::error!(
                        "cache {:?}: storing the refreshed value failed: {e}",
                        keys.name
                    );
                }
            }
            Ok(Err(e)) => log::error!("cache {:?}: refresh failed: {e}", keys.name),
            Err(payload) => log::error!(
                "cache {:?}: refresh panicked: {}",
                keys.name,
                panic_message(payload.as_ref())
            ),
        }
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("prefix", &self.prefix)
            .field("lock_expire", &self.lock_expire)
            .finish_non_exhaustive()
    }
}

/// Releases a computing worker's lock. A failure is logged, not returned: the caller already
/// has a good value, and the lock expires by itself.
fn release(guard: LockGuard<'_>, keys: &CacheKeys) {
    released(guard.unlock(), keys);
}

/// The guard of a background refresh, when this caller's try of the entry's lock took it; a
/// failure is logged: the caller has a value to return either way.
pub(crate) fn refresher<G>(taken: Result<Option<G>, Error>, keys: &CacheKeys) -> Option<G> {
    taken.unwrap_or_else(|e| {
        log::error!("cache {:?}: could not start a refresh: {e}", keys.name);
        None
    })
}

pub(crate) fn released(result: Result<(), Error>, keys: &CacheKeys) {
    if let Err(e) = result {
        log::error!("cache {:?}: releasing the lock failed: {e}", keys.name);
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a non-string payload"
    }
}
