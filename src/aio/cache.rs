//! The dogpile cache for async callers.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs};

use crate::{Backend, Error};

/// The async twin of [`crate::Cache`].
#[derive(Clone)]
pub struct Cache {}

impl Cache {
    /// A cache on `backend`.
    pub fn new(backend: &(impl Backend + ?Sized)) -> Result<Cache, Error> {
        let _ = backend;
        todo!()
    }

    /// Key prefix.
    pub fn prefix(self, prefix: impl Into<String>) -> Self {
        let _ = prefix.into();
        todo!()
    }

    /// Lock expiry.
    pub fn lock_expire(self, expire: Duration) -> Self {
        todo!("{expire:?}")
    }

    /// Cached value or computed once.
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
        let _ = (key, ttl, compute);
        todo!()
    }

    /// Stale-while-revalidate.
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
        let _ = (key, fresh_for, keep_for, compute);
        todo!()
    }
}
