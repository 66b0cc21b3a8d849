//! `redis-lock` on the semaphores, fair locks and read-write locks: `status` and `list` show
//! holders and the line, `reset` ends a named hold or all of them, and `run --permits`,
//! `--read`, `--write` and `--fair` hold them while a command runs.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{Lock, Semaphore};

use crate::cli::commands::{finish, list_json, redis_lock, redis_lock_over, stderr, stdout, HUNG};
use crate::queue::ops::{id_of_hold, in_line, semaphore};
use crate::support::{eventually, secs, send_signal, strip_process, RedisServer};

#[test]
fn status_of_a_semaphore_shows_its_holders_and_its_line_in_order() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Semaphore::builder(&client, "db", 1)
        .id("holder")
        .build()
        .unwrap();
    let permit = holder.acquire().unwrap();
    let first = in_line(&server, semaphore(&client, "db", 1, "first", secs(2)), 1, 1);
    let second = in_line(
        &server,
        semaphore(&client, "db", 1, "second", secs(2)),
        1,
        2,
    );
    // The ids as the server has them: each ends in `@<process id>`.
    let queue = inspect::queue(&client, Primitive::Semaphore, "db", secs(5)).unwrap();
    let (holder_id, first_id, second_id) = match (&queue.holders[..], &queue.waiters[..]) {
        ([holder], [first, second]) => (&holder.id, &first.id, &second.id),
        _ => panic!("not 1 holder and 2 waiters: {queue:?}"),
    };
    assert_eq!(
        [holder_id, first_id, second_id].map(|id| strip_process(id)),
        ["holder:0", "first:0", "second:0"]
    );

    let output = redis_lock(&server)
        .args(["status", "--semaphore", "db", "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let ttl = status["holders"][0]["ttl_ms"].as_u64().expect("a lease");
    let lapses = |at: usize| status["waiters"][at]["lapses_in_ms"].as_u64().unwrap();
    assert_eq!(
        status,
        serde_json::json!({
            "kind": "semaphore", "name": "db", "held": true, "used": 1,
            "holders": [{"id": holder_id, "units": 1, "ttl_ms": ttl,
                         "token": permit.fencing_token()}],
            "waiters": [{"id": first_id, "units": 1, "lapses_in_ms": lapses(0)},
                        {"id": second_id, "units": 1, "lapses_in_ms": lapses(1)}],
        })
    );
    let text = stdout(
        &redis_lock(&server)
            .args(["status", "--semaphore", "db"])
            .output()
            .unwrap(),
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "semaphore \"db\": 1 holder, 2 waiting");
    assert!(
        lines[1].starts_with(&format!("  held by \"{holder_id}\", expires in ")),
        "{text}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "  waiting 1: \"{first_id}\", 1 permit, lapses in "
        )),
        "{text}"
    );
    assert!(
        lines[3].starts_with(&format!("  waiting 2: \"{second_id}\", 1 permit, ")),
        "{text}"
    );

    permit.release().unwrap();
    // Each in turn: the first's permit goes to the second when the first lets go.
    for waiter in [first, second] {
        waiter.got.recv_timeout(HUNG).unwrap();
    }
}

#[test]
fn status_of_a_free_primitive_says_free_and_exits_1() {
    let server = RedisServer::start();
    for kind in ["--semaphore", "--fair", "--rwlock"] {
        let output = redis_lock(&server)
            .args(["status", kind, "idle"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        assert!(
            stdout(&output).ends_with("\"idle\": free\n"),
            "{}",
            stdout(&output)
        );
    }
}

#[test]
fn list_shows_the_queue_primitives_after_the_locks() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "plain").id("one").build().unwrap();
    assert!(lock.try_acquire().unwrap());
    let fair = Lock::builder(&client, "deploys")
        .fair(true)
        .id("two")
        .build()
        .unwrap();
    assert!(fair.try_acquire().unwrap());
    let backups = Semaphore::builder(&client, "backups", 4)
        .id("three")
        .build()
        .unwrap();
    let _permit = backups.acquire_many(3).unwrap();

    let list = list_json(redis_lock(&server));
    let kinds: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["kind"].as_str().unwrap(),
                entry["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("lock", "plain"),
            ("semaphore", "backups"),
            ("fair-lock", "deploys")
        ]
    );
    assert_eq!(list[1]["holders"][0]["units"], 3);
    let text = stdout(&redis_lock(&server).arg("list").output().unwrap());
    assert!(
        text.contains("semaphore \"backups\": 1 holder, 0 waiting\n"),
        "{text}"
    );
    assert!(
        text.contains("fair-lock \"deploys\": 1 holder, 0 waiting\n"),
        "{text}"
    );
}

#[test]
fn reset_of_a_semaphore_ends_the_named_hold_and_the_first_in_line_takes_it() {
    let server = RedisServer::start();
    let client = server.client();
    let holders = Semaphore::builder(&client, "s", 2)
        .id("holder")
        .build()
        .unwrap();
    let kept = holders.acquire().unwrap();
    let ended = holders.acquire().unwrap();
    let waiter = in_line(&server, semaphore(&client, "s", 2, "waiter", secs(2)), 1, 1);
    let ended_id = id_of_hold(&client, "s", ended.fencing_token());
    assert_eq!(strip_process(&ended_id), "holder:1");

    for (args, saying) in [
        (
            &["--semaphore", "s", "--permits", "2"][..],
            "name one with --id",
        ),
        (
            &["--semaphore", "s", "--id", ended_id.as_str()],
            "--permits N",
        ),
        (
            &["s", "--id", ended_id.as_str()],
            "--id and --permits are for",
        ),
    ] {
        let output = redis_lock(&server)
            .arg("reset")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(stderr(&output).contains(saying), "{}", stderr(&output));
    }
    let output = redis_lock(&server)
        .args([
            "reset",
            "--semaphore",
            "s",
            "--permits",
            "2",
            "--id",
            ended_id.as_str(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!("semaphore \"s\": released \"{ended_id}\"'s hold (the first waiters take it)\n")
    );
    waiter
        .got
        .recv_timeout(HUNG)
        .expect("the waiter took the permit");
    let queue = inspect::queue(&client, Primitive::Semaphore, "s", secs(5)).unwrap();
    let mut ids: Vec<&str> = queue.holders.iter().map(|h| strip_process(&h.id)).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["holder:0", "waiter:0"]);
    drop(kept);
}

#[test]
fn reset_force_ends_every_hold_of_a_read_write_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = redis_blpop_lock::RwLock::new(&client, "config").unwrap();
    let _one = rw.read().unwrap();
    let _two = rw.read().unwrap();
    let output = redis_lock(&server)
        .args(["reset", "--rwlock", "config", "--force"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "rwlock \"config\": released 2 holds (the first waiters take them)\n"
    );
    let queue = inspect::queue(&client, Primitive::RwLock, "config", Duration::from_secs(5));
    assert!(queue.unwrap().holders.is_empty());
}

/// A `redis-lock run ARGS... -- sleep 60`, once the `kind` primitive `name` has `holders`
/// holders.
fn run_holding(
    server: &RedisServer,
    args: &[&str],
    kind: Primitive,
    name: &str,
    holders: usize,
) -> Child {
    let run = redis_lock(server)
        .arg("run")
        .args(args)
        .args(["--", "sleep", "60"])
        .spawn()
        .unwrap();
    eventually(HUNG, format!("{holders} holders of {name}"), || {
        inspect::queue(&server.client(), kind, name, secs(5))
            .unwrap()
            .holders
            .len()
            == holders
    });
    run
}

/// A `redis-lock run ARGS... --no-wait -- true`: its output.
fn run_once(server: &RedisServer, args: &[&str]) -> Output {
    redis_lock(server)
        .arg("run")
        .args(args)
        .args(["--no-wait", "--", "true"])
        .output()
        .unwrap()
}

/// Ends a run (or a lead) with SIGTERM, which its command gets; the run releases what it held.
pub(crate) fn end(run: Child) {
    send_signal(run.id(), "TERM");
    let output = finish(run);
    assert_eq!(output.status.code(), Some(128 + 15), "{}", stderr(&output));
}

#[test]
fn run_with_permits_lets_at_most_n_runs_hold_at_once() {
    let server = RedisServer::start();
    let semaphore = ["--permits", "2", "backups"];
    let one = run_holding(&server, &semaphore, Primitive::Semaphore, "backups", 1);
    let two = run_holding(&server, &semaphore, Primitive::Semaphore, "backups", 2);
    let third = run_once(&server, &semaphore);
    assert_eq!(third.status.code(), Some(1), "{}", stderr(&third));
    assert!(
        stderr(&third).contains("is busy, 2 holding, 0 waiting; nothing ran"),
        "{}",
        stderr(&third)
    );
    end(one);
    let third = run_once(&server, &semaphore);
    assert!(third.status.success(), "{}", stderr(&third));
    end(two);
}

#[test]
fn a_run_on_a_semaphore_leaves_the_one_named_in_braces_free() {
    let server = RedisServer::start();
    let holder = run_holding(
        &server,
        &["--permits", "1", "x"],
        Primitive::Semaphore,
        "x",
        1,
    );
    let braced = run_once(&server, &["--permits", "1", "{x}"]);
    assert!(braced.status.success(), "{}", stderr(&braced));
    let again = run_once(&server, &["--permits", "1", "x"]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    end(holder);
}

#[test]
fn list_names_each_queue_primitive_as_it_was_named() {
    let server = RedisServer::start();
    let client = server.client();
    let names = ["x", "{x}", "a:{b}", "a}b", "={x}"];
    let semaphores: Vec<Semaphore> = (names.iter())
        .map(|&name| Semaphore::new(&client, name, 1).unwrap())
        .collect();
    let _permits: Vec<_> = (semaphores.iter())
        .map(|semaphore| {
            semaphore
                .try_acquire()
                .unwrap()
                .expect("a semaphore of its own")
        })
        .collect();
    let fair = Lock::builder(&client, "{x}").fair(true).build().unwrap();
    assert!(fair.try_acquire().unwrap());

    let list = list_json(redis_lock(&server));
    let mut listed: Vec<(&str, &str)> = (list.as_array().unwrap().iter())
        .map(|entry| {
            (
                entry["kind"].as_str().unwrap(),
                entry["name"].as_str().unwrap(),
            )
        })
        .collect();
    listed.sort();
    let mut expected: Vec<(&str, &str)> = (names.iter())
        .map(|&name| ("semaphore", name))
        .chain([("fair-lock", "{x}")])
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
}

#[test]
fn a_sigkilled_runs_permit_returns_at_its_expiry_for_the_next_run() {
    let server = RedisServer::start();
    let semaphore = ["--permits", "1", "s", "--expire", "2"];
    let mut holder = run_holding(&server, &semaphore, Primitive::Semaphore, "s", 1);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed = Instant::now();
    let next = redis_lock(&server)
        .args([
            "run",
            "--permits",
            "1",
            "s",
            "--timeout",
            "30",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(next.status.success(), "{}", stderr(&next));
    // Not before the expiry: nobody gave the permit back.
    let waited = killed.elapsed();
    assert!(waited > Duration::from_millis(1500), "{waited:?}");
}

#[test]
fn read_runs_hold_together_and_a_write_run_is_kept_out() {
    let server = RedisServer::start();
    let one = run_holding(
        &server,
        &["--read", "config"],
        Primitive::RwLock,
        "config",
        1,
    );
    let two = run_holding(
        &server,
        &["--read", "config"],
        Primitive::RwLock,
        "config",
        2,
    );
    let writer = run_once(&server, &["--write", "config"]);
    assert_eq!(writer.status.code(), Some(1), "{}", stderr(&writer));
    end(one);
    end(two);
    let writer = run_holding(
        &server,
        &["--write", "config"],
        Primitive::RwLock,
        "config",
        1,
    );
    let reader = run_once(&server, &["--read", "config"]);
    assert_eq!(reader.status.code(), Some(1), "{}", stderr(&reader));
    end(writer);
}

#[test]
fn a_fair_run_holds_the_fair_lock_and_not_python_redis_locks() {
    let server = RedisServer::start();
    let fair = run_holding(
        &server,
        &["--fair", "deploys"],
        Primitive::FairLock,
        "deploys",
        1,
    );
    let busy = run_once(&server, &["--fair", "deploys"]);
    assert_eq!(busy.status.code(), Some(1), "{}", stderr(&busy));
    // A different lock of the same name: python-redis-lock's is free.
    let plain = run_once(&server, &["deploys"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    end(fair);
}

#[test]
fn a_signal_while_waiting_in_a_semaphores_line_runs_nothing() {
    let server = RedisServer::start();
    let holder = run_holding(
        &server,
        &["--permits", "1", "s"],
        Primitive::Semaphore,
        "s",
        1,
    );
    let waiter = redis_lock(&server)
        .args(["run", "--permits", "1", "s", "--", "echo", "ran"])
        .spawn()
        .unwrap();
    eventually(HUNG, "the run to wait in line", || {
        let queue = inspect::queue(&server.client(), Primitive::Semaphore, "s", secs(5));
        queue.unwrap().waiters.len() == 1
    });
    send_signal(waiter.id(), "TERM");
    let output = finish(waiter);
    assert_eq!(output.status.code(), Some(128 + 15), "{}", stderr(&output));
    assert_eq!(stdout(&output), "", "the command ran");
    // It left the line on its way out, not at its lapse.
    let queue = inspect::queue(&server.client(), Primitive::Semaphore, "s", secs(5)).unwrap();
    assert!(queue.waiters.is_empty(), "{:?}", queue.waiters);
    end(holder);
}

#[test]
fn on_a_quorum_the_queue_primitives_are_refused_not_reported_free() {
    refused_on_a_quorum(
        &[
            &["status", "--semaphore", "s"],
            &["reset", "--fair", "s", "--force"],
            &["run", "--permits", "2", "s", "--", "true"],
        ],
        "not supported",
    );
}

/// Runs each of `commands` on a quorum of three servers: each must exit 2 with an error
/// that says `saying`.
pub(crate) fn refused_on_a_quorum(commands: &[&[&str]], saying: &str) {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    for args in commands {
        let output = redis_lock_over(&servers).args(*args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains(saying), "{}", stderr(&output));
    }
}
