//! The fair lock (`Lock::builder(..).fair(true)`) against real servers, for both APIs
//! (`blocking::` and `aio::`, over [`Api`]): the same `Lock` API, served in arrival order, with
//! no barging by a newcomer.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use redis_blpop_lock::handle::Lock;
use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::Error;

use crate::support::{both_apis, secs, Api, RedisServer};

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

fn fair<A: Api>(client: &redis::Client) -> Lock<A> {
    A::lock_on(client, "f").fair(true).build().unwrap()
}

both_apis!(
    waiters_take_the_fair_lock_in_the_order_they_came,
    a_newcomer_does_not_take_the_fair_lock_ahead_of_a_waiter,
    the_fair_lock_keeps_the_lock_api,
);

fn waiters_take_the_fair_lock_in_the_order_they_came<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = fair::<A>(&client);
    A::acquire_lock(&holder).unwrap();
    let (done, order) = mpsc::channel();
    let mut threads = Vec::new();
    for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
        let (lock, done) = (Arc::new(fair::<A>(&client)), done.clone());
        threads.push(thread::spawn(move || {
            A::acquire_lock(&lock).unwrap();
            done.send(name).unwrap();
            A::release_lock(&lock).unwrap();
        }));
        server.until_queued(Primitive::FairLock, "f", n as u64 + 1, BLOCK_LIMIT, || {
            false
        });
    }
    A::release_lock(&holder).unwrap();
    let served: Vec<_> = (0..3)
        .map(|_| order.recv_timeout(secs(30)).unwrap())
        .collect();
    assert_eq!(served, ["a", "b", "c"]);
    for thread in threads {
        thread.join().unwrap();
    }
}

fn a_newcomer_does_not_take_the_fair_lock_ahead_of_a_waiter<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = fair::<A>(&client);
    A::acquire_lock(&holder).unwrap();
    let waiter = {
        let lock = fair::<A>(&client);
        thread::spawn(move || A::acquire_timeout(&lock, secs(60)).unwrap())
    };
    server.until_queued(Primitive::FairLock, "f", 1, BLOCK_LIMIT, || {
        waiter.is_finished()
    });
    A::release_lock(&holder).unwrap();
    // The lock is free for a moment at most, and then the waiter's.
    let newcomer = fair::<A>(&client);
    assert!(!A::try_acquire_lock(&newcomer).unwrap());
    assert!(waiter.join().unwrap());
}

fn the_fair_lock_keeps_the_lock_api<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = fair::<A>(&client);
    let guard = A::guard(&lock).unwrap();
    assert!(guard.fencing_token().is_some());
    assert!(A::locked(&lock).unwrap());
    assert_eq!(A::owner_id(&lock).unwrap().as_deref(), Some(lock.id()));
    assert!(matches!(
        A::acquire_lock(&lock),
        Err(Error::AlreadyAcquired { .. })
    ));
    A::extend_guard(&guard, Some(secs(5))).unwrap();
    A::unlock(guard).unwrap();
    assert!(!A::locked(&lock).unwrap());
    assert!(matches!(
        A::release_lock(&lock),
        Err(Error::NotAcquired { .. })
    ));
}
