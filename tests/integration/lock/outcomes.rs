//! Core v2's outcome rules, deadlines and wake-ups, each pinned by the fault that broke them:
//! a reply dropped after the server ran the command, a frozen server, `maxclients`, a
//! corrupted counter.

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use redis::Commands;
use redis_blpop_lock::{CancelToken, Error, Lock};

use crate::support::{both_apis, eventually, ms, secs, tries_run, Api, Proxy, RedisServer};

/// The owner id in `lock:l`, read on a connection of the test's own.
fn owner(server: &RedisServer) -> Option<String> {
    server.conn().get("lock:l").unwrap()
}

#[test]
fn a_reset_whose_reply_is_lost_never_deletes_a_lock_taken_after_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    // A first round loads the unlock script, which reset uses: otherwise the reply dropped
    // below would be the `NOSCRIPT` that comes before the script runs.
    holder.acquire().unwrap();
    holder.release().unwrap();
    holder.acquire().unwrap();
    let waiter = Arc::new(Lock::new(&client, "l").unwrap());
    let waiting = Arc::clone(&waiter);
    let woken = thread::spawn(move || waiting.acquire_timeout(secs(30)));
    server.until_blocked(1, secs(10), || woken.is_finished());
    // The reset runs (waking the waiter, who takes the lock) but its reply never arrives.
    proxy.drop_reply_to("EVAL");
    let operator = Lock::new(&proxy.client(), "l").unwrap();
    assert!(operator.reset().unwrap());
    assert!(woken.join().unwrap().unwrap());
    assert_eq!(
        owner(&server).as_deref(),
        Some(waiter.id()),
        "the waiter's lock was deleted"
    );
    let third = Lock::new(&client, "l").unwrap();
    assert!(
        !third.try_acquire().unwrap(),
        "a third owner took a held lock"
    );
    assert!(!waiter.lost());
}

#[test]
fn a_handle_whose_release_outcome_is_unknown_asks_redis_before_acquiring_again() {
    let server = RedisServer::start();
    let lock = Lock::builder(&server.client(), "l")
        .io_timeout(ms(300))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    server.pause();
    let released = lock.release();
    server.resume();
    assert!(
        matches!(released, Err(Error::OutcomeUnknown { .. })),
        "{released:?}"
    );
    // Redis may or may not still hold our id: the handle asks instead of refusing.
    assert!(lock.try_acquire().unwrap());
    lock.release().unwrap();
    assert_eq!(owner(&server), None);
}

both_apis!(
    timed_waits_against_a_frozen_server_end_by_their_deadline,
    a_call_without_timeout_ends_by_the_io_timeout_against_a_frozen_server,
);

fn timed_waits_against_a_frozen_server_end_by_their_deadline<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&holder).unwrap();
    let waiter = A::lock_on(&client, "l").build().unwrap();
    // Idle pooled connections, as a busy process has.
    assert!(!A::try_acquire_lock(&waiter).unwrap());
    assert!(!A::try_acquire_lock(&waiter).unwrap());
    server.pause();
    let started = Instant::now();
    let timed_out = A::acquire_timeout(&waiter, ms(300));
    let first = started.elapsed();
    let started = Instant::now();
    let locked = A::try_guard_for(&waiter, ms(300)).map(|g| g.is_some());
    let second = started.elapsed();
    server.resume();
    for (call, result, took) in [
        ("acquire_timeout", timed_out, first),
        ("try_lock_for", locked, second),
    ] {
        assert!(
            matches!(result, Err(_) | Ok(false)),
            "{call} took a held lock on a frozen server: {result:?}"
        );
        // The deadline plus the grace (250 ms) for the round trip under way, and a noisy
        // machine's scheduling.
        assert!(took < ms(300 + 250 + 1000), "{call}(300 ms) took {took:?}");
    }
    let owner: Option<String> = server.conn().get("lock:l").unwrap();
    assert_eq!(owner.as_deref(), Some(holder.id()));
}

fn a_call_without_timeout_ends_by_the_io_timeout_against_a_frozen_server<A: Api>() {
    let server = RedisServer::start();
    let lock = A::lock_on(&server.client(), "l")
        .io_timeout(ms(400))
        .build()
        .unwrap();
    assert!(!A::locked(&lock).unwrap());
    server.pause();
    let started = Instant::now();
    let result = A::holder(&lock);
    let took = started.elapsed();
    server.resume();
    assert!(result.is_err(), "{result:?}");
    assert!(
        took < ms(400 + 1000),
        "holder() took {took:?} with a 400 ms I/O timeout"
    );
}

#[test]
fn a_waiter_takes_a_crashed_holders_lock_right_at_its_expiry_at_default_hz() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l").expire(ms(400)).build().unwrap();
    holder.acquire().unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    let expires = Instant::now() + ms(pttl as u64);
    std::mem::forget(holder); // a crash: no release, no renewal
    let waiter = Lock::new(&client, "l").unwrap();
    assert!(waiter.acquire_timeout(secs(10)).unwrap());
    let late = Instant::now().saturating_duration_since(expires);
    // The server's own timer fires every 100 ms at hz 10; the client's fires on time. A
    // generous bound for a shared machine, still well under the server timer's step.
    assert!(
        late < ms(60),
        "took the lock {late:?} after the holder's expiry"
    );
}

#[test]
fn a_fencing_acquire_with_a_corrupt_counter_takes_nothing() {
    for corrupt in ["not-a-number", "-3", "9223372036854775807"] {
        let server = RedisServer::start();
        let _: () = server.conn().set("lock-fence:l", corrupt).unwrap();
        let lock = Lock::builder(&server.client(), "l")
            .fencing(true)
            .build()
            .unwrap();
        let result = lock.try_acquire();
        assert!(
            matches!(result, Err(Error::Corrupt { ref key, .. }) if key == "lock-fence:l"),
            "{corrupt}: {result:?}"
        );
        assert_eq!(
            owner(&server),
            None,
            "{corrupt}: the lock was taken all the same"
        );
        let counter: String = server.conn().get("lock-fence:l").unwrap();
        assert_eq!(counter, corrupt);
    }
}

#[test]
fn a_fencing_acquire_with_a_list_as_counter_takes_nothing() {
    let server = RedisServer::start();
    let _: () = server.conn().rpush("lock-fence:l", 1).unwrap();
    let lock = Lock::builder(&server.client(), "l")
        .fencing(true)
        .build()
        .unwrap();
    assert!(matches!(lock.try_acquire(), Err(Error::Corrupt { .. })));
    assert_eq!(owner(&server), None);
}

#[test]
fn a_release_gets_through_while_waiters_and_other_clients_fill_maxclients() {
    let server = RedisServer::start_with(&["--maxclients", "12"]);
    // The test's own connection, opened before the crowd takes every slot.
    let mut admin = server.conn();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    // Read on the test's own connection: the server may have no slot left for another.
    let mut tries = || -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut admin)
            .unwrap();
        let stats = info.get::<String>("cmdstat_set").unwrap_or_default();
        let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="));
        calls.map_or(0, |calls| calls.parse().unwrap())
    };
    let since = tries();
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || Lock::new(&client, "l").unwrap().acquire_timeout(secs(5)))
        })
        .collect();
    // The waiters share one waiting connection (a first try that met the limit returned):
    // other clients take every slot left.
    eventually(secs(10), "every waiter's first try", || {
        tries() >= since + 16 || waiters.iter().any(|w| w.is_finished())
    });
    let crowd: Vec<_> = std::iter::from_fn(|| server.client().get_connection().ok())
        .take(20)
        .collect();
    assert!(crowd.len() < 20, "the limit was never met");
    holder
        .release()
        .expect("the holder's release was starved of a connection");
    let results: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    // One got the lock; the rest waited behind it until their timeout, or met the limit
    // when a try of theirs needed a connection of its own.
    let got = results.iter().filter(|r| matches!(r, Ok(true))).count();
    assert!(got <= 1, "{results:?}");
    assert!(
        results.iter().all(|r| r.is_ok()
            || matches!(r, Err(Error::Redis(e)) if e.to_string().contains("max number of clients"))),
        "{results:?}"
    );
    let holder_id: Option<String> = redis::cmd("GET").arg("lock:l").query(&mut admin).unwrap();
    assert_ne!(
        holder_id.as_deref(),
        Some(holder.id()),
        "the holder's lock stayed held"
    );
    drop(crowd);
}

#[test]
fn a_cancelled_wait_leaves_no_lock_and_passes_its_wakeup_on() {
    let server = RedisServer::start();
    let client = server.client();
    for delay_ms in [0, 1, 2, 3] {
        let holder = Lock::new(&client, "l").unwrap();
        holder.acquire().unwrap();
        let token = CancelToken::new();
        let cancelled = Lock::builder(&client, "l")
            .cancel_token(token.clone())
            .build()
            .unwrap();
        let patient = Arc::new(Lock::new(&client, "l").unwrap());
        let since = tries_run(&server);
        let first = thread::spawn(move || cancelled.acquire());
        server.until_waiting(1, since, secs(10), || first.is_finished());
        let waiting = Arc::clone(&patient);
        let second = thread::spawn(move || waiting.acquire_timeout(secs(20)));
        server.until_in_line(1, since, secs(10), || second.is_finished());
        token.cancel();
        thread::sleep(ms(delay_ms));
        holder.release().unwrap();
        let first = first.join().unwrap();
        assert!(
            matches!(first, Err(Error::Cancelled { .. }) | Ok(())),
            "{first:?}"
        );
        if first.is_ok() {
            continue; // it won before the cancel: a caller that gets Ok holds the lock
        }
        assert!(second.join().unwrap().unwrap(), "the wake-up was swallowed");
        assert_eq!(owner(&server).as_deref(), Some(patient.id()));
        patient.release().unwrap();
    }
}

#[test]
fn a_stale_guard_does_not_release_a_later_acquisition() {
    let server = RedisServer::start();
    let lock = Lock::new(&server.client(), "l").unwrap();
    let guard = lock.lock().unwrap();
    lock.release().unwrap();
    lock.acquire().unwrap();
    drop(guard);
    assert_eq!(owner(&server).as_deref(), Some(lock.id()));
}

#[test]
fn reset_refuses_a_key_that_is_not_a_lock() {
    let server = RedisServer::start();
    let _: () = server.conn().rpush("lock:l", "x").unwrap();
    let result = Lock::new(&server.client(), "l").unwrap().reset();
    assert!(matches!(result, Err(Error::Corrupt { .. })), "{result:?}");
    let kind: String = redis::cmd("TYPE")
        .arg("lock:l")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(kind, "list");
}

#[test]
fn a_lock_freed_between_the_tries_commands_is_not_waited_on() {
    // PTTL -2 after GET found an owner: the key is gone, so the next try goes at once.
    let server = RedisServer::start();
    let client = server.client();
    let waiter = Lock::new(&client, "l").unwrap();
    for _ in 0..200 {
        let holder = Lock::builder(&client, "l").expire(ms(1)).build().unwrap();
        let _ = holder.try_acquire().unwrap();
        let started = Instant::now();
        assert!(waiter.acquire_timeout(secs(5)).unwrap());
        assert!(
            started.elapsed() < secs(1),
            "waited {:?} on a free lock",
            started.elapsed()
        );
        waiter.release().unwrap();
    }
}
