//! A Redis Cluster whose primary is killed: waiters and holders move to its replica, and a lock
//! the replica never had is lost to its holder.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{eventually, secs, spawn_waiter, tries_run, RedisCluster};

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_killed_primarys_waiters_and_holder_move_to_its_replica() {
    let mut cluster = RedisCluster::start();
    let client = cluster.client();
    // Long enough to ride out the failover (node timeout 1 s, then the election).
    let io = secs(20);
    let holder = Lock::builder(&client, "crashing")
        .expire(secs(60))
        .replicas(1, secs(2))
        .io_timeout(io)
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let primary = cluster.primary_for("lock:{crashing}").port;
    let waiter_lock = Lock::builder(&client, "crashing")
        .io_timeout(io)
        .build()
        .unwrap();
    let waiter = spawn_waiter(waiter_lock, secs(60));
    cluster
        .primary_for("lock:{crashing}")
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    cluster.kill_primary_and_wait_failover(primary);
    // The replica had acknowledged the lock, so it survived.
    let owner: Option<String> = cluster
        .primary_for("lock:{crashing}")
        .conn()
        .get("lock:{crashing}")
        .unwrap();
    assert_eq!(owner.as_deref(), Some(holder.id()));
    assert!(!holder.lost());
    // The new primary has no replica left to acknowledge the release, which it says; the
    // release happened all the same.
    match holder.release() {
        Err(Error::NotReplicated {
            acked: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn a_lock_lost_in_a_failover_is_lost_to_its_holder() {
    let mut cluster = RedisCluster::start();
    let client = cluster.client();
    let primary = cluster.primary_for("lock:{unreplicated}").port;
    let replica = cluster.replica_of(cluster.node(primary)).port;
    // The replica is frozen and its primary gives up on it (after `repl-timeout`) before
    // the lock is taken, so the key is never sent to it: not even into its socket buffer,
    // which a frozen process still fills.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "repl-timeout", "1"])
        .query(&mut cluster.node(primary).conn())
        .unwrap();
    cluster.node(replica).pause();
    eventually(secs(20), "the primary to drop its frozen replica", || {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("replication")
            .query(&mut cluster.node(primary).conn())
            .unwrap();
        info.get::<u64>("connected_slaves") == Some(0)
    });
    let holder = Lock::builder(&client, "unreplicated")
        .expire(secs(3))
        .auto_renewal(true)
        .io_timeout(secs(20))
        .build()
        .unwrap();
    let guard = holder.lock().unwrap();
    cluster.kill(primary);
    cluster.node(replica).resume();
    cluster.until_replaced(primary, replica);
    eventually(secs(20), "the holder to learn its lock was lost", || {
        guard.lost()
    });
    let other = Lock::new(&client, "unreplicated").unwrap();
    assert!(
        other.try_acquire().unwrap(),
        "the key did not survive the failover"
    );
}

/// A name of lock whose keys `cluster`'s primary on `port` serves.
fn name_served_by(cluster: &RedisCluster, port: u16) -> String {
    (0..)
        .map(|n| format!("crash-{n}"))
        .find(|name| cluster.primary_for(&format!("lock:{{{name}}}")).port == port)
        .unwrap()
}

#[test]
fn waiters_of_a_killed_primary_each_take_the_lock_once_its_replica_took_over() {
    // The lost reply is settled on the new primary as soon as it serves, not after the I/O
    // timeout: a dying server resets the connections in its backlog, and that reset once
    // sent a waiter's settling to wait for a connection of its own to the dead server. Only
    // some kills do it, so ten waiters, and each primary of two clusters killed in turn.
    const WAITERS: usize = 10;
    for _ in 0..2 {
        let mut cluster = RedisCluster::start();
        let client = cluster.client();
        let ports: Vec<u16> = cluster.primaries().iter().map(|p| p.port).collect();
        for port in ports {
            let name = name_served_by(&cluster, port);
            // Never released: the waiters take turns once it expired on the new primary.
            let holder = Lock::builder(&client, &name)
                .expire(secs(2))
                .build()
                .unwrap();
            holder.acquire().unwrap();
            let since = tries_run(cluster.node(port));
            let waiters: Vec<_> = (0..WAITERS)
                .map(|_| {
                    let lock = Lock::builder(&client, &name)
                        .io_timeout(secs(20))
                        .build()
                        .unwrap();
                    std::thread::spawn(move || {
                        let took = lock.acquire_timeout(secs(12))?;
                        if took {
                            lock.release()?;
                        }
                        Ok::<bool, Error>(took)
                    })
                })
                .collect();
            // Their process's one waiting connection to the primary blocks for them all.
            cluster
                .node(port)
                .until_in_line(1, since, BLOCK_LIMIT, || false);
            cluster.kill_primary_and_wait_failover(port);
            for waiter in waiters {
                match waiter.join().unwrap() {
                    Ok(true) => {}
                    other => panic!("a waiter of {name} on port {port}: {other:?}"),
                }
            }
        }
    }
}
