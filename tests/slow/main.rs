//! The slow group: tests slow by their nature (soaks, failovers, the bench's smoke test, a
//! wait for a default renewal interval), in a test binary of their own that a plain `cargo
//! test` leaves out (`test = false` in Cargo.toml); `cargo test --all-features --test slow`
//! runs it. It shares the integration tests' `support`, and a test that needs another process
//! re-runs this binary as a child playing one of the roles below.

// Each binary uses only part of the shared support.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../integration/support/mod.rs"]
mod support;

#[cfg(feature = "tokio")]
mod aio_with_lock_defaults;
mod bench_smoke;
#[cfg(feature = "cluster")]
mod cluster_failover;
#[cfg(feature = "sentinel")]
mod election_sentinel;
#[cfg(feature = "sentinel")]
mod failover_holders;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
mod fencing_failover;
#[cfg(feature = "tokio")]
mod hub_faults;
#[cfg(feature = "sentinel")]
mod queue_sentinel;
mod quorum_soak;
mod renewal_scale;
#[cfg(feature = "sentinel")]
mod sentinel_failover;
mod soak;
// Tests of the cluster and sentinel support itself.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
mod failover_topology;

/// Runs the other side of a multi-process test when this binary was started as a child (and
/// does nothing in a normal run). A role is named after the module that owns it.
#[test]
fn child_process_role() {
    let Some((role, url, args)) = support::child_role() else {
        return;
    };
    let client = redis::Client::open(url).expect("a valid URL");
    match role.as_str() {
        #[cfg(feature = "tokio")]
        "hub_faults::waiters" => hub_faults::waiters(&client, &args),
        "quorum_soak::worker" => quorum_soak::worker(&client, &args),
        "renewal_scale::many" => renewal_scale::many(&client),
        "soak::worker" => soak::worker(&client, &args),
        other => panic!("unknown role {other}"),
    }
}
