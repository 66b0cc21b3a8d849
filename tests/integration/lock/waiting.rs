//! Waiting: wake-ups on release (in this process or another) and reset, a crashed holder, a
//! killed connection, a signal never pushed, and a stress run that checks no two owners are
//! ever inside the lock at once. The suite run for both APIs (`blocking::` and `aio::`, over
//! [`Api`]) comes first.

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{handle, reset_all, Lock};

use crate::support::{
    assert_woken_by, blocked_waiter, both_apis, secs, tries_run, Api, ChildProcess, RedisServer,
};

/// How long a test waits for its waiters to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// Takes lock `args[0]` (expiry `args[1]` ms, 0 for none), says so, and releases when told.
pub fn hold(client: &redis::Client, args: &[String]) {
    let expire: u64 = args[1].parse().unwrap();
    let mut builder = Lock::builder(client, &args[0]).signal_expire(Duration::from_secs(60));
    if expire > 0 {
        builder = builder.expire(Duration::from_millis(expire));
    }
    let lock = builder.build().unwrap();
    lock.acquire().unwrap();
    println!("acquired {}", lock.id());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    lock.release().unwrap();
    println!("released");
}

/// Waits up to `args[1]` ms for lock `args[0]` and reports whether it came and when.
pub fn wait(client: &redis::Client, args: &[String]) {
    let lock = Lock::new(client, &args[0]).unwrap();
    let timeout = Duration::from_millis(args[1].parse().unwrap());
    println!("waiting");
    let acquired = lock.acquire_timeout(timeout).unwrap();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    println!("result {acquired} {at}");
}

/// `args[1]` threads each take lock `args[0]` `args[2]` times; inside, a Redis counter must
/// show nobody else. Prints the number of overlaps seen.
pub fn stress(client: &redis::Client, args: &[String]) {
    let threads: usize = args[1].parse().unwrap();
    let rounds: usize = args[2].parse().unwrap();
    let overlaps: usize = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let lock = Lock::new(client, &args[0]).unwrap();
                    let mut conn = client.get_connection().unwrap();
                    let mut overlaps = 0;
                    for _ in 0..rounds {
                        let guard = lock.lock().unwrap();
                        let inside: i64 = conn.incr("inside", 1).unwrap();
                        overlaps += usize::from(inside != 1);
                        let _: i64 = conn.incr("total", 1).unwrap();
                        let _: i64 = conn.decr("inside", 1).unwrap();
                        guard.unlock().unwrap();
                    }
                    overlaps
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    println!("overlaps {overlaps}");
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

both_apis!(
    a_release_wakes_a_waiter_which_consumes_the_signal,
    a_release_in_another_process_wakes_the_waiter,
    a_release_wakes_exactly_one_waiter,
    a_crashed_holders_lock_goes_to_a_waiter_soon_after_it_expires,
    a_waiter_whose_connection_is_killed_reconnects_and_gets_the_lock,
    a_waiter_that_missed_its_signal_still_gets_the_lock,
);

/// Lock `name` on API `A`, as a waiter makes it.
fn lock_of<A: Api>(client: &redis::Client, name: &str) -> handle::Lock<A> {
    A::lock_on(client, name).build().unwrap()
}

/// Lock `l` held on API `A` by a handle whose release leaves a signal that lasts a minute: a
/// signal gone soon after a release was taken by a waiter.
fn holder_whose_signal_lasts<A: Api>(client: &redis::Client) -> handle::Lock<A> {
    let holder = A::lock_on(client, "l")
        .signal_expire(secs(60))
        .build()
        .unwrap();
    A::acquire_lock(&holder).unwrap();
    holder
}

fn a_release_wakes_a_waiter_which_consumes_the_signal<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = holder_whose_signal_lasts::<A>(&client);
    let waiter = blocked_waiter(&server, lock_of::<A>(&client, "l"));
    assert_woken_by(|| A::release_lock(&holder).unwrap(), waiter);
    // The signal lives for 60 s: it is gone only because the waiter popped it.
    assert!(!server.conn().exists::<_, bool>("lock-signal:l").unwrap());
}

fn a_release_in_another_process_wakes_the_waiter<A: Api>() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::spawn("lock::waiting::hold", &server.url(), &["l", "0"]);
    holder.expect_line("acquired");
    let waiter = blocked_waiter(&server, lock_of::<A>(&server.client(), "l"));
    assert_woken_by(|| holder.send_line("release"), waiter);
    // The holder's signal lives for 60 s: it is gone only because the waiter popped it.
    assert!(!server.conn().exists::<_, bool>("lock-signal:l").unwrap());
    holder.wait_success();
}

fn a_release_wakes_exactly_one_waiter<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = holder_whose_signal_lasts::<A>(&client);
    let since = tries_run(&server);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock_of::<A>(&client, "l");
            // The handle comes back with the answer: dropped earlier, the winner's lock would
            // go to a second waiter.
            thread::spawn(move || (A::acquire_timeout(&lock, secs(4)).unwrap(), lock))
        })
        .collect();
    server.until_in_line(1, since, BLOCK_LIMIT, || false);
    A::release_lock(&holder).unwrap();
    let results: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    let took = results.iter().filter(|(got, _)| *got).count();
    assert_eq!(took, 1, "{took} of the three waiters took the lock");
}

fn a_crashed_holders_lock_goes_to_a_waiter_soon_after_it_expires<A: Api>() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::spawn("lock::waiting::hold", &server.url(), &["l", "1500"]);
    holder.expect_line("acquired");
    holder.child.kill().unwrap();
    let pttl: u64 = server.conn().pttl("lock:l").unwrap();
    let expires_at = Instant::now() + Duration::from_millis(pttl);
    let waiter = lock_of::<A>(&server.client(), "l");
    assert!(A::acquire_timeout(&waiter, secs(60)).unwrap());
    let late = Instant::now().saturating_duration_since(expires_at);
    // python-redis-lock oversleeps by most of a BLPOP timeout here; this waits for the TTL.
    assert!(
        late < Duration::from_millis(750),
        "took the lock {late:?} after it expired"
    );
}

fn a_waiter_whose_connection_is_killed_reconnects_and_gets_the_lock<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = lock_of::<A>(&client, "l");
    A::acquire_lock(&holder).unwrap();
    let waiter = blocked_waiter(&server, lock_of::<A>(&client, "l"));
    let killed: u64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut server.conn())
        .unwrap();
    assert!(killed >= 1);
    server.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    let release = || A::release_lock(&holder).expect("the release after a reconnect");
    assert_woken_by(release, waiter);
}

fn a_waiter_that_missed_its_signal_still_gets_the_lock<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = lock_of::<A>(&client, "l");
    A::acquire_lock(&holder).unwrap();
    let waiter = blocked_waiter(&server, lock_of::<A>(&client, "l"));
    // Free the lock behind the waiter's back: no signal is ever pushed. The waiter tries
    // again on its own after a 5 s block.
    let _: () = server.conn().del("lock:l").unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn reset_wakes_a_waiter_in_another_process() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let mut waiter = ChildProcess::spawn("lock::waiting::wait", &server.url(), &["l", "60000"]);
    waiter.expect_line("waiting");
    server.until_blocked(1, BLOCK_LIMIT, || false);
    let operator = Lock::builder(&client, "l")
        .signal_expire(Duration::from_secs(60))
        .build()
        .unwrap();
    assert!(operator.reset().unwrap());
    let line = waiter.expect_line("result");
    assert!(line.starts_with("result true"), "{line}");
    assert!(
        !server.conn().exists::<_, bool>("lock-signal:l").unwrap(),
        "signal not consumed"
    );
}

#[test]
fn reset_all_wakes_waiters_in_another_process() {
    let server = RedisServer::start();
    let client = server.client();
    let holders: Vec<Lock> = ["a", "b"]
        .iter()
        .map(|n| Lock::new(&client, *n).unwrap())
        .collect();
    for holder in &holders {
        holder.acquire().unwrap();
    }
    let mut waiters: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| ChildProcess::spawn("lock::waiting::wait", &server.url(), &[n, "60000"]))
        .collect();
    for waiter in &mut waiters {
        waiter.expect_line("waiting");
    }
    server.until_blocked(2, BLOCK_LIMIT, || false);
    let reset_at = now_ms();
    assert_eq!(reset_all(&client).unwrap(), 2);
    for waiter in &mut waiters {
        let line = waiter.expect_line("result");
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[1], "true", "{line}");
        // Well under the 5 s after which a waiter that missed its signal tries again anyway.
        let after: u128 = fields[2].parse::<u128>().unwrap().saturating_sub(reset_at);
        assert!(after < 3000, "woke {after} ms after reset_all");
    }
}

#[test]
fn no_two_owners_ever_overlap_across_processes() {
    let server = RedisServer::start();
    let workers: Vec<_> = (0..2)
        .map(|_| ChildProcess::spawn("lock::waiting::stress", &server.url(), &["l", "8", "200"]))
        .collect();
    for mut worker in workers {
        assert_eq!(worker.expect_line("overlaps"), "overlaps 0");
        worker.wait_success();
    }
    let total: u64 = server.conn().get("total").unwrap();
    assert_eq!(total, 2 * 8 * 200);
}

#[test]
fn threads_waiting_on_many_names_share_one_waiting_connection() {
    const NAMES: usize = 10;
    const THREADS: usize = 40;
    let server = RedisServer::start();
    let client = server.client();
    let holders: Vec<Lock> = (0..NAMES)
        .map(|n| {
            let holder = Lock::new(&client, format!("l{n}")).unwrap();
            holder.acquire().unwrap();
            holder
        })
        .collect();
    let since = tries_run(&server);
    let waiters: Vec<_> = (0..THREADS)
        .map(|i| {
            let lock = Lock::new(&client, format!("l{}", i % NAMES)).unwrap();
            thread::spawn(move || {
                let got = lock.acquire_timeout(Duration::from_secs(60)).unwrap();
                lock.release().unwrap();
                got
            })
        })
        .collect();
    server.until_in_line(NAMES as u64, since, BLOCK_LIMIT, || false);
    assert_eq!(server.blocked_clients(), 1, "one BLPOP for every name");
    for holder in &holders {
        holder.release().unwrap();
    }
    for waiter in waiters {
        assert!(waiter.join().unwrap(), "a waiter was never served");
    }
}
