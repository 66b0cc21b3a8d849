//! The fair lock behind Sentinel: a waiter queued on the old primary takes the lock on the new
//! one after a failover.

use std::thread;
use std::time::Duration;

use redis_blpop_lock::Lock;

use crate::support::{secs, SentinelSet};

const BLOCK_LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_fair_lock_waiter_behind_sentinel_takes_it_after_a_failover() {
    let set = SentinelSet::start();
    let backend = set.backend();
    let fair = |name: &str| {
        Lock::builder(&backend, name)
            .fair(true)
            .io_timeout(secs(20))
            .build()
            .unwrap()
    };
    let holder = fair("f");
    holder.acquire().unwrap();
    let waiter = {
        let lock = fair("f");
        thread::spawn(move || lock.acquire_timeout(secs(60)).unwrap())
    };
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    set.failover();
    // The queue went to the new primary with its data; the release reaches the waiter there.
    holder.release().unwrap();
    assert!(waiter.join().unwrap());
}
