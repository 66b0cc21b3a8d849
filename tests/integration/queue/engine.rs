//! The fair queue engine's scripts, driven directly against a real server: FIFO grants, hand-offs
//! by signal list to exactly the waiters that fit, purges of lapsed waiters and expired holders,
//! idempotent re-runs, and corrupt keys refused with nothing written.

use std::collections::BTreeMap;
use std::thread;

use redis::{Commands, Value};

use crate::support::{lasting_keys, ms, server_version, RedisServer};

/// Queue engine script `file` as the client sends it (`src/protocol/scripts.rs`): the head,
/// the file's fast part when it has one, the reads and the engine (the reads alone for
/// `queue_extend`, neither for `queue_reset_all`), the file.
pub(crate) fn engine_script(file: &str) -> redis::Script {
    let head = include_str!("../../../scripts/queue_head.lua");
    let reads = include_str!("../../../scripts/queue_reads.lua");
    let engine = &format!(
        "{reads}{}",
        include_str!("../../../scripts/queue_engine.lua")
    );
    let parts = match file {
        "queue_acquire.lua" => [
            include_str!("../../../scripts/queue_acquire_fast.lua"),
            engine,
            include_str!("../../../scripts/queue_acquire.lua"),
        ],
        "queue_release.lua" => [
            include_str!("../../../scripts/queue_release_fast.lua"),
            engine,
            include_str!("../../../scripts/queue_release.lua"),
        ],
        "queue_extend.lua" => ["", reads, include_str!("../../../scripts/queue_extend.lua")],
        "queue_shrink.lua" => [
            "",
            engine,
            include_str!("../../../scripts/queue_shrink.lua"),
        ],
        "queue_reset.lua" => ["", engine, include_str!("../../../scripts/queue_reset.lua")],
        "queue_state.lua" => ["", engine, include_str!("../../../scripts/queue_state.lua")],
        "queue_reset_all.lua" => ["", "", include_str!("../../../scripts/queue_reset_all.lua")],
        other => panic!("no script {other}"),
    };
    redis::Script::new(&format!("{head}{}", parts.concat()))
}

/// A lapse window no test outlives: waiters stay queued without heartbeats.
pub(crate) const LONG: u64 = 60_000;

/// A semaphore named `db`, reached through the scripts alone.
pub(crate) struct Queue {
    _server: Option<RedisServer>,
    pub(crate) conn: redis::Connection,
}

pub(crate) fn key(part: &str) -> String {
    format!("semaphore:{{db}}:{part}")
}

fn signal(id: &str) -> String {
    key(&format!("signal:{id}"))
}

/// The fencing counter a queue here starts from: far ahead of the server's clock (in µs),
/// so that each token is the counter + 1 and the tests count grants: the n-th grant's token is
/// `AHEAD + n` ([`token`]). The clock's part of a token is pinned by `fencing.rs`.
pub(crate) const AHEAD: u64 = 8_000_000_000_000_000;

/// The n-th grant's fencing token.
pub(crate) fn token(n: u64) -> u64 {
    AHEAD + n
}

impl Queue {
    pub(crate) fn new() -> Queue {
        let server = RedisServer::start();
        let conn = server.conn();
        Queue::on(conn, Some(server))
    }

    /// The semaphore on `conn`'s server, its fencing counter at [`AHEAD`].
    fn on(mut conn: redis::Connection, server: Option<RedisServer>) -> Queue {
        let _: () = conn.set(key("fence"), AHEAD).unwrap();
        Queue {
            _server: server,
            conn,
        }
    }

    pub(crate) fn run(&mut self, script: &redis::Script, args: &[&str]) -> Value {
        let mut invocation = script.prepare_invoke();
        for part in [
            "holders", "held", "queue", "beats", "wants", "tickets", "fence", "signal:", "count",
        ] {
            invocation.key(key(part));
        }
        for arg in args {
            invocation.arg(*arg);
        }
        match invocation.invoke::<Value>(&mut self.conn) {
            Ok(value) => value,
            // An error reply, as text the tests can look into.
            Err(e) => Value::SimpleString(format!("error: {e}")),
        }
    }

    /// `queue_acquire.lua` in `mode`: `units` of `capacity`, lease and lapse in ms.
    pub(crate) fn ask(
        &mut self,
        id: &str,
        units: u64,
        capacity: u64,
        lease: u64,
        lapse: u64,
        mode: &str,
    ) -> Value {
        let args = [
            id.to_string(),
            units.to_string(),
            capacity.to_string(),
            lease.to_string(),
            lapse.to_string(),
            mode.to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&engine_script("queue_acquire.lua"), &args)
    }

    /// A waiter for `units` of `capacity`, no lease, that needs no heartbeat in a test.
    pub(crate) fn wait(&mut self, id: &str, units: u64, capacity: u64) -> Value {
        self.ask(id, units, capacity, 0, LONG, "wait")
    }

    pub(crate) fn release(&mut self, id: &str, capacity: u64) -> Value {
        self.run(
            &engine_script("queue_release.lua"),
            &[id, &capacity.to_string()],
        )
    }

    pub(crate) fn leave(&mut self, id: &str, capacity: u64) -> Value {
        // A waiter's leaving is a release: a holder is in no queue.
        self.release(id, capacity)
    }

    pub(crate) fn extend(&mut self, id: &str, lease: u64) -> Value {
        self.run(
            &engine_script("queue_extend.lua"),
            &[id, &lease.to_string()],
        )
    }

    pub(crate) fn shrink(&mut self, id: &str, units: u64, capacity: u64) -> Value {
        let args = [id, &units.to_string(), &capacity.to_string()];
        self.run(&engine_script("queue_shrink.lua"), &args)
    }

    pub(crate) fn reset(&mut self, id: &str, capacity: u64) -> Value {
        self.run(
            &engine_script("queue_reset.lua"),
            &[id, &capacity.to_string()],
        )
    }

    pub(crate) fn state(&mut self) -> Value {
        self.run(&engine_script("queue_state.lua"), &[""])
    }

    /// The tokens pushed to waiter `id`'s signal list.
    /// The grants in waiter `id`'s own list, by their number ([`token`]).
    fn signals(&mut self, id: &str) -> Vec<u64> {
        let tokens: Vec<u64> = self.conn.lrange(signal(id), 0, -1).unwrap();
        tokens.into_iter().map(|t| t - AHEAD).collect()
    }

    /// The holders' ids, sorted.
    pub(crate) fn holders(&mut self) -> Vec<String> {
        self.conn.zrange(key("holders"), 0, -1).map(sorted).unwrap()
    }

    /// The waiters' ids in queue order.
    pub(crate) fn waiters(&mut self) -> Vec<String> {
        self.conn.zrange(key("queue"), 0, -1).unwrap()
    }

    /// Every key with its serialized value and expiry: equal snapshots, nothing written. A
    /// TTL ticks down between two snapshots (the heartbeats' key has one), so the expiry is
    /// taken as when the key expires, in server ms (`PEXPIRETIME`), which changes only when
    /// written; -1 for none. Redis before 7 has no `PEXPIRETIME`: there only whether a key has
    /// a TTL is compared (0 for one).
    pub(crate) fn snapshot(&mut self) -> BTreeMap<String, (Vec<u8>, i64)> {
        let keys: Vec<String> = self.conn.keys("*").unwrap();
        let expiry_time = server_version() >= (7, 0);
        keys.into_iter()
            .map(|k| {
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut self.conn).unwrap();
                let expiry: i64 = if expiry_time {
                    redis::cmd("PEXPIRETIME")
                        .arg(&k)
                        .query(&mut self.conn)
                        .unwrap()
                } else {
                    let ttl: i64 = self.conn.pttl(&k).unwrap();
                    ttl.min(0)
                };
                (k, (dump, expiry))
            })
            .collect()
    }

    pub(crate) fn keys(&mut self) -> Vec<String> {
        self.conn.keys("*").map(sorted).unwrap()
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// An array reply of integers.
pub(crate) fn ints(reply: &Value) -> Vec<i64> {
    match reply {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?} in {reply:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn is_error(reply: &Value, saying: &str) -> bool {
    matches!(reply, Value::SimpleString(e) if e.starts_with("error: ") && e.contains(saying))
}

/// The token of a grant `{1, token, left}`.
pub(crate) fn granted(reply: &Value) -> u64 {
    let reply = ints(reply);
    assert_eq!(reply[0], 1, "not granted: {reply:?}");
    reply[1] as u64
}

/// The position of a waiter `{0, position, next}`.
pub(crate) fn position(reply: &Value) -> i64 {
    let reply = ints(reply);
    assert_eq!(reply[0], 0, "not waiting: {reply:?}");
    reply[1]
}

#[test]
fn grants_go_in_arrival_order() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    for (id, at) in [("b", 1), ("c", 2), ("d", 3)] {
        assert_eq!(position(&q.wait(id, 1, 1)), at);
    }
    q.release("a", 1);
    assert_eq!(q.holders(), ["b"]);
    assert_eq!(q.signals("b"), [2]);
    q.release("b", 1);
    assert_eq!(q.holders(), ["c"]);
    assert_eq!(q.signals("c"), [3]);
    assert_eq!(q.waiters(), ["d"]);
}

#[test]
fn released_units_wake_exactly_the_waiters_that_now_fit() {
    let mut q = Queue::new();
    granted(&q.wait("a", 3, 4));
    for id in ["b", "c", "d", "e"] {
        q.wait(id, 1, 4);
    }
    // One unit was free: b has it already.
    assert_eq!(q.holders(), ["a", "b"]);
    assert_eq!(q.release("a", 4), Value::Int(1));
    assert_eq!(q.holders(), ["b", "c", "d", "e"]);
    for id in ["c", "d", "e"] {
        assert_eq!(q.signals(id).len(), 1, "{id}");
    }
    let mut q = Queue::new();
    granted(&q.wait("a", 4, 4));
    for id in ["b", "c", "d", "e", "f"] {
        q.wait(id, 1, 4);
    }
    q.release("a", 4);
    assert_eq!(q.holders(), ["b", "c", "d", "e"]);
    assert!(q.signals("f").is_empty());
    assert_eq!(q.waiters(), ["f"]);
}

#[test]
fn a_big_request_at_the_head_blocks_smaller_ones_behind_it() {
    let mut q = Queue::new();
    granted(&q.wait("a", 2, 3));
    assert_eq!(position(&q.wait("big", 2, 3)), 1);
    // One unit is free, but the small request arrived after the big one.
    assert_eq!(position(&q.wait("small", 1, 3)), 2);
    assert_eq!(q.holders(), ["a"]);
    q.release("a", 3);
    assert_eq!(q.holders(), ["big", "small"]);
}

#[test]
fn a_lapsed_waiter_is_purged_and_the_one_behind_it_granted() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 2));
    assert_eq!(position(&q.ask("dead", 2, 2, 0, 200, "wait")), 1);
    // Behind the dead waiter, told to look again when it lapses.
    let behind = ints(&q.wait("next", 1, 2));
    assert_eq!(behind[1], 2);
    assert!((1..=200).contains(&behind[2]), "{behind:?}");
    thread::sleep(ms(300));
    granted(&q.wait("next", 1, 2));
    assert_eq!(q.holders(), ["a", "next"]);
    assert!(q.waiters().is_empty());
    let wants: Vec<String> = q.conn.hkeys(key("wants")).unwrap();
    assert!(wants.is_empty());
}

#[test]
fn a_waiter_that_lapsed_rejoins_at_the_back() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    assert_eq!(position(&q.ask("stopped", 1, 1, 0, 200, "wait")), 1);
    q.wait("b", 1, 1);
    thread::sleep(ms(300));
    assert_eq!(position(&q.ask("stopped", 1, 1, 0, 200, "wait")), 2);
    assert_eq!(q.waiters(), ["b", "stopped"]);
    q.release("a", 1);
    assert_eq!(q.holders(), ["b"]);
    assert!(q.signals("stopped").is_empty());
}

#[test]
fn an_expired_holders_units_go_to_the_head_at_the_next_script_run() {
    let mut q = Queue::new();
    granted(&q.ask("crashed", 1, 1, 300, LONG, "wait"));
    // The head is told to look again when the holder expires.
    let head = ints(&q.wait("b", 1, 1));
    assert!((1..=300).contains(&head[2]), "{head:?}");
    thread::sleep(ms(400));
    // Any script run hands the units on: here another waiter's ask.
    assert_eq!(position(&q.wait("c", 1, 1)), 1);
    assert_eq!(q.holders(), ["b"]);
    assert_eq!(q.signals("b"), [2]);
    assert_eq!(q.release("crashed", 1), Value::Int(0));
}

#[test]
fn a_leaving_waiter_hands_a_grant_it_received_on() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    q.wait("b", 1, 1);
    q.wait("c", 1, 1);
    q.release("a", 1);
    assert_eq!(q.holders(), ["b"]);
    // b's deadline passed before it read its signal.
    assert_eq!(q.leave("b", 1), Value::Int(1));
    assert_eq!(q.holders(), ["c"]);
    assert_eq!(q.signals("c"), [3]);
    assert!(q.signals("b").is_empty());
    // A waiter that leaves before any grant gives back nothing.
    q.wait("d", 1, 1);
    assert_eq!(q.leave("d", 1), Value::Int(0));
    assert!(q.waiters().is_empty());
}

#[test]
fn every_script_run_twice_does_what_it_did_once() {
    let mut q = Queue::new();
    let first = q.wait("a", 1, 2);
    assert_eq!(granted(&q.wait("a", 1, 2)), granted(&first));
    assert_eq!(position(&q.wait("big", 2, 2)), 1);
    assert_eq!(position(&q.wait("big", 2, 2)), 1);
    assert_eq!(q.extend("a", 5000), Value::Int(1));
    assert_eq!(q.extend("a", 5000), Value::Int(1));
    let before = q.snapshot();
    q.state();
    q.state();
    assert_eq!(q.snapshot(), before);
    assert_eq!(q.release("a", 2), Value::Int(1));
    assert_eq!(q.release("a", 2), Value::Int(0));
    assert_eq!(q.holders(), ["big"]);
    assert_eq!(q.signals("big"), [2]);
    assert_eq!(q.shrink("big", 1, 2), Value::Int(1));
    assert_eq!(q.shrink("big", 1, 2), Value::Int(1));
    let held: String = q.conn.hget(key("held"), "big").unwrap();
    assert_eq!(held, format!("1:{}", token(2)));
    q.wait("c", 1, 2);
    assert_eq!(q.leave("c", 2), Value::Int(1));
    assert_eq!(q.leave("c", 2), Value::Int(0));
    assert_eq!(q.reset("big", 2), Value::Int(1));
    assert_eq!(q.reset("big", 2), Value::Int(0));
    // Nothing left but the fencing counter, and keys that expire by themselves within the
    // lapse window (the heartbeats').
    let left = lasting_keys(&mut q.conn, "*", ms(LONG));
    assert_eq!(left, [key("fence")]);
}

#[test]
fn a_key_of_the_wrong_type_is_refused_by_every_script_that_touches_it_and_nothing_is_written() {
    // Ids that are their own process (an older version's, which the fast parts leave to the
    // engine), and ids of processes, as the crate's are (`<id>@<process>`).
    for (a, b, c) in [
        ("a", "b", "c"),
        (
            "a@000000000000000a",
            "b@000000000000000b",
            "c@000000000000000c",
        ),
    ] {
        let wait_c = |q: &mut Queue| q.wait(c, 1, 1);
        let release_a = |q: &mut Queue| q.release(a, 1);
        let leave_b = |q: &mut Queue| q.leave(b, 1);
        let shrink_a = |q: &mut Queue| q.shrink(a, 1, 1);
        let reset_all = |q: &mut Queue| q.reset("", 1);
        let state = |q: &mut Queue| q.state();
        type Script<'s> = &'s dyn Fn(&mut Queue) -> Value;
        let every: Vec<Script> = vec![&wait_c, &release_a, &leave_b, &shrink_a, &reset_all, &state];
        // Each key with the scripts that read or write it, given holder a and waiter b.
        let parts: [(i64, &str, Vec<Script>); 8] = [
            (1, "holders", every.clone()),
            (2, "held", vec![&release_a, &shrink_a, &reset_all, &state]),
            (3, "queue", vec![&wait_c, &release_a, &leave_b, &state]),
            (4, "beats", every.clone()),
            (5, "wants", vec![&wait_c, &release_a, &leave_b, &state]),
            (6, "tickets", vec![&wait_c]),
            (7, "fence", every.clone()),
            (9, "count", every),
        ];
        for (k, part, scripts) in parts {
            let mut q = Queue::new();
            granted(&q.wait(a, 1, 1));
            q.wait(b, 1, 1);
            refused_with_nothing_written(&mut q, k, part, &scripts);
        }
    }
}

/// The first waiter, joining behind a holder while nobody is in line, meets each key it
/// writes of another type: refused, nothing written.
#[test]
fn the_first_waiter_meets_a_key_of_the_wrong_type_and_nothing_is_written() {
    // A waiter of a process, as the crate's are (`<id>@<process>`).
    let wait_c = |q: &mut Queue| q.wait("c@0123456789abcdef", 1, 1);
    for (k, part) in [(3, "queue"), (4, "beats"), (5, "wants"), (6, "tickets")] {
        let mut q = Queue::new();
        granted(&q.wait("a", 1, 1));
        refused_with_nothing_written(&mut q, k, part, &[&wait_c]);
    }
}

/// A grant is pushed to its waiter's inbox, a key the script has not read: one of another type
/// refuses the release that would grant, naming it, with nothing written; the waiter stays in
/// line and the holder holds.
#[test]
fn a_grant_to_an_inbox_of_another_type_is_refused_and_nothing_is_written() {
    let mut q = Queue::new();
    granted(&q.wait("h", 1, 1));
    let waiter = "w@0123456789abcdef";
    assert_eq!(position(&q.wait(waiter, 1, 1)), 1);
    let _: () = q.conn.set(signal("0123456789abcdef"), "x").unwrap();
    let before = q.snapshot();
    let reply = q.release("h", 1);
    let Value::Array(items) = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items[..2], [Value::Int(-1), Value::Int(8)], "{reply:?}");
    assert!(
        format!("{:?}", items[2]).contains("signal:0123456789abcdef"),
        "{reply:?}"
    );
    assert_eq!(q.snapshot(), before);
    assert_eq!(q.holders(), ["h"]);
    assert_eq!(q.waiters(), [waiter]);
}

/// Makes KEYS[`k`] (`part`) a list, where a sorted set, a hash or a counter belongs, and
/// asserts that each of `scripts` refuses it, naming it, and that nothing was written.
fn refused_with_nothing_written(
    q: &mut Queue,
    k: i64,
    part: &str,
    scripts: &[&dyn Fn(&mut Queue) -> Value],
) {
    let _: () = q.conn.del(key(part)).unwrap();
    let _: () = q.conn.rpush(key(part), "x").unwrap();
    let before = q.snapshot();
    for script in scripts {
        let reply = script(q);
        let Value::Array(items) = &reply else {
            panic!("{part}: {reply:?}")
        };
        assert_eq!(items[..2], [Value::Int(-1), Value::Int(k)], "{part}");
    }
    assert_eq!(q.snapshot(), before, "{part}");
}

#[test]
fn an_extend_is_refused_when_a_key_it_reads_is_corrupt_and_writes_nothing() {
    // It reads the holder's expiry and entry, nothing else: the renewal path stays short.
    for (k, part) in [(1, "holders"), (2, "held")] {
        let mut q = Queue::new();
        granted(&q.wait("a", 1, 1));
        let _: () = q.conn.del(key(part)).unwrap();
        let _: () = q.conn.rpush(key(part), "x").unwrap();
        let before = q.snapshot();
        let Value::Array(reply) = q.extend("a", 100) else {
            panic!("{part}")
        };
        assert_eq!(reply[..2], [Value::Int(-1), Value::Int(k)], "{part}");
        assert_eq!(q.snapshot(), before, "{part}");
    }
}

#[test]
fn a_corrupt_entry_or_counter_is_refused_and_nothing_is_written() {
    type Step = fn(&mut Queue) -> Value;
    // The release would grant b, and c's ask would join the queue: each must read everything
    // before it writes anything.
    let release_a: Step = |q| q.release("a", 1);
    let corruptions: [(&str, Step, Step); 4] = [
        (
            "held",
            |q| q.conn.hset(key("held"), "a", "two").unwrap(),
            release_a,
        ),
        (
            "wants",
            |q| q.conn.hset(key("wants"), "b", "1").unwrap(),
            release_a,
        ),
        (
            "tickets",
            |q| q.conn.set(key("tickets"), "-1").unwrap(),
            |q| q.wait("c", 1, 1),
        ),
        (
            "fence",
            |q| q.conn.set(key("fence"), "1e3").unwrap(),
            release_a,
        ),
    ];
    for (part, corrupt, step) in corruptions {
        let mut q = Queue::new();
        granted(&q.wait("a", 1, 1));
        q.wait("b", 1, 1);
        corrupt(&mut q);
        let before = q.snapshot();
        let reply = step(&mut q);
        let Value::Array(items) = &reply else {
            panic!("{part}: {reply:?}")
        };
        assert_eq!(items[0], Value::Int(-1), "{part}");
        assert_eq!(q.snapshot(), before, "{part}");
    }
}

#[test]
fn more_units_than_the_capacity_is_an_error_not_a_wait() {
    let mut q = Queue::new();
    let reply = q.wait("a", 3, 2);
    assert!(is_error(&reply, "capacity"), "{reply:?}");
    // Only the counter the queue started with.
    assert_eq!(q.keys(), [key("fence")]);
}

#[test]
fn a_lease_runs_on_the_servers_clock() {
    let mut q = Queue::new();
    let server_ms = |q: &mut Queue| {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut q.conn).unwrap();
        s * 1000 + us / 1000
    };
    let before = server_ms(&mut q);
    granted(&q.ask("a", 1, 1, 10_000, LONG, "wait"));
    let after = server_ms(&mut q);
    let expiry: f64 = q.conn.zscore(key("holders"), "a").unwrap();
    assert!(
        (before + 10_000..=after + 10_000).contains(&(expiry as u64)),
        "{before} {expiry} {after}"
    );
    let beat_before = server_ms(&mut q);
    q.wait("b", 1, 1);
    let lapse: f64 = q.conn.zscore(key("beats"), "b").unwrap();
    assert!(lapse as u64 >= beat_before + LONG);
}

#[test]
fn a_try_neither_queues_nor_overtakes_a_waiter() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 2));
    q.wait("big", 2, 2);
    // A unit is free, but big came first.
    assert_eq!(ints(&q.ask("t", 1, 2, 0, LONG, "try")), [0, 0, 0]);
    assert_eq!(q.waiters(), ["big"]);
    let mut q = Queue::new();
    granted(&q.ask("t", 1, 1, 0, LONG, "try"));
}

#[test]
fn raising_the_capacity_lets_waiters_in_and_lowering_it_takes_nothing_back() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 1));
    q.wait("b", 1, 1);
    q.wait("c", 1, 1);
    // A handle with a count of 3 runs a script: b and c fit now.
    position(&q.wait("d", 3, 3));
    assert_eq!(q.holders(), ["a", "b", "c"]);
    // With a count of 1 again, no one loses what it holds; the next waits for all three.
    assert_eq!(q.release("a", 1), Value::Int(1));
    assert_eq!(q.holders(), ["b", "c"]);
    assert_eq!(position(&q.wait("e", 1, 1)), 2);
}

#[test]
fn a_downgraded_writer_lets_the_readers_behind_it_in_but_not_the_next_writer() {
    let mut q = Queue::new();
    let all = 1_000_000;
    granted(&q.wait("writer", all, all));
    q.wait("r1", 1, all);
    q.wait("r2", 1, all);
    q.wait("writer2", all, all);
    q.wait("r3", 1, all);
    assert_eq!(q.shrink("writer", 1, all), Value::Int(1));
    assert_eq!(q.holders(), ["r1", "r2", "writer"]);
    assert_eq!(q.waiters(), ["writer2", "r3"]);
    let grow = q.shrink("writer", 2, all);
    assert!(is_error(&grow, "cannot grow"), "{grow:?}");
}

#[test]
fn a_reset_removes_every_holder_and_hands_on() {
    let mut q = Queue::new();
    granted(&q.wait("a", 1, 2));
    granted(&q.wait("b", 1, 2));
    q.wait("c", 2, 2);
    assert_eq!(q.reset("", 2), Value::Int(2));
    assert_eq!(q.holders(), ["c"]);
    assert_eq!(q.signals("c"), [3]);
}

#[test]
fn state_shows_holders_and_waiters_in_order_and_writes_nothing() {
    let mut q = Queue::new();
    granted(&q.ask("a", 2, 3, 10_000, LONG, "wait"));
    q.wait("b", 2, 3);
    q.wait("c", 1, 3);
    let before = q.snapshot();
    let Value::Array(state) = q.state() else {
        panic!()
    };
    assert_eq!(q.snapshot(), before);
    assert_eq!(state[0], Value::Int(2));
    let Value::Array(holders) = &state[1] else {
        panic!()
    };
    assert_eq!(holders[0], Value::BulkString(b"a".to_vec()));
    assert_eq!(holders[1], Value::Int(2));
    assert!(matches!(holders[2], Value::Int(ms) if (1..=10_000).contains(&ms)));
    assert_eq!(holders[3], Value::Int(token(1) as i64));
    let Value::Array(waiters) = &state[2] else {
        panic!()
    };
    let ids: Vec<_> = waiters.chunks(3).map(|w| w[0].clone()).collect();
    assert_eq!(ids, [b"b", b"c"].map(|id| Value::BulkString(id.to_vec())));
}

#[cfg(feature = "cluster")]
#[test]
fn on_a_cluster_a_grant_reaches_another_waiters_list_in_the_same_slot() {
    use crate::support::RedisCluster;
    let cluster = RedisCluster::shared();
    let mut q = Queue::on(cluster.primary_for(&key("holders")).conn(), None);
    granted(&q.wait("a", 1, 1));
    q.wait("b", 1, 1);
    // The script reaches b's list by name, beside the keys it was given.
    assert_eq!(q.release("a", 1), Value::Int(1));
    assert_eq!(q.signals("b").len(), 1);
    assert_eq!(q.release("b", 1), Value::Int(1));
    let _: () = q.conn.del(key("fence")).unwrap();
}

/// Waiter `name` of process number `p`: its heartbeat and inbox are the process's.
fn of_process(name: &str, p: u8) -> String {
    format!("{name}@{p:016x}")
}

/// Process number `p`'s inbox: its waiters' grants and wakes.
fn inbox(p: u8) -> String {
    signal(&format!("{p:016x}"))
}

#[test]
fn a_waiter_behind_a_lapsed_entry_the_grant_pass_did_not_reach_is_timed_to_the_live_one_ahead() {
    // Found by the model checker (docs/model.md): the ask used the heartbeat of the entry
    // just ahead, which its own purge had removed, and answered "no event" (-1): the waiter
    // slept with no timer, and once the live waiter ahead was granted and died, for ever.
    let mut q = Queue::new();
    granted(&q.ask(&of_process("h", 0), 1, 1, 60_000, LONG, "wait"));
    assert_eq!(
        position(&q.ask(&of_process("a", 1), 1, 1, 60_000, LONG, "wait")),
        1
    );
    assert_eq!(
        position(&q.ask(&of_process("dead", 2), 1, 1, 60_000, 200, "wait")),
        2
    );
    assert_eq!(
        position(&q.ask(&of_process("c", 3), 1, 1, 60_000, LONG, "wait")),
        3
    );
    thread::sleep(ms(300));
    // The pass stops at a, which does not fit: the lapsed entry stays in line, unforgotten.
    let again = ints(&q.ask(&of_process("c", 3), 1, 1, 60_000, LONG, "wait"));
    assert_eq!(&again[..2], [0, 3], "{again:?}");
    assert_eq!(q.waiters()[1], of_process("dead", 2));
    // Timed to a's lapse, the nearest live waiter ahead of it.
    assert!(
        (LONG as i64 - 1_000..=LONG as i64).contains(&again[2]),
        "{again:?}"
    );
}

#[test]
fn a_waiter_that_leaves_the_line_wakes_the_waiter_behind_it() {
    // Found by the model checker (docs/model.md): the waiter behind had timed its next ask
    // to the leaver's lapse; first in line now, it slept past a holder's expiry.
    let mut q = Queue::new();
    granted(&q.ask(&of_process("h", 0), 1, 1, 60_000, LONG, "wait"));
    assert_eq!(
        position(&q.ask(&of_process("a", 1), 1, 1, 60_000, LONG, "wait")),
        1
    );
    let behind = ints(&q.ask(&of_process("b", 2), 1, 1, 60_000, LONG, "wait"));
    assert_eq!(behind[1], 2);
    assert!(behind[2] > 1_000, "timed to a's lapse: {behind:?}");
    assert_eq!(q.leave(&of_process("a", 1), 1), Value::Int(0));
    let woken: Vec<String> = q.conn.lrange(inbox(2), 0, -1).unwrap();
    assert_eq!(woken, [format!("ask:{}", of_process("b", 2))]);
    // Asked again, b is first, timed to the holder's expiry.
    let first = ints(&q.ask(&of_process("b", 2), 1, 1, 60_000, LONG, "wait"));
    assert_eq!(first[1], 1);
    assert!((55_000..=60_000).contains(&first[2]), "{first:?}");
    // A waiter that leaves with nobody behind it wakes nobody.
    assert_eq!(q.leave(&of_process("b", 2), 1), Value::Int(0));
    let left: i64 = q.conn.llen(inbox(2)).unwrap();
    assert_eq!(left, 1);
}

/// The model checker's first counterexample (docs/model.md), on the real scripts: a grant
/// pushed to a waiter that was slow to ask again, whose claim ran out before that ask, is read
/// by the waiter after the ask found it waiting. Its state machine must not take it for a
/// grant that came after that ask: the units are another's by then.
#[cfg(feature = "model")]
#[test]
fn a_grant_read_after_an_ask_that_found_its_waiter_waiting_is_not_believed_past_its_claim() {
    use std::time::{Duration, Instant};

    use redis_blpop_lock::model::{Asked, QueueNext, QueueWait};

    let mut q = Queue::new();
    let waiter = of_process("w", 1);
    granted(&q.ask(&of_process("h", 0), 1, 1, 60_000, LONG, "wait"));
    let mut wait = QueueWait::new(None);
    let sent = Instant::now();
    let reply = ints(&q.ask(&waiter, 1, 1, 100, LONG, "wait"));
    assert_eq!(reply[1], 1);
    let waiting = |position| Asked::Waiting {
        position,
        next: None,
        ticket: 2,
    };
    wait.asked(sent, waiting(1), Instant::now());
    // The grant is pushed with a claim of the waiter's 100 ms lease; nobody pops it yet.
    assert_eq!(q.release(&of_process("h", 0), 1), Value::Int(1));
    // The waiter's process heartbeats: its hub's clock, which dates grants.
    let beat_sent = Instant::now();
    let beat = engine_beat(&mut q, &format!("{:016x}", 1), LONG);
    thread::sleep(ms(150));
    // Another takes the units the claim gave back; the waiter, asking late, waits.
    granted(&q.ask(&of_process("x", 2), 1, 1, 60_000, LONG, "wait"));
    let sent = Instant::now();
    let reply = ints(&q.ask(&waiter, 1, 1, 100, LONG, "wait"));
    assert_eq!(reply[0], 0, "{reply:?}");
    wait.asked(sent, waiting(reply[1] as u64), Instant::now());
    // Now the hub pops the old grant.
    let element: String = q.conn.lpop(inbox(1), None).unwrap();
    let mut fields = element.splitn(3, ':');
    let token: u64 = fields.next().unwrap().parse().unwrap();
    let expiry: u64 = fields.next().unwrap().parse().unwrap();
    assert_eq!(fields.next(), Some(waiter.as_str()));
    let dated = beat_sent + Duration::from_millis(expiry - beat);
    let now = Instant::now();
    match wait.clone().popped(Some(token), Some(dated), now) {
        QueueNext::Granted { valid_until, .. } => {
            assert!(
                valid_until.is_some_and(|until| until <= now),
                "believed until {valid_until:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Undated, the grant is settled by an ask, which finds the waiter waiting.
    assert_eq!(wait.popped(Some(token), None, now), QueueNext::Ask);
}

/// `queue_beat.lua` for process `process`: the server's time when it was live.
#[cfg(feature = "model")]
fn engine_beat(q: &mut Queue, process: &str, lapse: u64) -> u64 {
    let script = redis::Script::new(include_str!("../../../scripts/queue_beat.lua"));
    let mut invocation = script.prepare_invoke();
    for part in [
        "holders", "held", "queue", "beats", "wants", "tickets", "fence", "signal:", "count",
    ] {
        invocation.key(key(part));
    }
    let server_ms: u64 = invocation
        .arg(process)
        .arg(lapse)
        .invoke(&mut q.conn)
        .unwrap();
    assert!(server_ms > 0, "the process was live");
    server_ms
}
