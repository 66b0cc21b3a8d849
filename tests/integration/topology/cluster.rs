//! The same lock on a Redis Cluster: keys hash-tagged by name, requests routed to the key's
//! primary, waiters that follow their slot through a migration and a failover, and
//! `reset_all` over every primary. Tests that leave the cluster as it is share one; those that
//! move slots or fail nodes over start their own. Killed primaries are in the slow group
//! (`tests/slow/cluster_failover.rs`).

use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::Commands;
use redis_blpop_lock::{reset_all, Cache, Error, Lock};

use crate::lock::interop::python_peer;
use crate::ops::security::LOCKER_ACL;
use crate::support::{
    assert_woken_by, secs, spawn_waiter, ChildProcess, RedisCluster, RedisServer,
};

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// Names whose keys fall on every primary of the cluster, `per_primary` each.
fn names_on_every_primary(cluster: &RedisCluster, prefix: &str, per_primary: usize) -> Vec<String> {
    let mut by_primary = std::collections::HashMap::<u16, Vec<String>>::new();
    for i in 0.. {
        let name = format!("{prefix}-{i}");
        let port = cluster.primary_for(&format!("lock:{{{name}}}")).port;
        let names = by_primary.entry(port).or_default();
        if names.len() < per_primary {
            names.push(name);
        }
        if by_primary.len() == 3 && by_primary.values().all(|n| n.len() == per_primary) {
            break;
        }
    }
    by_primary.into_values().flatten().collect()
}

#[test]
fn a_locks_keys_carry_its_name_as_their_hash_tag() {
    let cluster = RedisCluster::shared();
    let lock = Lock::new(&cluster.client(), "tagged").unwrap();
    let guard = lock.lock().unwrap();
    let primary = cluster.primary_for("lock:{tagged}");
    let owner: Option<String> = primary.conn().get("lock:{tagged}").unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
    drop(guard);
    let signal: Option<String> = primary.conn().lpop("lock-signal:{tagged}", None).unwrap();
    assert_eq!(
        signal.as_deref(),
        Some("1"),
        "the release signals in the same slot"
    );
}

#[test]
fn a_name_with_its_own_hash_tag_keeps_it() {
    let cluster = RedisCluster::shared();
    let lock = Lock::new(&cluster.client(), "{tenant7}:jobs").unwrap();
    let _guard = lock.lock().unwrap();
    let owner: Option<String> = cluster
        .primary_for("{tenant7}")
        .conn()
        .get("lock:{tenant7}:jobs")
        .unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
}

#[test]
fn locks_in_many_slots_exclude_each_other_across_processes() {
    let cluster = RedisCluster::shared();
    let names = names_on_every_primary(cluster, "excl", 2);
    let joined = names.join(",");
    let workers: Vec<ChildProcess> = (0..2)
        .map(|_| {
            ChildProcess::spawn(
                "topology::cluster::increment",
                &cluster.seed_url(),
                &[&joined],
            )
        })
        .collect();
    for worker in workers {
        worker.wait_success();
    }
    let mut conn = cluster.client().get_connection().unwrap();
    for name in &names {
        let count: u64 = conn.get(format!("count:{{{name}}}")).unwrap();
        assert_eq!(
            count,
            2 * INCREMENT_THREADS * INCREMENT_ROUNDS,
            "{name}: an increment was lost, so two holders overlapped"
        );
    }
}

const INCREMENT_THREADS: u64 = 3;
const INCREMENT_ROUNDS: u64 = 20;

/// Child role: threads that increment a counter per name by read, pause and write, under the
/// name's lock (held without expiry, so every hand-over is a release's wake-up). A lost
/// increment means two holders overlapped; a missed wake-up costs a 5 s block each.
pub fn increment(client: &redis::Client, args: &[String]) {
    let cluster = ClusterClient::new(vec![client.get_connection_info().clone()]).unwrap();
    let names: Vec<String> = args[0].split(',').map(str::to_owned).collect();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..INCREMENT_THREADS {
            scope.spawn(|| {
                let mut conn = cluster.get_connection().unwrap();
                for _ in 0..INCREMENT_ROUNDS {
                    for name in &names {
                        let lock = Lock::new(&cluster, name.as_str()).unwrap();
                        let _guard = lock.lock().unwrap();
                        let key = format!("count:{{{name}}}");
                        let n: u64 = conn.get::<_, Option<u64>>(&key).unwrap().unwrap_or(0);
                        std::thread::sleep(Duration::from_micros(200));
                        let _: () = conn.set(&key, n + 1).unwrap();
                    }
                }
            });
        }
    });
    // Every hand-over was a wake-up: a few missed ones would already cost this much.
    let took = started.elapsed();
    assert!(
        took < secs(30),
        "the increments took {took:?}: waiters were not woken"
    );
}

#[test]
fn a_release_wakes_a_waiter_on_the_keys_primary() {
    let cluster = RedisCluster::shared();
    let client = cluster.client();
    let holder = Lock::new(&client, "wake").unwrap();
    holder.acquire().unwrap();
    let primary = cluster.primary_for("lock:{wake}");
    let before = primary.blocked_clients();
    let waiter = spawn_waiter(Lock::new(&client, "wake").unwrap(), secs(60));
    primary.until_blocked(before + 1, BLOCK_LIMIT, || waiter.is_finished());
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn a_waiter_follows_its_slot_to_another_primary() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let holder = Lock::builder(&client, "moving")
        .expire(secs(60))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let source = cluster.primary_for("lock:{moving}");
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| p.port != source.port)
        .unwrap();
    let waiter = spawn_waiter(Lock::new(&client, "moving").unwrap(), secs(60));
    source.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    cluster.migrate_slot(cluster.slot_of("lock:{moving}"), target.port);
    // The waiter is turned away from the old primary and blocks on the new one.
    target.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert_woken_by(|| holder.release().unwrap(), waiter);
    assert!(!holder.lost());
}

#[test]
fn a_try_during_a_migration_is_asked_of_the_importing_primary() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let source = cluster.primary_for("lock:{asked}");
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| p.port != source.port)
        .unwrap();
    let slot = cluster.slot_of("lock:{asked}");
    cluster.begin_migration(slot, target.port);
    // The key is on neither node yet: the source answers ASK, and the lock is taken on the
    // importing node behind ASKING.
    let lock = Lock::new(&client, "asked").unwrap();
    assert!(lock.try_acquire().unwrap());
    assert!(lock.locked().unwrap());
    cluster.finish_migration(slot, target.port);
    lock.release().unwrap();
    assert!(!lock.locked().unwrap());
}

#[test]
fn a_holder_and_a_waiter_carry_on_through_a_failover() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let holder = Lock::builder(&client, "failing-over")
        .expire(secs(60))
        .replicas(1, secs(2))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let primary = cluster.primary_for("lock:{failing-over}");
    let waiter = spawn_waiter(Lock::new(&client, "failing-over").unwrap(), secs(60));
    primary.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    cluster.failover(primary.port);
    let new_primary = cluster.primary_for("lock:{failing-over}");
    new_primary.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert!(!holder.lost());
    holder.extend(None).unwrap();
    holder.release().unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn reset_all_frees_the_locks_of_every_primary() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let names = names_on_every_primary(&cluster, "reset", 2);
    let holders: Vec<Lock> = names
        .iter()
        .map(|name| {
            let lock = Lock::new(&client, name.as_str()).unwrap();
            lock.acquire().unwrap();
            lock
        })
        .collect();
    assert_eq!(reset_all(&client).unwrap(), names.len());
    for lock in &holders {
        assert!(!lock.locked().unwrap(), "{} is still held", lock.name());
    }
}

#[test]
fn python_redis_lock_reaches_the_same_lock_by_naming_it_in_braces() {
    let cluster = RedisCluster::shared();
    let mut python = python_peer(&cluster.seed_url(), &["cluster"]);
    python.send_line("acquire {shared-with-python}");
    let python_id = python.expect_line("acquired");
    let lock = Lock::new(&cluster.client(), "shared-with-python").unwrap();
    assert!(!lock.try_acquire().unwrap());
    let holder = lock.holder().unwrap().expect("held by python");
    assert!(
        python_id.contains(&holder.id),
        "{python_id:?} vs {holder:?}"
    );
    let primary = cluster.primary_for("lock:{shared-with-python}");
    let before = primary.blocked_clients();
    let waiter = spawn_waiter(
        Lock::new(&cluster.client(), "shared-with-python").unwrap(),
        secs(60),
    );
    primary.until_blocked(before + 1, BLOCK_LIMIT, || waiter.is_finished());
    assert_woken_by(|| python.send_line("release {shared-with-python}"), waiter);
}

#[test]
fn the_cache_keeps_a_value_and_its_freshness_marker_in_one_slot() {
    let cluster = RedisCluster::shared();
    let cache = Cache::new(&cluster.client()).unwrap().prefix("cache:");
    let fresh = || Ok::<_, Error>("v1".to_string());
    let value: String = cache
        .get_or_revalidate("page", secs(30), secs(60), fresh)
        .unwrap();
    assert_eq!(value, "v1");
    let primary = cluster.primary_for("cache:page");
    let marker: Option<String> = primary.conn().get("{cache:page}:fresh").unwrap();
    assert_eq!(marker.as_deref(), Some("1"));
    let again: String = cache
        .get_or_set("page", secs(60), || {
            Ok::<_, Error>("not computed".to_string())
        })
        .unwrap();
    assert_eq!(again, "v1");
}

/// A cluster client logged in as `user` with `rule` on every node.
fn cluster_user(cluster: &RedisCluster, user: &str, rule: &str) -> ClusterClient {
    for url in cluster.urls() {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg(rule.split_whitespace().collect::<Vec<_>>())
            .query(&mut conn)
            .unwrap();
    }
    ClusterClient::builder(vec![cluster.seed_url()])
        .username(user)
        .password("locker-pw")
        .build()
        .unwrap()
}

#[test]
fn the_documented_rights_per_node_are_enough_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let rule = format!("{LOCKER_ACL} +cluster|slots +asking");
    let client = cluster_user(cluster, "cluster-locker", &rule);
    let holder = Lock::builder(&client, "acl")
        .expire(secs(30))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    assert_eq!(holder.owner_id().unwrap().as_deref(), Some(holder.id()));
    holder.extend(None).unwrap();
    let waiter = spawn_waiter(Lock::new(&client, "acl").unwrap(), secs(30));
    let primary = cluster.primary_for("lock:{acl}");
    primary.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn without_cluster_slots_the_topology_cannot_be_learned() {
    let cluster = RedisCluster::shared();
    let client = cluster_user(cluster, "slotless-locker", LOCKER_ACL);
    let lock = Lock::builder(&client, "slotless")
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let e = lock.try_acquire().unwrap_err();
    assert!(e.to_string().contains("NOPERM"), "{e}");
}

#[test]
fn a_cluster_client_with_no_reachable_seed_is_an_error_by_the_deadline() {
    let dead = RedisServer::start();
    let url = dead.url();
    drop(dead);
    let client = ClusterClient::new(vec![url]).unwrap();
    let lock = Lock::builder(&client, "nowhere")
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = Instant::now();
    assert!(matches!(lock.try_acquire(), Err(Error::Redis(_))));
    assert!(started.elapsed() < secs(3), "{:?}", started.elapsed());
}

#[test]
fn a_waiter_asked_elsewhere_during_a_migration_never_takes_a_held_lock() {
    let cluster = RedisCluster::start();
    let client = cluster.client();
    let holder = Lock::builder(&client, "mid-move")
        .expire(secs(2))
        .auto_renewal(true)
        .build()
        .unwrap();
    let guard = holder.lock().unwrap();
    let source = cluster.primary_for("lock:{mid-move}").port;
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| p.port != source)
        .unwrap()
        .port;
    let slot = cluster.slot_of("lock:{mid-move}");
    // The lock key stays on the source; the (empty) signal list is asked for at the target.
    cluster.begin_migration(slot, target);
    let waiter = Lock::builder(&client, "mid-move")
        .expire(secs(30))
        .build()
        .unwrap();
    assert!(!waiter.acquire_timeout(secs(5)).unwrap());
    assert!(!guard.lost());
    cluster.finish_migration(slot, target);
    drop(guard);
    assert!(waiter.try_acquire().unwrap());
}

#[test]
fn a_cancel_ends_a_cluster_wait_at_once() {
    let cluster = RedisCluster::shared();
    let client = cluster.client();
    let holder = Lock::new(&client, "cancelled").unwrap();
    holder.acquire().unwrap();
    let token = redis_blpop_lock::CancelToken::new();
    let waiter = Lock::builder(&client, "cancelled")
        .cancel_token(token.clone())
        .build()
        .unwrap();
    let primary = cluster.primary_for("lock:{cancelled}");
    let before = primary.blocked_clients();
    let waiting = std::thread::spawn(move || waiter.acquire());
    primary.until_blocked(before + 1, BLOCK_LIMIT, || waiting.is_finished());
    let cancelled = Instant::now();
    token.cancel();
    assert!(matches!(
        waiting.join().unwrap(),
        Err(Error::Cancelled { .. })
    ));
    // A wait the cancel missed would end only at its 5 s block.
    assert!(cancelled.elapsed() < secs(2), "{:?}", cancelled.elapsed());
    holder.release().unwrap();
}
