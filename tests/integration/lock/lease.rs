//! A waiter that becomes a holder: its lease starts when it got the lock, not when it began
//! waiting. Waits of 10 % to 190 % of the expiry, on every backend, in both APIs (renewing;
//! the async API on one server also not renewing) and through the CLI; after each, the new holder keeps the lock, and `lost()` stays false, for longer
//! than its expiry counted from the start of its wait would allow.

use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{Backend, Lock};

use crate::support::{ms, secs};

/// The waiters' expiry.
const EXPIRE: Duration = Duration::from_secs(1);
/// How long each waiter waits, in percent of [`EXPIRE`]: 40 % and 50 % are the waits whose
/// lease, counted from the wait's start, ran out before a renewal scheduled from the grant.
const WAITS: [u32; 6] = [10, 40, 50, 90, 150, 190];
/// How long a renewing holder keeps the lock, watching `lost()`: past its expiry.
const RENEWING_HOLD: Duration = Duration::from_millis(1600);
/// How long a holder that does not renew keeps the lock: most of its expiry, counted from the
/// grant, but more than is left of it counted from the start of a wait of 40 % or more.
const PLAIN_HOLD: Duration = Duration::from_millis(800);

/// The waiter's side: takes lock `name` after the holder's release, then holds it for `hold`
/// and asserts, every few milliseconds, that it has not been told it lost the lock; then
/// that the key still holds its id, and its release finds it.
fn hold_after_a_wait(waiter: Lock, hold: Duration, what: &str) {
    assert!(
        waiter.acquire_timeout(secs(30)).unwrap(),
        "{what}: not acquired"
    );
    let granted = Instant::now();
    while granted.elapsed() < hold {
        assert!(
            !waiter.lost(),
            "{what}: lost() turned true {:?} after the grant",
            granted.elapsed()
        );
        thread::sleep(ms(10));
    }
    let holder = waiter.holder().unwrap().map(|h| h.id);
    assert_eq!(
        holder.as_deref(),
        Some(waiter.id()),
        "{what}: the key no longer holds the waiter's id"
    );
    waiter.release().unwrap();
}

/// Every wait of [`WAITS`] at once, each on its own lock under `prefix`: a holder (a long
/// expiry) takes the lock, a waiter with [`EXPIRE`] (renewing or not) waits for it, and the
/// holder lets go after the wait's share of the expiry.
fn waits_of_every_length(backend: &(impl Backend + Sync), prefix: &str, renewing: bool) {
    let hold = if renewing { RENEWING_HOLD } else { PLAIN_HOLD };
    thread::scope(|scope| {
        for percent in WAITS {
            scope.spawn(move || {
                let name = format!("{prefix}-{percent}");
                let holder = Lock::builder(backend, &name)
                    .expire(secs(30))
                    .build()
                    .unwrap();
                holder.acquire().unwrap();
                let waiter = Lock::builder(backend, &name)
                    .expire(EXPIRE)
                    .auto_renewal(renewing)
                    .build()
                    .unwrap();
                let what = format!("a wait of {percent} % (renewing: {renewing})");
                let waiting = thread::spawn(move || hold_after_a_wait(waiter, hold, &what));
                thread::sleep(EXPIRE * percent / 100);
                holder.release().unwrap();
                if let Err(panic) = waiting.join() {
                    std::panic::resume_unwind(panic);
                }
            });
        }
    });
}

mod one_server {
    use super::*;
    use crate::support::RedisServer;

    #[test]
    fn a_renewing_holder_keeps_a_lock_it_waited_for() {
        let server = RedisServer::start();
        waits_of_every_length(&server.client(), "renewing", true);
    }

    #[test]
    fn a_holder_that_does_not_renew_keeps_a_lock_it_waited_for_its_whole_expiry() {
        let server = RedisServer::start();
        waits_of_every_length(&server.client(), "plain", false);
    }
}

mod quorum {
    use super::*;
    use crate::support::servers;
    use crate::topology::quorum::quorum;

    #[test]
    fn a_renewing_holder_keeps_a_lock_it_waited_for() {
        let servers = servers(3);
        waits_of_every_length(&quorum(&servers), "renewing", true);
    }

    #[test]
    fn a_holder_that_does_not_renew_keeps_a_lock_it_waited_for_its_whole_expiry() {
        let servers = servers(3);
        waits_of_every_length(&quorum(&servers), "plain", false);
    }
}

#[cfg(feature = "cluster")]
mod cluster {
    use super::*;
    use crate::support::RedisCluster;

    #[test]
    fn a_renewing_holder_keeps_a_lock_it_waited_for() {
        let cluster = RedisCluster::shared();
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        waits_of_every_length(&client, "lease-renewing", true);
    }

    #[test]
    fn a_holder_that_does_not_renew_keeps_a_lock_it_waited_for_its_whole_expiry() {
        let cluster = RedisCluster::shared();
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        waits_of_every_length(&client, "lease-plain", false);
    }
}

#[cfg(feature = "sentinel")]
mod sentinel {
    use super::*;
    use crate::support::SentinelSet;
    use redis_blpop_lock::Sentinel;

    #[test]
    fn a_renewing_holder_keeps_a_lock_it_waited_for() {
        let set = SentinelSet::start();
        let sentinel = Sentinel::new(set.sentinel_urls(), set.service()).unwrap();
        waits_of_every_length(&sentinel, "renewing", true);
    }
}

#[cfg(feature = "tokio")]
mod async_api {
    use std::time::{Duration, Instant};

    use redis_blpop_lock::{aio, Backend};

    use super::{EXPIRE, PLAIN_HOLD, RENEWING_HOLD, WAITS};
    use crate::support::{ms, secs, RedisServer};

    /// [`super::hold_after_a_wait`], in tasks.
    async fn hold_after_a_wait(waiter: aio::Lock, hold: Duration, what: String) {
        assert!(
            waiter.acquire_timeout(secs(30)).await.unwrap(),
            "{what}: not acquired"
        );
        let granted = Instant::now();
        while granted.elapsed() < hold {
            assert!(
                !waiter.lost(),
                "{what}: lost() turned true {:?} after the grant",
                granted.elapsed()
            );
            tokio::time::sleep(ms(10)).await;
        }
        let holder = waiter.holder().await.unwrap().map(|h| h.id);
        assert_eq!(holder.as_deref(), Some(waiter.id()), "{what}: key not ours");
        waiter.release().await.unwrap();
    }

    async fn waits_of_every_length(backend: &impl Backend, prefix: &str, renewing: bool) {
        let hold = if renewing { RENEWING_HOLD } else { PLAIN_HOLD };
        let mut waits = Vec::new();
        for percent in WAITS {
            let name = format!("{prefix}-{percent}");
            let holder = aio::Lock::builder(backend, &name)
                .expire(secs(30))
                .build()
                .unwrap();
            holder.acquire().await.unwrap();
            let waiter = aio::Lock::builder(backend, &name)
                .expire(EXPIRE)
                .auto_renewal(renewing)
                .build()
                .unwrap();
            let what = format!("a wait of {percent} % (renewing: {renewing})");
            let waiting = tokio::spawn(hold_after_a_wait(waiter, hold, what));
            waits.push(tokio::spawn(async move {
                tokio::time::sleep(EXPIRE * percent / 100).await;
                holder.release().await.unwrap();
                waiting.await.unwrap();
            }));
        }
        for wait in waits {
            wait.await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewing_holder_keeps_a_lock_it_waited_for() {
        let server = RedisServer::start();
        waits_of_every_length(&server.client(), "renewing", true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_that_does_not_renew_keeps_a_lock_it_waited_for_its_whole_expiry() {
        let server = RedisServer::start();
        waits_of_every_length(&server.client(), "plain", false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_quorum_a_renewing_holder_keeps_a_lock_it_waited_for() {
        let servers = crate::support::servers(3);
        waits_of_every_length(&crate::topology::quorum::quorum(&servers), "renewing", true).await;
    }

    #[cfg(feature = "cluster")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_a_renewing_holder_keeps_a_lock_it_waited_for() {
        let cluster = crate::support::RedisCluster::shared();
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        waits_of_every_length(&client, "lease-async-renewing", true).await;
    }

    #[cfg(feature = "sentinel")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn behind_sentinel_a_renewing_holder_keeps_a_lock_it_waited_for() {
        let set = crate::support::SentinelSet::start();
        let sentinel = redis_blpop_lock::Sentinel::new(set.sentinel_urls(), set.service()).unwrap();
        waits_of_every_length(&sentinel, "renewing", true).await;
    }
}

#[cfg(feature = "cli")]
mod cli {
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use crate::support::{ms, RedisServer};

    fn run(server: &RedisServer, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
        cmd.arg("--url")
            .arg(server.url())
            .arg("run")
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// The case: a run that queued for 40 % of its expiry, then works past what was
    /// left of it counted from the start of the wait, is renewed, not killed as if it had
    /// lost the lock.
    #[test]
    fn a_run_that_queued_for_part_of_its_expiry_is_not_killed_as_having_lost_it() {
        let server = RedisServer::start();
        let mut first = run(&server, &["job", "--", "sleep", "1.3"])
            .spawn()
            .unwrap();
        // The first run holds the lock before the second starts waiting.
        crate::support::eventually(crate::support::secs(30), "the first run to hold", || {
            redis::Commands::exists::<_, bool>(&mut server.conn(), "lock:job").unwrap()
        });
        let started = Instant::now();
        let second = run(&server, &["job", "--expire", "3", "--", "sleep", "2.5"])
            .output()
            .unwrap();
        assert!(first.wait().unwrap().success());
        assert!(
            second.status.success(),
            "the second run failed after {:?}: {:?} {}",
            started.elapsed(),
            second.status,
            String::from_utf8_lossy(&second.stderr)
        );
        assert!(started.elapsed() > ms(3000), "the second run did not wait");
    }
}
