//! `reset_all`: the operator's way to free every lock at once.

use std::time::Instant;

use redis::Value;

use crate::protocol::keys;
use crate::protocol::requests::{self, Request};
use crate::settings::{millis, DEFAULT_IO_TIMEOUT, DEFAULT_SIGNAL_EXPIRE};
use crate::transport::server::Server;
use crate::transport::{send_repeatable, Transport};
use crate::Error;

/// How many keys one `SCAN` step asks for, and so the most one script call resets.
const SCAN_BATCH: usize = 1000;

/// Deletes every lock (every string key `lock:*`) and wakes a waiter on each; returns how many
/// locks it deleted.
///
/// Keys are found with `SCAN` from the client, a batch at a time; the owners of a batch are
/// read with `MGET`, and one script call deletes each lock that still holds the owner read,
/// so a large keyspace never blocks the server the way `KEYS` would, and a lock taken after
/// its batch was read is never deleted. Each round trip has a deadline of 5 s.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let freed = redis_blpop_lock::reset_all(&client)?;
/// println!("reset {freed} locks");
/// # Ok(())
/// # }
/// ```
pub fn reset_all(client: &redis::Client) -> Result<usize, Error> {
    let server = Server::shared(client)?;
    let signal_expire_ms = millis("signal_expire", DEFAULT_SIGNAL_EXPIRE)?;
    let mut cursor: u64 = 0;
    let mut reset = 0;
    loop {
        let (next, found) =
            requests::parse_scan(&one(&*server, &requests::scan(cursor, SCAN_BATCH))?)?;
        if !found.is_empty() {
            let owners =
                requests::parse_owners(&one(&*server, &requests::owners(&found))?, found.len())?;
            let held: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = found
                .into_iter()
                .zip(owners)
                .filter_map(|(lock, owner)| Some((keys::signal_of(&lock)?, lock, owner?)))
                .map(|(signal, lock, owner)| (lock, signal, owner))
                .collect();
            if !held.is_empty() {
                let reply = one(&*server, &requests::reset_batch(&held, signal_expire_ms))?;
                reset += requests::parse_count(&reply)?;
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    log::info!("reset {reset} locks");
    Ok(reset)
}

/// The one reply of a read or an owner-checked reset.
fn one(transport: &dyn Transport, request: &Request) -> Result<Value, Error> {
    let deadline = Instant::now() + DEFAULT_IO_TIMEOUT;
    Ok(send_repeatable(transport, request, deadline)?
        .first()
        .clone())
}
