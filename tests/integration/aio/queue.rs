//! The async semaphore, read-write lock and fair lock against real servers: tasks served in
//! the order they came, k permits released wake k tasks, a dropped acquire leaves the queue at
//! once, a runtime's end gives back the permits its tasks held, a `CancelToken` ends a waiting
//! task's wait, an upgrade by a task that reads is refused, the fair lock is not barged. (The
//! semaphore's and the read-write lock's suites in `queue/` run for both APIs too.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{aio, CancelToken, Error};
use tokio::sync::{mpsc, oneshot};

use crate::support::{connections, eventually, lasting_keys, secs, RedisServer};

/// Long enough for a task to join the line on a loaded machine; the tests wait for the server
/// to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

/// Longer than any key the queue engine leaves to expire by itself lasts with the default
/// heartbeat: a process's heartbeats and inbox (a lapse window, 2 s), a wake (10 s).
const EXPIRES_WITHIN: Duration = Duration::from_secs(10);

/// The lapse window of a waiter with [`SLOW_HEARTBEAT`]: what its process's heartbeats and
/// inbox may last.
const SLOW_LAPSE: Duration = Duration::from_secs(120);

/// A heartbeat no test outlives: a waiter that missed its hand-off would wait a minute for its
/// next ask, and a dropped one would stay in line two.
const SLOW_HEARTBEAT: Duration = Duration::from_secs(60);

/// A semaphore `s` of `permits`, whose waiters ask again only every minute.
fn semaphore(server: &RedisServer, permits: u32) -> Arc<aio::Semaphore> {
    let semaphore = aio::Semaphore::builder(&server.client(), "s", permits)
        .heartbeat(SLOW_HEARTBEAT)
        .build()
        .unwrap();
    Arc::new(semaphore)
}

/// Waits until semaphore `s` has `n` tasks in its line, as the server shows it.
fn until_in_line(server: &RedisServer, n: u64) {
    server.until_queued(Primitive::Semaphore, "s", n, BLOCK_LIMIT, || false);
}

/// A task that takes a permit of `semaphore` within a minute, says so on `done` with its
/// name, and holds it until `release` says so.
fn waiter(
    semaphore: &Arc<aio::Semaphore>,
    name: &'static str,
    done: &mpsc::UnboundedSender<&'static str>,
    release: oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    let (semaphore, done) = (Arc::clone(semaphore), done.clone());
    tokio::spawn(async move {
        let permit = semaphore.try_acquire_for(secs(60)).await.unwrap().unwrap();
        done.send(name).unwrap();
        let _ = release.await;
        permit.release().await.unwrap();
    })
}

/// The next name on `done`, within `limit`.
async fn next(done: &mut mpsc::UnboundedReceiver<&'static str>, limit: Duration) -> &'static str {
    tokio::time::timeout(limit, done.recv())
        .await
        .expect("no task was served in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_served_in_the_order_they_came() {
    let server = RedisServer::start();
    let semaphore = semaphore(&server, 1);
    let first = semaphore.acquire().await.unwrap();
    let (done, mut order) = mpsc::unbounded_channel();
    let mut releases = Vec::new();
    let mut tasks = Vec::new();
    for (n, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let (release, released) = oneshot::channel();
        tasks.push(waiter(&semaphore, name, &done, released));
        releases.push(release);
        until_in_line(&server, n as u64 + 1);
    }
    first.release().await.unwrap();
    let mut served = Vec::new();
    for release in releases {
        served.push(next(&mut order, secs(30)).await);
        release.send(()).unwrap();
    }
    assert_eq!(served, ["a", "b", "c", "d"]);
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_tasks_hold_than_there_are_permits_and_all_are_served() {
    let server = RedisServer::start();
    let semaphore = Arc::new(aio::Semaphore::new(&server.client(), "s", 3).unwrap());
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (semaphore, inside, most) = (semaphore.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = semaphore.acquire().await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(secs(60), task).await.unwrap().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 3);
    // Nothing is left but the fencing counter and keys that expire by themselves, and the
    // waiters' connections close once idle.
    let keys = lasting_keys(&mut server.conn(), "semaphore:*", EXPIRES_WITHIN);
    assert_eq!(keys, ["semaphore:{s}:fence"]);
    eventually(secs(10), "the idle waiters' connections to close", || {
        connections(&server) <= 1
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_released_together_wake_as_many_tasks() {
    let server = RedisServer::start();
    let semaphore = semaphore(&server, 3);
    let all = semaphore.acquire_many(3).await.unwrap();
    let (done, mut woken) = mpsc::unbounded_channel();
    let mut held = Vec::new();
    for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
        let (release, released) = oneshot::channel();
        held.push((release, waiter(&semaphore, name, &done, released)));
        until_in_line(&server, n as u64 + 1);
    }
    all.release().await.unwrap();
    // All three hold at once, long before the next heartbeat: each was handed its permit.
    let mut names = Vec::new();
    for _ in 0..3 {
        names.push(next(&mut woken, secs(20)).await);
    }
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(semaphore.available().await.unwrap(), 0);
    for (release, task) in held {
        release.send(()).unwrap();
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_the_queue_and_the_task_behind_is_served_at_once() {
    let server = RedisServer::start();
    let semaphore = semaphore(&server, 1);
    let holder = semaphore.acquire().await.unwrap();
    let dropped = {
        let semaphore = Arc::clone(&semaphore);
        tokio::spawn(async move { semaphore.acquire().await.map(drop) })
    };
    until_in_line(&server, 1);
    let (done, mut served) = mpsc::unbounded_channel();
    let (release, released) = oneshot::channel();
    let behind = waiter(&semaphore, "behind", &done, released);
    until_in_line(&server, 2);
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    holder.release().await.unwrap();
    // Its heartbeat a minute away, the dropped waiter would hold up the queue for two had it
    // not left.
    assert_eq!(next(&mut served, secs(20)).await, "behind");
    release.send(()).unwrap();
    behind.await.unwrap();
    let keys = lasting_keys(&mut server.conn(), "semaphore:*", SLOW_LAPSE);
    assert_eq!(keys, ["semaphore:{s}:fence"]);
}

#[test]
fn a_runtime_that_ends_with_a_permit_held_gives_it_back() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let permit = runtime.block_on(async { semaphore(&server, 2).acquire_arc().await.unwrap() });
    // A task the runtime drops as it ends, with the permit.
    drop(runtime.spawn(async move {
        let _permit = permit;
        std::future::pending::<()>().await;
    }));
    drop(runtime);
    // The permit's lease is 30 s: back at once, it was given back, not left to expire.
    let holders: usize = server.conn().zcard("semaphore:{s}:holders").unwrap();
    assert_eq!(holders, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_token_ends_a_waiting_tasks_wait_and_it_leaves_the_queue() {
    let server = RedisServer::start();
    let cancel = CancelToken::new();
    let semaphore = aio::Semaphore::builder(&server.client(), "s", 1)
        .heartbeat(SLOW_HEARTBEAT)
        .cancel_token(cancel.clone())
        .build()
        .unwrap();
    let semaphore = Arc::new(semaphore);
    let permit = semaphore.acquire().await.unwrap();
    let waiting = {
        let semaphore = Arc::clone(&semaphore);
        tokio::spawn(async move { semaphore.acquire().await.map(drop) })
    };
    server.until_queued(Primitive::Semaphore, "s", 1, BLOCK_LIMIT, || {
        waiting.is_finished()
    });
    cancel.cancel();
    let ended = tokio::time::timeout(secs(20), waiting).await;
    assert!(matches!(ended, Ok(Ok(Err(Error::Cancelled { .. })))));
    let queued: usize = server.conn().zcard("semaphore:{s}:queue").unwrap();
    assert_eq!(queued, 0);
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_asked_for_by_a_task_that_reads_is_refused() {
    let server = RedisServer::start();
    let lock = Arc::new(aio::RwLock::new(&server.client(), "rw").unwrap());
    let read = lock.read().await.unwrap();
    assert!(matches!(
        lock.write().await,
        Err(Error::WouldDeadlock { .. })
    ));
    // Another task may wait for it: the read lock is not its own.
    let other = {
        let lock = Arc::clone(&lock);
        tokio::spawn(async move { lock.try_write_for(secs(60)).await.map(|w| w.is_some()) })
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        other.is_finished()
    });
    read.unlock().await.unwrap();
    assert!(other.await.unwrap().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_does_not_take_the_fair_lock_ahead_of_a_waiting_task() {
    let server = RedisServer::start();
    let fair = || {
        aio::Lock::builder(&server.client(), "f")
            .fair(true)
            .build()
            .unwrap()
    };
    let holder = fair();
    let guard = holder.lock().await.unwrap();
    // On the queue engine's keys, not python-redis-lock's.
    let held: usize = server.conn().zcard("fair-lock:{f}:holders").unwrap();
    assert_eq!(held, 1);
    let waiting = fair();
    let (done, until_done) = tokio::sync::oneshot::channel::<()>();
    let waiter = tokio::spawn(async move {
        let guard = waiting.lock().await.unwrap();
        let _ = until_done.await;
        guard.unlock().await
    });
    server.until_queued(Primitive::FairLock, "f", 1, BLOCK_LIMIT, || {
        waiter.is_finished()
    });
    guard.unlock().await.unwrap();
    // The lock is handed to the waiter, not taken by a newcomer trying in between.
    assert!(fair().try_lock().await.unwrap().is_none());
    done.send(()).unwrap();
    tokio::time::timeout(secs(20), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let keys: Vec<String> = server.conn().keys("lock:*").unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_semaphore_hands_off_on_a_cluster() {
    let cluster = crate::support::RedisCluster::shared();
    let semaphore = aio::Semaphore::new(&cluster.client(), "aio-cluster-permits", 1).unwrap();
    let semaphore = Arc::new(semaphore);
    let permit = semaphore.acquire().await.unwrap();
    let primary = cluster.primary_for("semaphore:{aio-cluster-permits}:holders");
    let waiter = {
        let semaphore = Arc::clone(&semaphore);
        tokio::spawn(async move {
            semaphore
                .try_acquire_for(secs(60))
                .await
                .map(|p| p.is_some())
        })
    };
    let name = "aio-cluster-permits";
    primary.until_queued(Primitive::Semaphore, name, 1, BLOCK_LIMIT, || {
        waiter.is_finished()
    });
    permit.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap());
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_follows_its_slot_to_another_primary() {
    let cluster = crate::support::RedisCluster::start();
    let lock = Arc::new(aio::RwLock::new(&cluster.client(), "moving").unwrap());
    let write = lock.write().await.unwrap();
    let key = "rwlock:{moving}:holders";
    let source = cluster.primary_for(key);
    let target = cluster
        .primaries()
        .into_iter()
        .find(|p| p.port != source.port)
        .unwrap();
    let reader = {
        let lock = Arc::clone(&lock);
        tokio::spawn(async move { lock.try_read_for(secs(60)).await.map(|r| r.is_some()) })
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
    write.unlock().await.unwrap();
    assert!(reader.await.unwrap().unwrap());
}
