//! The administrative commands the lock sends a server (`HELLO`, `CLIENT ID`, `CLIENT
//! UNBLOCK`, `CLIENT KILL`): `CLIENT UNBLOCK` only where the server takes it without crashing
//! (the releases with the fix; older ones crash on a client that `CLIENT PAUSE` holds back),
//! a closed connection elsewhere; and on a server where `CLIENT` is unknown, the documented
//! degraded mode. These run against whichever server the suite runs on (`.ci/matrix`).

use std::time::Instant;

use redis_blpop_lock::{Lock, Semaphore};

use crate::security::{acl_log, everything, locker, LOCKER_ACL};
use crate::support::{ms, secs, RedisServer};

/// Whether the server takes `CLIENT UNBLOCK` of a paused client without crashing, from its
/// own `INFO server`: the releases with redis/redis#14164 or valkey-io/valkey#2117.
fn unblock_is_safe(server: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .map(str::trim)
    };
    let (flavour, version) = match field("valkey_version") {
        Some(version) => ("valkey", version),
        None => ("redis", field("redis_version").unwrap()),
    };
    let version: Vec<u32> = version.split('.').map(|n| n.parse().unwrap()).collect();
    let fixed_in: &[[u32; 3]] = match flavour {
        "valkey" => &[[8, 0, 5], [8, 1, 8], [9, 0, 0]],
        _ => &[[7, 4, 6], [8, 0, 4], [8, 2, 0]],
    };
    let newest = fixed_in.last().unwrap();
    version >= newest.to_vec()
        || fixed_in
            .iter()
            .any(|fix| fix[..2] == version[..2] && version >= fix.to_vec())
}

/// A client of `server` whose user may not run `CLIENT UNBLOCK`, so that the ACL log shows
/// every time the lock tried.
fn watched(server: &RedisServer) -> redis::Client {
    let rule: Vec<&str> = LOCKER_ACL
        .split_whitespace()
        .filter(|right| *right != "+client|unblock")
        .collect();
    locker(server, &rule.join(" "))
}

/// Checks how the waits that ended at their deadlines on `server` were ended: by `CLIENT
/// UNBLOCK` where that is safe, never where it could crash the server.
fn assert_ended_safely(server: &RedisServer) {
    let tried = acl_log(server)
        .iter()
        // Redis 6.2 names the command alone in its ACL log: here only UNBLOCK is denied.
        .filter(|entry| entry.contains("client|unblock") || entry.ends_with(" client"))
        .count();
    if unblock_is_safe(server) {
        assert!(tried > 0, "no CLIENT UNBLOCK ended the waits");
    } else {
        assert_eq!(tried, 0, "CLIENT UNBLOCK sent to a server it can crash");
    }
}

#[test]
fn a_plain_locks_wait_ends_at_its_deadline_without_crashing_any_server() {
    let server = RedisServer::start();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let waiter = Lock::new(&watched(&server), "l").unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        assert!(!waiter.acquire_timeout(ms(200)).unwrap());
        assert!(started.elapsed() < secs(5), "{:?}", started.elapsed());
    }
    assert_ended_safely(&server);
    // Still the lock it was, and the waiter's next wait works.
    holder.release().unwrap();
    assert!(waiter.acquire_timeout(secs(5)).unwrap());
}

#[test]
fn a_waiter_takes_an_expired_holders_lock_however_its_wait_is_ended() {
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
    assert_ended_safely(&server);
}

#[test]
fn a_semaphores_wait_ends_at_its_deadline_with_no_admin_command_on_any_server() {
    let server = RedisServer::start();
    let permits = Semaphore::new(&server.client(), "s", 1).unwrap();
    let held = permits.acquire().unwrap();
    // Its process's waiting connection is never ended by another: the waiter's own timer
    // ends its wait, and the connection is woken by a push to an inbox it listens on.
    let rule: Vec<&str> = LOCKER_ACL
        .split_whitespace()
        .filter(|right| !matches!(*right, "+client|unblock" | "+client|kill"))
        .collect();
    let waiter = Semaphore::new(&locker(&server, &rule.join(" ")), "s", 1).unwrap();
    assert!(waiter.try_acquire_for(ms(300)).unwrap().is_none());
    let ended = acl_log(&server)
        .iter()
        .filter(|entry| entry.contains("client"))
        .count();
    assert_eq!(ended, 0, "{:?}", acl_log(&server));
    held.release().unwrap();
    assert!(waiter.try_acquire_for(secs(5)).unwrap().is_some());
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn async_waits_end_at_their_deadlines_without_crashing_any_server() {
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
    assert_ended_safely(&server);
    holder.release().await.unwrap();
    assert!(waiter.acquire_timeout(secs(5)).await.unwrap());
    held.release().await.unwrap();
    assert!(queued.try_acquire_for(secs(5)).await.unwrap().is_some());
}

/// A server where `CLIENT` is unknown, as with `rename-command` or behind some proxies. Its
/// waits end at its own timer, which at `hz 100` is up to 10 ms late rather than 100 ms: well
/// inside a deadline's grace even on a loaded machine, as the crate docs advise for this mode.
fn without_client() -> RedisServer {
    let server = RedisServer::start_with(&["--rename-command", "CLIENT", "", "--hz", "100"]);
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
    // At the server's own timer: up to 1/hz late.
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
    use crate::cli::{finish, redis_lock, stderr};

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
