//! The async lock handle: the blocking [`Lock`](crate::Lock)'s twin, on the same driver.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::turn::{self, Turn, Turns};
use super::LockGuard;
use crate::driver::tokio::Tokio;
use crate::driver::Inner;
use crate::lock::fair_queue;
use crate::protocol::keys::QueueKeys;
use crate::protocol::lease::Wait;
use crate::protocol::queue::Ask;
use crate::{Backend, CancelToken, Error, Holder, LockBuilder};

/// A distributed lock on one Redis key, `lock:<name>`, for async code: the same lock as
/// [`crate::Lock`] (the two wake each other), with the same methods as futures.
///
/// Built the same way, from the same [`LockBuilder`]. Waiting tasks in one process share one
/// `BLPOP` per name and queue for it in arrival order; every future is safe to drop at any
/// `.await` (see the crate docs' *Async* section for what each one does when dropped).
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::aio::Lock::builder(&client, "nightly-report")
///     .expire(Duration::from_secs(60))
///     .auto_renewal(true)
///     .build()?;
/// let guard = lock.lock().await?;
/// // ... work while the renewal task keeps the lock alive ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct Lock {
    inner: Arc<Inner<Tokio>>,
    turns: Turns,
    /// A fair lock's place in the queue engine: its keys and what it asks for.
    fair: Option<Arc<(QueueKeys, Ask)>>,
}

impl Lock {
    /// A handle on the lock `name` on `backend`, with no expiry and a random owner id.
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
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Lock, Error> {
        Lock::builder(backend, name).build()
    }

    /// A builder for a handle on the lock `name` on `backend`; see [`LockBuilder`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "cron:cleanup")
    ///     .expire(std::time::Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Lock> {
        LockBuilder::new(backend, name.into())
    }

    /// The lock's name (the key is `lock:<name>`).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
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
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "jobs").id("worker-7").build()?;
    /// assert_eq!(lock.id(), "worker-7");
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Waits until the lock is ours; as [`crate::Lock::acquire`]. Dropped before it returns,
    /// it leaves the lock as it found it.
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
        self.held(Wait::Forever).await.map(|_| ())
    }

    /// Takes the lock if it is free, never waiting for it; `Ok(false)` when someone else
    /// holds it.
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

    /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in time. A zero
    /// timeout is a single try.
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

    /// Releases the lock and wakes one waiter; as [`crate::Lock::release`]. The release runs
    /// on a task of its own: dropping this future does not stop it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// assert!(matches!(
    ///     lock.release().await,
    ///     Err(redis_blpop_lock::Error::NotAcquired { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self) -> Result<(), Error> {
        release(&self.inner, &self.turns, None, None).await
    }

    /// Gives the lock a new expiry: `expire`, or the handle's configured one when `None`; as
    /// [`crate::Lock::extend`].
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

    /// Frees the lock whoever holds it and wakes one waiter; as [`crate::Lock::reset`].
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

    /// Who holds the lock and for how much longer, read in one round trip; `None` when it is
    /// free.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// if let Some(holder) = lock.holder().await? {
    ///     println!("held by {} for {:?}", holder.id, holder.ttl);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn holder(&self) -> Result<Option<Holder>, Error> {
        self.inner.holder().await
    }

    /// Whether anyone holds the lock (one round trip).
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
        Ok(self.holder().await?.is_some())
    }

    /// The id of the lock's current owner, or `None` when it is free (one round trip).
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
        Ok(self.holder().await?.map(|h| h.id))
    }

    /// Whether the lock this handle acquired has been lost since; as [`crate::Lock::lost`].
    /// No round trip.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::new(&client, "jobs")?;
    /// lock.acquire().await?;
    /// assert!(!lock.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.inner.lost()
    }

    /// The fencing token of the current acquisition, when the lock was built with
    /// [`fencing(true)`](LockBuilder::fencing) and is held; see
    /// [`crate::Lock::fencing_token`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// lock.acquire().await?;
    /// println!("writing with token {:?}", lock.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// Waits until the lock is ours, and returns a guard that releases it.
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
    pub async fn lock(&self) -> Result<LockGuard, Error> {
        match self.guard(Wait::Forever).await? {
            Some(guard) => Ok(guard),
            // A wait without end only ends with the lock or an error.
            None => Err(self.inner.error(|name| Error::Cancelled { name })),
        }
    }

    /// Takes the lock if it is free, never waiting for it.
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
    pub async fn try_lock(&self) -> Result<Option<LockGuard>, Error> {
        self.guard(Wait::Never).await
    }

    /// Waits up to `timeout` for the lock; `None` if it did not come free in time.
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
    pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        self.guard(Wait::timeout(Instant::now(), timeout)).await
    }

    /// Waits until `deadline` for the lock; `None` if it did not come free in time.
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
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>, Error> {
        self.guard(Wait::Until(deadline)).await
    }

    /// Runs `work` while holding this lock, and returns its output. The lock is released
    /// after it, and when this future is dropped. If the lock is lost while `work` runs (see
    /// [`LockGuard::when_lost`]), `work` is dropped where it stands and the result is
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

    /// The lock, held by this handle without a guard.
    async fn held(&self, wait: Wait) -> Result<bool, Error> {
        Ok(self.guard(wait).await?.map(LockGuard::keep).is_some())
    }

    /// The acquire path, run on a task of its own so that a grant that lands after this
    /// future is dropped is still released: dropping it cancels the task's wait, and the
    /// task's guard, if it took the lock, is dropped with the task's output.
    ///
    /// It runs in the handle's turn, which goes with the guard until this future has it: a
    /// guard dropped with the task's output releases before the handle's next call starts.
    async fn guard(&self, wait: Wait) -> Result<Option<LockGuard>, Error> {
        let runtime = super::runtime()?;
        // A call that may not wait may still wait for one of its handle's calls that was
        // dropped to finish giving back what it took: a round trip, normally.
        let turn_by = match wait {
            Wait::Never => Some(Instant::now() + self.inner.settings.grace()),
            Wait::Until(deadline) => Some(deadline),
            Wait::Forever => None,
        };
        let Some(turn) = self.turns.take(turn_by).await else {
            return Ok(None);
        };
        let cancel = CancelToken::new();
        let abandon = Abandon(cancel.clone());
        let inner = Arc::clone(&self.inner);
        let turns = self.turns.clone();
        let fair = self.fair.clone();
        let acquiring = runtime.spawn(async move {
            let epoch = match fair.as_deref() {
                Some((keys, ask)) => inner.acquire_in_line(keys, ask, wait, &cancel).await?,
                None => inner.acquire(wait, &cancel).await?,
            };
            Ok(epoch.map(|epoch| LockGuard::new(inner, turns, epoch, turn)))
        });
        let outcome = acquiring.await;
        drop(abandon);
        match outcome {
            Ok(Ok(Some(guard))) => Ok(Some(guard.end_turn())),
            Ok(other) => other,
            Err(e) => Err(self.task_failed(&e)),
        }
    }

    fn task_failed(&self, e: &tokio::task::JoinError) -> Error {
        log::error!("lock {:?}: the acquiring task failed: {e}", self.name());
        self.inner.error(|name| Error::Cancelled { name })
    }
}

/// Cancels a spawned acquire when the future waiting for it is dropped.
pub(super) struct Abandon(pub(super) CancelToken);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.cancel();
    }
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

impl LockBuilder<Lock> {
    /// A fair lock: tasks and processes take it in the order they asked, and a newcomer never
    /// takes it ahead of them; see [`crate::LockBuilder::fair`] (the same lock, on the queue
    /// engine's keys `fair-lock:{name}:*`, or `fair-lock:=name:*`).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "tickets").fair(true).build()?;
    /// let guard = lock.lock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(self, on: bool) -> Self {
        self.fair_or_not(on)
    }

    /// Checks the settings and makes the async handle. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Lock, Error> {
        let (settings, transport) = self.checked()?;
        let fair = fair_queue(&settings)?;
        let transport = transport.to_async();
        let inner = match &fair {
            Some((keys, ask)) => Inner::for_line(settings, transport, keys, ask),
            None => Inner::new(settings, transport),
        };
        Ok(Lock {
            inner: Arc::new(inner),
            turns: Turns::default(),
            fair: fair.map(Arc::new),
        })
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id stays out: anyone who knows it can release the lock.
        f.debug_struct("aio::Lock")
            .field("name", &self.inner.settings.name)
            .field("expire_ms", &self.inner.settings.expire_ms)
            .field("auto_renewal", &self.inner.settings.auto_renewal)
            .field("fencing", &self.inner.settings.fencing)
            .finish_non_exhaustive()
    }
}
