//! The benchmark and metrics examples run and print what they promise (no timing is asserted
//! here: speed lives in the examples themselves).

use std::process::Command;

use crate::support::{example_binary, RedisServer};

const FIELDS: [&str; 12] = [
    "impl",
    "concurrency",
    "hold_ms",
    "seconds",
    "total",
    "min",
    "max",
    "handoff_p50_us",
    "handoff_p99_us",
    "cycle_p50_us",
    "busy_pct",
    "rtt_p50_us",
];

/// The bench, pointed at `server`.
fn bench_on(server: &RedisServer) -> Command {
    let mut bench = Command::new(example_binary("bench"));
    bench.args(["--url", &server.url()]);
    bench
}

/// Runs `bench`, which must succeed, and parses each line it printed as JSON.
fn json_lines(bench: &mut Command) -> (String, Vec<serde_json::Value>) {
    let output = bench.output().expect("run the bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let cells = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (stdout, cells)
}

#[test]
fn the_bench_prints_one_json_object_per_cell() {
    let server = RedisServer::start();
    let mut bench = Command::new(example_binary("bench"));
    bench
        .args([
            "--url",
            &server.url(),
            "--seconds",
            "0.2",
            "--concurrency",
            "1,2",
        ])
        .args(["--hold-ms", "0", "--impl", "ours,polling", "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 4, "{stdout}");
    cells.iter().for_each(assert_loop_cell);
}

/// A `loop` line has every field, took the lock, and has a cycle for one contender, else a
/// handoff.
fn assert_loop_cell(cell: &serde_json::Value) {
    for field in FIELDS {
        assert!(cell.get(field).is_some(), "{field} missing in {cell}");
    }
    assert!(cell["total"].as_u64().unwrap() > 0, "{cell}");
    assert!(cell["rtt_p50_us"].as_u64().is_some(), "{cell}");
    let single = cell["concurrency"] == 1;
    assert_eq!(cell["cycle_p50_us"].is_u64(), single, "{cell}");
    assert_eq!(cell["handoff_p50_us"].is_u64(), !single, "{cell}");
}

/// The async cells (feature `tokio`): `ours-async`'s loop cells (and `rslock`'s, with
/// `bench-rslock`) and a small `scale` cell.
#[cfg(feature = "tokio")]
#[test]
fn the_async_cells_print_their_json() {
    let server = RedisServer::start();
    let impls: &[&str] = if cfg!(feature = "bench-rslock") {
        &["ours-async", "rslock"]
    } else {
        &["ours-async"]
    };
    let mut bench = Command::new(example_binary("bench"));
    bench
        .args(["--url", &server.url(), "--seconds", "0.2"])
        .args([
            "--concurrency",
            "1,2",
            "--hold-ms",
            "0",
            "--impl",
            &impls.join(","),
        ])
        .args([
            "--cell",
            "loop,scale",
            "--tasks",
            "200",
            "--names",
            "10",
            "--json",
        ]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 2 * impls.len() + 1, "{stdout}");
    let (loops, scale) = cells.split_at(2 * impls.len());
    loops.iter().for_each(assert_loop_cell);
    for imp in impls {
        assert!(
            loops.iter().any(|c| c["impl"] == *imp),
            "no line for {imp}: {stdout}"
        );
    }
    let scale = &scale[0];
    assert_eq!(scale["cell"], "scale", "{scale}");
    assert_eq!(scale["tasks"], 200, "{scale}");
    assert_eq!(scale["connections_target"], 10 + 8, "{scale}");
    // Every task has had its lock at least once.
    assert!(scale["min"].as_u64().unwrap() >= 1, "{scale}");
    assert!(scale["total"].as_u64().unwrap() >= 200, "{scale}");
    for field in [
        "handoff_p50_us",
        "rtt_p50_us",
        "connections",
        "connections_before",
        "connections_after",
        "rss_kib",
        "rss_before_kib",
        "rss_increase_kib",
    ] {
        assert!(scale[field].is_u64(), "{field} in {scale}");
    }
    for field in ["acquisitions_per_s", "handoff_p50_rtt"] {
        assert!(scale[field].is_f64(), "{field} in {scale}");
    }
    assert!(scale["meets_target"].is_boolean(), "{scale}");
}

/// The fields of every `crash` line, and of every `overshoot` line.
const CRASH_FIELDS: [&str; 13] = [
    "cell",
    "impl",
    "expire_ms",
    "trials",
    "lateness_p50_us",
    "lateness_p99_us",
    "lateness_max_us",
    "target_p99_us",
    "meets_target",
    "pttl_rtt_max_us",
    "rtt_p50_us",
    "server_hz",
    "note",
];
const OVERSHOOT_FIELDS: [&str; 12] = [
    "cell",
    "impl",
    "timeout_ms",
    "trials",
    "overshoot_p50_us",
    "overshoot_p99_us",
    "overshoot_max_us",
    "target_p99_us",
    "meets_target",
    "rtt_p50_us",
    "server_hz",
    "note",
];

#[test]
fn the_crash_and_overshoot_cells_print_their_json() {
    let server = RedisServer::start();
    // python-redis-lock is a test requirement (the interop tests fail with the install
    // command without it), so its cells are smoke-tested too, never skipped.
    let impls = ["ours", "polling", "python"];
    let mut bench = Command::new(example_binary("bench"));
    bench
        .args(["--url", &server.url(), "--cell", "crash,overshoot"])
        .args(["--trials", "2", "--expire-ms", "100", "--timeout-ms", "20"])
        .args(["--impl", &impls.join(","), "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    // One crash line and one overshoot line (one timeout) per impl.
    assert_eq!(cells.len(), 2 * impls.len(), "{stdout}");
    for cell in &cells {
        let fields: &[&str] = match cell["cell"].as_str() {
            Some("crash") => &CRASH_FIELDS,
            Some("overshoot") => &OVERSHOOT_FIELDS,
            _ => panic!("no known cell in {cell}"),
        };
        for field in fields {
            assert!(cell.get(field).is_some(), "{field} missing in {cell}");
        }
        let figure = if cell["cell"] == "crash" {
            "lateness"
        } else {
            "overshoot"
        };
        // python-redis-lock cannot wait 20 ms (whole seconds only): that line says so instead.
        if cell["impl"] == "python" && cell["cell"] == "overshoot" {
            assert_eq!(cell["trials"], 0, "{cell}");
            assert!(cell["note"].is_string(), "{cell}");
            continue;
        }
        assert_eq!(cell["trials"], 2, "{cell}");
        for pct in ["p50", "p99", "max"] {
            let field = format!("{figure}_{pct}_us");
            assert!(cell[&field].is_i64(), "{field} in {cell}");
        }
        assert!(cell["meets_target"].is_boolean(), "{cell}");
        assert!(cell["rtt_p50_us"].is_u64(), "{cell}");
    }
    for imp in &impls {
        for kind in ["crash", "overshoot"] {
            assert!(
                cells.iter().any(|c| c["impl"] == *imp && c["cell"] == kind),
                "no {kind} line for {imp}: {stdout}"
            );
        }
    }
}

/// `--cluster`: the loop cells (ours only: 1, 2, 6 threads × hold 0, 10 ms), one `names` line
/// and one `wait1` line, on a cluster the bench starts and stops itself.
#[cfg(feature = "cluster")]
#[test]
fn the_cluster_cells_print_their_json() {
    let output = Command::new(example_binary("bench"))
        .args([
            "--cluster",
            "--seconds",
            "0.2",
            "--cell",
            "loop,names,wait1",
        ])
        .arg("--json")
        .output()
        .expect("run the bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 6 + 1 + 1, "{stdout}");
    for line in &lines {
        assert_eq!(line["backend"], "cluster", "{line}");
    }
    let (loops, others) = lines.split_at(6);
    for cell in loops {
        for field in FIELDS {
            assert!(cell.get(field).is_some(), "{field} missing in {cell}");
        }
        assert_eq!(cell["impl"], "ours", "{cell}");
        assert!(cell["total"].as_u64().unwrap() > 0, "{cell}");
    }
    let names = &others[0];
    assert_eq!(names["cell"], "names", "{stdout}");
    assert_eq!(names["concurrency"], 6, "{names}");
    for field in [
        "total",
        "cycle_p50_us",
        "cycle_p99_us",
        "rtt_p50_us",
        "nodes",
    ] {
        assert!(names[field].is_u64(), "{field} in {names}");
    }
    for field in ["acquisitions_per_s", "cycle_p50_rtt", "cycle_p99_rtt"] {
        assert!(names[field].is_f64(), "{field} in {names}");
    }
    let wait1 = &others[1];
    assert_eq!(wait1["cell"], "wait1", "{stdout}");
    assert_eq!(wait1["replicas"], 1, "{wait1}");
    for field in ["cycles", "cycle_p50_us", "wait_cycle_p50_us", "rtt_p50_us"] {
        assert!(wait1[field].is_u64(), "{field} in {wait1}");
    }
    assert!(wait1["extra_us"].is_i64(), "{wait1}");
    assert!(wait1["extra_rtt"].is_f64(), "{wait1}");
}

/// `--quorum 3`: ours and redlock-polling on three servers the bench starts and stops itself.
#[test]
fn the_quorum_cells_print_their_json() {
    let impls = ["ours", "redlock-polling"];
    let mut bench = Command::new(example_binary("bench"));
    bench
        .args(["--quorum", "3", "--seconds", "0.2", "--concurrency", "1,2"])
        .args(["--hold-ms", "0", "--impl", &impls.join(","), "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 2 * impls.len(), "{stdout}");
    for cell in &cells {
        assert_loop_cell(cell);
        assert_eq!(cell["backend"], "quorum", "{cell}");
        assert_eq!(cell["servers"], 3, "{cell}");
        // Only redlock-polling can run out of tries.
        let polling = cell["impl"] == "redlock-polling";
        assert_eq!(cell["gave_up"].is_u64(), polling, "{cell}");
    }
    for imp in impls {
        assert!(
            cells.iter().any(|c| c["impl"] == imp),
            "no line for {imp}: {stdout}"
        );
    }
}

/// A tiny `semaphore` cell (3 contenders on 2 permits) and `rwlock` cell per impl (ours,
/// `ours-async` with `tokio`, `distributed-lock` with `bench-distributed-lock`): every field,
/// every contender served, never more holders than permits, never a clash of ours.
#[test]
fn the_semaphore_and_rwlock_cells_print_their_json() {
    let server = RedisServer::start();
    let impls: Vec<&str> = [
        ("ours", true),
        ("ours-async", cfg!(feature = "tokio")),
        ("distributed-lock", cfg!(feature = "bench-distributed-lock")),
    ]
    .into_iter()
    .filter_map(|(imp, built)| built.then_some(imp))
    .collect();
    let mut bench = bench_on(&server);
    bench
        .args([
            "--cell",
            "semaphore,rwlock",
            "--seconds",
            "0.3",
            "--permits",
            "2",
        ])
        .args(["--concurrency", "3", "--readers", "2", "--writers", "1"])
        .args(["--hold-ms", "1", "--impl", &impls.join(","), "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 2 * impls.len(), "{stdout}");
    for &imp in &impls {
        let cell = |kind: &str| {
            let found = cells.iter().find(|c| c["impl"] == imp && c["cell"] == kind);
            found.unwrap_or_else(|| panic!("no {kind} line for {imp}: {stdout}"))
        };
        let semaphore = cell("semaphore");
        assert_eq!(semaphore["permits"], 2, "{semaphore}");
        assert!(semaphore["min"].as_u64().unwrap() >= 1, "{semaphore}");
        assert!(
            semaphore["most_holders"].as_u64().unwrap() <= 2,
            "{semaphore}"
        );
        for field in ["handoff_p50_us", "rtt_p50_us"] {
            assert!(semaphore[field].is_u64(), "{field} in {semaphore}");
        }
        for field in ["spread_pct", "busy_pct", "x_rtt"] {
            assert!(semaphore[field].is_f64(), "{field} in {semaphore}");
        }
        assert!(semaphore["meets_target"].is_boolean(), "{semaphore}");
        let rwlock = cell("rwlock");
        // distributed-lock's write lock can be taken while a reader holds (its check and its
        // take are separate requests): the cell counts that, it is no failure of the bench.
        if imp != "distributed-lock" {
            assert_eq!(rwlock["clashes"], 0, "{rwlock}");
        } else {
            assert!(rwlock["clashes"].is_u64(), "{rwlock}");
        }
        for (role, contenders) in [("reads", 2), ("writes", 1)] {
            assert_eq!(rwlock[role]["contenders"], contenders, "{rwlock}");
            assert!(rwlock[role]["total"].as_u64().unwrap() >= 1, "{rwlock}");
            assert!(rwlock[role]["wait_max_us"].is_u64(), "{rwlock}");
        }
    }
}

/// The queue primitives' fault cells, one trial each: a SIGKILLed holder's permit, a
/// SIGKILLed waiter, and grant order across processes.
#[test]
fn the_queue_fault_cells_print_their_json() {
    let server = RedisServer::start();
    let mut bench = bench_on(&server);
    bench
        .args(["--cell", "permit-crash,dead-waiter,fifo", "--trials", "1"])
        .args(["--expire-ms", "100", "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 3, "{stdout}");
    let (crash, dead, fifo) = (&cells[0], &cells[1], &cells[2]);
    assert_eq!(crash["cell"], "permit-crash", "{stdout}");
    assert_eq!(crash["trials"], 1, "{crash}");
    for field in CRASH_FIELDS {
        assert!(crash.get(field).is_some(), "{field} missing in {crash}");
    }
    assert!(crash["lateness_max_us"].is_i64(), "{crash}");
    assert_eq!(dead["cell"], "dead-waiter", "{stdout}");
    assert_eq!(dead["trials"], 1, "{dead}");
    for field in ["delay_max_us", "after_lapse_max_us"] {
        assert!(dead[field].is_i64(), "{field} in {dead}");
    }
    assert!(dead["meets_target"].is_boolean(), "{dead}");
    assert_eq!(fifo["cell"], "fifo", "{stdout}");
    assert_eq!(fifo["waiters"], 30, "{fifo}");
    for field in [
        "inversions",
        "inversions_beyond_rtt",
        "queue_inversions",
        "rtt_p50_us",
    ] {
        assert!(fifo[field].is_u64(), "{field} in {fifo}");
    }
}

/// The `loss-notice` cell, two trials per impl (`ours-async` with `tokio`): every holder was
/// told of the reset, in time on an idle machine.
#[test]
fn the_loss_notice_cell_times_the_notice_of_a_reset() {
    let server = RedisServer::start();
    let impls = if cfg!(feature = "tokio") {
        "ours,ours-async"
    } else {
        "ours"
    };
    let mut bench = bench_on(&server);
    bench.args([
        "--cell",
        "loss-notice",
        "--impl",
        impls,
        "--trials",
        "2",
        "--json",
    ]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), impls.split(',').count(), "{stdout}");
    for cell in &cells {
        assert_eq!(cell["cell"], "loss-notice", "{stdout}");
        assert_eq!(cell["trials"], 2, "{cell}");
        for field in [
            "notice_p50_us",
            "notice_p99_us",
            "notice_max_us",
            "rtt_p50_us",
        ] {
            assert!(cell[field].is_u64(), "{field} in {cell}");
        }
        assert!(cell["meets_target"].is_boolean(), "{cell}");
    }
}

/// The `handoff-path` cell: the library marks a hand-off's steps (the hub's pop, the waiter's
/// wake) and the cell splits the hand-offs to woken waiters by them.
#[cfg(feature = "tracing")]
#[test]
fn the_handoff_path_cell_splits_the_handoffs_by_the_librarys_steps() {
    let server = RedisServer::start();
    let mut bench = bench_on(&server);
    bench.args([
        "--cell",
        "handoff-path",
        "--concurrency",
        "6",
        "--hold-ms",
        "0",
        "--seconds",
        "0.5",
        "--json",
    ]);
    let (stdout, cells) = json_lines(&mut bench);
    let [cell] = &cells[..] else {
        panic!("one line: {stdout}")
    };
    assert_eq!(cell["cell"], "handoff-path", "{cell}");
    assert!(cell["acquisitions"].as_u64() > Some(6), "{cell}");
    // Six contenders for half a second: some hand-offs go to a waiter the hub woke, and each
    // of their steps was marked.
    assert!(cell["woken_pct"].as_f64() > Some(0.0), "{cell}");
    for step in ["release", "pop", "wake", "acquired", "handoff"] {
        for p in ["p50", "p99"] {
            let field = format!("{step}_{p}_us");
            assert!(cell[&field].is_u64(), "{field} in {cell}");
        }
    }
}

#[test]
fn the_bench_refuses_a_bad_argument() {
    let output = Command::new(example_binary("bench"))
        .args(["--concurrency", "x"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--concurrency"));
    let output = Command::new(example_binary("bench"))
        .args(["--cell", "nope"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--cell"));
}

/// `examples/metrics.rs` runs and prints the cost line and a Prometheus scrape with the
/// metrics its run must have made (no timing is asserted: speed lives in the example itself).
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_example_prints_its_cost_and_a_prometheus_scrape() {
    let server = RedisServer::start();
    let output = std::process::Command::new(example_binary("metrics"))
        .args(["--seconds", "1"])
        .env("REDIS_URL", server.url())
        .output()
        .expect("run the metrics example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("uncontended cycle: p50"), "{stdout}");
    for line in [
        r#"redis_lock_acquisitions_total{lock="cost",outcome="acquired"}"#,
        r#"redis_lock_acquisitions_total{lock="report",outcome="acquired"}"#,
        r#"redis_lock_acquisitions_total{lock="report",outcome="timed_out"}"#,
        r#"redis_lock_handoffs_total{lock="report"}"#,
        r#"redis_lock_hold_seconds{lock="report",quantile="0.5"}"#,
        r#"redis_lock_wait_seconds{lock="report",outcome="acquired",quantile="0.99"}"#,
    ] {
        assert!(stdout.contains(line), "no {line} in:\n{stdout}");
    }
}

#[test]
fn the_engine_cost_cells_print_the_scripts_server_time() {
    let server = RedisServer::start();
    let mut bench = bench_on(&server);
    bench.args(["--cell", "engine-cost", "--seconds", "0.2", "--json"]);
    bench.args(["--holders", "0,10", "--waiters", "10"]);
    let (stdout, cells) = json_lines(&mut bench);
    let shapes: Vec<_> = cells
        .iter()
        .map(|cell| (cell["holders"].as_u64(), cell["waiters"].as_u64()))
        .collect();
    assert_eq!(
        shapes,
        [(Some(0), Some(0)), (Some(10), Some(0)), (Some(1), Some(10))],
        "{stdout}"
    );
    for cell in &cells {
        assert_eq!(cell["cell"], "engine-cost", "{stdout}");
        assert!(cell["calls"].as_u64() > Some(0), "{stdout}");
        assert!(cell["script_us_per_call"].as_f64() > Some(0.0), "{stdout}");
    }
}

/// The `connections` cells, shrunk (`--load-scale 0.02`: 40 tasks; 4 threads; 20 threads and
/// 100 tasks on 3 names): one line per load, every waiter queued or waiting and then cancelled,
/// and no key of theirs left behind.
#[cfg(feature = "tokio")]
#[test]
fn the_connections_cells_count_the_waiters_connections() {
    let server = RedisServer::start();
    let mut bench = bench_on(&server);
    bench.args(["--cell", "connections", "--load-scale", "0.02", "--json"]);
    let (stdout, cells) = json_lines(&mut bench);
    let shapes: Vec<_> = cells
        .iter()
        .map(|cell| {
            (
                cell["load"].as_str(),
                cell["tasks"].as_u64(),
                cell["threads"].as_u64(),
                cell["names"].as_u64(),
                cell["connections_target"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [
            (
                Some("async-semaphore"),
                Some(40),
                Some(0),
                Some(1),
                Some(20)
            ),
            (
                Some("blocking-threads"),
                Some(0),
                Some(4),
                Some(1),
                Some(20)
            ),
            (
                Some("mixed-100-names"),
                Some(100),
                Some(20),
                Some(3),
                Some(16)
            ),
        ],
        "{stdout}"
    );
    for cell in &cells {
        assert_eq!(cell["cell"], "connections", "{stdout}");
        let waiters = cell["waiters"].as_u64().unwrap();
        assert_eq!(
            waiters,
            cell["tasks"].as_u64().unwrap() + cell["threads"].as_u64().unwrap(),
            "{cell}"
        );
        // Every waiter ended cancelled: none can have had a turn.
        assert_eq!(cell["cancelled"].as_u64(), Some(waiters), "{cell}");
        for field in [
            "queued",
            "connections",
            "blocked_clients",
            "connections_before",
        ] {
            assert!(cell[field].as_u64() > Some(0), "{field} in {cell}");
        }
        for field in [
            "connections_least",
            "connections_after",
            "setup_ms",
            "teardown_ms",
        ] {
            assert!(cell[field].is_u64(), "{field} in {cell}");
        }
        assert!(cell["meets_target"].is_boolean(), "{cell}");
    }
    // One name in three of the mixed load is a plain lock, whose waiters have no queue.
    assert_eq!(cells[0]["queued"], 40, "{stdout}");
    assert_eq!(cells[1]["queued"], 4, "{stdout}");
    assert!(cells[2]["queued"].as_u64() < Some(120), "{stdout}");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*bench:connections:*")
        .query(&mut server.conn())
        .unwrap();
    assert!(left.is_empty(), "keys left behind: {left:?}");
}

/// The `idle-load` cell, shrunk (10 waiters, 2 s): the server ran scripts, commands and
/// `BLPOP`s while they waited, and no key of theirs is left behind.
#[cfg(feature = "tokio")]
#[test]
fn the_idle_load_cell_counts_what_idle_waiters_cost_the_server() {
    let server = RedisServer::start();
    let mut bench = bench_on(&server);
    bench.args([
        "--cell",
        "idle-load",
        "--waiters",
        "10",
        "--seconds",
        "2",
        "--json",
    ]);
    let (stdout, cells) = json_lines(&mut bench);
    assert_eq!(cells.len(), 1, "{stdout}");
    let cell = &cells[0];
    assert_eq!(cell["cell"], "idle-load", "{cell}");
    assert_eq!(cell["waiters"], 10, "{cell}");
    assert_eq!(cell["scripts_target"], 10, "{cell}");
    assert_eq!(cell["commands_target"], 300, "{cell}");
    assert!(cell["meets_target"].is_boolean(), "{cell}");
    assert!(cell["seconds"].as_f64() >= Some(2.0), "{cell}");
    let scripts = cell["scripts_per_s"].as_f64().unwrap();
    assert!(scripts > 0.0, "{cell}");
    // Every script call is a command too, with those it calls.
    assert!(cell["commands_per_s"].as_f64().unwrap() > scripts, "{cell}");
    assert!(cell["blpops_per_s"].as_f64() > Some(0.0), "{cell}");
    // The process's heartbeat, sent as text on its waiting connection.
    assert!(cell["calls"]["eval"].as_u64() > Some(0), "{cell}");
    // The bench's own `CONFIG RESETSTAT` and `INFO` are left out.
    let calls = cell["calls"].as_object().unwrap();
    assert!(
        !calls
            .keys()
            .any(|c| c.starts_with("config") || c.starts_with("info")),
        "{cell}"
    );
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*bench:idle-load:*")
        .query(&mut server.conn())
        .unwrap();
    assert!(left.is_empty(), "keys left behind: {left:?}");
}
