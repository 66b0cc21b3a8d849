//! Redlock under real faults: a server of the quorum killed and restarted empty under a holder,
//! a holder process frozen with `SIGSTOP` past its validity, and a soak in which worker
//! processes are `SIGKILL`ed and quorum servers killed and restarted at random.
//!
//! What is checked strictly is safety: no two critical sections overlap while their holders'
//! `lost()` says false. Time bounds are generous and only prove progress.
//!
//! Redlock's published caveat: a server that restarts empty has forgotten the locks it held,
//! and with it a second majority can form while the first holder's lock is still valid (A
//! holds on servers 1-3; 3 restarts empty; B takes 3, 4, 5). The remedy is to keep a
//! restarted server out for longer than the longest expiry, so that every validity it voted
//! for has ended by the time it is back. The tests here follow it: a server is restarted only
//! after more than the locks' expiry has passed since it died.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock, Quorum};

use crate::fault_injection::{field, now_ns, Rng};
use crate::quorum::{five_with_frozen, holding, quorum, servers};
use crate::support::{eventually, ms, secs, ChildProcess, RedisServer};

/// A handle of lock `q` on `servers` whose try ended `OutcomeUnknown`.
fn unsure_after_a_try(servers: &[RedisServer]) -> Lock {
    let lock = Lock::builder(&quorum(servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    let tried = lock.try_acquire();
    assert!(
        matches!(tried, Err(Error::OutcomeUnknown { .. })),
        "{tried:?}"
    );
    lock
}

/// How many `SET`s `server` has run: here, the tries at a lock.
fn sets_run(server: &RedisServer) -> u64 {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    let stats: String = info.get("cmdstat_set").unwrap_or_default();
    let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="));
    calls.and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Resumes the three frozen servers of `servers`, which run the try of `id` queued there,
/// and sees the background settle give it back within 2 s, nobody calling the handle: then
/// another handle takes the lock, long before the 10 s expiry.
fn resume_and_see_it_given_back(servers: &[RedisServer], id: &str) {
    for server in &servers[..3] {
        server.resume();
    }
    let resumed = Instant::now();
    let at_resume = holding(servers, "q", id);
    eventually(
        secs(2),
        format_args!("the handle's id to leave the majority ({at_resume} of 5 had it)"),
        || holding(servers, "q", id) < 3,
    );
    println!("given back {:?} after the resume", resumed.elapsed());
    for server in &servers[..3] {
        assert_eq!(sets_run(server), 2, "the warm-up's try and the late one");
    }
    let other = Lock::builder(&quorum(servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    assert!(
        other.try_acquire().unwrap(),
        "the lock is free for another handle"
    );
    other.release().unwrap();
}

/// A try whose replies a frozen majority held back ends `OutcomeUnknown`; the servers run it
/// when they resume, and the handle's id then holds the lock on a majority until the
/// background settle gives it back.
#[test]
fn a_try_that_lands_after_its_call_ended_is_given_back_without_another_call() {
    let servers = five_with_frozen(3);
    let lock = unsure_after_a_try(&servers);
    resume_and_see_it_given_back(&servers, lock.id());
}

/// The same with the async API, whose background settle is a task.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_try_that_lands_after_its_call_ended_is_given_back_by_a_task() {
    let servers = five_with_frozen(3);
    let lock = redis_blpop_lock::aio::Lock::builder(&quorum(&servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    let tried = lock.try_acquire().await;
    assert!(
        matches!(tried, Err(Error::OutcomeUnknown { .. })),
        "{tried:?}"
    );
    let id = lock.id().to_string();
    tokio::task::spawn_blocking(move || resume_and_see_it_given_back(&servers, &id))
        .await
        .unwrap();
}

/// A try of this handle is queued on four frozen servers of five. One resumes and runs it, and
/// a release then reaches that one and the fifth only: two answers of five cannot tell that
/// the rest do not hold the key (or are about to), so the release is not done. The other
/// three resume and run the try: the handle's own id holds the lock on a majority. Its next
/// try must take that for what it is, never `AlreadyAcquired` for its whole expiry, and the
/// settle of the release must not give back the lock the handle now holds.
#[test]
fn a_handles_own_late_try_on_a_majority_is_never_read_as_already_acquired() {
    let servers = five_with_frozen(4);
    let lock = unsure_after_a_try(&servers);
    servers[0].resume();
    let released = lock.release();
    println!("a release answered by two servers of five: {released:?}");
    for server in &servers[1..4] {
        server.resume();
    }
    let again = lock.try_acquire();
    assert!(
        matches!(again, Ok(true)),
        "the handle's own late try was in the key: {again:?}"
    );
    // The background settle of the release was under way: it gives back nothing now that
    // the handle holds the lock (a step lasts well under this, pauses included).
    thread::sleep(secs(1));
    assert!(holding(&servers, "q", lock.id()) >= 3 && !lock.lost());
    lock.release().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 0);
}

/// The quorum of the servers at `urls`, as a child process builds it.
fn quorum_of(urls: &[String]) -> Quorum {
    Quorum::new(
        urls.iter()
            .map(|u| redis::Client::open(u.as_str()).unwrap()),
    )
    .unwrap()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn describe(result: Result<(), Error>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(Error::NotAcquired { .. }) => "not-acquired".to_string(),
        Err(e) => format!("error:{e}"),
    }
}

#[test]
fn a_server_restarted_empty_is_retaken_by_the_holders_renewal() {
    let mut servers = servers(5);
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(secs(2))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 5);
    // Down for longer than the expiry (the caveat's remedy), then back with no keys at all.
    servers[2].restart_after(ms(2500));
    assert!(!lock.lost(), "lost while one server of five was down");
    eventually(
        secs(15),
        "the renewal to take the key again on the restarted server",
        || {
            assert!(!lock.lost(), "lost while the restarted server was empty");
            holding(&servers[2..3], "q", lock.id()) == 1
        },
    );
    assert_eq!(holding(&servers, "q", lock.id()), 5);
    assert!(!lock.lost());
    lock.release().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 0);
}

/// A try of this handle can leave its key behind on one server: the server answers after the
/// per-server timeout, the try is lost and given back, and the give-back (on another
/// connection) runs there before the try does. The key then holds the handle's own id for up
/// to an expiry. With two servers of five down, the next try of that handle finds the other
/// two free and its own key on the third: the lock is free (nobody else holds it anywhere),
/// and the acquire must take it, not say this id holds it already.
#[test]
fn a_leftover_key_of_its_own_on_one_server_does_not_stop_a_handle_taking_a_free_lock() {
    let mut servers = servers(5);
    servers[1].kill();
    servers[3].kill();
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(secs(2))
        .build()
        .unwrap();
    let _: () = servers[0]
        .conn()
        .pset_ex("lock:q", lock.id(), 2000)
        .unwrap();
    let got = lock.acquire_timeout(secs(10));
    assert!(
        matches!(got, Ok(true)),
        "a free lock with a leftover key of the handle's own on one of three live servers: \
         {got:?}"
    );
    let live = [0, 2, 4].map(|i| holding(std::slice::from_ref(&servers[i]), "q", lock.id()));
    assert_eq!(live, [1, 1, 1], "held on every live server");
    lock.release().unwrap();
}

/// Takes lock "l" on the quorum at `args` (1 s expiry, auto-renewal), prints when it entered,
/// and works until its handle says the lock is lost (30 s at most). Then prints whether it
/// was told, the last instant at which it still counted itself the holder, and what its
/// release said.
pub fn paused_holder(_client: &redis::Client, args: &[String]) {
    let lock = Lock::builder(&quorum_of(args), "l")
        .expire(ms(1000))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let entered = now_ns();
    println!("acquired {entered}");
    let give_up = Instant::now() + secs(30);
    let mut last_valid = entered;
    // The time is taken before asking: a `false` answer means the lock was still valid then.
    // A stop between the two only makes `last_valid` earlier.
    while Instant::now() < give_up {
        let now = now_ns();
        if lock.lost() {
            break;
        }
        last_valid = now;
        thread::sleep(ms(5));
    }
    let lost = lock.lost();
    let release = describe(lock.release());
    println!("report lost={lost} last_valid={last_valid} release={release}");
}

#[test]
fn a_holder_paused_past_its_validity_learns_it_is_lost_and_the_next_holder_does_not_overlap() {
    let servers = servers(5);
    let urls = urls(&servers);
    let args: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut child = ChildProcess::spawn("quorum_faults::paused_holder", &urls[0], &args);
    let entered: u128 = child.expect_line("acquired")["acquired ".len()..]
        .parse()
        .unwrap();
    // The whole process stops: its renewal thread too.
    child.signal("STOP");
    let next = Lock::builder(&quorum(&servers), "l")
        .expire(secs(30))
        .build()
        .unwrap();
    let got = next.acquire_timeout(secs(30));
    let next_entered = now_ns();
    // A majority at least; the rest may have still held the stopped holder's key an instant
    // longer when the vote reached them.
    let held = holding(&servers, "l", next.id());
    child.signal("CONT");
    assert!(
        got.unwrap(),
        "the stopped holder's lock never expired for the next"
    );
    let report = child.expect_line("report");
    assert_eq!(field(&report, "lost"), "true", "{report}");
    let last_valid: u128 = field(&report, "last_valid").parse().unwrap();
    assert!(entered <= last_valid, "{report}");
    assert!(
        last_valid < next_entered,
        "the stopped holder counted itself the holder {} µs into the next holder's section: \
         {report}",
        (last_valid - next_entered) / 1000
    );
    // Its release, owner-checked on every server, left the next holder's keys alone.
    assert_eq!(field(&report, "release"), "not-acquired", "{report}");
    assert!(held >= 3, "the next holder won with {held} of 5");
    assert_eq!(holding(&servers, "l", next.id()), held);
    child.wait_success();
    next.release().unwrap();
}

/// The soak's locks' expiry. A killed server comes back only after `RESTART_AFTER`, more than
/// this (the caveat's remedy, see the module docs).
const SOAK_EXPIRE: Duration = Duration::from_millis(1000);
const RESTART_AFTER: Duration = Duration::from_millis(1500);

/// `args[0]` threads take lock "soak" on the quorum at `args[2..]` (expiry `args[1]` ms,
/// auto-renewal) over and over, hold it 0-5 ms and leave. Each section is recorded on the
/// separate server `client` points at, as "start_ns end_ns", in `soak:sections` when the
/// handle's `lost()` was still false after the section ended, else in `soak:lost`. Prints
/// "ready", runs until a line arrives on stdin, then prints what went wrong along the way.
pub fn soak_worker(client: &redis::Client, args: &[String]) {
    let threads: usize = args[0].parse().unwrap();
    let expire = ms(args[1].parse().unwrap());
    let quorum = quorum_of(&args[2..]);
    let locks: Vec<Lock> = (0..threads)
        .map(|_| {
            Lock::builder(&quorum, "soak")
                .expire(expire)
                .auto_renewal(true)
                .build()
                .unwrap()
        })
        .collect();
    println!("ready");
    let stop = AtomicBool::new(false);
    let (errors, not_acquired, timeouts) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let last_error = Mutex::new(String::new());
    let failed = |e: Error| {
        errors.fetch_add(1, Ordering::Relaxed);
        *last_error.lock().unwrap() = e.to_string();
    };
    thread::scope(|s| {
        for (i, lock) in locks.iter().enumerate() {
            let (stop, not_acquired, timeouts, failed) = (&stop, &not_acquired, &timeouts, &failed);
            s.spawn(move || {
                let mut conn = client.get_connection().unwrap();
                let mut rng = Rng::seeded(u64::from(std::process::id()) << 8 | i as u64);
                while !stop.load(Ordering::Relaxed) {
                    match lock.acquire_timeout(secs(5)) {
                        Ok(true) => {}
                        Ok(false) => {
                            timeouts.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        // A server killed under a request: the library settles it, and the
                        // next acquire starts afresh.
                        Err(e) => {
                            failed(e);
                            thread::sleep(ms(10));
                            continue;
                        }
                    }
                    let start = now_ns();
                    thread::sleep(ms(rng.below(6)));
                    let end = now_ns();
                    // Asked after `end` was taken: false means the lock was valid all along.
                    let list = if lock.lost() {
                        "soak:lost"
                    } else {
                        "soak:sections"
                    };
                    let _: () = conn.rpush(list, format!("{start} {end}")).unwrap();
                    match lock.release() {
                        Ok(()) => {}
                        Err(Error::NotAcquired { .. }) => {
                            not_acquired.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failed(e),
                    }
                }
            });
        }
        std::io::stdin().lock().lines().next();
        stop.store(true, Ordering::Relaxed);
    });
    println!(
        "done errors={} not_acquired={} timeouts={} last_error={:?}",
        errors.load(Ordering::Relaxed),
        not_acquired.load(Ordering::Relaxed),
        timeouts.load(Ordering::Relaxed),
        last_error.lock().unwrap()
    );
}

fn spawn_soak_worker(records: &str, threads: usize, quorum: &[String]) -> ChildProcess {
    let (threads, expire) = (threads.to_string(), SOAK_EXPIRE.as_millis().to_string());
    let mut args = vec![threads.as_str(), expire.as_str()];
    args.extend(quorum.iter().map(String::as_str));
    let mut child = ChildProcess::spawn("quorum_faults::soak", records, &args);
    child.expect_line("ready");
    child
}

/// (start_ns, end_ns) records from a list.
fn sections_in(conn: &mut redis::Connection, list: &str) -> Vec<(u128, u128)> {
    let lines: Vec<String> = conn.lrange(list, 0, -1).unwrap();
    lines
        .iter()
        .map(|line| {
            let (start, end) = line.split_once(' ').unwrap();
            (start.parse().unwrap(), end.parse().unwrap())
        })
        .collect()
}

/// Sections (sorted by start) that began before an earlier one had ended, with that one.
fn overlapping(sections: &[(u128, u128)]) -> Vec<((u128, u128), (u128, u128))> {
    let mut found = Vec::new();
    let mut latest: Option<(u128, u128)> = None;
    for &section in sections {
        if let Some(earlier) = latest.filter(|e| section.0 < e.1) {
            found.push((earlier, section));
        }
        if latest.is_none_or(|e| section.1 > e.1) {
            latest = Some(section);
        }
    }
    found
}

/// The safety property: among the sections whose holder's `lost()` was still false when it
/// left (after taking the section's end time), no two overlap in time (one machine, one
/// clock). A section whose holder found `lost()` true when leaving is not counted: the
/// library told it, and the contract is only that it is told. A worker killed inside its
/// section records nothing for it.
#[test]
fn a_soak_with_killed_workers_and_restarted_servers_never_overlaps() {
    // Longer with `REDIS_LOCK_SOAK_SECS`, like the single-server soak.
    let soak = secs(
        std::env::var("REDIS_LOCK_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(12),
    );
    let (processes, threads) = (3, 3);
    let mut servers = servers(5);
    let quorum = urls(&servers);
    let records = RedisServer::start();
    let mut conn = records.conn();
    let mut workers: Vec<ChildProcess> = (0..processes)
        .map(|_| spawn_soak_worker(&records.url(), threads, &quorum))
        .collect();
    let mut rng = Rng::seeded(u64::from(std::process::id()));
    // Servers down and since when; never more than two of five, so a majority is always up.
    let mut down: Vec<(usize, Instant)> = Vec::new();
    let (started, mut worker_kills, mut server_kills, mut restarts) = (Instant::now(), 0, 0, 0);
    while started.elapsed() < soak {
        thread::sleep(ms(150 + rng.below(350)));
        if let Some(at) = down.iter().position(|(_, d)| d.elapsed() > RESTART_AFTER) {
            let (i, _) = down.remove(at);
            servers[i].restart_after(Duration::ZERO);
            restarts += 1;
        }
        if rng.below(2) == 0 {
            let i = rng.below(processes as u64) as usize;
            workers[i].signal("KILL");
            let _ = workers[i].child.wait();
            workers[i] = spawn_soak_worker(&records.url(), threads, &quorum);
            worker_kills += 1;
        } else if down.len() < 2 {
            let up: Vec<usize> = (0..servers.len())
                .filter(|i| down.iter().all(|(d, _)| d != i))
                .collect();
            let i = up[rng.below(up.len() as u64) as usize];
            servers[i].kill();
            down.push((i, Instant::now()));
            server_kills += 1;
        }
    }
    let mut told = Vec::new();
    for mut worker in workers {
        worker.send_line("stop");
        told.push(worker.expect_line("done"));
        worker.wait_success();
    }
    let mut sections = sections_in(&mut conn, "soak:sections");
    let lost = sections_in(&mut conn, "soak:lost").len();
    sections.sort_unstable();
    let overlaps = overlapping(&sections);
    println!(
        "soak {soak:?}: {} sections, {lost} lost, {} overlaps, {worker_kills} workers killed, \
         {server_kills} servers killed, {restarts} restarted; the last workers said: {told:?}",
        sections.len(),
        overlaps.len()
    );
    assert!(overlaps.is_empty(), "overlapping sections: {overlaps:?}");
    assert!(
        sections.len() >= 200,
        "too little progress: {} sections",
        sections.len()
    );
    assert!(worker_kills > 0 && server_kills > 0 && restarts > 0);
}
