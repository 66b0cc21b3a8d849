//! The read-write lock against real servers, for both APIs (`blocking::` and `aio::`, one
//! suite over [`Api`]): readers share, a writer excludes, a waiting writer is not starved by
//! readers that come after it, downgrade lets readers in, and an upgrade is refused.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::Error;

use crate::support::{both_apis, secs, Api, RedisServer};

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

both_apis!(
    readers_share_the_lock_and_a_writer_waits_for_them,
    a_waiting_writer_is_not_passed_by_readers_that_come_after_it,
    a_downgraded_writer_lets_queued_readers_in_but_not_a_writer,
    a_write_lock_asked_for_by_a_thread_that_reads_is_refused,
);

fn readers_share_the_lock_and_a_writer_waits_for_them<A: Api>() {
    let server = RedisServer::start();
    let lock = Arc::new(A::rwlock(&server.client(), "rw"));
    let a = A::read(&lock).unwrap();
    let b = A::try_read(&lock)
        .unwrap()
        .expect("a second reader gets in at once");
    assert!(A::try_write(&lock).unwrap().is_none());
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || A::try_write_for(&lock, secs(60)).unwrap().is_some())
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        writer.is_finished()
    });
    drop(a);
    thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    drop(b);
    assert!(writer.join().unwrap());
}

fn a_waiting_writer_is_not_passed_by_readers_that_come_after_it<A: Api>() {
    let server = RedisServer::start();
    let lock = Arc::new(A::rwlock(&server.client(), "rw"));
    let reading = A::read(&lock).unwrap();
    let (done, order) = mpsc::channel();
    let writer = {
        let (lock, done) = (lock.clone(), done.clone());
        thread::spawn(move || {
            let write = A::write(&lock).unwrap();
            done.send("writer").unwrap();
            thread::sleep(Duration::from_millis(50));
            drop(write);
        })
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        writer.is_finished()
    });
    // A reader now would share with the first, but the writer came before it.
    assert!(A::try_read(&lock).unwrap().is_none());
    let reader = {
        let (lock, done) = (lock.clone(), done.clone());
        thread::spawn(move || {
            let _read = A::read(&lock).unwrap();
            done.send("reader").unwrap();
        })
    };
    server.until_queued(Primitive::RwLock, "rw", 2, BLOCK_LIMIT, || {
        reader.is_finished()
    });
    drop(reading);
    assert_eq!(order.recv_timeout(secs(30)).unwrap(), "writer");
    assert_eq!(order.recv_timeout(secs(30)).unwrap(), "reader");
    writer.join().unwrap();
    reader.join().unwrap();
}

fn a_downgraded_writer_lets_queued_readers_in_but_not_a_writer<A: Api>() {
    let server = RedisServer::start();
    let lock = Arc::new(A::rwlock(&server.client(), "rw"));
    let write = A::write(&lock).unwrap();
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || {
            let read = A::try_read_for(&lock, secs(60)).unwrap();
            read.map(A::unlock_read)
        })
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        reader.is_finished()
    });
    let read = A::downgrade(write).unwrap();
    assert!(reader.join().unwrap().is_some());
    assert!(A::try_write(&lock).unwrap().is_none());
    A::unlock_read(read).unwrap();
    assert!(A::try_write(&lock).unwrap().is_some());
}

fn a_write_lock_asked_for_by_a_thread_that_reads_is_refused<A: Api>() {
    let server = RedisServer::start();
    let lock = A::rwlock(&server.client(), "rw");
    let read = A::read(&lock).unwrap();
    assert!(matches!(A::write(&lock), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(
        A::try_write_for(&lock, secs(1)),
        Err(Error::WouldDeadlock { .. })
    ));
    // A try only finds the lock taken.
    assert!(A::try_write(&lock).unwrap().is_none());
    A::unlock_read(read).unwrap();
    assert!(A::try_write(&lock).unwrap().is_some());
}
