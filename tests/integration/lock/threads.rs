//! No thread left behind: the renewal threads end soon after the last renewal stops (each
//! waits 2 s for more, so that leases taken in a loop do not each start one), on release and
//! when a handle is dropped.
//! The counting runs in a child process of its own, where no other test's renewal threads
//! are counted.

use std::time::Duration;

use redis_blpop_lock::Lock;

use crate::support::{eventually, renewal_threads, ChildProcess, RedisServer};

/// Waits for the renewal thread to end, once nothing is left to renew.
fn until_no_renewal_thread(why: &str) {
    eventually(Duration::from_secs(10), why, || renewal_threads() == 0);
}

/// Waits for the renewal thread to show up: a new thread names itself only once it runs.
fn until_one_renewal_thread() {
    eventually(Duration::from_secs(5), "one renewal thread", || {
        renewal_threads() == 1
    });
}

#[test]
fn renewal_threads_end_on_release_and_on_drop() {
    let server = RedisServer::start();
    ChildProcess::spawn("lock::threads::renewal_threads_end", &server.url(), &[]).wait_success();
}

/// The checks of `renewal_threads_end_on_release_and_on_drop`, in the child process.
pub fn renewal_threads_end(client: &redis::Client) {
    let renewed = |name: &str| {
        Lock::builder(client, name)
            .expire(Duration::from_secs(30))
            .auto_renewal(true)
            .build()
            .unwrap()
    };

    let released = renewed("released");
    released.acquire().unwrap();
    until_one_renewal_thread();
    released.release().unwrap();
    until_no_renewal_thread("the renewal thread ends after the release");

    let dropped = renewed("dropped");
    dropped.acquire().unwrap();
    until_one_renewal_thread();
    drop(dropped);
    until_no_renewal_thread("the renewal thread ends after the handle is dropped");

    let guarded = renewed("guarded");
    drop(guarded.lock().unwrap());
    until_no_renewal_thread("the renewal thread ends after the guard's release");

    // Renewed: the renewal ran on its server's lane, a thread of its own, which ends too.
    let short = Lock::builder(client, "short")
        .expire(Duration::from_millis(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    short.acquire().unwrap();
    eventually(Duration::from_secs(5), "the scheduler and a lane", || {
        renewal_threads() == 2
    });
    short.release().unwrap();
    until_no_renewal_thread("the lane and the scheduler end after the release");
}

#[test]
fn a_lock_handle_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Lock>();
    assert_send_sync::<redis_blpop_lock::LockGuard<'static>>();
}
