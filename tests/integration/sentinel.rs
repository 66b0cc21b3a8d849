//! The same lock on the primary that Redis Sentinel names: waiters and holders find the new
//! primary after a failover, under the same `lost()` rules.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{Error, Lock, Sentinel};

use crate::support::{assert_woken_by, secs, spawn_waiter, SentinelSet};

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

fn sentinel(set: &SentinelSet) -> Sentinel {
    Sentinel::new(set.sentinel_urls(), set.service()).unwrap()
}

/// A handle whose calls ride out a failover (a second to notice, a second or two to elect).
fn patient(backend: &Sentinel, name: &str) -> redis_blpop_lock::LockBuilder {
    Lock::builder(backend, name).io_timeout(secs(20))
}

#[test]
fn a_lock_lives_on_the_primary_the_sentinels_name() {
    let set = SentinelSet::start();
    let lock = Lock::new(&sentinel(&set), "named").unwrap();
    let guard = lock.lock().unwrap();
    let owner: Option<String> = set.primary().conn().get("lock:named").unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
    drop(guard);
    assert!(!lock.locked().unwrap());
}

#[test]
fn a_sentinel_failover_moves_holder_and_waiter_to_the_new_primary() {
    let set = SentinelSet::start();
    let backend = sentinel(&set);
    let holder = patient(&backend, "failing-over")
        .expire(secs(60))
        .replicas(1, secs(2))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let waiter_lock = patient(&backend, "failing-over").build().unwrap();
    let waiter = spawn_waiter(waiter_lock, secs(60));
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    let old_primary = set.primary().port;
    set.failover();
    assert_ne!(set.primary().port, old_primary);
    // Demoted, the old primary turned the waiter away; it now waits on the new one.
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert!(!holder.lost());
    holder.extend(None).unwrap();
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn a_killed_primarys_waiter_takes_the_lock_on_its_replica() {
    let mut set = SentinelSet::start();
    let backend = sentinel(&set);
    let holder = Lock::builder(&backend, "crashing")
        .expire(secs(2))
        .replicas(1, secs(2))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let waiter_lock = patient(&backend, "crashing").build().unwrap();
    let waiter = spawn_waiter(waiter_lock, secs(60));
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    set.kill_primary_and_wait_failover();
    // The holder never releases: the waiter takes the lock on the new primary at its expiry.
    assert!(waiter.join().unwrap().unwrap());
    assert!(holder.lost());
    match holder.extend(None) {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!("the holder's lock has a new owner, got {other:?}"),
    }
}

#[test]
fn a_sentinel_that_does_not_know_the_service_is_an_error() {
    let set = SentinelSet::start();
    let backend = Sentinel::new(set.sentinel_urls(), "no-such-service").unwrap();
    let lock = Lock::builder(&backend, "l")
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = lock.try_acquire().unwrap_err();
    assert!(e.to_string().contains("does not monitor"), "{e}");
}
