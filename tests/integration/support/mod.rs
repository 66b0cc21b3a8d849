//! What the suites share: a private `redis-server` per test (`server`), child processes
//! (`child`), the examples' binaries (`example`), a proxy that delays and drops replies on cue
//! (`proxy`), every primitive with a fencing token (`fenced`), Redis Cluster and Sentinel
//! topologies (`cluster`, `sentinel`), servers for a quorum (`quorum`), a clock and random
//! numbers (`random`), and small helpers.

#[cfg(feature = "tokio")]
mod aio;
mod apis;
mod child;
#[cfg(feature = "cluster")]
mod cluster;
mod example;
mod fenced;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
mod node;
mod proxy;
mod quorum;
mod random;
#[cfg(feature = "sentinel")]
mod sentinel;
mod server;

use std::fmt::Display;
use std::time::{Duration, Instant};

#[cfg(feature = "tokio")]
pub use aio::{
    assert_lost_and_dropped, assert_task_woken_by, blocked_task_waiter, client_list, connections,
    connections_after_a_wait, spawn_task_waiter,
};
pub(crate) use apis::both_apis;
pub use apis::{blocked_waiter, Api};
pub use child::{child_role, field, send_signal, ChildProcess};
#[cfg(feature = "cluster")]
pub use cluster::RedisCluster;
pub use example::example_binary;
pub use fenced::{every_primitive, Fenced};
pub use proxy::Proxy;
pub use quorum::{quorum_of, servers, urls};
pub use random::{now_ns, Rng};
#[cfg(feature = "sentinel")]
pub use sentinel::{patient, SentinelSet};
pub use server::{
    debug_command_args, free_port, server_binary, server_version, tries_run, RedisServer, DISKLESS,
    JOIN_SETTLE,
};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Polls `done` every few milliseconds until it returns true; panics after `limit` saying
/// what it was waiting for. For test-side conditions: a test that waits on the lock itself
/// uses the lock's own timeouts. `what` is written only on failure, so it may describe the
/// state at that moment (as `RedisServer`'s messages quote the server's log then).
pub fn eventually(limit: Duration, what: impl Display, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "gave up after {limit:?} waiting for {what}"
        );
        std::thread::sleep(ms(5));
    }
}

/// An acquisition id of a queue primitive (a semaphore, a fair lock, a read-write lock) less
/// the `@<process id>` (16 hex digits) the queue engine ends it with: the id as its handle
/// was built with (`holder:0` of a semaphore with `.id("holder")`). Panics on an id that
/// does not end so.
pub fn strip_process(id: &str) -> &str {
    let (own, process) = id
        .rsplit_once('@')
        .unwrap_or_else(|| panic!("{id:?} does not end in @<process id>"));
    assert!(
        process.len() == 16 && process.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id:?} does not end in @<16 hex digits>"
    );
    own
}

/// The keys matching `pattern` that last (no TTL), sorted. Every other one must expire
/// within `limit`: the queue engine's heartbeats (`<base>beats`) and a process's inbox
/// (`<base>signal:<process id>`) are left to expire by themselves.
pub fn lasting_keys(conn: &mut redis::Connection, pattern: &str, limit: Duration) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn).unwrap();
    keys.sort();
    keys.retain(|key| {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        // -2: it expired since KEYS listed it.
        assert!(
            ttl < 0 || ttl <= limit.as_millis() as i64,
            "{key} expires in {ttl} ms, later than {limit:?}"
        );
        ttl == -1
    });
    keys
}

/// A woken waiter takes the lock well before this; one that missed its wake-up tries again
/// only after a 5 s block (or at the holder's expiry).
pub const WOKEN_WITHIN: Duration = Duration::from_secs(4);

/// Runs `release` and checks that `waiter` took the lock soon after: woken, not timed out (a
/// waiter that missed its wake-up tries again only after a 5 s block, or at the holder's
/// expiry; one turned away by a moved slot is told within about a second).
pub fn assert_woken_by(
    release: impl FnOnce(),
    waiter: std::thread::JoinHandle<Result<bool, redis_blpop_lock::Error>>,
) {
    let released = Instant::now();
    release();
    assert!(waiter.join().unwrap().unwrap());
    let after = released.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the waiter took the lock {after:?} after the release"
    );
}

/// A thread that waits up to `timeout` for `lock` and returns what `acquire_timeout` said.
pub fn spawn_waiter(
    lock: redis_blpop_lock::Lock,
    timeout: Duration,
) -> std::thread::JoinHandle<Result<bool, redis_blpop_lock::Error>> {
    std::thread::spawn(move || lock.acquire_timeout(timeout))
}

/// Threads of this process named like renewal threads (Linux keeps 15 bytes of a name).
pub fn renewal_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("redis-lock-rene"))
        .count()
}
