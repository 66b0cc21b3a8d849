//! A few threads take turns on one lock and say so.
//!
//! `cargo run --example quickstart` (uses `REDIS_URL`, or starts a private redis-server).

mod support;

use std::thread;
use std::time::Duration;

use redis_blpop_lock::Lock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url(None)?;
    let client = redis::Client::open(url)?;

    let client = &client;
    let turns: Vec<Result<(), redis_blpop_lock::Error>> = thread::scope(|s| {
        let workers: Vec<_> = (1..=4)
            .map(|worker| s.spawn(move || take_turns(client, worker)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    for result in turns {
        result?;
    }

    // The closure style, and what an operator sees.
    let answer = redis_blpop_lock::with_lock(client, "quickstart", || 6 * 7)?;
    println!("with_lock returned {answer}");
    let probe = Lock::new(client, "quickstart")?;
    println!("held now: {}", probe.locked()?);
    Ok(())
}

fn take_turns(client: &redis::Client, worker: u32) -> Result<(), redis_blpop_lock::Error> {
    let lock = Lock::builder(client, "quickstart")
        .expire(Duration::from_secs(5))
        .auto_renewal(true)
        .build()?;
    for turn in 1..=3 {
        let guard = lock.lock()?;
        println!("worker {worker}: holding the lock (turn {turn})");
        thread::sleep(Duration::from_millis(50));
        println!("worker {worker}: releasing");
        guard.unlock()?;
    }
    Ok(())
}
