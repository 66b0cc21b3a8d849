//! A private `redis-server` per test, on a free loopback port, with no persistence and a log
//! of its own that failure messages quote.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use redis_blpop_lock::inspect::Primitive;

use super::{eventually, secs, send_signal};

pub(super) const INSTALL_HINT: &str =
    "redis-server is not on PATH (nor at $REDIS_SERVER, if set). The tests start their own \
     private server; install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu), \
     `brew install redis` (macOS) or `dnf install redis` (Fedora)";

/// The server binary the tests run: `$REDIS_SERVER` (a path, so that one run can test another
/// version or Valkey: see `.ci/matrix`), else `redis-server` on PATH.
pub fn server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .filter(|path| !path.is_empty())
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The command-line client that comes with `server_binary()`: `redis-cli` or `valkey-cli` in
/// its folder when `$REDIS_SERVER` is set and one is there, else `redis-cli` on PATH (a build
/// shipped without its client is driven by the packaged one; the protocol is the same).
pub fn cli_binary() -> PathBuf {
    let server = server_binary();
    let beside = server.parent().filter(|dir| !dir.as_os_str().is_empty());
    (beside.into_iter())
        .flat_map(|dir| [dir.join("redis-cli"), dir.join("valkey-cli")])
        .find(|cli| cli.is_file())
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

/// The server's version as (major, minor), from `--version` ("Redis server v=7.0.15 ..." or
/// "Valkey server v=8.1.8 ..."); asked once per run.
pub fn server_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let binary = server_binary();
        let output = match Command::new(&binary).arg("--version").output() {
            Ok(output) => output,
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            Err(e) => panic!("could not run {}: {e}", binary.display()),
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let version = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no v= in {} --version: {text:?}", binary.display()));
        let mut numbers = version.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
    })
}

/// The arguments that allow `DEBUG` (Redis 7 and Valkey refuse it by default; Redis 6.2 allows
/// it and does not know the option, so fails to start with it).
pub fn debug_command_args() -> Vec<&'static str> {
    if server_version() >= (7, 0) {
        vec!["--enable-debug-command", "yes"]
    } else {
        Vec::new()
    }
}

/// How much of the server's log a failure message quotes.
const LOG_TAIL_LINES: usize = 30;

/// A `redis-server` on a free loopback port, with no persistence; killed on drop, and with
/// the test binary however it ends. Its output goes to a log file, removed on drop unless the
/// test is failing.
pub struct RedisServer {
    // In a mutex so that `until_answering` can poll it for exit while its failure message
    // holds the server to quote the log.
    child: Mutex<Child>,
    pub port: u16,
    args: Args,
    log_path: PathBuf,
}

/// What a server runs with besides the port and the defaults (loopback, no persistence).
#[derive(Clone, Default)]
pub struct Args {
    /// `redis-server` reads a config file only as its first argument; a sentinel needs one.
    pub config_file: Option<PathBuf>,
    /// Extra `redis-server` arguments (`--maxmemory 1mb`, ...).
    pub extra: Vec<String>,
}

/// Arguments for a server that is or may become a replica, or has one: without them a primary
/// waits 5 s for other replicas to share a full sync, and a replica writes the data it receives
/// to a file.
pub const DISKLESS: [&str; 4] = [
    "--repl-diskless-sync-delay",
    "0",
    "--repl-diskless-load",
    "swapdb",
];

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--maxmemory 1mb`, ...).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let args = Args {
            config_file: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        RedisServer::start_with_args(|_| args.clone())
    }

    /// Starts a server with `args(port)`, asked again on each try since each try has a new
    /// port: a cluster node needs a free bus port too, a sentinel a config file naming its port.
    pub fn start_with_args(mut args: impl FnMut(u16) -> Args) -> RedisServer {
        let mut last_log = String::new();
        for _ in 0..20 {
            let port = free_port();
            let args = args(port);
            let log_path = new_log_path();
            let server = RedisServer {
                child: Mutex::new(spawn(port, &args, &log_path)),
                port,
                args,
                log_path,
            };
            if server.until_answering() {
                return server;
            }
            // Most likely another process took the port between `free_port` and the bind.
            last_log = server.log();
        }
        panic!(
            "could not start redis-server on a free port after 20 tries; the last log:\n{last_log}"
        );
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// A plain connection for the test's own checks (not from the library's pool).
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().unwrap_or_else(|e| {
            panic!(
                "{}",
                self.failure(format!("connect to the test server: {e}"))
            )
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Kills the server (like a crash) and starts a fresh, empty one on the same port, which
    /// logs to the same file.
    pub fn restart_after(&mut self, outage: Duration) {
        self.kill();
        std::thread::sleep(outage);
        self.start_again();
    }

    /// Starts a fresh, empty server on the same port after a [`kill`](Self::kill), which logs
    /// to the same file, and waits until it answers.
    pub fn start_again(&mut self) {
        *self.child.get_mut().unwrap() = spawn(self.port, &self.args, &self.log_path);
        assert!(
            self.until_answering(),
            "{}",
            self.failure("the restarted redis-server exited (its port taken meanwhile?)")
        );
    }

    pub fn kill(&mut self) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Whether the process is still there (not killed, not crashed).
    pub fn running(&self) -> bool {
        matches!(self.child.lock().unwrap().try_wait(), Ok(None))
    }

    /// What dropping the server does, for one that is never dropped (the shared cluster's, at
    /// exit): kills it and removes its log.
    #[cfg(feature = "cluster")]
    pub fn shut_down(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&self.log_path);
    }

    /// Freezes the server (SIGSTOP) until `resume`: connections stay open and commands queue
    /// up unanswered, while the clock, and with it every key's expiry, runs on.
    pub fn pause(&self) {
        send_signal(self.pid(), "STOP");
    }

    pub fn resume(&self) {
        send_signal(self.pid(), "CONT");
    }

    /// Everything the server has logged so far, across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// How many times the server has run `command` (`INFO commandstats`; a subcommand as
    /// `client|kill`), scripts' calls included.
    pub fn calls(&self, command: &str) -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{}", self.failure(format!("INFO commandstats: {e}"))));
        info.get::<String>(&format!("cmdstat_{command}"))
            .and_then(|stats| {
                let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="))?;
                calls.parse().ok()
            })
            .unwrap_or(0)
    }

    /// How many clients the server counts as blocked (in `BLPOP`).
    pub fn blocked_clients(&self) -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("clients")
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{}", self.failure(format!("INFO clients: {e}"))));
        info.get("blocked_clients").unwrap_or(0)
    }

    /// Waits until `n` more tries than `since` (a [`tries_run`] count) have run and the
    /// process's waiting connection blocks, or `gave_up()` says there is no point (a waiter
    /// already returned); panics after `limit`. For `n` waiters of this process on plain
    /// locks, whose first tries failed: they share one blocked client, and a release's signal
    /// waits in its list until that client listens on it.
    pub fn until_waiting(
        &self,
        n: u64,
        since: u64,
        limit: Duration,
        mut gave_up: impl FnMut() -> bool,
    ) {
        let what = format!("{n} waiters' tries and a blocked client");
        eventually(limit, self.failure(what), || {
            (tries_run(self) >= since + n && self.blocked_clients() >= 1) || gave_up()
        });
    }

    /// Waits until `tries` waiters of this process on plain locks have tried (one per lock
    /// at least: the first) and its waiting connection blocks, then [`JOIN_SETTLE`] for the
    /// others to take their places: a waiter that finds another of its process waiting on
    /// its lock joins the line behind it without a try of its own, which the server does not
    /// see.
    pub fn until_in_line(
        &self,
        tries: u64,
        since: u64,
        limit: Duration,
        gave_up: impl FnMut() -> bool,
    ) {
        self.until_waiting(tries, since, limit, gave_up);
        std::thread::sleep(JOIN_SETTLE);
    }

    /// Waits until at least `n` clients are blocked, or `gave_up()` says there is no point
    /// (a waiter already returned); panics after `limit`.
    pub fn until_blocked(&self, n: u64, limit: Duration, mut gave_up: impl FnMut() -> bool) {
        eventually(limit, self.failure(format!("{n} blocked clients")), || {
            self.blocked_clients() >= n || gave_up()
        });
    }

    /// Waits until the queue of the `kind` primitive `name` holds at least `n` waiters (its
    /// entries: `ZCARD <kind>:{<name>}:queue`), or `gave_up()` says there is no point (a
    /// waiter already returned); panics after `limit`. For the queue engine's waiters, where
    /// [`until_blocked`](Self::until_blocked) cannot tell: those of one process share one
    /// blocked client.
    pub fn until_queued(
        &self,
        kind: Primitive,
        name: &str,
        n: u64,
        limit: Duration,
        mut gave_up: impl FnMut() -> bool,
    ) {
        let mut conn = self.conn();
        let what = format!("{n} waiters in the queue of {} {name:?}", kind.word());
        eventually(limit, self.failure(what), || {
            let found = queued(&mut conn, kind, name)
                .unwrap_or_else(|e| panic!("{}", self.failure(format!("ZCARD: {e}"))));
            found >= n || gave_up()
        });
    }

    /// Waits until the server answers; false if it exited instead.
    fn until_answering(&self) -> bool {
        let mut exited = false;
        eventually(
            secs(10),
            self.failure(format!("redis-server on port {} to answer", self.port)),
            || {
                exited = matches!(self.child.lock().unwrap().try_wait(), Ok(Some(_)));
                exited || answers(self.port)
            },
        );
        !exited
    }

    /// `what` went wrong, followed by the end of the server's log.
    pub(super) fn failure<W: fmt::Display>(&self, what: W) -> Failure<'_, W> {
        Failure { server: self, what }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        // A failing test keeps the log: its message names the file.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// A failure message about the server. The log is read when the message is written, so a
/// poll that gives up quotes the log as it is then.
pub(super) struct Failure<'a, W> {
    server: &'a RedisServer,
    what: W,
}

impl<W: fmt::Display> fmt::Display for Failure<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let log = self.server.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        write!(
            f,
            "{}\n--- the end of the server's log, {} ---\n{}",
            self.what,
            self.server.log_path.display(),
            tail.join("\n")
        )
    }
}

/// The queue (`ZSET` waiter id -> ticket) of the `kind` primitive `name`, as the crate names
/// it: `<kind>:{<name>}:queue`, or `<kind>:=<name>:queue` for a name with a hash tag of its
/// own.
fn queue_key(kind: Primitive, name: &str) -> String {
    let tagged = name
        .find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if tagged {
        format!("{}:={name}:queue", kind.word())
    } else {
        format!("{}:{{{name}}}:queue", kind.word())
    }
}

/// How many waiters the `kind` primitive `name` has in line at `conn`'s server.
fn queued(
    conn: &mut impl redis::ConnectionLike,
    kind: Primitive,
    name: &str,
) -> redis::RedisResult<u64> {
    redis::cmd("ZCARD").arg(queue_key(kind, name)).query(conn)
}

/// A loopback port that was free a moment ago, and that no server or proxy of this run had.
/// How long waiters started together are given to join a line without a try of their own
/// ([`RedisServer::until_in_line`]): a thread's start and a few lock operations, far less.
pub const JOIN_SETTLE: Duration = Duration::from_millis(200);

pub fn free_port() -> u16 {
    fresh_listener().local_addr().expect("local address").port()
}

/// A listener on a loopback port no server or proxy of this run had before. The library keeps
/// its connections per address for the whole process: a test whose server took over an
/// earlier test's port would meet the earlier server's connections, closed, and see their
/// requests' replies lost.
pub fn fresh_listener() -> TcpListener {
    static TAKEN: OnceLock<Mutex<std::collections::HashSet<u16>>> = OnceLock::new();
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local address").port();
        let taken = TAKEN.get_or_init(Default::default);
        if taken.lock().unwrap().insert(port) {
            return listener;
        }
    }
}

/// A log file name no other server of this run uses.
fn new_log_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("redis-lock-test-{}-{n}.log", std::process::id()))
}

/// Starts `redis-server` on `port`, its output appended to `log` (with no `--logfile` it logs
/// to standard output, and a bad argument goes to standard error: both land there).
fn spawn(port: u16, args: &Args, log: &Path) -> Child {
    let file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
    let mut command = Command::new(server_binary());
    command
        .args(&args.config_file)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &std::env::temp_dir().to_string_lossy()])
        // Not the shared `dump.rdb`: a server loads that file at start if a replica (of any
        // run) left one there.
        .arg("--dbfilename")
        .arg(log.with_extension("rdb").file_name().expect("a file name"))
        .args(&args.extra)
        .stdout(file.try_clone().expect("share the log file"))
        .stderr(file);
    match spawn_for_the_run(command) {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
        Err(e) => panic!("could not run {}: {e}", server_binary().display()),
    }
}

/// Spawns `command` so that the process is killed when this test binary ends, however it
/// ends (a static such as the shared cluster is never dropped, and a killed binary drops
/// nothing). PR_SET_PDEATHSIG fires when the thread that forked the child ends, not the
/// process, so every server is forked by one thread that lives as long as the process.
fn spawn_for_the_run(mut command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // The test binary may have ended before the prctl took effect.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other("the test binary has exited"));
                }
                Ok(())
            });
        }
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("redis-server spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the spawner thread");
        requests
    });
    let (reply, spawned) = mpsc::channel();
    spawner
        .send((command, reply))
        .expect("the spawner thread lives as long as the process");
    spawned.recv().expect("the spawner thread replies")
}

/// Whether a server answers `PING` on `port`.
fn answers(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection() else {
        return false;
    };
    match redis::cmd("PING").query::<String>(&mut conn) {
        Ok(_) => true,
        // Up, but with `--requirepass`.
        Err(e) => e.code() == Some("NOAUTH"),
    }
}

/// How many tries at a lock `server` has run: each is one `SET` (`SET NX`, then `GET` and
/// `PTTL`), or one script with fencing.
pub fn tries_run(server: &RedisServer) -> u64 {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    ["cmdstat_set", "cmdstat_evalsha", "cmdstat_eval"]
        .iter()
        .filter_map(|key| info.get::<String>(key))
        .filter_map(|stats| {
            let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="))?;
            calls.parse::<u64>().ok()
        })
        .sum()
}
