//! A soak run on one server: worker processes take one lock over and over while the test
//! `SIGKILL`s the holder's process at random (`REDIS_LOCK_SOAK_SECS`, default 20). No two
//! critical sections overlap unless the holder was told its lock was lost, and fencing tokens
//! only grow.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{field, ms, now_ns, secs, ChildProcess, RedisServer, Rng};

/// `args[1]` threads take lock `args[0]` (expiry `args[2]` ms, auto-renewal, fencing) over and
/// over, hold it 0-20 ms, and push "token start_ns end_ns" to the list `soak:sections` before
/// releasing (or to `soak:lost` when the handle says the lock was lost). Prints the threads'
/// ids, then runs until a line arrives on stdin.
pub fn worker(client: &redis::Client, args: &[String]) {
    let threads: usize = args[1].parse().unwrap();
    let expire = ms(args[2].parse().unwrap());
    let locks: Vec<Lock> = (0..threads)
        .map(|_| {
            Lock::builder(client, &args[0])
                .expire(expire)
                .auto_renewal(true)
                .fencing(true)
                .build()
                .unwrap()
        })
        .collect();
    let ids: Vec<&str> = locks.iter().map(|l| l.id()).collect();
    println!("ids {}", ids.join(" "));
    let stop = AtomicBool::new(false);
    let not_acquired = AtomicU64::new(0);
    thread::scope(|s| {
        for (i, lock) in locks.iter().enumerate() {
            let (stop, not_acquired) = (&stop, &not_acquired);
            s.spawn(move || {
                let mut conn = client.get_connection().unwrap();
                let mut rng = Rng::seeded(u64::from(std::process::id()) << 8 | i as u64);
                while !stop.load(Ordering::Relaxed) {
                    assert!(lock.acquire_timeout(secs(60)).unwrap(), "no lock in 60 s");
                    let token = lock.fencing_token().unwrap();
                    let start = now_ns();
                    thread::sleep(ms(rng.below(21)));
                    let end = now_ns();
                    let list = if lock.lost() {
                        "soak:lost"
                    } else {
                        "soak:sections"
                    };
                    let _: () = conn.rpush(list, format!("{token} {start} {end}")).unwrap();
                    match lock.release() {
                        Ok(()) => {}
                        Err(Error::NotAcquired { .. }) => {
                            not_acquired.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("release failed: {e}"),
                    }
                }
            });
        }
        std::io::stdin().lock().lines().next();
        stop.store(true, Ordering::Relaxed);
    });
    println!("done not_acquired={}", not_acquired.load(Ordering::Relaxed));
}

/// A soak worker process and the owner ids of its threads.
struct SoakProcess {
    child: ChildProcess,
    ids: Vec<String>,
}

impl SoakProcess {
    fn spawn(url: &str, threads: usize) -> SoakProcess {
        let threads = threads.to_string();
        let mut child = ChildProcess::spawn("soak::worker", url, &["soak", &threads, "500"]);
        let line = child.expect_line("ids ");
        let ids = line.split(' ').skip(1).map(str::to_string).collect();
        SoakProcess { child, ids }
    }
}

/// (token, start_ns, end_ns) records from a list.
fn sections_in(conn: &mut redis::Connection, list: &str) -> Vec<(u64, u128, u128)> {
    let lines: Vec<String> = conn.lrange(list, 0, -1).unwrap();
    lines
        .iter()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn soak_processes_killed_at_random_never_overlap_and_tokens_only_grow() {
    let soak = secs(
        std::env::var("REDIS_LOCK_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let (processes, threads) = (3, 4);
    let server = RedisServer::start();
    let url = server.url();
    let mut conn = server.conn();
    let mut workers: Vec<SoakProcess> = (0..processes)
        .map(|_| SoakProcess::spawn(&url, threads))
        .collect();
    let mut rng = Rng::seeded(u64::from(std::process::id()));
    let (started, mut kills) = (Instant::now(), 0);
    while started.elapsed() < soak {
        thread::sleep(ms(200 + rng.below(600)));
        let Some(owner) = conn.get::<_, Option<String>>("lock:soak").unwrap() else {
            continue;
        };
        // Only a live worker's lock: a killed one's may still be there until it expires.
        let Some(i) = workers.iter().position(|w| w.ids.contains(&owner)) else {
            continue;
        };
        workers[i].child.signal("KILL");
        let _ = workers[i].child.child.wait();
        kills += 1;
        workers[i] = SoakProcess::spawn(&url, threads);
    }
    let mut not_acquired = 0;
    for mut worker in workers {
        worker.child.send_line("stop");
        let done = worker.child.expect_line("done");
        not_acquired += field(&done, "not_acquired").parse::<u64>().unwrap();
        worker.child.wait_success();
    }
    let mut sections = sections_in(&mut conn, "soak:sections");
    let lost = sections_in(&mut conn, "soak:lost").len();
    sections.sort_by_key(|&(_, start, _)| start);
    let overlapping = sections.windows(2).filter(|w| w[1].1 < w[0].2).count();
    let out_of_order = sections.windows(2).filter(|w| w[1].0 <= w[0].0).count();
    let last_token: u64 = conn.get("lock-fence:soak").unwrap();
    println!(
        "soak {soak:?}: {} sections, {kills} kills, {overlapping} overlaps, {out_of_order} \
         tokens out of order, {lost} lost, {not_acquired} releases not acquired, last token \
         {last_token}",
        sections.len()
    );
    assert!(sections.len() > 100, "too few sections: {}", sections.len());
    assert!(kills > 0, "no holder was killed");
    assert_eq!(overlapping, 0, "overlapping critical sections");
    assert_eq!(
        out_of_order, 0,
        "fencing tokens not increasing in start order"
    );
}
