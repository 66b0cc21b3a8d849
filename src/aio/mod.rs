//! The async API, on tokio (feature `tokio`): the same locks as the crate root's, built with
//! the same [`LockBuilder`](crate::LockBuilder), with futures that are safe to drop at any
//! `.await`.
//!
//! ```no_run
//! # async fn run() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::aio::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = Lock::builder(&client, "report")
//!     .expire(Duration::from_secs(30))
//!     .auto_renewal(true)
//!     .build()?;
//! let guard = lock.lock().await?;
//! // ... work; `guard.lost()` says if the lock slipped away ...
//! guard.unlock().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The queue primitives have their async twins too: [`Semaphore`], [`RwLock`] and the fair
//! lock (`Lock::builder(..).fair(true)`), on the same keys as the blocking ones (the two serve
//! each other in turn). Each waiting task blocks in `BLPOP` on a list of its own; a future
//! dropped while it waits leaves the queue and passes on a grant that came meanwhile, and a
//! permit or guard dropped unreleased is given back from a task, or, as the runtime ends, from
//! the dropping thread.
//!
//! ```no_run
//! # async fn run() -> Result<(), redis_blpop_lock::Error> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let exports = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
//! let permit = exports.acquire().await?;
//! // ... at most four tasks or processes export at once ...
//! permit.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! What each future does when it is dropped, what a dropped guard does, how tasks share one
//! `BLPOP` per name and which connections a process holds: the crate docs'
//! [Async (tokio)](crate#async-tokio) section.

pub mod inspect;
mod reset_all;

pub use crate::handle::Tokio;

use std::future::Future;

use crate::{Backend, Error};

/// A distributed lock, async: [`handle::Lock`](crate::handle::Lock) on [`Tokio`].
pub type Lock = crate::handle::Lock<Tokio>;
/// One acquisition of an async [`Lock`], owned: `'static` and `Send`.
pub type LockGuard = crate::handle::OwnedLockGuard;
pub use reset_all::reset_all;

/// A semaphore, async: [`handle::Semaphore`](crate::handle::Semaphore) on [`Tokio`].
pub type Semaphore = crate::handle::Semaphore<Tokio>;
/// A permit of an async [`Semaphore`].
pub type SemaphorePermit<'a> = crate::handle::SemaphorePermit<'a, Tokio>;
/// An async permit that owns an `Arc` of its [`Semaphore`].
pub type ArcSemaphorePermit = crate::handle::ArcSemaphorePermit<Tokio>;
/// A read-write lock, async: [`handle::RwLock`](crate::handle::RwLock) on [`Tokio`].
pub type RwLock = crate::handle::RwLock<Tokio>;
/// A read lock of an async [`RwLock`].
pub type RwLockReadGuard<'a> = crate::handle::RwLockReadGuard<'a, Tokio>;
/// The write lock of an async [`RwLock`].
pub type RwLockWriteGuard<'a> = crate::handle::RwLockWriteGuard<'a, Tokio>;
/// A dogpile cache, async: [`handle::Cache`](crate::handle::Cache) on [`Tokio`].
pub type Cache = crate::handle::Cache<Tokio>;
/// A leader election, async: [`handle::Election`](crate::handle::Election) on [`Tokio`].
pub type Election = crate::handle::Election<Tokio>;
/// A term of office won through an async [`Election`].
pub type Leadership = crate::handle::Leadership<Tokio>;
/// An async watch of an [`Election`]'s leader.
pub type Watch = crate::handle::Watch<Tokio>;

use crate::driver::tokio::runtime;

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
        .expire(crate::handle::WITH_LOCK_EXPIRE)
        .auto_renewal(true)
        .build()?;
    lock.with_lock(work).await
}
