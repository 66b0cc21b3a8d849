//! An operator's view of the fair queue engine's primitives (semaphores, fair locks,
//! read-write locks): who holds, and who waits in what order. Also the `SCAN` over every
//! primary's queue keys that [`reset_all`](crate::reset_all) shares.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::{deadlines, each_batch};
use crate::backend::{transport_of, Backend};
use crate::protocol::keys::QueueKeys;
use crate::protocol::primitive::Primitive;
use crate::protocol::queue;
use crate::transport::{send_repeatable, Transport};
use crate::Error;

pub use crate::protocol::primitive::WRITER_UNITS;

/// A queue-engine primitive that [`queues`] or [`queue`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queue {
    /// Which kind of primitive.
    pub kind: Primitive,
    /// Its name, as its handle takes it.
    pub name: String,
    /// The units its holders use (a semaphore's permits; see [`Primitive::RwLock`]).
    pub used: u64,
    /// Its holders with a live lease, by lease expiry (no expiry last).
    pub holders: Vec<QueueHolder>,
    /// Its live waiters, first in line first.
    pub waiters: Vec<QueueWaiter>,
}

/// A holder of a queue-engine primitive.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueHolder {
    /// The acquisition's id (converted lossily if it is not UTF-8).
    pub id: String,
    /// How many units it holds.
    pub units: u64,
    /// What is left of its lease; `None` when it has no expiry.
    pub ttl: Option<Duration>,
    /// Its fencing token.
    pub token: u64,
}

/// A waiter in a queue-engine primitive's line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueWaiter {
    /// The acquisition's id (converted lossily if it is not UTF-8).
    pub id: String,
    /// How many units it asks for.
    pub units: u64,
    /// When it leaves the line unless it heartbeats first (a stopped or killed waiter).
    pub lapses_in: Duration,
}

/// Every semaphore, fair lock and read-write lock that has a holder or a waiter, sorted by
/// kind and name.
///
/// Keys are found with `SCAN` on every primary, a batch at a time, and each primitive is
/// read in one script call (`scripts/queue_state.lua`), which writes nothing, so holders and
/// line are one moment's. Each round trip has a deadline of `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// for queue in redis_blpop_lock::inspect::queues(&client, Duration::from_secs(5))? {
///     println!(
///         "{:?} {}: {} holders, {} waiting",
///         queue.kind,
///         queue.name,
///         queue.holders.len(),
///         queue.waiters.len()
///     );
/// }
/// # Ok(())
/// # }
/// ```
pub fn queues(
    backend: &(impl Backend + ?Sized),
    io_timeout: Duration,
) -> Result<Vec<Queue>, Error> {
    queues_on(&*transport_of(backend)?, io_timeout)
}

/// [`queues`] on `transport`.
pub(crate) fn queues_on(
    transport: &dyn Transport,
    io_timeout: Duration,
) -> Result<Vec<Queue>, Error> {
    let deadline = deadlines(io_timeout)?;
    let mut found = BTreeMap::new();
    each_queue(transport, &deadline, &mut |keys_to, kind, name| {
        let queue = read(keys_to, kind, name, deadline())?;
        if !queue.holders.is_empty() || !queue.waiters.is_empty() {
            found.insert((kind, queue.name.clone()), queue);
        }
        Ok(())
    })?;
    Ok(found.into_values().collect())
}

/// The holders and the line of the `kind` primitive `name`, read in one script call without a
/// `SCAN`: empty when it is free and nobody waits. The round trip has a deadline of
/// `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
/// use redis_blpop_lock::inspect::{self, Primitive};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backups = inspect::queue(&client, Primitive::Semaphore, "backups", Duration::from_secs(5))?;
/// println!("{} permits in use, {} waiting", backups.used, backups.waiters.len());
/// # Ok(())
/// # }
/// ```
pub fn queue(
    backend: &(impl Backend + ?Sized),
    kind: Primitive,
    name: &str,
    io_timeout: Duration,
) -> Result<Queue, Error> {
    queue_on(&*transport_of(backend)?, kind, name, io_timeout)
}

/// [`queue`] on `transport`.
pub(crate) fn queue_on(
    transport: &(dyn Transport + 'static),
    kind: Primitive,
    name: &str,
    io_timeout: Duration,
) -> Result<Queue, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the name is empty"));
    }
    let deadline = deadlines(io_timeout)?;
    read(transport, kind, name, deadline())
}

/// Reads the state of the `kind` primitive `name` through `keys_to`.
fn read(
    keys_to: &(dyn Transport + 'static),
    kind: Primitive,
    name: &str,
    deadline: Instant,
) -> Result<Queue, Error> {
    let keys = QueueKeys::new(kind, name);
    let reply = send_repeatable(keys_to, &queue::state(&keys), deadline)?;
    let state = queue::parse_state(&keys, reply.first())?;
    let text = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
    Ok(Queue {
        kind,
        name: name.into(),
        used: state.used,
        holders: state
            .holders
            .into_iter()
            .map(|h| QueueHolder {
                id: text(&h.id),
                units: h.units,
                ttl: h.left,
                token: h.token,
            })
            .collect(),
        waiters: state
            .waiters
            .into_iter()
            .map(|w| QueueWaiter {
                id: text(&w.id),
                units: w.units,
                lapses_in: w.lapses_in,
            })
            .collect(),
    })
}

/// What [`each_queue`] runs on each primitive: where to send requests about it, its kind and
/// its name.
pub(crate) type Visit<'a> =
    dyn FnMut(&(dyn Transport + 'static), Primitive, &str) -> Result<(), Error> + 'a;

/// Runs `visit` once on every queue-engine primitive that has keys other than its fencing
/// counter and signal lists, on every primary.
pub(crate) fn each_queue(
    transport: &dyn Transport,
    deadline: &dyn Fn() -> Instant,
    visit: &mut Visit<'_>,
) -> Result<(), Error> {
    let mut seen = BTreeSet::new();
    for kind in Primitive::ALL {
        each_batch(
            transport,
            &kind.pattern(),
            deadline,
            &mut |keys_to, batch, primary| {
                for key in batch {
                    // A primitive's several keys come in the same batch or a later one.
                    match QueueKeys::of_key(&key) {
                        Some((kind, name)) if seen.insert((primary, kind, name.clone())) => {
                            visit(keys_to, kind, &name)?
                        }
                        _ => {}
                    }
                }
                Ok(())
            },
        )?;
    }
    Ok(())
}

/// Ends the hold of `holder` (every holder's with `None`) on the `kind` primitive `name`,
/// whatever its lease, and hands the units on to the waiters first in line, as a release
/// would (`scripts/queue_reset.lua`); returns how many holders it removed. A removed
/// holder's handle finds out at its next renewal or release, and its `lost()` says so.
///
/// `permits` is a semaphore's count (the server does not keep it): one too low only delays
/// the next waiters until they next ask (their heartbeat, about 1 s); one too high lets in
/// more than there are. A fair lock has 1 and a read-write lock [`WRITER_UNITS`], whatever
/// `permits` says. Safe to send again. The round trip has a deadline of `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
/// use redis_blpop_lock::inspect::{self, Primitive};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let io_timeout = Duration::from_secs(5);
/// let removed =
///     inspect::reset_queue(&client, Primitive::Semaphore, "backups", None, 4, io_timeout)?;
/// println!("removed {removed} holders");
/// # Ok(())
/// # }
/// ```
pub fn reset_queue(
    backend: &(impl Backend + ?Sized),
    kind: Primitive,
    name: &str,
    holder: Option<&str>,
    permits: u32,
    io_timeout: Duration,
) -> Result<u64, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the name is empty"));
    }
    // The script reads an empty id as every holder.
    if holder == Some("") {
        return Err(Error::invalid("the holder id is empty"));
    }
    let capacity = kind.capacity(permits)?;
    let deadline = deadlines(io_timeout)?;
    let keys = QueueKeys::new(kind, name);
    let request = queue::reset(&keys, holder, capacity);
    let reply = send_repeatable(&*transport_of(backend)?, &request, deadline())?;
    let removed = queue::parse_reset(&keys, reply.first())?;
    log::info!("{:?} {name:?}: reset {removed} holders", kind);
    Ok(removed)
}
