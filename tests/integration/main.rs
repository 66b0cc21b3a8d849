//! The integration tests, in one test binary with a folder per area and a module per suite. Every test starts its
//! own private `redis-server` (`support`); a test that needs another process re-runs this
//! binary as a child playing one of the roles below. Soaks, failovers by a killed node and the
//! bench's smoke test are in the slow group, `tests/slow/`, a binary of their own.

// Part of the support serves only the slow group (`tests/slow/`), which shares it.
#[allow(dead_code, unused_imports)]
mod support;

// The suites, in a folder per area.
#[cfg(feature = "tokio")]
mod aio;
#[cfg(feature = "cli")]
mod cli;
mod faults;
mod lock;
mod ops;
mod queue;
mod topology;

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
        "aio::seams::main_returns" => aio::seams::main_returns(&client, &args),
        "faults::chaos::contend" => faults::chaos::contend(&client, &args),
        "faults::bounded_waits::hold" => faults::bounded_waits::hold(&client, &args),
        "faults::bounded_waits::stand_in_line" => {
            faults::bounded_waits::stand_in_line(&client, &args)
        }
        "lock::cache::compute" => lock::cache::compute_until_killed(&client, &args),
        "queue::election::candidate" => queue::election::candidate(&client, &args),
        #[cfg(feature = "cluster")]
        "topology::cluster::increment" => topology::cluster::increment(&client, &args),
        "faults::injected::paused_holder" => faults::injected::paused_holder(&client, &args),
        "topology::quorum_faults::paused_holder" => {
            topology::quorum_faults::paused_holder(&client, &args)
        }
        "lock::renewals::crowded" => lock::renewals::crowded(&client, &args),
        #[cfg(feature = "tokio")]
        "lock::renewals::crowded_aio" => lock::renewals::crowded_aio(&client, &args),
        "lock::renewals::frozen" => lock::renewals::frozen(&client, &args),
        "faults::seams_conn::call" => faults::seams_conn::call(&client, &args),
        "queue::semaphore::hold" => queue::semaphore::hold(&client, &args),
        "queue::semaphore::wait" => queue::semaphore::wait(&client, &args),
        #[cfg(feature = "sentinel")]
        "topology::sentinel::listeners_end" => topology::sentinel::listeners_end(&args),
        "lock::threads::renewal_threads_end" => lock::threads::renewal_threads_end(&client),
        "lock::waiting::hold" => lock::waiting::hold(&client, &args),
        "lock::waiting::wait" => lock::waiting::wait(&client, &args),
        "lock::waiting::stress" => lock::waiting::stress(&client, &args),
        other => panic!("unknown role {other}"),
    }
}
