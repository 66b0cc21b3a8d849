//! The async lock on the other places a lock can live: a quorum of independent servers, a
//! Redis Cluster and the primary Sentinel names. On each, a held lock keeps another handle out,
//! and a release wakes a waiting task (woken, not timed out).

use std::time::Duration;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::Commands;
use redis_blpop_lock::aio;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use crate::support::blocked_task_waiter;
use crate::support::{assert_task_woken_by, eventually, secs, servers, spawn_task_waiter};
use crate::topology::quorum::{holding, quorum};

/// How long a test waits for its waiters to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_lock_keeps_others_out_and_its_release_wakes_a_waiting_task() {
    let servers = servers(5);
    let quorum = quorum(&servers);
    let build = || {
        aio::Lock::builder(&quorum, "q")
            .expire(secs(30))
            .build()
            .unwrap()
    };
    let holder = build();
    holder.acquire().await.unwrap();
    assert_eq!(holding(&servers, "q", holder.id()), 5);
    let other = build();
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(!other
        .acquire_timeout(Duration::from_millis(200))
        .await
        .unwrap());
    let other_id = other.id().to_string();
    let waiter = spawn_task_waiter(other, secs(60));
    eventually(BLOCK_LIMIT, "the waiter to block on a server", || {
        servers.iter().map(|s| s.blocked_clients()).sum::<u64>() >= 1 || waiter.is_finished()
    });
    assert_task_woken_by(async { holder.release().await.unwrap() }, waiter).await;
    assert_eq!(holding(&servers, "q", holder.id()), 0);
    assert!(
        holding(&servers, "q", &other_id) >= 3,
        "not held by a majority"
    );
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_lock_keeps_others_out_and_its_release_wakes_a_waiting_task() {
    let cluster = crate::support::RedisCluster::shared();
    let client = redis::cluster::ClusterClient::new(vec![cluster.seed_url()]).unwrap();
    let holder = aio::Lock::new(&client, "aio-wake").unwrap();
    holder.acquire().await.unwrap();
    let primary = cluster.primary_for("lock:{aio-wake}");
    let owner: Option<String> = primary.conn().get("lock:{aio-wake}").unwrap();
    assert_eq!(owner.as_deref(), Some(holder.id()));
    let other = aio::Lock::new(&client, "aio-wake").unwrap();
    assert!(other.try_lock().await.unwrap().is_none());
    let waiter = blocked_task_waiter(primary, other);
    assert_task_woken_by(async { holder.release().await.unwrap() }, waiter).await;
    assert!(
        holder.try_lock().await.unwrap().is_none(),
        "the waiter holds it"
    );
}

#[cfg(feature = "sentinel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_lock_keeps_others_out_and_its_release_wakes_a_waiting_task() {
    let set = crate::support::SentinelSet::start();
    let backend = redis_blpop_lock::Sentinel::new(set.sentinel_urls(), set.service()).unwrap();
    let holder = aio::Lock::new(&backend, "named").unwrap();
    holder.acquire().await.unwrap();
    let owner: Option<String> = set.primary().conn().get("lock:named").unwrap();
    assert_eq!(owner.as_deref(), Some(holder.id()));
    let other = aio::Lock::new(&backend, "named").unwrap();
    assert!(other.try_lock().await.unwrap().is_none());
    let waiter = blocked_task_waiter(set.primary(), other);
    assert_task_woken_by(async { holder.release().await.unwrap() }, waiter).await;
    assert!(
        holder.try_lock().await.unwrap().is_none(),
        "the waiter holds it"
    );
}
