//! The [`Semaphore`](crate::Semaphore) shell, for both APIs: permits over the queue engine's
//! [`Acquirer`](crate::driver::acquirer::Acquirer), each a lease of its own.

/// The semaphore's types and methods on one API (see [`for_api`]).
macro_rules! semaphore {
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
    ) => {
        mod semaphore_api {
            use std::sync::Arc;
            use std::time::{Duration, Instant};

            use $crate::{Backend, CancelToken, Error, LockBuilder};
            use $crate::driver::acquirer::{Acquirer, Acquisition};
            use $crate::protocol::lease::Wait;
            use $crate::protocol::primitive::Primitive;
            use $crate::shell::ended;
            use $crate::shell::$run;

            /// A semaphore of `permits` shared by every handle of the same name, on the fair queue
            /// engine (see the crate docs' "Semaphore" section for its keys and scripts). The
            /// blocking and the async handles of one name are the same semaphore.
            ///
            /// Waiters are served first come, first served, so a request for many permits is not
            /// passed over by later requests for one. A waiter blocks in `BLPOP` on a list of its
            /// own, and a release pushes to exactly the waiters that can now proceed. Each permit
            /// is a lease (30 s by default, renewed while held): a holder that crashes gives its
            /// permit back at its expiry, and a waiter that crashes leaves the queue within two
            /// heartbeats (2 s by default). An async wait dropped at an `.await` leaves the queue,
            /// giving back a permit that came meanwhile; an async permit dropped unreleased is
            /// given back from a task (or, as the runtime ends, from the dropping thread).
            ///
            /// ```no_run
            #[doc = $head]
            /// let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let backups = ", $path, "Semaphore::new(&client, \"backups\", 2)?;")]
            #[doc = concat!("let permit = backups.acquire()", $aw, "?;")]
            /// // ... at most two at once run this ...
            #[doc = concat!("permit.release()", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub struct Semaphore {
                acquirer: Acquirer<$rt>,
            }

            /// A permit (or several, from [`Semaphore::acquire_many`]): given back by
            /// [`release`](Self::release), or when dropped (a failure is then logged, and the
            /// lease frees itself at its expiry).
            #[must_use = "the permit is given back as soon as it is dropped"]
            pub struct SemaphorePermit<'a> {
                semaphore: &'a Semaphore,
                pub(super) held: Acquisition<$rt>,
                permits: u32,
            }

            /// A permit that owns an `Arc` of its semaphore: `'static`, for a thread or a task.
            #[must_use = "the permit is given back as soon as it is dropped"]
            pub struct ArcSemaphorePermit {
                semaphore: Arc<Semaphore>,
                pub(super) held: Acquisition<$rt>,
                permits: u32,
            }

            impl Semaphore {
                /// A handle on the semaphore `name` of `permits` permits, with the default
                /// settings. Refused on a [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
                ///
                /// Every handle says how many permits there are, and each request the server
                /// runs uses the count of the handle that sent it. To change the count of a live
                /// semaphore, make handles with the new count: a larger count lets waiters in at
                /// the next request any handle makes; a smaller one takes nothing back from
                /// holders, and grants nothing until the permits in use fall below it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let migrations = ", $path, "Semaphore::new(&client, \"migrations\", 1)?;")]
                /// assert_eq!(migrations.permits(), 1);
                /// # Ok(())
                /// # }
                /// ```
                pub fn new(
                    backend: &(impl Backend + ?Sized),
                    name: impl Into<String>,
                    permits: u32,
                ) -> Result<Semaphore, Error> {
                    Semaphore::builder(backend, name, permits).build()
                }

                /// A builder for a semaphore handle: expiry, renewal, heartbeat, I/O timeout, id,
                /// cancel token.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::builder(&client, \"exports\", 4)")]
                ///     .expire(Duration::from_secs(10))
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn builder<B: Backend + ?Sized>(
                    backend: &B,
                    name: impl Into<String>,
                    permits: u32,
                ) -> LockBuilder<Semaphore> {
                    LockBuilder::new(backend, name.into())
                        .on_queue_engine()
                        .permits(permits)
                }

                /// The semaphore's name (its keys are `semaphore:{<name>}:*`, or
                /// `semaphore:=<name>:*` for a name with a hash tag of its own).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                /// assert_eq!(semaphore.name(), "exports");
                /// # Ok(())
                /// # }
                /// ```
                pub fn name(&self) -> &str {
                    &self.acquirer.settings.name
                }

                /// How many permits this handle says the semaphore has.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                /// assert_eq!(semaphore.permits(), 4);
                /// # Ok(())
                /// # }
                /// ```
                pub fn permits(&self) -> u32 {
                    // Made from a u32 by the builder.
                    u32::try_from(self.acquirer.capacity).unwrap_or(u32::MAX)
                }

                /// Waits until a permit is ours.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                #[doc = concat!("let permit = semaphore.acquire()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn acquire(&self) -> Result<SemaphorePermit<'_>, Error> {
                    $run!(self.permit(1, Wait::Forever))?.ok_or_else(ended)
                }

                /// A permit if one is free and nobody waits for one (it never passes a waiter).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                #[doc = concat!("if let Some(permit) = semaphore.try_acquire()", $aw, "? {")]
                #[doc = concat!("    permit.release()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire(
                    &self,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    $run!(self.permit(1, Wait::Never))
                }

                /// Waits up to `timeout` for a permit.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                #[doc = concat!("let permit = semaphore.try_acquire_for(Duration::from_secs(5))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire_for(
                    &self,
                    timeout: Duration,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    $run!(self.permit(1, Wait::timeout(Instant::now(), timeout)))
                }

                /// Waits until `deadline` at the latest for a permit.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::{Duration, Instant};
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                /// let deadline = Instant::now() + Duration::from_secs(5);
                #[doc = concat!("let permit = semaphore.try_acquire_until(deadline)", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire_until(
                    &self,
                    deadline: Instant,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    $run!(self.permit(1, Wait::Until(deadline)))
                }

                /// Waits until `n` permits are ours, all at once. Requests are served in order,
                /// so later requests for fewer permits wait behind this one.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"cpu\", 8)?;")]
                #[doc = concat!("let permits = semaphore.acquire_many(3)", $aw, "?;")]
                /// assert_eq!(permits.permits(), 3);
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn acquire_many(
                    &self,
                    n: u32,
                ) -> Result<SemaphorePermit<'_>, Error> {
                    $run!(self.permit(n, Wait::Forever))?.ok_or_else(ended)
                }

                /// `n` permits if they are free and nobody waits.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"cpu\", 8)?;")]
                #[doc = concat!("let permits = semaphore.try_acquire_many(2)", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire_many(
                    &self,
                    n: u32,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    $run!(self.permit(n, Wait::Never))
                }

                /// Waits up to `timeout` for `n` permits.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"cpu\", 8)?;")]
                #[doc = concat!("let permits = semaphore.try_acquire_many_for(2, Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire_many_for(
                    &self,
                    n: u32,
                    timeout: Duration,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    $run!(self.permit(n, Wait::timeout(Instant::now(), timeout)))
                }

                /// Waits until a permit is ours; the permit keeps the semaphore alive, for a
                /// thread or a task.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::sync::Arc;
                #[doc = concat!("let semaphore = Arc::new(", $path, "Semaphore::new(&client, \"exports\", 4)?);")]
                #[doc = concat!("let permit = semaphore.acquire_arc()", $aw, "?;")]
                /// assert_eq!(permit.semaphore().name(), "exports");
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn acquire_arc(
                    self: &Arc<Self>,
                ) -> Result<ArcSemaphorePermit, Error> {
                    let permit = $run!(self.permit(1, Wait::Forever))?.ok_or_else(ended)?;
                    Ok(permit.into_arc(Arc::clone(self)))
                }

                /// Waits up to `timeout` for a permit that keeps the semaphore alive.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::{sync::Arc, time::Duration};
                #[doc = concat!("let semaphore = Arc::new(", $path, "Semaphore::new(&client, \"exports\", 4)?);")]
                #[doc = concat!("let permit = semaphore.try_acquire_arc_for(Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_acquire_arc_for(
                    self: &Arc<Self>,
                    timeout: Duration,
                ) -> Result<Option<ArcSemaphorePermit>, Error> {
                    let permit = $run!(self.permit(1, Wait::timeout(Instant::now(), timeout)))?;
                    Ok(permit.map(|permit| permit.into_arc(Arc::clone(self))))
                }

                /// How many permits are free now, by this handle's count (a read; it may change
                /// at once).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                #[doc = concat!("println!(\"{} of 4 free\", semaphore.available()", $aw, "?);")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn available(&self) -> Result<u32, Error> {
                    let free = $run!(self.acquirer.available())?;
                    Ok(u32::try_from(free).unwrap_or(u32::MAX))
                }

                async fn permit(
                    &self,
                    n: u32,
                    wait: Wait,
                ) -> Result<Option<SemaphorePermit<'_>>, Error> {
                    let held = self.acquirer.take(u64::from(n), wait).await?;
                    Ok(held.map(|held| SemaphorePermit {
                        semaphore: self,
                        held,
                        permits: n,
                    }))
                }
            }

            impl LockBuilder<Semaphore> {
                /// Lets `token` cancel this handle's waits from anywhere; see
                /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue, and
                /// its acquire returns [`Error::Cancelled`].
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// let token = redis_blpop_lock::CancelToken::new();
                #[doc = concat!("let semaphore = ", $path, "Semaphore::builder(&client, \"exports\", 4)")]
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
                #[doc = concat!("let semaphore = ", $path, "Semaphore::builder(&client, \"exports\", 4).build()?;")]
                #[doc = concat!("assert!(", $path, "Semaphore::new(&client, \"exports\", 0).is_err());")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn build(self) -> Result<Semaphore, Error> {
                    let (settings, transport, capacity) = self.checked_for(Primitive::Semaphore)?;
                    Ok(Semaphore {
                        acquirer: Acquirer::new(
                            Primitive::Semaphore,
                            settings,
                            transport,
                            capacity,
                        ),
                    })
                }
            }

            impl<'a> SemaphorePermit<'a> {
                /// The semaphore this permit is from.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
                #[doc = concat!("let permit = semaphore.acquire()", $aw, "?;")]
                /// assert_eq!(permit.semaphore().name(), "exports");
                /// # Ok(())
                /// # }
                /// ```
                pub fn semaphore(&self) -> &'a Semaphore {
                    self.semaphore
                }

                fn into_arc(self, semaphore: Arc<Semaphore>) -> ArcSemaphorePermit {
                    ArcSemaphorePermit {
                        semaphore,
                        held: self.held,
                        permits: self.permits,
                    }
                }
            }

            impl ArcSemaphorePermit {
                /// The semaphore this permit is from.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::sync::Arc;
                #[doc = concat!("let semaphore = Arc::new(", $path, "Semaphore::new(&client, \"exports\", 4)?);")]
                #[doc = concat!("let permit = semaphore.acquire_arc()", $aw, "?;")]
                /// assert_eq!(permit.semaphore().name(), "exports");
                /// # Ok(())
                /// # }
                /// ```
                pub fn semaphore(&self) -> &Arc<Semaphore> {
                    &self.semaphore
                }
            }

            $crate::shell::semaphore::permit_methods!(
                SemaphorePermit<'_>, "semaphore.acquire()",
                asyncness = [$($asyncness)?], run = $run, head = $head, path = $path, aw = $aw,
            );
            $crate::shell::semaphore::permit_methods!(
                ArcSemaphorePermit, "std::sync::Arc::new(semaphore).acquire_arc()",
                asyncness = [$($asyncness)?], run = $run, head = $head, path = $path, aw = $aw,
            );

            impl std::fmt::Debug for Semaphore {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    // The id stays out: anyone who knows it can release the permits.
                    f.debug_struct(concat!($prefix, "Semaphore"))
                        .field("name", &self.name())
                        .field("permits", &self.permits())
                        .finish_non_exhaustive()
                }
            }
        }
        pub use semaphore_api::*;
    };
}

/// What both kinds of permit say and do, written once (a permit's `lease` and `permits`).
macro_rules! permit_methods {
    (
        $permit:ty, $take:literal,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
    ) => {
        impl $permit {
            /// How many permits this holds.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"cpu\", 8)?;")]
            #[doc = concat!("let permit = ", $take, $aw, "?;")]
            /// assert_eq!(permit.permits(), 1);
            /// # Ok(())
            /// # }
            /// ```
            pub fn permits(&self) -> u32 {
                self.permits
            }

            /// Whether the permit may have slipped away: its lease expired without a renewal
            /// (a pause, a server away), or it was reset. Once true, it stays true. No round
            /// trip.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
            #[doc = concat!("let permit = ", $take, $aw, "?;")]
            /// assert!(!permit.lost());
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost(&self) -> bool {
                self.held.lost()
            }

            /// A token cancelled when the permit is lost: a renewal finds it gone (it was
            /// reset), its lease runs out (renewals failed, or
            /// [`max_hold`](crate::LockBuilder::max_hold) was reached). Never while the
            /// permit holds, nor by its release; cancelled already when taken after the loss.
            /// When and how, as for a lock: [`LockGuard::lost_token`](crate::LockGuard::lost_token).
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
            #[doc = concat!("let permit = ", $take, $aw, "?;")]
            /// assert!(!permit.lost_token().is_cancelled());
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost_token(&self) -> CancelToken {
                self.held.lost_token()
            }

            /// The permit's fencing token: larger for every grant of this semaphore, so a
            /// store can refuse writes from a holder whose permit was given to someone else
            /// since.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
            #[doc = concat!("let permit = ", $take, $aw, "?;")]
            /// assert!(permit.fencing_token().is_some());
            /// # Ok(())
            /// # }
            /// ```
            pub fn fencing_token(&self) -> Option<u64> {
                self.held.fencing_token()
            }

            /// Gives the permit back now and reports how that went, instead of logging it in
            /// drop. An async release whose future is dropped is done again unattended.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let semaphore = ", $path, "Semaphore::new(&client, \"exports\", 4)?;")]
            #[doc = concat!($take, $aw, "?.release()", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub $($asyncness)? fn release(self) -> Result<(), Error> {
                $run!(self.held.release())
            }
        }
    };
}

pub(crate) use {permit_methods, semaphore};
