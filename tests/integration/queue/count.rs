//! The queue engine's kept count of units in use (`<base>count`), which spares each script a
//! read of every holder: it always equals a recount of the holders' entries, a count that is
//! not current (an older version's writes, a hand's) is counted again before anything is
//! granted, and the operator's read repairs one that is off.

use std::thread;

use proptest::prelude::*;
use redis::{Commands, Value};

use super::engine::{granted, ints, key, position, Queue, LONG};
use crate::support::ms;

/// The count as the scripts keep it: `<units>:<fencing counter>:<holders>`, or none.
fn count(q: &mut Queue) -> Option<String> {
    q.conn.get(key("count")).unwrap()
}

/// The count a recount of the holders' entries gives, expired ones included (they are
/// counted until a script purges them), in the kept count's form; none without holders.
fn recount(q: &mut Queue) -> Option<String> {
    let holders: Vec<String> = q.conn.zrange(key("holders"), 0, -1).unwrap();
    if holders.is_empty() {
        return None;
    }
    let mut units = 0;
    for id in &holders {
        let entry: String = q.conn.hget(key("held"), id).unwrap();
        units += entry.split(':').next().unwrap().parse::<u64>().unwrap();
    }
    let fence: Option<String> = q.conn.get(key("fence")).unwrap();
    let fence = fence.unwrap_or_else(|| "0".into());
    Some(format!("{units}:{fence}:{}", holders.len()))
}

/// The `counted` of the operator's read: the kept count when a recount disagreed, else -1.
fn counted(q: &mut Queue) -> i64 {
    let Value::Array(items) = q.state() else {
        panic!("not a state")
    };
    ints(&Value::Array(vec![items[3].clone()]))[0]
}

/// One step of a random interleaving on a semaphore of ids `0..6`.
#[derive(Clone, Debug)]
enum Op {
    /// Ask for units (queued when they do not fit), a lease (0: none) and a lapse window, ms.
    Wait(u8, u64, u64, u64),
    Try(u8, u64, u64),
    /// A holder's release, or a waiter's leaving (a cancel, a deadline).
    Release(u8),
    Extend(u8, u64),
    Shrink(u8),
    /// One holder's reset, or every holder's.
    Reset(Option<u8>),
    /// Time passing: leases expire, waiters without heartbeats lapse.
    Sleep(u64),
}

fn op(capacity: u64) -> impl Strategy<Value = Op> {
    let id = 0u8..6;
    let units = 1..=capacity;
    let lease = prop::sample::select(vec![0u64, 20, 10_000]);
    let lapse = prop::sample::select(vec![30u64, LONG]);
    prop_oneof![
        4 => (id.clone(), units.clone(), lease.clone(), lapse).prop_map(|(i, u, l, w)| Op::Wait(i, u, l, w)),
        1 => (id.clone(), units, lease.clone()).prop_map(|(i, u, l)| Op::Try(i, u, l)),
        3 => id.clone().prop_map(Op::Release),
        1 => (id.clone(), lease).prop_map(|(i, l)| Op::Extend(i, l)),
        1 => id.clone().prop_map(Op::Shrink),
        1 => prop::option::of(id).prop_map(Op::Reset),
        2 => (0u64..40).prop_map(Op::Sleep),
    ]
}

fn run(q: &mut Queue, op: &Op, capacity: u64) {
    let name = |i: &u8| format!("w{i}");
    match op {
        Op::Wait(i, units, lease, lapse) => {
            q.ask(&name(i), *units, capacity, *lease, *lapse, "wait");
        }
        Op::Try(i, units, lease) => {
            q.ask(&name(i), *units, capacity, *lease, LONG, "try");
        }
        Op::Release(i) => {
            q.release(&name(i), capacity);
        }
        Op::Extend(i, lease) => {
            q.extend(&name(i), *lease);
        }
        Op::Shrink(i) => {
            q.shrink(&name(i), 1, capacity);
        }
        Op::Reset(i) => {
            q.reset(&i.map(|i| name(&i)).unwrap_or_default(), capacity);
        }
        // ok: the time a lease or a lapse window takes to run out, on the server's clock.
        Op::Sleep(n) => thread::sleep(ms(*n)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_count_matches_a_recount_after_random_interleavings(
        (capacity, ops) in (1u64..=4).prop_flat_map(|c| (Just(c), prop::collection::vec(op(c), 1..40)))
    ) {
        let mut q = Queue::new();
        for (n, step) in ops.iter().enumerate() {
            run(&mut q, step, capacity);
            let (kept, recounted) = (count(&mut q), recount(&mut q));
            prop_assert_eq!(kept, recounted, "after step {} ({:?}) of {:?}", n, step, ops);
        }
        prop_assert_eq!(counted(&mut q), -1, "the operator's read disagreed after {:?}", ops);
    }
}

#[test]
fn a_holder_written_by_an_older_version_is_counted_before_the_next_grant() {
    let mut q = Queue::new();
    granted(&q.wait("new", 1, 2));
    // An older version's grant: its holder and entry, its fencing token, and no count.
    let token: u64 = q.conn.incr(key("fence"), 1).unwrap();
    let _: () = q.conn.zadd(key("holders"), "old", "+inf").unwrap();
    let _: () = q
        .conn
        .hset(key("held"), "old", format!("1:{token}"))
        .unwrap();
    assert_eq!(position(&q.wait("next", 1, 2)), 1);
    // Its release, which does not move the fencing counter, frees its unit all the same.
    let _: () = q.conn.zrem(key("holders"), "old").unwrap();
    let _: () = q.conn.hdel(key("held"), "old").unwrap();
    granted(&q.wait("next", 1, 2));
    assert_eq!(count(&mut q), recount(&mut q));
}

#[test]
fn a_count_that_is_not_a_count_is_counted_again_and_rewritten() {
    for garbage in ["lots", "", "1:2", "-1:1:1", "99999999999999999999:1:1"] {
        let mut q = Queue::new();
        granted(&q.wait("a", 1, 1));
        let _: () = q.conn.set(key("count"), garbage).unwrap();
        assert_eq!(position(&q.wait("b", 1, 1)), 1, "{garbage:?}");
        assert_eq!(q.release("a", 1), Value::Int(1), "{garbage:?}");
        assert_eq!(q.holders(), ["b"], "{garbage:?}");
        assert_eq!(count(&mut q), recount(&mut q), "{garbage:?}");
    }
}

#[test]
fn a_count_below_one_unit_a_holder_is_not_trusted() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    let fence: String = q.conn.get(key("fence")).unwrap();
    let _: () = q.conn.set(key("count"), format!("0:{fence}:1")).unwrap();
    assert_eq!(position(&q.wait("b", 1, 1)), 1);
}

#[test]
fn the_operators_read_reports_a_count_that_is_off_and_has_it_counted_again() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 3));
    let fence: String = q.conn.get(key("fence")).unwrap();
    // Well formed, current by its marks, and one unit off: only a recount can tell.
    let _: () = q.conn.set(key("count"), format!("2:{fence}:1")).unwrap();
    assert_eq!(counted(&mut q), 2);
    assert_eq!(count(&mut q), None);
    assert_eq!(counted(&mut q), -1);
    granted(&q.wait("b", 2, 3));
    assert_eq!(count(&mut q), recount(&mut q));
}

#[test]
fn a_count_is_gone_with_the_last_holder() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    assert!(count(&mut q).is_some());
    q.release("a", 1);
    assert_eq!(q.keys(), [key("fence")]);
}
