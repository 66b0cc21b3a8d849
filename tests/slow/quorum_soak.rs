//! A Redlock soak: worker processes take one lock on a quorum of five over and over while the
//! test `SIGKILL`s workers and kills and restarts quorum servers at random
//! (`REDIS_LOCK_SOAK_SECS`, default 12), a server coming back only after more than the locks'
//! expiry (Redlock's remedy for a server that restarts empty). No two critical sections
//! overlap while their holders' `lost()` says false.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{ms, now_ns, quorum_of, secs, servers, urls, ChildProcess, RedisServer, Rng};

/// The soak's locks' expiry. A killed server comes back only after `RESTART_AFTER`, more than
/// this (the caveat's remedy, see the module docs).
const SOAK_EXPIRE: Duration = Duration::from_millis(1000);
const RESTART_AFTER: Duration = Duration::from_millis(1500);

/// `args[0]` threads take lock "soak" on the quorum at `args[2..]` (expiry `args[1]` ms,
/// auto-renewal) over and over, hold it 0-5 ms and leave. Each section is recorded on the
/// separate server `client` points at, as "start_ns end_ns", in `soak:sections` when the
/// handle's `lost()` was still false after the section ended, else in `soak:lost`. Prints
/// "ready", runs until a line arrives on stdin, then prints what went wrong along the way.
pub fn worker(client: &redis::Client, args: &[String]) {
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
    let mut child = ChildProcess::spawn("quorum_soak::worker", records, &args);
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
