//! The async guard: an owned acquisition that releases on drop, and `with_lock`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::lock::release;
use super::turn::{self, Turn, Turns};
use super::Lock;
use crate::driver::tokio::Tokio;
use crate::driver::Inner;
use crate::{Backend, Error};

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
    /// Whether dropping it releases; not once it has been released or handed to its handle.
    armed: bool,
    /// The handle's turn, while the guard is on its way from the acquiring task to the caller.
    turn: Option<Turn>,
}

impl LockGuard {
    pub(crate) fn new(inner: Arc<Inner<Tokio>>, turns: Turns, epoch: u64, turn: Turn) -> Self {
        LockGuard {
            inner,
            turns,
            epoch,
            armed: true,
            turn: Some(turn),
        }
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

    /// Whether this acquisition is over or lost; see [`crate::Lock::lost`]. No round trip.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # let lock = redis_blpop_lock::aio::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock().await?;
    /// assert!(!guard.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.inner.lost_since(self.epoch)
    }

    /// Resolves once this acquisition is lost: a renewal found another id in the key or
    /// failed until the expiry passed, an [`extend`](Self::extend) found it not ours, or, with
    /// no renewal, the expiry passed. Never resolves for a lock without an expiry that nobody
    /// takes away. For `select!`ing work against losing the lock:
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
        self.inner.when_lost(self.epoch).await;
    }

    /// The acquisition's fencing token, when the lock was built with
    /// [`fencing(true)`](crate::LockBuilder::fencing); see [`crate::Lock::fencing_token`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let guard = lock.lock().await?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// Gives the lock a new expiry; see [`crate::Lock::extend`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "ledger")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// let guard = lock.lock().await?;
    /// guard.extend(Some(Duration::from_secs(60))).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        self.inner.extend(expire).await
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
        .expire(crate::guard::WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?;
    lock.with_lock(work).await
}
