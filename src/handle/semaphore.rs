//! The [`Semaphore`]: permits over the queue engine's
//! [`Acquirer`](crate::driver::acquirer::Acquirer), each a lease of its own, on either API.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ended, Blocking, Hold, Runtime};
use crate::driver::acquirer::Acquirer;
use crate::protocol::lease::Wait;
use crate::protocol::primitive::Primitive;
use crate::transport::send::now;
use crate::{Backend, CancelToken, Error, LockBuilder};

/// A semaphore of `permits` shared by every handle of the same name, on the fair queue engine
/// (see the crate docs' "Semaphore" section for its keys and scripts). The blocking handles
/// ([`crate::Semaphore`], on [`Blocking`]) and the async ones ([`crate::aio::Semaphore`],
/// on [`Tokio`](crate::aio::Tokio)) of one name are the same semaphore.
///
/// Waiters are served first come, first served, so a request for many permits is not passed
/// over by later requests for one. A waiter blocks in `BLPOP` on a list of its own, and a
/// release pushes to exactly the waiters that can now proceed. Each permit is a lease (30 s by
/// default, renewed while held): a holder that crashes gives its permit back at its expiry,
/// and a waiter that crashes leaves the queue within two heartbeats (2 s by default). An async
/// wait dropped at an `.await` leaves the queue, giving back a permit that came meanwhile; an
/// async permit dropped unreleased is given back from a task (or, as the runtime ends, from the
/// dropping thread).
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backups = redis_blpop_lock::Semaphore::new(&client, "backups", 2)?;
/// let permit = backups.acquire()?;
/// // ... at most two at once run this ...
/// permit.release()?;
/// # Ok(())
/// # }
/// ```
pub struct Semaphore<R: Runtime = Blocking> {
    acquirer: Acquirer<R>,
}

/// A permit (or several, from [`Semaphore::acquire_many`]): given back by
/// [`release`](Self::release), or when dropped (a failure is then logged, and the lease frees
/// itself at its expiry).
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct SemaphorePermit<'a, R: Runtime = Blocking> {
    semaphore: &'a Semaphore<R>,
    hold: Hold<R>,
    permits: u32,
}

/// A permit that owns an `Arc` of its semaphore: `'static`, for a thread or a task.
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct ArcSemaphorePermit<R: Runtime = Blocking> {
    semaphore: Arc<Semaphore<R>>,
    hold: Hold<R>,
    permits: u32,
}

impl Semaphore {
    /// A handle on the semaphore `name` of `permits` permits, with the default settings.
    /// Refused on a [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
    ///
    /// Every handle says how many permits there are, and each request the server runs uses
    /// the count of the handle that sent it. To change the count of a live semaphore, make
    /// handles with the new count: a larger count lets waiters in at the next request any
    /// handle makes; a smaller one takes nothing back from holders, and grants nothing until
    /// the permits in use fall below it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let migrations = redis_blpop_lock::Semaphore::new(&client, "migrations", 1)?;
    /// assert_eq!(migrations.permits(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        backend: &(impl Backend + ?Sized),
        name: impl Into<String>,
        permits: u32,
    ) -> Result<Semaphore, Error> {
        Self::builder(backend, name, permits).build()
    }

    /// A builder for a semaphore handle: expiry, renewal, heartbeat, I/O timeout, id, cancel
    /// token.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::Semaphore::builder(&client, "exports", 4)
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
        Self::builder_on(backend, name, permits)
    }

    /// Waits until a permit is ours.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self) -> Result<SemaphorePermit<'_>, Error> {
        now(self.permit(1, Wait::Forever))?.ok_or_else(ended)
    }

    /// A permit if one is free and nobody waits for one (it never passes a waiter).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// if let Some(permit) = semaphore.try_acquire()? {
    ///     permit.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self) -> Result<Option<SemaphorePermit<'_>>, Error> {
        now(self.permit(1, Wait::Never))
    }

    /// Waits up to `timeout` for a permit.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.try_acquire_for(Duration::from_secs(5))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<SemaphorePermit<'_>>, Error> {
        now(self.permit(1, Wait::timeout(Instant::now(), timeout)))
    }

    /// Waits until `deadline` at the latest for a permit.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// let permit = semaphore.try_acquire_until(deadline)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
        now(self.permit(1, Wait::Until(deadline)))
    }

    /// Waits until `n` permits are ours, all at once. Requests are served in order, so later
    /// requests for fewer permits wait behind this one.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.acquire_many(3)?;
    /// assert_eq!(permits.permits(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_many(&self, n: u32) -> Result<SemaphorePermit<'_>, Error> {
        now(self.permit(n, Wait::Forever))?.ok_or_else(ended)
    }

    /// `n` permits if they are free and nobody waits.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.try_acquire_many(2)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_many(&self, n: u32) -> Result<Option<SemaphorePermit<'_>>, Error> {
        now(self.permit(n, Wait::Never))
    }

    /// Waits up to `timeout` for `n` permits.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.try_acquire_many_for(2, Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_many_for(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
        now(self.permit(n, Wait::timeout(Instant::now(), timeout)))
    }

    /// Waits until a permit is ours; the permit keeps the semaphore alive, for a thread.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc()?;
    /// assert_eq!(permit.semaphore().name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_arc(self: &Arc<Self>) -> Result<ArcSemaphorePermit, Error> {
        let permit = now(self.permit(1, Wait::Forever))?.ok_or_else(ended)?;
        Ok(permit.into_arc(Arc::clone(self)))
    }

    /// Waits up to `timeout` for a permit that keeps the semaphore alive.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::{sync::Arc, time::Duration};
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.try_acquire_arc_for(Duration::from_secs(1))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_arc_for(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Result<Option<ArcSemaphorePermit>, Error> {
        let permit = now(self.permit(1, Wait::timeout(Instant::now(), timeout)))?;
        Ok(permit.map(|permit| permit.into_arc(Arc::clone(self))))
    }

    /// How many permits are free now, by this handle's count (a read; it may change at once).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// println!("{} of 4 free", semaphore.available()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn available(&self) -> Result<u32, Error> {
        now(self.free())
    }
}

/// The async API's semaphore ([`crate::aio::Semaphore`]): the same methods, as
/// futures.
#[cfg(feature = "tokio")]
impl Semaphore<super::Tokio> {
    /// A handle on the semaphore `name` of `permits` permits, with the default settings; see
    /// [`Semaphore::new`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let migrations = redis_blpop_lock::aio::Semaphore::new(&client, "migrations", 1)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        backend: &(impl Backend + ?Sized),
        name: impl Into<String>,
        permits: u32,
    ) -> Result<Self, Error> {
        Self::builder(backend, name, permits).build()
    }

    /// A builder for an async semaphore handle; see [`Semaphore::builder`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::builder(&client, "exports", 4)
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(
        backend: &B,
        name: impl Into<String>,
        permits: u32,
    ) -> LockBuilder<Self> {
        Self::builder_on(backend, name, permits)
    }

    /// Waits until a permit is ours.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_, super::Tokio>, Error> {
        self.permit(1, Wait::Forever).await?.ok_or_else(ended)
    }

    /// A permit if one is free and nobody waits for one (it never passes a waiter).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// if let Some(permit) = semaphore.try_acquire().await? {
    ///     permit.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<SemaphorePermit<'_, super::Tokio>>, Error> {
        self.permit(1, Wait::Never).await
    }

    /// Waits up to `timeout` for a permit.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.try_acquire_for(Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_for(
        &self,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, super::Tokio>>, Error> {
        self.permit(1, Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` at the latest for a permit.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// let permit = semaphore.try_acquire_until(deadline).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<SemaphorePermit<'_, super::Tokio>>, Error> {
        self.permit(1, Wait::Until(deadline)).await
    }

    /// Waits until `n` permits are ours, all at once; see [`Semaphore::acquire_many`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.acquire_many(3).await?;
    /// assert_eq!(permits.permits(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many(&self, n: u32) -> Result<SemaphorePermit<'_, super::Tokio>, Error> {
        self.permit(n, Wait::Forever).await?.ok_or_else(ended)
    }

    /// `n` permits if they are free and nobody waits.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.try_acquire_many(2).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_many(
        &self,
        n: u32,
    ) -> Result<Option<SemaphorePermit<'_, super::Tokio>>, Error> {
        self.permit(n, Wait::Never).await
    }

    /// Waits up to `timeout` for `n` permits.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "cpu", 8)?;
    /// let permits = semaphore.try_acquire_many_for(2, Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_many_for(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, super::Tokio>>, Error> {
        self.permit(n, Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until a permit is ours; the permit keeps the semaphore alive, for a task.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc().await?;
    /// tokio::spawn(async move { permit.release().await });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_arc(self: &Arc<Self>) -> Result<ArcSemaphorePermit<super::Tokio>, Error> {
        let permit = self.permit(1, Wait::Forever).await?.ok_or_else(ended)?;
        Ok(permit.into_arc(Arc::clone(self)))
    }

    /// Waits up to `timeout` for a permit that keeps the semaphore alive.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::{sync::Arc, time::Duration};
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.try_acquire_arc_for(Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_arc_for(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Result<Option<ArcSemaphorePermit<super::Tokio>>, Error> {
        let permit = self
            .permit(1, Wait::timeout(Instant::now(), timeout))
            .await?;
        Ok(permit.map(|permit| permit.into_arc(Arc::clone(self))))
    }

    /// How many permits are free now, by this handle's count (a read; it may change at once).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// println!("{} of 4 free", semaphore.available().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn available(&self) -> Result<u32, Error> {
        self.free().await
    }
}

impl<R: Runtime> Semaphore<R> {
    /// The semaphore's name (its keys are `semaphore:{<name>}:*`, or `semaphore:=<name>:*` for
    /// a name with a hash tag of its own).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// assert_eq!(semaphore.permits(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        // Made from a u32 by the builder.
        u32::try_from(self.acquirer.capacity).unwrap_or(u32::MAX)
    }

    fn builder_on<B: Backend + ?Sized>(
        backend: &B,
        name: impl Into<String>,
        permits: u32,
    ) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into())
            .on_queue_engine()
            .permits(permits)
    }

    async fn permit(&self, n: u32, wait: Wait) -> Result<Option<SemaphorePermit<'_, R>>, Error> {
        let held = self.acquirer.acquire(u64::from(n), wait).await?;
        Ok(held.map(|held| SemaphorePermit {
            semaphore: self,
            hold: Hold::new(held),
            permits: n,
        }))
    }

    async fn free(&self) -> Result<u32, Error> {
        let free = self.acquirer.available().await?;
        Ok(u32::try_from(free).unwrap_or(u32::MAX))
    }
}

impl<R: Runtime> LockBuilder<Semaphore<R>> {
    /// Lets `token` cancel this handle's waits from anywhere; see
    /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue, and its
    /// acquire returns [`Error::Cancelled`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let semaphore = redis_blpop_lock::Semaphore::builder(&client, "exports", 4)
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::builder(&client, "exports", 4).build()?;
    /// assert!(redis_blpop_lock::Semaphore::new(&client, "exports", 0).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Semaphore<R>, Error> {
        let (settings, transport, capacity) = self.checked_for(Primitive::Semaphore)?;
        Ok(Semaphore {
            acquirer: Acquirer::new(Primitive::Semaphore, settings, transport, capacity),
        })
    }
}

impl<'a, R: Runtime> SemaphorePermit<'a, R> {
    /// The semaphore this permit is from.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire()?;
    /// assert_eq!(permit.semaphore().name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self) -> &'a Semaphore<R> {
        self.semaphore
    }

    fn into_arc(self, semaphore: Arc<Semaphore<R>>) -> ArcSemaphorePermit<R> {
        ArcSemaphorePermit {
            semaphore,
            hold: self.hold,
            permits: self.permits,
        }
    }
}

impl<R: Runtime> ArcSemaphorePermit<R> {
    /// The semaphore this permit is from.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc()?;
    /// assert_eq!(permit.semaphore().name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self) -> &Arc<Semaphore<R>> {
        &self.semaphore
    }
}

impl<R: Runtime> SemaphorePermit<'_, R> {
    /// How many permits this holds.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?;
    /// assert_eq!(semaphore.acquire()?.permits(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

impl<R: Runtime> ArcSemaphorePermit<R> {
    /// How many permits this holds; see [`SemaphorePermit::permits`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = std::sync::Arc::new(redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?);
    /// assert_eq!(semaphore.acquire_arc()?.permits(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

impl SemaphorePermit<'_> {
    /// Gives the permit back now and reports how that went, instead of logging it in drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// semaphore.acquire()?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), Error> {
        now(self.hold.acquisition.release())
    }
}

impl ArcSemaphorePermit {
    /// Gives the permit back now; see [`SemaphorePermit::release`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = std::sync::Arc::new(redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?);
    /// semaphore.acquire_arc()?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), Error> {
        now(self.hold.acquisition.release())
    }
}

#[cfg(feature = "tokio")]
impl SemaphorePermit<'_, super::Tokio> {
    /// Gives the permit back now and reports how that went, instead of logging it in drop. A
    /// release whose future is dropped is done again unattended.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// semaphore.acquire().await?.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.hold.acquisition.release().await
    }
}

#[cfg(feature = "tokio")]
impl ArcSemaphorePermit<super::Tokio> {
    /// Gives the permit back now; see [`SemaphorePermit::release`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "cpu", 8)?);
    /// semaphore.acquire_arc().await?.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.hold.acquisition.release().await
    }
}

/// The acquisition it holds, and what it knows of it: [`Hold::lost`], [`Hold::lost_token`],
/// [`Hold::fencing_token`], and for an async permit [`Hold::when_lost`].
impl<R: Runtime> Deref for SemaphorePermit<'_, R> {
    type Target = Hold<R>;

    fn deref(&self) -> &Hold<R> {
        &self.hold
    }
}

/// The acquisition it holds; see [`SemaphorePermit`]'s.
impl<R: Runtime> Deref for ArcSemaphorePermit<R> {
    type Target = Hold<R>;

    fn deref(&self) -> &Hold<R> {
        &self.hold
    }
}

impl<R: Runtime> fmt::Debug for Semaphore<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The id stays out: anyone who knows it can release the permits.
        f.debug_struct(&format!("{}Semaphore", R::API))
            .field("name", &self.name())
            .field("permits", &self.permits())
            .finish_non_exhaustive()
    }
}
