//! Chaos against one server: processes contend for a plain lock, a fair lock, a semaphore and a
//! read-write lock with short expiries and short deadlines, while the test pauses the server's
//! clients (`CLIENT PAUSE ... WRITE` / `ALL`), kills them (`CLIENT KILL TYPE normal`), freezes
//! the server (`DEBUG SLEEP`) and flushes its scripts, at random. Waits end at their deadlines
//! and at holders' expiries, often while the server postpones the waiter's `BLPOP`: the wait is
//! then ended with `CLIENT UNBLOCK <id> TIMEOUT`, which crashed Redis 6.2 and 7.0 (issue 24).
//! Calls may fail during the chaos; the server must survive, no child may panic or hang, and
//! no two holders of the plain lock may overlap.

use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{Error, Lock, RwLock, Semaphore};

use crate::support::{debug_command_args, field, ms, ChildProcess, RedisServer, Rng};

/// How long the chaos lasts: the crash it guards against came within a second or two.
const CHAOS: Duration = Duration::from_secs(6);

/// Every primitive's expiry: short, so that waits end at holders' expiries as well as at their
/// own deadlines.
const EXPIRE: Duration = Duration::from_millis(300);

/// How long after the chaos a child may take to finish its last call and exit. A call ends by
/// its deadline plus the I/O timeout (5 s) at the latest.
const EXIT_LIMIT: Duration = Duration::from_secs(40);

/// Threads per child process.
const THREADS: usize = 6;

/// The roles of the children, one process each: the plain lock twice, so that its holders
/// come from more than one process.
const ROLES: [&str; 5] = ["plain", "plain", "fair", "semaphore", "rwlock"];

/// The plain lock's name; its key is `lock:<name>`, holding the holder's id.
const PLAIN: &str = "chaos-plain";

/// Sets `KEYS[2]` (the mark) to the caller's id only while `KEYS[1]` (the lock) holds it: a
/// holder whose lock expired while its own thread was descheduled cannot mark a later holder's
/// term, so a mark overwritten during a term the holder kept to its release is an overlap.
const MARK: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                    redis.call('set', KEYS[2], ARGV[1]) return 1 end return 0";

/// Runs `THREADS` threads contending for primitive `args[0]` until `args[1]` ms have passed,
/// then prints `done` with the rounds, grants, errors and overlaps seen.
pub fn contend(client: &redis::Client, args: &[String]) {
    let kind = args[0].as_str();
    let until = Instant::now() + Duration::from_millis(args[1].parse().unwrap());
    let totals = thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|n| s.spawn(move || contend_until(client, kind, until, n as u64)))
            .collect();
        (threads.into_iter()).fold(Tally::default(), |sum, t| sum.add(t.join().unwrap()))
    });
    println!(
        "done kind={kind} rounds={} granted={} errors={} overlaps={}",
        totals.rounds, totals.granted, totals.errors, totals.overlaps
    );
}

#[derive(Default)]
struct Tally {
    rounds: u64,
    granted: u64,
    errors: u64,
    overlaps: u64,
}

impl Tally {
    fn add(self, other: Tally) -> Tally {
        Tally {
            rounds: self.rounds + other.rounds,
            granted: self.granted + other.granted,
            errors: self.errors + other.errors,
            overlaps: self.overlaps + other.overlaps,
        }
    }

    /// Counts one round's outcome: granted or not, or failed (allowed during chaos; the pause
    /// keeps a failing thread from spinning against a dead server).
    fn count(&mut self, outcome: Result<bool, Error>) {
        self.rounds += 1;
        match outcome {
            Ok(granted) => self.granted += u64::from(granted),
            Err(_) => {
                self.errors += 1;
                thread::sleep(ms(10));
            }
        }
    }
}

/// The handle a child's threads contend with, one per thread.
enum Handle {
    Plain(Lock),
    Fair(Lock),
    Semaphore(Semaphore),
    RwLock(RwLock),
}

impl Handle {
    fn new(client: &redis::Client, kind: &str) -> Handle {
        match kind {
            "plain" => Handle::Plain(Lock::builder(client, PLAIN).expire(EXPIRE).build().unwrap()),
            "fair" => Handle::Fair(
                (Lock::builder(client, "chaos-fair").fair(true))
                    .expire(EXPIRE)
                    .build()
                    .unwrap(),
            ),
            // Two permits among its threads: most waits end at a deadline or an expiry.
            "semaphore" => Handle::Semaphore(
                (Semaphore::builder(client, "chaos-semaphore", 2))
                    .expire(EXPIRE)
                    .build()
                    .unwrap(),
            ),
            "rwlock" => Handle::RwLock(
                (RwLock::builder(client, "chaos-rwlock"))
                    .expire(EXPIRE)
                    .build()
                    .unwrap(),
            ),
            other => panic!("unknown kind {other}"),
        }
    }
}

/// One thread's rounds: wait up to 10–200 ms, hold for 0–100 ms, release.
fn contend_until(client: &redis::Client, kind: &str, until: Instant, salt: u64) -> Tally {
    let mut rng = Rng::seeded(salt ^ u64::from(std::process::id()));
    let mut tally = Tally::default();
    let handle = Handle::new(client, kind);
    let mut marks = None;
    while Instant::now() < until {
        let deadline = ms(10 + rng.below(190));
        let hold = ms(rng.below(100));
        let outcome = match &handle {
            Handle::Plain(lock) => hold_plain(lock, deadline, hold, &mut marks, client, &mut tally),
            Handle::Fair(lock) => lock.try_lock_for(deadline).and_then(|guard| {
                let Some(guard) = guard else { return Ok(false) };
                thread::sleep(hold);
                guard.unlock().map(|()| true)
            }),
            Handle::Semaphore(semaphore) => {
                semaphore.try_acquire_for(deadline).and_then(|permit| {
                    let Some(permit) = permit else {
                        return Ok(false);
                    };
                    thread::sleep(hold);
                    permit.release().map(|()| true)
                })
            }
            Handle::RwLock(rwlock) if rng.below(2) == 0 => {
                rwlock.try_read_for(deadline).and_then(|guard| {
                    let Some(guard) = guard else { return Ok(false) };
                    thread::sleep(hold);
                    guard.unlock().map(|()| true)
                })
            }
            Handle::RwLock(rwlock) => rwlock.try_write_for(deadline).and_then(|guard| {
                let Some(guard) = guard else { return Ok(false) };
                thread::sleep(hold);
                guard.unlock().map(|()| true)
            }),
        };
        tally.count(outcome);
    }
    tally
}

/// A round of the plain lock that checks its term: the holder marks it, and finds its own mark
/// at the end unless someone else held the lock meanwhile. An overwritten mark counts as an
/// overlap only if the holder kept the lock to the end: not lost, and released by its own id.
fn hold_plain(
    lock: &Lock,
    deadline: Duration,
    hold: Duration,
    marks: &mut Option<redis::Connection>,
    client: &redis::Client,
    tally: &mut Tally,
) -> Result<bool, Error> {
    let Some(guard) = lock.try_lock_for(deadline)? else {
        return Ok(false);
    };
    // The test's own connection is killed by the chaos too: a term it cannot mark goes
    // unchecked, and the next one connects again.
    let conn = match marks {
        Some(conn) => Some(conn),
        None => {
            *marks = client.get_connection().ok();
            marks.as_mut()
        }
    };
    let key = format!("lock:{PLAIN}");
    let marked = conn.and_then(|conn| {
        (redis::cmd("EVAL")
            .arg(MARK)
            .arg(2)
            .arg(&key)
            .arg("chaos:mark"))
        .arg(lock.id())
        .query::<i64>(conn)
        .ok()
    }) == Some(1);
    thread::sleep(hold);
    let mark: Option<Option<String>> = marked
        .then(|| {
            let conn = marks.as_mut()?;
            redis::cmd("GET").arg("chaos:mark").query(conn).ok()
        })
        .flatten();
    let lost = guard.lost();
    let released = guard.unlock();
    let overwritten = mark.is_some_and(|mark| mark.as_deref() != Some(lock.id()));
    if overwritten && !lost && released.is_ok() {
        eprintln!("overlap: {} found its mark overwritten", lock.id());
        tally.overlaps += 1;
    }
    if marks.is_some() && !marked {
        // Most likely killed: connect again next time.
        *marks = None;
    }
    released.map(|()| true)
}

/// The chaos commands, one picked at random every 50–200 ms. Pauses and kills come twice as
/// often as the rest: a wait that starts while writes are paused (a killed waiter's new
/// connection blocks at once) is postponed, and its deadline then ends a postponed `BLPOP`.
const CHAOS_COMMANDS: [&[&str]; 7] = [
    &["CLIENT", "PAUSE", "300", "WRITE"],
    &["CLIENT", "PAUSE", "300", "WRITE"],
    &["CLIENT", "PAUSE", "300", "ALL"],
    &["CLIENT", "KILL", "TYPE", "normal"],
    &["CLIENT", "KILL", "TYPE", "normal"],
    &["DEBUG", "SLEEP", "0.2"],
    &["SCRIPT", "FLUSH"],
];

#[test]
fn the_server_survives_waits_ended_while_its_clients_are_paused_killed_and_frozen() {
    let server = RedisServer::start_with(&debug_command_args());
    let url = server.url();
    let run_ms = CHAOS.as_millis().to_string();
    let mut children: Vec<ChildProcess> = (ROLES.iter())
        .map(|role| ChildProcess::spawn("faults::chaos::contend", &url, &[role, &run_ms]))
        .collect();

    let mut rng = Rng::seeded(24);
    let mut conn = server.conn();
    let mut refused = Vec::new();
    let started = Instant::now();
    while started.elapsed() < CHAOS {
        thread::sleep(ms(50 + rng.below(150)));
        let words = CHAOS_COMMANDS[rng.below(CHAOS_COMMANDS.len() as u64) as usize];
        let mut cmd = redis::cmd(words[0]);
        cmd.arg(&words[1..]);
        if let Err(e) = cmd.query::<redis::Value>(&mut conn) {
            // A server that crashed refuses the next connection: the checks below say so.
            refused.push(e.to_string());
            match server.client().get_connection() {
                Ok(fresh) => conn = fresh,
                Err(_) => break,
            }
        }
    }

    let log = server.log();
    let crash = [
        "Guru Meditation",
        "crashed by signal",
        "BUG REPORT",
        "ASSERTION FAILED",
    ]
    .into_iter()
    .find(|sign| log.contains(sign));
    let answers = server
        .client()
        .get_connection()
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(
        server.running() && answers.is_ok() && crash.is_none(),
        "the server did not survive the chaos (running: {}, PING: {answers:?}, crash report: \
         {crash:?}; chaos commands that failed: {refused:?})\n--- its log ---\n{}",
        server.running(),
        log_excerpt(&log, crash)
    );
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut conn)
        .unwrap();

    let mut overlaps = 0;
    let mut granted = 0;
    let exit_by = Instant::now() + EXIT_LIMIT;
    for (role, child) in ROLES.iter().zip(&mut children) {
        let status = exit_by_then(child, exit_by).unwrap_or_else(|| {
            panic!("the {role} child still runs {EXIT_LIMIT:?} after the chaos")
        });
        assert!(status.success(), "the {role} child failed: {status}");
        let done = child.expect_line("done");
        println!("{done}");
        overlaps += field(&done, "overlaps").parse::<u64>().unwrap();
        granted += field(&done, "granted").parse::<u64>().unwrap();
    }
    assert_eq!(overlaps, 0, "holders of the plain lock overlapped");
    assert!(granted > 0, "nothing was granted during the chaos");
}

/// The child's exit status if it exits by `deadline`.
fn exit_by_then(child: &mut ChildProcess, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.child.try_wait().expect("poll the child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(ms(20));
    }
}

/// The part of a server log a failure message quotes: from a little before the crash report,
/// which names the command that crashed the server, or else the end.
fn log_excerpt(log: &str, crash: Option<&str>) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let from = crash
        .and_then(|sign| lines.iter().position(|line| line.contains(sign)))
        .map_or(lines.len().saturating_sub(40), |at| at.saturating_sub(5));
    lines[from..lines.len().min(from + 40)].join("\n")
}

#[test]
fn debug_is_allowed_on_the_test_server() {
    // The chaos needs DEBUG: Redis 7 and Valkey refuse it unless started to allow it, and
    // Redis 6.2 does not know that option.
    let server = RedisServer::start_with(&debug_command_args());
    let reply: String = redis::cmd("DEBUG")
        .arg(&["SLEEP", "0"][..])
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(reply, "OK");
}
