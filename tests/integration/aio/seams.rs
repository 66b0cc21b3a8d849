//! A runtime's end: a guard dropped as its runtime ends, or held by a task the runtime drops,
//! still releases, by the I/O timeout, on both flavours; so does one alive when a
//! `#[tokio::main]`-style main returns; and a grant on its way to a waiting task as the runtime
//! ends is given back. The locks have no expiry: a release lost here would leave them held for
//! good.

use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::aio;
use tokio::runtime::Runtime;

use crate::support::{connections, eventually, secs, ChildProcess, Proxy, RedisServer};

const NAME: &str = "seam";
const KEY: &str = "lock:seam";
const RUNS: usize = 5;
const IO_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy)]
enum Flavour {
    CurrentThread,
    MultiThread,
}

fn runtime(flavour: Flavour) -> Runtime {
    let mut builder = match flavour {
        Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Flavour::MultiThread => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build().expect("a runtime")
}

/// A handle on the lock, with no expiry.
fn unexpiring(client: &redis::Client) -> aio::Lock {
    aio::Lock::builder(client, NAME)
        .io_timeout(IO_TIMEOUT)
        .build()
        .unwrap()
}

/// Five times: a new runtime of `flavour` takes the lock with `hold`, whose guard is still
/// unreleased when `hold` returns; the runtime is dropped. The lock must be free once the
/// drop returns, the drop bounded by the I/O timeout, and no connection left open but the
/// one a process keeps for short requests.
fn released_as_the_runtime_ends(
    flavour: Flavour,
    hold: impl AsyncFn(&redis::Client) -> Option<aio::LockGuard>,
) {
    let server = RedisServer::start();
    let client = server.client();
    for run in 1..=RUNS {
        let runtime = runtime(flavour);
        runtime.block_on(async {
            if let Some(guard) = hold(&client).await {
                // As the block's last step: its release can only be spawned.
                drop(guard);
            }
        });
        let ending = Instant::now();
        drop(runtime);
        let ended_in = ending.elapsed();
        let left: Option<String> = server.conn().get(KEY).unwrap();
        assert_eq!(
            left, None,
            "run {run}: the lock is still held once its runtime has ended"
        );
        assert!(
            ended_in < IO_TIMEOUT + secs(3),
            "run {run}: the runtime took {ended_in:?} to end"
        );
    }
    eventually(secs(10), "the runtimes' connections to close", || {
        connections(&server) <= 1
    });
}

/// Takes the lock and returns its guard.
async fn guard(client: &redis::Client) -> Option<aio::LockGuard> {
    let guard = unexpiring(client).lock().await.unwrap();
    Some(guard)
}

/// Takes the lock and hands its guard to a task that sleeps for an hour with it; returns once
/// the task holds it.
async fn guard_in_a_sleeping_task(client: &redis::Client) -> Option<aio::LockGuard> {
    let guard = unexpiring(client).lock().await.unwrap();
    let (started, holding) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _guard = guard;
        let _ = started.send(());
        tokio::time::sleep(secs(3600)).await;
    });
    holding.await.unwrap();
    None
}

#[test]
fn a_guard_dropped_as_a_current_thread_runtime_ends_is_released() {
    released_as_the_runtime_ends(Flavour::CurrentThread, guard);
}

#[test]
fn a_guard_dropped_as_a_multi_thread_runtime_ends_is_released() {
    released_as_the_runtime_ends(Flavour::MultiThread, guard);
}

#[test]
fn a_task_holding_a_guard_when_a_current_thread_runtime_is_dropped_releases_it() {
    released_as_the_runtime_ends(Flavour::CurrentThread, guard_in_a_sleeping_task);
}

#[test]
fn a_task_holding_a_guard_when_a_multi_thread_runtime_is_dropped_releases_it() {
    released_as_the_runtime_ends(Flavour::MultiThread, guard_in_a_sleeping_task);
}

/// A task waits for the lock through a proxy; the holder releases, the server hands the lock
/// to the try behind the task's `BLPOP`, and the proxy holds the reply back; the runtime ends
/// before the reply comes. What the try took is given back.
#[test]
fn a_grant_on_its_way_to_a_waiting_task_as_its_runtime_ends_is_given_back() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let holder = redis_blpop_lock::Lock::new(&server.client(), NAME).unwrap();
    holder.acquire().unwrap();
    let runtime = runtime(Flavour::MultiThread);
    let waiter = unexpiring(&proxy.client());
    let id = waiter.id().to_string();
    let waiting = runtime.spawn(async move { waiter.lock().await });
    server.until_blocked(1, secs(20), || waiting.is_finished());
    proxy.hold_replies(true);
    holder.release().unwrap();
    eventually(secs(10), "the waiting task's try to take the lock", || {
        server.conn().get::<_, Option<String>>(KEY).unwrap() == Some(id.clone())
    });
    assert!(!waiting.is_finished(), "the grant reached the task");
    drop(runtime);
    let left: Option<String> = server.conn().get(KEY).unwrap();
    assert_eq!(
        left, None,
        "the grant is still held once its runtime has ended"
    );
}

/// Tasks holding guards on several names when the runtime is dropped, the server frozen: each
/// release waits for the server, but once one has timed out the others do not wait again, so
/// the runtime's end takes about one I/O timeout, not one per guard.
#[test]
fn a_runtime_ending_against_a_frozen_server_waits_about_one_io_timeout_in_all() {
    const GUARDS: usize = 6;
    let server = RedisServer::start();
    let client = server.client();
    let runtime = runtime(Flavour::MultiThread);
    runtime.block_on(async {
        for n in 0..GUARDS {
            let lock = aio::Lock::builder(&client, format!("{NAME}-{n}"))
                .io_timeout(IO_TIMEOUT)
                .build()
                .unwrap();
            let guard = lock.lock().await.unwrap();
            tokio::spawn(async move {
                let _guard = guard;
                tokio::time::sleep(secs(3600)).await;
            });
        }
    });
    server.pause();
    let ending = Instant::now();
    drop(runtime);
    let ended_in = ending.elapsed();
    server.resume();
    assert!(
        ended_in < IO_TIMEOUT * 2 + secs(1),
        "the runtime took {ended_in:?} to end, against {GUARDS} guards' {IO_TIMEOUT:?} each"
    );
}

/// A child process whose main runs as `#[tokio::main]`'s does, holding the lock when it
/// returns (`how`: "guard", its own guard; "task", a task's); the lock is free once it exited.
fn released_when_main_returns(flavour: &str, how: &str) {
    let server = RedisServer::start();
    let mut child = ChildProcess::spawn("aio::seams::main_returns", &server.url(), &[flavour, how]);
    child.expect_line("holding");
    let holder: Option<String> = server.conn().get(KEY).unwrap();
    assert!(holder.is_some(), "the child said it holds the lock");
    child.send_line("return");
    child.wait_success();
    let left: Option<String> = server.conn().get(KEY).unwrap();
    assert_eq!(
        left, None,
        "the lock is still held once the child has exited"
    );
}

#[test]
fn main_returning_with_its_guard_alive_releases_it() {
    released_when_main_returns("current_thread", "guard");
}

#[test]
fn main_returning_while_a_task_holds_a_guard_releases_it() {
    released_when_main_returns("multi_thread", "task");
}

/// The child of `released_when_main_returns`: what `#[tokio::main]` makes of an async main
/// (a runtime, `block_on`, the runtime dropped), then a check that no thread is left.
pub fn main_returns(client: &redis::Client, args: &[String]) {
    let threads_before = threads();
    let flavour = match args[0].as_str() {
        "current_thread" => Flavour::CurrentThread,
        _ => Flavour::MultiThread,
    };
    runtime(flavour).block_on(async {
        let kept = match args[1].as_str() {
            "guard" => guard(client).await,
            _ => guard_in_a_sleeping_task(client).await,
        };
        println!("holding");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        drop(kept);
    });
    assert_eq!(threads(), threads_before, "threads left behind");
}

/// This process's threads.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}
