//! The handles, each generic over the [`Runtime`] it runs on, as `lock_api`'s are over their
//! raw lock: the crate root's names are these types on [`Blocking`], and [`crate::aio`]'s the
//! same types on `Tokio`, as `parking_lot` names `lock_api`'s. Rustdoc shows each type's two
//! APIs on one page.
//!
//! What both APIs share is written once, on `impl<R: Runtime>`; the methods that wait are
//! written once per API, each a line over the same `async` core: the blocking one runs it on
//! the caller's thread, the async one awaits it. Code for both APIs names a handle here:
//!
//! ```no_run
//! use redis_blpop_lock::{handle::Semaphore, Runtime};
//!
//! fn describe<R: Runtime>(semaphore: &Semaphore<R>) -> String {
//!     format!("{} ({} permits)", semaphore.name(), semaphore.permits())
//! }
//! ```

mod builder;
mod cache;
mod dogpile;
mod election;
mod hold;
mod lock;
mod rwlock;
mod semaphore;

pub use builder::LockBuilder;
pub use cache::Cache;
pub use election::{Election, Leadership, Watch};
pub use hold::Hold;
#[cfg(feature = "tokio")]
pub use lock::OwnedLockGuard;
pub use lock::{with_lock, ArcLockGuard, Lock, LockGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{ArcSemaphorePermit, Semaphore, SemaphorePermit};

pub use crate::driver::blocking::Blocking;
#[cfg(feature = "tokio")]
pub use crate::driver::tokio::Tokio;

/// The runtime a handle runs on: [`Blocking`] (the default: each call blocks the calling
/// thread in its round trips) or [`Tokio`] (feature `tokio`: each call is a future). Sealed:
/// the crate's two runtimes are its only ones.
///
/// Code written for both APIs names it as a bound:
///
/// ```no_run
/// use redis_blpop_lock::{handle::Semaphore, Runtime};
///
/// fn describe<R: Runtime>(semaphore: &Semaphore<R>) -> String {
///     format!("{} ({} permits)", semaphore.name(), semaphore.permits())
/// }
/// ```
// Sealed: the bound is the driver's trait, which no one outside the crate can name.
#[allow(private_bounds)]
pub trait Runtime: crate::driver::Runtime {}

impl Runtime for Blocking {}

#[cfg(feature = "tokio")]
impl Runtime for Tokio {}

#[cfg(feature = "tokio")]
pub(crate) use lock::WITH_LOCK_EXPIRE;

/// What a wait without a deadline that ended without a hold is: against the protocol.
pub(crate) fn ended() -> crate::Error {
    crate::Error::unexpected(&"a wait without deadline that ended")
}
