//! The blocking API, re-exported at the crate root: each handle blocks the calling thread in
//! its round trips. The same files as [`crate::aio`], each the same shell on the blocking
//! runtime.

mod cache;
mod election;
pub(crate) mod lock;
mod rwlock;

pub use cache::Cache;
pub use election::{Election, Leadership, Watch};
pub use lock::{with_lock, ArcLockGuard, Lock, LockGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
