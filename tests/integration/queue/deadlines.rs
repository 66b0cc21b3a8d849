//! Calls (the queue's: the semaphore, the fair lock, the read-write lock's read and write, the
//! election; and the plain lock with them, in both APIs) against a server that is away end by
//! their documented bounds, however many share a client: a frozen server (SIGSTOP) ends an
//! untimed acquire with an error by the I/O timeout and the grace, and a timed one by its
//! deadline and the grace; a refused port is `Error::Redis` at once; a server killed under
//! waiters in line ends every wait with an error; async calls sharing a client with blocking
//! ones keep their own bounds.

use std::future::Future;
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Election, Error, Lock, RwLock, Semaphore};

use crate::support::{free_port, ms, secs, RedisServer};

/// The I/O timeout of every handle here.
const IO: Duration = Duration::from_secs(1);

/// What a loaded machine may add to a documented bound when many calls start at once: the
/// scheduling of their threads and tasks, well under the I/O timeout an overrun costs.
const SLACK: Duration = Duration::from_millis(250);

/// The grace a timed wait has past its deadline (the crate's, for a 1 s I/O timeout).
const GRACE: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Semaphore,
    FairLock,
    Read,
    Write,
    /// A leader election's campaign.
    Campaign,
    /// The plain lock, for the calls that share a client with the queue's.
    Plain,
}

/// The queue's primitives, whose waiters join a line.
const KINDS: [Kind; 5] = [
    Kind::Semaphore,
    Kind::FairLock,
    Kind::Read,
    Kind::Write,
    Kind::Campaign,
];

/// Every primitive's acquire.
const EVERY_KIND: [Kind; 6] = [
    Kind::Semaphore,
    Kind::FairLock,
    Kind::Read,
    Kind::Write,
    Kind::Campaign,
    Kind::Plain,
];

impl Kind {
    /// The primitive whose line a waiter of this kind joins.
    fn primitive(self) -> Primitive {
        match self {
            Kind::Semaphore => Primitive::Semaphore,
            Kind::FairLock => Primitive::FairLock,
            Kind::Read | Kind::Write => Primitive::RwLock,
            Kind::Campaign => Primitive::Election,
            Kind::Plain => unreachable!("the plain lock has no line"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Call {
    /// `acquire()`, `lock()`, `read()`, `write()`.
    Untimed,
    /// `try_acquire_for`, `try_lock_for`, `try_read_for`, `try_write_for`.
    For(Duration),
}

/// An untimed call and a timed one, of each kind.
fn untimed_and_timed() -> Vec<(Kind, Call)> {
    let calls = [Call::Untimed, Call::For(ms(500))];
    EVERY_KIND
        .iter()
        .flat_map(|&kind| calls.map(|call| (kind, call)))
        .collect()
}

/// The bound the crate documents for a call against a server that does not answer: an
/// untimed one, the I/O timeout and the grace; a timed one, its deadline and the grace.
fn documented(call: Call) -> Duration {
    match call {
        Call::Untimed => IO + GRACE,
        Call::For(timeout) => timeout + GRACE,
    }
}

/// The longest a call may take here: its documented bound, with the slack.
fn bound(call: Call) -> Duration {
    documented(call) + SLACK
}

/// Makes `call` on a new blocking handle of `kind` named `name`, and runs `held` while it
/// holds what it was granted: whether it was granted.
fn take(
    client: &redis::Client,
    kind: Kind,
    name: &str,
    call: Call,
    held: impl FnOnce(),
) -> Result<bool, Error> {
    Ok(match kind {
        Kind::Semaphore => {
            let handle = Semaphore::builder(client, name, 1).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.acquire()?),
                Call::For(d) => handle.try_acquire_for(d)?,
            };
            holding(guard, held)
        }
        Kind::FairLock => {
            let handle = Lock::builder(client, name)
                .fair(true)
                .io_timeout(IO)
                .build()?;
            let guard = match call {
                Call::Untimed => Some(handle.lock()?),
                Call::For(d) => handle.try_lock_for(d)?,
            };
            holding(guard, held)
        }
        Kind::Read => {
            let handle = RwLock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.read()?),
                Call::For(d) => handle.try_read_for(d)?,
            };
            holding(guard, held)
        }
        Kind::Write => {
            let handle = RwLock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.write()?),
                Call::For(d) => handle.try_write_for(d)?,
            };
            holding(guard, held)
        }
        Kind::Campaign => {
            let handle = Election::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.campaign("c")?),
                Call::For(d) => handle.try_campaign_for("c", d)?,
            };
            holding(guard, held)
        }
        Kind::Plain => {
            let handle = Lock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.lock()?),
                Call::For(d) => handle.try_lock_for(d)?,
            };
            holding(guard, held)
        }
    })
}

/// Runs `held` while `guard` (if granted) is alive; whether it was granted.
fn holding<G>(guard: Option<G>, held: impl FnOnce()) -> bool {
    let granted = guard.is_some();
    if granted {
        held();
    }
    drop(guard);
    granted
}

/// [`take`] on a new async handle.
async fn take_async(
    client: &redis::Client,
    kind: Kind,
    name: &str,
    call: Call,
    held: impl Future<Output = ()>,
) -> Result<bool, Error> {
    use redis_blpop_lock::aio;
    Ok(match kind {
        Kind::Semaphore => {
            let handle = aio::Semaphore::builder(client, name, 1)
                .io_timeout(IO)
                .build()?;
            let guard = match call {
                Call::Untimed => Some(handle.acquire().await?),
                Call::For(d) => handle.try_acquire_for(d).await?,
            };
            holding_async(guard, held).await
        }
        Kind::FairLock => {
            let handle = aio::Lock::builder(client, name)
                .fair(true)
                .io_timeout(IO)
                .build()?;
            let guard = match call {
                Call::Untimed => Some(handle.lock().await?),
                Call::For(d) => handle.try_lock_for(d).await?,
            };
            holding_async(guard, held).await
        }
        Kind::Read => {
            let handle = aio::RwLock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.read().await?),
                Call::For(d) => handle.try_read_for(d).await?,
            };
            holding_async(guard, held).await
        }
        Kind::Write => {
            let handle = aio::RwLock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.write().await?),
                Call::For(d) => handle.try_write_for(d).await?,
            };
            holding_async(guard, held).await
        }
        Kind::Campaign => {
            let handle = aio::Election::builder(client, name)
                .io_timeout(IO)
                .build()?;
            let guard = match call {
                Call::Untimed => Some(handle.campaign("c").await?),
                Call::For(d) => handle.try_campaign_for("c", d).await?,
            };
            holding_async(guard, held).await
        }
        Kind::Plain => {
            let handle = aio::Lock::builder(client, name).io_timeout(IO).build()?;
            let guard = match call {
                Call::Untimed => Some(handle.lock().await?),
                Call::For(d) => handle.try_lock_for(d).await?,
            };
            holding_async(guard, held).await
        }
    })
}

async fn holding_async<G>(guard: Option<G>, held: impl Future<Output = ()>) -> bool {
    let granted = guard.is_some();
    if granted {
        held.await;
    }
    drop(guard);
    granted
}

/// A call, its outcome, and when it ended.
type Ended = (Kind, Call, Result<bool, Error>, Instant);

/// Long past every bound here: a call still waiting then is taken never to end.
const NEVER: Duration = Duration::from_secs(10);

/// Starts every blocking call of `calls` at once, each on a thread of its own and on the name
/// `name(i, kind)`, and collects their outcomes; fails if one does not end.
fn run_blocking(
    client: &redis::Client,
    calls: &[(Kind, Call)],
    name: impl Fn(usize, Kind) -> String,
) -> Vec<Ended> {
    let (done, ended) = mpsc::channel();
    for (i, &(kind, call)) in calls.iter().enumerate() {
        let (client, done, name) = (client.clone(), done.clone(), name(i, kind));
        // Not scoped: a call that never ends must not hold the test up, only fail it.
        thread::spawn(move || {
            let outcome = take(&client, kind, &name, call, || {});
            let _ = done.send((kind, call, outcome, Instant::now()));
        });
    }
    (0..calls.len())
        .map(|_| match ended.recv_timeout(NEVER) {
            Ok(ended) => ended,
            Err(_) => panic!("a call still waits after {NEVER:?}"),
        })
        .collect()
}

/// [`run_blocking`] for async calls, each on a task of its own.
async fn run_async(
    client: &redis::Client,
    calls: &[(Kind, Call)],
    name: impl Fn(usize, Kind) -> String,
) -> Vec<Ended> {
    let (done, mut ended) = tokio::sync::mpsc::unbounded_channel();
    for (i, &(kind, call)) in calls.iter().enumerate() {
        let (client, done, name) = (client.clone(), done.clone(), name(i, kind));
        tokio::spawn(async move {
            let outcome = take_async(&client, kind, &name, call, async {}).await;
            let _ = done.send((kind, call, outcome, Instant::now()));
        });
    }
    let mut all = Vec::new();
    for _ in calls {
        match tokio::time::timeout(NEVER, ended.recv()).await {
            Ok(Some(one)) => all.push(one),
            _ => panic!("a call still waits after {NEVER:?}"),
        }
    }
    all
}

/// A name of its own for each call.
fn own(i: usize, _: Kind) -> String {
    format!("q{i}")
}

/// Every call ended with an error (`Error::Redis` if `redis`), each within `within(call)`
/// of `since`.
fn assert_errors_within(
    ended: &[Ended],
    redis: bool,
    since: Instant,
    within: impl Fn(Call) -> Duration,
) {
    for (kind, call, outcome, at) in ended {
        let error_ok = match outcome {
            Err(Error::Redis(_)) => true,
            Err(_) => !redis,
            Ok(_) => false,
        };
        assert!(error_ok, "{kind:?} {call:?}: {outcome:?}");
        let (took, limit) = (at.duration_since(since), within(*call));
        assert!(
            took < limit,
            "{kind:?} {call:?} took {took:?} (limit {limit:?})"
        );
    }
}

/// A server frozen (SIGSTOP) until dropped, also when the test fails.
struct Frozen<'a>(&'a RedisServer);

impl<'a> Frozen<'a> {
    fn new(server: &'a RedisServer) -> Frozen<'a> {
        server.pause();
        Frozen(server)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// A client aimed at a loopback port where nothing listens.
fn refused_client() -> redis::Client {
    redis::Client::open(format!("redis://127.0.0.1:{}/", free_port())).unwrap()
}

#[test]
fn a_frozen_server_ends_every_acquire_with_an_error_by_its_bound() {
    let server = RedisServer::start();
    let _frozen = Frozen::new(&server);
    let since = Instant::now();
    let ended = run_blocking(&server.client(), &untimed_and_timed(), own);
    assert_errors_within(&ended, false, since, bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_ends_every_async_acquire_with_an_error_by_its_bound() {
    let server = RedisServer::start();
    let _frozen = Frozen::new(&server);
    let since = Instant::now();
    let ended = run_async(&server.client(), &untimed_and_timed(), own).await;
    assert_errors_within(&ended, false, since, bound);
}

#[test]
fn a_refused_port_ends_every_acquire_with_a_redis_error_at_once() {
    let since = Instant::now();
    let ended = run_blocking(&refused_client(), &untimed_and_timed(), own);
    // Before the I/O timeout: not ridden out as a server that is away.
    assert_errors_within(&ended, true, since, |_| IO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_port_ends_every_async_acquire_with_a_redis_error_at_once() {
    let since = Instant::now();
    let ended = run_async(&refused_client(), &untimed_and_timed(), own).await;
    assert_errors_within(&ended, true, since, |_| IO);
}

/// The holder that keeps `kind`'s waiters in line: a writer keeps readers out.
fn holder_of(kind: Kind) -> Kind {
    match kind {
        Kind::Read => Kind::Write,
        other => other,
    }
}

/// Waiters in line behind a holder of each kind's name (`name`): an untimed one and one that
/// waits 3 s, long past the I/O timeout.
fn queued_waiters() -> Vec<(Kind, Call)> {
    let calls = [Call::Untimed, Call::For(secs(3))];
    KINDS
        .iter()
        .flat_map(|&kind| calls.map(|call| (kind, call)))
        .collect()
}

/// Each kind's one name: its waiters queue behind its holder.
fn name(_: usize, kind: Kind) -> String {
    format!("{kind:?}")
}

/// Waits until each of `waiters` is in the line of its kind's name ([`name`]), as the server
/// shows it: the waiters of one process share one blocked client, which cannot tell.
fn until_all_queued(server: &RedisServer, waiters: &[(Kind, Call)]) {
    for kind in KINDS {
        let n = waiters.iter().filter(|(k, _)| *k == kind).count() as u64;
        server.until_queued(kind.primitive(), &name(0, kind), n, secs(10), || false);
    }
}

#[test]
fn a_server_killed_under_queued_waiters_ends_every_wait_with_an_error() {
    let mut server = RedisServer::start();
    let client = server.client();
    let waiters = queued_waiters();
    // The holders and the test meet once all hold, and again after the kill.
    let (holding, killed) = (Barrier::new(KINDS.len() + 1), Barrier::new(KINDS.len() + 1));
    let (ended, kill) = thread::scope(|s| {
        for kind in KINDS {
            let (client, holding, killed) = (&client, &holding, &killed);
            s.spawn(move || {
                let held = take(
                    client,
                    holder_of(kind),
                    &name(0, kind),
                    Call::Untimed,
                    || {
                        holding.wait();
                        killed.wait();
                    },
                );
                assert!(held.unwrap(), "{kind:?}'s holder was not granted");
            });
        }
        holding.wait();
        let killing = s.spawn(|| {
            // The holders wait for the kill: a wait that fails still kills and meets them, so
            // that the failure ends the test rather than hanging it.
            let queued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                until_all_queued(&server, &waiters);
            }));
            server.kill();
            let kill = Instant::now();
            killed.wait();
            if let Err(failure) = queued {
                std::panic::resume_unwind(failure);
            }
            kill
        });
        let ended = run_blocking(&client, &waiters, name);
        (ended, killing.join().unwrap())
    });
    assert_errors_within(&ended, false, kill, bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_under_queued_async_waiters_ends_every_wait_with_an_error() {
    let server = std::sync::Mutex::new(RedisServer::start());
    let client = server.lock().unwrap().client();
    let waiters = queued_waiters();
    let barrier = || Arc::new(tokio::sync::Barrier::new(KINDS.len() + 1));
    let (holding, killed) = (barrier(), barrier());
    for kind in KINDS {
        let (client, holding, killed) = (client.clone(), holding.clone(), killed.clone());
        tokio::spawn(async move {
            let held = async {
                holding.wait().await;
                killed.wait().await;
            };
            let named = name(0, kind);
            let held = take_async(&client, holder_of(kind), &named, Call::Untimed, held).await;
            assert!(held.unwrap(), "{kind:?}'s holder was not granted");
        });
    }
    holding.wait().await;
    let killing = async {
        tokio::task::block_in_place(|| {
            let mut server = server.lock().unwrap();
            until_all_queued(&server, &waiters);
            server.kill();
        });
        let kill = Instant::now();
        killed.wait().await;
        kill
    };
    let (ended, kill) = tokio::join!(run_async(&client, &waiters, name), killing);
    assert_errors_within(&ended, false, kill, bound);
}

/// Async calls on a client whose blocking calls wait on the same frozen server keep their own
/// bound, the deadline and the grace, whatever the blocking calls are doing.
#[test]
fn async_calls_sharing_a_client_with_blocking_calls_keep_their_bound() {
    let server = RedisServer::start();
    let client = server.client();
    let _frozen = Frozen::new(&server);
    let blocking: Vec<_> = untimed_and_timed()
        .into_iter()
        .chain([(Kind::Semaphore, Call::Untimed)])
        .collect();
    let wait = ms(500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let since = Instant::now();
    let (blocked, asynced) = thread::scope(|s| {
        let blocked = s.spawn(|| run_blocking(&client, &blocking, own));
        let calls = [(Kind::Semaphore, Call::For(wait)); 2];
        let asynced = runtime.block_on(run_async(&client, &calls, |i, _| format!("a{i}")));
        (blocked.join().unwrap(), asynced)
    });
    // The slack is well under the I/O timeout the overrun was.
    assert_errors_within(&asynced, false, since, |_| wait + GRACE + ms(700));
    assert_errors_within(&blocked, false, since, bound);
}

/// Every primitive's acquire, untimed and timed, in both APIs (24 calls), started together on
/// one client the moment its server is frozen: each ends by its documented bound however many
/// share the client.
#[test]
fn calls_sharing_a_client_with_a_frozen_server_each_end_by_their_documented_bound() {
    let server = RedisServer::start();
    let client = server.client();
    let calls = untimed_and_timed();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _frozen = Frozen::new(&server);
    let since = Instant::now();
    let (blocked, asynced) = thread::scope(|s| {
        let blocked = s.spawn(|| run_blocking(&client, &calls, |i, _| format!("b{i}")));
        let asynced = runtime.block_on(run_async(&client, &calls, |i, _| format!("a{i}")));
        (blocked.join().unwrap(), asynced)
    });
    let mut table = String::new();
    let mut over = false;
    for (api, ended) in [("blocking", &blocked), ("async", &asynced)] {
        for (kind, call, outcome, at) in ended {
            let (took, limit) = (at.duration_since(since), documented(*call));
            over |= took > limit + SLACK || outcome.is_ok();
            table +=
                &format!("{api} {kind:?} {call:?}: {took:?} (documented {limit:?}): {outcome:?}\n");
        }
    }
    print!("{table}");
    assert!(!over, "calls past their bound:\n{table}");
}

/// The queue calls besides the acquires, each run once: what it is, and the call.
type Other = (&'static str, Box<dyn FnOnce() -> Result<(), Error> + Send>);

/// Against a frozen server, each of `others` ended with an error within the I/O timeout and
/// the grace (a try's giving back), with a slack short of a second I/O timeout.
fn assert_others_end(server: &RedisServer, others: Vec<Other>) {
    let _frozen = Frozen::new(server);
    let since = Instant::now();
    let (done, ended) = mpsc::channel();
    let count = others.len();
    for (what, call) in others {
        let done = done.clone();
        thread::spawn(move || {
            let _ = done.send((what, call(), Instant::now()));
        });
    }
    for _ in 0..count {
        let (what, outcome, at) = ended
            .recv_timeout(NEVER)
            .unwrap_or_else(|_| panic!("a call still waits after {NEVER:?}"));
        assert!(outcome.is_err(), "{what}: {outcome:?}");
        let took = at.duration_since(since);
        assert!(took < IO + GRACE + ms(600), "{what} took {took:?}");
    }
}

#[test]
fn a_frozen_server_ends_tries_releases_and_extends_with_an_error_by_the_io_timeout() {
    let server = RedisServer::start();
    let client = server.client();
    let semaphore = |name| {
        let handle = Semaphore::builder(&client, name, 1).io_timeout(IO);
        Arc::new(handle.build().unwrap())
    };
    let fair = |name| {
        let handle = Lock::builder(&client, name).fair(true).io_timeout(IO);
        handle.build().unwrap()
    };
    let rwlock = RwLock::builder(&client, "r")
        .io_timeout(IO)
        .build()
        .unwrap();
    let (held, other) = (semaphore("s"), semaphore("s"));
    let permit = held.acquire_arc().unwrap();
    let (locked, extended) = (fair("f"), fair("g"));
    locked.acquire().unwrap();
    extended.acquire().unwrap();
    let free = fair("h");
    assert_others_end(
        &server,
        vec![
            (
                "try_acquire",
                Box::new(move || other.try_acquire().map(drop)),
            ),
            ("try_lock", Box::new(move || free.try_lock().map(drop))),
            ("try_write", Box::new(move || rwlock.try_write().map(drop))),
            ("available", Box::new(move || held.available().map(drop))),
            ("release of a permit", Box::new(move || permit.release())),
            ("release", Box::new(move || locked.release())),
            ("extend", Box::new(move || extended.extend(Some(secs(10))))),
        ],
    );
}

#[test]
fn a_frozen_server_ends_async_tries_releases_and_extends_with_an_error_by_the_io_timeout() {
    use redis_blpop_lock::aio;
    let server = RedisServer::start();
    let client = server.client();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    let semaphore = |name| {
        let handle = aio::Semaphore::builder(&client, name, 1).io_timeout(IO);
        Arc::new(handle.build().unwrap())
    };
    let fair = |name| {
        let handle = aio::Lock::builder(&client, name).fair(true).io_timeout(IO);
        handle.build().unwrap()
    };
    let rwlock = aio::RwLock::builder(&client, "r")
        .io_timeout(IO)
        .build()
        .unwrap();
    let (held, other) = (semaphore("s"), semaphore("s"));
    let (locked, extended, free) = (fair("f"), fair("g"), fair("h"));
    let permit = runtime.block_on(async {
        locked.acquire().await.unwrap();
        extended.acquire().await.unwrap();
        held.acquire_arc().await.unwrap()
    });
    // Each async call on the runtime, from a thread of its own.
    let on = |runtime: &Arc<tokio::runtime::Runtime>, call| -> Box<dyn FnOnce() -> _ + Send> {
        let runtime = Arc::clone(runtime);
        Box::new(move || runtime.block_on(call))
    };
    type Call = std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;
    let calls: Vec<(&'static str, Call)> = vec![
        (
            "try_acquire",
            Box::pin(async move { other.try_acquire().await.map(drop) }),
        ),
        (
            "try_lock",
            Box::pin(async move { free.try_lock().await.map(drop) }),
        ),
        (
            "try_write",
            Box::pin(async move { rwlock.try_write().await.map(drop) }),
        ),
        (
            "available",
            Box::pin(async move { held.available().await.map(drop) }),
        ),
        ("release of a permit", Box::pin(permit.release())),
        ("release", Box::pin(async move { locked.release().await })),
        (
            "extend",
            Box::pin(async move { extended.extend(Some(secs(10))).await }),
        ),
    ];
    let others = calls
        .into_iter()
        .map(|(what, call)| (what, on(&runtime, call)))
        .collect();
    assert_others_end(&server, others);
}
