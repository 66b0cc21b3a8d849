//! A private `redis-server` per test, and child processes for tests that need another process.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "redis-server is not on PATH. The tests start their own private \
     server; install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu), \
     `brew install redis` (macOS) or `dnf install redis` (Fedora)";

/// A `redis-server` on a free loopback port, with no persistence; killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--maxmemory 1mb`, ...).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for _ in 0..20 {
            let port = free_port();
            if let Some(child) = spawn_server(port, &extra) {
                return RedisServer { child, port, extra };
            }
        }
        panic!("could not start redis-server on a free port after 20 tries");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// A plain connection for the test's own checks (not from the library's pool).
    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to the test server")
    }

    /// Kills the server (like a crash) and starts a fresh, empty one on the same port.
    pub fn restart_after(&mut self, outage: Duration) {
        self.kill();
        std::thread::sleep(outage);
        self.child = spawn_server(self.port, &self.extra).expect("restart redis-server");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// How many clients the server counts as blocked (in `BLPOP`).
    pub fn blocked_clients(&self) -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("clients")
            .query(&mut self.conn())
            .expect("INFO clients");
        info.get("blocked_clients").unwrap_or(0)
    }

    /// Waits until at least `n` clients are blocked, or `gave_up()` says there is no point
    /// (a waiter already returned); panics after `limit`.
    pub fn until_blocked(&self, n: u64, limit: Duration, mut gave_up: impl FnMut() -> bool) {
        let started = Instant::now();
        while self.blocked_clients() < n && !gave_up() {
            assert!(
                started.elapsed() < limit,
                "fewer than {n} clients blocked after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A thread that waits up to `timeout` for `lock` and returns what `acquire_timeout` said.
pub fn spawn_waiter(
    lock: redis_lock::Lock,
    timeout: Duration,
) -> std::thread::JoinHandle<Result<bool, redis_lock::Error>> {
    std::thread::spawn(move || lock.acquire_timeout(timeout))
}

/// Sends `signal` ("STOP", "CONT", "KILL", ...) to process `pid` with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Starts `redis-server` on `port` and waits until it answers; `None` if it exited (the port
/// was taken meanwhile).
fn spawn_server(port: u16, extra: &[String]) -> Option<Child> {
    let spawned = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &std::env::temp_dir().to_string_lossy()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
        Err(e) => panic!("could not run redis-server: {e}"),
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
            if let Ok(mut conn) = client.get_connection() {
                match redis::cmd("PING").query::<String>(&mut conn) {
                    Ok(_) => return Some(child),
                    // Up, but with `--requirepass`.
                    Err(e) if e.code() == Some("NOAUTH") => return Some(child),
                    Err(_) => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    None
}

/// The role this process plays when a test re-ran the test binary as a child, if any.
pub fn child_role() -> Option<(String, String, Vec<String>)> {
    let role = std::env::var("REDIS_LOCK_TEST_ROLE").ok()?;
    let url = std::env::var("REDIS_LOCK_TEST_URL").expect("REDIS_LOCK_TEST_URL");
    let args = std::env::var("REDIS_LOCK_TEST_ARGS")
        .unwrap_or_default()
        .split('\u{1f}')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    Some((role, url, args))
}

/// Another process running this test binary's `child_process_role` test as `role`.
pub struct ChildProcess {
    pub child: Child,
    lines: BufReader<ChildStdout>,
}

impl ChildProcess {
    pub fn spawn(role: &str, url: &str, args: &[&str]) -> ChildProcess {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "child_process_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REDIS_LOCK_TEST_ROLE", role)
            .env("REDIS_LOCK_TEST_URL", url)
            .env("REDIS_LOCK_TEST_ARGS", args.join("\u{1f}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a child test process");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout"));
        ChildProcess { child, lines }
    }

    /// Blocks until the child prints `marker`, and returns the rest of that line from it (the
    /// test harness may have printed `test child_process_role ... ` in front).
    pub fn expect_line(&mut self, marker: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .lines
                .read_line(&mut line)
                .expect("read the child's output");
            assert!(n > 0, "the child exited before printing {marker:?}");
            if let Some(at) = line.find(marker) {
                return line[at..].trim_end().to_string();
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the child a signal ("STOP", "CONT", "KILL", ...).
    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Sends the child one line on its standard input.
    pub fn send_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }

    pub fn wait_success(mut self) {
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "child failed: {status}");
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of a server that can hold back the server's replies and cut
/// connections: a network that delays or drops, under the test's control.
pub struct Proxy {
    pub port: u16,
    state: std::sync::Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    stopped: std::sync::atomic::AtomicBool,
    links: std::sync::Mutex<Vec<Link>>,
}

/// One proxied connection: both sockets (to cut it) and whether its replies are held back.
struct Link {
    client: TcpStream,
    server: TcpStream,
    hold: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to the server on `target_port`.
    pub fn start(target_port: u16) -> Proxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(ProxyState::default());
        let accepting = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let hold = Arc::new(AtomicBool::new(false));
                let (Ok(c1), Ok(c2), Ok(s1), Ok(s2)) = (
                    client.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                accepting.links.lock().unwrap().push(Link {
                    client: c1,
                    server: s1,
                    hold: Arc::clone(&hold),
                });
                let never = Arc::new(AtomicBool::new(false));
                std::thread::spawn(move || pump(client, server, &never));
                std::thread::spawn(move || pump(s2, c2, &hold));
            }
        });
        Proxy { port, state }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// Holds back (or lets through again) the replies on every connection open now; the
    /// server still runs the commands it receives. New connections are not held.
    pub fn hold_replies(&self, hold: bool) {
        for link in self.state.links.lock().unwrap().iter() {
            link.hold.store(hold, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Closes every connection open now, dropping any replies held back.
    pub fn cut_all(&self) {
        for link in self.state.links.lock().unwrap().drain(..) {
            let _ = link.client.shutdown(std::net::Shutdown::Both);
            let _ = link.server.shutdown(std::net::Shutdown::Both);
            // A pump holding a reply now finds its socket closed and ends.
            link.hold.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut_all();
        // Wakes the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either side closes, waiting while `hold` is set before passing
/// on what it read.
fn pump(mut from: TcpStream, mut to: TcpStream, hold: &std::sync::atomic::AtomicBool) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while hold.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}
