//! Bad replies and lost scripts: the lock returns the server's message, never panics, and
//! runs its scripts again after the server forgot them.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{assert_woken_by, spawn_waiter, tries_run, RedisServer};

fn script_flush(server: &RedisServer) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
}

fn redis_error(result: Result<impl std::fmt::Debug, Error>) -> redis::RedisError {
    match result {
        Err(Error::Redis(e)) => e,
        other => panic!("expected a Redis error, got {other:?}"),
    }
}

#[test]
fn every_operation_survives_a_script_flush() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(Duration::from_secs(10))
        .build()
        .unwrap();
    script_flush(&server);
    assert!(lock.try_acquire().unwrap());
    script_flush(&server);
    lock.extend(None).unwrap();
    script_flush(&server);
    lock.release().unwrap();
    lock.acquire().unwrap();
    script_flush(&server);
    assert!(lock.reset().unwrap());
    lock.acquire().unwrap();
    script_flush(&server);
    assert_eq!(redis_blpop_lock::reset_all(&client).unwrap(), 1);
}

#[test]
fn a_waiter_survives_a_script_flush_while_it_blocks() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let fencing = Lock::builder(&client, "l").fencing(true).build().unwrap();
    let waiter = spawn_waiter(fencing, Duration::from_secs(60));
    server.until_blocked(1, Duration::from_secs(20), || waiter.is_finished());
    // The fencing waiter's EVALSHA of acquire.lua is already queued behind its BLPOP; it
    // will meet NOSCRIPT.
    script_flush(&server);
    holder.release().unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn a_lock_key_of_the_wrong_type_is_reported_corrupt_and_left_alone() {
    let server = RedisServer::start();
    let client = server.client();
    let _: () = server.conn().rpush("lock:l", "x").unwrap();
    let lock = Lock::new(&client, "l").unwrap();
    let corrupt =
        |r: Result<(), Error>| matches!(r, Err(Error::Corrupt { ref key, .. }) if key == "lock:l");
    assert!(corrupt(lock.try_acquire().map(drop)));
    assert!(corrupt(lock.release()));
    assert!(corrupt(lock.owner_id().map(drop)));
    let len: usize = server.conn().llen("lock:l").unwrap();
    assert_eq!(len, 1);
}

#[test]
fn a_signal_key_of_the_wrong_type_is_reported_corrupt_to_a_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let _: () = server.conn().set("lock-signal:l", "x").unwrap();
    let waiter = Lock::new(&client, "l").unwrap();
    let result = waiter.acquire_timeout(Duration::from_secs(5));
    assert!(
        matches!(result, Err(Error::Corrupt { ref key, .. }) if key == "lock-signal:l"),
        "{result:?}"
    );
}

#[test]
fn a_signal_key_of_the_wrong_type_leaves_the_waiters_of_other_names_waiting_and_woken() {
    let server = RedisServer::start();
    let client = server.client();
    let (corrupt, sound) = (
        Lock::new(&client, "l").unwrap(),
        Lock::new(&client, "m").unwrap(),
    );
    corrupt.acquire().unwrap();
    sound.acquire().unwrap();
    let _: () = server.conn().set("lock-signal:l", "x").unwrap();
    let since = tries_run(&server);
    // Both wait at this process's one waiting connection, which the corrupt key must not
    // stop for the other name.
    let other = spawn_waiter(Lock::new(&client, "m").unwrap(), Duration::from_secs(20));
    server.until_waiting(1, since, Duration::from_secs(20), || other.is_finished());
    let waiter = Lock::new(&client, "l").unwrap();
    let result = waiter.acquire_timeout(Duration::from_secs(5));
    assert!(
        matches!(result, Err(Error::Corrupt { ref key, .. }) if key == "lock-signal:l"),
        "{result:?}"
    );
    assert_woken_by(|| sound.release().unwrap(), other);
}

#[test]
fn a_refused_connection_is_an_error() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    let client = redis::Client::open(url).unwrap();
    let lock = Lock::new(&client, "l").unwrap();
    match lock.try_acquire() {
        Err(Error::Redis(e)) => assert!(e.is_connection_refusal(), "{e}"),
        other => panic!("expected a refused connection, got {other:?}"),
    }
}

#[test]
fn a_read_only_replica_is_a_readonly_error() {
    let server = RedisServer::start_with(&["--replicaof", "127.0.0.1", "1"]);
    let lock = Lock::new(&server.client(), "l").unwrap();
    let e = redis_error(lock.try_acquire());
    assert_eq!(e.code(), Some("READONLY"));
    assert!(e.to_string().contains("read only replica"), "{e}");
}

#[test]
fn a_user_without_rights_gets_a_noperm_error() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "reader", "on", ">secret", "~*", "+get", "+ping"])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://reader:secret@127.0.0.1:{}/", server.port);
    let lock = Lock::new(&redis::Client::open(url).unwrap(), "l").unwrap();
    let e = redis_error(lock.try_acquire());
    assert_eq!(e.code(), Some("NOPERM"));
    assert!(e.to_string().contains("no permissions"), "{e}");
}
