//! python-redis-lock's lock, the fair lock, the cache and the loss notice: the blocking API's
//! suites.

pub(crate) mod api;
pub(crate) mod cache;
pub(crate) mod fair;
pub(crate) mod fencing;
pub(crate) mod interop;
pub(crate) mod lease;
pub(crate) mod loss_notice;
pub(crate) mod outcomes;
pub(crate) mod renewals;
pub(crate) mod threads;
pub(crate) mod waiting;
