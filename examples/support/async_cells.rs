//! The bench's async cells (feature `tokio`): the async impls' loop cells and the `scale`
//! cell; see the top of `bench.rs`.

use std::future::Future;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::aio;

use super::queue_cells::{by_role, measure_held, Occupancy};
use super::{
    join_all, measure, opt, opt_f, percentile, ping, rtt_multiple, Impl, Line, Options, Pinger,
    Place, ThreadStats, Turns, LOCK_EXPIRE,
};

/// The tokio runtime of the async cells: one for the whole run, as a service has, with one
/// worker per core (tokio's default).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Waits for the tasks on the bench's runtime: each one's result, or the first error.
pub fn join_tasks<T: Send + 'static>(
    tasks: Vec<tokio::task::JoinHandle<Result<T, String>>>,
) -> Result<Vec<T>, String> {
    join_all(runtime().block_on(async {
        let mut joined = Vec::with_capacity(tasks.len());
        for task in tasks {
            joined.push(task.await);
        }
        joined
    }))
}

/// An `aio::Lock` on `name`, with the cells' expiry.
fn aio_lock(place: &Place, name: &str) -> Result<aio::Lock, String> {
    aio::Lock::builder(place.store(), name)
        .expire(LOCK_EXPIRE)
        .build()
        .map_err(|e| e.to_string())
}

/// An `ours-async` contender: `lock().await`, then `unlock().await` on the guard.
async fn contend_ours_async(
    lock: aio::Lock,
    turns: Turns,
    pinger: Option<Pinger>,
) -> Result<ThreadStats, String> {
    let lock = Arc::new(lock);
    measure(
        turns,
        pinger,
        || {
            let lock = Arc::clone(&lock);
            async move { lock.lock().await.map_err(|e| e.to_string()) }
        },
        |guard: aio::LockGuard| async move { guard.unlock().await.map_err(|e| e.to_string()) },
    )
    .await
}

/// The async impls' loop cells: `concurrency` tasks on the bench's runtime, each with a
/// handle of its own (for `rslock`, a `LockManager` of its own: a connection of its own, as
/// separate services would have).
pub fn run_tasks(
    place: &Place,
    imp: Impl,
    name: &str,
    concurrency: usize,
    turns: &Turns,
) -> Result<Vec<ThreadStats>, String> {
    let tasks = (0..concurrency)
        .map(|_| {
            let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
            Ok(match imp {
                Impl::OursAsync => {
                    runtime().spawn(contend_ours_async(aio_lock(place, name)?, turns, pinger))
                }
                #[cfg(feature = "bench-rslock")]
                Impl::Rslock => {
                    // rslock's defaults: 3 tries a `lock()`, 0-200 ms random pause between
                    // them, and `acquire()` calls `lock()` until it wins.
                    let manager = rslock::LockManager::new(vec![place.node_for(name)?]);
                    let key = format!("lock:{name}");
                    runtime().spawn(async move {
                        measure(
                            turns,
                            pinger,
                            || {
                                let (manager, key) = (manager.clone(), key.clone());
                                async move {
                                    let acquired = manager.acquire(key.as_bytes(), LOCK_EXPIRE);
                                    acquired.await.map_err(|e| e.to_string())
                                }
                            },
                            |guard: rslock::LockGuard| async move {
                                guard.release().await;
                                Ok(())
                            },
                        )
                        .await
                    })
                }
                _ => return Err(format!("{} is not an async impl", imp.name())),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    join_tasks(tasks)
}

/// Spawns `contenders` tasks on the bench's runtime, each the future `contender` makes, and
/// waits for them all.
pub fn run_contenders<F>(
    contenders: usize,
    mut contender: impl FnMut() -> Result<F, String>,
) -> Result<Vec<ThreadStats>, String>
where
    F: Future<Output = Result<ThreadStats, String>> + Send + 'static,
{
    let tasks = (0..contenders)
        .map(|_| contender().map(|task| runtime().spawn(task)))
        .collect::<Result<Vec<_>, String>>()?;
    join_tasks(tasks)
}

/// `ours-async` in the `semaphore` cells: `contenders` tasks, each with an `aio::Semaphore`
/// of its own (the defaults), `acquire().await` → hold → `release().await` on the permit.
pub fn semaphore_tasks(
    place: &Place,
    name: &str,
    (permits, contenders): (u32, usize),
    turns: &Turns,
    occupancy: &Arc<Occupancy>,
) -> Result<Vec<ThreadStats>, String> {
    run_contenders(contenders, || {
        let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
        let semaphore =
            aio::Semaphore::new(place.store(), name, permits).map_err(|e| e.to_string())?;
        let occupancy = Arc::clone(occupancy);
        Ok(async move {
            let semaphore = &semaphore;
            measure_held(
                turns,
                pinger,
                (&occupancy, false),
                || async move { semaphore.acquire().await.map_err(|e| e.to_string()) },
                |permit: aio::SemaphorePermit| async move {
                    permit.release().await.map_err(|e| e.to_string())
                },
            )
            .await
        })
    })
}

/// `ours-async` in the `rwlock` cells: `readers` + `writers` tasks, each with an
/// `aio::RwLock` of its own (the defaults), `read().await` or `write().await` → hold →
/// `unlock().await` on the guard. The readers' stats, then the writers'.
pub fn rwlock_tasks(
    place: &Place,
    name: &str,
    roles: (usize, usize),
    turns: &Turns,
    occupancy: &Arc<Occupancy>,
) -> Result<(Vec<ThreadStats>, Vec<ThreadStats>), String> {
    let spawn = |write: bool| {
        let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
        let lock = aio::RwLock::new(place.store(), name).map_err(|e| e.to_string())?;
        let occupancy = Arc::clone(occupancy);
        Ok(runtime().spawn(async move {
            let (lock, counted) = (&lock, (&*occupancy, write));
            if write {
                measure_held(
                    turns,
                    pinger,
                    counted,
                    || async move { lock.write().await.map_err(|e| e.to_string()) },
                    |held: aio::RwLockWriteGuard| async move {
                        held.unlock().await.map_err(|e| e.to_string())
                    },
                )
                .await
            } else {
                measure_held(
                    turns,
                    pinger,
                    counted,
                    || async move { lock.read().await.map_err(|e| e.to_string()) },
                    |held: aio::RwLockReadGuard| async move {
                        held.unlock().await.map_err(|e| e.to_string())
                    },
                )
                .await
            }
        }))
    };
    by_role(roles, spawn, join_tasks)
}

/// A task's `PING`s: a multiplexed connection to the server of `name`'s key.
pub fn async_pinger(place: &Place, name: &str) -> Result<Pinger, String> {
    let client = place.node_client(name)?;
    runtime()
        .block_on(client.get_multiplexed_async_connection())
        .map(Pinger::Async)
        .map_err(|e| e.to_string())
}

/// How often the `scale` cell looks at the server and the process while its tasks run.
const SCALE_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The `scale` cells: one per `--hold-ms` value.
pub fn run_scale(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let Place::Server { client, .. } = place else {
        unreachable!("parse_args refuses the scale cell with --cluster or --quorum")
    };
    if !options.json {
        println!(
            "{:<6} {:>6} {:>5} {:>7} {:>8} {:>4} {:>8} {:>7} {:>7} {:>5} {:>6} {:>11} {:>7} {:>7}",
            "cell",
            "tasks",
            "names",
            "hold_ms",
            "total",
            "min",
            "acq/s",
            "ho_p50",
            "ho_p99",
            "rtt",
            "x_rtt",
            "conns(<=N+8)",
            "rss_MiB",
            "+MiB",
        );
    }
    for &hold_ms in &options.hold_ms {
        let cell = run_scale_cell(place, client, options, hold_ms)?;
        cell.print(options.json);
    }
    Ok(())
}

/// `--tasks` tasks on `--names` names (task i on name i mod names), each looping lock → hold →
/// unlock until `--seconds` have passed and it has had its lock once. Meanwhile the bench, on
/// a connection of its own, looks every [`SCALE_LOOK_EVERY`]: one `PING`, the server's
/// clients, this process's resident memory.
fn run_scale_cell(
    place: &Place,
    client: &redis::Client,
    options: &Options,
    hold_ms: u64,
) -> Result<ScaleCell, Box<dyn std::error::Error>> {
    let mut looker = client.get_connection()?;
    let own_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut looker)?;
    let connections_before = connections(&mut looker, own_id)?;
    let rss_before_kib = rss_kib()?;
    let start = Instant::now();
    let turns: Vec<Turns> = (0..options.names)
        .map(|_| Turns {
            start,
            end: start + Duration::from_secs_f64(options.seconds),
            hold: Duration::from_millis(hold_ms),
            at_least_once: true,
            last_release: Arc::default(),
        })
        .collect();
    let tasks = (0..options.tasks)
        .map(|i| {
            let n = i % options.names;
            let lock = aio_lock(place, &format!("bench:scale:{hold_ms}:{n}"))?;
            Ok(runtime().spawn(contend_ours_async(lock, turns[n].clone(), None)))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let (mut pings, mut most_connections, mut rss_kib_most) = (Vec::new(), 0, 0);
    while !tasks.iter().all(|task| task.is_finished()) {
        pings.push(ping(&mut looker)?);
        most_connections = most_connections.max(connections(&mut looker, own_id)?);
        rss_kib_most = rss_kib_most.max(rss_kib()?);
        thread::sleep(SCALE_LOOK_EVERY);
    }
    let wall = start.elapsed();
    let per_task = join_tasks(tasks)?;
    // The waits' connections close once their queues are empty: give that a moment.
    thread::sleep(SCALE_LOOK_EVERY);
    let connections_after = connections(&mut looker, own_id)?;
    let total: u64 = per_task.iter().map(|t| t.acquisitions).sum();
    let mut handoffs: Vec<u64> = per_task.iter().flat_map(|t| t.handoffs.clone()).collect();
    Ok(ScaleCell {
        tasks: options.tasks,
        names: options.names,
        hold_ms,
        seconds: wall.as_secs_f64(),
        total,
        min: per_task.iter().map(|t| t.acquisitions).min().unwrap_or(0),
        per_second: total as f64 / wall.as_secs_f64(),
        handoff_p50_us: percentile(&mut handoffs, 50.0),
        handoff_p99_us: percentile(&mut handoffs, 99.0),
        rtt_p50_us: percentile(&mut pings, 50.0),
        connections: most_connections,
        connections_before,
        connections_after,
        rss_kib: rss_kib_most,
        rss_before_kib,
    })
}

/// How many clients the server has, less the one whose id is `own_id` (the bench's own
/// `conn`). On the bench's private server all the others are this process's.
fn connections(conn: &mut redis::Connection, own_id: u64) -> redis::RedisResult<usize> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn)?;
    let own = format!("id={own_id} ");
    Ok(list.lines().filter(|line| !line.starts_with(&own)).count())
}

/// This process's resident memory (`VmRSS` in /proc/self/status), in KiB.
fn rss_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().strip_suffix("kB")?.trim().parse().ok())
        .ok_or_else(|| "no VmRSS in /proc/self/status".to_string())
}

/// A `scale` cell's figures.
struct ScaleCell {
    tasks: usize,
    names: usize,
    hold_ms: u64,
    /// The cell's wall time: `--seconds`, or longer if a task was still to have its turn.
    seconds: f64,
    total: u64,
    /// The fewest acquisitions any task had (at least 1).
    min: u64,
    per_second: f64,
    /// From a release to the next acquisition of the same name.
    handoff_p50_us: Option<u64>,
    handoff_p99_us: Option<u64>,
    /// The bench's own `PING`s, taken while the tasks ran.
    rtt_p50_us: Option<u64>,
    /// The most clients the server had while the tasks ran (less the bench's own).
    connections: usize,
    connections_before: usize,
    connections_after: usize,
    /// The most resident memory seen while the tasks ran, and before they were spawned.
    rss_kib: u64,
    rss_before_kib: u64,
}

impl ScaleCell {
    fn connections_target(&self) -> usize {
        self.names + 8
    }
}

impl Line for ScaleCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"scale","backend":"server","tasks":{},"names":{},"hold_ms":{},"#,
                r#""seconds":{:.2},"total":{},"min":{},"acquisitions_per_s":{:.1},"#,
                r#""handoff_p50_us":{},"handoff_p99_us":{},"rtt_p50_us":{},"#,
                r#""handoff_p50_rtt":{},"connections":{},"connections_target":{},"#,
                r#""meets_target":{},"connections_before":{},"connections_after":{},"#,
                r#""rss_kib":{},"rss_before_kib":{},"rss_increase_kib":{}}}"#
            ),
            self.tasks,
            self.names,
            self.hold_ms,
            self.seconds,
            self.total,
            self.min,
            self.per_second,
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            opt(self.rtt_p50_us),
            opt_f(rtt_multiple(self.handoff_p50_us, self.rtt_p50_us)),
            self.connections,
            self.connections_target(),
            self.connections <= self.connections_target(),
            self.connections_before,
            self.connections_after,
            self.rss_kib,
            self.rss_before_kib,
            self.rss_kib.saturating_sub(self.rss_before_kib),
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
        format!(
            "{:<6} {:>6} {:>5} {:>7} {:>8} {:>4} {:>8.0} {:>7} {:>7} {:>5} {:>6} {:>11} {:>7} {:>7}   (connections before {}, after {})",
            "scale",
            self.tasks,
            self.names,
            self.hold_ms,
            self.total,
            self.min,
            self.per_second,
            dash(self.handoff_p50_us),
            dash(self.handoff_p99_us),
            dash(self.rtt_p50_us),
            opt_f(rtt_multiple(self.handoff_p50_us, self.rtt_p50_us)),
            format!("{}/{}", self.connections, self.connections_target()),
            mib(self.rss_kib),
            mib(self.rss_kib.saturating_sub(self.rss_before_kib)),
            self.connections_before,
            self.connections_after,
        )
    }
}
