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
        ("metrics", cfg!(feature = "metrics")),
        ("tracing", cfg!(feature = "tracing")),
    ]
    .into_iter()
    .filter_map(|(feature, on)| on.then_some(feature))
    .collect();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args([
            "build",
            "--example",
            name,
            "--features",
            &features.join(","),
        ])
        .status()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(status.success(), "cargo build --example {name} failed");
    target.join("examples").join(name)
}
