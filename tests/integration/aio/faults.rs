//! The async lock under real faults, beyond the suites both APIs run (`lock/outcomes.rs`,
//! `faults/injected.rs`): calls dropped while a server is frozen (SIGSTOP), replies held back
//! or lost by a TCP proxy around a dropped call, a server killed and restarted under waiting
//! tasks, and runtimes that end. No lock is ever left held by nobody, even by a call whose
//! future was dropped.

use std::time::Instant;

use redis::Commands;
use redis_blpop_lock::{aio, Error};

use crate::support::{
    assert_task_woken_by, blocked_task_waiter, eventually, ms, secs, Proxy, RedisServer,
};

fn owner(server: &RedisServer) -> Option<String> {
    server.conn().get("lock:l").unwrap()
}

/// How many connections `server` has accepted (this query's included).
fn connections_received(server: &RedisServer) -> u64 {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.conn())
        .unwrap();
    info.get("total_connections_received").unwrap()
}

/// Returns once the server holds `lock:l` for `id`.
async fn until_owner(server: &RedisServer, id: &str) {
    let started = Instant::now();
    while owner(server).as_deref() != Some(id) {
        assert!(
            started.elapsed() < secs(20),
            "the server never granted the lock to {id}"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

/// A lock call dropped while its try waits at a frozen server: the server grants it once it
/// runs again, and the call's task gives the lock back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_while_the_server_is_frozen_leaves_no_lock_once_it_thaws() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = aio::Lock::new(&client, "l").unwrap();
    assert!(!lock.locked().await.unwrap());
    server.pause();
    let dropped = tokio::time::timeout(ms(300), lock.lock()).await;
    assert!(dropped.is_err(), "lock() returned from a frozen server");
    server.resume();
    let mut conn = server.conn();
    eventually(
        secs(10),
        "the dropped call's grant to be given back",
        || !conn.exists::<_, bool>("lock:l").unwrap(),
    );
    let other = aio::Lock::new(&client, "l").unwrap();
    assert!(other.try_acquire().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_whose_reply_is_lost_leaves_no_lock_held_by_nobody() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let lock = aio::Lock::new(&proxy.client(), "l").unwrap();
    // A first round opens the connections and loads the release's script.
    assert!(lock.try_acquire().await.unwrap());
    lock.release().await.unwrap();
    // The try's `SET lock:l <id> NX`.
    proxy.drop_reply_to("\r\nNX\r\n");
    let connected = connections_received(&server);
    let result = lock.try_acquire().await;
    // The test's own query makes one; the library reconnected after losing the reply.
    assert!(
        connections_received(&server) > connected + 1,
        "the try's connection was never cut"
    );
    println!("a try whose reply was lost: {result:?}");
    match result {
        Ok(true) => assert_eq!(owner(&server).as_deref(), Some(lock.id())),
        Ok(false) => assert_ne!(owner(&server).as_deref(), Some(lock.id())),
        // Whether it ran is unknown to the caller; a release settles it.
        Err(Error::OutcomeUnknown { .. }) => {}
        Err(e) => panic!("a lost reply on a live server: {e}"),
    }
    // Whatever the caller was told, one release leaves the lock free.
    let released = lock.release().await;
    assert!(
        matches!(released, Ok(()) | Err(Error::NotAcquired { .. })),
        "{released:?}"
    );
    assert_eq!(owner(&server), None);
    assert!(aio::Lock::new(&server.client(), "l")
        .unwrap()
        .try_acquire()
        .await
        .unwrap());
}

/// A handle on lock `l` through `proxy` whose `lock()` the server granted while the proxy
/// held the reply back, dropped before the reply came (the proxy holds it still).
async fn dropped_with_its_grant_on_the_way(server: &RedisServer, proxy: &Proxy) -> aio::Lock {
    let lock = aio::Lock::new(&proxy.client(), "l").unwrap();
    // Opens the connections the call will use.
    assert!(lock.try_acquire().await.unwrap());
    lock.release().await.unwrap();
    proxy.hold_replies(true);
    tokio::select! {
        _ = lock.lock() => panic!("lock() returned while its reply was held back"),
        () = until_owner(server, lock.id()) => {}
    }
    lock
}

/// A lock call through `proxy` granted at the server while the proxy holds its reply back;
/// the call is dropped before the reply comes, and then the reply arrives late
/// (`lose_reply` false) or its connection is cut (`lose_reply` true). The call's task must
/// give the lock back, and that wakes a task waiting for it.
async fn assert_a_grant_after_the_drop_is_given_back(lose_reply: bool) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let lock = dropped_with_its_grant_on_the_way(&server, &proxy).await;
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&server.client(), "l").unwrap());
    let deliver = async {
        if lose_reply {
            proxy.cut_all();
        } else {
            proxy.hold_replies(false);
        }
    };
    assert_task_woken_by(deliver, waiter).await;
    assert_ne!(owner(&server).as_deref(), Some(lock.id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_comes_after_the_drop_is_given_back() {
    assert_a_grant_after_the_drop_is_given_back(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_is_lost_after_the_drop_is_given_back() {
    assert_a_grant_after_the_drop_is_given_back(true).await;
}

/// A caller's `lock()` times out on a slow link after the server granted it, and the caller
/// tries again on the same handle while the late grant is still on its way: the dropped call
/// gives its grant back, nobody else wants the lock, so the retry must take it (not answer
/// `AlreadyAcquired`: the caller holds nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_handle_of_a_call_dropped_with_its_grant_on_the_way_takes_the_lock() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let lock = dropped_with_its_grant_on_the_way(&server, &proxy).await;
    let retry = lock.try_acquire();
    let deliver = async {
        tokio::time::sleep(ms(100)).await;
        proxy.hold_replies(false);
    };
    let (retried, ()) = tokio::join!(retry, deliver);
    match retried {
        Ok(true) => assert_eq!(owner(&server).as_deref(), Some(lock.id())),
        other => panic!("the retry on a free lock: {other:?}"),
    }
}

/// How many `CLIENT KILL`s `server` has run: each is the settling of a reply taken for lost.
fn kills(server: &RedisServer) -> u64 {
    server.calls("client|kill")
}

#[test]
fn a_runtime_after_another_opens_its_own_connections_rather_than_settling_the_closed_ones() {
    let server = RedisServer::start();
    let client = server.client();
    for _ in 0..2 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let holder = aio::Lock::new(&client, "l").unwrap();
            let guard = holder.lock().await.unwrap();
            let waiter = aio::Lock::new(&client, "l").unwrap();
            let waiting = tokio::spawn(async move { waiter.lock().await?.unlock().await });
            server.until_blocked(1, secs(20), || waiting.is_finished());
            guard.unlock().await.unwrap();
            waiting.await.unwrap().unwrap();
        });
    }
    assert_eq!(
        kills(&server),
        0,
        "a request on the first runtime's closed connections was settled as a lost reply"
    );
    assert_eq!(owner(&server), None);
}

#[test]
fn waiters_of_a_runtime_started_after_one_that_ended_mid_wait_are_woken_by_a_release() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = redis_blpop_lock::Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let waiter = aio::Lock::new(&client, "l").unwrap();
    let waiting = first.spawn(async move { waiter.lock().await.map(drop) });
    server.until_blocked(1, secs(20), || waiting.is_finished());
    // The runtime ends with its task blocked: the shared wait of `l` ends with it.
    first.shutdown_timeout(secs(5));
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let waiter = aio::Lock::new(&client, "l").unwrap();
        let waiting = tokio::spawn(async move { waiter.acquire_timeout(secs(60)).await });
        eventually(secs(20), "the second runtime's waiter to block", || {
            server.blocked_clients() == 1 && !waiting.is_finished()
        });
        assert_task_woken_by(async { holder.release().unwrap() }, waiting).await;
    });
}
