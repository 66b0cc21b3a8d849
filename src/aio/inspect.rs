//! [`crate::inspect`]'s views of the locks for async callers: the same reads, awaited on the
//! async transport.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::transport_of;
use crate::inspect::{Held, Primitive, Queue};
use crate::transport::aio::AsyncTransport;
use crate::{Backend, Error};

/// Every held lock, sorted by name: [`crate::inspect::holders`], as a future.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// for held in redis_blpop_lock::aio::inspect::holders(&client, Duration::from_secs(5)).await? {
///     println!("{} is held by {}, token {:?}", held.name, held.id, held.token);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn holders(
    backend: &(impl Backend + ?Sized),
    io_timeout: Duration,
) -> Result<Vec<Held>, Error> {
    crate::inspect::holders_on(&*transport(backend)?, io_timeout).await
}

/// Lock `name`'s holder, if it is held: [`crate::inspect::holder`], as a future.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let io_timeout = Duration::from_secs(5);
/// if let Some(held) =
///     redis_blpop_lock::aio::inspect::holder(&client, "nightly-report", io_timeout).await?
/// {
///     println!("held by {} for {:?}", held.id, held.ttl);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn holder(
    backend: &(impl Backend + ?Sized),
    name: &str,
    io_timeout: Duration,
) -> Result<Option<Held>, Error> {
    crate::inspect::holder_on(&*transport(backend)?, name, io_timeout).await
}

/// Every semaphore, fair lock and read-write lock with a holder or a waiter:
/// [`crate::inspect::queues`], as a future.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// for queue in redis_blpop_lock::aio::inspect::queues(&client, Duration::from_secs(5)).await? {
///     println!("{:?} {}: {} waiting", queue.kind, queue.name, queue.waiters.len());
/// }
/// # Ok(())
/// # }
/// ```
pub async fn queues(
    backend: &(impl Backend + ?Sized),
    io_timeout: Duration,
) -> Result<Vec<Queue>, Error> {
    crate::inspect::queues::queues_on(&*transport(backend)?, io_timeout).await
}

/// The holders and the line of the `kind` primitive `name`: [`crate::inspect::queue`], as a
/// future.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
/// use redis_blpop_lock::inspect::Primitive;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let io_timeout = Duration::from_secs(5);
/// let backups =
///     redis_blpop_lock::aio::inspect::queue(&client, Primitive::Semaphore, "backups", io_timeout)
///         .await?;
/// println!("{} permits in use", backups.used);
/// # Ok(())
/// # }
/// ```
pub async fn queue(
    backend: &(impl Backend + ?Sized),
    kind: Primitive,
    name: &str,
    io_timeout: Duration,
) -> Result<Queue, Error> {
    crate::inspect::queues::queue_on(&*transport(backend)?, kind, name, io_timeout).await
}

/// The async transport to `backend`'s servers, whose futures the caller's runtime runs.
pub(super) fn transport(
    backend: &(impl Backend + ?Sized),
) -> Result<Arc<dyn AsyncTransport>, Error> {
    let transport = transport_of(backend)?;
    super::runtime()?;
    Ok(transport.to_async())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::time::Duration;

    use crate::inspect::Primitive;

    /// The futures can move to another thread (`tokio::spawn`), as a task's must.
    #[test]
    fn the_futures_can_be_sent() {
        fn sendable<F: Future + Send>(_: F) {}
        let client = redis::Client::open("redis://127.0.0.1/").unwrap();
        let io_timeout = Duration::from_secs(1);
        sendable(super::holders(&client, io_timeout));
        sendable(super::holder(&client, "a", io_timeout));
        sendable(super::queues(&client, io_timeout));
        sendable(super::queue(&client, Primitive::Semaphore, "a", io_timeout));
        sendable(crate::aio::reset_all(&client));
    }
}
