//! Wire compatibility with python-redis-lock 4.0.1, the library this one follows: a Python
//! process (`interop/python_peer.py`) and this test share locks on a private server. Each
//! side's release wakes a waiter on the other, a shared id is one owner, and Python's
//! `reset_all` frees a Rust holder's lock.

use std::process::Command;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{secs, spawn_waiter, ChildProcess, RedisServer};

const INSTALL_HINT: &str = "the interop tests run python-redis-lock 4.0.1 in python3; \
     install it with `python3 -m pip install python-redis-lock==4.0.1 redis`";

/// A woken waiter takes the lock well before this. One that missed its wake-up would try
/// again only after a 5 s block (Rust) or its whole 60 s timeout (Python).
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

/// How long a test waits for a waiter to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// The Python side, on `server`, ready for commands.
fn python(server: &RedisServer) -> ChildProcess {
    python_peer(&server.url(), &[])
}

/// The Python side on the server at `url` (with `cluster`, a cluster's node), ready for
/// commands.
pub fn python_peer(url: &str, extra: &[&str]) -> ChildProcess {
    let check = Command::new("python3")
        .args(["-c", "import redis, redis_lock; assert redis_lock.__version__ == '4.0.1', redis_lock.__version__"])
        .output();
    match check {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "{INSTALL_HINT}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => panic!("could not run python3 ({e}): {INSTALL_HINT}"),
    }
    let mut command = Command::new("python3");
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/interop/python_peer.py"
        ))
        .arg(url)
        .args(extra);
    let mut python = ChildProcess::run(command).expect("run python3");
    python.expect_line("ready");
    python
}

#[test]
fn a_release_in_python_wakes_a_rust_waiter() {
    let server = RedisServer::start();
    let mut python = python(&server);
    python.send_line("acquire l");
    python.expect_line("acquired");
    let waiter = spawn_waiter(Lock::new(&server.client(), "l").unwrap(), secs(60));
    server.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert!(
        !waiter.is_finished(),
        "the Rust waiter did not wait for Python's lock"
    );
    let released = Instant::now();
    python.send_line("release l");
    assert!(waiter.join().unwrap().unwrap());
    let after = released.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the Rust waiter took the lock {after:?} after Python's release"
    );
}

#[test]
fn a_release_in_rust_wakes_a_python_waiter() {
    let server = RedisServer::start();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let mut python = python(&server);
    python.send_line("wait l 60");
    python.expect_line("waiting");
    // Python blocks only if it found the lock taken.
    server.until_blocked(1, BLOCK_LIMIT, || false);
    let released = Instant::now();
    holder.release().unwrap();
    assert_eq!(python.expect_line("result"), "result True");
    let after = released.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the Python waiter took the lock {after:?} after Rust's release"
    );
}

#[test]
fn a_shared_id_is_one_owner_in_both_libraries() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let mut python = python(&server);
    let rust = Lock::builder(&server.client(), "l")
        .id("shared-id")
        .build()
        .unwrap();

    rust.acquire().unwrap();
    python.send_line("release l shared-id");
    python.expect_line("released");
    assert!(!conn.exists::<_, bool>("lock:l").unwrap());

    python.send_line("acquire l shared-id");
    assert_eq!(python.expect_line("acquired"), "acquired shared-id");
    assert_eq!(rust.owner_id().unwrap().as_deref(), Some("shared-id"));
    rust.release().unwrap();
    assert!(!conn.exists::<_, bool>("lock:l").unwrap());
}

#[test]
fn reset_all_in_python_frees_a_rust_holders_lock_for_its_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let mut python = python(&server);
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let waiter = spawn_waiter(Lock::new(&client, "l").unwrap(), secs(60));
    server.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    let reset = Instant::now();
    python.send_line("reset_all");
    python.expect_line("reset");
    assert!(waiter.join().unwrap().unwrap());
    let after = reset.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the Rust waiter took the lock {after:?} after Python's reset_all"
    );
    assert!(matches!(holder.release(), Err(Error::NotAcquired { .. })));
}
