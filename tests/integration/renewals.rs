//! The renewal scheduler: one thread renews every expiring lock of the process, and a renewal
//! stuck on a frozen server makes no other lock late.

use std::time::{Duration, Instant};

use redis_blpop_lock::Lock;

use crate::support::{eventually, secs, send_signal, ChildProcess, RedisServer};
use crate::threads::renewal_threads;

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
fn ten_thousand_renewing_locks_cost_one_renewal_thread_and_stay_held() {
    let server = RedisServer::start();
    ChildProcess::spawn("renewals::many", &server.url(), &[]).wait_success();
}

/// The checks of `ten_thousand_renewing_locks_cost_one_renewal_thread_and_stay_held`, in a
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
    eventually(secs(10), "one renewal thread", || renewal_threads() == 1);
    eprintln!(
        "{MANY} renewing locks: {} renewal thread(s), {} KiB more resident memory",
        renewal_threads(),
        resident_kib().saturating_sub(before)
    );

    std::thread::sleep(expire * 3);
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
    assert_eq!(
        renewal_threads(),
        0,
        "the last release joins the renewal thread"
    );
}

#[test]
fn a_renewal_stuck_on_a_frozen_server_does_not_make_a_healthy_servers_lock_late() {
    let healthy = RedisServer::start();
    let frozen = RedisServer::start();
    let pid = frozen.pid().to_string();
    ChildProcess::spawn("renewals::frozen", &healthy.url(), &[&frozen.url(), &pid]).wait_success();
}

/// The checks of `a_renewal_stuck_on_a_frozen_server_does_not_make_a_healthy_servers_lock_late`,
/// in a child process of its own, whose only renewals are these: the healthy server's lock is
/// taken while the frozen server's renewal is stuck, and nothing else is scheduled.
pub fn frozen(healthy: &redis::Client, args: &[String]) {
    let [frozen_url, frozen_pid] = args else {
        panic!("expected the frozen server's URL and pid, got {args:?}");
    };
    let frozen = redis::Client::open(frozen_url.as_str()).unwrap();
    let pid: u32 = frozen_pid.parse().unwrap();
    let expire = Duration::from_millis(1500);
    let renewing = |client: &redis::Client, name: &str| {
        let lock = Lock::builder(client, name)
            .expire(expire)
            .auto_renewal(true)
            // Longer than the test: a renewal on the frozen server hangs until it resumes.
            .io_timeout(secs(30))
            .build()
            .unwrap();
        lock.acquire().unwrap();
        lock
    };
    let on_frozen = renewing(&frozen, "renewals-frozen");
    send_signal(pid, "STOP");
    // Its first renewal, due at two thirds of the expiry, is stuck by now.
    std::thread::sleep(expire);
    let on_healthy = renewing(healthy, "renewals-healthy");
    std::thread::sleep(expire * 4);
    let held =
        !on_healthy.lost() && on_healthy.owner_id().unwrap().as_deref() == Some(on_healthy.id());
    send_signal(pid, "CONT");

    assert!(
        held,
        "the healthy server's lock was lost while the other server was frozen"
    );
    on_healthy.release().unwrap();
    drop(on_frozen);
}
