//! The benchmark example runs and prints the JSON it promises (no timing is asserted here:
//! speed lives in the benchmark itself).

use std::path::PathBuf;
use std::process::Command;

use crate::support::RedisServer;

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

/// The bench example's binary. `cargo test` builds the examples next to the test binaries'
/// folder; a run of this test binary alone (`cargo test --test integration`) builds it here.
fn bench_binary() -> PathBuf {
    let deps = std::env::current_exe().expect("test binary path");
    let target = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target folder");
    let bench = target.join("examples").join("bench");
    if !bench.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let status = Command::new(cargo)
            .args(["build", "--example", "bench"])
            .status()
            .expect("run cargo build --example bench");
        assert!(status.success(), "cargo build --example bench failed");
    }
    bench
}

#[test]
fn the_bench_prints_one_json_object_per_cell() {
    let server = RedisServer::start();
    let output = Command::new(bench_binary())
        .args([
            "--url",
            &server.url(),
            "--seconds",
            "0.2",
            "--concurrency",
            "1,2",
        ])
        .args(["--hold-ms", "0", "--impl", "ours,polling", "--json"])
        .output()
        .expect("run the bench");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let cells: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(cells.len(), 4, "{stdout}");
    for cell in &cells {
        for field in FIELDS {
            assert!(cell.get(field).is_some(), "{field} missing in {cell}");
        }
        assert!(cell["total"].as_u64().unwrap() > 0, "{cell}");
        assert!(cell["rtt_p50_us"].as_u64().is_some(), "{cell}");
        let single = cell["concurrency"] == 1;
        assert_eq!(cell["cycle_p50_us"].is_u64(), single, "{cell}");
        assert_eq!(cell["handoff_p50_us"].is_u64(), !single, "{cell}");
    }
}

#[test]
fn the_bench_refuses_a_bad_argument() {
    let output = Command::new(bench_binary())
        .args(["--concurrency", "x"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--concurrency"));
}
