//! The [`Lock`](crate::Lock) shell, for both APIs: python-redis-lock's lock (or, built fair, a
//! lock on the queue engine) over the driver's one acquire path,
//! [`Inner::take`](crate::driver::Inner::take).
//!
//! Each API gives what the shell calls: `guard(wait)` (the acquire path, into that API's
//! guard), its guard's `keep()` (the lock then held by the handle without a guard),
//! `release_held()` and `from_inner(..)` (the handle around a built `Inner`).

/// How long the lock of `with_lock` lives without a renewal: a crashed process frees it
/// after this long, while the renewal keeps it for a live one.
pub(crate) const WITH_LOCK_EXPIRE: std::time::Duration = std::time::Duration::from_secs(30);

/// The lock handle's methods on one API (see [`for_api`]), after `extra` fields of its own.
macro_rules! lock {
    (@guards
        asyncness = $asyncness:tt, run = $run:ident, head = $head:literal, aw = $aw:literal,
        [$($g:ty => $take:literal, $make:literal);*]
    ) => {
        $(
            $crate::shell::lock::guard_methods!(
                $g, $take, $make,
                asyncness = $asyncness, run = $run, head = $head, aw = $aw,
            );
        )*
    };
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
        guard = [$($guard:tt)*],
        guards = [$($g:ty => $take:literal, $make:literal);* $(;)?],
    ) => {
        mod lock_api {
            use super::*;
            use std::time::{Duration, Instant};

            use $crate::{CancelToken, Error, Holder};
            use $crate::protocol::lease::Wait;
            use $crate::shell::$run;

            impl Lock {
                /// The acquire path, the lock then held by the handle without a guard.
                async fn held(&self, wait: Wait) -> Result<bool, Error> {
                    Ok(self.guard(wait).await?.map(LockGuard::keep).is_some())
                }

                /// The lock's name (the key is `lock:<name>`).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                /// assert_eq!(lock.name(), "jobs");
                /// # Ok(())
                /// # }
                /// ```
                pub fn name(&self) -> &str {
                    &self.inner.settings.name
                }

                /// This handle's owner id: what Redis holds while this handle owns the lock.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"jobs\").id(\"worker-7\").build()?;")]
                /// assert_eq!(lock.id(), "worker-7");
                /// # Ok(())
                /// # }
                /// ```
                pub fn id(&self) -> &str {
                    &self.inner.settings.id
                }

                /// Waits until the lock is ours. Waiting happens in `BLPOP`, woken by a release
                /// and ended by the client at the holder's expiry, so a crashed holder's lock is
                /// taken within milliseconds of its expiry. Each round trip is bounded by the
                /// handle's I/O timeout. An async acquire dropped before it returns leaves the
                /// lock as it found it.
                ///
                /// Fails with [`Error::AlreadyAcquired`] if this owner id already holds the lock,
                /// and with [`Error::Cancelled`] when the handle's
                /// [`CancelToken`](crate::CancelToken) is cancelled.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("lock.acquire()", $aw, "?;")]
                #[doc = concat!("lock.release()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn acquire(&self) -> Result<(), Error> {
                    $run!(self.held(Wait::Forever)).map(drop)
                }

                /// Takes the lock if it is free, never waiting for it. `Ok(false)` when someone
                /// else holds it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("if !lock.try_acquire()", $aw, "? {")]
                #[doc = concat!("    println!(\"busy, held by {:?}\", lock.holder()", $aw, "?);")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                #[must_use = "the lock may not have been taken"]
                pub $($asyncness)? fn try_acquire(&self) -> Result<bool, Error> {
                    $run!(self.held(Wait::Never))
                }

                /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in
                /// time. A zero timeout is a single try; any size is allowed, including longer
                /// than the expiry. The call returns by `timeout` plus at most the round trip
                /// under way (see [`LockBuilder::io_timeout`](crate::LockBuilder::io_timeout)).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("if lock.acquire_timeout(std::time::Duration::from_secs(5))", $aw, "? {")]
                #[doc = concat!("    lock.release()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                #[must_use = "the lock may not have been taken"]
                pub $($asyncness)? fn acquire_timeout(
                    &self,
                    timeout: Duration,
                ) -> Result<bool, Error> {
                    $run!(self.held(Wait::timeout(Instant::now(), timeout)))
                }

                /// Releases the lock and wakes one waiter. An async release runs to its end even
                /// if its future is dropped.
                ///
                /// Fails with [`Error::NotAcquired`], changing nothing, when the lock is not held
                /// under this handle's id. Never says so about a lock its own unlock released:
                /// when a reply was lost and the retry finds the lock gone, that is success. When
                /// Redis could not be reached in time it is [`Error::OutcomeUnknown`], and the next
                /// acquire asks Redis.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("let released = lock.release()", $aw, ";")]
                /// assert!(matches!(released, Err(redis_blpop_lock::Error::NotAcquired { .. })));
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn release(&self) -> Result<(), Error> {
                    $run!(self.release_held())
                }

                /// Gives the lock a new expiry: `expire`, or the handle's configured one when
                /// `None`.
                ///
                /// Fails with [`Error::NotAcquired`] when the lock is not held under this id,
                /// [`Error::NotExpirable`] when it was taken without an expiry, and
                /// [`Error::InvalidArgument`] when neither `expire` nor a configured expiry is
                /// there.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"jobs\")")]
                ///     .expire(Duration::from_secs(10))
                ///     .build()?;
                #[doc = concat!("lock.acquire()", $aw, "?;")]
                #[doc = concat!("lock.extend(Some(Duration::from_secs(60)))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
                    $run!(self.inner.extend(expire))
                }

                /// Frees the lock whoever holds it and wakes one waiter: an operator's tool for a
                /// lock left by a holder that will never release it. Returns whether the lock was
                /// held.
                ///
                /// It reads the owner, then deletes the lock only if that owner still holds it, so
                /// it can never delete a lock taken after it looked. A key at `lock:<name>` that
                /// is not a string is not a lock: it is left alone and reported as
                /// [`Error::Corrupt`].
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"stuck-job\")?;")]
                #[doc = concat!("if lock.reset()", $aw, "? {")]
                ///     println!("freed a stuck lock");
                /// }
                /// # Ok(())
                /// # }
                /// ```
                #[must_use = "says whether there was a lock to reset"]
                pub $($asyncness)? fn reset(&self) -> Result<bool, Error> {
                    $run!(self.inner.reset())
                }

                /// Who holds the lock and for how much longer, read in one round trip; `None`
                /// when it is free.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("match lock.holder()", $aw, "? {")]
                ///     Some(holder) => println!("held by {} for {:?}", holder.id, holder.ttl),
                ///     None => println!("free"),
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn holder(&self) -> Result<Option<Holder>, Error> {
                    $run!(self.inner.holder())
                }

                /// Whether anyone holds the lock (one round trip).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("println!(\"held: {}\", lock.locked()", $aw, "?);")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn locked(&self) -> Result<bool, Error> {
                    Ok($run!(self.inner.holder())?.is_some())
                }

                /// The id of the lock's current owner, or `None` when it is free (one round
                /// trip); see [`holder`](Self::holder) for the remaining expiry too.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"jobs\")?;")]
                #[doc = concat!("lock.acquire()", $aw, "?;")]
                #[doc = concat!("assert_eq!(lock.owner_id()", $aw, "?.as_deref(), Some(lock.id()));")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn owner_id(&self) -> Result<Option<String>, Error> {
                    Ok($run!(self.inner.holder())?.map(|h| h.id))
                }

                /// Whether the lock this handle acquired has been lost since: its expiry passed
                /// without a renewal getting through, or a renewal or [`extend`](Self::extend)
                /// found another id in the key. No round trip: it is what this handle knows. Stays
                /// true until the lock is released or acquired again; false when the handle holds
                /// nothing.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"jobs\")")]
                ///     .expire(Duration::from_secs(10))
                ///     .auto_renewal(true)
                ///     .build()?;
                #[doc = concat!("let guard = lock.lock()", $aw, "?;")]
                /// if guard.lost() {
                ///     // stop writing: someone else may hold the lock now
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub fn lost(&self) -> bool {
                    self.inner.lost()
                }

                /// The fencing token of the current acquisition, when the lock was built with
                /// [`fencing(true)`](crate::LockBuilder::fencing) and is held.
                ///
                /// Tokens grow with every acquisition of the name, so a storage system that
                /// remembers the highest token it has seen can refuse a write from a holder that
                /// lost the lock (paused past its expiry) after someone else took it:
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"ledger\")")]
                ///     .expire(std::time::Duration::from_secs(10))
                ///     .fencing(true)
                ///     .build()?;
                #[doc = concat!("let guard = lock.lock()", $aw, "?;")]
                /// if let Some(token) = guard.fencing_token() {
                ///     // The store keeps the highest token it has accepted and rejects lower
                ///     // ones, e.g. in SQL:
                ///     // UPDATE ledger SET ..., fence = $token WHERE id = $id AND fence < $token
                ///     println!("writing with token {token}");
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub fn fencing_token(&self) -> Option<u64> {
                    self.inner.fencing_token()
                }

                /// Waits until the lock is ours and returns a guard that releases it when dropped.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"tickets\")?;")]
                #[doc = concat!("let guard = lock.lock()", $aw, "?;")]
                /// // ... sell the ticket ...
                #[doc = concat!("guard.unlock()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn lock(&self) -> Result<$($guard)*, Error> {
                    match $run!(self.guard(Wait::Forever))? {
                        Some(guard) => Ok(guard),
                        // A wait without end only ends with the lock or an error.
                        None => Err(self.inner.error(|name| Error::Cancelled { name })),
                    }
                }

                /// The guard if the lock is free now, `None` if someone else holds it; never
                /// waits.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"tickets\")?;")]
                #[doc = concat!("match lock.try_lock()", $aw, "? {")]
                #[doc = concat!("    Some(guard) => guard.unlock()", $aw, "?,")]
                ///     None => println!("busy"),
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_lock(&self) -> Result<Option<$($guard)*>, Error> {
                    $run!(self.guard(Wait::Never))
                }

                /// The guard if the lock comes free within `timeout`, else `None`.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"tickets\")?;")]
                #[doc = concat!("if let Some(guard) = lock.try_lock_for(std::time::Duration::from_secs(2))", $aw, "? {")]
                #[doc = concat!("    guard.unlock()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_lock_for(
                    &self,
                    timeout: Duration,
                ) -> Result<Option<$($guard)*>, Error> {
                    $run!(self.guard(Wait::timeout(Instant::now(), timeout)))
                }

                /// The guard if the lock comes free by `deadline`, else `None`.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::{Duration, Instant};
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"tickets\")?;")]
                /// let deadline = Instant::now() + Duration::from_secs(2);
                #[doc = concat!("if let Some(guard) = lock.try_lock_until(deadline)", $aw, "? {")]
                #[doc = concat!("    guard.unlock()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_lock_until(
                    &self,
                    deadline: Instant,
                ) -> Result<Option<$($guard)*>, Error> {
                    $run!(self.guard(Wait::Until(deadline)))
                }
            }

            $crate::shell::lock::lock!(@guards
                asyncness = [$($asyncness)?], run = $run, head = $head, aw = $aw,
                [$($g => $take, $make);*]
            );

            impl std::fmt::Debug for Lock {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    // The id stays out: anyone who knows it can release the lock.
                    f.debug_struct(concat!($prefix, "Lock"))
                        .field("name", &self.inner.settings.name)
                        .field("expire_ms", &self.inner.settings.expire_ms)
                        .field("auto_renewal", &self.inner.settings.auto_renewal)
                        .field("fencing", &self.inner.settings.fencing)
                        .finish_non_exhaustive()
                }
            }
        }
    };
}

/// What makes a lock handle on one API (see [`for_api`]): `Lock::new` and `Lock::builder`,
/// and the lock's own builder methods. Expanded beside [`LockBuilder`](crate::LockBuilder)
/// for the blocking API, and in `aio/lock.rs` for the async one: the builder names the
/// blocking `Lock` (its default kind), so the blocking lock does not name the builder.
macro_rules! lock_builder {
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
    ) => {
        mod lock_builder_api {
            use super::*;
            use std::sync::Arc;

            use $crate::{Backend, CancelToken, Error, LockBuilder};
            use $crate::driver::Inner;

            impl Lock {
                /// A handle on the lock `name` on `backend` (one server, a cluster, a
                /// Sentinel-managed primary: see [`Backend`]), with no expiry and a random owner
                /// id. The blocking and the async handles of one name are the same lock, and wake
                /// each other.
                ///
                /// ```no_run
                #[doc = $head]
                /// let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::new(&client, \"cron:cleanup\")?;")]
                #[doc = concat!("if lock.try_acquire()", $aw, "? {")]
                ///     // ... only one process in the fleet gets here at a time ...
                #[doc = concat!("    lock.release()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub fn new(
                    backend: &(impl Backend + ?Sized),
                    name: impl Into<String>,
                ) -> Result<Lock, Error> {
                    Lock::builder(backend, name).build()
                }

                /// A builder for a handle on the lock `name` on `backend`; see
                /// [`LockBuilder`](crate::LockBuilder).
                ///
                /// ```no_run
                #[doc = $head]
                /// let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"cron:cleanup\")")]
                ///     .expire(std::time::Duration::from_secs(10))
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn builder<B: Backend + ?Sized>(
                    backend: &B,
                    name: impl Into<String>,
                ) -> LockBuilder<Lock> {
                    LockBuilder::new(backend, name.into())
                }
            }

            impl LockBuilder<Lock> {
                /// A fair lock: waiters take it in the order they asked, across threads, tasks
                /// and processes, and a newcomer never takes it ahead of them. It is the queue
                /// engine's (see the crate docs' "Fair lock" section), on keys `fair-lock:{name}:*`
                /// (`fair-lock:=name:*` for a name with a hash tag of its own), so it is not
                /// python-redis-lock's and does not exclude a plain lock of the same name: every
                /// handle of one name must agree. Its expiry defaults to 30 s, renewed, unless
                /// [`expire`](Self::expire) says otherwise.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"tickets\").fair(true).build()?;")]
                #[doc = concat!("let guard = lock.lock()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn fair(self, on: bool) -> Self {
                    self.fair_or_not(on)
                }

                /// Lets `token` cancel this handle's waits from anywhere; see
                /// [`CancelToken`](crate::CancelToken).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// let token = redis_blpop_lock::CancelToken::new();
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"job\")")]
                ///     .cancel_token(token.clone())
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn cancel_token(self, token: CancelToken) -> Self {
                    self.cancelled_by(token)
                }

                /// Checks the settings and makes the handle. No connection is opened yet.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let lock = ", $path, "Lock::builder(&client, \"job\")")]
                ///     .expire(Duration::from_secs(30))
                ///     .build()?;
                #[doc = concat!("assert!(", $path, "Lock::builder(&client, \"\").build().is_err());")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn build(self) -> Result<Lock, Error> {
                    let (settings, transport) = self.checked()?;
                    let inner = Inner::<$rt>::of_lock(settings, transport)?;
                    Ok(Lock::from_inner(Arc::new(inner)))
                }
            }
        }
    };
}

/// What every lock guard says and does, written once, for a guard whose `inner()` is its
/// handle's and whose `epoch` is its acquisition's.
macro_rules! guard_methods {
    (
        $guard:ty, $take:literal, $make:literal,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        aw = $aw:literal,
    ) => {
        impl $guard {
            /// Whether this acquisition is over or lost; see [`Lock::lost`]. No round trip.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let lock = ", $make, ";")]
            #[doc = concat!("let guard = lock.", $take, "()", $aw, "?;")]
            /// assert!(!guard.lost());
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost(&self) -> bool {
                self.inner().lost_since(self.epoch)
            }

            /// A token cancelled when this acquisition is lost: for work to check
            /// ([`CancelToken::is_cancelled`]), or in async code to `select!` on
            /// (`CancelToken::cancelled`, feature `tokio`). Taking it costs no round trip.
            ///
            /// It is cancelled when the loss becomes knowable, within one renewal interval
            /// (two thirds of the expiry) at most:
            /// - a renewal, or an [`extend`](Self::extend), finds another owner in the key, or
            ///   none (someone reset the lock, or took it after it expired): at that renewal;
            /// - the lease runs out: renewals failed until then (the server is away), the lock
            ///   does not renew, or the hold reached
            ///   [`max_hold`](crate::LockBuilder::max_hold): at the expiry, by the process's
            ///   timer thread.
            ///
            /// It is never cancelled while the acquisition holds, nor by its release (an
            /// unlock, the guard's drop, the handle's release): a released acquisition's token
            /// stays as it was. Once cancelled it stays so, and [`lost`](Self::lost) is true;
            /// a token taken after the loss is cancelled already. Each acquisition has its own:
            /// the handle's next one comes with a fresh token.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let lock = ", $make, ";")]
            #[doc = concat!("let guard = lock.", $take, "()", $aw, "?;")]
            /// let lost = guard.lost_token();
            /// for batch in 0..100 {
            ///     if lost.is_cancelled() {
            ///         break; // someone else may hold the lock now: stop writing
            ///     }
            ///     println!("batch {batch}");
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost_token(&self) -> CancelToken {
                self.inner().watched(self.epoch);
                self.notice.clone()
            }

            /// This acquisition's fencing token, when the lock was built with
            /// [`fencing(true)`](crate::LockBuilder::fencing); see [`Lock::fencing_token`].
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let lock = ", $make, ";")]
            #[doc = concat!("let guard = lock.", $take, "()", $aw, "?;")]
            /// println!("token {:?}", guard.fencing_token());
            /// # Ok(())
            /// # }
            /// ```
            pub fn fencing_token(&self) -> Option<u64> {
                self.inner().fencing_token()
            }

            /// Gives the held lock a new expiry; see [`Lock::extend`].
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let lock = ", $make, ";")]
            #[doc = concat!("let guard = lock.", $take, "()", $aw, "?;")]
            #[doc = concat!("guard.extend(Some(std::time::Duration::from_secs(30)))", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub $($asyncness)? fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
                $run!(self.inner().extend(expire))
            }
        }
    };
}

pub(crate) use {guard_methods, lock, lock_builder};
