//! The renewal scheduler: two threads renew every expiring lock of the process on one server,
//! 10,000 of them (the scheduler and that server's lane).

use std::time::Instant;

use redis_blpop_lock::Lock;

use crate::support::{eventually, renewal_threads, secs, ChildProcess, RedisServer};

/// How many renewing locks the child holds at once.
const MANY: usize = 10_000;

/// This process's resident memory, in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

#[test]
fn ten_thousand_renewing_locks_cost_two_renewal_threads_and_stay_held() {
    let server = RedisServer::start();
    ChildProcess::spawn("renewal_scale::many", &server.url(), &[]).wait_success();
}

/// The checks of `ten_thousand_renewing_locks_cost_two_renewal_threads_and_stay_held`, in a
/// child process of its own, where no other test's renewal threads are counted.
pub fn many(client: &redis::Client) {
    let expire = secs(4);
    let before = resident_kib();
    let locks: Vec<Lock> = (0..MANY)
        .map(|i| {
            let lock = Lock::builder(client, format!("renewals-{i}"))
                .expire(expire)
                .auto_renewal(true)
                .build()
                .unwrap();
            lock.acquire().unwrap();
            lock
        })
        .collect();
    let taken = Instant::now();
    std::thread::sleep(expire * 3);
    let threads = renewal_threads();
    eprintln!(
        "{MANY} renewing locks: {threads} renewal threads, {} KiB more resident memory",
        resident_kib().saturating_sub(before)
    );
    assert!(threads <= 2, "{threads} renewal threads for one server");
    let lost = locks.iter().filter(|lock| lock.lost()).count();
    assert_eq!(lost, 0, "locks lost after three expiries");
    let mut con = client.get_connection().unwrap();
    for lock in &locks {
        let owner: Option<String> = redis::cmd("GET")
            .arg(format!("lock:{}", lock.name()))
            .query(&mut con)
            .unwrap();
        assert_eq!(
            owner.as_deref(),
            Some(lock.id()),
            "{} not held",
            lock.name()
        );
    }
    eprintln!("all held {:?} after they were taken", taken.elapsed());

    for lock in &locks {
        lock.release().unwrap();
    }
    eventually(
        secs(10),
        "the renewal thread ends after the last release",
        || renewal_threads() == 0,
    );
}
