//! The lock's metrics in Prometheus text format, and what they cost.
//!
//! ```text
//! cargo run --release --example metrics --features metrics [-- --seconds S]
//! ```
//!
//! Uses `REDIS_URL`, or starts a private `redis-server`. Two parts:
//!
//! 1. **Cost.** One thread runs the uncontended cycle (`acquire` + `release` on one handle) in
//!    alternating 100 ms halves, without a recorder and with a Prometheus recorder
//!    (`metrics::with_local_recorder`), each half first every other round, so both see the
//!    same machine and the same server; it prints each one's p50 and p90 cycle and the
//!    difference. (Without the `metrics` feature the library's calls are compiled out.)
//! 2. **A scrape.** With the recorder installed for the process, four threads take turns on
//!    one lock (1 ms holds) for S seconds while a fifth tries it with a 1 ms timeout now and
//!    then; then it prints what Prometheus would scrape.
//!
//! The application picks the exporter; the library only talks to the `metrics` facade. Here it
//! is `metrics-exporter-prometheus` without its HTTP listener: `render()` is what an HTTP
//! handler of your own would serve at `/metrics`.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use redis_blpop_lock::Lock;

/// How long each half of one round of the cost part runs: short, so that both halves see the
/// same drift of a shared machine.
const ROUND: Duration = Duration::from_millis(100);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = match std::env::args().skip_while(|a| a != "--seconds").nth(1) {
        Some(s) => s.parse()?,
        None => 2,
    };
    let (url, _server) = support::redis_url(None)?;
    let client = redis::Client::open(url)?;
    let recorder = PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();

    let lock = Lock::builder(&client, "metrics-cost")
        .metrics_label("cost")
        .build()?;
    cycles(&lock, ROUND)?; // warm-up: connections and scripts
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let rounds = (seconds * 1000 / ROUND.as_millis() as u64 / 2).max(1);
    for round in 0..rounds {
        // Each half goes first every other round.
        if round % 2 == 0 {
            off.extend(cycles(&lock, ROUND)?);
        }
        on.extend(metrics::with_local_recorder(&recorder, || {
            cycles(&lock, ROUND)
        })?);
        if round % 2 == 1 {
            off.extend(cycles(&lock, ROUND)?);
        }
    }
    let (off50, on50) = (percentile(&mut off, 50), percentile(&mut on, 50));
    println!(
        "uncontended cycle: p50 {:.1} us / p90 {:.1} us without a recorder ({} cycles), \
         p50 {:.1} us / p90 {:.1} us with Prometheus ({} cycles): {:+.1} % at p50",
        micros(off50),
        micros(percentile(&mut off, 90)),
        off.len(),
        micros(on50),
        micros(percentile(&mut on, 90)),
        on.len(),
        (micros(on50) / micros(off50) - 1.0) * 100.0,
    );

    metrics::set_global_recorder(recorder)?;
    contend(&client, Duration::from_secs(seconds))?;
    println!("\n{}", scrape.render());
    Ok(())
}

/// Acquire + release on `lock`, again and again for `run`: each cycle's time.
fn cycles(lock: &Lock, run: Duration) -> Result<Vec<Duration>, redis_blpop_lock::Error> {
    let started = Instant::now();
    let mut times = Vec::new();
    while started.elapsed() < run {
        let cycle = Instant::now();
        lock.acquire()?;
        lock.release()?;
        times.push(cycle.elapsed());
    }
    Ok(times)
}

/// Four threads take turns on one lock with 1 ms holds for `run`, while a fifth tries it with
/// a 1 ms timeout every 10 ms (most of those time out).
fn contend(client: &redis::Client, run: Duration) -> Result<(), redis_blpop_lock::Error> {
    let until = Instant::now() + run;
    thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(move || -> Result<(), redis_blpop_lock::Error> {
                    let lock = Lock::builder(client, "report")
                        .metrics_label("report")
                        .build()?;
                    while Instant::now() < until {
                        let _guard = lock.lock()?;
                        thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                })
            })
            .collect();
        let impatient = Lock::builder(client, "report")
            .metrics_label("report")
            .build()?;
        while Instant::now() < until {
            drop(impatient.try_lock_for(Duration::from_millis(1))?);
            thread::sleep(Duration::from_millis(10));
        }
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker panicked"))
    })
}

fn percentile(times: &mut [Duration], p: usize) -> Duration {
    times.sort_unstable();
    times
        .get((times.len() * p / 100).min(times.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
