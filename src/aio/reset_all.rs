//! `reset_all` for async callers.

use crate::backend::transport_of;
use crate::{Backend, Error};

/// Deletes every lock and ends every hold and line of the queue primitives, waking their
/// waiters; returns how many holds it ended. The
/// blocking [`crate::reset_all`], run on tokio's blocking pool: an operator's tool, whose
/// `SCAN` over the keyspace is written once.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let freed = redis_blpop_lock::aio::reset_all(&client).await?;
/// println!("reset {freed} holds");
/// # Ok(())
/// # }
/// ```
pub async fn reset_all(backend: &(impl Backend + ?Sized)) -> Result<usize, Error> {
    let transport = transport_of(backend)?;
    let runtime = super::runtime()?;
    runtime
        .spawn_blocking(move || crate::reset_all::on(&*transport))
        .await
        .unwrap_or_else(|e| {
            log::error!("reset_all failed on its thread: {e}");
            Err(Error::invalid("reset_all's thread failed"))
        })
}
