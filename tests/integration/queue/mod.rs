//! The queue engine and its primitives: the semaphore, the read-write lock, the election.

#[cfg(feature = "cluster")]
pub(crate) mod backends;
pub(crate) mod count;
pub(crate) mod deadlines;
pub(crate) mod election;
pub(crate) mod engine;
pub(crate) mod ops;
pub(crate) mod process;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
