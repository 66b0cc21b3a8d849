//! The bench's `engine-instructions` cell: how many instructions the server runs per queue
//! hand-off, counted by callgrind. Time on a shared machine moves with its other load; an
//! instruction count does not, so two builds of the scripts can be compared run against run
//! (see the top of `bench.rs`, and docs/performance.md, *The scripts' fixed cost*).
//!
//! The cell starts a `redis-server` of its own under `valgrind --tool=callgrind`. Each phase
//! reads `INFO commandstats`, zeroes callgrind's counters (`callgrind_control -z`), runs
//! through the library's public API, dumps the counters (`callgrind_control -d`), reads the
//! dump's total and `INFO commandstats` again. Nothing is subtracted: every line has the raw
//! total, the calls per command and the per-unit figures derived from them.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_blpop_lock::{CancelToken, Error as LockError, Lock, Semaphore};

use super::{join_all, opt_f, Line, Options, LOCK_EXPIRE};

/// How long valgrind may take to bring the server up: it translates redis-server's code
/// before the first reply, which takes seconds.
const START_LIMIT: Duration = Duration::from_secs(120);
/// How long the server may take to stop and callgrind to write its last dump.
const STOP_LIMIT: Duration = Duration::from_secs(60);
/// The handles' deadline per call (default 5 s): callgrind slows the server 20–50 times,
/// and a hand-off waits behind every script queued before it.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// The queue primitives' heartbeat (default 1 s; a process lapses after two missed). The
/// server runs with `--hz 1`, and an idle server fires a `BLPOP` timeout only when its event
/// loop wakes, up to 1 s late: at the default the hub's heartbeat, sent after that `BLPOP`,
/// could come 2 s after the last one and lapse the cell's own waiters. At 2 s it comes at
/// most 3 s after, within the 4 s lapse window, and still often enough to be seen in the
/// `idle-waiter` phase.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// The server's `hz`: serverCron runs this often a second, and each run is instructions
/// counted in every phase; 1 (the least) keeps that noise low. The idle phases show it.
const SERVER_HZ: &str = "1";
/// A contended phase's contenders first take this many turns between them per contender,
/// untimed (at least one each), so that every handle's connection is open and the phase
/// starts from contention rather than from its first connects.
const WARM_TURNS: u64 = 5;
/// Every name the cell uses starts with this.
const PREFIX: &str = "bench:engine-instructions:";

/// The `engine-instructions` cell: the phases `uncontended`, `contended` (per
/// `--concurrency`, default 8), `plain-lock`, `idle` and `idle-waiter`, each a line.
pub fn run(options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    if options.url.is_some() {
        eprintln!(
            "(engine-instructions: the cell starts a redis-server of its own under callgrind; \
             --url is not used for it)"
        );
    }
    let mut server = CallgrindServer::start()?;
    let client = server.client.clone();
    let versions = (server.redis_version.clone(), server.valgrind.clone());
    eprintln!(
        "(engine-instructions: redis-server {} under {} --tool=callgrind on port {}, \
         --hz {SERVER_HZ} to keep serverCron's own instructions low; handles with a {}-s \
         heartbeat and a {}-s I/O timeout)",
        server.redis_version,
        server.valgrind,
        server.port,
        HEARTBEAT.as_secs(),
        IO_TIMEOUT.as_secs(),
    );
    if !options.json {
        println!(
            "{:<12} {:>4} {:>4} {:>7} {:>11} {:>7} {:>13} {:>11} {:>7} {:>5} {:>6} {:>7} {:>6} {:>6} {:>10} {:>6}",
            "phase", "perm", "conc", "secs", "unit", "units", "Ir", "Ir/unit", "evalsha",
            "eval", "blpop", "other", "scr/u", "blp/u", "Ir/script", "x_unc"
        );
    }
    let permits = options.permits;
    let cycles = options.cycles;
    let line = |phase, permits, concurrency, unit, units, counted: Counted| PhaseLine {
        phase,
        server: versions.clone(),
        permits,
        concurrency,
        unit,
        units,
        counted,
        per_uncontended: None,
    };

    let counted = uncontended(&mut server, &client, permits, cycles)?;
    let first = line(
        "uncontended",
        Some(permits),
        1,
        "cycle",
        cycles as f64,
        counted,
    );
    first.print(options.json);
    let per_cycle = first.ir_per_unit();

    let mut contended_for = None;
    for &concurrency in options.concurrency.as_deref().unwrap_or(&[8]) {
        let target = options.acquisitions;
        let (counted, acquisitions) =
            contended(&mut server, &client, (permits, concurrency), target)?;
        contended_for.get_or_insert(counted.seconds);
        let mut line = line(
            "contended",
            Some(permits),
            concurrency,
            "acquisition",
            acquisitions as f64,
            counted,
        );
        line.per_uncontended = line.ir_per_unit().zip(per_cycle).map(|(a, c)| a / c);
        line.print(options.json);
    }

    let counted = plain_lock(&mut server, &client, cycles)?;
    let mut plain = line("plain-lock", None, 1, "cycle", cycles as f64, counted);
    plain.per_uncontended = plain.ir_per_unit().zip(per_cycle).map(|(p, c)| p / c);
    plain.print(options.json);

    // As long as the (first) contended phase took, so that its background is comparable.
    let idle_for = Duration::from_secs_f64(contended_for.unwrap_or(10.0));
    let counted = idle(&mut server, idle_for)?;
    let seconds = counted.seconds;
    line("idle", None, 0, "second", seconds, counted).print(options.json);
    let counted = idle_waiter(&mut server, &client, idle_for)?;
    let seconds = counted.seconds;
    line("idle-waiter", Some(1), 1, "second", seconds, counted).print(options.json);
    Ok(())
}

/// A semaphore handle as the `semaphore` cell builds one (`Semaphore::new`: a 30 s expiry,
/// renewed), with the cell's heartbeat and I/O timeout.
fn semaphore(
    client: &redis::Client,
    name: &str,
    permits: u32,
    cancel: Option<CancelToken>,
) -> Result<Semaphore, LockError> {
    let builder = Semaphore::builder(client, name, permits)
        .io_timeout(IO_TIMEOUT)
        .heartbeat(HEARTBEAT);
    match cancel {
        Some(token) => builder.cancel_token(token).build(),
        None => builder.build(),
    }
}

/// One handle, `cycles` × (acquire one permit → release) on a semaphore of `permits`.
fn uncontended(
    server: &mut CallgrindServer,
    client: &redis::Client,
    permits: u32,
    cycles: u64,
) -> Result<Counted, Box<dyn std::error::Error>> {
    let name = format!("{PREFIX}uncontended");
    let semaphore = semaphore(client, &name, permits, None)?;
    // Untimed: the first call loads the scripts and opens the connection.
    semaphore.acquire()?.release()?;
    let window = server.open()?;
    for _ in 0..cycles {
        semaphore.acquire()?.release()?;
    }
    Ok(server.close(window)?)
}

/// `concurrency` threads, each with a handle of its own on one semaphore of `permits` (as
/// the `semaphore` cell's contenders), loop acquire → release (hold 0) until `target`
/// acquisitions in all; each finishes the acquire it is in, so a few more may be counted.
/// Returns the counts and the acquisitions made.
fn contended(
    server: &mut CallgrindServer,
    client: &redis::Client,
    (permits, concurrency): (u32, usize),
    target: u64,
) -> Result<(Counted, u64), Box<dyn std::error::Error>> {
    let name = format!("{PREFIX}contended:{concurrency}");
    let warmed = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let abort = AtomicBool::new(false);
    // Passed twice by every contender and this thread: once all are warm (the counters are
    // zeroed then), once the counters are zeroed (the phase starts).
    let gate = Barrier::new(concurrency + 1);
    let warm_target = WARM_TURNS * concurrency as u64;
    let (counted, counts) = thread::scope(|s| {
        let threads: Vec<_> = (0..concurrency)
            .map(|_| {
                let contender = Contender {
                    warmed: (&warmed, warm_target),
                    done: (&done, target),
                    gate: &gate,
                    abort: &abort,
                };
                let name = &name;
                s.spawn(move || contender.run(client, name, permits))
            })
            .collect();
        gate.wait();
        let window = server.open();
        if window.is_err() {
            abort.store(true, Ordering::SeqCst);
        }
        gate.wait();
        let counts = join_all(threads.into_iter().map(|t| t.join()));
        // Dumped before any error is returned, so that the next phase starts from a dump.
        let counted = window.and_then(|window| server.close(window));
        (counted, counts)
    });
    let acquisitions = counts?.iter().sum();
    Ok((counted?, acquisitions))
}

/// A contended phase's thread: what it shares with the others.
struct Contender<'a> {
    /// Warm-up turns taken by all, and how many to take.
    warmed: (&'a AtomicU64, u64),
    /// Counted acquisitions by all, and the target.
    done: (&'a AtomicU64, u64),
    gate: &'a Barrier,
    /// Set when the counters could not be zeroed: the phase does not run.
    abort: &'a AtomicBool,
}

impl Contender<'_> {
    /// The thread's acquisitions in the phase.
    fn run(self, client: &redis::Client, name: &str, permits: u32) -> Result<u64, String> {
        let warm: Result<Semaphore, String> = (|| {
            let semaphore = semaphore(client, name, permits, None).map_err(|e| e.to_string())?;
            let (warmed, warm_target) = self.warmed;
            // At least one turn each, so every handle's connection is open.
            loop {
                semaphore
                    .acquire()
                    .and_then(|permit| permit.release())
                    .map_err(|e| e.to_string())?;
                if warmed.fetch_add(1, Ordering::SeqCst) + 1 >= warm_target {
                    return Ok(semaphore);
                }
            }
        })();
        // Both gates are passed whatever happened, or the others would wait for good.
        self.gate.wait();
        self.gate.wait();
        let semaphore = warm?;
        if self.abort.load(Ordering::SeqCst) {
            return Ok(0);
        }
        let (done, target) = self.done;
        let mut mine = 0;
        while done.load(Ordering::SeqCst) < target {
            let permit = semaphore.acquire().map_err(|e| e.to_string())?;
            done.fetch_add(1, Ordering::SeqCst);
            mine += 1;
            permit.release().map_err(|e| e.to_string())?;
        }
        Ok(mine)
    }
}

/// The plain `Lock`, for scale: one handle (with the bench's lock expiry), `cycles` ×
/// (acquire → release).
fn plain_lock(
    server: &mut CallgrindServer,
    client: &redis::Client,
    cycles: u64,
) -> Result<Counted, Box<dyn std::error::Error>> {
    let lock = Lock::builder(client, format!("{PREFIX}plain"))
        .expire(LOCK_EXPIRE)
        .io_timeout(IO_TIMEOUT)
        .build()?;
    lock.acquire()?;
    lock.release()?;
    let window = server.open()?;
    for _ in 0..cycles {
        lock.acquire()?;
        lock.release()?;
    }
    Ok(server.close(window)?)
}

/// Nothing at all for `length`: serverCron and whatever else the server does by itself.
fn idle(server: &mut CallgrindServer, length: Duration) -> Result<Counted, String> {
    let window = server.open()?;
    thread::sleep(length);
    server.close(window)
}

/// One waiter queued on a held one-permit semaphore for `length`: its process's hub waits
/// in `BLPOP` and sends the heartbeat, as every process with waiters does.
fn idle_waiter(
    server: &mut CallgrindServer,
    client: &redis::Client,
    length: Duration,
) -> Result<Counted, Box<dyn std::error::Error>> {
    let name = format!("{PREFIX}idle-waiter");
    let holder = semaphore(client, &name, 1, None)?;
    let held = holder.acquire()?;
    let token = CancelToken::new();
    let waiter = semaphore(client, &name, 1, Some(token.clone()))?;
    let counted = thread::scope(|s| {
        let waiting = s.spawn(|| match waiter.acquire() {
            Err(LockError::Cancelled { .. }) => Ok(()),
            Err(e) => Err(e.to_string()),
            Ok(_) => Err("the waiter was granted a permit that is held".to_string()),
        });
        let counted = (|| {
            server.wait_queued(&format!("semaphore:{{{name}}}:queue"))?;
            let window = server.open()?;
            thread::sleep(length);
            server.close(window)
        })();
        // Cancelled whatever happened, or the scope would wait for the waiter for good.
        token.cancel();
        let waited = waiting
            .join()
            .map_err(|_| "the waiter's thread panicked".to_string())
            .and_then(|waited| waited);
        waited.and(counted)
    });
    held.release()?;
    Ok(counted?)
}

/// A `redis-server` under callgrind, started for the cell: stopped, and its folder removed,
/// when dropped (also on an error, from the moment it is spawned; not on a signal such as
/// Ctrl-C).
struct CallgrindServer {
    child: Child,
    /// A fresh folder for callgrind's dumps, the server's files and the logs.
    dir: PathBuf,
    port: u16,
    client: redis::Client,
    /// The cell's own connection, for `INFO` and `ZCARD`; `None` until the server answers.
    conn: Option<redis::Connection>,
    /// The number of the last dump read: callgrind writes dump n to `cg.<pid>.<n>`.
    dumps: u64,
    redis_version: String,
    valgrind: String,
}

impl Drop for CallgrindServer {
    fn drop(&mut self) {
        // A `SHUTDOWN` rather than a kill: valgrind then writes its last dump and removes its
        // vgdb pipes in /tmp, which a killed valgrind leaves behind.
        if let Some(conn) = &mut self.conn {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(conn);
            let asked = Instant::now();
            while asked.elapsed() < STOP_LIMIT && matches!(self.child.try_wait(), Ok(None)) {
                thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The start of a phase: what `INFO commandstats` said before the counters were zeroed, and
/// when they were.
struct Window {
    calls: BTreeMap<String, u64>,
    zeroed: Instant,
}

/// What one phase cost the server.
struct Counted {
    /// From the counters zeroed to their dump asked for.
    seconds: f64,
    /// Instructions (callgrind's `Ir`) in that time, every thread of the server.
    ir: u64,
    /// Calls per command in the phase, from `INFO commandstats`; the commands that scripts
    /// run count too (Redis 7 and later), and `info` counts the cell's own `INFO` made
    /// before the counters were zeroed.
    calls: BTreeMap<String, u64>,
}

impl CallgrindServer {
    /// Starts the server and waits until it answers `PING`.
    fn start() -> Result<CallgrindServer, String> {
        let valgrind = version("valgrind")?;
        // It comes with valgrind; checked too, so that its absence is said before the start.
        version("callgrind_control")?;
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "redis-blpop-lock-bench-callgrind-{}-{started}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let spawned = (|| {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free port: {e}"))?
                .port();
            let url = format!("redis://127.0.0.1:{port}/");
            let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let log = |file: &str| File::create(dir.join(file)).map_err(|e| format!("{file}: {e}"));
            let child = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}/cg.%p", dir.display()))
                // The same binary the bench's private servers run: the first on PATH.
                .arg("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--hz", SERVER_HZ])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::from(log("redis.log")?))
                .stderr(Stdio::from(log("valgrind.log")?))
                .spawn()
                .map_err(|e| format!("could not start valgrind: {e}"))?;
            Ok((port, client, child))
        })();
        let (port, client, child) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, dropping `server` (on any error below) stops it and removes `dir`.
        let mut server = CallgrindServer {
            child,
            dir,
            port,
            client,
            conn: None,
            dumps: 0,
            redis_version: String::new(),
            valgrind,
        };
        let begun = Instant::now();
        let mut conn = loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "valgrind redis-server exited ({status}) before it answered: {}",
                    server.log_tail()
                ));
            }
            let answered = (server.client)
                .get_connection_with_timeout(Duration::from_secs(1))
                .and_then(|mut conn| {
                    redis::cmd("PING").query::<String>(&mut conn)?;
                    Ok(conn)
                });
            if let Ok(conn) = answered {
                break conn;
            }
            if begun.elapsed() > START_LIMIT {
                return Err(format!(
                    "redis-server under valgrind did not answer PING within {START_LIMIT:?}: {}",
                    server.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(200));
        };
        conn.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn)
            .map_err(|e| e.to_string())?;
        server.conn = Some(conn);
        server.redis_version = info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_string())
            .ok_or("INFO server: no redis_version")?;
        Ok(server)
    }

    /// The cell's connection, once the server answers.
    fn conn(&mut self) -> Result<&mut redis::Connection, String> {
        self.conn
            .as_mut()
            .ok_or_else(|| "the server has not answered yet".to_string())
    }

    /// The last lines valgrind wrote, for an error.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("valgrind.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// Reads `INFO commandstats`, then zeroes callgrind's counters.
    fn open(&mut self) -> Result<Window, String> {
        let calls = self.command_calls()?;
        self.control("-z")?;
        Ok(Window {
            calls,
            zeroed: Instant::now(),
        })
    }

    /// Dumps callgrind's counters and reads their total, then `INFO commandstats`.
    fn close(&mut self, window: Window) -> Result<Counted, String> {
        let seconds = window.zeroed.elapsed().as_secs_f64();
        self.control("-d")?;
        let ir = self.read_dump()?;
        let after = self.command_calls()?;
        let mut calls = BTreeMap::new();
        for (command, &n) in &after {
            let before = window.calls.get(command).copied().unwrap_or(0);
            let delta = n.checked_sub(before).ok_or_else(|| {
                format!("INFO commandstats: {command} went from {before} calls to {n}")
            })?;
            if delta > 0 {
                calls.insert(command.clone(), delta);
            }
        }
        Ok(Counted { seconds, ir, calls })
    }

    /// `callgrind_control <flag> <pid>`, which waits for valgrind's answer. It exits 0 also
    /// when it finds no such process, so its output is what tells.
    fn control(&self, flag: &str) -> Result<(), String> {
        let out = Command::new("callgrind_control")
            .arg(flag)
            .arg(self.child.id().to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("callgrind_control {flag}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && stdout.lines().any(|line| line.trim() == "OK.") {
            return Ok(());
        }
        Err(format!(
            "callgrind_control {flag} {} failed ({}): {}{}",
            self.child.id(),
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// The `Ir` total of the dump just written: the newest `cg.<pid>.<n>`, which must be
    /// newer than the last one read.
    fn read_dump(&mut self) -> Result<u64, String> {
        let stem = format!("cg.{}.", self.child.id());
        let entries = std::fs::read_dir(&self.dir).map_err(|e| e.to_string())?;
        let mut newest = None;
        for entry in entries {
            let name = entry.map_err(|e| e.to_string())?.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|name| name.strip_prefix(&stem))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            newest = newest.max(Some(n));
        }
        let n = newest
            .filter(|&n| n > self.dumps)
            .ok_or_else(|| format!("no new callgrind dump {stem}* in {}", self.dir.display()))?;
        self.dumps = n;
        let path = self.dir.join(format!("{stem}{n}"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let ir = dump_ir(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // Read: not needed any more, and a long run's dumps add up.
        let _ = std::fs::remove_file(&path);
        Ok(ir)
    }

    /// `INFO commandstats` as calls per command.
    fn command_calls(&mut self) -> Result<BTreeMap<String, u64>, String> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(self.conn()?)
            .map_err(|e| format!("INFO commandstats: {e}"))?;
        command_calls(&info)
    }

    /// Polls `ZCARD key` until it is 1: the idle waiter is in the queue.
    fn wait_queued(&mut self, key: &str) -> Result<(), String> {
        let begun = Instant::now();
        loop {
            let queued: u64 = redis::cmd("ZCARD")
                .arg(key)
                .query(self.conn()?)
                .map_err(|e| format!("ZCARD {key}: {e}"))?;
            if queued == 1 {
                return Ok(());
            }
            if begun.elapsed() > IO_TIMEOUT {
                return Err(format!(
                    "{key} holds {queued} waiters, not 1, after {IO_TIMEOUT:?}"
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `<program> --version`'s first line; an error that says how to install valgrind if it is
/// missing.
fn version(program: &str) -> Result<String, String> {
    let out = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "the engine-instructions cell runs redis-server under valgrind, and {program} \
                 could not be run ({e}): install it with `sudo apt-get install -y valgrind`"
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next() {
        Some(line) if out.status.success() => Ok(line.trim().to_string()),
        _ => Err(format!("{program} --version failed ({})", out.status)),
    }
}

/// The `Ir` total of a callgrind dump: its `summary:` line (what `callgrind_annotate` calls
/// the program totals: the cost since the counters were zeroed, all threads), else its
/// `totals:` line (the sum of the costs the file lists). The two differ by a few thousand
/// instructions at most.
fn dump_ir(text: &str) -> Result<u64, String> {
    let events = text
        .lines()
        .find_map(|line| line.strip_prefix("events:"))
        .ok_or("no events: line")?;
    let column = events
        .split_whitespace()
        .position(|event| event == "Ir")
        .ok_or_else(|| format!("no Ir among the events {events:?}"))?;
    let total = |prefix: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|costs| costs.split_whitespace().nth(column))
            .map(|n| n.parse::<u64>().map_err(|e| format!("{prefix} {n:?}: {e}")))
    };
    total("summary:")
        .or_else(|| total("totals:"))
        .ok_or("neither a summary: nor a totals: line")?
}

/// Calls per command from `INFO commandstats` (`cmdstat_<command>:calls=<n>,usec=..`).
fn command_calls(info: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some(entry) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let parsed = entry.split_once(':').and_then(|(command, fields)| {
            let n = fields
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?;
            Some((command, n.parse::<u64>().ok()?))
        });
        let (command, n) = parsed.ok_or_else(|| format!("INFO commandstats: bad line {line:?}"))?;
        calls.insert(command.to_string(), n);
    }
    Ok(calls)
}

/// One phase's line.
struct PhaseLine {
    phase: &'static str,
    /// The server's `redis_version`, and valgrind's version.
    server: (String, String),
    permits: Option<u32>,
    concurrency: usize,
    /// What the per-unit figures are per: `cycle`, `acquisition` or `second`.
    unit: &'static str,
    units: f64,
    counted: Counted,
    /// Instructions per unit as a multiple of the uncontended semaphore cycle's.
    per_uncontended: Option<f64>,
}

impl PhaseLine {
    fn calls(&self, commands: &[&str]) -> u64 {
        commands
            .iter()
            .filter_map(|command| self.counted.calls.get(*command))
            .sum()
    }

    fn evalsha(&self) -> u64 {
        self.calls(&["evalsha", "evalsha_ro"])
    }

    /// `EVAL` (a script sent whole: the hub's heartbeat, or the first call of a script the
    /// server did not have).
    fn eval(&self) -> u64 {
        self.calls(&["eval", "eval_ro"])
    }

    fn blpops(&self) -> u64 {
        self.calls(&["blpop"])
    }

    /// Every other command, the commands that scripts run included, but not the cell's own
    /// `INFO`.
    fn other(&self) -> u64 {
        let all: u64 = self.counted.calls.values().sum();
        all - self.evalsha() - self.eval() - self.blpops() - self.calls(&["info"])
    }

    fn per_unit(&self, n: u64) -> Option<f64> {
        (self.units > 0.0).then(|| n as f64 / self.units)
    }

    fn ir_per_unit(&self) -> Option<f64> {
        self.per_unit(self.counted.ir)
    }

    fn ir_per_script(&self) -> Option<f64> {
        let scripts = self.evalsha() + self.eval();
        (scripts > 0).then(|| self.counted.ir as f64 / scripts as f64)
    }

    fn units_text(&self) -> String {
        if self.unit == "second" {
            format!("{:.2}", self.units)
        } else {
            format!("{:.0}", self.units)
        }
    }
}

/// A whole number, or `null`.
fn opt_0(value: Option<f64>) -> String {
    value.map_or("null".to_string(), |v| format!("{v:.0}"))
}

impl Line for PhaseLine {
    fn json(&self) -> String {
        let calls: Vec<String> = (self.counted.calls.iter())
            .map(|(command, n)| format!("{command:?}:{n}"))
            .collect();
        format!(
            concat!(
                r#"{{"cell":"engine-instructions","phase":"{}","redis_version":"{}","#,
                r#""valgrind":"{}","hz":{},"permits":{},"concurrency":{},"seconds":{:.2},"#,
                r#""ir":{},"unit":"{}","units":{},"ir_per_unit":{},"evalsha":{},"eval":{},"#,
                r#""blpop":{},"other":{},"scripts_per_unit":{},"blpops_per_unit":{},"#,
                r#""ir_per_script":{},"per_uncontended":{},"calls":{{{}}}}}"#
            ),
            self.phase,
            self.server.0,
            self.server.1,
            SERVER_HZ,
            self.permits.map_or("null".to_string(), |p| p.to_string()),
            self.concurrency,
            self.counted.seconds,
            self.counted.ir,
            self.unit,
            self.units_text(),
            opt_0(self.ir_per_unit()),
            self.evalsha(),
            self.eval(),
            self.blpops(),
            self.other(),
            opt_f(self.per_unit(self.evalsha() + self.eval())),
            opt_f(self.per_unit(self.blpops())),
            opt_0(self.ir_per_script()),
            opt_f(self.per_uncontended),
            calls.join(","),
        )
    }

    fn row(&self) -> String {
        let dash = |text: String| {
            if text == "null" {
                "-".to_string()
            } else {
                text
            }
        };
        format!(
            "{:<12} {:>4} {:>4} {:>7.2} {:>11} {:>7} {:>13} {:>11} {:>7} {:>5} {:>6} {:>7} {:>6} {:>6} {:>10} {:>6}",
            self.phase,
            self.permits.map_or("-".to_string(), |p| p.to_string()),
            self.concurrency,
            self.counted.seconds,
            self.unit,
            self.units_text(),
            self.counted.ir,
            dash(opt_0(self.ir_per_unit())),
            self.evalsha(),
            self.eval(),
            self.blpops(),
            self.other(),
            dash(opt_f(self.per_unit(self.evalsha() + self.eval()))),
            dash(opt_f(self.per_unit(self.blpops()))),
            dash(opt_0(self.ir_per_script())),
            dash(opt_f(self.per_uncontended)),
        )
    }
}
