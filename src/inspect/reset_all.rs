//! `reset_all`: the operator's way to free every lock at once.

use std::time::Instant;

use redis::Value;

use super::queues::Primitives;
use super::{Batches, Deadlines};
use crate::backend::{transport_of, Backend};
use crate::config::settings::{millis, DEFAULT_IO_TIMEOUT, DEFAULT_SIGNAL_EXPIRE};
use crate::protocol::admin;
use crate::protocol::keys::{self, QueueKeys};
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::transport::send::{now, send_repeatable, AnyTransport};
use crate::Error;

/// Deletes every lock (every string key `lock:*`) and wakes a waiter on each, and ends every
/// hold and line of the semaphores, fair locks, read-write locks and elections (every
/// `semaphore:*`, `fair-lock:*`, `rwlock:*` and `election:*` primitive), waking each of their
/// waiters, which joins the line anew; returns how many holds it ended: each lock key it
/// deleted, each queue holder with a live lease it removed. An election's watchers hear that
/// nobody leads within a heartbeat interval (1 s by default), when their process finds its
/// heartbeat there gone with the rest. Fencing counters are kept, so tokens keep growing. On a
/// cluster it scans every primary; on a [`Quorum`](crate::Quorum) every server, and a lock
/// counts once for each server that held it.
///
/// Keys are found with `SCAN` from the client, a batch at a time; the owners of a batch are
/// read with `MGET`, and one script call deletes each lock that still holds the owner read,
/// so a large keyspace never blocks the server the way `KEYS` would, and a lock taken after
/// its batch was read is never deleted. On a cluster a batch is split by hash slot, since
/// one command's keys must share one. A queue primitive is reset in one script call
/// (`scripts/queue_reset_all.lua`), all that holds or waits at that moment. Each round trip
/// has a deadline of 5 s.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let freed = redis_blpop_lock::reset_all(&client)?;
/// println!("reset {freed} holds");
/// # Ok(())
/// # }
/// ```
pub fn reset_all(backend: &(impl Backend + ?Sized)) -> Result<usize, Error> {
    now(on(&*transport_of(backend)?))
}

/// [`reset_all`] on `transport`.
pub(crate) async fn on<T: AnyTransport + ?Sized>(transport: &T) -> Result<usize, Error> {
    let signal_expire_ms = millis("signal_expire", DEFAULT_SIGNAL_EXPIRE)?;
    let mut reset = 0;
    let deadline = Deadlines(DEFAULT_IO_TIMEOUT);
    let mut batches = Batches::new(transport, keys::LOCK_PATTERN.into(), deadline).await?;
    while let Some((batch, primary)) = batches.next().await? {
        reset += reset_batch(batches.keys_to(primary), batch, signal_expire_ms).await?;
    }
    let locks = reset;
    let mut primitives = Primitives::new(transport, deadline);
    while let Some((kind, name, primary)) = primitives.next().await? {
        let keys = QueueKeys::new(kind, &name);
        let request = queue::reset_all(&keys, signal_expire_ms);
        let reply = one(primitives.keys_to(primary), &request).await?;
        reset += usize::try_from(queue::parse_reset(&keys, &reply)?)
            .map_err(|_| Error::unexpected(&reply))?;
    }
    log::info!("reset {locks} locks and {} queue holders", reset - locks);
    Ok(reset)
}

/// Resets the locks among `found` (keys of one hash slot) that are held, each only if the
/// owner read still holds it.
async fn reset_batch<T: AnyTransport + ?Sized>(
    transport: &T,
    found: Vec<Vec<u8>>,
    signal_expire_ms: u64,
) -> Result<usize, Error> {
    let owners = one(transport, &admin::owners(&found)).await?;
    let owners = admin::parse_owners(&owners, found.len())?;
    let held: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = found
        .into_iter()
        .zip(owners)
        .filter_map(|(lock, owner)| Some((keys::signal_of(&lock)?, lock, owner?)))
        .map(|(signal, lock, owner)| (lock, signal, owner))
        .collect();
    if held.is_empty() {
        return Ok(0);
    }
    let request = admin::reset_batch(&held, signal_expire_ms);
    admin::parse_count(&one(transport, &request).await?)
}

/// The one reply of a read or an owner-checked reset.
async fn one<T: AnyTransport + ?Sized>(transport: &T, request: &Request) -> Result<Value, Error> {
    let deadline = Instant::now() + DEFAULT_IO_TIMEOUT;
    Ok(send_repeatable(transport, request, deadline)
        .await?
        .first()
        .clone())
}
