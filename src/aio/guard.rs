//! The async guard and `with_lock`.

use std::future::Future;
use std::time::Duration;

use crate::{Backend, Error};

/// An acquisition of an [`aio::Lock`](super::Lock): owned (`'static + Send`).
pub struct LockGuard {}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        todo!()
    }

    /// Whether this acquisition is over or lost.
    pub fn lost(&self) -> bool {
        todo!()
    }

    /// Resolves once this acquisition is lost.
    pub async fn when_lost(&self) {
        todo!()
    }

    /// The acquisition's fencing token.
    pub fn fencing_token(&self) -> Option<u64> {
        todo!()
    }

    /// Gives the lock a new expiry.
    pub async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        todo!("{expire:?}")
    }

    /// Releases now and returns the error.
    pub async fn unlock(self) -> Result<(), Error> {
        todo!()
    }
}

/// Runs `work` while holding the lock `name` (30 s expiry, renewed).
pub async fn with_lock<F: Future>(
    backend: &(impl Backend + ?Sized),
    name: impl Into<String>,
    work: F,
) -> Result<F::Output, Error> {
    let _ = (backend.to_owned(), name.into(), work);
    todo!()
}
