//! A server used as a cache too: its `maxmemory-policy` may evict a lock's keys. Such a server
//! is warned about, refused on request, and a holder whose key was evicted learns it at its
//! next renewal.

use redis::Commands;
use redis_blpop_lock::{inspect, Error, Lock, Semaphore};

use crate::support::{eventually, secs, RedisServer};

/// A server of 8 MB that evicts under `policy`.
fn evicting(policy: &str) -> RedisServer {
    RedisServer::start_with(&["--maxmemory", "8mb", "--maxmemory-policy", policy])
}

/// Writes 25 MB of cache values from a connection of its own, in 100 KB values.
fn fill_the_cache(server: &RedisServer) {
    let mut conn = server.conn();
    let value = vec![b'x'; 100 * 1024];
    for batch in 0..25 {
        let mut pipe = redis::pipe();
        for i in 0..10 {
            pipe.set(format!("cache:{batch}:{i}"), &value).ignore();
        }
        let () = pipe.query(&mut conn).unwrap();
    }
}

fn refused(outcome: Result<bool, Error>, policy: &str) -> String {
    match outcome {
        Err(Error::Unsupported(why)) => {
            assert!(why.contains(&format!("maxmemory-policy {policy}")), "{why}");
            assert!(why.contains("noeviction"), "{why}");
            why
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_holder_whose_key_is_evicted_learns_it_at_its_next_renewal_and_another_takes_it() {
    let server = evicting("allkeys-lru");
    let client = server.client();
    let expire = secs(6);
    let holder = Lock::builder(&client, "job")
        .expire(expire)
        .auto_renewal(true)
        .build()
        .unwrap();
    holder.acquire().unwrap();
    // Held a while (LRU clocks count whole seconds), so its key is older than the values.
    std::thread::sleep(secs(2));
    fill_the_cache(&server);
    let exists: bool = server.conn().exists("lock:job").unwrap();
    assert!(!exists, "the lock's key was not evicted");
    assert!(!holder.lost(), "lost() before a renewal could tell");
    // Renewals come every third of the expiry: the next one finds the key gone.
    eventually(expire + secs(5), "lost() at the next renewal", || {
        holder.lost()
    });
    let next = Lock::new(&client, "job").unwrap();
    assert!(
        next.try_acquire().unwrap(),
        "a second acquirer did not get it"
    );
}

#[test]
fn a_server_that_can_evict_is_refused_when_the_builder_asks_and_nothing_is_taken() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let server = evicting(policy);
        let client = server.client();
        let lock = Lock::builder(&client, "job")
            .refuse_evicting(true)
            .build()
            .unwrap();
        refused(lock.try_acquire(), policy);
        refused(lock.acquire().map(|()| true), policy);
        let exists: bool = server.conn().exists("lock:job").unwrap();
        assert!(!exists, "{policy}: the lock was taken");
    }
}

#[test]
fn a_semaphore_is_refused_too() {
    let server = evicting("volatile-lru");
    let permits = Semaphore::builder(&server.client(), "pool", 2)
        .refuse_evicting(true)
        .build()
        .unwrap();
    let why = refused(permits.try_acquire().map(|p| p.is_some()), "volatile-lru");
    assert!(why.contains("locks that carry an expiry"), "{why}");
}

#[test]
fn a_server_that_does_not_evict_is_not_refused() {
    let server = RedisServer::start_with(&["--maxmemory", "8mb"]);
    let lock = Lock::builder(&server.client(), "job")
        .refuse_evicting(true)
        .build()
        .unwrap();
    assert!(lock.try_acquire().unwrap());
    assert!(inspect::evicting(&server.client(), secs(5))
        .unwrap()
        .is_empty());
}

#[test]
fn a_server_whose_acl_refuses_info_says_nothing_and_is_not_refused() {
    let server = evicting("allkeys-lru");
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-info",
        ])
        .query(&mut server.conn())
        .unwrap();
    let url = server.url().replace("redis://", "redis://locker:pw@");
    let client = redis::Client::open(url).unwrap();
    let lock = Lock::builder(&client, "job")
        .refuse_evicting(true)
        .build()
        .unwrap();
    assert!(lock.try_acquire().unwrap());
    assert!(inspect::evicting(&client, secs(5)).unwrap().is_empty());
}

#[test]
fn inspect_names_each_server_that_can_evict_and_its_policy() {
    let server = evicting("allkeys-lfu");
    let found = inspect::evicting(&server.client(), secs(5)).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].server, format!("127.0.0.1:{}", server.port));
    assert_eq!(found[0].policy, "allkeys-lfu");
    let warning = found[0].to_string();
    assert!(warning.contains("fencing counters"), "{warning}");
}

#[test]
fn a_quorum_with_one_evicting_server_is_refused() {
    let servers = [
        RedisServer::start(),
        evicting("allkeys-lru"),
        RedisServer::start(),
    ];
    let quorum = redis_blpop_lock::Quorum::new(servers.iter().map(RedisServer::client)).unwrap();
    let lock = Lock::builder(&quorum, "job")
        .expire(secs(10))
        .refuse_evicting(true)
        .build()
        .unwrap();
    let why = refused(lock.try_acquire(), "allkeys-lru");
    assert!(why.contains(&servers[1].port.to_string()), "{why}");
}

#[test]
fn a_fencing_counter_lost_to_eviction_still_gives_a_larger_token() {
    // The token is at least the server's clock in µs, which has moved on since the
    // counter's last grant. A counter that ran ahead of the clock and was then lost is
    // `observe.rs`'s case.
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "ledger")
        .fencing(true)
        .build()
        .unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        tokens.push(lock.lock().unwrap().fencing_token().unwrap());
    }
    let _: () = server.conn().del("lock-fence:ledger").unwrap();
    tokens.push(lock.lock().unwrap().fencing_token().unwrap());
    assert!(tokens.is_sorted_by(|a, b| a < b), "{tokens:?}");
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handle_is_refused_too() {
    let server = evicting("allkeys-random");
    let lock = redis_blpop_lock::aio::Lock::builder(&server.client(), "job")
        .refuse_evicting(true)
        .build()
        .unwrap();
    refused(lock.try_acquire().await, "allkeys-random");
}

#[cfg(feature = "cli")]
mod cli {
    use super::*;
    use crate::cli::commands::{list_json, redis_lock, stderr, stdout};

    #[test]
    fn status_and_list_warn_about_a_server_that_can_evict() {
        let server = evicting("allkeys-lru");
        let port = server.port;
        for command in [&["status", "job"][..], &["list"]] {
            let output = redis_lock(&server).args(command).output().unwrap();
            let text = stderr(&output);
            let line = format!(
                "warning: server 127.0.0.1:{port} evicts keys (maxmemory-policy allkeys-lru)"
            );
            assert!(text.contains(&line), "{command:?}: {text}");
            assert!(text.contains("noeviction"), "{command:?}: {text}");
            assert!(!stdout(&output).contains("warning"), "{command:?}");
        }
        let listed = list_json(redis_lock(&server));
        let entry = &listed.as_array().unwrap()[0];
        assert_eq!(entry["kind"], "evicting");
        assert_eq!(entry["policy"], "allkeys-lru");
        let status = redis_lock(&server)
            .args(["status", "job", "--json"])
            .output()
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(status["evicting"][0]["server"], format!("127.0.0.1:{port}"));
    }

    #[test]
    fn run_on_a_server_that_can_evict_says_so_once_and_runs() {
        let server = evicting("allkeys-lru");
        let output = (redis_lock(&server).args(["run", "--fencing", "job"]))
            .args(["--", "sh", "-c", "echo ran"])
            .output()
            .unwrap();
        assert!(output.status.success());
        assert_eq!(stdout(&output), "ran\n");
        let text = stderr(&output);
        let warning = format!("warning: server 127.0.0.1:{} evicts keys", server.port);
        assert_eq!(text.matches(&warning).count(), 1, "{text}");
        assert!(text.contains("fencing counters"), "{text}");
        // Not for a server that cannot evict.
        let server = RedisServer::start();
        let output = (redis_lock(&server).args(["run", "job"]))
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(stderr(&output), "");
    }

    #[test]
    fn status_says_nothing_of_a_server_that_does_not_evict() {
        let server = RedisServer::start();
        let output = redis_lock(&server)
            .args(["status", "job"])
            .output()
            .unwrap();
        assert_eq!(stderr(&output), "");
        let status = redis_lock(&server)
            .args(["status", "job", "--json"])
            .output()
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(status.get("evicting"), None, "{status}");
    }

    #[test]
    fn run_with_refuse_evicting_runs_nothing_on_a_server_that_can_evict() {
        let server = evicting("volatile-lfu");
        let output = redis_lock(&server)
            .args(["run", "--refuse-evicting", "job", "--", "false"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("volatile-lfu"),
            "{}",
            stderr(&output)
        );
        let exists: bool = server.conn().exists("lock:job").unwrap();
        assert!(!exists);
    }
}
