//! Sentinel failovers, on cue and by a killed primary: holders and waiters find the new primary,
//! under the same `lost()` rules.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{Error, Lock, Sentinel};

use crate::support::{
    assert_woken_by, eventually, patient, secs, spawn_waiter, RedisServer, SentinelSet,
};

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_sentinel_failover_moves_holder_and_waiter_to_the_new_primary() {
    let set = SentinelSet::start();
    let backend = set.backend();
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
    let backend = set.backend();
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

/// The owner of lock `name` on `server`.
fn owner(server: &RedisServer, name: &str) -> Option<String> {
    server.conn().get(format!("lock:{name}")).unwrap()
}

/// The backend a process started now would have: one that has not followed the sentinels
/// so far, and asks them who the primary is (a backend in this process with the sentinels
/// in another order is a backend of its own).
fn newcomer(set: &SentinelSet) -> Sentinel {
    Sentinel::new(set.sentinel_urls().into_iter().rev(), set.service()).unwrap()
}

#[test]
fn a_holder_renews_on_the_primary_the_sentinels_name_while_the_old_one_lives() {
    let set = SentinelSet::start();
    let backend = set.backend();
    // Renewed every 4 s: the first renewal comes after the sentinels named the new primary,
    // while its copy of the key (replicated before the failover) still lives there.
    let holder = patient(&backend, "switching")
        .expire(secs(6))
        .auto_renewal(true)
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let replica = set.replica();
    eventually(secs(10), "the lock to reach the replica", || {
        owner(replica, "switching").as_deref() == Some(holder.id())
    });
    let old = set.failover_named();
    let new = set.primary();
    // Renewed on the old primary only, the key would expire on the new one 6 s after the
    // acquisition, and a newcomer would take the lock there.
    let newcomer_backend = newcomer(&set);
    let newcomer = patient(&newcomer_backend, "switching").build().unwrap();
    let took = newcomer.acquire_timeout(secs(8)).unwrap();
    assert!(
        !took || holder.lost(),
        "two holders: the newcomer's on port {}, and the holder's, renewed on port {old}",
        new.port
    );
    assert!(!took, "the holder's renewals reached the new primary");
    assert_eq!(owner(new, "switching").as_deref(), Some(holder.id()));
}

#[test]
fn a_holder_whose_key_the_new_primary_lacks_learns_it_lost_the_lock() {
    let set = SentinelSet::start();
    let backend = set.backend();
    let holder = patient(&backend, "unreplicated")
        .expire(secs(3))
        .auto_renewal(true)
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let old = set.failover_named();
    // As if the key had not reached the replica before its promotion.
    let _: () = set.primary().conn().del("lock:unreplicated").unwrap();
    eventually(secs(20), "the holder to learn it lost the lock", || {
        holder.lost()
    });
    // Not from a demotion: Sentinel demotes a live old primary seconds later.
    assert!(
        set.is_primary(old),
        "lost() only once the old primary was demoted"
    );
}

/// A lock taken after `replace` made another node the primary (returning the old one's
/// port) lives on the new primary, not on the old one, which still answers as a primary.
fn a_lock_taken_after(replace: impl FnOnce(&mut SentinelSet) -> u16) {
    let mut set = SentinelSet::start();
    let backend = set.backend();
    // The backend knows the old primary, from a lock taken before.
    let before = Lock::new(&backend, "before").unwrap();
    drop(before.lock().unwrap());
    let old = replace(&mut set);
    let lock = Lock::new(&backend, "after").unwrap();
    lock.acquire().unwrap();
    assert_eq!(owner(set.primary(), "after").as_deref(), Some(lock.id()));
    assert_eq!(
        owner(set.server(old), "after"),
        None,
        "the lock went to the old primary"
    );
}

#[test]
fn a_lock_taken_after_a_failover_lives_on_the_new_primary_while_the_old_one_lives() {
    a_lock_taken_after(|set| set.failover_named());
}

#[test]
fn a_lock_taken_after_a_crash_lives_on_the_new_primary_though_the_old_one_restarted() {
    // Back at once and empty, the old primary answers as a primary until Sentinel demotes it.
    a_lock_taken_after(SentinelSet::crash_and_restart_primary);
}
