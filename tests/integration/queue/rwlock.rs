//! The read-write lock against real servers: readers share, a writer excludes, a waiting
//! writer is not starved by readers that come after it, downgrade lets readers in, and an
//! upgrade is refused.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Error, RwLock};

use crate::support::{secs, RedisServer};

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

#[test]
fn readers_share_the_lock_and_a_writer_waits_for_them() {
    let server = RedisServer::start();
    let lock = Arc::new(RwLock::new(&server.client(), "rw").unwrap());
    let a = lock.read().unwrap();
    let b = lock
        .try_read()
        .unwrap()
        .expect("a second reader gets in at once");
    assert!(lock.try_write().unwrap().is_none());
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || lock.try_write_for(secs(60)).unwrap().is_some())
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

#[test]
fn a_waiting_writer_is_not_passed_by_readers_that_come_after_it() {
    let server = RedisServer::start();
    let lock = Arc::new(RwLock::new(&server.client(), "rw").unwrap());
    let reading = lock.read().unwrap();
    let (done, order) = mpsc::channel();
    let writer = {
        let (lock, done) = (lock.clone(), done.clone());
        thread::spawn(move || {
            let write = lock.write().unwrap();
            done.send("writer").unwrap();
            thread::sleep(Duration::from_millis(50));
            drop(write);
        })
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        writer.is_finished()
    });
    // A reader now would share with the first, but the writer came before it.
    assert!(lock.try_read().unwrap().is_none());
    let reader = {
        let (lock, done) = (lock.clone(), done.clone());
        thread::spawn(move || {
            let _read = lock.read().unwrap();
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

#[test]
fn a_downgraded_writer_lets_queued_readers_in_but_not_a_writer() {
    let server = RedisServer::start();
    let lock = Arc::new(RwLock::new(&server.client(), "rw").unwrap());
    let write = lock.write().unwrap();
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || lock.try_read_for(secs(60)).unwrap().map(|r| r.unlock()))
    };
    server.until_queued(Primitive::RwLock, "rw", 1, BLOCK_LIMIT, || {
        reader.is_finished()
    });
    let read = write.downgrade().unwrap();
    assert!(reader.join().unwrap().is_some());
    assert!(lock.try_write().unwrap().is_none());
    read.unlock().unwrap();
    assert!(lock.try_write().unwrap().is_some());
}

#[test]
fn a_write_lock_asked_for_by_a_thread_that_reads_is_refused() {
    let server = RedisServer::start();
    let lock = RwLock::new(&server.client(), "rw").unwrap();
    let read = lock.read().unwrap();
    assert!(matches!(lock.write(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(
        lock.try_write_for(secs(1)),
        Err(Error::WouldDeadlock { .. })
    ));
    // A try only finds the lock taken.
    assert!(lock.try_write().unwrap().is_none());
    read.unlock().unwrap();
    assert!(lock.try_write().unwrap().is_some());
}
