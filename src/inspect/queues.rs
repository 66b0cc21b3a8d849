//! An operator's view of the fair queue engine's primitives (semaphores, fair locks,
//! read-write locks, elections): who holds, and who waits in what order. Also the `SCAN` over every
//! primary's queue keys that [`reset_all`](crate::reset_all) shares.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::{Batches, Deadlines};
use crate::backend::{transport_of, Backend};
use crate::observe;
use crate::protocol::election;
use crate::protocol::keys::QueueKeys;
use crate::protocol::primitive::Primitive;
use crate::protocol::queue;
use crate::transport::send::{now, send_repeatable, AnyTransport};
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

/// Every semaphore, fair lock, read-write lock and election that has a holder or a waiter,
/// sorted by kind and name (an election's holder is its leader, its token the term).
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
    now(queues_on(&*transport_of(backend)?, io_timeout))
}

/// [`queues`] on `transport`.
pub(crate) async fn queues_on<T: AnyTransport + ?Sized>(
    transport: &T,
    io_timeout: Duration,
) -> Result<Vec<Queue>, Error> {
    let deadline = Deadlines::new(io_timeout)?;
    let mut found = BTreeMap::new();
    let mut primitives = Primitives::new(transport, deadline);
    while let Some((kind, name, primary)) = primitives.next().await? {
        let keys_to = primitives.keys_to(primary);
        let queue = read(keys_to, kind, &name, deadline.next()).await?;
        if !queue.holders.is_empty() || !queue.waiters.is_empty() {
            found.insert((kind, queue.name.clone()), queue);
        }
    }
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
    now(queue_on(&*transport_of(backend)?, kind, name, io_timeout))
}

/// [`queue`] on `transport`.
pub(crate) async fn queue_on<T: AnyTransport + ?Sized>(
    transport: &T,
    kind: Primitive,
    name: &str,
    io_timeout: Duration,
) -> Result<Queue, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the name is empty"));
    }
    let deadline = Deadlines::new(io_timeout)?;
    read(transport, kind, name, deadline.next()).await
}

/// Reads the state of the `kind` primitive `name` through `keys_to`.
async fn read<T: AnyTransport + ?Sized>(
    keys_to: &T,
    kind: Primitive,
    name: &str,
    deadline: Instant,
) -> Result<Queue, Error> {
    let keys = QueueKeys::new(kind, name);
    let reply = send_repeatable(keys_to, &queue::state(&keys), deadline).await?;
    let state = queue::parse_state(&keys, reply.first())?;
    if let Some(counted) = state.counted {
        observe::count_repaired(kind.word(), name, counted, state.used);
    }
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

/// Every queue-engine primitive that has keys other than its fencing counter and signal
/// lists, on every primary, kind after kind.
pub(super) struct Primitives<'a, T: ?Sized> {
    transport: &'a T,
    deadline: Deadlines,
    /// The kinds still to scan for.
    kinds: std::array::IntoIter<Primitive, 4>,
    /// The scan for the kind under way (at first, over no primaries).
    batches: Batches<'a, T>,
    /// The primitives of its last batch, still to hand out.
    ready: VecDeque<(Primitive, String, usize)>,
    /// Those handed out, by the number of the primary they were found on.
    seen: BTreeSet<(usize, Primitive, String)>,
}

impl<'a, T: AnyTransport + ?Sized> Primitives<'a, T> {
    /// Every primitive on every primary of `transport`, each `SCAN` step by its own deadline.
    pub(super) fn new(transport: &'a T, deadline: Deadlines) -> Self {
        Primitives {
            transport,
            deadline,
            kinds: Primitive::ALL.into_iter(),
            batches: Batches::over(transport, Vec::new(), String::new(), deadline),
            ready: VecDeque::new(),
            seen: BTreeSet::new(),
        }
    }

    /// The next primitive: its kind, its name and the number of the primary it was found on.
    pub(super) async fn next(&mut self) -> Result<Option<(Primitive, String, usize)>, Error> {
        loop {
            if let Some(found) = self.ready.pop_front() {
                return Ok(Some(found));
            }
            if let Some((batch, primary)) = self.batches.next().await? {
                for key in batch {
                    // A primitive's several keys come in the same batch or a later one.
                    match QueueKeys::of_key(&key) {
                        Some((kind, name)) if self.seen.insert((primary, kind, name.clone())) => {
                            self.ready.push_back((kind, name, primary))
                        }
                        _ => {}
                    }
                }
                continue;
            }
            let Some(kind) = self.kinds.next() else {
                return Ok(None);
            };
            self.batches = Batches::new(self.transport, kind.pattern(), self.deadline).await?;
        }
    }

    /// Where to send requests about the primitive [`next`](Self::next) found on primary
    /// number `primary`.
    pub(super) fn keys_to(&self, primary: usize) -> &T {
        self.batches.keys_to(primary)
    }
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
    let deadline = Deadlines::new(io_timeout)?;
    let keys = QueueKeys::new(kind, name);
    let request = queue::reset(&keys, holder, capacity);
    let transport = transport_of(backend)?;
    let reply = now(send_repeatable(&*transport, &request, deadline.next()))?;
    let removed = queue::parse_reset(&keys, reply.first())?;
    if kind == Primitive::Election {
        // With nobody granted in the leader's place, its watchers hear that nobody leads.
        let vacate = election::vacate(&keys, None);
        let reply = now(send_repeatable(&*transport, &vacate, deadline.next()))?;
        queue::parse_held(&keys, reply.first())?;
    }
    log::info!("{:?} {name:?}: reset {removed} holders", kind);
    Ok(removed)
}
