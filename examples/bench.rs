//! How fast is the lock, as a multiple of the network's round trip?
//!
//! ```text
//! cargo run --release --example bench -- [--url URL] [--seconds S] [--concurrency 1,2,6]
//!     [--hold-ms 0,10] [--impl ours,polling] [--json]
//! ```
//!
//! For each impl, concurrency C and hold D: C threads, each with its own lock handle on one
//! shared name, loop acquire → hold D → release for S seconds (the shape of python-redis-lock's
//! `examples/bench.py`). `polling` is the common recipe this crate replaces: `SET NX PX`, sleep
//! 100 ms and retry, with an owner-checked Lua release.
//!
//! The round trip (`rtt_p50_us`) is measured inside each cell by the workers themselves: every
//! 8th loop, outside the lock, one `PING` on a plain connection. A shared machine's latency
//! drifts from second to second, so a figure taken before the cell would not be comparable.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis_lock::Lock;

const POLL_INTERVAL: Duration = Duration::from_millis(100);
const LOCK_EXPIRE: Duration = Duration::from_secs(10);
/// Every this many loops a worker times one `PING`.
const PING_EVERY: u64 = 8;
const WARM_UP_PINGS: usize = 2000;
const POLLING_RELEASE: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
return 0
"#;

struct Options {
    url: Option<String>,
    seconds: f64,
    concurrency: Vec<usize>,
    hold_ms: Vec<u64>,
    impls: Vec<Impl>,
    json: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Impl {
    Ours,
    Polling,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Polling => "polling",
        }
    }
}

/// What one thread saw in one cell.
#[derive(Default)]
struct ThreadStats {
    acquisitions: u64,
    /// Microseconds from a release call to the next acquire returning (any thread's).
    handoffs: Vec<u64>,
    /// Microseconds for one acquire + release pair.
    cycles: Vec<u64>,
    /// Microseconds for one `PING`.
    pings: Vec<u64>,
    held: Duration,
}

struct Cell {
    imp: Impl,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
    total: u64,
    min: u64,
    max: u64,
    handoff_p50_us: Option<u64>,
    handoff_p99_us: Option<u64>,
    cycle_p50_us: Option<u64>,
    busy_pct: f64,
    rtt_p50_us: u64,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse_args(std::env::args().skip(1))?;
    let (url, _server) = support::redis_url(options.url.clone())?;
    let client = redis::Client::open(url)?;
    warm_up(&client)?;
    if !options.json {
        println!(
            "{:<8} {:>4} {:>7} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6} {:>6}",
            "impl",
            "conc",
            "hold_ms",
            "total",
            "min",
            "max",
            "ho_p50",
            "ho_p99",
            "cyc_p50",
            "busy%",
            "rtt"
        );
    }
    for &imp in &options.impls {
        for &concurrency in &options.concurrency {
            for &hold_ms in &options.hold_ms {
                let cell = run_cell(&client, imp, concurrency, hold_ms, options.seconds)?;
                if options.json {
                    println!("{}", cell.json());
                } else {
                    println!("{}", cell.row());
                }
            }
        }
    }
    Ok(())
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        url: None,
        seconds: 5.0,
        concurrency: vec![1, 2, 6],
        hold_ms: vec![0, 10],
        impls: vec![Impl::Ours, Impl::Polling],
        json: false,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => options.url = Some(value()?),
            "--seconds" => {
                options.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?;
                if !(options.seconds > 0.0 && options.seconds.is_finite()) {
                    return Err("--seconds must be positive".into());
                }
            }
            "--concurrency" => options.concurrency = list(&value()?, "--concurrency")?,
            "--hold-ms" => options.hold_ms = list(&value()?, "--hold-ms")?,
            "--impl" => {
                options.impls = value()?
                    .split(',')
                    .map(|name| match name {
                        "ours" => Ok(Impl::Ours),
                        "polling" => Ok(Impl::Polling),
                        other => Err(format!("--impl: unknown {other:?} (ours, polling)")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--json" => options.json = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.concurrency.contains(&0) {
        return Err("--concurrency values must be at least 1".into());
    }
    Ok(options)
}

fn list<T: std::str::FromStr>(text: &str, flag: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .map_err(|_| format!("{flag}: bad number {n:?}"))
        })
        .collect()
}

fn run_cell(
    client: &redis::Client,
    imp: Impl,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
) -> Result<Cell, Box<dyn std::error::Error>> {
    let name = format!("bench:{}:{concurrency}:{hold_ms}", imp.name());
    let hold = Duration::from_millis(hold_ms);
    let duration = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let end = start + duration;
    // Nanoseconds since `start` at which the last holder called release.
    let last_release = AtomicU64::new(0);
    let per_thread: Vec<ThreadStats> = thread::scope(|s| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                s.spawn(|| match imp {
                    Impl::Ours => run_ours(client, &name, hold, start, end, &last_release),
                    Impl::Polling => run_polling(client, &name, hold, start, end, &last_release),
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "a bench thread panicked".to_string())?
            })
            .collect::<Result<_, String>>()
    })?;
    let wall = start.elapsed();
    let total = per_thread.iter().map(|t| t.acquisitions).sum();
    let mut handoffs: Vec<u64> = per_thread.iter().flat_map(|t| t.handoffs.clone()).collect();
    let mut cycles: Vec<u64> = per_thread.iter().flat_map(|t| t.cycles.clone()).collect();
    let held: Duration = per_thread.iter().map(|t| t.held).sum();
    let mut pings: Vec<u64> = per_thread.iter().flat_map(|t| t.pings.clone()).collect();
    Ok(Cell {
        imp,
        concurrency,
        hold_ms,
        seconds,
        total,
        min: per_thread.iter().map(|t| t.acquisitions).min().unwrap_or(0),
        max: per_thread.iter().map(|t| t.acquisitions).max().unwrap_or(0),
        handoff_p50_us: (concurrency > 1)
            .then(|| percentile(&mut handoffs, 50.0))
            .flatten(),
        handoff_p99_us: (concurrency > 1)
            .then(|| percentile(&mut handoffs, 99.0))
            .flatten(),
        cycle_p50_us: (concurrency == 1)
            .then(|| percentile(&mut cycles, 50.0))
            .flatten(),
        busy_pct: 100.0 * held.as_secs_f64() / wall.as_secs_f64(),
        rtt_p50_us: percentile(&mut pings, 50.0).unwrap_or(0),
    })
}

/// The loop both impls share: take the lock, hold it, let go, and time it all.
fn measure(
    client: &redis::Client,
    start: Instant,
    end: Instant,
    hold: Duration,
    last_release: &AtomicU64,
    mut acquire: impl FnMut() -> Result<(), String>,
    mut release: impl FnMut() -> Result<(), String>,
) -> Result<ThreadStats, String> {
    let mut stats = ThreadStats::default();
    let mut pinger = client.get_connection().map_err(|e| e.to_string())?;
    let since_start = |t: Instant| t.duration_since(start).as_nanos() as u64;
    while Instant::now() < end {
        let before = Instant::now();
        acquire()?;
        let acquired = Instant::now();
        let released_at = last_release.load(Ordering::SeqCst);
        if released_at > 0 {
            stats
                .handoffs
                .push((since_start(acquired).saturating_sub(released_at)) / 1000);
        }
        stats.acquisitions += 1;
        if !hold.is_zero() {
            thread::sleep(hold);
        }
        let releasing = Instant::now();
        stats.held += releasing - acquired;
        last_release.store(since_start(releasing), Ordering::SeqCst);
        release()?;
        stats
            .cycles
            .push((Instant::now() - before).as_micros() as u64);
        if stats.acquisitions % PING_EVERY == 0 {
            stats
                .pings
                .push(ping(&mut pinger).map_err(|e| e.to_string())?);
        }
    }
    Ok(stats)
}

fn run_ours(
    client: &redis::Client,
    name: &str,
    hold: Duration,
    start: Instant,
    end: Instant,
    last_release: &AtomicU64,
) -> Result<ThreadStats, String> {
    let lock = Lock::builder(client, name)
        .expire(LOCK_EXPIRE)
        .build()
        .map_err(|e| e.to_string())?;
    measure(
        client,
        start,
        end,
        hold,
        last_release,
        || lock.acquire().map_err(|e| e.to_string()),
        || lock.release().map_err(|e| e.to_string()),
    )
}

fn run_polling(
    client: &redis::Client,
    name: &str,
    hold: Duration,
    start: Instant,
    end: Instant,
    last_release: &AtomicU64,
) -> Result<ThreadStats, String> {
    let key = format!("lock:{name}");
    let id = format!("{:?}-{}", thread::current().id(), std::process::id());
    let release_script = redis::Script::new(POLLING_RELEASE);
    let conn = std::cell::RefCell::new(client.get_connection().map_err(|e| e.to_string())?);
    measure(
        client,
        start,
        end,
        hold,
        last_release,
        || loop {
            let taken: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&id)
                .arg("NX")
                .arg("PX")
                .arg(LOCK_EXPIRE.as_millis() as u64)
                .query(&mut *conn.borrow_mut())
                .map_err(|e| e.to_string())?;
            if taken.is_some() {
                return Ok(());
            }
            thread::sleep(POLL_INTERVAL);
        },
        || {
            let _: i64 = release_script
                .key(&key)
                .arg(&id)
                .invoke(&mut *conn.borrow_mut())
                .map_err(|e| e.to_string())?;
            Ok(())
        },
    )
}

/// A second of untimed lock traffic first, so the first cell does not pay for cold caches,
/// connection set-up and the CPU clocking up.
fn warm_up(client: &redis::Client) -> Result<(), Box<dyn std::error::Error>> {
    let lock = Lock::new(client, "bench:warm-up")?;
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        lock.acquire()?;
        lock.release()?;
    }
    let mut conn = client.get_connection()?;
    for _ in 0..WARM_UP_PINGS {
        ping(&mut conn)?;
    }
    Ok(())
}

/// One `PING` round trip, in microseconds.
fn ping(conn: &mut redis::Connection) -> redis::RedisResult<u64> {
    let sent = Instant::now();
    let _: String = redis::cmd("PING").query(conn)?;
    Ok(sent.elapsed().as_micros() as u64)
}

fn percentile(samples: &mut [u64], pct: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((pct / 100.0) * (samples.len() - 1) as f64).round() as usize;
    Some(samples[rank.min(samples.len() - 1)])
}

fn opt(value: Option<u64>) -> String {
    value.map_or("null".to_string(), |v| v.to_string())
}

impl Cell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"impl":"{}","concurrency":{},"hold_ms":{},"seconds":{},"total":{},"#,
                r#""min":{},"max":{},"handoff_p50_us":{},"handoff_p99_us":{},"#,
                r#""cycle_p50_us":{},"busy_pct":{:.2},"rtt_p50_us":{}}}"#
            ),
            self.imp.name(),
            self.concurrency,
            self.hold_ms,
            self.seconds,
            self.total,
            self.min,
            self.max,
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            opt(self.cycle_p50_us),
            self.busy_pct,
            self.rtt_p50_us,
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{:<8} {:>4} {:>7} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6.1} {:>6}",
            self.imp.name(),
            self.concurrency,
            self.hold_ms,
            self.total,
            self.min,
            self.max,
            dash(self.handoff_p50_us),
            dash(self.handoff_p99_us),
            dash(self.cycle_p50_us),
            self.busy_pct,
            self.rtt_p50_us,
        )
    }
}
