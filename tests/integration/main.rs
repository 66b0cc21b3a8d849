//! The integration tests, in one test binary with a module per suite. Every test starts its
//! own private `redis-server` (`support`); a test that needs another process re-runs this
//! binary as a child playing one of the roles below. Soaks, failovers by a killed node and the
//! bench's smoke test are in the slow group, `tests/slow/`, a binary of their own.

// Part of the support serves only the slow group (`tests/slow/`), which shares it.
#[allow(dead_code, unused_imports)]
mod support;

mod admin_commands;
// The async API's suites.
#[cfg(feature = "tokio")]
mod aio_backends;
#[cfg(feature = "tokio")]
mod aio_cancel;
#[cfg(feature = "tokio")]
mod aio_faults;
#[cfg(feature = "tokio")]
mod aio_lock;
#[cfg(feature = "tokio")]
mod aio_queue;
#[cfg(feature = "tokio")]
mod aio_seams;
#[cfg(feature = "tokio")]
mod aio_shared;
#[cfg(feature = "tokio")]
mod aio_waiting;
mod bounded_waits;
mod cache;
mod chaos;
#[cfg(feature = "cluster")]
mod cluster;
mod election;
// The `redis-lock` binary is built only with this feature.
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_election;
#[cfg(feature = "cli")]
mod cli_queues;
mod eviction;
mod fair_lock;
mod fault_injection;
mod faults;
mod fencing;
mod hostile_input;
mod inspect;
mod interop;
mod lease;
mod lock;
mod loss_notice;
#[cfg(all(feature = "metrics", feature = "tracing"))]
mod observe;
mod outcomes;
#[cfg(feature = "cluster")]
mod queue_backends;
mod queue_count;
mod queue_deadlines;
mod queue_engine;
mod queue_ops;
mod queue_process;
mod quorum;
mod quorum_faults;
mod renewals;
mod replicas;
mod rwlock;
mod seams_conn;
mod security;
mod semaphore;
#[cfg(feature = "sentinel")]
mod sentinel;
mod threads;
// Tests of the cluster support itself.
#[cfg(feature = "cluster")]
mod topology;
mod waiting;

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
        "aio_seams::main_returns" => aio_seams::main_returns(&client, &args),
        "chaos::contend" => chaos::contend(&client, &args),
        "bounded_waits::hold" => bounded_waits::hold(&client, &args),
        "bounded_waits::stand_in_line" => bounded_waits::stand_in_line(&client, &args),
        "cache::compute" => cache::compute_until_killed(&client, &args),
        "election::candidate" => election::candidate(&client, &args),
        #[cfg(feature = "cluster")]
        "cluster::increment" => cluster::increment(&client, &args),
        "fault_injection::paused_holder" => fault_injection::paused_holder(&client, &args),
        "quorum_faults::paused_holder" => quorum_faults::paused_holder(&client, &args),
        "renewals::crowded" => renewals::crowded(&client, &args),
        #[cfg(feature = "tokio")]
        "renewals::crowded_aio" => renewals::crowded_aio(&client, &args),
        "renewals::frozen" => renewals::frozen(&client, &args),
        "seams_conn::call" => seams_conn::call(&client, &args),
        "semaphore::hold" => semaphore::hold(&client, &args),
        "semaphore::wait" => semaphore::wait(&client, &args),
        #[cfg(feature = "sentinel")]
        "sentinel::listeners_end" => sentinel::listeners_end(&args),
        "threads::renewal_threads_end" => threads::renewal_threads_end(&client),
        "waiting::hold" => waiting::hold(&client, &args),
        "waiting::wait" => waiting::wait(&client, &args),
        "waiting::stress" => waiting::stress(&client, &args),
        other => panic!("unknown role {other}"),
    }
}
