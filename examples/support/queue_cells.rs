//! The bench's `semaphore` and `rwlock` cells: many contenders on one semaphore or one
//! read-write lock, with the accounting the issue's targets need (how busy the permits were,
//! how evenly the contenders were served, and that no more held at once than may); see the
//! top of `bench.rs`.

use std::future::{ready, Future};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{RwLock, RwLockReadGuard, RwLockWriteGuard, Semaphore, SemaphorePermit};

use super::{
    join_all, measure, opt, opt_f, percentile, rtt_multiple, run_blocking, Impl, Line, Options,
    Pinger, Place, ThreadStats, Turns,
};

/// Targets: the permits at least this busy with 10 ms holds, and every contender's count
/// within this much of the mean.
const TARGET_BUSY_PCT: f64 = 97.0;
const TARGET_SPREAD_PCT: f64 = 20.0;
/// Targets as RTT multiples: the uncontended acquire + release, and the hand-off p50.
const TARGET_CYCLE_RTT: f64 = 2.5;
const TARGET_HANDOFF_RTT: f64 = 2.0;

/// Who holds at once, counted by the contenders themselves: one enters once its acquire has
/// returned and leaves before it calls release, so the counted holds lie inside the real
/// ones and every clash counted is a real one. Each entrant adds itself, then reads the
/// other count (all `SeqCst`): of two that overlap, the later one sees the earlier.
#[derive(Default)]
pub struct Occupancy {
    shared: AtomicU64,
    exclusive: AtomicU64,
    /// The most shared holders seen at once.
    most: AtomicU64,
    /// Holds that overlapped a hold they exclude.
    clashes: AtomicU64,
}

impl Occupancy {
    /// A hold begins: a write hold if `exclusive`, else a permit or a read hold.
    fn enter(&self, exclusive: bool) {
        let clash = if exclusive {
            let writers = self.exclusive.fetch_add(1, Ordering::SeqCst);
            writers > 0 || self.shared.load(Ordering::SeqCst) > 0
        } else {
            let now = self.shared.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.exclusive.load(Ordering::SeqCst) > 0
        };
        self.clashes.fetch_add(u64::from(clash), Ordering::SeqCst);
    }

    fn leave(&self, exclusive: bool) {
        let count = if exclusive {
            &self.exclusive
        } else {
            &self.shared
        };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// [`measure`] with the holds counted in `occupancy`: entered once `acquire`'s future is done,
/// left before `release` is called.
pub async fn measure_held<G, A, R>(
    turns: Turns,
    pinger: Option<Pinger>,
    (occupancy, exclusive): (&Occupancy, bool),
    mut acquire: impl FnMut() -> A,
    mut release: impl FnMut(G) -> R,
) -> Result<ThreadStats, String>
where
    A: Future<Output = Result<G, String>>,
    R: Future<Output = Result<(), String>>,
{
    measure(
        turns,
        pinger,
        || {
            let acquiring = acquire();
            async move {
                let held = acquiring.await?;
                occupancy.enter(exclusive);
                Ok(held)
            }
        },
        |held| {
            occupancy.leave(exclusive);
            release(held)
        },
    )
    .await
}

/// Starts the `rwlock` cell's contenders, `spawn(false)` for a reader and `spawn(true)` for
/// a writer, and waits for them with `join`: the readers' stats, then the writers'.
pub fn by_role<T>(
    (readers, writers): (usize, usize),
    mut spawn: impl FnMut(bool) -> Result<T, String>,
    join: impl Fn(Vec<T>) -> Result<Vec<ThreadStats>, String>,
) -> Result<(Vec<ThreadStats>, Vec<ThreadStats>), String> {
    let reading = (0..readers)
        .map(|_| spawn(false))
        .collect::<Result<Vec<_>, _>>()?;
    let writing = (0..writers)
        .map(|_| spawn(true))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((join(reading)?, join(writing)?))
}

/// The cell's clock and hold, shared by all its contenders.
fn turns(seconds: f64, hold_ms: u64) -> Turns {
    let start = Instant::now();
    Turns {
        start,
        end: start + Duration::from_secs_f64(seconds),
        hold: Duration::from_millis(hold_ms),
        at_least_once: false,
        last_release: Arc::default(),
    }
}

/// Whether `imp` has these cells on `place`; says why not on stderr.
fn runs_here(imp: Impl, place: &Place) -> bool {
    match imp {
        Impl::Ours | Impl::OursAsync => true,
        Impl::DistributedLock if place.backend() == "server" => true,
        Impl::DistributedLock => {
            eprintln!("(distributed-lock: one server only)");
            false
        }
        other => {
            eprintln!("({}: no semaphore or rwlock cells)", other.name());
            false
        }
    }
}

/// The `semaphore` cells: per impl, concurrency C (default 1, 8, 32) and hold D, C contenders
/// loop acquire → hold D → release on one semaphore of `--permits` permits.
pub fn run_semaphore(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<16} {:>4} {:>4} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>7} {:>7} {:>7} {:>5} {:>6} {:>4} {:>5}",
            "impl", "perm", "conc", "hold_ms", "total", "min", "max", "spread%", "busy%",
            "cyc_p50", "ho_p50", "ho_p99", "rtt", "x_rtt", "most", "meets"
        );
    }
    for &imp in options.impls.iter().filter(|&&imp| runs_here(imp, place)) {
        for &concurrency in options.concurrency.as_deref().unwrap_or(&[1, 8, 32]) {
            for &hold_ms in &options.hold_ms {
                let cell =
                    semaphore_cell(place, imp, options, concurrency, hold_ms, options.seconds)?;
                cell.print(options.json);
            }
        }
    }
    Ok(())
}

fn semaphore_cell(
    place: &Place,
    imp: Impl,
    options: &Options,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
) -> Result<SemaphoreCell, Box<dyn std::error::Error>> {
    let permits = options.permits;
    let name = format!("bench:{}:{permits}:{concurrency}:{hold_ms}", imp.name());
    let turns = turns(seconds, hold_ms);
    let occupancy = Arc::new(Occupancy::default());
    let per_task = match imp {
        Impl::Ours => thread::scope(|s| {
            let threads: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (turns, occupancy) = (turns.clone(), &occupancy);
                    s.spawn(|| ours_semaphore(place, &name, permits, turns, occupancy))
                })
                .collect();
            join_all(threads.into_iter().map(|t| t.join()))
        })?,
        #[cfg(feature = "tokio")]
        Impl::OursAsync => super::async_cells::semaphore_tasks(
            place,
            &name,
            (permits, concurrency),
            &turns,
            &occupancy,
        )?,
        #[cfg(feature = "bench-distributed-lock")]
        Impl::DistributedLock => super::dlock_cells::semaphore_tasks(
            place,
            &name,
            (permits, concurrency),
            &turns,
            &occupancy,
        )?,
        _ => return Err(format!("{} has no semaphore cells", imp.name()).into()),
    };
    let wall = turns.start.elapsed();
    let counts: Vec<u64> = per_task.iter().map(|t| t.acquisitions).collect();
    let held: Duration = per_task.iter().map(|t| t.held).sum();
    let mut handoffs: Vec<u64> = per_task.iter().flat_map(|t| t.handoffs.clone()).collect();
    let mut cycles: Vec<u64> = per_task.iter().flat_map(|t| t.cycles.clone()).collect();
    let mut pings: Vec<u64> = per_task.iter().flat_map(|t| t.pings.clone()).collect();
    let contended = concurrency > permits as usize;
    Ok(SemaphoreCell {
        backend: place.backend(),
        imp,
        permits,
        concurrency,
        hold_ms,
        seconds,
        total: counts.iter().sum(),
        min: counts.iter().copied().min().unwrap_or(0),
        max: counts.iter().copied().max().unwrap_or(0),
        spread_pct: spread_pct(&counts),
        busy_pct: 100.0 * held.as_secs_f64() / (wall.as_secs_f64() * f64::from(permits)),
        cycle_p50_us: (concurrency == 1)
            .then(|| percentile(&mut cycles, 50.0))
            .flatten(),
        handoff_p50_us: contended.then(|| percentile(&mut handoffs, 50.0)).flatten(),
        handoff_p99_us: contended.then(|| percentile(&mut handoffs, 99.0)).flatten(),
        rtt_p50_us: percentile(&mut pings, 50.0),
        most_holders: occupancy.most.load(Ordering::SeqCst),
    })
}

/// An `ours` contender: a thread with a `Semaphore` handle of its own (the defaults: 30 s
/// expiry, renewed), `acquire()` → hold → `release()` on the permit.
fn ours_semaphore(
    place: &Place,
    name: &str,
    permits: u32,
    turns: Turns,
    occupancy: &Occupancy,
) -> Result<ThreadStats, String> {
    let semaphore = Semaphore::new(place.store(), name, permits).map_err(|e| e.to_string())?;
    run_blocking(measure_held(
        turns,
        Some(place.pinger(name)?),
        (occupancy, false),
        || ready(semaphore.acquire().map_err(|e| e.to_string())),
        |permit: SemaphorePermit| ready(permit.release().map_err(|e| e.to_string())),
    ))
}

/// How far the contender served most unevenly was from the mean count, in % of the mean.
fn spread_pct(counts: &[u64]) -> f64 {
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    if mean == 0.0 {
        return 100.0;
    }
    let worst = counts
        .iter()
        .map(|&n| (n as f64 - mean).abs())
        .fold(0.0, f64::max);
    100.0 * worst / mean
}

/// A `semaphore` cell's figures.
struct SemaphoreCell {
    backend: &'static str,
    imp: Impl,
    permits: u32,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
    total: u64,
    /// The fewest and the most acquisitions one contender had.
    min: u64,
    max: u64,
    spread_pct: f64,
    /// The time permits were held, in % of the wall time × permits.
    busy_pct: f64,
    /// One contender only: acquire + release.
    cycle_p50_us: Option<u64>,
    /// More contenders than permits: from a release to the next acquisition (any
    /// contender's).
    handoff_p50_us: Option<u64>,
    handoff_p99_us: Option<u64>,
    rtt_p50_us: Option<u64>,
    /// The most holders counted at once: never more than `permits`.
    most_holders: u64,
}

impl SemaphoreCell {
    /// The cell's figure as an RTT multiple: the cycle alone, else the hand-off p50.
    fn x_rtt(&self) -> Option<f64> {
        rtt_multiple(self.cycle_p50_us.or(self.handoff_p50_us), self.rtt_p50_us)
    }

    /// Against the issue's targets: alone, the cycle ≤ 2.5 × RTT; contended with holds, the
    /// permits ≥ 97 % busy and every contender within 20 % of the mean; contended without,
    /// the hand-off p50 ≤ 2 × RTT. `None` for other shapes, or an RTT not measured.
    fn meets_target(&self) -> Option<bool> {
        let holders_ok = self.most_holders <= u64::from(self.permits);
        if self.concurrency == 1 {
            return Some(holders_ok && self.x_rtt()? <= TARGET_CYCLE_RTT);
        }
        if self.concurrency <= self.permits as usize {
            return None;
        }
        if self.hold_ms > 0 {
            let fair = self.busy_pct >= TARGET_BUSY_PCT && self.spread_pct <= TARGET_SPREAD_PCT;
            return Some(holders_ok && fair);
        }
        Some(holders_ok && self.x_rtt()? <= TARGET_HANDOFF_RTT)
    }
}

impl Line for SemaphoreCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"semaphore","backend":"{}","impl":"{}","permits":{},"#,
                r#""concurrency":{},"hold_ms":{},"seconds":{},"total":{},"min":{},"max":{},"#,
                r#""spread_pct":{:.1},"busy_pct":{:.2},"cycle_p50_us":{},"handoff_p50_us":{},"#,
                r#""handoff_p99_us":{},"rtt_p50_us":{},"x_rtt":{},"most_holders":{},"#,
                r#""meets_target":{}}}"#
            ),
            self.backend,
            self.imp.name(),
            self.permits,
            self.concurrency,
            self.hold_ms,
            self.seconds,
            self.total,
            self.min,
            self.max,
            self.spread_pct,
            self.busy_pct,
            opt(self.cycle_p50_us),
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            opt(self.rtt_p50_us),
            opt_f(self.x_rtt()),
            self.most_holders,
            self.meets_target()
                .map_or("null".to_string(), |m| m.to_string()),
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{:<16} {:>4} {:>4} {:>7} {:>7} {:>6} {:>6} {:>7.1} {:>6.1} {:>7} {:>7} {:>7} {:>5} {:>6} {:>4} {:>5}",
            self.imp.name(),
            self.permits,
            self.concurrency,
            self.hold_ms,
            self.total,
            self.min,
            self.max,
            self.spread_pct,
            self.busy_pct,
            dash(self.cycle_p50_us),
            dash(self.handoff_p50_us),
            dash(self.handoff_p99_us),
            dash(self.rtt_p50_us),
            opt_f(self.x_rtt()),
            self.most_holders,
            self.meets_target().map_or("-".to_string(), |m| m.to_string()),
        )
    }
}

/// The `rwlock` cells: per impl and hold D, `--readers` readers and `--writers` writers loop
/// acquire → hold D → release on one read-write lock.
pub fn run_rwlock(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<16} {:>3} {:>3} {:>7} {:>7} {:>5} {:>5} {:>6} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8} {:>5} {:>7}",
            "impl", "rd", "wr", "hold_ms", "reads", "r_min", "r_max", "writes", "w_min",
            "w_max", "rw_p50", "rw_max", "ww_p50", "ww_max", "rtt", "clashes"
        );
    }
    for &imp in options.impls.iter().filter(|&&imp| runs_here(imp, place)) {
        for &hold_ms in &options.hold_ms {
            rwlock_cell(place, imp, options, hold_ms)?.print(options.json);
        }
    }
    Ok(())
}

fn rwlock_cell(
    place: &Place,
    imp: Impl,
    options: &Options,
    hold_ms: u64,
) -> Result<RwLockCell, Box<dyn std::error::Error>> {
    let name = format!("bench:{}:rw:{hold_ms}", imp.name());
    let turns = turns(options.seconds, hold_ms);
    let occupancy = Arc::new(Occupancy::default());
    let (readers, writers) = match imp {
        Impl::Ours => thread::scope(|s| {
            by_role(
                (options.readers, options.writers),
                |write| {
                    let (turns, occupancy, name) = (turns.clone(), &occupancy, &name);
                    Ok(s.spawn(move || ours_rwlock(place, name, write, turns, occupancy)))
                },
                |threads| join_all(threads.into_iter().map(|t| t.join())),
            )
        })?,
        #[cfg(feature = "tokio")]
        Impl::OursAsync => super::async_cells::rwlock_tasks(
            place,
            &name,
            (options.readers, options.writers),
            &turns,
            &occupancy,
        )?,
        #[cfg(feature = "bench-distributed-lock")]
        Impl::DistributedLock => super::dlock_cells::rwlock_tasks(
            place,
            &name,
            (options.readers, options.writers),
            &turns,
            &occupancy,
        )?,
        _ => return Err(format!("{} has no rwlock cells", imp.name()).into()),
    };
    let mut pings: Vec<u64> = (readers.iter().chain(&writers))
        .flat_map(|t| t.pings.clone())
        .collect();
    Ok(RwLockCell {
        backend: place.backend(),
        imp,
        hold_ms,
        seconds: options.seconds,
        reads: Role::of(&readers),
        writes: Role::of(&writers),
        rtt_p50_us: percentile(&mut pings, 50.0),
        clashes: occupancy.clashes.load(Ordering::SeqCst),
    })
}

/// An `ours` reader or writer: a thread with an `RwLock` handle of its own (the defaults),
/// `read()` or `write()` → hold → `unlock()` on the guard.
fn ours_rwlock(
    place: &Place,
    name: &str,
    write: bool,
    turns: Turns,
    occupancy: &Occupancy,
) -> Result<ThreadStats, String> {
    let lock = RwLock::new(place.store(), name).map_err(|e| e.to_string())?;
    let pinger = Some(place.pinger(name)?);
    let counted = (occupancy, write);
    if write {
        run_blocking(measure_held(
            turns,
            pinger,
            counted,
            || ready(lock.write().map_err(|e| e.to_string())),
            |held: RwLockWriteGuard| ready(held.unlock().map_err(|e| e.to_string())),
        ))
    } else {
        run_blocking(measure_held(
            turns,
            pinger,
            counted,
            || ready(lock.read().map_err(|e| e.to_string())),
            |held: RwLockReadGuard| ready(held.unlock().map_err(|e| e.to_string())),
        ))
    }
}

/// What the readers, or the writers, of an `rwlock` cell had.
struct Role {
    contenders: usize,
    total: u64,
    min: u64,
    max: u64,
    /// From asking to having.
    wait_p50_us: Option<u64>,
    wait_max_us: Option<u64>,
}

impl Role {
    fn of(stats: &[ThreadStats]) -> Role {
        let counts = stats.iter().map(|t| t.acquisitions);
        let mut waits: Vec<u64> = stats.iter().flat_map(|t| t.waits.clone()).collect();
        Role {
            contenders: stats.len(),
            total: counts.clone().sum(),
            min: counts.clone().min().unwrap_or(0),
            max: counts.max().unwrap_or(0),
            wait_p50_us: percentile(&mut waits, 50.0),
            wait_max_us: waits.iter().copied().max(),
        }
    }
}

/// An `rwlock` cell's figures.
struct RwLockCell {
    backend: &'static str,
    imp: Impl,
    hold_ms: u64,
    seconds: f64,
    reads: Role,
    writes: Role,
    rtt_p50_us: Option<u64>,
    /// Holds that overlapped one they exclude (a writer with anyone): never any.
    clashes: u64,
}

impl Line for RwLockCell {
    fn json(&self) -> String {
        let role = |r: &Role| {
            format!(
                r#"{{"contenders":{},"total":{},"min":{},"max":{},"wait_p50_us":{},"wait_max_us":{}}}"#,
                r.contenders,
                r.total,
                r.min,
                r.max,
                opt(r.wait_p50_us),
                opt(r.wait_max_us),
            )
        };
        format!(
            concat!(
                r#"{{"cell":"rwlock","backend":"{}","impl":"{}","hold_ms":{},"seconds":{},"#,
                r#""reads":{},"writes":{},"rtt_p50_us":{},"clashes":{}}}"#
            ),
            self.backend,
            self.imp.name(),
            self.hold_ms,
            self.seconds,
            role(&self.reads),
            role(&self.writes),
            opt(self.rtt_p50_us),
            self.clashes,
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let (r, w) = (&self.reads, &self.writes);
        format!(
            "{:<16} {:>3} {:>3} {:>7} {:>7} {:>5} {:>5} {:>6} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8} {:>5} {:>7}",
            self.imp.name(),
            r.contenders,
            w.contenders,
            self.hold_ms,
            r.total,
            r.min,
            r.max,
            w.total,
            w.min,
            w.max,
            dash(r.wait_p50_us),
            dash(r.wait_max_us),
            dash(w.wait_p50_us),
            dash(w.wait_max_us),
            dash(self.rtt_p50_us),
            self.clashes,
        )
    }
}
