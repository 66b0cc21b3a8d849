//! An operator's view of every lock, and the clearing of a key that is not a lock: what
//! `redis-lock list`, `redis-lock top` and `redis-lock reset --force` stand on. The
//! semaphores, fair locks, read-write locks and elections: [`queues`] and [`queue`]. The same views for
//! async callers: `aio::inspect` (feature `tokio`).

// Written once for both APIs, with `reset_all`: each view is an `async fn` over either
// transport (`AnyTransport`), which the blocking functions here run with `now` (a blocking
// transport's futures are ready when first polled) and `aio::inspect` awaits. What must reach
// every primary walks the list `AnyTransport::list_primaries` gives: a transport of the
// caller's kind to each primary, so an async caller scans a cluster's primaries, or a quorum's
// servers, without blocking a thread of its runtime.

pub(crate) mod queues;
pub(crate) mod reset_all;

pub use crate::protocol::primitive::Primitive;
pub use queues::{queue, queues, reset_queue, Queue, QueueHolder, QueueWaiter, WRITER_UNITS};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{transport_of, Backend};
use crate::config::settings::{millis, DEFAULT_SIGNAL_EXPIRE};
use crate::protocol::admin::{self, Holding};
use crate::protocol::keys::{self, Keys};
use crate::protocol::lock::{self, Pttl, Reset};
use crate::protocol::quorum::majority;
use crate::transport::eviction;
use crate::transport::send::{now, send_repeatable, AnyTransport};
use crate::transport::Primary;
use crate::Error;

/// How many keys one `SCAN` step asks for, and so the most one request reads or resets.
const SCAN_BATCH: usize = 1000;

/// A lock that [`holders`] or [`holder`] found held.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The lock's name, as [`Lock::new`](crate::Lock::new) takes it (converted lossily if
    /// its key is not UTF-8).
    pub name: String,
    /// The owner id in `lock:<name>` (converted lossily if it is not UTF-8).
    pub id: String,
    /// What is left of its expiry; `None` when it has none.
    pub ttl: Option<Duration>,
    /// The last fencing token handed out on this lock (`lock-fence:<name>`), which is the
    /// holder's when it took the lock with [`fencing(true)`](crate::LockBuilder::fencing);
    /// `None` when the lock has never been taken with fencing (or on a
    /// [`Quorum`](crate::Quorum), which has none). Read with the owner, in one round trip.
    pub token: Option<u64>,
}

/// Every held lock (every string key `lock:*`), sorted by name.
///
/// Keys are found with `SCAN` on every primary (on a cluster, each of its primaries), a
/// batch at a time, and each batch's owners and TTLs are read in one `MULTI`, so a large
/// keyspace never blocks the server. On a [`Quorum`](crate::Quorum) a lock is listed when a
/// majority of its servers hold it under the same id, with the shortest TTL among them, as
/// [`Lock::holder`](crate::Lock::holder) reads it; every server must answer. Keys under
/// `lock:*` that are not strings are not locks and are left out. Each round trip has a
/// deadline of `io_timeout` (the locks' default is 5 s).
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// for held in redis_blpop_lock::inspect::holders(&client, Duration::from_secs(5))? {
///     println!("{} is held by {} for {:?}", held.name, held.id, held.ttl);
/// }
/// # Ok(())
/// # }
/// ```
pub fn holders(
    backend: &(impl Backend + ?Sized),
    io_timeout: Duration,
) -> Result<Vec<Held>, Error> {
    now(holders_on(&*transport_of(backend)?, io_timeout))
}

/// [`holders`] on `transport`.
pub(crate) async fn holders_on<T: AnyTransport + ?Sized>(
    transport: &T,
    io_timeout: Duration,
) -> Result<Vec<Held>, Error> {
    let deadline = Deadlines::new(io_timeout)?;
    let tags = transport.blocking().hash_tags();
    // Per lock key, what each primary that has it holds (a key `SCAN` returns twice counts
    // once).
    let mut seen = Seen::new();
    let mut batches = Batches::new(transport, keys::LOCK_PATTERN.into(), deadline).await?;
    while let Some((batch, primary)) = batches.next().await? {
        let keys_to = batches.keys_to(primary);
        read(keys_to, batch, primary, deadline, &mut seen).await?;
    }
    Ok(agreed_by(seen, tags, batches.primaries()))
}

/// Lock `name`'s holder, if it is held: what [`holders`] lists for it, read without a
/// `SCAN` (on a [`Quorum`](crate::Quorum), from every server, a majority agreeing; every
/// server must answer). Each round trip has a deadline of `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// match redis_blpop_lock::inspect::holder(&client, "nightly-report", Duration::from_secs(5))? {
///     Some(held) => println!("held by {}, fencing token {:?}", held.id, held.token),
///     None => println!("free"),
/// }
/// # Ok(())
/// # }
/// ```
pub fn holder(
    backend: &(impl Backend + ?Sized),
    name: &str,
    io_timeout: Duration,
) -> Result<Option<Held>, Error> {
    now(holder_on(&*transport_of(backend)?, name, io_timeout))
}

/// [`holder`] on `transport`.
pub(crate) async fn holder_on<T: AnyTransport + ?Sized>(
    transport: &T,
    name: &str,
    io_timeout: Duration,
) -> Result<Option<Held>, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the lock name is empty"));
    }
    let deadline = Deadlines::new(io_timeout)?;
    let tags = transport.blocking().hash_tags();
    let key = Keys::new(name, tags).lock.into_bytes();
    let mut seen = Seen::new();
    // A cluster routes the key to the primary that serves it; elsewhere each primary
    // (a quorum's servers, or the one server) has its own copy to read.
    let primaries = if tags {
        read(transport, vec![key], 0, deadline, &mut seen).await?;
        1
    } else {
        let primaries = transport.list_primaries(deadline.next()).await?;
        for (number, primary) in primaries.iter().enumerate() {
            let keys_to = primary.keys_to(transport);
            read(keys_to, vec![key.clone()], number, deadline, &mut seen).await?;
        }
        primaries.len()
    };
    Ok(agreed_by(seen, tags, primaries).pop())
}

/// A server that can evict the locks' keys, as [`evicting`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Evicting {
    /// The server's address, e.g. `127.0.0.1:6379`.
    pub server: String,
    /// Its `maxmemory-policy`, e.g. `allkeys-lru`.
    pub policy: String,
}

/// The warning: the server, its policy, which keys it threatens and the fix.
impl std::fmt::Display for Evicting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::protocol::eviction::warning(
            &self.server,
            &self.policy,
        ))
    }
}

/// The primaries of `backend` whose `maxmemory-policy` can evict the locks' keys (any but
/// `noeviction`): there a lock can vanish while held, and a fencing counter with it (tokens then
/// rest on the server's clock alone: see the crate docs on fencing).
/// Read from `INFO memory` once per server and process; a server that does not say (its ACL
/// refuses `INFO`) is not listed. Each round trip has a deadline of `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// for server in redis_blpop_lock::inspect::evicting(&client, Duration::from_secs(5))? {
///     eprintln!("warning: {server}");
/// }
/// # Ok(())
/// # }
/// ```
pub fn evicting(
    backend: &(impl Backend + ?Sized),
    io_timeout: Duration,
) -> Result<Vec<Evicting>, Error> {
    let deadline = Deadlines::new(io_timeout)?;
    now(evicting_on(&*transport_of(backend)?, deadline))
}

/// [`evicting`] on `transport`.
async fn evicting_on<T: AnyTransport + ?Sized>(
    transport: &T,
    deadline: Deadlines,
) -> Result<Vec<Evicting>, Error> {
    let mut found = Vec::new();
    for primary in transport.list_primaries(deadline.next()).await? {
        let server = primary.server(transport);
        if let Some((server, policy)) = eviction::evicting(server, deadline.next()).await {
            found.push(Evicting { server, policy });
        }
    }
    Ok(found)
}

/// Per lock key, what each primary (by number) that has it holds.
type Seen = BTreeMap<Vec<u8>, BTreeMap<usize, Holding>>;

/// Reads the holdings of `batch` (keys sharing a slot) through `keys_to` into `seen`, as
/// primary number `primary` sees them.
async fn read<T: AnyTransport + ?Sized>(
    keys_to: &T,
    batch: Vec<Vec<u8>>,
    primary: usize,
    deadline: Deadlines,
    seen: &mut Seen,
) -> Result<(), Error> {
    let request = admin::holders(&batch);
    let replies = send_repeatable(keys_to, &request, deadline.next())
        .await?
        .replies;
    let found = admin::parse_holders(&replies, batch.len())?;
    for (key, held) in batch.into_iter().zip(found) {
        if let Some(held) = held {
            seen.entry(key).or_default().insert(primary, held);
        }
    }
    Ok(())
}

/// The locks of `seen` held by enough of `primaries`, sorted by name.
fn agreed_by(seen: Seen, tags: bool, primaries: usize) -> Vec<Held> {
    // A cluster's primaries each have their own keys; a quorum's servers each have a copy.
    let needed = if tags { 1 } else { majority(primaries) };
    let mut held: Vec<Held> = seen
        .into_iter()
        .filter_map(|(key, held)| {
            let (id, ttl, token) = agreed(held.into_values(), needed)?;
            Some(Held {
                name: keys::lock_name_of(&key, tags),
                id: String::from_utf8_lossy(&id).into_owned(),
                ttl,
                token,
            })
        })
        .collect();
    held.sort_by(|a, b| a.name.cmp(&b.name));
    held
}

/// The owner that at least `needed` of `held` name, with the shortest TTL among them
/// (`None`: no expiry) and the highest fencing token among them.
fn agreed(
    held: impl Iterator<Item = Holding>,
    needed: usize,
) -> Option<(Vec<u8>, Option<Duration>, Option<u64>)> {
    let mut by_owner: BTreeMap<Vec<u8>, Vec<(Pttl, Option<u64>)>> = BTreeMap::new();
    for Holding { id, pttl, token } in held {
        by_owner.entry(id).or_default().push((pttl, token));
    }
    let (id, seen) = by_owner.into_iter().find(|(_, p)| p.len() >= needed)?;
    let shortest = seen
        .iter()
        .filter_map(|(p, _)| match p {
            Pttl::Left(left) => Some(*left),
            Pttl::Forever | Pttl::Gone => None,
        })
        .min();
    let token = seen.iter().filter_map(|(_, token)| *token).max();
    Some((id, shortest, token))
}

/// Deletes the key at lock `name` if it holds something that is not a lock (a list, a hash:
/// [`Error::Corrupt`] from every call on the lock), and wakes a waiter; returns whether it
/// deleted one. A lock (a string) is never deleted: use [`Lock::reset`](crate::Lock::reset)
/// for that. Runs `scripts/reset.lua`, so it can be sent again without harm. The round trip
/// has a deadline of `io_timeout`.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let io_timeout = Duration::from_secs(5);
/// if redis_blpop_lock::inspect::clear_corrupt(&client, "nightly-report", io_timeout)? {
///     println!("deleted a key that was not a lock");
/// }
/// # Ok(())
/// # }
/// ```
pub fn clear_corrupt(
    backend: &(impl Backend + ?Sized),
    name: &str,
    io_timeout: Duration,
) -> Result<bool, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the lock name is empty"));
    }
    let deadline = Deadlines::new(io_timeout)?;
    let transport = transport_of(backend)?;
    let keys = Keys::new(name, transport.hash_tags());
    let signal_expire_ms = millis("signal_expire", DEFAULT_SIGNAL_EXPIRE)?;
    // No owner was read (there is none to read): an empty id, which no lock holds.
    let request = lock::reset(&keys, b"", signal_expire_ms, true);
    let replies = now(send_repeatable(&*transport, &request, deadline.next()))?.replies;
    let reset = lock::parse_reset(&keys, replies.first().unwrap_or(&Value::Nil))?;
    if reset == Reset::NotALockDeleted {
        log::info!("{:?} was not a lock; deleted it", keys.lock);
    }
    Ok(reset == Reset::NotALockDeleted)
}

/// The keys that match a pattern on every primary, found with `SCAN` a batch at a time, each
/// batch split so that the keys of one call share a hash slot (a cluster's commands need
/// that).
struct Batches<'a, T: ?Sized> {
    transport: &'a T,
    primaries: Vec<Primary<Arc<T>>>,
    pattern: String,
    tags: bool,
    deadline: Deadlines,
    /// The number of the primary being scanned.
    at: usize,
    /// Its `SCAN` cursor; `None` once its scan is over.
    cursor: Option<u64>,
    /// The batches of its last `SCAN` step, by hash slot, still to hand out.
    ready: VecDeque<Vec<Vec<u8>>>,
}

impl<'a, T: AnyTransport + ?Sized> Batches<'a, T> {
    /// The keys that match `pattern` on every primary of `transport`, each `SCAN` step by
    /// its own deadline.
    async fn new(transport: &'a T, pattern: String, deadline: Deadlines) -> Result<Self, Error> {
        let primaries = transport.list_primaries(deadline.next()).await?;
        Ok(Batches::over(transport, primaries, pattern, deadline))
    }

    /// The keys that match `pattern` on `primaries`, of `transport`.
    fn over(
        transport: &'a T,
        primaries: Vec<Primary<Arc<T>>>,
        pattern: String,
        deadline: Deadlines,
    ) -> Self {
        Batches {
            transport,
            primaries,
            pattern,
            tags: transport.blocking().hash_tags(),
            deadline,
            at: 0,
            cursor: Some(0),
            ready: VecDeque::new(),
        }
    }

    /// The next batch, with the number of the primary it was found on.
    async fn next(&mut self) -> Result<Option<(Vec<Vec<u8>>, usize)>, Error> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some((batch, self.at)));
            }
            let Some(cursor) = self.cursor else {
                self.at += 1;
                self.cursor = Some(0);
                continue;
            };
            let Some(primary) = self.primaries.get(self.at) else {
                return Ok(None);
            };
            let scan = admin::scan(cursor, &self.pattern, SCAN_BATCH);
            let server = primary.server(self.transport);
            let (next, found) = admin::parse_scan(
                send_repeatable(server, &scan, self.deadline.next())
                    .await?
                    .first(),
            )?;
            let mut by_slot: BTreeMap<u16, BTreeSet<Vec<u8>>> = BTreeMap::new();
            for key in found {
                let slot = if self.tags { keys::slot(&key) } else { 0 };
                by_slot.entry(slot).or_default().insert(key);
            }
            (self.ready).extend(by_slot.into_values().map(|b| b.into_iter().collect()));
            self.cursor = (next != 0).then_some(next);
        }
    }

    /// Where to send requests about the keys found on primary number `primary`.
    fn keys_to(&self, primary: usize) -> &T {
        self.primaries[primary].keys_to(self.transport)
    }

    /// How many primaries there are.
    fn primaries(&self) -> usize {
        self.primaries.len()
    }
}

/// The deadline of each round trip, from when it starts.
#[derive(Clone, Copy)]
struct Deadlines(Duration);

impl Deadlines {
    /// Each round trip with `io_timeout`.
    fn new(io_timeout: Duration) -> Result<Deadlines, Error> {
        if io_timeout < Duration::from_millis(1) {
            return Err(Error::invalid("io_timeout must be at least 1 ms"));
        }
        Ok(Deadlines(io_timeout))
    }

    /// The deadline of a round trip that starts now.
    fn next(self) -> Instant {
        Instant::now() + self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_lists_the_owner_a_majority_names_with_the_shortest_ttl() {
        let holding = |id: &[u8], pttl| Holding {
            id: id.to_vec(),
            pttl,
            token: None,
        };
        let ms = |n| Pttl::Left(Duration::from_millis(n));
        let held = vec![
            holding(b"a", ms(900)),
            holding(b"b", ms(10)),
            holding(b"a", ms(800)),
        ];
        assert_eq!(
            agreed(held.clone().into_iter(), 2),
            Some((b"a".to_vec(), Some(Duration::from_millis(800)), None))
        );
        assert_eq!(agreed(held.into_iter().take(2), 2), None);
        let forever = vec![holding(b"a", Pttl::Forever)];
        assert_eq!(
            agreed(forever.into_iter(), 1),
            Some((b"a".to_vec(), None, None))
        );
    }
}
