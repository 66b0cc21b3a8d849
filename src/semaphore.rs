//! A counting semaphore across processes: at most N holders at once, served in the order they
//! asked, each permit a renewed lease that comes back at its expiry if its holder crashes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquisition::{Held, Shares};
use crate::backend::Backend;
use crate::builder::LockBuilder;
use crate::protocol::keys::Primitive;
use crate::protocol::lease::Wait;
use crate::Error;

/// A semaphore of `permits` shared by every handle of the same name, on the fair queue
/// engine (see the crate docs' "Semaphore" section for its keys and scripts).
///
/// Waiters are served first come, first served, so a request for many permits is not passed
/// over by later requests for one. A waiter blocks in `BLPOP` on a list of its own, and a
/// release pushes to exactly the waiters that can now proceed. Each permit is a lease (30 s
/// by default, renewed while held): a holder that crashes gives its permit back at its
/// expiry, and a waiter that crashes leaves the queue within two heartbeats (2 s by default).
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backups = redis_blpop_lock::Semaphore::new(&client, "backups", 2)?;
/// let permit = backups.acquire()?;
/// // ... at most two processes run this at once ...
/// drop(permit);
/// # Ok(())
/// # }
/// ```
pub struct Semaphore {
    shares: Shares,
}

/// A permit (or several, from [`Semaphore::acquire_many`]): given back when dropped (a
/// failure is then logged, and the lease frees itself at its expiry).
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
    held: Held,
    permits: u32,
}

/// A permit that owns an `Arc` of its semaphore, for a `'static` holder (a thread, a task).
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct ArcSemaphorePermit {
    semaphore: Arc<Semaphore>,
    held: Held,
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
        Semaphore::builder(backend, name, permits).build()
    }

    /// A builder for a semaphore handle: expiry, renewal, heartbeat, I/O timeout, id.
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
        LockBuilder::new(backend, name.into())
            .queued()
            .permits(permits)
    }

    /// The semaphore's name (its keys are `semaphore:{<name>}:*`, or
    /// `semaphore:=<name>:*` for a name with a hash tag of its own).
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
        &self.shares.settings.name
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
        u32::try_from(self.shares.capacity).unwrap_or(u32::MAX)
    }

    /// Blocks until a permit is ours.
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
        self.acquire_many(1)
    }

    /// A permit if one is free and nobody waits for one (it never passes a waiter).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// if let Some(permit) = semaphore.try_acquire()? {
    ///     // ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self) -> Result<Option<SemaphorePermit<'_>>, Error> {
        self.try_acquire_many(1)
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
        self.try_acquire_many_for(1, timeout)
    }

    /// Waits until `deadline` at the latest for a permit.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.try_acquire_until(Instant::now() + Duration::from_secs(5))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<SemaphorePermit<'_>>, Error> {
        self.permit(1, Wait::Until(deadline))
    }

    /// Blocks until `n` permits are ours, all at once. Requests are served in order, so later
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
        self.permit(n, Wait::Forever)?
            .ok_or_else(|| Error::unexpected(&"a wait without deadline that ended"))
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
        self.permit(n, Wait::Never)
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
        self.permit(n, Wait::timeout(Instant::now(), timeout))
    }

    /// Blocks until a permit is ours; the permit keeps the semaphore alive.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc()?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_arc(self: &Arc<Self>) -> Result<ArcSemaphorePermit, Error> {
        self.acquire()
            .map(|permit| permit.into_arc(Arc::clone(self)))
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
        Ok(self
            .try_acquire_for(timeout)?
            .map(|permit| permit.into_arc(Arc::clone(self))))
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
        let used = self.shares.state()?.used;
        let free = self.shares.capacity.saturating_sub(used);
        Ok(u32::try_from(free).unwrap_or(u32::MAX))
    }

    fn permit(&self, n: u32, wait: Wait) -> Result<Option<SemaphorePermit<'_>>, Error> {
        Ok(self
            .shares
            .take(u64::from(n), wait)?
            .map(|held| SemaphorePermit {
                semaphore: self,
                held,
                permits: n,
            }))
    }
}

impl LockBuilder<Semaphore> {
    /// Lets `token` cancel this handle's waits from another thread; see
    /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let handle = redis_blpop_lock::Semaphore::builder(&client, "exports", 4)
    ///     .cancel_token(token.clone())
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel_token(self, token: crate::CancelToken) -> Self {
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire()?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "cpu", 8)?;
    /// assert_eq!(semaphore.acquire_many(2)?.permits(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the permit may have slipped away: its lease expired without a renewal (a
    /// pause, a server away), or it was reset. Once true, it stays true.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire()?;
    /// assert!(!permit.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// The permit's fencing token: larger for every grant of this semaphore, so a store can
    /// refuse writes from a holder whose permit was given to someone else since.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let semaphore = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire()?;
    /// assert!(permit.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

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
        self.held.release()
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc()?;
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
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// assert_eq!(semaphore.acquire_arc()?.permits(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Whether the permit may have slipped away; see [`SemaphorePermit::lost`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// assert!(!semaphore.acquire_arc()?.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.held.lost()
    }

    /// The permit's fencing token; see [`SemaphorePermit::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// assert!(semaphore.acquire_arc()?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Gives the permit back now and reports how that went.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::Semaphore::new(&client, "exports", 4)?);
    /// semaphore.acquire_arc()?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), Error> {
        self.held.release()
    }
}
