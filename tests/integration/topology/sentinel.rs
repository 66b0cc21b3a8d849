//! The same lock on the primary that Redis Sentinel names: a waiter follows a failover, and the
//! backend's own threads and errors. The other failovers are in the slow group
//! (`tests/slow/sentinel_failover.rs`).

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{Error, Lock, Sentinel};

use crate::support::{
    assert_woken_by, eventually, patient, secs, spawn_waiter, ChildProcess, SentinelSet,
};

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_lock_lives_on_the_primary_the_sentinels_name() {
    let set = SentinelSet::start();
    let lock = Lock::new(&set.backend(), "named").unwrap();
    let guard = lock.lock().unwrap();
    let owner: Option<String> = set.primary().conn().get("lock:named").unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
    drop(guard);
    assert!(!lock.locked().unwrap());
}

#[test]
fn a_waiter_moves_to_the_new_primary_while_the_old_one_is_still_a_primary() {
    let set = SentinelSet::start();
    let backend = set.backend();
    let holder = patient(&backend, "moving").build().unwrap();
    holder.acquire().unwrap();
    let waiter_lock = patient(&backend, "moving").build().unwrap();
    let waiter = spawn_waiter(waiter_lock, secs(60));
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    let old = set.failover_named();
    set.primary()
        .until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    // Not turned away by a demotion: Sentinel demotes a live old primary seconds later.
    assert!(
        set.is_primary(old),
        "the waiter moved only once the old primary was demoted"
    );
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn the_threads_listening_to_the_sentinels_end_with_the_last_handle() {
    let set = SentinelSet::start();
    let urls = set.sentinel_urls();
    let args: Vec<&str> = std::iter::once(set.service())
        .chain(urls.iter().map(String::as_str))
        .collect();
    ChildProcess::spawn("topology::sentinel::listeners_end", &urls[0], &args).wait_success();
}

/// Threads of this process named like the sentinels' listeners (Linux keeps 15 bytes).
fn listening_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "redis-lock-sntl")
        .count()
}

/// The checks of `the_threads_listening_to_the_sentinels_end_with_the_last_handle`, in a
/// child process where no other test's threads are counted: `args` are the service and the
/// sentinels' URLs.
pub fn listeners_end(args: &[String]) {
    let backend = Sentinel::new(args[1..].iter().map(String::as_str), &args[0]).unwrap();
    let first = Lock::new(&backend, "listened").unwrap();
    let second = Lock::new(&backend, "listened").unwrap();
    drop(first.lock().unwrap());
    let sentinels = args.len() - 1;
    eventually(secs(5), "a listening thread per sentinel", || {
        listening_threads() == sentinels
    });
    drop(first);
    assert_eq!(
        listening_threads(),
        sentinels,
        "shared by the backend's handles"
    );
    drop(second);
    eventually(secs(5), "no listening thread", || listening_threads() == 0);
}

#[test]
fn a_try_while_no_sentinel_can_be_heard_asks_one_and_fails_without_an_answer() {
    let set = SentinelSet::start();
    let backend = set.backend();
    let lock = Lock::builder(&backend, "unheard")
        .io_timeout(secs(5))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    lock.release().unwrap();
    set.freeze_sentinels();
    // Until the listeners notice that their sentinels stopped answering, a try goes out;
    // then none may, since no sentinel would tell of a failover.
    eventually(
        secs(20),
        "a try refused for want of a sentinel",
        || match lock.try_acquire() {
            Ok(true) => lock.release().map(|_| false).unwrap(),
            Ok(false) => panic!("no one else takes this lock"),
            Err(Error::Redis(_)) => true,
            Err(e) => panic!("{e:?}"),
        },
    );
    set.thaw_sentinels();
    assert!(lock.try_acquire().unwrap());
}

#[test]
fn a_sentinel_that_does_not_know_the_service_is_an_error() {
    let set = SentinelSet::start();
    let backend = Sentinel::new(set.sentinel_urls(), "no-such-service").unwrap();
    let lock = Lock::builder(&backend, "l")
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = lock.try_acquire().unwrap_err();
    assert!(e.to_string().contains("does not monitor"), "{e}");
}
