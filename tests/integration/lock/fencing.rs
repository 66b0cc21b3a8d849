//! Fencing tokens that never go backwards: every primitive that hands one out (the plain lock
//! with `fencing(true)`, the fair lock, a semaphore's permits, both guards of a read-write
//! lock, and an election's term) gives each acquisition a token above every earlier one of its
//! name, across an empty restart of the server and a FLUSHALL. A token is a hybrid logical
//! clock: the server's time in microseconds, or the counter + 1. One that goes back all the
//! same (the counter lost while the server's clock is behind the last grant) is reported, by a
//! warning and `redis_lock_fence_regressions_total` (`observe.rs`).

use std::time::Duration;

use redis::Commands;

use redis_blpop_lock::Lock;

use crate::support::{every_primitive, ms, secs, RedisServer};

/// Takes a token of each primitive, twice; `lose` the counters; then one more of each, which
/// must be above both earlier ones.
fn tokens_grow_across(server: &mut RedisServer, lose: impl FnOnce(&mut RedisServer)) {
    let primitives = every_primitive(&server.client(), "fencing", "");
    let before: Vec<(u64, u64)> = (primitives.iter())
        .map(|p| ((p.take)().unwrap(), (p.take)().unwrap()))
        .collect();
    lose(server);
    for (p, (first, second)) in primitives.iter().zip(before) {
        let after = (p.take)().unwrap_or_else(|e| panic!("{}: {e}", p.what));
        assert!(
            first < second && second < after,
            "{}: {first}, {second}, then {after}",
            p.what
        );
    }
}

#[test]
fn every_primitives_tokens_grow_across_an_empty_restart() {
    let mut server = RedisServer::start();
    tokens_grow_across(&mut server, |server| {
        server.restart_after(Duration::ZERO);
        let counters: Vec<String> = server.conn().keys("*fence*").unwrap();
        assert!(counters.is_empty(), "the restart kept {counters:?}");
    });
}

#[test]
fn every_primitives_tokens_grow_across_a_flushall() {
    let mut server = RedisServer::start();
    tokens_grow_across(&mut server, |server| {
        let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    });
}

#[test]
fn a_store_that_checks_tokens_refuses_a_stale_holders_write() {
    let locks = RedisServer::start();
    // The downstream store: a Redis of its own, with the documented fenced write.
    let store = RedisServer::start();
    let fenced_set = redis::Script::new(include_str!("../../../examples/fenced_set.lua"));
    let write = |token: u64, value: &str| -> i64 {
        (fenced_set.key("ledger").key("ledger:fence"))
            .arg(token)
            .arg(value)
            .invoke(&mut store.conn())
            .unwrap()
    };
    let lock = |expire| {
        (Lock::builder(&locks.client(), "ledger").fencing(true))
            .expire(expire)
            .build()
            .unwrap()
    };
    let (stale, fresh) = (lock(ms(300)), lock(secs(10)));
    let first = stale.lock().unwrap();
    let old = first.fencing_token().unwrap();
    assert_eq!(write(old, "first"), 1);
    // The holder stalls past its expiry, unrenewed (a pause, a partition): another takes the
    // lock meanwhile, and writes.
    let second = fresh.lock().unwrap();
    let new = second.fencing_token().unwrap();
    assert!(new > old && first.lost());
    assert_eq!(write(new, "second"), 1);
    // The stale holder wakes up and writes: refused. The new one may write again.
    assert_eq!(write(old, "stale"), 0);
    assert_eq!(write(new, "second, again"), 1);
    let value: String = store.conn().get("ledger").unwrap();
    assert_eq!(value, "second, again");
}
