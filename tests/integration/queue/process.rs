//! The queue engine's processes, driven through the scripts against a real server: a waiter
//! whose id ends in `@<process id>` is kept in line by its process's one heartbeat, a grant
//! to it goes to its process's inbox naming it and its claim expiry, a process that lapsed loses every place it
//! had (and a waiter of it that asks is told, with nothing written), and `reset_all` wakes
//! each process once.

use std::thread;

use redis::{Commands, Value};

use super::engine::{engine_script, granted, ints, key, position, Queue, LONG};
use crate::support::ms;

const P: &str = "0123456789abcdef";
const Q: &str = "fedcba9876543210";

fn id(name: &str, process: &str) -> String {
    format!("{name}@{process}")
}

fn script(file: &str) -> redis::Script {
    match file {
        "queue_beat.lua" => redis::Script::new(include_str!("../../../scripts/queue_beat.lua")),
        other => engine_script(other),
    }
}

/// `queue_acquire.lua` in wait mode, for 1 of 1, no lease, `lapse` ms, the process `new` to
/// the primitive or `known`.
fn ask(q: &mut Queue, waiter: &str, lapse: u64, process: &str) -> Value {
    let args = [waiter, "1", "1", "0", &lapse.to_string(), "wait", process];
    q.run(&script("queue_acquire.lua"), &args)
}

fn beat(q: &mut Queue, process: &str, lapse: u64) -> Value {
    q.run(&script("queue_beat.lua"), &[process, &lapse.to_string()])
}

/// What process `process`'s inbox holds.
fn popped(q: &mut Queue, process: &str) -> Vec<String> {
    q.conn
        .lrange(key(&format!("signal:{process}")), 0, -1)
        .unwrap()
}

#[test]
fn a_grant_goes_to_the_inbox_of_the_waiters_process_naming_it() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    assert_eq!(position(&ask(&mut q, &id("a", P), LONG, "new")), 1);
    q.release("h", 1);
    assert_eq!(q.holders(), [id("a", P)]);
    // `<token>:<claim expiry, server ms>:<waiter id>`.
    let mail = popped(&mut q, P);
    let (token, rest) = mail[0].split_once(':').unwrap();
    let (expiry, waiter) = rest.split_once(':').unwrap();
    assert_eq!(
        (token, waiter),
        (&*super::engine::token(2).to_string(), id("a", P).as_str())
    );
    let held: Vec<(String, u64)> = q.conn.zrange_withscores(key("holders"), 0, -1).unwrap();
    assert_eq!(expiry.parse::<u64>().unwrap(), held[0].1);
}

#[test]
fn one_heartbeat_keeps_every_waiter_of_a_process_in_line() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    for name in ["a", "b", "c"] {
        ask(&mut q, &id(name, P), 300, "new");
    }
    let beats: Vec<String> = q.conn.zrange(key("beats"), 0, -1).unwrap();
    assert_eq!(beats, [P]);
    for _ in 0..4 {
        // ok: time passing on the server's clock, past the lapse window in all.
        thread::sleep(ms(100));
        assert!(matches!(beat(&mut q, P, 300), Value::Int(now) if now > 0));
    }
    q.release("h", 1);
    assert_eq!(q.holders(), [id("a", P)]);
    assert_eq!(q.waiters(), [id("b", P), id("c", P)]);
}

#[test]
fn a_lapsed_process_loses_every_place_and_the_next_process_is_served() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    for name in ["a", "b", "c"] {
        ask(&mut q, &id(name, P), 100, "new");
    }
    ask(&mut q, &id("z", Q), LONG, "new");
    // ok: P's window passes without a heartbeat, as for a process killed or stopped.
    thread::sleep(ms(200));
    q.release("h", 1);
    assert_eq!(q.holders(), [id("z", Q)]);
    assert!(q.waiters().is_empty());
    let beats: Vec<String> = q.conn.zrange(key("beats"), 0, -1).unwrap();
    assert_eq!(beats, [Q]);
}

#[test]
fn a_waiter_of_a_process_that_lapsed_is_told_and_nothing_is_written() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    ask(&mut q, &id("a", P), 100, "new");
    // ok: P's window passes without a heartbeat, as for a process stopped.
    thread::sleep(ms(200));
    let before = q.snapshot();
    assert_eq!(ints(&ask(&mut q, &id("a", P), 100, "known")), [-2]);
    assert_eq!(beat(&mut q, P, 100), Value::Int(0));
    assert_eq!(q.snapshot(), before);
    // Its process starts anew: the waiter joins again, at the back.
    ask(&mut q, &id("z", Q), LONG, "new");
    assert_eq!(position(&ask(&mut q, &id("a", P), 100, "new")), 2);
}

#[test]
fn a_waiter_behind_one_of_its_own_process_is_left_for_its_process_to_time() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    ask(&mut q, &id("a", Q), LONG, "new");
    // Behind another process's waiter: asks again when that one would lapse.
    let behind_other = ints(&ask(&mut q, &id("b", P), LONG, "new"));
    assert!(behind_other[2] > 0, "{behind_other:?}");
    // Behind one of its own: they lapse together, so the server gives it no timer; its
    // process times it by the one ahead (`Cover`), with its ticket to tell which is ahead.
    assert_eq!(ints(&ask(&mut q, &id("c", P), LONG, "new")), [0, 3, -1, 3]);
}

#[test]
fn reset_all_wakes_each_process_once_in_its_inbox() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    for name in ["a", "b"] {
        ask(&mut q, &id(name, P), LONG, "new");
    }
    ask(&mut q, &id("c", Q), LONG, "new");
    q.run(&script("queue_reset_all.lua"), &["5000"]);
    assert_eq!(popped(&mut q, P), ["reset"]);
    assert_eq!(popped(&mut q, Q), ["reset"]);
    let own: Vec<String> = q.conn.lrange(key("signal:h"), 0, -1).unwrap();
    assert_eq!(own, ["reset"]);
}
