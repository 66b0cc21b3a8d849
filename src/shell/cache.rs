//! The [`Cache`](crate::Cache) shell, for both APIs: the handle and its settings over the
//! driver's [`CacheCore`](crate::driver::cache::CacheCore). Each API adds `get_or_set` and
//! `get_or_revalidate`, whose computations are closures on one and futures on the other.

/// The cache handle and its settings on one API (see [`for_api`]).
macro_rules! cache {
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
    ) => {
        /// A cache on Redis that computes a missing value once, however many callers ask for
        /// it at the same moment (dogpile, or cache stampede, protection): one caller computes
        /// it under a lock while the others wait for it. The blocking and the async caches
        /// share their keys, locks and rules.
        ///
        /// Values are anything the `redis` crate writes as one argument and reads back:
        /// strings, byte vectors, numbers. Connections come from the pool the locks use, so
        /// calls reuse them instead of opening one each. The handle is cheap to clone and may
        /// be shared between threads and tasks.
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
        /// python-redis-lock's Django cache uses in `locked_get_or_set`, so Python and Rust
        /// workers filling the same key take turns. (The values themselves are not shared:
        /// django-redis pickles them.)
        ///
        /// ```no_run
        #[doc = $head]
        /// let client = redis::Client::open("redis://127.0.0.1/")?;
        #[doc = concat!("let cache = ", $path, "Cache::new(&client)?.prefix(\"cache:\");")]
        /// // ... cache.get_or_set("front-page", ttl, compute) ...
        /// # Ok(())
        /// # }
        /// ```
        #[derive(Clone)]
        pub struct Cache {
            core: $crate::driver::cache::CacheCore<$rt>,
        }

        impl Cache {
            /// A cache on `backend` (a server, a cluster, a Sentinel-managed primary; see
            /// [`Backend`](crate::Backend)), with no key prefix and a 30 s lock expiry. No
            /// connection is opened yet. On a cluster the freshness marker is `{P+K}:fresh`,
            /// in the value's hash slot.
            ///
            /// ```no_run
            #[doc = $head]
            /// let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let cache = ", $path, "Cache::new(&client)?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn new(backend: &(impl $crate::Backend + ?Sized)) -> Result<Cache, $crate::Error> {
                let transport = $crate::backend::transport_of(backend)?;
                Ok(Cache {
                    core: $crate::driver::cache::CacheCore::new(transport),
                })
            }

            /// Puts `prefix` in front of every value key (`cache:` makes `report` live at
            /// `cache:report`). Lock names keep the bare key, as python-redis-lock's do.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let cache = ", $path, "Cache::new(&client)?.prefix(\"cache:\");")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
                self.core.prefix = prefix.into();
                self
            }

            /// How long the computing worker's lock lives without a renewal (default 30 s).
            /// The renewal extends it while the computation runs, so a slow computation keeps
            /// its lock; a crashed worker's lock expires after this long and the next waiter
            /// computes. Under 1 ms is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
            /// at the first miss.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            /// use std::time::Duration;
            #[doc = concat!("let cache = ", $path, "Cache::new(&client)?.lock_expire(Duration::from_secs(5));")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn lock_expire(mut self, expire: std::time::Duration) -> Self {
                self.core.lock_expire = expire;
                self
            }
        }

        impl std::fmt::Debug for Cache {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(concat!($prefix, "Cache"))
                    .field("prefix", &self.core.prefix)
                    .field("lock_expire", &self.core.lock_expire)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use cache;
