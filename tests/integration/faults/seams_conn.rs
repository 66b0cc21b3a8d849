//! The blocking transport's connections at two seams: a process stopped and continued while a
//! reply is on its way (Ctrl-Z/fg, a debugger, a frozen container), and idle pooled
//! connections that the server closed (killed, or `CLIENT KILL`).

use std::io::BufRead;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{ms, secs, ChildProcess, RedisServer};

/// Child role: makes one call on lock `l` when told to, and reports its outcome. `args[0]`
/// is `release` (of the lock it takes first), `try` or `wait`. It prints `ready <id>` once
/// its handle has a pooled connection and the scripts are loaded, `calling` just before the
/// call, and `outcome <what>` after it.
pub fn call(client: &redis::Client, args: &[String]) {
    let lock = Lock::new(client, "l").unwrap();
    assert!(lock.try_acquire().unwrap(), "the child's first try");
    lock.release().unwrap();
    if args[0] == "release" {
        lock.acquire().unwrap();
    }
    println!("ready {}", lock.id());
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).unwrap();
    println!("calling");
    let outcome = match args[0].as_str() {
        "release" => lock.release().map(|()| "ok".to_string()),
        "try" => lock.try_acquire().map(|got| got.to_string()),
        "wait" => lock.acquire_timeout(secs(30)).map(|got| got.to_string()),
        other => panic!("unknown call {other}"),
    };
    match outcome {
        Ok(what) => println!("outcome {what}"),
        Err(e) => println!("outcome error: {e:?}"),
    }
}

/// A child process whose handle of lock `l` is ready to make `call`.
struct Caller {
    child: ChildProcess,
    id: String,
}

impl Caller {
    fn start(server: &RedisServer, call: &str) -> Caller {
        let mut child = ChildProcess::spawn("faults::seams_conn::call", &server.url(), &[call]);
        let id = child.expect_line("ready")["ready ".len()..].to_string();
        Caller { child, id }
    }

    /// Tells the child to make its call, and returns once it is about to.
    fn call(&mut self) {
        self.child.send_line("go");
        self.child.expect_line("calling");
        // Time to send the request and block in the read of its reply.
        std::thread::sleep(ms(200));
    }

    /// Stops the child (SIGSTOP) and continues it (SIGCONT) `times` times.
    fn stop_and_continue(&self, times: usize) {
        for _ in 0..times {
            self.child.signal("STOP");
            std::thread::sleep(ms(100));
            self.child.signal("CONT");
            std::thread::sleep(ms(100));
        }
    }

    /// What the call came to, as the child reports it.
    fn outcome(mut self) -> String {
        let line = self.child.expect_line("outcome");
        self.child.wait_success();
        line["outcome ".len()..].to_string()
    }
}

/// The test's own connection to `server`, opened once: every connection the server accepts
/// after `CONFIG RESETSTAT` on it is then the child's.
struct Watch(redis::Connection);

impl Watch {
    fn new(server: &RedisServer) -> Watch {
        let mut conn = server.conn();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut conn)
            .unwrap();
        Watch(conn)
    }

    /// Connections the server accepted since the watch began: a reply taken for lost has its
    /// connection closed, and the call goes on over a new one.
    fn new_connections(&mut self) -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO").arg("stats").query(&mut self.0).unwrap();
        info.get("total_connections_received").unwrap()
    }

    fn owner(&mut self) -> Option<String> {
        self.0.get("lock:l").unwrap()
    }

    /// How many times the server ran `command` since the watch began.
    fn calls(&mut self, command: &str) -> u64 {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.0)
            .unwrap();
        let stats: Option<String> = info.get(&format!("cmdstat_{command}"));
        stats.map_or(0, |stats| {
            let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="));
            calls.expect("a calls= field").parse().unwrap()
        })
    }
}

/// What a call came to after `stops` stops: its outcome, who holds `lock:l`, and how many
/// connections the server accepted meanwhile.
type After = (usize, String, String, u64);

/// When the reply to the child's call comes.
enum Due {
    /// The server is frozen (SIGSTOP) from before the call, and answers once continued.
    WhenTheServerThaws,
    /// The call blocks in `BLPOP` until the test's handle releases the lock.
    AtTheRelease,
}

/// Makes `call` in a child three times, each against a new server, stopping and continuing
/// the child 1, 2 and 3 times while the reply is due; the test's own handle holds the lock
/// during the call when `held`.
fn stopped_and_continued(call: &str, held: bool, due: Due) -> Vec<After> {
    (1..=3)
        .map(|stops| {
            let server = RedisServer::start();
            let mut caller = Caller::start(&server, call);
            let names = [(caller.id.clone(), "the caller")];
            let holder = Lock::new(&server.client(), "l").unwrap();
            if held {
                holder.acquire().unwrap();
            }
            let mut watch = match due {
                Due::WhenTheServerThaws => {
                    let watch = Watch::new(&server);
                    server.pause();
                    caller.call();
                    caller.stop_and_continue(stops);
                    server.resume();
                    watch
                }
                Due::AtTheRelease => {
                    caller.call();
                    server.until_blocked(1, secs(10), || false);
                    let watch = Watch::new(&server);
                    caller.stop_and_continue(stops);
                    holder.release().unwrap();
                    watch
                }
            };
            let outcome = caller.outcome();
            let owner = match watch.owner() {
                None => "nobody".to_string(),
                Some(id) if id == names[0].0 => names[0].1.to_string(),
                Some(id) if id == holder.id() => "the holder".to_string(),
                Some(id) => format!("unknown id {id}"),
            };
            (stops, outcome, owner, watch.new_connections())
        })
        .collect()
}

/// The same outcome and owner after each of 1, 2 and 3 stops, and no new connection: the
/// reply came on the connection the call went out on.
fn every_time(outcome: &str, owner: &str) -> Vec<After> {
    (1..=3)
        .map(|stops| (stops, outcome.to_string(), owner.to_string(), 0))
        .collect()
}

#[test]
fn a_release_stopped_and_continued_while_its_reply_is_due_releases() {
    let seen = stopped_and_continued("release", false, Due::WhenTheServerThaws);
    assert_eq!(seen, every_time("ok", "nobody"));
}

#[test]
fn a_try_stopped_and_continued_while_its_reply_is_due_takes_a_free_lock() {
    let seen = stopped_and_continued("try", false, Due::WhenTheServerThaws);
    assert_eq!(seen, every_time("true", "the caller"));
}

#[test]
fn a_try_stopped_and_continued_while_its_reply_is_due_finds_a_held_lock_held() {
    let seen = stopped_and_continued("try", true, Due::WhenTheServerThaws);
    assert_eq!(seen, every_time("false", "the holder"));
}

#[test]
fn a_wait_stopped_and_continued_while_it_blocks_gets_the_lock_at_the_release() {
    let seen = stopped_and_continued("wait", true, Due::AtTheRelease);
    assert_eq!(seen, every_time("true", "the caller"));
}

/// A lock held through `server`'s client, and another handle of it, both with idle pooled
/// connections; then the server is killed (SIGKILL). `call` on them must fail at once with
/// the refused connection: a request cannot have run on a connection the server had closed.
fn fails_at_once_with_the_server_killed(
    what: &str,
    call: impl FnOnce(&Lock, &Lock) -> Result<(), Error>,
) {
    let mut server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l")
        .expire(secs(30))
        .build()
        .unwrap();
    let other = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    assert!(!other.try_acquire().unwrap());
    server.kill();
    let started = Instant::now();
    let result = call(&holder, &other);
    let took = started.elapsed();
    println!("{what} against a killed server: {result:?} after {took:?}");
    match result {
        Err(Error::Redis(e)) if e.is_connection_refusal() => {}
        other => panic!("{what}: expected the refused connection, got {other:?}"),
    }
    assert!(took < Duration::from_secs(1), "{what} took {took:?}");
}

#[test]
fn a_try_against_a_killed_server_fails_at_once_with_the_connection_error() {
    fails_at_once_with_the_server_killed("try_acquire", |_, other| other.try_acquire().map(drop));
}

#[test]
fn a_release_against_a_killed_server_fails_at_once_with_the_connection_error() {
    fails_at_once_with_the_server_killed("release", |holder, _| holder.release());
}

#[test]
fn an_extend_against_a_killed_server_fails_at_once_with_the_connection_error() {
    fails_at_once_with_the_server_killed("extend", |holder, _| holder.extend(None));
}

#[test]
fn a_holder_query_against_a_killed_server_fails_at_once_with_the_connection_error() {
    fails_at_once_with_the_server_killed("holder", |_, other| other.holder().map(drop));
}

#[test]
fn a_timed_acquire_against_a_killed_server_fails_at_once_with_the_connection_error() {
    fails_at_once_with_the_server_killed("acquire_timeout", |_, other| {
        other.acquire_timeout(secs(10)).map(drop)
    });
}

#[test]
fn a_try_after_the_server_killed_the_idle_connections_just_works() {
    let server = RedisServer::start();
    let lock = Lock::new(&server.client(), "l").unwrap();
    assert!(lock.try_acquire().unwrap());
    lock.release().unwrap();
    let mut watch = Watch::new(&server);
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut watch.0)
        .unwrap();
    assert!(killed >= 1, "no idle connection was killed");
    assert!(lock.try_acquire().unwrap());
    assert_eq!(watch.owner().as_deref(), Some(lock.id()));
    // Nothing was taken for lost: no `CLIENT KILL` but the test's own, no read of the lock to
    // settle a try.
    assert_eq!((watch.calls("client|kill"), watch.calls("exec")), (1, 0));
}

#[test]
fn a_lock_over_a_unix_socket_logs_in_and_lives_in_the_urls_database() {
    let socket = std::env::temp_dir().join(format!("redis-lock-test-{}.sock", std::process::id()));
    let path = socket.to_str().unwrap();
    let server = RedisServer::start_with(&["--unixsocket", path, "--requirepass", "s3cret"]);
    let url = format!("redis+unix://{path}?db=3&user=default&pass=s3cret");
    let lock = Lock::new(&redis::Client::open(url).unwrap(), "l").unwrap();
    assert!(lock.try_acquire().unwrap());
    let admin = format!("redis://:s3cret@127.0.0.1:{}/3", server.port);
    let mut admin = redis::Client::open(admin)
        .unwrap()
        .get_connection()
        .unwrap();
    let owner: Option<String> = admin.get("lock:l").unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
    lock.release().unwrap();
    let owner: Option<String> = admin.get("lock:l").unwrap();
    assert_eq!(owner, None);
    drop(server);
    let _ = std::fs::remove_file(&socket);
}
