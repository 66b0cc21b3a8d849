//! Distributed locks on Redis, modeled on (and wire-compatible with) python-redis-lock.
//!
//! A lock is the key `lock:<name>` holding its owner's random id, taken with `SET NX` (with an
//! optional expiry) and released by a Lua script that checks the owner. Waiters never poll:
//! a failed acquire blocks in `BLPOP lock-signal:<name>`, and a release pushes one element to
//! that list, waking exactly one waiter. Every `BLPOP` is also bounded by the holder's remaining
//! expiry, so when a holder crashes the next waiter takes the lock as soon as it expires.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_lock::Error> {
//! use std::time::Duration;
//! use redis_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//!
//! // Closure style.
//! redis_lock::with_lock(&client, "report", || println!("only one of us at a time"))?;
//!
//! // Guard style, with an expiry kept alive by a renewal thread.
//! let lock = Lock::builder(&client, "report")
//!     .expire(Duration::from_secs(30))
//!     .auto_renewal(true)
//!     .build()?;
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
//!     // ... work; `guard.lost()` says if the lock slipped away ...
//!     guard.unlock()?;
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod builder;
mod cache;
mod cancel;
mod error;
mod guard;
mod id;
mod lock;
mod protocol;
mod renew;
mod reset_all;
mod settings;
mod transport;

pub use builder::LockBuilder;
pub use cache::Cache;
pub use cancel::CancelToken;
pub use error::Error;
pub use guard::{with_lock, ArcLockGuard, LockGuard};
pub use lock::{Holder, Lock};
pub use reset_all::reset_all;
