//! The lock's behaviour on one server, one process: python-redis-lock's own suite, in Rust,
//! run for both APIs (`blocking::` and `aio::`, over [`Api`]); then the blocking API's
//! `with_lock` and `reset_all`.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{reset_all, with_lock, Error, Lock};

use crate::support::{both_apis, eventually, ms, Api, RedisServer};

both_apis!(
    try_acquire_fails_while_another_owner_holds_it,
    acquire_timeout_fails_while_held,
    acquire_timeout_succeeds_once_the_holders_expiry_passes,
    a_zero_timeout_is_one_try,
    the_largest_timeout_is_accepted,
    an_expiring_lock_has_a_ttl_of_at_most_its_expiry,
    a_lock_without_expiry_has_no_ttl,
    auto_renewal_keeps_the_key_past_its_expiry,
    auto_renewal_stops_on_release,
    auto_renewal_stops_when_the_handle_is_dropped,
    extend_sets_a_new_expiry,
    extend_without_an_argument_uses_the_configured_expiry,
    extend_works_from_a_second_handle_with_the_same_id,
    extend_is_refused_for_a_handle_with_another_id,
    extend_of_a_lock_without_expiry_is_not_expirable,
    extend_with_no_expiry_anywhere_is_an_invalid_argument,
    acquiring_twice_is_already_acquired,
    acquiring_with_the_owners_id_from_another_handle_is_already_acquired,
    releasing_a_lock_never_acquired_is_not_acquired,
    releasing_another_owners_lock_changes_nothing,
    a_handle_with_the_owners_id_may_release,
    reset_deletes_anyones_lock,
    a_given_owner_id_is_what_redis_holds,
    a_generated_owner_id_is_24_base64_characters,
    owner_id_is_none_when_free,
    a_release_with_no_waiter_leaves_one_signal_that_expires,
    locked_is_true_for_any_owner,
    bad_settings_are_refused_at_build_time,
    a_sub_millisecond_expiry_rounds_up,
    the_guard_releases_on_drop,
    an_expiring_lock_held_past_its_expiry_is_lost,
    a_renewed_lock_taken_away_is_reported_lost,
    a_lost_lock_can_be_acquired_again,
    fencing_tokens_grow_with_every_acquisition,
    a_fencing_waiter_gets_a_greater_token_than_the_holder,
    without_fencing_there_is_no_token,
);

fn try_acquire_fails_while_another_owner_holds_it<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    let other = A::lock_on(&client, "l").build().unwrap();
    assert!(A::try_acquire_lock(&holder).unwrap());
    assert!(!A::try_acquire_lock(&other).unwrap());
    assert!(A::try_guard(&other).unwrap().is_none());
}

fn acquire_timeout_fails_while_held<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    let other = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&holder).unwrap();
    assert!(!A::acquire_timeout(&other, ms(200)).unwrap());
    assert!(A::try_guard_for(&other, ms(50)).unwrap().is_none());
}

fn acquire_timeout_succeeds_once_the_holders_expiry_passes<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").expire(ms(300)).build().unwrap();
    let other = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&holder).unwrap();
    assert!(A::acquire_timeout(&other, Duration::from_secs(20)).unwrap());
    assert_eq!(A::owner_id(&other).unwrap().as_deref(), Some(other.id()));
}

fn a_zero_timeout_is_one_try<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    assert!(A::acquire_timeout(&lock, Duration::ZERO).unwrap());
    let other = A::lock_on(&client, "l").build().unwrap();
    assert!(!A::acquire_timeout(&other, Duration::ZERO).unwrap());
}

fn the_largest_timeout_is_accepted<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").expire(ms(100)).build().unwrap();
    assert!(A::acquire_timeout(&lock, Duration::MAX).unwrap());
    let other = A::lock_on(&client, "l").build().unwrap();
    assert!(A::try_guard_for(&other, Duration::MAX).unwrap().is_some());
}

fn an_expiring_lock_has_a_ttl_of_at_most_its_expiry<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(Duration::from_secs(10))
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
}

fn a_lock_without_expiry_has_no_ttl<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&lock).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert_eq!(pttl, -1);
}

fn auto_renewal_keeps_the_key_past_its_expiry<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    std::thread::sleep(ms(1200));
    assert_eq!(A::owner_id(&lock).unwrap().as_deref(), Some(lock.id()));
    assert!(!lock.lost());
    A::release_lock(&lock).unwrap();
}

fn auto_renewal_stops_on_release<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let renewed = A::lock_on(&client, "l")
        .id("shared-id")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&renewed).unwrap();
    A::release_lock(&renewed).unwrap();
    // A second handle with the same id takes the lock for 10 s; a renewal thread still running
    // for the first handle would cut that back to 300 ms.
    let successor = A::lock_on(&client, "l")
        .id("shared-id")
        .expire(Duration::from_secs(10))
        .build()
        .unwrap();
    A::acquire_lock(&successor).unwrap();
    std::thread::sleep(ms(1000));
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(
        pttl > 8_000,
        "pttl {pttl}: the old renewal thread is still extending"
    );
}

fn auto_renewal_stops_when_the_handle_is_dropped<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    drop(lock);
    std::thread::sleep(ms(1000));
    let exists: bool = server.conn().exists("lock:l").unwrap();
    assert!(!exists, "the lock outlived its dropped handle");
}

fn extend_sets_a_new_expiry<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").expire(ms(500)).build().unwrap();
    A::acquire_lock(&lock).unwrap();
    A::extend(&lock, Some(Duration::from_secs(100))).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

fn extend_without_an_argument_uses_the_configured_expiry<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(Duration::from_secs(100))
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    let _: () = server.conn().pexpire("lock:l", 1_000).unwrap();
    A::extend(&lock, None).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

fn extend_works_from_a_second_handle_with_the_same_id<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let first = A::lock_on(&client, "l")
        .id("me")
        .expire(ms(500))
        .build()
        .unwrap();
    let second = A::lock_on(&client, "l")
        .id("me")
        .expire(ms(500))
        .build()
        .unwrap();
    A::acquire_lock(&first).unwrap();
    A::extend(&second, Some(Duration::from_secs(100))).unwrap();
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl > 90_000, "pttl {pttl}");
}

fn extend_is_refused_for_a_handle_with_another_id<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").expire(ms(5000)).build().unwrap();
    let other = A::lock_on(&client, "l").expire(ms(5000)).build().unwrap();
    A::acquire_lock(&holder).unwrap();
    assert!(matches!(
        A::extend(&other, Some(Duration::from_secs(100))),
        Err(Error::NotAcquired { .. })
    ));
    let pttl: i64 = server.conn().pttl("lock:l").unwrap();
    assert!(pttl <= 5_000, "pttl {pttl}");
}

fn extend_of_a_lock_without_expiry_is_not_expirable<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&lock).unwrap();
    assert!(matches!(
        A::extend(&lock, Some(ms(100))),
        Err(Error::NotExpirable { .. })
    ));
}

fn extend_with_no_expiry_anywhere_is_an_invalid_argument<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&lock).unwrap();
    assert!(matches!(
        A::extend(&lock, None),
        Err(Error::InvalidArgument(_))
    ));
}

fn acquiring_twice_is_already_acquired<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&lock).unwrap();
    assert!(matches!(
        A::acquire_lock(&lock),
        Err(Error::AlreadyAcquired { .. })
    ));
    assert!(matches!(
        A::try_acquire_lock(&lock),
        Err(Error::AlreadyAcquired { .. })
    ));
}

fn acquiring_with_the_owners_id_from_another_handle_is_already_acquired<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let first = A::lock_on(&client, "l").id("me").build().unwrap();
    let second = A::lock_on(&client, "l").id("me").build().unwrap();
    A::acquire_lock(&first).unwrap();
    assert!(matches!(
        A::acquire_timeout(&second, ms(100)),
        Err(Error::AlreadyAcquired { .. })
    ));
}

fn releasing_a_lock_never_acquired_is_not_acquired<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    assert!(matches!(
        A::release_lock(&lock),
        Err(Error::NotAcquired { .. })
    ));
}

fn releasing_another_owners_lock_changes_nothing<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    let other = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&holder).unwrap();
    assert!(matches!(
        A::release_lock(&other),
        Err(Error::NotAcquired { .. })
    ));
    assert_eq!(A::owner_id(&holder).unwrap().as_deref(), Some(holder.id()));
    let signal: bool = server.conn().exists("lock-signal:l").unwrap();
    assert!(!signal, "a refused release must not wake anyone");
}

fn a_handle_with_the_owners_id_may_release<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let first = A::lock_on(&client, "l").id("me").build().unwrap();
    let second = A::lock_on(&client, "l").id("me").build().unwrap();
    A::acquire_lock(&first).unwrap();
    A::release_lock(&second).unwrap();
    assert!(!A::locked(&first).unwrap());
}

fn reset_deletes_anyones_lock<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    let operator = A::lock_on(&client, "l").build().unwrap();
    A::acquire_lock(&holder).unwrap();
    assert!(A::reset(&operator).unwrap());
    assert!(!A::locked(&holder).unwrap());
    assert!(!A::reset(&operator).unwrap(), "nothing left to reset");
}

fn a_given_owner_id_is_what_redis_holds<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").id("worker-7").build().unwrap();
    assert_eq!(lock.id(), "worker-7");
    A::acquire_lock(&lock).unwrap();
    assert_eq!(A::owner_id(&lock).unwrap().as_deref(), Some("worker-7"));
    let raw: String = server.conn().get("lock:l").unwrap();
    assert_eq!(raw, "worker-7");
}

fn a_generated_owner_id_is_24_base64_characters<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    let id = lock.id().to_string();
    assert_eq!(id.len(), 24);
    assert!(id
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/'));
    assert_ne!(A::lock_on(&client, "l").build().unwrap().id(), id);
    A::acquire_lock(&lock).unwrap();
    assert_eq!(A::owner_id(&lock).unwrap(), Some(id));
}

fn owner_id_is_none_when_free<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    assert_eq!(A::owner_id(&lock).unwrap(), None);
}

fn a_release_with_no_waiter_leaves_one_signal_that_expires<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .signal_expire(ms(300))
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    A::release_lock(&lock).unwrap();
    let mut conn = server.conn();
    assert_eq!(conn.llen::<_, usize>("lock-signal:l").unwrap(), 1);
    let pttl: i64 = conn.pttl("lock-signal:l").unwrap();
    assert!(pttl > 0 && pttl <= 300, "pttl {pttl}");
    std::thread::sleep(ms(600));
    assert!(!conn.exists::<_, bool>("lock-signal:l").unwrap());
}

fn locked_is_true_for_any_owner<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").build().unwrap();
    let observer = A::lock_on(&client, "l").build().unwrap();
    assert!(!A::locked(&observer).unwrap());
    A::acquire_lock(&holder).unwrap();
    assert!(A::locked(&observer).unwrap());
    assert!(A::locked(&holder).unwrap());
}

fn bad_settings_are_refused_at_build_time<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let invalid = |r: Result<redis_blpop_lock::handle::Lock<A>, Error>| {
        matches!(r, Err(Error::InvalidArgument(_)))
    };
    assert!(invalid(A::lock_on(&client, "").build()));
    assert!(invalid(
        A::lock_on(&client, "l").expire(Duration::ZERO).build()
    ));
    assert!(invalid(
        A::lock_on(&client, "l").expire(Duration::MAX).build()
    ));
    assert!(invalid(
        A::lock_on(&client, "l")
            .signal_expire(Duration::ZERO)
            .build()
    ));
    assert!(invalid(
        A::lock_on(&client, "l")
            .signal_expire(Duration::MAX)
            .build()
    ));
    assert!(invalid(A::lock_on(&client, "l").auto_renewal(true).build()));
    assert!(invalid(A::lock_on(&client, "l").id("").build()));
}

fn a_sub_millisecond_expiry_rounds_up<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(Duration::from_nanos(1))
        .build()
        .unwrap();
    assert!(A::try_acquire_lock(&lock).unwrap());
    assert!(matches!(
        A::extend(&lock, Some(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
}

fn the_guard_releases_on_drop<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    {
        let guard = A::guard(&lock).unwrap();
        assert!(!guard.lost());
        assert!(A::locked(&lock).unwrap());
    }
    assert!(!A::locked(&lock).unwrap());
}

fn an_expiring_lock_held_past_its_expiry_is_lost<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").expire(ms(200)).build().unwrap();
    let guard = A::guard(&lock).unwrap();
    assert!(!guard.lost());
    std::thread::sleep(ms(400));
    assert!(guard.lost());
    assert!(matches!(A::unlock(guard), Err(Error::NotAcquired { .. })));
}

fn a_renewed_lock_taken_away_is_reported_lost<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l")
        .expire(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    A::acquire_lock(&lock).unwrap();
    let _: () = server.conn().set("lock:l", "someone-else").unwrap();
    eventually(
        Duration::from_secs(10),
        "the renewal to find the key taken",
        || lock.lost(),
    );
    assert!(matches!(
        A::release_lock(&lock),
        Err(Error::NotAcquired { .. })
    ));
}

fn a_lost_lock_can_be_acquired_again<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").expire(ms(100)).build().unwrap();
    A::acquire_lock(&lock).unwrap();
    std::thread::sleep(ms(300));
    assert!(lock.lost());
    assert!(A::try_acquire_lock(&lock).unwrap());
    assert!(!lock.lost());
}

fn fencing_tokens_grow_with_every_acquisition<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let a = A::lock_on(&client, "l").fencing(true).build().unwrap();
    let b = A::lock_on(&client, "l").fencing(true).build().unwrap();
    let mut tokens = Vec::new();
    for lock in [&a, &b, &a, &b] {
        let guard = A::guard(lock).unwrap();
        tokens.push(guard.fencing_token().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(a.fencing_token(), None, "no token while not held");
}

fn a_fencing_waiter_gets_a_greater_token_than_the_holder<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::lock_on(&client, "l").fencing(true).build().unwrap();
    let guard = A::guard(&holder).unwrap();
    let first = guard.fencing_token().unwrap();
    let waiter_client = client.clone();
    let waiter = std::thread::spawn(move || {
        let lock = A::lock_on(&waiter_client, "l")
            .fencing(true)
            .build()
            .unwrap();
        let guard = A::guard(&lock).unwrap();
        guard.fencing_token()
    });
    std::thread::sleep(ms(200));
    drop(guard);
    let second = waiter.join().unwrap().unwrap();
    assert!(second > first, "{second} after {first}");
}

fn without_fencing_there_is_no_token<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = A::lock_on(&client, "l").build().unwrap();
    let guard = A::guard(&lock).unwrap();
    assert_eq!(guard.fencing_token(), None);
    assert!(!server.conn().exists::<_, bool>("lock-fence:l").unwrap());
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
