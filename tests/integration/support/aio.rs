//! What the async API's suites share: a task waiting for a lock, the check that it was woken
//! by a release (not by its own timer), the connections a server counts, and the check that
//! `with_lock` drops work whose lock was stolen.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{aio, Error};
use tokio::task::JoinHandle;

use super::{RedisServer, WOKEN_WITHIN};

/// A task that waits up to `timeout` for `lock` and returns what `acquire_timeout` said.
pub fn spawn_task_waiter(lock: aio::Lock, timeout: Duration) -> JoinHandle<Result<bool, Error>> {
    tokio::spawn(async move { lock.acquire_timeout(timeout).await })
}

/// A task waiting up to a minute for `lock`, returned once it has blocked at `server` (one
/// more client blocked there than before).
pub fn blocked_task_waiter(
    server: &RedisServer,
    lock: aio::Lock,
) -> JoinHandle<Result<bool, Error>> {
    let before = server.blocked_clients();
    let waiter = spawn_task_waiter(lock, Duration::from_secs(60));
    server.until_blocked(before + 1, Duration::from_secs(20), || waiter.is_finished());
    waiter
}

/// Runs `release` and checks that `waiter` took the lock soon after: woken, not timed out.
pub async fn assert_task_woken_by(
    release: impl Future<Output = ()>,
    waiter: JoinHandle<Result<bool, Error>>,
) {
    let released = Instant::now();
    release.await;
    let got = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter still waits a minute after the release")
        .expect("the waiter task panicked");
    assert!(got.unwrap(), "the waiter gave up");
    let after = released.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the waiter took the lock {after:?} after the release"
    );
}

/// The normal clients connected to `server` now, leaving out the connection that asks: the
/// lines of `CLIENT LIST TYPE normal`.
pub fn client_list(server: &RedisServer) -> Vec<String> {
    let mut conn = server.conn();
    let own: u64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg(&["LIST", "TYPE", "normal"])
        .query(&mut conn)
        .unwrap();
    let own = format!("id={own} ");
    list.lines()
        .filter(|line| !line.starts_with(&own))
        .map(str::to_string)
        .collect()
}

/// How many connections other than the test's own query are open at `server`.
pub fn connections(server: &RedisServer) -> usize {
    client_list(server).len()
}

/// What a process keeps open at `server` once it has waited there: runs one contended
/// hand-over of lock `warm-up` and returns the connections open once no task waits any more.
pub async fn connections_after_a_wait(server: &RedisServer) -> usize {
    let client = server.client();
    let holder = aio::Lock::new(&client, "warm-up").unwrap();
    holder.acquire().await.unwrap();
    let waiter = aio::Lock::new(&client, "warm-up").unwrap();
    let waiter = tokio::spawn(async move {
        let got = waiter.acquire_timeout(Duration::from_secs(60)).await?;
        waiter.release().await?;
        Ok::<_, Error>(got)
    });
    server.until_blocked(1, Duration::from_secs(20), || waiter.is_finished());
    holder.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap(), "the warm-up waiter gave up");
    super::eventually(
        Duration::from_secs(10),
        "the warm-up's waiting connection to unblock",
        || server.blocked_clients() == 0,
    );
    connections(server)
}

/// Runs `with_lock` on work that gives the lock away (another id in `lock:l`) and then waits
/// forever: `with_lock` must return `Error::Lost` and drop the work.
pub async fn assert_lost_and_dropped<F>(
    server: &RedisServer,
    with_lock: impl FnOnce(StolenWork) -> F,
) where
    F: std::future::Future<Output = Result<(), Error>>,
{
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let mut conn = server.conn();
    let work: StolenWork = Box::pin(async move {
        let _flag = flag;
        let _: () = conn.set("lock:l", "thief").unwrap();
        std::future::pending::<()>().await
    });
    let result = tokio::time::timeout(Duration::from_secs(60), with_lock(work))
        .await
        .expect("with_lock still ran its work a minute after the lock was stolen");
    assert!(
        matches!(result, Err(Error::Lost { ref name }) if name == "l"),
        "{result:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the work was not dropped");
    let owner: Option<String> = server.conn().get("lock:l").unwrap();
    assert_eq!(owner.as_deref(), Some("thief"));
}

pub type StolenWork = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Sets a flag when dropped: put in a future, it tells whether the future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
