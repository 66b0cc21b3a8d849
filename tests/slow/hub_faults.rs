//! The hub (one waiting connection and one heartbeat per process for all its waiters of a
//! primitive, `src/driver/hub/`) under faults, against a real server and real processes: a
//! process with a thousand waiters `SIGKILL`ed, a process `SIGSTOP`ped past its lapse window
//! and resumed, and the shared waiting connection killed under hundreds of waiters. The other
//! process is this binary re-run as a child in the role `hub_faults::waiters`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{aio, Semaphore};

use crate::support::{client_list, eventually, field, ms, secs, ChildProcess, RedisServer};

/// The waiters' heartbeat interval (`heartbeat` on the builder): a process's waiters lapse
/// after a window of two without one (`Settings::lapse()`).
const HEARTBEAT_MS: u64 = 500;
const HEARTBEAT: Duration = Duration::from_millis(HEARTBEAT_MS);
const LAPSE: Duration = Duration::from_millis(2 * HEARTBEAT_MS);
/// How long any waiter here waits at most: far past what any test needs, so that a waiter
/// never served ends (and says so) instead of hanging its test.
const WAIT: Duration = Duration::from_secs(60);
/// How long a child may run before the test kills it: a hung child fails its test instead of
/// hanging it.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// The child's role: `args` are NAME PERMITS N HEARTBEAT_MS HOLD_MS. N tasks on one handle of
/// semaphore NAME (PERMITS permits, that heartbeat) wait up to [`WAIT`] each; the child prints
/// `queued` once all N are in the semaphore's queue. Each task then prints one line: `outcome
/// granted token=T holder=ID released=R` (ID the id the server's `held` hash holds token T
/// under when the task reads it, `none` if no id; it holds HOLD_MS then releases, R `ok` or
/// the error), `outcome timed-out`, or `outcome failed error=E`. Last, `done most=M`: the
/// most of its tasks that held at once.
pub fn waiters(client: &redis::Client, args: &[String]) {
    let [name, permits, n, heartbeat_ms, hold_ms] = args else {
        panic!("hub_faults::waiters takes NAME PERMITS N HEARTBEAT_MS HOLD_MS, not {args:?}");
    };
    let (permits, n): (u32, usize) = (permits.parse().unwrap(), n.parse().unwrap());
    let heartbeat = ms(heartbeat_ms.parse().unwrap());
    let hold = ms(hold_ms.parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let semaphore = aio::Semaphore::builder(client, name.as_str(), permits)
            .heartbeat(heartbeat)
            .build()
            .unwrap();
        let semaphore = Arc::new(semaphore);
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let holding = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (semaphore, mut conn) = (Arc::clone(&semaphore), conn.clone());
                let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
                let held_key = format!("semaphore:{{{name}}}:held");
                tokio::spawn(async move {
                    let permit = match semaphore.try_acquire_for(WAIT).await {
                        Ok(Some(permit)) => permit,
                        Ok(None) => return println!("outcome timed-out"),
                        Err(e) => return println!("outcome failed error={e}"),
                    };
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let token = permit.fencing_token().expect("a semaphore's fencing token");
                    let held: HashMap<String, String> = redis::cmd("HGETALL")
                        .arg(&held_key)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let holder = held
                        .iter()
                        .find(|(_, entry)| entry.split(':').nth(1) == Some(&token.to_string()))
                        .map_or("none", |(id, _)| id.as_str())
                        .to_string();
                    tokio::time::sleep(hold).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    let released = match permit.release().await {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("{e:?}").replace(' ', "_"),
                    };
                    println!("outcome granted token={token} holder={holder} released={released}");
                })
            })
            .collect();
        let mut conn = conn.clone();
        let queue = format!("semaphore:{{{name}}}:queue");
        let started = Instant::now();
        loop {
            let queued: usize = redis::cmd("ZCARD")
                .arg(&queue)
                .query_async(&mut conn)
                .await
                .unwrap();
            if queued >= n {
                break;
            }
            assert!(started.elapsed() < WAIT, "{queued} of {n} waiters queued");
            tokio::time::sleep(ms(10)).await;
        }
        println!("queued");
        for task in tasks {
            task.await.unwrap();
        }
        println!("done most={}", most.load(Ordering::SeqCst));
    });
}

/// The child in role `hub_faults::waiters`, and a watchdog that kills it (`SIGKILL`, which
/// ends a stopped process too) should it still run [`CHILD_LIMIT`] after it started. Both end
/// with it: the watchdog first, so that it never signals a pid reaped and reused.
struct Waiters {
    watchdog: Watchdog,
    child: ChildProcess,
}

impl Waiters {
    fn spawn(server: &RedisServer, name: &str, permits: u32, n: usize, hold: Duration) -> Self {
        let args = [
            name.to_string(),
            permits.to_string(),
            n.to_string(),
            HEARTBEAT.as_millis().to_string(),
            hold.as_millis().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = ChildProcess::spawn("hub_faults::waiters", &server.url(), &args);
        let watchdog = Watchdog::new(child.pid(), CHILD_LIMIT);
        Waiters { watchdog, child }
    }
}

struct Watchdog {
    cancel: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Watchdog {
    fn new(pid: u32, limit: Duration) -> Watchdog {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            if cancelled.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
                eprintln!("the child {pid} still runs after {limit:?}: killed");
                // SAFETY: kill(2) on a pid the test started and has not reaped yet.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        Watchdog {
            cancel: Some(cancel),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.cancel.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`).
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's name, which is in parentheses.
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    state == Some(Some('T'))
}

/// The members of ZSET `key`.
fn members(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

fn zcard(conn: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap()
}

/// The process id at the end of a waiter's id (`<id>@<16 hex>`).
fn process_of(waiter: &str) -> &str {
    waiter
        .rsplit_once('@')
        .map_or(waiter, |(_, process)| process)
}

/// The one process whose waiters are in `queue`.
fn only_process(queue: &[String]) -> String {
    let processes: HashSet<&str> = queue.iter().map(|id| process_of(id)).collect();
    assert_eq!(processes.len(), 1, "one process's waiters: {processes:?}");
    processes.into_iter().next().unwrap().to_string()
}

/// A child process waits with 1,000 tasks on a semaphore the test holds, the test's own
/// waiter behind them; the child is `SIGKILL`ed and the permit released. The dead waiters
/// lapse together when their process's one heartbeat does, and the test's waiter is served
/// within the lapse window (and a generous margin), with none of them left in the queue.
#[test]
fn a_sigkilled_process_with_a_thousand_waiters_lapses_at_once_and_the_next_is_served() {
    const WAITERS: usize = 1000;
    let server = RedisServer::start();
    let client = server.client();
    let mut conn = server.conn();
    let name = "hub-killed";
    let queue = format!("semaphore:{{{name}}}:queue");
    let holder = Semaphore::new(&client, name, 1).unwrap();
    let held = holder.acquire().unwrap();
    let mut child = Waiters::spawn(&server, name, 1, WAITERS, Duration::ZERO);
    child.child.expect_line("queued");
    let dead = only_process(&members(&mut conn, &queue));
    assert_eq!(zcard(&mut conn, &queue), WAITERS);

    let waiter = Semaphore::builder(&client, name, 1)
        .heartbeat(HEARTBEAT)
        .build()
        .unwrap();
    let next = thread::spawn(move || {
        let permit = waiter.try_acquire_for(WAIT).unwrap();
        let served = Instant::now();
        permit
            .expect("the next waiter is served")
            .release()
            .unwrap();
        served
    });
    eventually(secs(20), "the test's waiter to queue", || {
        zcard(&mut conn, &queue) == WAITERS + 1
    });
    child.child.signal("KILL");
    child.child.child.wait().unwrap();
    let killed = Instant::now();
    held.release().unwrap();

    let served = next.join().unwrap();
    let after = served.saturating_duration_since(killed);
    eprintln!("served {after:?} after the kill");
    assert!(
        after < LAPSE + secs(5),
        "the next waiter was served {after:?} after the kill (lapse window {LAPSE:?})"
    );
    let left: Vec<String> = members(&mut conn, &queue)
        .into_iter()
        .filter(|id| process_of(id) == dead)
        .collect();
    assert!(left.is_empty(), "{} dead waiters queued", left.len());
    let wants: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("semaphore:{{{name}}}:wants"))
        .query(&mut conn)
        .unwrap();
    assert!(wants.is_empty(), "{} waiters' wants left", wants.len());
    let beat: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("semaphore:{{{name}}}:beats"))
        .arg(&dead)
        .query(&mut conn)
        .unwrap();
    assert_eq!(beat, None, "the dead process's heartbeat is left");
}

/// What [`Monitor`] saw of a semaphore's holders.
#[derive(Default)]
struct Seen {
    /// The most units its live holders used at one read.
    most_used: u64,
    /// Each fencing token seen held, and the id that held it.
    tokens: HashMap<u64, String>,
    /// Reads that broke a rule: more units used than permits, a token held by two ids.
    clashes: Vec<String>,
    reads: usize,
}

/// A thread that reads semaphore `name`'s holders (`inspect::queue`, one script call: one
/// moment) over and over until dropped.
struct Monitor {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<Seen>>,
}

impl Monitor {
    fn start(client: redis::Client, name: &str, permits: u64) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let (name, stopped) = (name.to_string(), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let mut seen = Seen::default();
            while !stopped.load(Ordering::SeqCst) {
                let state = inspect::queue(&client, Primitive::Semaphore, &name, secs(5)).unwrap();
                seen.reads += 1;
                let units: u64 = state.holders.iter().map(|h| h.units).sum();
                seen.most_used = seen.most_used.max(units).max(state.used);
                if units.max(state.used) > permits {
                    seen.clashes.push(format!("{permits} permits: {state:?}"));
                }
                for holder in &state.holders {
                    let id = seen.tokens.entry(holder.token).or_insert(holder.id.clone());
                    if *id != holder.id {
                        seen.clashes.push(format!(
                            "token {} held by {id} and {}",
                            holder.token, holder.id
                        ));
                    }
                }
                thread::sleep(ms(2));
            }
            seen
        });
        Monitor {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A grant a child's task held: its token, the id the server's `held` gave that token when
/// the task looked (`none`: no id), and how its release went (`ok`, or the error).
#[derive(Debug)]
struct Grant {
    token: u64,
    holder: String,
    released: String,
}

/// What a child's task said: `Ok` for a grant it held, `Err(line)` for anything else.
fn outcome(line: &str) -> Result<Grant, String> {
    if !line.starts_with("outcome granted ") {
        return Err(line.to_string());
    }
    Ok(Grant {
        token: field(line, "token").parse().unwrap(),
        holder: field(line, "holder").to_string(),
        released: field(line, "released").to_string(),
    })
}

/// A child process's 20 waiters queue on a semaphore of 2 permits the test holds, the test's
/// two waiters behind them; the child is `SIGSTOP`ped, and the test releases at once, so the
/// permits are granted to the stopped process's first waiters; it stays stopped until its
/// heartbeat lapses at the server. The grants lapse with it, and the test's waiters are
/// served while it is stopped. Resumed, its waiters learn of the lapse and join again: each
/// is served once, with a token granted after it rejoined (none is one granted before its
/// lapse), under an id of its process that the server's holders gave that token; the holders
/// never exceed the permits.
#[test]
fn a_sigstopped_process_resumed_after_its_lapse_holds_only_permits_granted_after_it_rejoined() {
    const PERMITS: u32 = 2;
    const WAITERS: usize = 20;
    let server = RedisServer::start();
    let client = server.client();
    let mut conn = server.conn();
    let name = "hub-stopped";
    let key = |part: &str| format!("semaphore:{{{name}}}:{part}");
    let monitor = Monitor::start(server.client(), name, PERMITS.into());
    let holder = Semaphore::new(&client, name, PERMITS).unwrap();
    let held = holder.acquire_many(PERMITS).unwrap();
    let mut child = Waiters::spawn(&server, name, PERMITS, WAITERS, ms(20));
    child.child.expect_line("queued");
    let stopped_process = only_process(&members(&mut conn, &key("queue")));

    let ours = Arc::new(
        Semaphore::builder(&client, name, PERMITS)
            .heartbeat(HEARTBEAT)
            .build()
            .unwrap(),
    );
    let (served, ours_served) = mpsc::channel();
    let our_waiters: Vec<_> = (0..PERMITS)
        .map(|_| {
            let (ours, served) = (Arc::clone(&ours), served.clone());
            thread::spawn(move || {
                let permit = ours.try_acquire_for(WAIT).unwrap().expect("served");
                let token = permit.fencing_token().unwrap();
                served.send(token).unwrap();
                permit.release().unwrap();
            })
        })
        .collect();
    eventually(secs(20), "the test's waiters to queue", || {
        zcard(&mut conn, &key("queue")) == WAITERS + PERMITS as usize
    });
    child.child.signal("STOP");
    eventually(secs(10), "the child to stop", || stopped(child.child.pid()));
    // Released while the stopped process's heartbeat still lasts: the permits are granted to
    // its first waiters and pushed to its inbox, where its `BLPOP`, still blocked at the
    // server, may pop one into a socket the process does not read. Those grants lapse with
    // it and go to the test's waiters; resumed, it may read one and must not hold it.
    held.release().unwrap();
    let held_entries: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(key("held"))
        .query(&mut conn)
        .unwrap();
    let pushed: Vec<&String> = (held_entries.keys())
        .filter(|id| process_of(id) == stopped_process)
        .collect();
    eprintln!("granted to the stopped process before its lapse: {pushed:?}");
    eventually(secs(20), "the stopped process's heartbeat to lapse", || {
        let ((secs, micros), beat): ((u64, u64), Option<f64>) = redis::pipe()
            .atomic()
            .cmd("TIME")
            .cmd("ZSCORE")
            .arg(key("beats"))
            .arg(&stopped_process)
            .query(&mut conn)
            .unwrap();
        beat.is_none_or(|beat| beat <= (secs * 1000 + micros / 1000) as f64)
    });

    let our_tokens: Vec<u64> = (0..PERMITS)
        .map(|_| {
            ours_served
                .recv_timeout(secs(20))
                .expect("the test's waiters are served while the child is stopped")
        })
        .collect();
    assert!(
        stopped(child.child.pid()),
        "the child was stopped meanwhile"
    );
    for waiter in our_waiters {
        waiter.join().unwrap();
    }
    let fence_at_resume: u64 = redis::cmd("GET")
        .arg(key("fence"))
        .query(&mut conn)
        .unwrap();
    child.child.signal("CONT");

    let lines: Vec<String> = (0..WAITERS)
        .map(|_| child.child.expect_line("outcome "))
        .collect();
    let most: usize = field(&child.child.expect_line("done "), "most")
        .parse()
        .unwrap();
    let Waiters { watchdog, child } = child;
    drop(watchdog);
    child.wait_success();
    let seen = monitor.finish();
    eprintln!(
        "{} reads of the holders; the child's outcomes: {lines:#?}",
        seen.reads
    );

    let (granted, failed): (Vec<_>, Vec<_>) =
        lines.iter().map(|l| outcome(l)).partition(Result::is_ok);
    // A waiter may fail with an error, cleanly; none may wait out its minute.
    for line in failed.into_iter().map(Result::unwrap_err) {
        assert!(line.starts_with("outcome failed error="), "{line}");
    }
    let mut tokens: HashSet<u64> = our_tokens.iter().copied().collect();
    let mut ids = HashSet::new();
    for Grant {
        token,
        holder,
        released,
    } in granted.into_iter().map(Result::unwrap)
    {
        assert!(
            token > fence_at_resume,
            "a resumed waiter held token {token}, granted before its process rejoined (the \
             last grant then: {fence_at_resume}); the server's holder of it: {holder}; its \
             release: {released}"
        );
        assert!(tokens.insert(token), "token {token} granted twice");
        assert_eq!(
            process_of(&holder),
            stopped_process,
            "token {token} held by {holder}"
        );
        if let Some(id) = seen.tokens.get(&token) {
            assert_eq!(*id, holder, "the server's holder of token {token}");
        }
        assert!(ids.insert(holder), "an id held twice");
        assert_eq!(released, "ok", "the release of token {token}");
    }
    assert!(seen.clashes.is_empty(), "{:#?}", seen.clashes);
    assert!(seen.most_used <= PERMITS.into(), "{} used", seen.most_used);
    assert!(
        most <= PERMITS as usize,
        "{most} of the child's waiters held at once"
    );
    assert!(our_tokens.iter().all(|t| *t <= fence_at_resume));
    assert_eq!(zcard(&mut conn, &key("queue")), 0);
    assert_eq!(zcard(&mut conn, &key("holders")), 0);
}

/// Tasks of this process waiting on a semaphore of one permit: each takes a permit once,
/// notes its fencing token, and gives it back.
struct Contenders {
    tasks: Vec<tokio::task::JoinHandle<Option<u64>>>,
    /// The most tasks that held at once.
    most: Arc<AtomicUsize>,
}

impl Contenders {
    /// `n` tasks on `semaphore`, which the test holds, returned once all are in its queue.
    async fn queued(server: &RedisServer, semaphore: &Arc<aio::Semaphore>, n: usize) -> Self {
        let holding = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks = (0..n)
            .map(|_| {
                let semaphore = Arc::clone(semaphore);
                let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
                tokio::spawn(async move {
                    let permit = semaphore.try_acquire_for(WAIT).await.unwrap()?;
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let token = permit.fencing_token();
                    tokio::task::yield_now().await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                    token
                })
            })
            .collect();
        let queue = format!("semaphore:{{{}}}:queue", semaphore.name());
        let mut conn = server.conn();
        let started = Instant::now();
        while zcard(&mut conn, &queue) < n {
            assert!(started.elapsed() < secs(30), "the tasks did not all queue");
            tokio::time::sleep(ms(10)).await;
        }
        Contenders { tasks, most }
    }

    /// Checks that every task was served within [`WAIT`] and a half, one at a time, each with
    /// a token of its own.
    async fn all_served_once(self) {
        let n = self.tasks.len();
        let until = tokio::time::Instant::now() + WAIT * 3 / 2;
        let mut tokens = HashSet::new();
        for task in self.tasks {
            let token = tokio::time::timeout_at(until, task)
                .await
                .expect("a task still waits")
                .unwrap()
                .expect("a task was never served");
            assert!(tokens.insert(token), "token {token} served twice");
        }
        assert_eq!(tokens.len(), n);
        assert_eq!(self.most.load(Ordering::SeqCst), 1, "tasks held at once");
    }
}

/// The `CLIENT LIST` lines of the connections blocked in `BLPOP` (the hubs' waiting
/// connections; no other client here blocks).
fn blpops(server: &RedisServer) -> Vec<String> {
    client_list(server)
        .into_iter()
        .filter(|line| line.split(' ').any(|f| f == "cmd=blpop"))
        .collect()
}

/// Checks that the process's waiters block on one connection, and kills it (`CLIENT KILL`).
fn kill_the_one_waiting_connection(server: &RedisServer) {
    let blpops = blpops(server);
    assert_eq!(blpops.len(), 1, "one waiting connection: {blpops:#?}");
    let killed: u64 = redis::cmd("CLIENT")
        .arg(&["KILL", "ID", field(&blpops[0], "id")])
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(killed, 1, "the waiting connection was killed");
}

/// 500 tasks wait on a semaphore of one permit that the test holds; the process's one waiting
/// connection (the client in `BLPOP`) is killed with `CLIENT KILL` and the permit released.
/// Every task is served, each with a token of its own, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_shared_waiting_connection_still_serves_500_waiters_once_each() {
    let server = RedisServer::start();
    let name = "hub-connection-killed";
    let semaphore = Arc::new(aio::Semaphore::new(&server.client(), name, 1).unwrap());
    let held = semaphore.acquire().await.unwrap();
    let contenders = Contenders::queued(&server, &semaphore, 500).await;
    kill_the_one_waiting_connection(&server);
    let released = Instant::now();
    held.release().await.unwrap();
    contenders.all_served_once().await;
    eprintln!("500 served in {:?}", released.elapsed());
    let queue = format!("semaphore:{{{name}}}:queue");
    assert_eq!(zcard(&mut server.conn(), &queue), 0);
}

/// As above, but the waiting connection is killed again whenever it is back (looked for every
/// 2 ms) while 200 tasks are served one by one: each kill makes every waiter ask again, and
/// those asks, the reconnections and the grants pushed meanwhile race the hand-offs. Every
/// task is still served, each with a token of its own, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_waiting_connection_over_and_over_still_serves_each_waiter_once() {
    let server = RedisServer::start();
    let name = "hub-connection-killed-again";
    let semaphore = Arc::new(aio::Semaphore::new(&server.client(), name, 1).unwrap());
    let held = semaphore.acquire().await.unwrap();
    let contenders = Contenders::queued(&server, &semaphore, 200).await;
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let (stop, mut conn) = (Arc::clone(&stop), server.conn());
        thread::spawn(move || {
            let mut kills = 0;
            while !stop.load(Ordering::SeqCst) {
                let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
                let waiting = list
                    .lines()
                    .filter(|l| l.split(' ').any(|f| f == "cmd=blpop"));
                for line in waiting {
                    // 0 when it is gone already.
                    let killed: u64 = redis::cmd("CLIENT")
                        .arg(&["KILL", "ID", field(line, "id")])
                        .query(&mut conn)
                        .unwrap_or(0);
                    kills += killed;
                }
                thread::sleep(ms(2));
            }
            kills
        })
    };
    let released = Instant::now();
    held.release().await.unwrap();
    contenders.all_served_once().await;
    stop.store(true, Ordering::SeqCst);
    let kills = killer.join().unwrap();
    let fence: u64 = redis::cmd("GET")
        .arg(format!("semaphore:{{{name}}}:fence"))
        .query(&mut server.conn())
        .unwrap();
    eprintln!(
        "200 served in {:?}, {kills} waiting connections killed meanwhile, {fence} grants",
        released.elapsed()
    );
    assert!(kills > 0, "no waiting connection was killed");
}

/// 200 threads wait on a plain lock (python-redis-lock's keys, with fencing) that the test
/// holds, each taking it in turn for a moment; their process's one waiting connection is
/// killed with `CLIENT KILL` and the lock released. A signal popped by the killed `BLPOP` is
/// lost with it, so every waiter tries once: each is still served, once, and never two at a
/// time (the fencing tokens are 201 distinct ones).
#[test]
fn killing_the_waiting_connection_still_serves_200_plain_lock_waiters_once_each() {
    const WAITERS: usize = 200;
    let server = RedisServer::start();
    let client = server.client();
    let lock = |client: &redis::Client| {
        redis_blpop_lock::Lock::builder(client, "plain-connection-killed")
            .fencing(true)
            .build()
            .unwrap()
    };
    let holder = lock(&client);
    let held = holder.lock().unwrap();
    let since = crate::support::tries_run(&server);
    let holding = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (lock, holding) = (lock(&client), Arc::clone(&holding));
            thread::spawn(move || {
                let guard = lock.try_lock_for(WAIT).unwrap().expect("never served");
                let at_once = holding.fetch_add(1, Ordering::SeqCst) + 1;
                thread::sleep(ms(1));
                holding.fetch_sub(1, Ordering::SeqCst);
                let token = guard.fencing_token().unwrap();
                guard.unlock().unwrap();
                (token, at_once)
            })
        })
        .collect();
    server.until_in_line(1, since, secs(60), || false);
    kill_the_one_waiting_connection(&server);
    let first = held.fencing_token().unwrap();
    held.unlock().unwrap();
    let served: Vec<(u64, usize)> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    let tokens: HashSet<u64> = served.iter().map(|(token, _)| *token).collect();
    assert_eq!(tokens.len(), WAITERS, "a token given twice");
    assert!(!tokens.contains(&first));
    let most = served.iter().map(|(_, at_once)| *at_once).max().unwrap();
    assert_eq!(most, 1, "two waiters held the lock at once");
}
