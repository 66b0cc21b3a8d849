//! The async semaphore: the blocking [`Semaphore`](crate::Semaphore)'s twin, on the same
//! queue (the two serve each other in turn), with futures that are safe to drop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquisition::{Held, Shares};
use crate::protocol::keys::Primitive;
use crate::protocol::lease::Wait;
use crate::{Backend, CancelToken, Error, LockBuilder};

/// A semaphore of `permits` shared by every handle of the same name, for async code: the
/// same semaphore as [`crate::Semaphore`], first come first served across tasks and
/// processes, each permit a lease renewed while held.
///
/// Each waiting task blocks in `BLPOP` on a list of its own, on a connection of its own. A
/// future dropped while it waits leaves the queue, giving back a permit that came meanwhile;
/// a permit dropped unreleased is given back from a task (or, as the runtime ends, from the
/// dropping thread).
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backups = redis_blpop_lock::aio::Semaphore::new(&client, "backups", 2)?;
/// let permit = backups.acquire().await?;
/// // ... at most two tasks or processes run this at once ...
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Semaphore {
    shares: Shares,
}

/// A permit (or several, from [`Semaphore::acquire_many`]) of an async [`Semaphore`]: given
/// back by [`release`](Self::release), or unattended when dropped (a failure is then logged,
/// and the lease frees itself at its expiry).
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
    held: Held,
    permits: u32,
}

/// A permit that owns an `Arc` of its semaphore: `'static` and `Send`, for `tokio::spawn`.
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct ArcSemaphorePermit {
    semaphore: Arc<Semaphore>,
    held: Held,
    permits: u32,
}

impl Semaphore {
    /// A handle on the semaphore `name` of `permits` permits, with the default settings;
    /// as [`crate::Semaphore::new`] (which says how a count that changes is taken).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let migrations = redis_blpop_lock::aio::Semaphore::new(&client, "migrations", 1)?;
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

    /// A builder for a semaphore handle: expiry, renewal, heartbeat, I/O timeout, id, cancel
    /// token.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
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
    ) -> LockBuilder<Semaphore> {
        LockBuilder::new(backend, name.into())
            .queued()
            .permits(permits)
    }

    /// The semaphore's name (its keys are `semaphore:{<name>}:*`, or
    /// `semaphore:=<name>:*` for a name with a hash tag of its own).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// assert_eq!(semaphore.name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.shares.settings.name
    }

    /// How many permits this handle says the semaphore has.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// assert_eq!(semaphore.permits(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        // Made from a u32 by the builder.
        u32::try_from(self.shares.capacity).unwrap_or(u32::MAX)
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
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_>, Error> {
        self.acquire_many(1).await
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
    pub async fn try_acquire(&self) -> Result<Option<SemaphorePermit<'_>>, Error> {
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
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
        self.try_acquire_many_for(1, timeout).await
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
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
        self.permit(1, Wait::Until(deadline)).await
    }

    /// Waits until `n` permits are ours, all at once. Requests are served in order, so later
    /// requests for fewer permits wait behind this one.
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
    pub async fn acquire_many(&self, n: u32) -> Result<SemaphorePermit<'_>, Error> {
        self.permit(n, Wait::Forever)
            .await?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
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
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<SemaphorePermit<'_>>, Error> {
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
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
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
    pub async fn acquire_arc(self: &Arc<Self>) -> Result<ArcSemaphorePermit, Error> {
        let permit = self.acquire().await?;
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
    ) -> Result<Option<ArcSemaphorePermit>, Error> {
        let permit = self.try_acquire_for(timeout).await?;
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
        let used = self.shares.state().await?.used;
        let free = self.shares.capacity.saturating_sub(used);
        Ok(u32::try_from(free).unwrap_or(u32::MAX))
    }

    async fn permit(&self, n: u32, wait: Wait) -> Result<Option<SemaphorePermit<'_>>, Error> {
        let held = self.shares.take(u64::from(n), wait).await?;
        Ok(held.map(|held| SemaphorePermit {
            semaphore: self,
            held,
            permits: n,
        }))
    }
}

impl LockBuilder<Semaphore> {
    /// Lets `token` cancel this handle's waits from anywhere: a waiting task's acquire then
    /// returns [`Error::Cancelled`], having left the queue.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let semaphore = redis_blpop_lock::aio::Semaphore::builder(&client, "exports", 4)
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
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::builder(&client, "exports", 4).build()?;
    /// assert!(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 0).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Semaphore, Error> {
        let permits = self.capacity();
        if permits == 0 {
            return Err(Error::invalid("a semaphore needs at least 1 permit"));
        }
        let (settings, transport) = self.checked()?;
        Ok(Semaphore {
            shares: Shares::new(Primitive::Semaphore, settings, transport, permits),
        })
    }
}

impl<'a> SemaphorePermit<'a> {
    /// The semaphore this permit is from.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// assert_eq!(permit.semaphore().name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self) -> &'a Semaphore {
        self.semaphore
    }

    /// How many permits this holds.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "cpu", 8)?;
    /// assert_eq!(semaphore.acquire_many(2).await?.permits(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the permit may have slipped away; see [`crate::SemaphorePermit::lost`]. No
    /// round trip.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// assert!(!permit.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// Resolves once the permit is lost, as [`LockGuard::when_lost`](super::LockGuard::when_lost)
    /// does for a lock: for `select!`ing work against losing it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => permit.release().await?,
    ///     () = permit.when_lost() => println!("lost the permit: stopped exporting"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }

    /// The permit's fencing token; see [`crate::SemaphorePermit::fencing_token`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// assert!(permit.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Gives the permit back now and returns the error, if any, instead of logging it.
    /// Dropping this future does not stop the release: it is done again unattended.
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
        self.held.release().await
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
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc().await?;
    /// assert_eq!(permit.semaphore().name(), "exports");
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.semaphore
    }

    /// How many permits this holds.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// assert_eq!(semaphore.acquire_arc().await?.permits(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the permit may have slipped away; see [`crate::SemaphorePermit::lost`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// assert!(!semaphore.acquire_arc().await?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// Resolves once the permit is lost; see [`SemaphorePermit::when_lost`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc().await?;
    /// tokio::spawn(async move { permit.when_lost().await });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }

    /// The permit's fencing token; see [`crate::SemaphorePermit::fencing_token`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// assert!(semaphore.acquire_arc().await?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Gives the permit back now and returns the error, if any.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// semaphore.acquire_arc().await?.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.held.release().await
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id stays out: anyone who knows it can release the permits.
        f.debug_struct("aio::Semaphore")
            .field("name", &self.name())
            .field("permits", &self.permits())
            .finish_non_exhaustive()
    }
}
