//! News that a lock's keys are served by another server now: a failover, or a restart. Who
//! learns of one (a Sentinel backend's listener, a cluster's slot map, a server's new run id)
//! says so here, and every hook the driver left runs: holders then renew at once, on the new
//! server, rather than at their next renewal. One hook list for the process: a switch is rare,
//! and a renewal of a lock elsewhere that comes early costs one round trip.

use parking_lot::Mutex;

static HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Runs `hook` at each switch from now on. Left once per kind of hook (a `Once` at the caller).
pub(crate) fn on_switch(hook: fn()) {
    HOOKS.lock().push(hook);
}

/// A switch was learned: every hook runs, on this thread. Hooks only wake others, so this
/// may be called with locks held.
pub(crate) fn switched() {
    let hooks = HOOKS.lock().clone();
    for hook in hooks {
        hook();
    }
}
