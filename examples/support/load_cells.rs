//! The bench's `connections` and `idle-load` cells (feature `tokio`): what waiters cost the
//! server while they wait, in connections and in commands; see the top of `bench.rs`.
//!
//! Each cell takes the primitive with a holder of its own (a blocking handle, a 10-minute lease
//! without renewal, so that no renewal runs while it measures), starts the waiters, each with a
//! handle of its own and one [`CancelToken`] for them all, and waits until the queue-engine
//! waiters are in their queues (the `queue` sorted set of their keys, read on the bench's own
//! connection, so that the bench adds no connection of the library's). At the end it cancels
//! the waiters, joins every thread and task, releases the holders and deletes its names' keys.

use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{aio, ArcSemaphorePermit, CancelToken, Error, Lock, Semaphore};

use super::async_cells::{join_tasks, runtime};
use super::{opt_f, Line, Options};

/// The holders' lease: longer than any cell, and not renewed.
const HOLDER_LEASE: Duration = Duration::from_secs(600);
/// The waiting threads' stacks.
const THREAD_STACK: usize = 256 * 1024;
/// How long the waiters have to be all in their queues.
const QUEUED_WITHIN: Duration = Duration::from_secs(120);
/// How often the bench looks at the queues, and at the server's clients.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How long the bench looks at the server's clients once the waiters are all queued. Their
/// count moves while they wait (on a server where a wait's `BLPOP` is ended by `CLIENT KILL`,
/// each heartbeat closes a connection and opens another), so it is sampled, not read once.
const LOOK_FOR: Duration = Duration::from_secs(2);
/// Before a load, the server's clients must stay the same this long (the library keeps idle
/// waiting connections of the load before for about a second)...
const QUIET_FOR: Duration = Duration::from_millis(1500);
/// ... within this.
const QUIET_WITHIN: Duration = Duration::from_secs(10);
/// The engine-at-scale issue's targets: connections for one process's waiters.
const CONNECTIONS_TARGET: u64 = 20;
const MIXED_CONNECTIONS_TARGET: u64 = 16;
/// The engine-at-scale issue's targets for 700 idle waiters: script calls and commands a second.
const SCRIPTS_TARGET: f64 = 10.0;
const COMMANDS_TARGET: f64 = 300.0;

/// A `connections` load, as `--load` names it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Load {
    /// 2,000 tokio tasks on one `aio::Semaphore` of 1 permit.
    AsyncSemaphore,
    /// 200 blocking threads on one `Semaphore` of 1 permit.
    BlockingThreads,
    /// 1,000 threads and 5,000 tasks on 100 names: plain locks, fair locks, semaphores.
    Mixed,
}

impl Load {
    pub const ALL: [Load; 3] = [Load::AsyncSemaphore, Load::BlockingThreads, Load::Mixed];

    pub fn word(self) -> &'static str {
        match self {
            Load::AsyncSemaphore => "async-semaphore",
            Load::BlockingThreads => "blocking-threads",
            Load::Mixed => "mixed-100-names",
        }
    }

    pub fn parse(word: &str) -> Result<Load, String> {
        Load::ALL
            .into_iter()
            .find(|load| load.word() == word)
            .ok_or_else(|| {
                format!(
                    "--load: unknown {word:?} (async-semaphore, blocking-threads, mixed-100-names)"
                )
            })
    }

    /// Its tasks, threads and names at full size.
    fn full_size(self) -> (usize, usize, usize) {
        match self {
            Load::AsyncSemaphore => (2000, 0, 1),
            Load::BlockingThreads => (0, 200, 1),
            Load::Mixed => (5000, 1000, 100),
        }
    }

    /// Its tasks, threads and names, times `scale` (each at least 1 where the load has any; the
    /// mixed load keeps at least one name of each kind).
    fn size(self, scale: f64) -> (usize, usize, usize) {
        let (tasks, threads, names) = self.full_size();
        let scaled = |n: usize, least: usize| {
            if n == 0 {
                0
            } else {
                ((n as f64 * scale).round() as usize).max(least)
            }
        };
        let least_names = if self == Load::Mixed { 3 } else { 1 };
        (
            scaled(tasks, 1),
            scaled(threads, 1),
            scaled(names, least_names),
        )
    }

    fn connections_target(self) -> u64 {
        match self {
            Load::Mixed => MIXED_CONNECTIONS_TARGET,
            _ => CONNECTIONS_TARGET,
        }
    }
}

/// What a name is.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lock,
    FairLock,
    Semaphore,
}

impl Kind {
    /// The kind of name `n` of `load`: the mixed load goes round plain, fair, semaphore.
    fn of(load: Load, n: usize) -> Kind {
        match (load, n % 3) {
            (Load::Mixed, 0) => Kind::Lock,
            (Load::Mixed, 1) => Kind::FairLock,
            _ => Kind::Semaphore,
        }
    }

    /// The sorted set of its waiters (the crate docs' *Keys*), for the queue engine's kinds.
    fn queue_key(self, name: &str) -> Option<String> {
        match self {
            Kind::Lock => None,
            Kind::FairLock => Some(format!("fair-lock:{{{name}}}:queue")),
            Kind::Semaphore => Some(format!("semaphore:{{{name}}}:queue")),
        }
    }
}

/// A holder: what it took, given back at the end.
enum Holder {
    Lock(Lock),
    Permit(ArcSemaphorePermit),
}

impl Holder {
    fn take(client: &redis::Client, kind: Kind, name: &str) -> Result<Holder, String> {
        let taken = match kind {
            Kind::Lock | Kind::FairLock => {
                let lock = Lock::builder(client, name)
                    .fair(kind == Kind::FairLock)
                    .expire(HOLDER_LEASE)
                    .auto_renewal(false)
                    .build()
                    .map_err(|e| e.to_string())?;
                let free = lock.try_acquire().map_err(|e| e.to_string())?;
                free.then_some(Holder::Lock(lock))
            }
            Kind::Semaphore => {
                let semaphore = Semaphore::builder(client, name, 1)
                    .expire(HOLDER_LEASE)
                    .auto_renewal(false)
                    .build()
                    .map_err(|e| e.to_string())?;
                std::sync::Arc::new(semaphore)
                    .try_acquire_arc_for(Duration::from_secs(1))
                    .map_err(|e| e.to_string())?
                    .map(Holder::Permit)
            }
        };
        taken.ok_or_else(|| format!("{name} was not free for its holder"))
    }

    fn release(self) -> Result<(), String> {
        match self {
            Holder::Lock(lock) => lock.release(),
            Holder::Permit(permit) => permit.release(),
        }
        .map_err(|e| e.to_string())
    }
}

/// A blocking waiter's handle (a semaphore's is boxed: it is many times a lock's size).
enum Waiter {
    Lock(Lock),
    Semaphore(Box<Semaphore>),
}

impl Waiter {
    fn new(
        client: &redis::Client,
        kind: Kind,
        name: &str,
        token: &CancelToken,
    ) -> Result<Waiter, String> {
        match kind {
            Kind::Lock | Kind::FairLock => Lock::builder(client, name)
                .fair(kind == Kind::FairLock)
                .cancel_token(token.clone())
                .build()
                .map(Waiter::Lock),
            Kind::Semaphore => Semaphore::builder(client, name, 1)
                .cancel_token(token.clone())
                .build()
                .map(|semaphore| Waiter::Semaphore(Box::new(semaphore))),
        }
        .map_err(|e| e.to_string())
    }

    /// Waits until cancelled (true), or until it has the lock or permit, which it gives back
    /// (false).
    fn wait(self) -> Result<bool, String> {
        let waited = match &self {
            Waiter::Lock(lock) => lock.acquire().and_then(|()| lock.release()),
            Waiter::Semaphore(semaphore) => semaphore.acquire().and_then(|p| p.release()),
        };
        cancelled(waited)
    }
}

/// An async waiter's handle (a semaphore's boxed, as [`Waiter`]'s).
enum AsyncWaiter {
    Lock(aio::Lock),
    Semaphore(Box<aio::Semaphore>),
}

impl AsyncWaiter {
    fn new(
        client: &redis::Client,
        kind: Kind,
        name: &str,
        token: &CancelToken,
    ) -> Result<AsyncWaiter, String> {
        match kind {
            Kind::Lock | Kind::FairLock => aio::Lock::builder(client, name)
                .fair(kind == Kind::FairLock)
                .cancel_token(token.clone())
                .build()
                .map(AsyncWaiter::Lock),
            Kind::Semaphore => aio::Semaphore::builder(client, name, 1)
                .cancel_token(token.clone())
                .build()
                .map(|semaphore| AsyncWaiter::Semaphore(Box::new(semaphore))),
        }
        .map_err(|e| e.to_string())
    }

    /// [`Waiter::wait`], as a task.
    async fn wait(self) -> Result<bool, String> {
        let waited = match &self {
            AsyncWaiter::Lock(lock) => match lock.acquire().await {
                Ok(()) => lock.release().await,
                Err(e) => Err(e),
            },
            AsyncWaiter::Semaphore(semaphore) => match semaphore.acquire().await {
                Ok(permit) => permit.release().await,
                Err(e) => Err(e),
            },
        };
        cancelled(waited)
    }
}

/// Whether a wait ended cancelled (`Ok(())` is a wait that had its turn and gave it back).
fn cancelled(waited: Result<(), Error>) -> Result<bool, String> {
    match waited {
        Ok(()) => Ok(false),
        Err(Error::Cancelled { .. }) => Ok(true),
        Err(e) => Err(e.to_string()),
    }
}

/// A field of an `INFO` section, as a number.
fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == field).then(|| value.trim().parse().ok())?
    })
}

/// The server's `connected_clients` and `blocked_clients`.
fn clients(conn: &mut redis::Connection) -> Result<(u64, u64), String> {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(conn)
        .map_err(|e| e.to_string())?;
    let field = |name| info_field(&info, name).ok_or(format!("no {name} in INFO clients"));
    Ok((field("connected_clients")?, field("blocked_clients")?))
}

/// Deletes every key whose name contains `names` (the bench's names, in every key layout).
fn delete_keys(conn: &mut redis::Connection, names: &str) -> redis::RedisResult<()> {
    let mut cursor = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{names}*"))
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL").arg(keys).query(conn)?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The waiters in the queues of `queues` (name kinds without one are not counted).
fn queued(conn: &mut redis::Connection, queues: &[String]) -> redis::RedisResult<u64> {
    if queues.is_empty() {
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    for key in queues {
        pipe.zcard(key);
    }
    let counts: Vec<u64> = pipe.query(conn)?;
    Ok(counts.iter().sum())
}

/// Polls until `expected` waiters are in `queues`, within [`QUEUED_WITHIN`].
fn until_queued(
    conn: &mut redis::Connection,
    queues: &[String],
    expected: u64,
) -> Result<u64, String> {
    let start = Instant::now();
    loop {
        let now = queued(conn, queues).map_err(|e| e.to_string())?;
        if now >= expected {
            return Ok(now);
        }
        if start.elapsed() > QUEUED_WITHIN {
            return Err(format!(
                "only {now} of {expected} waiters were queued after {} s",
                QUEUED_WITHIN.as_secs()
            ));
        }
        thread::sleep(LOOK_EVERY);
    }
}

/// The server's clients and blocked clients once they have stayed the same for
/// [`QUIET_FOR`] (or after [`QUIET_WITHIN`], the last reading).
fn quiet_clients(conn: &mut redis::Connection) -> Result<(u64, u64), String> {
    let start = Instant::now();
    let (mut last, mut since) = (clients(conn)?, Instant::now());
    while since.elapsed() < QUIET_FOR && start.elapsed() < QUIET_WITHIN {
        thread::sleep(LOOK_EVERY);
        let now = clients(conn)?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(last)
}

/// The server's clients every [`LOOK_EVERY`] for [`LOOK_FOR`]: the most and the fewest
/// connected, and the most blocked.
fn sampled_clients(conn: &mut redis::Connection) -> Result<Sampled, String> {
    let start = Instant::now();
    let (connected, blocked) = clients(conn)?;
    let mut sampled = Sampled {
        most: connected,
        least: connected,
        blocked,
    };
    while start.elapsed() < LOOK_FOR {
        thread::sleep(LOOK_EVERY);
        let (connected, blocked) = clients(conn)?;
        sampled.most = sampled.most.max(connected);
        sampled.least = sampled.least.min(connected);
        sampled.blocked = sampled.blocked.max(blocked);
    }
    Ok(sampled)
}

/// What [`sampled_clients`] saw.
struct Sampled {
    most: u64,
    least: u64,
    blocked: u64,
}

/// The `connections` cells: one row per `--load`.
pub fn run_connections(
    client: &redis::Client,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<11} {:<16} {:>5} {:>7} {:>5} {:>6} {:>11} {:>6} {:>7} {:>8} {:>8}",
            "cell",
            "load",
            "tasks",
            "threads",
            "names",
            "queued",
            "conns(<=T)",
            "least",
            "blocked",
            "setup_ms",
            "down_ms"
        );
    }
    for &load in &options.loads {
        connections_cell(client, load, options.load_scale)?.print(options.json);
    }
    Ok(())
}

fn connections_cell(
    client: &redis::Client,
    load: Load,
    scale: f64,
) -> Result<ConnectionsCell, Box<dyn std::error::Error>> {
    let (tasks, threads, names) = load.size(scale);
    let prefix = format!("bench:connections:{}:", load.word());
    let name = |n: usize| format!("{prefix}{n}");
    let mut looker = client.get_connection()?;
    delete_keys(&mut looker, &prefix)?;
    let (before, blocked_before) = quiet_clients(&mut looker)?;
    let holders = (0..names)
        .map(|n| Holder::take(client, Kind::of(load, n), &name(n)))
        .collect::<Result<Vec<_>, _>>();
    let holders = match holders {
        Ok(holders) => holders,
        Err(e) => {
            delete_keys(&mut looker, &prefix)?;
            return Err(e.into());
        }
    };
    let queues: Vec<String> = (0..names)
        .filter_map(|n| Kind::of(load, n).queue_key(&name(n)))
        .collect();
    // Thread i and task i wait on name i mod names.
    let in_queue = |count: usize| {
        (0..count)
            .filter(|i| Kind::of(load, i % names) != Kind::Lock)
            .count() as u64
    };
    let expected = in_queue(threads) + in_queue(tasks);
    let token = CancelToken::new();
    let start = Instant::now();
    let (measured, teardown, ended) = thread::scope(|s| {
        let mut spawned = Ok(());
        let mut waiting = Vec::with_capacity(threads);
        for i in 0..threads {
            let waiter =
                match Waiter::new(client, Kind::of(load, i % names), &name(i % names), &token) {
                    Ok(waiter) => waiter,
                    Err(e) => {
                        spawned = Err(e);
                        break;
                    }
                };
            let thread = thread::Builder::new()
                .stack_size(THREAD_STACK)
                .spawn_scoped(s, move || waiter.wait());
            match thread {
                Ok(thread) => waiting.push(thread),
                Err(e) => {
                    spawned = Err(format!("thread {i} of {threads} did not start: {e}"));
                    break;
                }
            }
        }
        let mut tasks_waiting = Vec::with_capacity(tasks);
        if spawned.is_ok() {
            for i in 0..tasks {
                match AsyncWaiter::new(client, Kind::of(load, i % names), &name(i % names), &token)
                {
                    Ok(waiter) => tasks_waiting.push(runtime().spawn(waiter.wait())),
                    Err(e) => {
                        spawned = Err(e);
                        break;
                    }
                }
            }
        }
        let measured = spawned.and_then(|()| {
            let queued = until_queued(&mut looker, &queues, expected)?;
            let setup = start.elapsed();
            Ok((queued, setup, sampled_clients(&mut looker)?))
        });
        // Whatever happened, every waiter ends before the scope does.
        let cancelled_at = Instant::now();
        token.cancel();
        let joined = waiting
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .map_err(|_| "a waiting thread panicked".to_string())?
            })
            .collect::<Result<Vec<bool>, String>>();
        let joined_tasks = join_tasks(tasks_waiting);
        let ended = joined.and_then(|mut ended| {
            ended.extend(joined_tasks?);
            Ok(ended.iter().filter(|&&cancelled| cancelled).count())
        });
        (measured, cancelled_at.elapsed(), ended)
    });
    let released = holders
        .into_iter()
        .map(Holder::release)
        .collect::<Result<Vec<()>, _>>();
    delete_keys(&mut looker, &prefix)?;
    let (queued, setup, sampled) = measured?;
    let cancelled = ended?;
    released?;
    // The waiting connections that the library keeps idle for a moment are still counted.
    thread::sleep(LOOK_EVERY);
    let (after, _) = clients(&mut looker)?;
    Ok(ConnectionsCell {
        load,
        tasks,
        threads,
        names,
        queued,
        connections: sampled.most.saturating_sub(before),
        connections_least: sampled.least.saturating_sub(before),
        blocked: sampled.blocked.saturating_sub(blocked_before),
        connections_before: before,
        connections_after: after.saturating_sub(before),
        setup,
        teardown,
        cancelled,
    })
}

/// A `connections` cell's figures.
struct ConnectionsCell {
    load: Load,
    tasks: usize,
    threads: usize,
    names: usize,
    /// The waiters seen in the queue engine's queues (the plain locks' are not counted).
    queued: u64,
    /// The most clients the server had while the waiters were all waiting, less those before
    /// the holders; and the fewest.
    connections: u64,
    connections_least: u64,
    /// The most blocked clients (those in `BLPOP`) the server had then, less before.
    blocked: u64,
    /// The server's clients before (the bench's own connection among them).
    connections_before: u64,
    /// The server's clients after the waiters ended and the holders released, less before.
    connections_after: u64,
    /// From the first waiter started to all queued.
    setup: Duration,
    /// From the cancel to every waiter joined.
    teardown: Duration,
    /// Waiters that ended cancelled (the others had a turn: none should).
    cancelled: usize,
}

impl Line for ConnectionsCell {
    fn json(&self) -> String {
        let target = self.load.connections_target();
        format!(
            concat!(
                r#"{{"cell":"connections","load":"{}","tasks":{},"threads":{},"names":{},"#,
                r#""waiters":{},"queued":{},"connections":{},"connections_target":{},"#,
                r#""meets_target":{},"connections_least":{},"blocked_clients":{},"#,
                r#""connections_before":{},"connections_after":{},"setup_ms":{},"#,
                r#""teardown_ms":{},"cancelled":{}}}"#
            ),
            self.load.word(),
            self.tasks,
            self.threads,
            self.names,
            self.tasks + self.threads,
            self.queued,
            self.connections,
            target,
            self.connections <= target,
            self.connections_least,
            self.blocked,
            self.connections_before,
            self.connections_after,
            self.setup.as_millis(),
            self.teardown.as_millis(),
            self.cancelled,
        )
    }

    fn row(&self) -> String {
        format!(
            "{:<11} {:<16} {:>5} {:>7} {:>5} {:>6} {:>11} {:>6} {:>7} {:>8} {:>8}   (after {})",
            "connections",
            self.load.word(),
            self.tasks,
            self.threads,
            self.names,
            self.queued,
            format!("{}/{}", self.connections, self.load.connections_target()),
            self.connections_least,
            self.blocked,
            self.setup.as_millis(),
            self.teardown.as_millis(),
            self.connections_after,
        )
    }
}

/// The `idle-load` cells: one row per `--waiters` count (default 700).
pub fn run_idle_load(
    client: &redis::Client,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<9} {:>7} {:>7} {:>13} {:>15} {:>8} {:>8}",
            "cell", "waiters", "seconds", "scripts/s(10)", "commands/s(300)", "blpop/s", "setup_ms"
        );
    }
    let seconds = if options.seconds_given {
        options.seconds
    } else {
        10.0
    };
    for &waiters in options.waiters.as_deref().unwrap_or(&[700]) {
        idle_load_cell(client, usize::try_from(waiters)?, seconds)?.print(options.json);
    }
    Ok(())
}

fn idle_load_cell(
    client: &redis::Client,
    waiters: usize,
    seconds: f64,
) -> Result<IdleLoadCell, Box<dyn std::error::Error>> {
    let prefix = "bench:idle-load:";
    let name = format!("{prefix}{waiters}");
    let mut looker = client.get_connection()?;
    delete_keys(&mut looker, prefix)?;
    let holder = match Holder::take(client, Kind::Semaphore, &name) {
        Ok(holder) => holder,
        Err(e) => {
            delete_keys(&mut looker, prefix)?;
            return Err(e.into());
        }
    };
    let queue = [Kind::Semaphore
        .queue_key(&name)
        .expect("a semaphore has a queue")];
    let token = CancelToken::new();
    let start = Instant::now();
    let mut spawned = Ok(());
    let mut tasks = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        match AsyncWaiter::new(client, Kind::Semaphore, &name, &token) {
            Ok(waiter) => tasks.push(runtime().spawn(waiter.wait())),
            Err(e) => {
                spawned = Err(e);
                break;
            }
        }
    }
    let measured = spawned.and_then(|()| {
        until_queued(&mut looker, &queue, waiters as u64)?;
        let setup = start.elapsed();
        let stats = idle_stats(&mut looker, seconds).map_err(|e| e.to_string())?;
        Ok((setup, stats))
    });
    token.cancel();
    let ended = join_tasks(tasks);
    let released = holder.release();
    delete_keys(&mut looker, prefix)?;
    let (setup, (elapsed, calls)) = measured?;
    ended?;
    released?;
    Ok(IdleLoadCell {
        waiters,
        seconds: elapsed.as_secs_f64(),
        setup,
        calls,
    })
}

/// `CONFIG RESETSTAT`, `seconds` of nothing, `INFO commandstats`: how long it really was, and
/// each command's calls (`cmdstat_<name>`, `<name>|<subcommand>` for a subcommand) but the
/// `config` and `info` ones, the bench's own.
fn idle_stats(
    conn: &mut redis::Connection,
    seconds: f64,
) -> redis::RedisResult<(Duration, Vec<(String, u64)>)> {
    redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(conn)?;
    let reset = Instant::now();
    thread::sleep(Duration::from_secs_f64(seconds));
    let elapsed = reset.elapsed();
    let stats: String = redis::cmd("INFO").arg("commandstats").query(conn)?;
    let mut calls = Vec::new();
    for line in stats.lines() {
        let Some((command, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|line| line.split_once(':'))
        else {
            continue;
        };
        let base = command.split('|').next().unwrap_or(command);
        if base == "config" || base == "info" {
            continue;
        }
        let count = rest.split(',').find_map(|field| {
            let n = field.strip_prefix("calls=")?;
            n.parse::<u64>().ok()
        });
        calls.push((command.to_string(), count.unwrap_or(0)));
    }
    calls.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok((elapsed, calls))
}

/// An `idle-load` cell's figures.
struct IdleLoadCell {
    waiters: usize,
    /// From `CONFIG RESETSTAT`'s reply to `INFO commandstats` sent.
    seconds: f64,
    /// From the first waiter started to all queued.
    setup: Duration,
    /// Calls per command in that time (`config` and `info` left out), most first.
    calls: Vec<(String, u64)>,
}

impl IdleLoadCell {
    fn calls_of(&self, commands: &[&str]) -> u64 {
        let of = |(command, calls): &(String, u64)| {
            commands.contains(&command.as_str()).then_some(*calls)
        };
        self.calls.iter().filter_map(of).sum()
    }

    fn per_second(&self, calls: u64) -> f64 {
        calls as f64 / self.seconds
    }

    /// Script calls a second (`EVALSHA`, `EVAL` and their read-only forms).
    fn scripts(&self) -> f64 {
        self.per_second(self.calls_of(&["evalsha", "eval", "evalsha_ro", "eval_ro"]))
    }

    /// Every command the server ran a second, those called by scripts included.
    fn commands(&self) -> f64 {
        self.per_second(self.calls.iter().map(|(_, calls)| calls).sum())
    }

    fn blpops(&self) -> f64 {
        self.per_second(self.calls_of(&["blpop"]))
    }
}

impl Line for IdleLoadCell {
    fn json(&self) -> String {
        let by_command: Vec<String> = self
            .calls
            .iter()
            .map(|(command, calls)| format!(r#""{command}":{calls}"#))
            .collect();
        format!(
            concat!(
                r#"{{"cell":"idle-load","waiters":{},"seconds":{:.2},"scripts_per_s":{:.1},"#,
                r#""commands_per_s":{:.1},"blpops_per_s":{:.1},"scripts_target":{},"#,
                r#""commands_target":{},"meets_target":{},"setup_ms":{},"calls":{{{}}}}}"#
            ),
            self.waiters,
            self.seconds,
            self.scripts(),
            self.commands(),
            self.blpops(),
            SCRIPTS_TARGET,
            COMMANDS_TARGET,
            self.scripts() <= SCRIPTS_TARGET && self.commands() <= COMMANDS_TARGET,
            self.setup.as_millis(),
            by_command.join(","),
        )
    }

    fn row(&self) -> String {
        let top: Vec<String> = self
            .calls
            .iter()
            .take(6)
            .map(|(command, calls)| format!("{command} {}", opt_f(Some(self.per_second(*calls)))))
            .collect();
        format!(
            "{:<9} {:>7} {:>7.2} {:>13.1} {:>15.1} {:>8.1} {:>8}   (per second: {})",
            "idle-load",
            self.waiters,
            self.seconds,
            self.scripts(),
            self.commands(),
            self.blpops(),
            self.setup.as_millis(),
            top.join(", "),
        )
    }
}
