//! The blocking [`Cache`]: the cache shell ([`crate::shell::cache`]) on the blocking runtime,
//! with computations that are closures and a refresh on a thread of its own.

use std::fmt;
use std::future::ready;
use std::thread;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs};

use crate::transport::send::now;
use crate::Error;

crate::shell::for_api!(cache, blocking);

impl Cache {
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
