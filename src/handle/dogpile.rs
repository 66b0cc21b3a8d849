//! The dogpile [`Cache`](crate::Cache)'s core, written once as futures for both APIs: a
//! value looked up, and on a miss computed by one caller under the entry's lock while the
//! others wait in `BLPOP`; a stale value served while one caller refreshes it. The handle
//! ([`super::cache`]) adds what differs: computations that are closures or futures, and a
//! refresh on a thread or a task.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use redis::{FromRedisValue, ToRedisArgs};

use super::ended;
use crate::config::settings::{millis, DEFAULT_IO_TIMEOUT};
use crate::driver::acquirer::Acquisition;
use crate::driver::{Inner, Runtime};
use crate::protocol::cache::{
    fresh_request, get_request, last_reply, lookup_request, parse_lookup, revalidate_ms,
    set_request, store_request, stored, Lookup,
};
use crate::protocol::keys::CacheKeys;
use crate::protocol::lease::Wait;
use crate::protocol::request::Request;
use crate::transport::send::send_repeatable;
use crate::transport::Transport;
use crate::{Error, LockBuilder};

/// How long a computing worker's lock lives without a renewal, unless the handle's
/// `lock_expire` says otherwise. The renewal keeps it alive while the worker runs; this only
/// bounds how long a crashed worker blocks the key.
const DEFAULT_LOCK_EXPIRE: Duration = Duration::from_secs(30);

/// A cache handle on runtime `R`: its settings and where its values and locks live.
pub(crate) struct CacheCore<R: Runtime> {
    /// Where the entries' locks are built.
    blocking: Arc<dyn Transport>,
    /// Where the values are read and written.
    transport: Arc<R::Transport>,
    pub(crate) prefix: String,
    pub(crate) lock_expire: Duration,
}

impl<R: Runtime> Clone for CacheCore<R> {
    fn clone(&self) -> Self {
        CacheCore {
            blocking: Arc::clone(&self.blocking),
            transport: Arc::clone(&self.transport),
            prefix: self.prefix.clone(),
            lock_expire: self.lock_expire,
        }
    }
}

/// What [`CacheCore::get_or_revalidate`] found: a value to serve, and for a stale one whose
/// lock this caller took, the refresh it starts in the background.
pub(crate) enum Served<T, R: Runtime, F> {
    Fresh(T),
    Stale(T, Refresh<R, F>),
}

impl<T, R: Runtime, F> Served<T, R, F> {
    /// The value to serve, and the refresh to start in the background, if any.
    pub(crate) fn split(self) -> (T, Option<Refresh<R, F>>) {
        match self {
            Served::Fresh(value) => (value, None),
            Served::Stale(value, refresh) => (value, Some(refresh)),
        }
    }
}

/// A stale entry's refresh: the entry's lock, held, and what recomputes the value.
pub(crate) struct Refresh<R: Runtime, F> {
    keys: CacheKeys,
    fresh_ms: u64,
    keep_ms: u64,
    compute: F,
    held: Acquisition<R>,
}

impl<R: Runtime> CacheCore<R> {
    pub(crate) fn new(blocking: Arc<dyn Transport>) -> Self {
        CacheCore {
            transport: R::over(Arc::clone(&blocking)),
            blocking,
            prefix: String::new(),
            lock_expire: DEFAULT_LOCK_EXPIRE,
        }
    }

    /// The value of `key`, or the value `compute` makes, stored for `ttl` by the one caller
    /// that takes the entry's lock and still finds it missing.
    pub(crate) async fn get_or_set<T, E, Fut>(
        &self,
        key: &str,
        ttl: Duration,
        compute: impl FnOnce() -> Fut,
    ) -> Result<T, E>
    where
        T: ToRedisArgs + FromRedisValue,
        E: From<Error>,
        Fut: Future<Output = Result<T, E>>,
    {
        let ttl_ms = millis("ttl", ttl)?;
        let keys = self.keys(key)?;
        if let Some(value) = self.query(&get_request(&keys)).await? {
            return Ok(value);
        }
        let held = self.lock(&keys, Wait::Forever).await?.ok_or_else(ended)?;
        // Whoever held the lock while we waited has most likely filled the key.
        if let Some(value) = self.query(&get_request(&keys)).await? {
            release(held, &keys).await;
            return Ok(value);
        }
        let value = compute().await?;
        self.query::<()>(&set_request(&keys, &value, ttl_ms)?)
            .await?;
        release(held, &keys).await;
        Ok(value)
    }

    /// Stale-while-revalidate: the value of `key` if there is one (with the refresh to start
    /// when it is stale and this caller took the entry's lock), else the value `compute`
    /// makes, as [`get_or_set`](Self::get_or_set) makes it.
    pub(crate) async fn get_or_revalidate<T, E, F, Fut>(
        &self,
        key: &str,
        fresh_for: Duration,
        keep_for: Duration,
        compute: F,
    ) -> Result<Served<T, R, F>, E>
    where
        T: ToRedisArgs + FromRedisValue,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (fresh_ms, keep_ms) = revalidate_ms(fresh_for, keep_for)?;
        let keys = self.keys(key)?;
        match self.lookup(&keys).await? {
            Lookup::Fresh(value) => return Ok(Served::Fresh(value)),
            Lookup::Stale(value) => {
                let refresh = self.refresher(&keys).await.map(|held| Refresh {
                    keys,
                    fresh_ms,
                    keep_ms,
                    compute,
                    held,
                });
                return Ok(match refresh {
                    Some(refresh) => Served::Stale(value, refresh),
                    None => Served::Fresh(value),
                });
            }
            Lookup::Missing => {}
        }
        let held = self.lock(&keys, Wait::Forever).await?.ok_or_else(ended)?;
        match self.lookup(&keys).await? {
            // Even a stale value is returned rather than computed in the foreground: the next
            // call refreshes it in the background.
            Lookup::Fresh(value) | Lookup::Stale(value) => {
                release(held, &keys).await;
                Ok(Served::Fresh(value))
            }
            Lookup::Missing => {
                let value = compute().await?;
                stored(
                    self.query(&store_request(&keys, &value, fresh_ms, keep_ms)?)
                        .await?,
                )?;
                release(held, &keys).await;
                Ok(Served::Fresh(value))
            }
        }
    }

    /// Runs `refresh` to its end, its lock held: recomputes the value unless another worker
    /// refreshed it meanwhile, stores it, and releases. A failure or a panic is logged: there
    /// is nobody else to tell.
    pub(crate) async fn refresh<T, E, F, Fut>(&self, refresh: Refresh<R, F>)
    where
        T: ToRedisArgs,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let Refresh {
            keys,
            fresh_ms,
            keep_ms,
            compute,
            held,
        } = refresh;
        self.recompute(&keys, fresh_ms, keep_ms, compute).await;
        release(held, &keys).await;
    }

    async fn recompute<T, E, Fut>(
        &self,
        keys: &CacheKeys,
        fresh_ms: u64,
        keep_ms: u64,
        compute: impl FnOnce() -> Fut,
    ) where
        T: ToRedisArgs,
        E: fmt::Display,
        Fut: Future<Output = Result<T, E>>,
    {
        // Our read and our try of the lock were two round trips: another worker may have
        // refreshed the value and released in between.
        match self.query::<bool>(&fresh_request(keys)).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                log::error!("cache {:?}: refresh failed: {e}", keys.name);
                return;
            }
        }
        let name = &keys.name;
        let outcome = match panic::catch_unwind(AssertUnwindSafe(compute)) {
            Ok(future) => Unwinding(Box::pin(future)).await,
            Err(payload) => Err(payload),
        };
        match outcome {
            Ok(Ok(value)) => {
                let stored = match store_request(keys, &value, fresh_ms, keep_ms) {
                    Ok(request) => self.query(&request).await.and_then(stored),
                    Err(e) => Err(e),
                };
                if let Err(e) = stored {
                    log::error!("cache {name:?}: storing the refreshed value failed: {e}");
                }
            }
            Ok(Err(e)) => log::error!("cache {name:?}: refresh failed: {e}"),
            Err(payload) => log::error!(
                "cache {name:?}: refresh panicked: {}",
                panic_message(payload.as_ref())
            ),
        }
    }

    pub(crate) fn keys(&self, key: &str) -> Result<CacheKeys, Error> {
        if key.is_empty() {
            return Err(Error::invalid("the cache key is empty"));
        }
        Ok(CacheKeys::new(&self.prefix, key, self.blocking.hash_tags()))
    }

    /// The entry's lock, taken as `wait` allows, apart from the caller.
    async fn lock(&self, keys: &CacheKeys, wait: Wait) -> Result<Option<Acquisition<R>>, Error> {
        let (settings, transport) =
            LockBuilder::<()>::on(Arc::clone(&self.blocking), keys.lock_name())
                .expire(self.lock_expire)
                .auto_renewal(true)
                .checked()?;
        let cancel = settings.cancel.clone();
        let inner = Arc::new(Inner::<R>::of_lock(settings, transport)?);
        Acquisition::take_apart(inner, wait, &cancel).await
    }

    /// The entry's lock if it is free now, for a refresh; a failure is logged, and leaves
    /// the value stale until a later call tries again.
    async fn refresher(&self, keys: &CacheKeys) -> Option<Acquisition<R>> {
        match self.lock(keys, Wait::Never).await {
            Ok(held) => held,
            Err(e) => {
                log::error!("cache {:?}: could not start a refresh: {e}", keys.name);
                None
            }
        }
    }

    async fn lookup<T: FromRedisValue>(&self, keys: &CacheKeys) -> Result<Lookup<T>, Error> {
        parse_lookup(self.query(&lookup_request(keys)).await?)
    }

    async fn query<T: FromRedisValue>(&self, request: &Request) -> Result<T, Error> {
        let deadline = Instant::now() + DEFAULT_IO_TIMEOUT;
        let answered = send_repeatable(&*self.transport, request, deadline).await?;
        last_reply(answered.replies)
    }
}

/// Releases an entry's lock; a failure is only logged: the value is good, and the lock
/// expires by itself.
async fn release<R: Runtime>(held: Acquisition<R>, keys: &CacheKeys) {
    if let Err(e) = held.release().await {
        log::error!("cache {:?}: releasing the lock failed: {e}", keys.name);
    }
}

/// A computation's future, polled so that a panic in it comes back as an error rather than
/// unwinding through the refresh, which then still releases its lock and logs the panic.
struct Unwinding<Fut>(Pin<Box<Fut>>);

impl<Fut: Future> Future for Unwinding<Fut> {
    type Output = std::thread::Result<Fut::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.get_mut().0.as_mut();
        match panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
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
