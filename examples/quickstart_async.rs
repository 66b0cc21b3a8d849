//! The quickstart in async form: tasks take turns on one lock, a guard moves into a spawned
//! task, a wait is dropped halfway, and work races against losing the lock.
//!
//! `cargo run --example quickstart_async --features tokio` (uses `REDIS_URL`, or starts a
//! private redis-server).

mod support;

use std::time::{Duration, Instant};

use redis_blpop_lock::aio::{self, Lock};

const NAME: &str = "quickstart-async";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url(None)?;
    let client = redis::Client::open(url)?;

    // Four tasks take turns. While they wait they share one BLPOP connection, not one each.
    let workers: Vec<_> = (1..=4)
        .map(|worker| tokio::spawn(take_turns(client.clone(), worker)))
        .collect();
    for worker in workers {
        worker.await??;
    }

    // The closure style.
    let answer = aio::with_lock(&client, NAME, async { 6 * 7 }).await?;
    println!("with_lock returned {answer}");

    // A guard is owned, so a spawned task can be the one that lets go.
    let holder = Lock::new(&client, NAME)?;
    let guard = holder.lock().await?;
    let handover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        println!("spawned task: releasing the guard it was handed");
        guard.unlock().await
    });

    let other = Lock::new(&client, NAME)?;
    match other.try_lock_for(Duration::from_millis(50)).await? {
        Some(_) => println!("other: got it at once (unexpected)"),
        None => println!("other: still held after 50 ms, gave up"),
    }
    // Dropping a waiting future is safe: nothing is left held and no wake-up is swallowed.
    if tokio::time::timeout(Duration::from_millis(50), other.lock())
        .await
        .is_err()
    {
        println!("other: a lock() dropped by a 50 ms timeout");
    }
    let started = Instant::now();
    if let Some(guard) = other.try_lock_for(Duration::from_secs(5)).await? {
        println!(
            "other: woken by the release, held after {:?} more",
            started.elapsed()
        );
        guard.unlock().await?;
    }
    handover.await??;

    race_against_loss(&client).await?;

    let probe = Lock::new(&client, NAME)?;
    println!("held now: {}", probe.locked().await?);
    Ok(())
}

async fn take_turns(client: redis::Client, worker: u32) -> Result<(), redis_blpop_lock::Error> {
    let lock = Lock::builder(&client, NAME)
        .expire(Duration::from_secs(5))
        .auto_renewal(true)
        .build()?;
    for turn in 1..=3 {
        let guard = lock.lock().await?;
        println!("task {worker}: holding the lock (turn {turn})");
        tokio::time::sleep(Duration::from_millis(20)).await;
        println!("task {worker}: releasing");
        guard.unlock().await?;
    }
    Ok(())
}

/// Work `select!`ed against `when_lost()`: with renewal the work finishes; without it, the
/// 300 ms expiry passes first and the work is dropped.
async fn race_against_loss(client: &redis::Client) -> Result<(), redis_blpop_lock::Error> {
    for renewed in [true, false] {
        let lock = Lock::builder(client, NAME)
            .expire(Duration::from_millis(300))
            .auto_renewal(renewed)
            .build()?;
        let guard = lock.lock().await?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(600)) => {
                println!("auto_renewal({renewed}): 600 ms of work done under a 300 ms expiry");
                guard.unlock().await?;
            }
            () = guard.when_lost() => {
                // Someone else may hold it now, so the work must stop. Dropping the guard is
                // still safe: its release deletes the key only if it holds our id.
                println!("auto_renewal({renewed}): lost at the expiry, work dropped");
            }
        }
    }
    Ok(())
}
