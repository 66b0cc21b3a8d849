//! `reset_all`: the operator's way to free every lock at once.

use crate::builder::{millis, DEFAULT_SIGNAL_EXPIRE};
use crate::pool::Pool;
use crate::scripts::RESET_ALL;
use crate::Error;

/// How many keys one `SCAN` step asks for, and so the most one script call resets.
const SCAN_BATCH: usize = 1000;

/// Deletes every lock (every string key `lock:*`) and wakes a waiter on each; returns how many
/// locks it deleted.
///
/// Keys are found with `SCAN` from the client, a batch at a time, and each batch is reset by
/// one script call, so a large keyspace never blocks the server the way `KEYS` would.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let freed = redis_lock::reset_all(&client)?;
/// println!("reset {freed} locks");
/// # Ok(())
/// # }
/// ```
pub fn reset_all(client: &redis::Client) -> Result<usize, Error> {
    let pool = Pool::shared(client)?;
    let signal_expire_ms = millis("signal_expire", DEFAULT_SIGNAL_EXPIRE)?;
    let mut conn = pool.get()?;
    let mut cursor: u64 = 0;
    let mut reset = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = conn.run(|c| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("lock:*")
                .arg("COUNT")
                .arg(SCAN_BATCH)
                .query(c)
        })?;
        if !keys.is_empty() {
            let deleted: usize = conn.run(|c| {
                RESET_ALL.run(c, |cmd| {
                    cmd.arg(keys.len()).arg(&keys).arg(signal_expire_ms);
                })
            })?;
            reset += deleted;
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    log::info!("reset {reset} locks");
    Ok(reset)
}
