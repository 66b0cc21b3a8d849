//! The administrative commands the lock sends a server (`CLIENT ID`, `CLIENT KILL`): no wait
//! ever ends with one, on any server (`CLIENT UNBLOCK` crashes the older ones on a client that
//! `CLIENT PAUSE` holds back); and on a server where `CLIENT` is unknown, the documented
//! degraded mode. These run against whichever server the suite runs on (`.ci/matrix`).

use std::time::Instant;

use redis_blpop_lock::{Lock, Semaphore};

use crate::ops::security::{acl_log, everything, locker, LOCKER_ACL};
use crate::support::{ms, secs, RedisServer};

/// A client of `server` whose user may not run `CLIENT UNBLOCK` or `CLIENT KILL`, so that the
/// ACL log shows every time the lock tried either.
fn watched(server: &RedisServer) -> redis::Client {
    let rule: Vec<&str> = LOCKER_ACL
        .split_whitespace()
        .filter(|right| *right != "+client|kill")
        .collect();
    locker(server, &rule.join(" "))
}

/// Checks that no wait on `server` was ended by another client: the waiters' own timers end
/// them, and the waiting connection is woken by a push to a list it listens on.
fn assert_ended_by_no_admin_command(server: &RedisServer) {
    let ended: Vec<String> = acl_log(server)
        .into_iter()
        .filter(|entry| entry.contains("client"))
        .collect();
    assert!(ended.is_empty(), "{ended:?}");
}

#[test]
fn a_plain_locks_wait_ends_at_its_deadline_with_no_admin_command_on_any_server() {
    let server = RedisServer::start();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let waiter = Lock::new(&watched(&server), "l").unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        assert!(!waiter.acquire_timeout(ms(200)).unwrap());
        assert!(started.elapsed() < secs(5), "{:?}", started.elapsed());
    }
    assert_ended_by_no_admin_command(&server);
    // Still the lock it was, and the waiter's next wait works.
    holder.release().unwrap();
    assert!(waiter.acquire_timeout(secs(5)).unwrap());
}

#[test]
fn a_waiter_takes_an_expired_holders_lock_at_its_own_time() {
    let server = RedisServer::start();
    // Long enough that the waiter finds it held on a loaded machine, and so waits for it.
    let holder = Lock::builder(&server.client(), "l")
        .expire(secs(1))
        .build()
        .unwrap();
    let waiter = Lock::new(&watched(&server), "l").unwrap();
    holder.acquire().unwrap();
    assert!(waiter.acquire_timeout(secs(10)).unwrap());
    assert!(holder.lost());
    assert_ended_by_no_admin_command(&server);
}

#[test]
fn a_semaphores_wait_ends_at_its_deadline_with_no_admin_command_on_any_server() {
    let server = RedisServer::start();
    let permits = Semaphore::new(&server.client(), "s", 1).unwrap();
    let held = permits.acquire().unwrap();
    let waiter = Semaphore::new(&watched(&server), "s", 1).unwrap();
    assert!(waiter.try_acquire_for(ms(300)).unwrap().is_none());
    assert_ended_by_no_admin_command(&server);
    held.release().unwrap();
    assert!(waiter.try_acquire_for(secs(5)).unwrap().is_some());
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn async_waits_end_at_their_deadlines_with_no_admin_command_on_any_server() {
    use redis_blpop_lock::aio;

    let server = RedisServer::start();
    let holder = aio::Lock::new(&server.client(), "l").unwrap();
    holder.acquire().await.unwrap();
    let permits = aio::Semaphore::new(&server.client(), "s", 1).unwrap();
    let held = permits.acquire().await.unwrap();
    let waiter = aio::Lock::new(&watched(&server), "l").unwrap();
    assert!(!waiter.acquire_timeout(ms(200)).await.unwrap());
    let queued = aio::Semaphore::new(&watched(&server), "s", 1).unwrap();
    assert!(queued.try_acquire_for(ms(300)).await.unwrap().is_none());
    assert_ended_by_no_admin_command(&server);
    holder.release().await.unwrap();
    assert!(waiter.acquire_timeout(secs(5)).await.unwrap());
    held.release().await.unwrap();
    assert!(queued.try_acquire_for(secs(5)).await.unwrap().is_some());
}

/// A server where `CLIENT` is unknown, as with `rename-command` or behind some proxies.
fn without_client() -> RedisServer {
    let server = RedisServer::start_with(&["--rename-command", "CLIENT", ""]);
    let id: redis::RedisResult<u64> = redis::cmd("CLIENT").arg("ID").query(&mut server.conn());
    assert!(id.is_err(), "CLIENT is still there: {id:?}");
    server
}

#[test]
fn without_the_client_command_every_primitive_still_works() {
    let server = without_client();
    everything(&server, &server.client()).expect("the lock needs CLIENT after all");
}

#[test]
fn without_the_client_command_a_wait_still_ends_at_its_deadline() {
    let server = without_client();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let waiter = Lock::new(&server.client(), "l").unwrap();
    let started = Instant::now();
    assert!(!waiter.acquire_timeout(ms(200)).unwrap());
    // At its own timer: no CLIENT command is needed to end it.
    assert!(started.elapsed() < secs(5), "{:?}", started.elapsed());
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn without_the_client_command_the_async_primitives_still_work() {
    use redis_blpop_lock::aio;

    let server = without_client();
    let client = server.client();
    let holder = aio::Lock::builder(&client, "l")
        .expire(ms(300))
        .build()
        .unwrap();
    holder.acquire().await.unwrap();
    let waiter = aio::Lock::new(&client, "l").unwrap();
    assert!(waiter.acquire_timeout(secs(10)).await.unwrap());
    waiter.release().await.unwrap();
    let permits = aio::Semaphore::new(&client, "s", 1).unwrap();
    let held = permits.acquire().await.unwrap();
    let queued = aio::Semaphore::new(&client, "s", 1).unwrap();
    assert!(queued.try_acquire_for(ms(300)).await.unwrap().is_none());
    held.release().await.unwrap();
    assert!(queued.try_acquire_for(secs(5)).await.unwrap().is_some());
    let rw = aio::RwLock::new(&client, "rw").unwrap();
    rw.read().await.unwrap().unlock().await.unwrap();
    rw.write().await.unwrap().unlock().await.unwrap();
}

#[cfg(feature = "cli")]
#[test]
fn without_the_client_command_the_cli_runs_and_waits() {
    use crate::cli::commands::{finish, redis_lock, stderr};

    let server = without_client();
    let first = redis_lock(&server)
        .args(["run", "l", "--", "sleep", "0.5"])
        .spawn()
        .unwrap();
    let second = redis_lock(&server)
        .args(["run", "l", "--timeout", "20", "--", "true"])
        .spawn()
        .unwrap();
    for run in [first, second] {
        let output = finish(run);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let permits = redis_lock(&server)
        .args(["run", "--permits", "2", "s", "--", "true"])
        .spawn()
        .unwrap();
    let output = finish(permits);
    assert!(output.status.success(), "{}", stderr(&output));
}
