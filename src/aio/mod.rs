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
//! # The async API in detail
//!
//! The same names and semantics as the blocking API, on the same keys, scripts and outcome
//! rules (one driver serves both APIs). Every future is safe to drop at any `.await`, and
//! dropping it is how an async wait is cancelled. The calls run on the caller's tokio runtime,
//! either flavour, with its I/O and timers on (`#[tokio::main]` or `enable_all()`).
//!
//! Each handle is one type with both APIs, generic over its [`Runtime`](crate::Runtime):
//! `crate::Lock` is [`handle::Lock`](crate::handle::Lock)`<`[`Blocking`](crate::Blocking)`>`
//! and `aio::Lock` is `handle::Lock<`[`Tokio`]`>`, as `parking_lot`'s types are `lock_api`'s.
//! Code for both names `handle::Lock<R>` with `R: Runtime`; rustdoc shows each type's two APIs
//! on one page.
//!
//! ```toml
//! [dependencies]
//! redis-blpop-lock = { version = "0.1", features = ["tokio"] }
//! ```
//!
//! ```no_run
//! # async fn run() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::aio;
//!
//! # async fn export() {}
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//!
//! // Closure style: a 30 s expiry kept alive by a renewal task. If the lock is lost while the
//! // work runs, the work is dropped and the result is Error::Lost.
//! let answer = aio::with_lock(&client, "report", async { 6 * 7 }).await?;
//! assert_eq!(answer, 42);
//!
//! // Guard style. The guard is owned ('static + Send): it can move into tokio::spawn.
//! let lock = aio::Lock::builder(&client, "exports")
//!     .expire(Duration::from_secs(30))
//!     .auto_renewal(true)
//!     .build()?;
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(5)).await? {
//!     tokio::select! {
//!         () = export() => guard.unlock().await?,
//!         // Someone else may hold it now: stop writing.
//!         () = guard.when_lost() => eprintln!("lost the lock; export stopped"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `cargo run --example quickstart_async --features tokio` runs a longer tour.
//!
//! **Cancel-safety.** What each call leaves behind when its future is dropped at any `.await`
//! (a `tokio::time::timeout` that ran out, a `select!` that took another branch, an aborted
//! task):
//!
//! | call | dropped at any `.await` |
//! |---|---|
//! | `acquire`, `try_acquire`, `acquire_timeout`, `lock`, `try_lock`, `try_lock_for`, `try_lock_until` | no lock held, no wake-up lost. The acquire runs on a task of its own, which stops at its next step: a try already sent completes, and a lock it took after the drop is released, which wakes the next waiter; a signal brought to the dropped wait goes to the next waiter of the process, or back to the signal list |
//! | `release`, `LockGuard::unlock` | the release still happens: it is sent again from a task of its own, or, as the runtime ends, from the thread that drops it (releasing twice does no more than once) |
//! | `extend`, `LockGuard::extend` | the extension may or may not have happened; the handle keeps believing the old expiry, so `lost()` is never late |
//! | `reset` | it may or may not have reset; either way it deleted only the owner it read |
//! | `holder`, `locked`, `owner_id`, `LockGuard::when_lost` | nothing to leave: they only read |
//! | `with_lock`, `Lock::with_lock` | waiting: as `lock`; holding: the work is dropped and the lock released as by a dropped guard |
//! | `Cache::get_or_set`, `Cache::get_or_revalidate` | waiting for the entry's lock: as `lock`; computing: the computation is dropped and the lock released as by a dropped guard (a value being written may or may not be stored); a background refresh already started runs on |
//! | `reset_all` | it runs to its end on a task of its own |
//!
//! **Guards.** [`LockGuard`] owns what it needs, so it can move into `tokio::spawn`.
//! `unlock().await` releases and returns the error. Dropped without `unlock`, the guard sends
//! the release from a task spawned on the current runtime and logs any error, so a guard
//! dropped with a cancelled future still frees the lock; as in the blocking API, it releases
//! only its own acquisition. A runtime's end drops its tasks unrun, and the process may exit
//! right after it: so with no runtime left, or when the runtime ends before that task is done
//! (a guard dropped as `#[tokio::main]` returns, or held by a task the runtime drops), the
//! release is done on the thread that drops it, over a blocking connection, by the I/O timeout. `when_lost().await`
//! resolves once the acquisition is lost (a renewal found another id or failed until the
//! expiry, or the expiry passed), as its `lost_token()` is cancelled and never for a release,
//! to `select!` the work against (see [Told when a lock is
//! lost](crate#told-when-a-lock-is-lost-lost_token-when_lost-max_hold)). The renewal is a task holding
//! only a weak reference, run when a third of the expiry is left: it stops once the handle and
//! its guards are gone.
//!
//! **One handle's calls take turns.** The acquires and releases of one [`Lock`] run one
//! at a time: a call starts once the call before it on that handle has finished, dropped or not,
//! so it never finds that call's grant still on its way back and takes it for its own. A timed
//! call waits for its turn no longer than its timeout (`try_acquire` and `try_lock` at most
//! 250 ms) and is then `false` or `None`; a release waits for it at most 250 ms too. Handles are
//! cheap: tasks that should not wait on each other's calls each build their own.
//!
//! **Shared waiting.** Async tasks wait as blocking threads do, on their process's one waiting
//! connection (see [One waiting connection per
//! process](crate#one-waiting-connection-per-process)). On a [`redis::Client`], tries, releases
//! and reads go over one multiplexed connection per server. So a process holds one
//! multiplexed connection plus one waiting connection per server, however many tasks wait on
//! however many names. What it costs: the repository's `docs/performance.md`.
//!
//! **Fairness.** Within a process, the waiters of a name (tasks and threads) get the lock in
//! arrival order: a new acquisition does not try while a waiter of the process has been told
//! the lock is free and has not tried yet, though its first try can still take a lock released
//! before the hub told anyone. Between processes it is Redis's first come, first served among
//! blocked clients, but a process's waiters are one blocked client: after each signal its
//! connection blocks again behind the others, so processes take turns rather than every
//! waiter of the fleet being served in its own arrival order.
//!
//! **Backends.** On a [`redis::Client`] requests run natively on tokio. On a
//! [`redis::cluster::ClusterClient`], a `Sentinel` and a [`Quorum`](crate::Quorum) they run
//! on tokio's blocking pool over the blocking API's transports and connection pools, with no
//! multiplexing, and each name being waited on keeps one thread of that pool; waiting is
//! shared all the same.

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
