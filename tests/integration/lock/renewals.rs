//! The renewal scheduler: renewals stuck on a frozen server make no other server's renewal
//! late, on either API. (Two threads for 10,000 held locks on one server: the slow group's
//! `renewals.rs`.)

use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{Lock, Semaphore};

use crate::support::{renewal_threads, secs, send_signal, ChildProcess, RedisServer};

#[test]
fn a_renewal_stuck_on_a_frozen_server_does_not_make_a_healthy_servers_lock_late() {
    let healthy = RedisServer::start();
    let frozen = RedisServer::start();
    let pid = frozen.pid().to_string();
    ChildProcess::spawn(
        "lock::renewals::frozen",
        &healthy.url(),
        &[&frozen.url(), &pid],
    )
    .wait_success();
}

/// The checks of `a_renewal_stuck_on_a_frozen_server_does_not_make_a_healthy_servers_lock_late`,
/// in a child process of its own, whose only renewals are these: the healthy server's lock is
/// A lock named `name` taken with `expire`, renewed; its I/O timeout is longer than any test
/// here, so that a renewal on a frozen server hangs until the server resumes.
fn renewing(client: &redis::Client, name: &str, expire: Duration) -> Lock {
    let lock = Lock::builder(client, name)
        .expire(expire)
        .auto_renewal(true)
        .io_timeout(secs(30))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    lock
}

/// taken while the frozen server's renewal is stuck, and nothing else is scheduled.
pub fn frozen(healthy: &redis::Client, args: &[String]) {
    let [frozen_url, frozen_pid] = args else {
        panic!("expected the frozen server's URL and pid, got {args:?}");
    };
    let frozen = redis::Client::open(frozen_url.as_str()).unwrap();
    let pid: u32 = frozen_pid.parse().unwrap();
    let expire = Duration::from_millis(1500);
    let renewing = |client: &redis::Client, name: &str| renewing(client, name, expire);
    let on_frozen = renewing(&frozen, "renewals-frozen");
    let stopped = Frozen::new(pid);
    // Its first renewal, due at two thirds of the expiry, is stuck by now.
    std::thread::sleep(expire);
    let on_healthy = renewing(healthy, "renewals-healthy");
    std::thread::sleep(expire * 4);
    let held =
        !on_healthy.lost() && on_healthy.owner_id().unwrap().as_deref() == Some(on_healthy.id());
    drop(stopped);

    assert!(
        held,
        "the healthy server's lock was lost while the other server was frozen"
    );
    on_healthy.release().unwrap();
    drop(on_frozen);
}

/// The healthy holds' expiry in the `crowded` roles.
const EXPIRE: Duration = Duration::from_secs(1);

/// How many of their leases the healthy holds are watched for.
const LEASES: u32 = 4;

/// How late a renewal may be and still count as on schedule: a few milliseconds as measured,
/// with room for a loaded machine, and well short of the 100 ms that one renewal stuck ahead
/// of it on another server cost before each server had a lane of its own.
const ON_TIME: Duration = Duration::from_millis(25);

/// How often the healthy holds' TTLs are read.
const SAMPLE: Duration = Duration::from_millis(2);

/// The name of every hold in the `crowded` roles (numbered on the frozen server).
const NAME: &str = "renewals-crowded";

#[test]
fn five_renewals_stuck_on_a_frozen_server_make_no_healthy_servers_renewal_late() {
    crowd("lock::renewals::crowded", 5);
}

#[test]
fn fifty_renewals_stuck_on_a_frozen_server_make_no_healthy_servers_renewal_late() {
    crowd("lock::renewals::crowded", 50);
}

#[cfg(feature = "tokio")]
#[test]
fn fifty_async_renewals_stuck_on_a_frozen_server_make_no_healthy_servers_renewal_late() {
    crowd("lock::renewals::crowded_aio", 50);
}

/// Runs `role` with `holds` locks on the server it freezes.
fn crowd(role: &str, holds: usize) {
    let healthy = RedisServer::start();
    let frozen = RedisServer::start();
    let args = [
        frozen.url(),
        frozen.pid().to_string(),
        holds.to_string(),
        LEASES.to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ChildProcess::spawn(role, &healthy.url(), &args).wait_success();
}

/// The arguments of the `crowded` roles: the server to freeze (its URL and pid), how many
/// locks to take there and for how many leases to watch the healthy server's.
struct Crowd {
    frozen: redis::Client,
    pid: u32,
    holds: usize,
    leases: u32,
}

/// What [`Crowd::watch`] saw.
struct Watched {
    /// The lowest TTL read of the healthy lock, and of the healthy permit.
    lows: [Duration; 2],
    /// Whether either was lost.
    lost: bool,
    /// How many renewal threads ran at the end, the server still frozen.
    threads: usize,
}

impl Crowd {
    fn new(args: &[String]) -> Crowd {
        let [frozen, pid, holds, leases] = args else {
            panic!("expected the frozen server's URL and pid, the holds and the leases: {args:?}");
        };
        Crowd {
            frozen: redis::Client::open(frozen.as_str()).unwrap(),
            pid: pid.parse().unwrap(),
            holds: holds.parse().unwrap(),
            leases: leases.parse().unwrap(),
        }
    }

    /// Freezes the server, and reads the TTLs of the healthy server's lock and permit named
    /// [`NAME`] for the leases to watch; `lost` says whether either is lost by then.
    fn watch(&self, healthy: &redis::Client, lost: impl FnOnce() -> bool) -> Watched {
        let frozen = Frozen::new(self.pid);
        let io = secs(5);
        let until = Instant::now() + EXPIRE * self.leases;
        let mut lows = [EXPIRE; 2];
        while Instant::now() < until {
            let lock = inspect::holder(healthy, NAME, io).unwrap();
            let queue = inspect::queue(healthy, Primitive::Semaphore, NAME, io).unwrap();
            let permit = queue.holders.first();
            let ttls = [lock.and_then(|l| l.ttl), permit.and_then(|p| p.ttl)];
            for (low, ttl) in lows.iter_mut().zip(ttls) {
                *low = (*low).min(ttl.unwrap_or_default());
            }
            std::thread::sleep(SAMPLE);
        }
        let watched = Watched {
            lows,
            lost: lost(),
            threads: renewal_threads(),
        };
        drop(frozen);
        watched
    }

    /// Checks what [`watch`](Self::watch) saw: neither hold lost, and every renewal on time. A
    /// renewal on time finds a third of the expiry left, so the lowest TTL read says how late
    /// the latest renewal came, at most (a read comes up to `SAMPLE` after the lowest TTL).
    fn check(&self, watched: &Watched, api: &str) {
        let [lock, permit] = watched.lows.map(|low| (EXPIRE / 3).saturating_sub(low));
        let holds = self.holds;
        eprintln!(
            "{api}, {holds} holds frozen: the healthy renewals came late by at most {lock:?} \
             (lock), {permit:?} (permit) over {} leases; {} renewal threads",
            self.leases, watched.threads
        );
        assert!(
            !watched.lost,
            "{api}: a healthy server's hold was lost while {holds} renewals hung on another"
        );
        assert!(
            lock <= ON_TIME + SAMPLE && permit <= ON_TIME + SAMPLE,
            "{api}: renewals on the healthy server came late by up to {lock:?} (lock), \
             {permit:?} (permit)"
        );
    }
}

/// A server stopped (SIGSTOP) until dropped, also when the test fails.
struct Frozen(u32);

impl Frozen {
    fn new(pid: u32) -> Frozen {
        send_signal(pid, "STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        send_signal(self.0, "CONT");
    }
}

/// The checks of the `..._make_no_healthy_servers_renewal_late` tests, in a child process of
/// its own (see [`Crowd`] for `args`): renewing locks on the server to freeze, taken first,
/// then a renewing lock and a renewing semaphore permit on the healthy server, all with the
/// same expiry. The server then freezes with every renewal of its locks about to hang.
pub fn crowded(healthy: &redis::Client, args: &[String]) {
    let crowd = Crowd::new(args);
    let renewing = |client: &redis::Client, name: &str| renewing(client, name, EXPIRE);
    let on_frozen: Vec<Lock> = (0..crowd.holds)
        .map(|i| renewing(&crowd.frozen, &format!("{NAME}-{i}")))
        .collect();
    let lock = renewing(healthy, NAME);
    let semaphore = Semaphore::builder(healthy, NAME, 1)
        .expire(EXPIRE)
        .auto_renewal(true)
        .build()
        .unwrap();
    let permit = semaphore.acquire().unwrap();

    let watched = crowd.watch(healthy, || lock.lost() || permit.lost());
    crowd.check(&watched, "blocking");
    // The scheduler, the frozen server's lane and the healthy one's.
    assert!(
        watched.threads <= 3,
        "{} renewal threads for two servers",
        watched.threads
    );
    permit.release().unwrap();
    lock.release().unwrap();
    drop(on_frozen);
}

/// [`crowded`] on the async API: each renewal is a task of its own, and each server's
/// requests go on a connection of their own.
#[cfg(feature = "tokio")]
pub fn crowded_aio(healthy: &redis::Client, args: &[String]) {
    use redis_blpop_lock::aio;

    let crowd = Crowd::new(args);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let renewing = |client: &redis::Client, name: String| {
        let lock = aio::Lock::builder(client, name)
            .expire(EXPIRE)
            .auto_renewal(true)
            .io_timeout(secs(30))
            .build()
            .unwrap();
        async move {
            lock.acquire().await.unwrap();
            lock
        }
    };
    let semaphore = aio::Semaphore::builder(healthy, NAME, 1)
        .expire(EXPIRE)
        .auto_renewal(true)
        .build()
        .unwrap();
    let (on_frozen, lock, permit) = runtime.block_on(async {
        let mut on_frozen = Vec::new();
        for i in 0..crowd.holds {
            on_frozen.push(renewing(&crowd.frozen, format!("{NAME}-{i}")).await);
        }
        let lock = renewing(healthy, NAME.to_string()).await;
        (on_frozen, lock, semaphore.acquire().await.unwrap())
    });

    // The renewal tasks run on the runtime's threads meanwhile.
    let watched = crowd.watch(healthy, || lock.lost() || permit.lost());
    crowd.check(&watched, "async");
    runtime.block_on(async {
        permit.release().await.unwrap();
        lock.release().await.unwrap();
        drop(on_frozen);
    });
}
