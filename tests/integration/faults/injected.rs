//! Safety under faults the tests make themselves, against real `redis-server` processes: a holder
//! stopped past its expiry, a waiter's wake-up reply delayed or dropped by a proxy, a release's
//! reply dropped after the server ran it, a server killed and restarted under waiters, a server
//! frozen with `SIGSTOP`, `CLIENT PAUSE`, `SCRIPT FLUSH` mid-run, and a server at `maxmemory`.
//! The soak run with random `SIGKILL`s is in the slow group (`tests/slow/soak.rs`). What a
//! restart does to a holder and a waiter is one suite, run for both APIs.
//!
//! Time bounds are generous on purpose: the machine is shared. What is checked strictly is
//! safety: no two critical sections overlap unless the holder was told its lock was lost, and
//! fencing tokens only grow.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{
    both_apis, eventually, field, ms, secs, tries_run, Api, ChildProcess, Proxy, RedisServer,
};

fn read_stdin_line() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    line
}

fn describe(result: Result<(), Error>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(Error::NotAcquired { .. }) => "not-acquired".to_string(),
        Err(e) => format!("error:{e}"),
    }
}

/// Takes lock `args[0]` (expiry `args[1]` ms, auto-renewal, fencing) and prints its token. The
/// parent stops this process, takes the lock, continues it and says "go": then waits for the
/// handle to say the lock is lost (failing if it never does) and reports what else it saw.
pub fn paused_holder(client: &redis::Client, args: &[String]) {
    let lock = Lock::builder(client, &args[0])
        .expire(ms(args[1].parse().unwrap()))
        .auto_renewal(true)
        .fencing(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    println!("acquired {}", lock.fencing_token().unwrap());
    read_stdin_line();
    // The renewal thread gets a few seconds to find the key holds someone else's id (the
    // passed deadline alone already makes the lock lost).
    eventually(secs(10), "the handle to learn it lost the lock", || {
        lock.lost()
    });
    let token = lock.fencing_token().unwrap();
    let release = describe(lock.release());
    println!("report release={release} token={token}");
}

#[test]
fn a_holder_stopped_past_its_expiry_learns_it_lost_the_lock_and_is_fenced_off() {
    let server = RedisServer::start();
    let client = server.client();
    let mut child = ChildProcess::spawn(
        "faults::injected::paused_holder",
        &server.url(),
        &["l", "1000"],
    );
    let child_token: u64 = child.expect_line("acquired")["acquired ".len()..]
        .parse()
        .unwrap();
    child.signal("STOP");
    let parent = Lock::builder(&client, "l")
        .expire(secs(30))
        .fencing(true)
        .build()
        .unwrap();
    // The stopped child cannot renew: the parent gets the lock once the child's expires.
    let got = parent.acquire_timeout(secs(30));
    child.signal("CONT");
    assert!(
        got.unwrap(),
        "the parent never got the stopped holder's lock"
    );
    let parent_token = parent.fencing_token().unwrap();
    child.send_line("go");
    // The child reports only once its handle says the lock is lost.
    let report = child.expect_line("report");
    assert_eq!(field(&report, "release"), "not-acquired", "{report}");
    assert_eq!(field(&report, "token").parse::<u64>().unwrap(), child_token);
    assert!(
        parent_token > child_token,
        "parent token {parent_token} <= stopped holder's {child_token}"
    );
    let owner: Option<String> = server.conn().get("lock:l").unwrap();
    assert_eq!(owner.as_deref(), Some(parent.id()));
    child.wait_success();
    parent.release().unwrap();
}

/// A holder that never expires, a waiter blocked behind it through `proxy` (expiry
/// `expire`), and the release that wakes it while the proxy holds back its replies: returns
/// once the server has run the waiter's queued try (the lock is the waiter's now, but it does
/// not know yet), with the waiter's thread, which returns its handle and its result.
fn wake_a_waiter_behind_held_replies(
    server: &RedisServer,
    proxy: &Proxy,
    expire: Duration,
) -> thread::JoinHandle<(Lock, Result<bool, Error>)> {
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let proxied = proxy.client();
    let waiter = thread::spawn(move || {
        let lock = Lock::builder(&proxied, "l").expire(expire).build().unwrap();
        let got = lock.acquire_timeout(secs(60));
        (lock, got)
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    proxy.hold_replies(true);
    holder.release().unwrap();
    let mut conn = server.conn();
    eventually(secs(10), "the waiter's queued try to take the lock", || {
        conn.get::<_, Option<String>>("lock:l").unwrap().is_some()
    });
    waiter
}

/// The server grants a woken waiter the lock the moment the release wakes it (the try is
/// queued behind its `BLPOP`), but the reply can take long to arrive: a slow network, a
/// stalled process. Counted from before it sent the try, the waiter's expiry is nearly over by
/// then, so it checks with Redis; finding another owner, it keeps waiting instead of returning
/// with a lock that has expired and gone to someone else.
#[test]
fn a_waiter_whose_wakeup_reply_is_delayed_past_the_expiry_keeps_waiting() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let waiter = wake_a_waiter_behind_held_replies(&server, &proxy, ms(1000));
    // The waiter's lock expires while its reply is held back; someone else takes it.
    let taker = Lock::new(&server.client(), "l").unwrap();
    assert!(taker.acquire_timeout(secs(30)).unwrap());
    proxy.hold_replies(false);
    thread::sleep(ms(500));
    assert!(
        !waiter.is_finished(),
        "the waiter returned while another owner holds the lock"
    );
    taker.release().unwrap();
    let (lock, got) = waiter.join().unwrap();
    assert!(got.unwrap());
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    assert!(!lock.lost());
}

/// As above, but the reply never arrives: the connection drops, the waiter reconnects, and its
/// next try finds its own id in the key. The key was set before the connection dropped, so
/// its expiry must be counted from then (or from the key's remaining TTL), not from the retry.
#[test]
fn a_waiter_whose_wakeup_reply_is_lost_counts_the_expiry_from_before_the_reconnect() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let waiter = wake_a_waiter_behind_held_replies(&server, &proxy, ms(3000));
    thread::sleep(secs(2));
    // Two of the waiter's three seconds are gone when it reconnects and finds the key its own.
    proxy.cut_all();
    let taker = Lock::new(&server.client(), "l").unwrap();
    assert!(taker.acquire_timeout(secs(30)).unwrap());
    let (lock, got) = waiter.join().unwrap();
    assert!(got.unwrap());
    assert_ne!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    assert!(
        lock.lost(),
        "the waiter's lock expired and another owner holds it, yet lost() says the waiter \
         holds it"
    );
}

/// The other side of the two tests above: a fix must not count the expiry from when the
/// waiter started blocking. A waiter that blocked far longer than its own expiry and was then
/// woken holds a fresh lock, not a lost one.
#[test]
fn a_waiter_woken_after_blocking_longer_than_its_expiry_holds_a_fresh_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let waiter_client = client.clone();
    let waiter = thread::spawn(move || {
        let lock = Lock::builder(&waiter_client, "l")
            .expire(ms(500))
            .build()
            .unwrap();
        let got = lock.acquire_timeout(secs(60));
        let lost = lock.lost();
        (lock, got, lost)
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    // Four times the waiter's expiry, within one BLPOP (at most 5 s when the holder's lock has
    // no expiry).
    thread::sleep(secs(2));
    holder.release().unwrap();
    let (lock, got, lost) = waiter.join().unwrap();
    assert!(got.unwrap());
    assert!(!lost, "a freshly woken waiter counted its lock as lost");
    lock.release().unwrap();
}

/// One critical section, in this process's clock.
#[derive(Debug, Clone, Copy)]
struct Section {
    start: Duration,
    end: Duration,
    lost: bool,
}

/// Pairs of sections, among those whose holder did not report the lock lost, that overlap.
fn overlaps(sections: &[Section]) -> Vec<(Section, Section)> {
    let mut kept: Vec<Section> = sections.iter().copied().filter(|s| !s.lost).collect();
    kept.sort_by_key(|s| s.start);
    kept.windows(2)
        .filter(|w| w[1].start < w[0].end)
        .map(|w| (w[0], w[1]))
        .collect()
}

both_apis!(
    waiters_reconnect_after_a_server_restart_and_each_gets_the_lock_in_turn,
    a_waiter_has_a_restarted_servers_lock_only_once_its_holder_knows_it_lost_it,
    a_restart_found_by_another_call_tells_a_holder_at_once_that_it_lost_its_lock,
);

fn waiters_reconnect_after_a_server_restart_and_each_gets_the_lock_in_turn<A: Api>() {
    let mut server = RedisServer::start();
    let client = server.client();
    let base = Instant::now();
    let holder = A::lock_on(&client, "l")
        .expire(secs(2))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&holder).unwrap();
    let holder_start = base.elapsed();
    let since = tries_run(&server);
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || -> Result<Section, Error> {
                let lock = A::lock_on(&client, "l")
                    .expire(secs(2))
                    .auto_renewal(true)
                    .build()?;
                assert!(A::acquire_timeout(&lock, secs(60))?, "no lock within 60 s");
                let start = base.elapsed();
                thread::sleep(ms(100));
                let end = base.elapsed();
                let lost = lock.lost();
                A::release_lock(&lock)?;
                Ok(Section { start, end, lost })
            })
        })
        .collect();
    server.until_in_line(1, since, secs(30), || {
        waiters.iter().any(|w| w.is_finished())
    });
    server.restart_after(secs(1));
    // The restarted server is empty: the holder's key is gone, and its renewal finds that.
    eventually(
        secs(15),
        "the holder to learn its key vanished in the restart",
        || holder.lost(),
    );
    let holder_end = base.elapsed();
    let released = A::release_lock(&holder);
    assert!(
        matches!(released, Err(Error::NotAcquired { .. })),
        "{released:?}"
    );
    let mut sections = vec![Section {
        start: holder_start,
        end: holder_end,
        lost: true,
    }];
    for waiter in waiters {
        sections.push(waiter.join().unwrap().expect("a waiter failed"));
    }
    assert_eq!(sections.len(), 5);
    assert!(overlaps(&sections).is_empty(), "{:?}", overlaps(&sections));
    let left: Option<String> = server.conn().get("lock:l").unwrap();
    assert_eq!(left, None);
}

/// A restart empties the server: the waiter could take the lock at once, while the holder
/// learns of it only at its next renewal. Taken, it is held back until the holder's lease,
/// renewed nowhere since, has ended.
fn a_waiter_has_a_restarted_servers_lock_only_once_its_holder_knows_it_lost_it<A: Api>() {
    let mut server = RedisServer::start();
    let client = server.client();
    let lock = || {
        A::lock_on(&client, "restarted")
            .expire(secs(2))
            .auto_renewal(true)
            .build()
            .unwrap()
    };
    let holder = Arc::new(lock());
    A::acquire_lock(&holder).unwrap();
    let (waiter, watched) = (lock(), Arc::clone(&holder));
    let since = tries_run(&server);
    let taking = thread::spawn(move || {
        assert!(
            A::acquire_timeout(&waiter, secs(30)).unwrap(),
            "no lock in 30 s"
        );
        let holder_lost = watched.lost();
        A::release_lock(&waiter).unwrap();
        holder_lost
    });
    server.until_in_line(1, since, secs(30), || taking.is_finished());
    server.restart_after(Duration::ZERO);
    assert!(
        taking.join().unwrap(),
        "the waiter holds, and the holder believes it does"
    );
    assert!(holder.lost());
}

/// A restart that any call of the process finds makes every holder renew at once: one whose
/// key the restart took learns it then, not at its next renewal, 20 s away here.
fn a_restart_found_by_another_call_tells_a_holder_at_once_that_it_lost_its_lock<A: Api>() {
    let mut server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "restarted")
        .expire(secs(30))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&holder).unwrap();
    let other = A::lock_on(&client, "other").build().unwrap();
    server.restart_after(Duration::ZERO);
    // Its new connection finds the server's new run id.
    assert!(!A::locked(&other).unwrap());
    eventually(
        secs(10),
        "the holder to learn the restart took its lock",
        || holder.lost(),
    );
}

/// After a restart, a handle takes nothing it could not hand over before its call ends: a
/// single try is turned down with nothing left held, a wait that reaches past the pause
/// gets the lock at its end, and `after_failover(ZERO)` hands over at once.
#[test]
fn after_a_restart_a_lock_is_handed_over_once_the_pause_has_passed() {
    let mut server = RedisServer::start();
    let client = server.client();
    let lock = |pause: Option<Duration>| {
        let builder = Lock::builder(&client, "restarted").expire(secs(2));
        (match pause {
            Some(pause) => builder.after_failover(pause),
            None => builder,
        })
        .build()
        .unwrap()
    };
    let (paused, at_once) = (lock(None), lock(Some(Duration::ZERO)));
    drop(paused.lock().unwrap());
    server.restart_after(Duration::ZERO);
    assert!(
        !paused.try_acquire().unwrap(),
        "handed over within the pause"
    );
    let owner: Option<String> = server.conn().get("lock:restarted").unwrap();
    assert_eq!(owner, None, "a lock turned down is left held");
    assert!(at_once.try_acquire().unwrap());
    at_once.release().unwrap();
    assert!(paused.acquire_timeout(secs(10)).unwrap());
    assert!(!paused.lost());
}

#[test]
fn an_outage_longer_than_a_waiters_timeout_ends_its_wait_near_the_timeout() {
    let mut server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let timeout = secs(3);
    let waiter = thread::spawn(move || {
        let lock = Lock::new(&client, "l").unwrap();
        let started = Instant::now();
        let result = lock.acquire_timeout(timeout);
        (result, started.elapsed())
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    server.kill();
    let (result, took) = waiter.join().unwrap();
    println!("timeout {timeout:?}: {result:?} after {took:?}");
    // The server died with a try pipelined behind the waiter's BLPOP: whether that try ran
    // cannot be known, and the error says so.
    assert!(
        matches!(
            result,
            Err(Error::Redis(_) | Error::OutcomeUnknown { .. }) | Ok(false)
        ),
        "expected a connection error or Ok(false), got {result:?}"
    );
    assert!(
        took < timeout + secs(15),
        "a waiter with a {timeout:?} timeout took {took:?} to give up"
    );
}

#[test]
fn an_outage_ends_a_wait_without_timeout_with_an_error_after_the_io_timeout() {
    let mut server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let waiter = thread::spawn(move || {
        let lock = Lock::new(&client, "l").unwrap();
        let started = Instant::now();
        let result = lock.acquire();
        (result, started.elapsed())
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    server.kill();
    let (result, took) = waiter.join().unwrap();
    println!("no timeout: {result:?} after {took:?}");
    assert!(
        matches!(result, Err(Error::Redis(_) | Error::OutcomeUnknown { .. })),
        "{result:?}"
    );
    // The I/O timeout (5 s by default) bounds each round trip of acquire(), reconnecting
    // included.
    assert!(took < secs(5 + 15), "gave up after {took:?}");
}

/// The server runs a release, and the connection dies before its reply arrives. The lock is
/// free all the same, and whatever the holder is told, nothing it does then takes the lock from
/// the waiter the release woke.
#[test]
fn a_release_whose_reply_is_lost_still_hands_the_lock_to_the_waiter() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let holder = Lock::new(&proxy.client(), "l").unwrap();
    // A first round loads the release script into the server: otherwise the reply dropped
    // below would be the `NOSCRIPT` that comes before the script runs.
    holder.acquire().unwrap();
    holder.release().unwrap();
    holder.acquire().unwrap();
    let client = server.client();
    let waiter = thread::spawn(move || {
        let lock = Lock::new(&client, "l").unwrap();
        let got = lock.acquire_timeout(secs(60));
        (lock, got)
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    proxy.drop_next_reply();
    // Its own unlock ran: never `NotAcquired`, though the retry finds the lock gone.
    let released = holder.release();
    assert!(released.is_ok(), "{released:?}");
    let (lock, got) = waiter.join().unwrap();
    assert!(got.unwrap());
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    lock.release().unwrap();
}

/// Unlike `CLIENT PAUSE`, a frozen process does not stop the clock: keys whose expiry passed
/// during the freeze are gone once the server runs again, and the renewal that waited out the
/// freeze cannot bring the lock back.
#[test]
fn a_holder_whose_server_freezes_past_its_expiry_learns_it_lost_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(secs(1))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    server.pause();
    thread::sleep(secs(2));
    server.resume();
    eventually(
        secs(15),
        "the holder to learn its lock expired during the freeze",
        || lock.lost(),
    );
    assert!(!server.conn().exists::<_, bool>("lock:l").unwrap());
    assert!(matches!(lock.release(), Err(Error::NotAcquired { .. })));
}

fn client_pause(server: &RedisServer, pause: Duration) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("ALL")
        .query(&mut server.conn())
        .unwrap();
}

#[test]
fn a_client_pause_longer_than_the_renewal_interval_but_shorter_than_the_expiry_keeps_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    // Renewal every 2.67 s; the pause holds that renewal back until 3 s, before the 4 s expiry.
    let lock = Lock::builder(&client, "l")
        .expire(secs(4))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let acquired = Instant::now();
    client_pause(&server, secs(3));
    thread::sleep(ms(2900).saturating_sub(acquired.elapsed()));
    assert!(!lock.lost(), "lost during the pause");
    // Past the first expiry: only the renewal sent during the pause can have kept it.
    thread::sleep(ms(5000).saturating_sub(acquired.elapsed()));
    assert!(!lock.lost(), "lost after the pause");
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    lock.release().unwrap();
}

#[test]
fn a_client_pause_longer_than_the_expiry_makes_the_holder_learn_it_is_lost() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(secs(1))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let acquired = Instant::now();
    let pause = secs(4);
    client_pause(&server, pause);
    eventually(
        secs(15),
        "the holder to learn its renewal could not get through",
        || lock.lost(),
    );
    // After the pause the held-back renewal got through (Redis pauses expiry too), but the
    // handle cannot know nobody held the lock meanwhile: lost stays lost.
    thread::sleep((pause + ms(1500)).saturating_sub(acquired.elapsed()));
    assert!(lock.lost(), "lost() went back to false after the pause");
    let _ = lock.release();
}

#[test]
fn script_flushes_during_a_run_cause_no_errors_and_no_overlaps() {
    let server = RedisServer::start();
    let client = server.client();
    let done = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let flusher = {
        let (done, flushes) = (Arc::clone(&done), Arc::clone(&flushes));
        let mut conn = server.conn();
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
                thread::sleep(ms(2));
            }
        })
    };
    let rounds = 150;
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || -> Result<(Vec<u64>, u64), Error> {
                let lock = Lock::builder(&client, "l")
                    .expire(secs(10))
                    .fencing(true)
                    .build()?;
                let mut conn = client.get_connection()?;
                let (mut tokens, mut overlaps) = (Vec::new(), 0);
                for _ in 0..rounds {
                    assert!(lock.acquire_timeout(secs(60))?, "no lock within 60 s");
                    let inside: i64 = conn.incr("inside", 1)?;
                    overlaps += u64::from(inside != 1);
                    tokens.push(lock.fencing_token().expect("fencing is on"));
                    lock.extend(None)?;
                    let _: i64 = conn.decr("inside", 1)?;
                    lock.release()?;
                }
                Ok((tokens, overlaps))
            })
        })
        .collect();
    let results: Vec<_> = workers
        .into_iter()
        .map(|w| w.join().unwrap().expect("a worker failed"))
        .collect();
    done.store(true, Ordering::Relaxed);
    flusher.join().unwrap();
    assert!(flushes.load(Ordering::Relaxed) > 0);
    let overlaps: u64 = results.iter().map(|(_, o)| o).sum();
    assert_eq!(overlaps, 0);
    let mut all: Vec<u64> = Vec::new();
    for (tokens, _) in &results {
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        all.extend(tokens);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        4 * rounds,
        "a fencing token was handed out twice"
    );
}

/// Writes big values until the server refuses them with OOM, then halves `maxmemory`, so the
/// server stays well over its limit even when a client's buffers are freed.
fn fill_until_oom(server: &RedisServer) {
    let mut conn = server.conn();
    let value = vec![b'x'; 64 * 1024];
    for i in 0.. {
        assert!(i < 1000, "the server never ran out of memory");
        match conn.set::<_, _, ()>(format!("filler:{i}"), &value) {
            Ok(()) => continue,
            Err(e) if e.code() == Some("OOM") => break,
            Err(e) => panic!("unexpected error while filling: {e}"),
        }
    }
    let (_, max): (String, u64) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(max / 2)
        .query(&mut conn)
        .unwrap();
    let refused = conn.set::<_, _, ()>("filler:tiny", "x").unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
}

#[test]
fn at_maxmemory_try_acquire_is_an_oom_error_and_writes_nothing() {
    let server =
        RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let client = server.client();
    fill_until_oom(&server);
    let mut conn = server.conn();
    for (name, fencing) in [("plain", false), ("fenced", true)] {
        let lock = Lock::builder(&client, name)
            .expire(secs(10))
            .fencing(fencing)
            .build()
            .unwrap();
        match lock.try_acquire() {
            Err(Error::Redis(e)) => {
                println!("{name}: {e}");
                assert!(e.to_string().contains("OOM"), "{name}: {e}");
            }
            other => panic!("{name}: expected an OOM error, got {other:?}"),
        }
        assert!(!lock.lost());
        assert!(!conn.exists::<_, bool>(format!("lock:{name}")).unwrap());
        assert!(!conn
            .exists::<_, bool>(format!("lock-fence:{name}"))
            .unwrap());
    }
}

#[test]
fn at_maxmemory_a_holder_can_still_release() {
    let server =
        RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let client = server.client();
    let holder = Lock::builder(&client, "l").fencing(true).build().unwrap();
    holder.acquire().unwrap();
    fill_until_oom(&server);
    holder.release().unwrap();
    assert!(!server.conn().exists::<_, bool>("lock:l").unwrap());
}
