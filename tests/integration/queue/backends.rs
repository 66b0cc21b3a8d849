//! The queue primitives on a Redis Cluster: one slot per primitive, and a waiter that follows
//! its slot to another primary. Behind Sentinel, through a failover: `tests/slow/queue_sentinel.rs`.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Election, RwLock, Semaphore, SemaphorePermit, Watched};

use crate::support::{secs, RedisCluster, RedisServer};

const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// Releases `permit` of `semaphore` (one permit) to a waiter in its line on `primary`.
fn hands_off(semaphore: &Arc<Semaphore>, permit: SemaphorePermit<'_>, primary: &RedisServer) {
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            semaphore
                .try_acquire_for(secs(60))
                .unwrap()
                .map(|p| p.release())
        })
    };
    let name = semaphore.name();
    primary.until_queued(Primitive::Semaphore, name, 1, BLOCK_LIMIT, || {
        waiter.is_finished()
    });
    permit.release().unwrap();
    assert!(waiter.join().unwrap().is_some());
}

#[test]
fn a_semaphores_keys_share_one_slot_and_hand_off_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let semaphore = Arc::new(Semaphore::new(&cluster.client(), "cluster-permits", 1).unwrap());
    let permit = semaphore.acquire().unwrap();
    let primary = cluster.primary_for("semaphore:{cluster-permits}:holders");
    hands_off(&semaphore, permit, primary);
}

#[test]
fn a_name_with_its_own_hash_tag_keeps_its_tags_slot() {
    let cluster = RedisCluster::shared();
    let name = "{queue-tenant}:jobs";
    let semaphore = Arc::new(Semaphore::new(&cluster.client(), name, 1).unwrap());
    let permit = semaphore.acquire().unwrap();
    let key = "semaphore:={queue-tenant}:jobs:holders";
    assert_eq!(cluster.slot_of(key), cluster.slot_of("queue-tenant"));
    let primary = cluster.primary_for("queue-tenant");
    let holders: Vec<String> = primary.conn().zrange(key, 0, -1).unwrap();
    assert_eq!(holders.len(), 1);
    // A waiter's signal list is in the same slot: the release's grant reaches it.
    hands_off(&semaphore, permit, primary);
}

#[test]
fn a_queued_waiter_follows_its_slot_to_another_primary() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let lock = Arc::new(RwLock::new(&client, "moving").unwrap());
    let write = lock.write().unwrap();
    let key = "rwlock:{moving}:holders";
    let source = cluster.primary_for(key);
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| p.port != source.port)
        .unwrap();
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || lock.try_read_for(secs(60)).unwrap().map(|r| r.unlock()))
    };
    source.until_queued(Primitive::RwLock, "moving", 1, BLOCK_LIMIT, || {
        reader.is_finished()
    });
    // The process's waiting connection for the slot (one for all its waiters there) blocks
    // on the source too.
    source.until_blocked(1, BLOCK_LIMIT, || reader.is_finished());
    cluster.migrate_slot(cluster.slot_of(key), target.port);
    // Its heartbeat (every 1 s) is turned away from the old primary and asks the new one, where
    // the waiting connection blocks again.
    target.until_blocked(1, BLOCK_LIMIT, || reader.is_finished());
    write.unlock().unwrap();
    assert!(reader.join().unwrap().is_some());
}

#[test]
fn an_election_on_a_cluster_is_led_read_and_watched_in_its_slot() {
    let cluster = RedisCluster::shared();
    let election = || Election::new(&cluster.client(), "cluster-leader").unwrap();
    let mut watch = election().watch().unwrap();
    assert_eq!(watch.changed_for(secs(10)), Some(Watched::Nobody));
    let leadership = election().campaign("node-a").unwrap();
    let seen = (watch.changed_for(secs(10)))
        .and_then(Watched::into_leader)
        .expect("the leader");
    assert_eq!(
        (seen.info.as_str(), seen.term),
        ("node-a", leadership.term())
    );
    assert_eq!(election().leader().unwrap(), Some(seen));
    leadership.resign().unwrap();
    assert_eq!(watch.changed_for(secs(10)), Some(Watched::Nobody));
}
