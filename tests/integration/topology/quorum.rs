//! Redlock over five private servers: a lock held by a majority, waits that block in `BLPOP`,
//! and what a minority or a majority of dead servers does to each.

use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock, Quorum};

use crate::support::{assert_woken_by, eventually, ms, secs, servers, spawn_waiter, RedisServer};

const BLOCK_LIMIT: Duration = Duration::from_secs(20);
const EXPIRE: Duration = Duration::from_secs(30);

pub fn quorum(servers: &[RedisServer]) -> Quorum {
    Quorum::new(servers.iter().map(RedisServer::client)).unwrap()
}

/// How many of `servers` hold lock `name` for `id`.
pub fn holding(servers: &[RedisServer], name: &str, id: &str) -> usize {
    servers
        .iter()
        .filter(|s| {
            let owner: Option<String> = s.conn().get(format!("lock:{name}")).unwrap();
            owner.as_deref() == Some(id)
        })
        .count()
}

fn blocked_anywhere(servers: &[RedisServer]) -> u64 {
    servers.iter().map(RedisServer::blocked_clients).sum()
}

/// Lock `q` held, and a thread waiting for it that has blocked on one of `servers`.
fn held_with_a_waiter(
    quorum: &Quorum,
    servers: &[RedisServer],
) -> (Lock, std::thread::JoinHandle<Result<bool, Error>>) {
    let holder = Lock::builder(quorum, "q").expire(EXPIRE).build().unwrap();
    holder.acquire().unwrap();
    let waiter = Lock::builder(quorum, "q").expire(EXPIRE).build().unwrap();
    let waiter = spawn_waiter(waiter, secs(60));
    crate::support::eventually(BLOCK_LIMIT, "the waiter to block", || {
        blocked_anywhere(servers) >= 1 || waiter.is_finished()
    });
    (holder, waiter)
}

#[test]
fn a_lock_is_held_on_every_live_server_and_released_on_all() {
    let servers = servers(5);
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(EXPIRE)
        .build()
        .unwrap();
    let guard = lock.lock().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 5);
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    drop(guard);
    assert_eq!(holding(&servers, "q", lock.id()), 0);
}

#[test]
fn a_release_wakes_a_waiter_blocked_on_one_server() {
    let servers = servers(5);
    let quorum = quorum(&servers);
    let (holder, waiter) = held_with_a_waiter(&quorum, &servers);
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn two_dead_servers_of_five_change_nothing() {
    let mut servers = servers(5);
    servers[0].kill();
    servers[3].kill();
    let quorum = quorum(&servers);
    let holder = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    holder.acquire().unwrap();
    let waiter = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    assert!(!waiter.try_acquire().unwrap());
    let waiter = spawn_waiter(waiter, secs(60));
    let live = [&servers[1], &servers[2], &servers[4]];
    crate::support::eventually(BLOCK_LIMIT, "the waiter to block", || {
        live.iter().map(|s| s.blocked_clients()).sum::<u64>() >= 1 || waiter.is_finished()
    });
    holder.release().unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn three_dead_servers_of_five_fail_by_the_deadline_and_leave_no_key() {
    let mut servers = servers(5);
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(EXPIRE)
        .build()
        .unwrap();
    let started = Instant::now();
    match lock.acquire_timeout(Duration::from_millis(500)) {
        Err(Error::Redis(e)) => assert!(e.to_string().contains("quorum"), "{e}"),
        other => panic!("expected a quorum error, got {other:?}"),
    }
    assert!(started.elapsed() < secs(3), "{:?}", started.elapsed());
    assert_eq!(holding(&servers[1..2], "q", lock.id()), 0);
    assert_eq!(holding(&servers[3..4], "q", lock.id()), 0);
}

#[test]
fn fencing_and_an_acquire_without_expiry_are_refused_on_a_quorum() {
    let servers = servers(3);
    let quorum = quorum(&servers);
    let fenced = Lock::builder(&quorum, "q")
        .expire(EXPIRE)
        .fencing(true)
        .build();
    assert!(matches!(fenced, Err(Error::InvalidArgument(ref m)) if m.contains("fencing")));
    let forever = Lock::new(&quorum, "q").unwrap();
    assert!(
        matches!(forever.try_acquire(), Err(Error::InvalidArgument(ref m)) if m.contains("expire"))
    );
    assert_eq!(
        forever.holder().unwrap(),
        None,
        "it may still look at the lock"
    );
}

#[test]
fn a_second_handle_with_the_holders_id_is_refused_and_leaves_the_lock_held() {
    let servers = servers(5);
    let quorum = quorum(&servers);
    let holder = Lock::builder(&quorum, "q")
        .expire(EXPIRE)
        .id("shared-id")
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let twin = Lock::builder(&quorum, "q")
        .expire(EXPIRE)
        .id("shared-id")
        .build()
        .unwrap();
    assert!(matches!(
        twin.try_acquire(),
        Err(Error::AlreadyAcquired { .. })
    ));
    assert_eq!(holding(&servers, "q", "shared-id"), 5);
}

#[test]
fn a_waiter_whose_server_dies_waits_on_another() {
    let mut servers = servers(5);
    let quorum = quorum(&servers);
    let (holder, waiter) = held_with_a_waiter(&quorum, &servers);
    let blocked_on = (0..5)
        .find(|&i| servers[i].blocked_clients() >= 1)
        .expect("a server with the waiter");
    servers[blocked_on].kill();
    // The server before it in the order a release sends its unlocks: a signal there comes
    // after the unlocks to the others are on their way, so the woken try does not overtake
    // them (on the first server it could, find the holder on a majority, and sleep 5 s).
    let before = (blocked_on + 4) % 5;
    crate::support::eventually(
        BLOCK_LIMIT,
        "the waiter to block on the server before",
        || servers[before].blocked_clients() >= 1 || waiter.is_finished(),
    );
    assert_woken_by(|| holder.release().unwrap(), waiter);
}

#[test]
fn with_lock_and_the_cache_work_on_a_quorum() {
    let servers = servers(3);
    let quorum = quorum(&servers);
    assert_eq!(
        redis_blpop_lock::with_lock(&quorum, "q", || 2 + 2).unwrap(),
        4
    );
    let cache = redis_blpop_lock::Cache::new(&quorum).unwrap();
    let value: String = cache
        .get_or_set("entry", secs(60), || Ok::<_, Error>("v".to_string()))
        .unwrap();
    assert_eq!(value, "v");
    for server in &servers {
        let stored: Option<String> = server.conn().get("entry").unwrap();
        assert_eq!(stored.as_deref(), Some("v"), "written on every server");
    }
}

#[test]
fn reset_all_frees_a_lock_on_every_server() {
    let servers = servers(3);
    let quorum = quorum(&servers);
    let holder = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    holder.acquire().unwrap();
    assert_eq!(
        redis_blpop_lock::reset_all(&quorum).unwrap(),
        3,
        "one key per server"
    );
    assert_eq!(holding(&servers, "q", holder.id()), 0);
}

#[test]
fn a_server_that_refuses_the_write_counts_as_no_answer() {
    let servers = servers(3);
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query(&mut servers[2].conn())
        .unwrap();
    let quorum = quorum(&servers);
    let a = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    assert!(a.try_acquire().unwrap(), "two of three is a majority");
    assert_eq!(holding(&servers[..2], "q", a.id()), 2);
    let b = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    assert!(!b.try_acquire().unwrap());
}

#[test]
fn a_frozen_server_costs_its_timeout_not_the_quorum() {
    let servers = servers(3);
    let quorum = quorum(&servers);
    let lock = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    // Connections to every server exist before one freezes, as in a running process.
    lock.acquire().unwrap();
    lock.release().unwrap();
    servers[0].pause();
    let started = Instant::now();
    let taken = lock.try_acquire();
    let released = lock.release();
    servers[0].resume();
    assert!(taken.unwrap(), "the other two are a majority");
    released.unwrap();
    assert!(started.elapsed() < secs(2), "{:?}", started.elapsed());
}

#[test]
fn a_holders_renewal_does_not_retake_a_lock_that_was_reset_and_used() {
    let servers = servers(3);
    let quorum = quorum(&servers);
    let holder = Lock::builder(&quorum, "q")
        .expire(Duration::from_millis(600))
        .auto_renewal(true)
        .build()
        .unwrap();
    let guard = holder.lock().unwrap();
    let operator = Lock::new(&quorum, "q").unwrap();
    assert!(operator.reset().unwrap());
    let other = Lock::builder(&quorum, "q").expire(EXPIRE).build().unwrap();
    other.acquire().unwrap();
    other.release().unwrap();
    crate::support::eventually(secs(5), "the holder to learn its lock was lost", || {
        guard.lost()
    });
    assert_eq!(holding(&servers, "q", holder.id()), 0, "not retaken");
}

#[test]
fn an_expire_too_short_for_the_drift_is_refused() {
    let servers = servers(3);
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(Duration::from_millis(3))
        .build()
        .unwrap();
    assert!(
        matches!(lock.try_acquire(), Err(Error::InvalidArgument(ref m)) if m.contains("drift"))
    );
}

/// The waiters of a lock block on one server, which may never have had the holder's key: it
/// was down when the lock was taken (as a fresh server still starting is), and is back, empty,
/// when the waiter comes. The release must wake the waiter there all the same, not leave it to
/// its 5 s fallback. Each server in turn is the one that missed the key, so one of them is
/// the waiters' server.
#[test]
fn a_release_wakes_a_waiter_on_a_server_that_never_had_the_holders_key() {
    for missed in 0..5 {
        let mut servers = servers(5);
        let quorum = quorum(&servers);
        servers[missed].kill();
        let holder = Lock::builder(&quorum, "q")
            .expire(secs(10))
            .build()
            .unwrap();
        holder.acquire().unwrap();
        servers[missed].restart_after(Duration::ZERO);
        let waiter = Lock::builder(&quorum, "q")
            .expire(secs(10))
            .build()
            .unwrap();
        let waiter = spawn_waiter(waiter, secs(30));
        eventually(BLOCK_LIMIT, "the waiter to block", || {
            blocked_anywhere(&servers) >= 1 || waiter.is_finished()
        });
        let released = Instant::now();
        holder.release().unwrap();
        assert!(waiter.join().unwrap().unwrap());
        let after = released.elapsed();
        println!("server {missed} missed the holder's key: the waiter took the lock {after:?} after the release");
        assert!(
            after < secs(2),
            "server {missed} missed the holder's key: the waiter took the lock {after:?} after \
             the release"
        );
    }
}

/// Five servers, each with a connection of this process (as in a running process), the
/// first `frozen` of them then stopped with `SIGSTOP`.
pub fn five_with_frozen(frozen: usize) -> Vec<RedisServer> {
    let servers = servers(5);
    let warm = Lock::builder(&quorum(&servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    warm.acquire().unwrap();
    warm.release().unwrap();
    for server in &servers[..frozen] {
        server.pause();
    }
    servers
}

/// What `call` on a handle of lock `q` said with three servers of five frozen, and how long
/// it took.
fn against_a_frozen_majority(
    call: impl FnOnce(&Lock) -> Result<bool, Error>,
) -> (Result<bool, Error>, Duration) {
    let servers = five_with_frozen(3);
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(EXPIRE)
        .build()
        .unwrap();
    let started = Instant::now();
    let said = call(&lock);
    let took = started.elapsed();
    for server in &servers[..3] {
        server.resume();
    }
    assert!(
        matches!(said, Err(Error::OutcomeUnknown { .. })),
        "{said:?}"
    );
    (said, took)
}

/// Each server has 100 ms to answer (the quorum's default server timeout): a call against a
/// frozen majority ends within a few of those, not after the handle's 5 s I/O timeout.
#[test]
fn a_try_against_a_frozen_majority_ends_within_the_server_timeouts() {
    let (tried, took) = against_a_frozen_majority(Lock::try_acquire);
    println!("try_acquire against a frozen majority: {tried:?} after {took:?}");
    assert!(took < secs(1), "try_acquire took {took:?}");
}

#[test]
fn a_wait_against_a_frozen_majority_ends_by_its_deadline() {
    let (waited, took) = against_a_frozen_majority(|lock| lock.acquire_timeout(ms(500)));
    println!("acquire_timeout(500 ms) against a frozen majority: {waited:?} after {took:?}");
    assert!(
        took < ms(500 + 150),
        "acquire_timeout(500 ms) took {took:?}"
    );
}
