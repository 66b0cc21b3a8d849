//! The async API, on tokio (feature `tokio`): the same locks, built the same way, with
//! futures that are safe to drop at any `.await`.
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

mod cache;
mod guard;
mod lock;
mod reset_all;

pub use cache::Cache;
pub use guard::{with_lock, LockGuard};
pub use lock::Lock;
pub use reset_all::reset_all;
