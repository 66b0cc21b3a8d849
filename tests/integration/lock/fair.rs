//! The fair lock (`Lock::builder(..).fair(true)`) against real servers: the same `Lock` API,
//! served in arrival order, with no barging by a newcomer.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Error, Lock};

use crate::support::{secs, RedisServer};

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

fn fair(client: &redis::Client) -> Lock {
    Lock::builder(client, "f").fair(true).build().unwrap()
}

#[test]
fn waiters_take_the_fair_lock_in_the_order_they_came() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = fair(&client);
    holder.acquire().unwrap();
    let (done, order) = mpsc::channel();
    let mut threads = Vec::new();
    for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
        let (lock, done) = (Arc::new(fair(&client)), done.clone());
        threads.push(thread::spawn(move || {
            lock.acquire().unwrap();
            done.send(name).unwrap();
            lock.release().unwrap();
        }));
        server.until_queued(Primitive::FairLock, "f", n as u64 + 1, BLOCK_LIMIT, || {
            false
        });
    }
    holder.release().unwrap();
    let served: Vec<_> = (0..3)
        .map(|_| order.recv_timeout(secs(30)).unwrap())
        .collect();
    assert_eq!(served, ["a", "b", "c"]);
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn a_newcomer_does_not_take_the_fair_lock_ahead_of_a_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = fair(&client);
    holder.acquire().unwrap();
    let waiter = {
        let lock = fair(&client);
        thread::spawn(move || lock.acquire_timeout(secs(60)).unwrap())
    };
    server.until_queued(Primitive::FairLock, "f", 1, BLOCK_LIMIT, || {
        waiter.is_finished()
    });
    holder.release().unwrap();
    // The lock is free for a moment at most, and then the waiter's.
    let newcomer = fair(&client);
    assert!(!newcomer.try_acquire().unwrap());
    assert!(waiter.join().unwrap());
}

#[test]
fn the_fair_lock_keeps_the_lock_api() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = fair(&client);
    let guard = lock.lock().unwrap();
    assert!(guard.fencing_token().is_some());
    assert!(lock.locked().unwrap());
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    assert!(matches!(lock.acquire(), Err(Error::AlreadyAcquired { .. })));
    guard.extend(Some(secs(5))).unwrap();
    guard.unlock().unwrap();
    assert!(!lock.locked().unwrap());
    assert!(matches!(lock.release(), Err(Error::NotAcquired { .. })));
}
