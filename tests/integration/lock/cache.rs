//! Dogpile protection: a missing value is computed once however many callers miss it at once,
//! failures and panics are not cached and free the lock, a dead computing worker blocks the key
//! only until its lock expires, and stale values are served while one worker refreshes them.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Cache, Error};

use crate::support::{eventually, ms, secs, ChildProcess, RedisServer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Misses key `args[0]` with a lock expiry of `args[1]` ms, says so from inside the
/// computation, and then computes until it is killed (or told to finish on stdin).
pub fn compute_until_killed(client: &redis::Client, args: &[String]) {
    let expire = ms(args[1].parse().unwrap());
    let cache = Cache::new(client).unwrap().lock_expire(expire);
    let value: Result<String, BoxError> = cache.get_or_set(&args[0], secs(60), || {
        println!("computing");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        Ok("child".to_string())
    });
    println!("done {value:?}");
}

/// Runs `call` on `n` threads released together, and returns what each returned.
fn all_at_once<T: Send>(n: usize, call: impl Fn() -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    thread::scope(|s| {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    call()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// Stores `old` for `key` through `get_or_revalidate` and waits until it has gone stale.
fn stale_value(server: &RedisServer, cache: &Cache, key: &str) {
    let stored: String = cache
        .get_or_revalidate(key, ms(100), secs(60), || Ok::<_, Error>("old".to_string()))
        .unwrap();
    assert_eq!(stored, "old");
    let mut conn = server.conn();
    let marker = format!("{key}:fresh");
    eventually(secs(5), "the value to go stale", || {
        !conn.exists::<_, bool>(&marker).unwrap()
    });
}

#[test]
fn a_hit_returns_the_cached_value_without_computing() {
    let server = RedisServer::start();
    let client = server.client();
    let _: () = server.conn().set("k", "cached").unwrap();
    let cache = Cache::new(&client).unwrap();
    let value: String = cache
        .get_or_set("k", secs(60), || -> Result<String, Error> {
            panic!("computed on a hit")
        })
        .unwrap();
    assert_eq!(value, "cached");
}

#[test]
fn a_miss_stores_the_value_with_its_ttl() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let value: i64 = cache
        .get_or_set("k", secs(60), || Ok::<_, Error>(42))
        .unwrap();
    assert_eq!(value, 42);
    let mut conn = server.conn();
    assert_eq!(conn.get::<_, i64>("k").unwrap(), 42);
    let pttl: i64 = conn.pttl("k").unwrap();
    assert!(pttl > 55_000 && pttl <= 60_000, "pttl {pttl}");
}

#[test]
fn the_lock_is_lock_get_or_set_key_while_computing() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let mut conn = server.conn();
    let value: String = cache
        .get_or_set("k", secs(60), || {
            let pttl: i64 = conn.pttl("lock:get_or_set:k").unwrap();
            // Positive: the key exists and has an expiry, so a crash cannot block it forever.
            assert!(pttl > 0 && pttl <= 30_000, "lock pttl {pttl}");
            Ok::<_, Error>("v".to_string())
        })
        .unwrap();
    assert_eq!(value, "v");
    assert!(!conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
}

#[test]
fn the_prefix_goes_on_value_keys_only() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap().prefix("cache:");
    let mut conn = server.conn();
    let _: String = cache
        .get_or_set("k", secs(60), || {
            assert!(conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
            Ok::<_, Error>("v".to_string())
        })
        .unwrap();
    assert_eq!(conn.get::<_, String>("cache:k").unwrap(), "v");
    assert!(!conn.exists::<_, bool>("k").unwrap());
}

#[test]
fn sixty_four_concurrent_misses_compute_once() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let calls = AtomicUsize::new(0);
    let values: Vec<String> = all_at_once(64, || {
        cache
            .get_or_set("k", secs(60), || {
                calls.fetch_add(1, Ordering::SeqCst);
                thread::sleep(ms(200));
                Ok::<_, Error>("computed".to_string())
            })
            .unwrap()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(values.len(), 64);
    assert!(values.iter().all(|v| v == "computed"), "{values:?}");
}

#[test]
fn a_failed_computation_is_returned_and_not_cached() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let mut conn = server.conn();
    let failed: Result<String, BoxError> =
        cache.get_or_set("k", secs(60), || Err("database down".into()));
    assert_eq!(failed.unwrap_err().to_string(), "database down");
    assert!(!conn.exists::<_, bool>("k").unwrap());
    assert!(!conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
    let mut computed = false;
    let value: String = cache
        .get_or_set("k", secs(60), || {
            computed = true;
            Ok::<_, BoxError>("v".to_string())
        })
        .unwrap();
    assert!(computed);
    assert_eq!(value, "v");
}

#[test]
fn waiters_behind_a_failed_computation_get_an_error_or_a_later_success() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let calls = AtomicUsize::new(0);
    let results: Vec<Result<String, String>> = all_at_once(16, || {
        cache
            .get_or_set("k", secs(60), || {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                thread::sleep(ms(200));
                if call == 0 {
                    Err::<String, BoxError>("first try failed".into())
                } else {
                    Ok(format!("computed by call {call}"))
                }
            })
            .map_err(|e| e.to_string())
    });
    // The failure reached only the caller whose computation failed; the next waiter
    // computed, and everyone after it read that value.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors, ["first try failed"]);
    let successes = results.iter().filter_map(|r| r.as_ref().ok());
    assert!(successes.clone().all(|v| v == "computed by call 1"));
    assert_eq!(successes.count(), 15);
}

#[test]
fn a_panic_in_the_closure_releases_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let mut conn = server.conn();
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| {
        cache.get_or_set("k", secs(60), || -> Result<String, Error> {
            panic!("computation panicked")
        })
    }));
    assert!(unwound.is_err());
    assert!(!conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
    assert!(!conn.exists::<_, bool>("k").unwrap());
    let value: String = cache
        .get_or_set("k", secs(60), || Ok::<_, Error>("v".to_string()))
        .unwrap();
    assert_eq!(value, "v");
}

#[test]
fn a_killed_computing_worker_blocks_the_key_only_until_its_lock_expires() {
    let server = RedisServer::start();
    let client = server.client();
    let mut worker = ChildProcess::spawn("lock::cache::compute", &server.url(), &["k", "1000"]);
    worker.expect_line("computing");
    worker.child.kill().unwrap();
    let mut conn = server.conn();
    let pttl: i64 = conn.pttl("lock:get_or_set:k").unwrap();
    assert!(
        pttl > 0 && pttl <= 1000,
        "the dead worker's lock pttl {pttl}"
    );
    let started = Instant::now();
    let cache = Cache::new(&client).unwrap();
    let value: String = cache
        .get_or_set("k", secs(60), || Ok::<_, Error>("parent".to_string()))
        .unwrap();
    let took = started.elapsed();
    assert_eq!(value, "parent");
    assert!(took < secs(10), "took {took:?}");
}

#[test]
fn a_missing_value_with_revalidate_is_computed_once_while_others_wait() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let values: Vec<String> = all_at_once(16, || {
        let calls = Arc::clone(&calls);
        cache
            .get_or_revalidate("k", secs(30), secs(60), move || {
                calls.fetch_add(1, Ordering::SeqCst);
                thread::sleep(ms(200));
                Ok::<_, Error>("computed".to_string())
            })
            .unwrap()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(values.iter().all(|v| v == "computed"), "{values:?}");
    let mut conn = server.conn();
    let value_pttl: i64 = conn.pttl("k").unwrap();
    let fresh_pttl: i64 = conn.pttl("k:fresh").unwrap();
    assert!(value_pttl > 55_000 && value_pttl <= 60_000, "{value_pttl}");
    assert!(fresh_pttl > 25_000 && fresh_pttl <= 30_000, "{fresh_pttl}");
}

#[test]
fn sixty_four_readers_of_a_stale_value_get_it_at_once_while_one_refreshes() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    stale_value(&server, &cache, "k");
    let calls = Arc::new(AtomicUsize::new(0));
    let results: Vec<(String, Duration)> = all_at_once(64, || {
        let calls = Arc::clone(&calls);
        let started = Instant::now();
        let value: String = cache
            .get_or_revalidate("k", secs(30), secs(60), move || {
                calls.fetch_add(1, Ordering::SeqCst);
                thread::sleep(secs(2));
                Ok::<_, Error>("new".to_string())
            })
            .unwrap();
        (value, started.elapsed())
    });
    for (value, took) in &results {
        assert_eq!(value, "old");
        assert!(*took < secs(1), "a reader waited {took:?} for the refresh");
    }
    let mut conn = server.conn();
    eventually(secs(10), "the refreshed value", || {
        conn.get::<_, String>("k").unwrap() == "new"
    });
    eventually(secs(5), "the refresh lock's release", || {
        !conn.exists::<_, bool>("lock:get_or_set:k").unwrap()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(conn.exists::<_, bool>("k:fresh").unwrap());
}

#[test]
fn a_failed_background_refresh_keeps_the_stale_value_and_frees_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    stale_value(&server, &cache, "k");
    let value: String = cache
        .get_or_revalidate("k", secs(30), secs(60), || {
            Err::<String, BoxError>("database down".into())
        })
        .unwrap();
    assert_eq!(value, "old");
    let mut conn = server.conn();
    eventually(secs(5), "the refresh lock's release", || {
        !conn.exists::<_, bool>("lock:get_or_set:k").unwrap()
    });
    assert_eq!(conn.get::<_, String>("k").unwrap(), "old");
    assert!(!conn.exists::<_, bool>("k:fresh").unwrap());
    // Still stale, so the next reader starts another refresh.
    let value: String = cache
        .get_or_revalidate("k", secs(30), secs(60), || Ok::<_, BoxError>("new".into()))
        .unwrap();
    assert_eq!(value, "old");
    eventually(secs(5), "the refreshed value", || {
        conn.get::<_, String>("k").unwrap() == "new"
    });
}

#[test]
fn a_panic_in_a_background_refresh_frees_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    stale_value(&server, &cache, "k");
    let value: String = cache
        .get_or_revalidate("k", secs(30), secs(60), || -> Result<String, Error> {
            panic!("refresh panicked")
        })
        .unwrap();
    assert_eq!(value, "old");
    let mut conn = server.conn();
    eventually(secs(5), "the refresh lock's release", || {
        !conn.exists::<_, bool>("lock:get_or_set:k").unwrap()
    });
    assert_eq!(conn.get::<_, String>("k").unwrap(), "old");
}

#[test]
fn keep_for_shorter_than_fresh_for_is_an_invalid_argument() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let result: Result<String, Error> =
        cache.get_or_revalidate("k", secs(60), secs(30), || panic!("computed"));
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{result:?}"
    );
}

#[test]
fn a_value_of_several_redis_arguments_is_an_invalid_argument_and_not_stored() {
    let server = RedisServer::start();
    let client = server.client();
    let cache = Cache::new(&client).unwrap();
    let result: Result<Vec<String>, Error> =
        cache.get_or_set("k", secs(60), || Ok(vec!["a".to_string(), "b".to_string()]));
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{result:?}"
    );
    let mut conn = server.conn();
    assert!(!conn.exists::<_, bool>("k").unwrap());
    assert!(!conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
}
