//! The blocking API, re-exported at the crate root: each handle blocks the calling thread in
//! its round trips. The same files as [`crate::aio`], each the same shell on the blocking
//! runtime.

pub(crate) mod lock;

pub use lock::{with_lock, ArcLockGuard, Lock, LockGuard};
