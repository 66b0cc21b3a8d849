//! The lock's behaviour on one server, one process: python-redis-lock's own suite, in Rust.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{reset_all, with_lock, Error, Lock};

use crate::support::{eventually, ms, RedisServer};

#[test]
fn try_acquire_fails_while_another_owner_holds_it() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    let other = Lock::new(&client, "l").unwrap();
    assert!(holder.try_acquire().unwrap());
    assert!(!other.try_acquire().unwrap());
    assert!(other.try_lock().unwrap().is_none());
}

#[test]
fn acquire_timeout_fails_while_held() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    let other = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    assert!(!other.acquire_timeout(ms(200)).unwrap());
    assert!(other.try_lock_for(ms(50)).unwrap().is_none());
}

#[test]
fn acquire_timeout_succeeds_once_the_holders_expiry_passes() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l").expire(ms(300)).build().unwrap();
    let other = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    assert!(other.acquire_timeout(Duration::from_secs(20)).unwrap());
    assert_eq!(other.owner_id().unwrap().as_deref(), Some(other.id()));
}

#[test]
fn a_zero_timeout_is_one_try() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    assert!(lock.acquire_timeout(Duration::ZERO).unwrap());
    let other = Lock::new(&client, "l").unwrap();
    assert!(!other.acquire_timeout(Duration::ZERO).unwrap());
}

#[test]
fn the_largest_timeout_is_accepted() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l").expire(ms(100)).build().unwrap();
    assert!(lock.acquire_timeout(Duration::MAX).unwrap());
    let other = Lock::new(&client, "l").unwrap();
    assert!(other.try_lock_for(Duration::MAX).unwrap().is_some());
}

#[test]
fn an_expiring_lock_has_a_ttl_of_at_most_its_expiry() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(Duration::from_secs(10))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
}

#[test]
fn a_lock_without_expiry_has_no_ttl() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    lock.acquire().unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert_eq!(pttl, -1);
}

#[test]
fn auto_renewal_keeps_the_key_past_its_expiry() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    std::thread::sleep(ms(1200));
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    assert!(!lock.lost());
    lock.release().unwrap();
}

#[test]
fn auto_renewal_stops_on_release() {
    let server = RedisServer::start();
    let client = server.client();
    let renewed = Lock::builder(&client, "l")
        .id("shared-id")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    renewed.acquire().unwrap();
    renewed.release().unwrap();
    // A second handle with the same id takes the lock for 10 s; a renewal thread still running
    // for the first handle would cut that back to 300 ms.
    let successor = Lock::builder(&client, "l")
        .id("shared-id")
        .expire(Duration::from_secs(10))
        .build()
        .unwrap();
    successor.acquire().unwrap();
    std::thread::sleep(ms(1000));
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(
        pttl > 8_000,
        "pttl {pttl}: the old renewal thread is still extending"
    );
}

#[test]
fn auto_renewal_stops_when_the_handle_is_dropped() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    drop(lock);
    std::thread::sleep(ms(1000));
    let exists: bool = server.conn().exists("lock:l").unwrap();
    assert!(!exists, "the lock outlived its dropped handle");
}

#[test]
fn extend_sets_a_new_expiry() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l").expire(ms(500)).build().unwrap();
    lock.acquire().unwrap();
    lock.extend(Some(Duration::from_secs(100))).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

#[test]
fn extend_without_an_argument_uses_the_configured_expiry() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(Duration::from_secs(100))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let _: () = server.conn().pexpire("lock:l", 1_000).unwrap();
    lock.extend(None).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

#[test]
fn extend_works_from_a_second_handle_with_the_same_id() {
    let server = RedisServer::start();
    let client = server.client();
    let first = Lock::builder(&client, "l")
        .id("me")
        .expire(ms(500))
        .build()
        .unwrap();
    let second = Lock::builder(&client, "l")
        .id("me")
        .expire(ms(500))
        .build()
        .unwrap();
    first.acquire().unwrap();
    second.extend(Some(Duration::from_secs(100))).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

#[test]
fn extend_is_refused_for_a_handle_with_another_id() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l")
        .expire(ms(5000))
        .build()
        .unwrap();
    let other = Lock::builder(&client, "l")
        .expire(ms(5000))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    assert!(matches!(
        other.extend(Some(Duration::from_secs(100))),
        Err(Error::NotAcquired { .. })
    ));
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl <= 5_000, "pttl {pttl}");
}

#[test]
fn extend_of_a_lock_without_expiry_is_not_expirable() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    lock.acquire().unwrap();
    assert!(matches!(
        lock.extend(Some(ms(100))),
        Err(Error::NotExpirable { .. })
    ));
}

#[test]
fn extend_with_no_expiry_anywhere_is_an_invalid_argument() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    lock.acquire().unwrap();
    assert!(matches!(lock.extend(None), Err(Error::InvalidArgument(_))));
}

#[test]
fn acquiring_twice_is_already_acquired() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    lock.acquire().unwrap();
    assert!(matches!(lock.acquire(), Err(Error::AlreadyAcquired { .. })));
    assert!(matches!(
        lock.try_acquire(),
        Err(Error::AlreadyAcquired { .. })
    ));
}

#[test]
fn acquiring_with_the_owners_id_from_another_handle_is_already_acquired() {
    let server = RedisServer::start();
    let client = server.client();
    let first = Lock::builder(&client, "l").id("me").build().unwrap();
    let second = Lock::builder(&client, "l").id("me").build().unwrap();
    first.acquire().unwrap();
    assert!(matches!(
        second.acquire_timeout(ms(100)),
        Err(Error::AlreadyAcquired { .. })
    ));
}

#[test]
fn releasing_a_lock_never_acquired_is_not_acquired() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    assert!(matches!(lock.release(), Err(Error::NotAcquired { .. })));
}

#[test]
fn releasing_another_owners_lock_changes_nothing() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    let other = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    assert!(matches!(other.release(), Err(Error::NotAcquired { .. })));
    assert_eq!(holder.owner_id().unwrap().as_deref(), Some(holder.id()));
    let signal: bool = server.conn().exists("lock-signal:l").unwrap();
    assert!(!signal, "a refused release must not wake anyone");
}

#[test]
fn a_handle_with_the_owners_id_may_release() {
    let server = RedisServer::start();
    let client = server.client();
    let first = Lock::builder(&client, "l").id("me").build().unwrap();
    let second = Lock::builder(&client, "l").id("me").build().unwrap();
    first.acquire().unwrap();
    second.release().unwrap();
    assert!(!first.locked().unwrap());
}

#[test]
fn reset_deletes_anyones_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    let operator = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    assert!(operator.reset().unwrap());
    assert!(!holder.locked().unwrap());
    assert!(!operator.reset().unwrap(), "nothing left to reset");
}

#[test]
fn reset_all_deletes_every_lock_and_counts_them() {
    let server = RedisServer::start();
    let client = server.client();
    let locks: Vec<Lock> = (0..2500)
        .map(|i| Lock::new(&client, format!("l{i}")).unwrap())
        .collect();
    for lock in &locks {
        lock.acquire().unwrap();
    }
    let _: () = server.conn().set("unrelated", "x").unwrap();
    let _: () = server.conn().rpush("lock:not-a-lock", "x").unwrap();
    assert_eq!(reset_all(&client).unwrap(), 2500);
    assert!(locks.iter().all(|l| !l.locked().unwrap()));
    let mut conn = server.conn();
    assert!(conn.exists::<_, bool>("unrelated").unwrap());
    assert!(conn.exists::<_, bool>("lock:not-a-lock").unwrap());
}

#[test]
fn a_given_owner_id_is_what_redis_holds() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l").id("worker-7").build().unwrap();
    assert_eq!(lock.id(), "worker-7");
    lock.acquire().unwrap();
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some("worker-7"));
    let raw: String = server.conn().get("lock:l").unwrap();
    assert_eq!(raw, "worker-7");
}

#[test]
fn a_generated_owner_id_is_24_base64_characters() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    let id = lock.id().to_string();
    assert_eq!(id.len(), 24);
    assert!(id
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/'));
    assert_ne!(Lock::new(&client, "l").unwrap().id(), id);
    lock.acquire().unwrap();
    assert_eq!(lock.owner_id().unwrap(), Some(id));
}

#[test]
fn owner_id_is_none_when_free() {
    let server = RedisServer::start();
    let client = server.client();
    assert_eq!(Lock::new(&client, "l").unwrap().owner_id().unwrap(), None);
}

#[test]
fn a_release_with_no_waiter_leaves_one_signal_that_expires() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .signal_expire(ms(300))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    lock.release().unwrap();
    let mut conn = server.conn();
    assert_eq!(conn.llen::<_, usize>("lock-signal:l").unwrap(), 1);
    let pttl: i64 = conn.pttl("lock-signal:l").unwrap();
    assert!(pttl > 0 && pttl <= 300, "pttl {pttl}");
    std::thread::sleep(ms(600));
    assert!(!conn.exists::<_, bool>("lock-signal:l").unwrap());
}

#[test]
fn locked_is_true_for_any_owner() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    let observer = Lock::new(&client, "l").unwrap();
    assert!(!observer.locked().unwrap());
    holder.acquire().unwrap();
    assert!(observer.locked().unwrap());
    assert!(holder.locked().unwrap());
}

#[test]
fn bad_settings_are_refused_at_build_time() {
    let server = RedisServer::start();
    let client = server.client();
    let invalid = |r: Result<Lock, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(Lock::new(&client, "")));
    assert!(invalid(
        Lock::builder(&client, "l").expire(Duration::ZERO).build()
    ));
    assert!(invalid(
        Lock::builder(&client, "l").expire(Duration::MAX).build()
    ));
    assert!(invalid(
        Lock::builder(&client, "l")
            .signal_expire(Duration::ZERO)
            .build()
    ));
    assert!(invalid(
        Lock::builder(&client, "l")
            .signal_expire(Duration::MAX)
            .build()
    ));
    assert!(invalid(
        Lock::builder(&client, "l").auto_renewal(true).build()
    ));
    assert!(invalid(Lock::builder(&client, "l").id("").build()));
}

#[test]
fn a_sub_millisecond_expiry_rounds_up() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(Duration::from_nanos(1))
        .build()
        .unwrap();
    assert!(lock.try_acquire().unwrap());
    assert!(matches!(
        lock.extend(Some(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_guard_releases_on_drop() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    {
        let guard = lock.lock().unwrap();
        assert!(!guard.lost());
        assert!(lock.locked().unwrap());
    }
    assert!(!lock.locked().unwrap());
}

#[test]
fn with_lock_returns_the_closures_value_and_releases() {
    let server = RedisServer::start();
    let client = server.client();
    assert_eq!(with_lock(&client, "l", || 42).unwrap(), 42);
    assert!(!Lock::new(&client, "l").unwrap().locked().unwrap());
}

#[test]
fn with_lock_releases_when_the_closure_panics() {
    let server = RedisServer::start();
    let client = server.client();
    let result = std::panic::catch_unwind(|| with_lock(&client, "l", || panic!("boom")));
    assert!(result.is_err());
    assert!(!Lock::new(&client, "l").unwrap().locked().unwrap());
}

#[test]
fn with_lock_in_a_loop_reuses_connections() {
    let server = RedisServer::start();
    let client = server.client();
    for i in 0..200 {
        assert_eq!(with_lock(&client, "l", || i).unwrap(), i);
    }
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.conn())
        .unwrap();
    let connections: u64 = info.get("total_connections_received").unwrap();
    assert!(connections < 10, "{connections} connections for 200 calls");
}

#[test]
fn an_expiring_lock_held_past_its_expiry_is_lost() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l").expire(ms(200)).build().unwrap();
    let guard = lock.lock().unwrap();
    assert!(!guard.lost());
    std::thread::sleep(ms(400));
    assert!(guard.lost());
    assert!(matches!(guard.unlock(), Err(Error::NotAcquired { .. })));
}

#[test]
fn a_renewed_lock_taken_away_is_reported_lost() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let _: () = server.conn().set("lock:l", "someone-else").unwrap();
    eventually(
        Duration::from_secs(10),
        "the renewal to find the key taken",
        || lock.lost(),
    );
    assert!(matches!(lock.release(), Err(Error::NotAcquired { .. })));
}

#[test]
fn a_lost_lock_can_be_acquired_again() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "l").expire(ms(100)).build().unwrap();
    lock.acquire().unwrap();
    std::thread::sleep(ms(300));
    assert!(lock.lost());
    assert!(lock.try_acquire().unwrap());
    assert!(!lock.lost());
}

#[test]
fn fencing_tokens_grow_with_every_acquisition() {
    let server = RedisServer::start();
    let client = server.client();
    let a = Lock::builder(&client, "l").fencing(true).build().unwrap();
    let b = Lock::builder(&client, "l").fencing(true).build().unwrap();
    let mut tokens = Vec::new();
    for lock in [&a, &b, &a, &b] {
        let guard = lock.lock().unwrap();
        tokens.push(guard.fencing_token().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(a.fencing_token(), None, "no token while not held");
}

#[test]
fn a_fencing_waiter_gets_a_greater_token_than_the_holder() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l").fencing(true).build().unwrap();
    let guard = holder.lock().unwrap();
    let first = guard.fencing_token().unwrap();
    let waiter_client = client.clone();
    let waiter = std::thread::spawn(move || {
        let lock = Lock::builder(&waiter_client, "l")
            .fencing(true)
            .build()
            .unwrap();
        let guard = lock.lock().unwrap();
        guard.fencing_token()
    });
    std::thread::sleep(ms(200));
    drop(guard);
    let second = waiter.join().unwrap().unwrap();
    assert!(second > first, "{second} after {first}");
}

#[test]
fn without_fencing_there_is_no_token() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::new(&client, "l").unwrap();
    let guard = lock.lock().unwrap();
    assert_eq!(guard.fencing_token(), None);
    assert!(!server.conn().exists::<_, bool>("lock-fence:l").unwrap());
}
