//! The async [`Lock`] and its guard: the lock shell ([`crate::shell::lock`]) on tokio, and
//! what only futures need: a handle's turns, a guard that owns its acquisition, and
//! `with_lock` over a future.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::turn::{self, Turn, Turns};
use crate::driver::tokio::Tokio;
use crate::driver::{Inner, Runtime, Taken};
use crate::protocol::lease::Wait;
use crate::{Backend, CancelToken, Error};

crate::shell::for_api!(lock, aio;
    guard = [LockGuard],
    guards = [LockGuard => "lock", "redis_blpop_lock::aio::Lock::new(&client, \"tickets\")?";],
);
crate::shell::for_api!(lock::lock_builder, aio);

/// A distributed lock on one Redis key, `lock:<name>`, for async code: the same lock as
/// [`crate::Lock`] (the two wake each other), with the same methods as futures.
///
/// Built the same way, from the same [`LockBuilder`](crate::LockBuilder). Waiting tasks in one process share one
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
}

impl Lock {
    pub(crate) fn from_inner(inner: Arc<Inner<Tokio>>) -> Lock {
        Lock {
            inner,
            turns: Turns::default(),
        }
    }

    async fn release_held(&self) -> Result<(), Error> {
        release(&self.inner, &self.turns, None, None).await
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

    /// The acquire path, run on a task of its own so that a grant that lands after this
    /// future is dropped is still released: dropping it cancels the task's wait, and the
    /// task's guard, if it took the lock, is dropped with the task's output.
    ///
    /// It runs in the handle's turn, which goes with the guard until this future has it: a
    /// guard dropped with the task's output releases before the handle's next call starts.
    async fn guard(&self, wait: Wait) -> Result<Option<LockGuard>, Error> {
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
        let inner = Arc::clone(&self.inner);
        let turns = self.turns.clone();
        let acquire = move |cancel: CancelToken| async move {
            let taken = inner.take(wait, &cancel).await?;
            Ok(taken.map(|taken| LockGuard::new(inner, turns, taken, turn)))
        };
        let settings = &self.inner.settings;
        let guard = Tokio::apart(&settings.name, &settings.cancel, acquire).await?;
        Ok(guard.map(LockGuard::end_turn))
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

/// One acquisition of an [`aio::Lock`](Lock), owned: `'static` and `Send`, so it can move into
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
pub struct LockGuard {
    inner: Arc<Inner<Tokio>>,
    turns: Turns,
    epoch: u64,
    /// Cancelled when the acquisition is lost.
    notice: CancelToken,
    /// Whether dropping it releases; not once it has been released or handed to its handle.
    armed: bool,
    /// The handle's turn, while the guard is on its way from the acquiring task to the caller.
    turn: Option<Turn>,
}

impl LockGuard {
    pub(crate) fn new(inner: Arc<Inner<Tokio>>, turns: Turns, taken: Taken, turn: Turn) -> Self {
        LockGuard {
            inner,
            turns,
            epoch: taken.epoch,
            notice: taken.notice,
            armed: true,
            turn: Some(turn),
        }
    }

    fn inner(&self) -> &Arc<Inner<Tokio>> {
        &self.inner
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
        self.inner.name()
    }

    /// Resolves once this acquisition is lost, as its [`lost_token`](Self::lost_token) is
    /// cancelled (see there for when): a renewal found another id in the key or failed until
    /// the expiry passed, an [`extend`](Self::extend) found it not ours, the expiry passed
    /// without a renewal, or [`max_hold`](crate::LockBuilder::max_hold) was reached. Never
    /// resolves while the lock is held, nor for a release, nor for a lock without an expiry
    /// that nobody takes away. For `select!`ing work against losing the lock:
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "ledger")
    ///     .expire(Duration::from_secs(10))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => guard.unlock().await?,
    ///     () = guard.when_lost() => println!("lost the lock: stopped writing"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.lost_token().cancelled().await;
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
        release(&self.inner, &self.turns, turn, Some(self.epoch)).await
    }

    /// Runs `work` under this acquisition, dropping it if the lock is lost; then releases.
    pub(crate) async fn run<F: Future>(self, work: F) -> Result<F::Output, Error> {
        let output = tokio::select! {
            output = work => output,
            () = self.when_lost() => {
                // Not ours any more: dropping the guard releases only if it still is.
                return Err(self.inner.error(|name| Error::Lost { name }));
            }
        };
        self.unlock().await?;
        Ok(output)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let turn = self.release_turn();
        turn::release_unattended(
            Arc::clone(&self.inner),
            self.turns.clone(),
            turn,
            Some(self.epoch),
        );
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::LockGuard")
            .field("name", &self.inner.name())
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

/// Runs `work` while holding the lock `name`, and returns its output: the async
/// [`crate::with_lock`], with the same safe defaults (a 30 s expiry kept alive by a renewal
/// task, a wait as long as it takes). If the lock is lost while `work` runs, `work` is dropped
/// and the result is [`Error::Lost`]; dropping this future drops `work` and releases.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let total = redis_blpop_lock::aio::with_lock(&client, "ledger", async { 2 + 2 }).await?;
/// assert_eq!(total, 4);
/// # Ok(())
/// # }
/// ```
pub async fn with_lock<F: Future>(
    backend: &(impl Backend + ?Sized),
    name: impl Into<String>,
    work: F,
) -> Result<F::Output, Error> {
    let lock = Lock::builder(backend, name)
        .expire(crate::shell::lock::WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?;
    lock.with_lock(work).await
}
