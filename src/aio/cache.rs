//! The async [`Cache`]: the cache shell ([`crate::shell::cache`]) on tokio, with
//! computations that are futures and a refresh on a task of its own.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs};

use crate::Error;

crate::shell::for_api!(cache, aio);

impl Cache {
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
        self.core.get_or_set(key, ttl, compute).await
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
