//! The async API's plain lock: [`Lock<Tokio>`](Lock)'s methods as futures, and its guard
//! ([`crate::aio::LockGuard`]): one acquisition, owned (`'static`, `Send`), taken and
//! released in its handle's turn, so that a call never meets what a dropped one left in
//! flight.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Lock;
use crate::driver::acquirer::Acquisition;
use crate::driver::tokio::Tokio;
use crate::driver::turn::{self, Turn, Turns};
use crate::driver::{Inner, Runtime, Taken};
use crate::handle::Hold;
use crate::protocol::lease::Wait;
use crate::{Backend, CancelToken, Error, Holder, LockBuilder};

/// The async API's lock ([`crate::aio::Lock`]): the same methods, as futures, with guards
/// that own their acquisition.
impl Lock<Tokio> {
    /// An async handle on the lock `name` on `backend`; see [`Lock::new`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "cron:cleanup")?;
    /// if lock.try_acquire().await? {
    ///     lock.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for an async handle on the lock `name`; see [`Lock::builder`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "nightly-report")
    ///     .expire(std::time::Duration::from_secs(60))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into())
    }

    /// The async form of [`Lock::acquire`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// lock.acquire().await?;
    /// lock.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<(), Error> {
        self.held(Wait::Forever).await.map(drop)
    }

    /// The async form of [`Lock::try_acquire`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// if !lock.try_acquire().await? {
    ///     println!("busy, held by {:?}", lock.holder().await?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub async fn try_acquire(&self) -> Result<bool, Error> {
        self.held(Wait::Never).await
    }

    /// The async form of [`Lock::acquire_timeout`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// if lock.acquire_timeout(std::time::Duration::from_secs(5)).await? {
    ///     lock.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        self.held(Wait::timeout(Instant::now(), timeout)).await
    }

    /// The async form of [`Lock::release`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// let released = lock.release().await;
    /// assert!(matches!(released, Err(redis_blpop_lock::Error::NotAcquired { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self) -> Result<(), Error> {
        self.release_held().await
    }

    /// The async form of [`Lock::extend`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// lock.acquire().await?;
    /// lock.extend(Some(Duration::from_secs(60))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        self.inner.extend(expire).await
    }

    /// The async form of [`Lock::reset`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "stuck-job")?;
    /// if lock.reset().await? {
    ///     println!("freed a stuck lock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "says whether there was a lock to reset"]
    pub async fn reset(&self) -> Result<bool, Error> {
        self.inner.reset().await
    }

    /// The async form of [`Lock::holder`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// match lock.holder().await? {
    ///     Some(holder) => println!("held by {} for {:?}", holder.id, holder.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn holder(&self) -> Result<Option<Holder>, Error> {
        self.inner.holder().await
    }

    /// The async form of [`Lock::locked`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// println!("held: {}", lock.locked().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locked(&self) -> Result<bool, Error> {
        Ok(self.inner.holder().await?.is_some())
    }

    /// The async form of [`Lock::owner_id`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// lock.acquire().await?;
    /// assert_eq!(lock.owner_id().await?.as_deref(), Some(lock.id()));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn owner_id(&self) -> Result<Option<String>, Error> {
        Ok(self.inner.holder().await?.map(|h| h.id))
    }

    /// The async form of [`Lock::lock`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock().await?;
    /// // ... sell the ticket ...
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<OwnedLockGuard, Error> {
        match self.guard(Wait::Forever).await? {
            Some(guard) => Ok(guard),
            // A wait without end only ends with the lock or an error.
            None => Err(self.inner.error(|name| Error::Cancelled { name })),
        }
    }

    /// The async form of [`Lock::try_lock`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// match lock.try_lock().await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<OwnedLockGuard>, Error> {
        self.guard(Wait::Never).await
    }

    /// The async form of [`Lock::try_lock_for`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// if let Some(guard) = lock.try_lock_for(std::time::Duration::from_secs(2)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<OwnedLockGuard>, Error> {
        self.guard(Wait::timeout(Instant::now(), timeout)).await
    }

    /// The async form of [`Lock::try_lock_until`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let deadline = Instant::now() + Duration::from_secs(2);
    /// if let Some(guard) = lock.try_lock_until(deadline).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<OwnedLockGuard>, Error> {
        self.guard(Wait::Until(deadline)).await
    }

    /// Runs `work` while holding this lock, and returns its output. The lock is released
    /// after it, and when this future is dropped. If the lock is lost while `work` runs (see
    /// [`OwnedLockGuard::when_lost`](Hold::when_lost)), `work` is dropped where it stands and the result is
    /// [`Error::Lost`]; a failed release is returned as the error.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "ledger")
    ///     .expire(std::time::Duration::from_secs(30))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let total = lock.with_lock(async { 2 + 2 }).await?;
    /// assert_eq!(total, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F: Future>(&self, work: F) -> Result<F::Output, Error> {
        self.lock().await?.run(work).await
    }

    /// The acquire path, into a guard, in the handle's turn.
    async fn guard(&self, wait: Wait) -> Result<Option<OwnedLockGuard>, Error> {
        take(self, wait).await
    }

    /// The acquire path, the lock then held by the handle without a guard.
    async fn held(&self, wait: Wait) -> Result<bool, Error> {
        Ok(self.guard(wait).await?.map(OwnedLockGuard::keep).is_some())
    }

    async fn release_held(&self) -> Result<(), Error> {
        release(&self.inner, &self.turns, None, None).await
    }
}

/// The acquire path, run on a task of its own so that a grant that lands after this
/// future is dropped is still released: dropping it cancels the task's wait, and the
/// task's guard, if it took the lock, is dropped with the task's output.
///
/// It runs in the handle's turn, which goes with the guard until this future has it: a
/// guard dropped with the task's output releases before the handle's next call starts.
async fn take(lock: &Lock<Tokio>, wait: Wait) -> Result<Option<OwnedLockGuard>, Error> {
    // A call that may not wait may still wait for one of its handle's calls that was
    // dropped to finish giving back what it took: a round trip, normally.
    let turn_by = match wait {
        Wait::Never => Some(Instant::now() + lock.inner.settings.grace()),
        Wait::Until(deadline) => Some(deadline),
        Wait::Forever => None,
    };
    let Some(turn) = lock.turns.take(turn_by).await else {
        return Ok(None);
    };
    let inner = Arc::clone(&lock.inner);
    let turns = lock.turns.clone();
    let acquire = move |cancel: CancelToken| async move {
        let taken = inner.take(wait, &cancel).await?;
        Ok(taken.map(|taken| OwnedLockGuard::new(inner, turns, taken, turn)))
    };
    let settings = &lock.inner.settings;
    let guard = Tokio::apart(&settings.name, &settings.cancel, acquire).await?;
    Ok(guard.map(OwnedLockGuard::end_turn))
}

/// Releases the lock in a turn (`held`, or the next). It runs here, to spare a hand-over to a
/// task; dropped before its end it is finished on a task (or, as the runtime ends, on the
/// dropping thread), since releasing twice does no more than once.
pub(crate) async fn release(
    inner: &Arc<Inner<Tokio>>,
    turns: &Turns,
    held: Option<Turn>,
    epoch: Option<u64>,
) -> Result<(), Error> {
    let mut unfinished = Unfinished {
        inner: Some(Arc::clone(inner)),
        turns: turns.clone(),
        epoch,
    };
    let outcome = turn::release(Arc::clone(inner), turns.clone(), held, epoch).await;
    unfinished.inner = None;
    outcome
}

/// A release whose future was dropped before its end: it is sent again, unattended.
struct Unfinished {
    /// `None` once the release has ended.
    inner: Option<Arc<Inner<Tokio>>>,
    turns: Turns,
    epoch: Option<u64>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let turn = self.turns.take_now();
        turn::release_unattended(inner, self.turns.clone(), turn, self.epoch);
    }
}

/// One acquisition of an [`aio::Lock`](crate::aio::Lock), owned: `'static` and `Send`, so it can move into
/// `tokio::spawn`. Like [`crate::LockGuard`] it stands for one acquisition only.
///
/// Dropped without [`unlock`](Self::unlock), it releases from a task spawned on the current
/// runtime; with no runtime left, or when the runtime ends before that task is done, on the
/// dropping thread, by the I/O timeout. A failure there is logged.
/// Call `unlock().await` to see the error instead.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
/// let guard = lock.lock().await?;
/// tokio::spawn(async move {
///     // ... work on another task ...
///     guard.unlock().await
/// });
/// # Ok(())
/// # }
/// ```
#[must_use = "if unused the lock is released at once"]
pub struct OwnedLockGuard {
    hold: Hold<Tokio>,
    turns: Turns,
    /// Whether dropping it releases; not once it has been released or handed to its handle.
    armed: bool,
    /// The handle's turn, while the guard is on its way from the acquiring task to the caller.
    turn: Option<Turn>,
}

impl OwnedLockGuard {
    pub(crate) fn new(inner: Arc<Inner<Tokio>>, turns: Turns, taken: Taken, turn: Turn) -> Self {
        OwnedLockGuard {
            hold: Hold::new(Acquisition::released_by_guard(inner, taken)),
            turns,
            armed: true,
            turn: Some(turn),
        }
    }

    fn inner(&self) -> &Arc<Inner<Tokio>> {
        self.hold.acquisition.inner()
    }

    /// The guard, arrived: the handle's next call may start.
    pub(crate) fn end_turn(mut self) -> Self {
        self.turn = None;
        self
    }

    /// Leaves the lock held by its handle, with no guard to release it.
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }

    /// The turn to release in: the guard's own, or the handle's if no call has it now (the
    /// release then comes before any later call of the handle).
    fn release_turn(&mut self) -> Option<Turn> {
        self.turn.take().or_else(|| self.turns.take_now())
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock().await?;
    /// assert_eq!(guard.name(), "tickets");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner().name()
    }

    /// Gives the held lock a new expiry; see [`Lock::extend`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock().await?;
    /// guard.extend(Some(std::time::Duration::from_secs(30))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        self.hold.acquisition.extend(expire).await
    }

    /// Releases the lock now and returns the error, if any, instead of logging it. The
    /// release runs on a task of its own: dropping this future does not stop it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<(), Error> {
        self.armed = false;
        let turn = self.release_turn();
        let epoch = self.hold.acquisition.epoch();
        release(self.inner(), &self.turns, turn, Some(epoch)).await
    }

    /// Runs `work` under this acquisition, dropping it if the lock is lost; then releases.
    pub(crate) async fn run<F: Future>(self, work: F) -> Result<F::Output, Error> {
        let output = tokio::select! {
            output = work => output,
            () = self.when_lost() => {
                // Not ours any more: dropping the guard releases only if it still is.
                return Err(self.inner().error(|name| Error::Lost { name }));
            }
        };
        self.unlock().await?;
        Ok(output)
    }
}

impl Drop for OwnedLockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let turn = self.release_turn();
        let (inner, epoch) = (Arc::clone(self.inner()), self.hold.acquisition.epoch());
        turn::release_unattended(inner, self.turns.clone(), turn, Some(epoch));
    }
}

/// The acquisition it holds, and what it knows of it: [`Hold::lost`], [`Hold::lost_token`],
/// [`Hold::fencing_token`], [`Hold::when_lost`].
impl Deref for OwnedLockGuard {
    type Target = Hold<Tokio>;

    fn deref(&self) -> &Hold<Tokio> {
        &self.hold
    }
}

impl std::fmt::Debug for OwnedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::LockGuard")
            .field("name", &self.name())
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}
