//! `reset_all` for async callers.

use crate::{Backend, Error};

/// Deletes every lock and ends every hold and line of the queue primitives, waking their
/// waiters; returns how many holds it ended: [`crate::reset_all`], as a future, run on a task
/// of its own, so that it runs to its end even if this future is dropped.
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
    let transport = super::inspect::transport(backend)?;
    let reset = async move { crate::inspect::reset_all::on(&*transport).await };
    super::runtime()?.spawn(reset).await.unwrap_or_else(|e| {
        log::error!("reset_all failed on its task: {e}");
        Err(Error::invalid("reset_all's task failed"))
    })
}
