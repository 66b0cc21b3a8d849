//! An operator's view of every lock, and the clearing of a key that is not a lock: what
//! `redis-lock list`, `redis-lock top` and `redis-lock reset --force` stand on. Also the
//! `SCAN` over every primary's lock keys that [`reset_all`](crate::reset_all) shares. The
//! semaphores, fair locks and read-write locks: [`queues`] and [`queue`].

pub(crate) mod queues;

pub use crate::protocol::primitive::Primitive;
pub(crate) use queues::each_queue;
pub use queues::{queue, queues, reset_queue, Queue, QueueHolder, QueueWaiter, WRITER_UNITS};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{transport_of, Backend};
use crate::config::settings::{millis, DEFAULT_SIGNAL_EXPIRE};
use crate::protocol::admin::{self, Holding};
use crate::protocol::keys::{self, Keys};
use crate::protocol::lock::{self, Pttl, Reset};
use crate::protocol::quorum::majority;
use crate::transport::{send_repeatable, Transport};
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
    holders_on(&*transport_of(backend)?, io_timeout)
}

/// [`holders`] on `transport`.
pub(crate) fn holders_on(
    transport: &dyn Transport,
    io_timeout: Duration,
) -> Result<Vec<Held>, Error> {
    let deadline = deadlines(io_timeout)?;
    let tags = transport.hash_tags();
    // Per lock key, what each primary that has it holds (a key `SCAN` returns twice counts
    // once).
    let mut seen = Seen::new();
    let primaries = each_batch(
        transport,
        keys::LOCK_PATTERN,
        &deadline,
        &mut |keys_to, batch, primary| read(keys_to, batch, primary, &deadline, &mut seen),
    )?;
    Ok(agreed_by(seen, tags, primaries))
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
    holder_on(&*transport_of(backend)?, name, io_timeout)
}

/// [`holder`] on `transport`.
pub(crate) fn holder_on(
    transport: &(dyn Transport + 'static),
    name: &str,
    io_timeout: Duration,
) -> Result<Option<Held>, Error> {
    if name.is_empty() {
        return Err(Error::invalid("the lock name is empty"));
    }
    let deadline = deadlines(io_timeout)?;
    let tags = transport.hash_tags();
    let key = Keys::new(name, tags).lock.into_bytes();
    let mut seen = Seen::new();
    // A cluster routes the key to the primary that serves it; elsewhere each primary
    // (a quorum's servers, or the one server) has its own copy to read.
    let primaries = if tags {
        read(transport, vec![key], 0, &deadline, &mut seen)?;
        1
    } else {
        let mut primaries = 0;
        transport.each_primary(deadline(), &mut |_, keys_to| {
            primaries += 1;
            read(keys_to, vec![key.clone()], primaries, &deadline, &mut seen)
        })?;
        primaries
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
/// `noeviction`): there a lock can vanish while held, and a fencing counter start again at 1.
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
    let deadline = deadlines(io_timeout)?;
    let mut found = Vec::new();
    transport_of(backend)?.each_primary(deadline(), &mut |primary, _| {
        if let Some((server, policy)) = primary.evicting(deadline()) {
            found.push(Evicting { server, policy });
        }
        Ok(())
    })?;
    Ok(found)
}

/// Per lock key, what each primary (by number) that has it holds.
type Seen = BTreeMap<Vec<u8>, BTreeMap<usize, Holding>>;

/// Reads the holdings of `batch` (keys sharing a slot) through `keys_to` into `seen`, as
/// primary number `primary` sees them.
fn read(
    keys_to: &(dyn Transport + 'static),
    batch: Vec<Vec<u8>>,
    primary: usize,
    deadline: &dyn Fn() -> Instant,
    seen: &mut Seen,
) -> Result<(), Error> {
    let replies = send_repeatable(keys_to, &admin::holders(&batch), deadline())?.replies;
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
    let deadline = deadlines(io_timeout)?;
    let transport = transport_of(backend)?;
    let keys = Keys::new(name, transport.hash_tags());
    let signal_expire_ms = millis("signal_expire", DEFAULT_SIGNAL_EXPIRE)?;
    // No owner was read (there is none to read): an empty id, which no lock holds.
    let request = lock::reset(&keys, b"", signal_expire_ms, true);
    let replies = send_repeatable(&*transport, &request, deadline())?.replies;
    let reset = lock::parse_reset(&keys, replies.first().unwrap_or(&Value::Nil))?;
    if reset == Reset::NotALockDeleted {
        log::info!("{:?} was not a lock; deleted it", keys.lock);
    }
    Ok(reset == Reset::NotALockDeleted)
}

/// What [`each_batch`] runs on a batch: given where to send requests about its keys, the
/// keys, and the number of the primary they were found on.
pub(crate) type Batch<'a> =
    dyn FnMut(&(dyn Transport + 'static), Vec<Vec<u8>>, usize) -> Result<(), Error> + 'a;

/// Runs `visit` on every key that matches `pattern` on every primary, one `SCAN` batch at a time,
/// split so that the keys of one call share a hash slot (a cluster's commands need that);
/// with where to send requests about them, and the primary's number. Returns how many
/// primaries were scanned.
pub(crate) fn each_batch(
    transport: &dyn Transport,
    pattern: &str,
    deadline: &dyn Fn() -> Instant,
    visit: &mut Batch<'_>,
) -> Result<usize, Error> {
    let tags = transport.hash_tags();
    let mut primaries = 0;
    transport.each_primary(deadline(), &mut |primary, keys_to| {
        let number = primaries;
        primaries += 1;
        let mut cursor: u64 = 0;
        loop {
            let scan = admin::scan(cursor, pattern, SCAN_BATCH);
            let (next, found) =
                admin::parse_scan(send_repeatable(primary, &scan, deadline())?.first())?;
            let mut by_slot: BTreeMap<u16, BTreeSet<Vec<u8>>> = BTreeMap::new();
            for key in found {
                let slot = if tags { keys::slot(&key) } else { 0 };
                by_slot.entry(slot).or_default().insert(key);
            }
            for batch in by_slot.into_values() {
                visit(keys_to, batch.into_iter().collect(), number)?;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(());
            }
        }
    })?;
    Ok(primaries)
}

/// The deadline of each round trip, from when it starts.
fn deadlines(io_timeout: Duration) -> Result<impl Fn() -> Instant, Error> {
    if io_timeout < Duration::from_millis(1) {
        return Err(Error::invalid("io_timeout must be at least 1 ms"));
    }
    Ok(move || Instant::now() + io_timeout)
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
