//! `reset_all` for async callers.

use crate::{Backend, Error};

/// Deletes every lock; see [`crate::reset_all`].
pub async fn reset_all(backend: &(impl Backend + ?Sized)) -> Result<usize, Error> {
    let _ = backend;
    todo!()
}
