//! The project's examples, run by their smoke tests.

use std::path::PathBuf;
use std::process::Command;

/// Example `name`'s binary, built (or found up to date) by `cargo build --example`: `cargo test
/// --test ...` alone does not build examples, and a stale binary from an earlier build would
/// not know the newer flags. Built with this test binary's features, so that under `cargo test
/// --all-features` it is the build `cargo test` already made, and it links the library build
/// the tests use instead of one of its own.
pub fn example_binary(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("test binary path");
    let target = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target folder");
    let features: Vec<&str> = [
        ("cli", cfg!(feature = "cli")),
        ("cluster", cfg!(feature = "cluster")),
        ("sentinel", cfg!(feature = "sentinel")),
        ("tls", cfg!(feature = "tls")),
        ("tokio", cfg!(feature = "tokio")),
        ("bench-rslock", cfg!(feature = "bench-rslock")),
        (
            "bench-distributed-lock",
            cfg!(feature = "bench-distributed-lock"),
        ),
        ("metrics", cfg!(feature = "metrics")),
        ("tracing", cfg!(feature = "tracing")),
    ]
    .into_iter()
    .filter_map(|(feature, on)| on.then_some(feature))
    .collect();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut build = Command::new(cargo);
    build.args([
        "build",
        "--example",
        name,
        "--features",
        &features.join(","),
    ]);
    // Set by `cargo test` for this test binary only: a build script that watches one of them
    // (ring's watches CARGO_MANIFEST_DIR) would run again here, and again at the next `cargo
    // test`, each time rebuilding everything above it.
    for (key, _) in std::env::vars() {
        let per_test = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
        ];
        let per_test_too = ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"];
        if key.starts_with("CARGO_PKG_")
            || per_test.contains(&key.as_str())
            || per_test_too.contains(&key.as_str())
        {
            build.env_remove(key);
        }
    }
    let status = build
        .status()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(status.success(), "cargo build --example {name} failed");
    target.join("examples").join(name)
}
