//! The renewal scheduler: a renewal stuck on a frozen server makes no other lock late. (One
//! thread for 10,000 held locks: the slow group's `renewals.rs`.)

use std::time::Duration;

use redis_blpop_lock::Lock;

use crate::support::{secs, send_signal, ChildProcess, RedisServer};

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
