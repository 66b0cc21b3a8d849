//! [`crate::inspect`]'s views of the locks for async callers.

use std::time::Duration;

use crate::backend::transport_of;
use crate::inspect::{Held, Primitive, Queue};
use crate::{Backend, Error};

/// Every held lock, sorted by name: the blocking [`crate::inspect::holders`], run on tokio's
/// blocking pool (an operator's view, whose `SCAN` over every primary is written once).
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
    let transport = transport_of(backend)?;
    blocking(move || crate::inspect::holders_on(&*transport, io_timeout)).await
}

/// Lock `name`'s holder, if it is held: the blocking [`crate::inspect::holder`], run on
/// tokio's blocking pool.
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
    let transport = transport_of(backend)?;
    let name = name.to_owned();
    blocking(move || crate::inspect::holder_on(&*transport, &name, io_timeout)).await
}

/// Every semaphore, fair lock and read-write lock with a holder or a waiter: the blocking
/// [`crate::inspect::queues`], run on tokio's blocking pool.
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
    let transport = transport_of(backend)?;
    blocking(move || crate::inspect::queues::queues_on(&*transport, io_timeout)).await
}

/// The holders and the line of the `kind` primitive `name`: the blocking
/// [`crate::inspect::queue`], run on tokio's blocking pool.
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
    let transport = transport_of(backend)?;
    let name = name.to_owned();
    blocking(move || crate::inspect::queues::queue_on(&*transport, kind, &name, io_timeout)).await
}

/// Runs `read` on the caller's runtime's blocking pool.
async fn blocking<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    super::runtime()?
        .spawn_blocking(read)
        .await
        .unwrap_or_else(|e| {
            log::error!("an inspection failed on its thread: {e}");
            Err(Error::invalid("the inspection's thread failed"))
        })
}
