//! The process's clock: ends a wait's `BLPOP` at its deadline with `CLIENT UNBLOCK`, and runs
//! the renewal scheduler's watchdog, from one thread per process.
//!
//! Redis checks blocked clients' timeouts only `hz` times a second (every 100 ms by default),
//! and a socket's read timeout fires late too (tens of milliseconds on a loaded VM). A thread
//! parked until the earliest deadline wakes within a fraction of a millisecond, and its
//! `CLIENT UNBLOCK <id> TIMEOUT` makes the server answer the `BLPOP` as timed out, so the try
//! pipelined behind it runs at once. An unblock that arrives after the `BLPOP` returned on its
//! own finds nothing to do, or at worst ends the next `BLPOP` of that connection early: a
//! spurious wake, never a wrong result, since the try that follows reads the truth. Where
//! `CLIENT UNBLOCK` could crash the server it closes the connection instead
//! ([`end_wait_cmd`](super::admin::end_wait_cmd)).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::transport::{Admin, ConnId, Transport};

/// How long the thread stays up with nothing to do before it ends.
const IDLE: Duration = Duration::from_secs(5);
/// The longest an unblock may take: a frozen server must not hold up the other waits' alarms.
const UNBLOCK_DEADLINE: Duration = Duration::from_secs(1);

static CLOCK: LazyLock<Clock> = LazyLock::new(|| Clock {
    state: Mutex::new(State::default()),
    changed: Condvar::new(),
});

/// Logs a refusal of `CLIENT UNBLOCK` once per process.
static REFUSED: AtomicBool = AtomicBool::new(false);

struct Clock {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    alarms: BTreeMap<(Instant, u64), Due>,
    next_key: u64,
    running: bool,
}

enum Due {
    /// `CLIENT UNBLOCK` of connection `conn`.
    Unblock {
        transport: Arc<dyn Transport>,
        conn: ConnId,
    },
    /// Work that is quick and does no I/O, so the other alarms are not held up.
    Call(Box<dyn FnOnce() + Send>),
}

/// A pending unblock; dropping it takes it back.
pub(crate) struct Alarm {
    slot: Option<(Instant, u64)>,
}

/// Ends the `BLPOP` of connection `conn` at `at`, unless the alarm is dropped first. Without a
/// thread to keep the time (the system refused one) the wait ends at the server's timer.
pub(crate) fn set(at: Instant, transport: &Arc<dyn Transport>, conn: ConnId) -> Alarm {
    let transport = Arc::clone(transport);
    schedule(at, Due::Unblock { transport, conn })
}

/// Runs `call` at `at` on the timer thread, unless the alarm is dropped first; `call` must be
/// quick and do no I/O. Without a thread to keep the time it never runs.
pub(crate) fn call_at(at: Instant, call: impl FnOnce() + Send + 'static) -> Alarm {
    schedule(at, Due::Call(Box::new(call)))
}

fn schedule(at: Instant, due: Due) -> Alarm {
    let mut state = CLOCK.state.lock();
    if !state.running {
        let spawned = thread::Builder::new()
            .name("redis-lock-timer".to_string())
            .spawn(keep_time);
        match spawned {
            Ok(_) => state.running = true,
            Err(e) => {
                log::warn!("no timer thread ({e}): waits end at the server's own timer");
                return Alarm { slot: None };
            }
        }
    }
    let key = state.next_key;
    state.next_key += 1;
    let earliest = state
        .alarms
        .keys()
        .next()
        .is_none_or(|(first, _)| at < *first);
    state.alarms.insert((at, key), due);
    if earliest {
        CLOCK.changed.notify_one();
    }
    Alarm {
        slot: Some((at, key)),
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        let mut state = CLOCK.state.lock();
        let earliest = state.alarms.keys().next() == Some(&slot);
        state.alarms.remove(&slot);
        // The thread sleeps until the earliest alarm: told it is gone, it counts its idle
        // time from now, not from an alarm that will never fire (up to a lock's expiry away).
        if earliest {
            CLOCK.changed.notify_one();
        }
    }
}

/// The timer thread: sleeps until the earliest alarm, fires what is due, and ends after
/// [`IDLE`] with nothing to do.
fn keep_time() {
    let mut state = CLOCK.state.lock();
    loop {
        let now = Instant::now();
        let Some(&(at, key)) = state.alarms.keys().next() else {
            if CLOCK.changed.wait_for(&mut state, IDLE).timed_out() && state.alarms.is_empty() {
                state.running = false;
                return;
            }
            continue;
        };
        if at > now {
            CLOCK.changed.wait_until(&mut state, at);
            continue;
        }
        let Some(due) = state.alarms.remove(&(at, key)) else {
            continue;
        };
        drop(state);
        let (transport, conn) = match due {
            Due::Unblock { transport, conn } => (transport, conn),
            Due::Call(call) => {
                call();
                state = CLOCK.state.lock();
                continue;
            }
        };
        let deadline = Instant::now() + UNBLOCK_DEADLINE;
        match transport.unblock(conn, deadline) {
            Ok(Admin::Refused) if !REFUSED.swap(true, Ordering::Relaxed) => log::warn!(
                "the server refuses CLIENT UNBLOCK: waits end at its own timer, up to 1/hz \
                 late; see the ACL rule in the crate docs"
            ),
            Ok(_) => {}
            // The wait's own read meets the same trouble and settles it.
            Err(fault) => log::debug!("unblock failed: {fault:?}"),
        }
        state = CLOCK.state.lock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the timer thread is up.
    fn running() -> bool {
        CLOCK.state.lock().running
    }

    #[test]
    fn the_thread_ends_its_idle_time_after_the_last_alarm_is_dropped_not_after_its_time() {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let server = crate::transport::server::Server::shared(&client).unwrap();
        let transport: Arc<dyn Transport> = server.clone();
        // Never fires: dropped long before its time, as a wait woken by a release drops it.
        let alarm = set(
            Instant::now() + Duration::from_secs(3600),
            &transport,
            ConnId {
                node: 0,
                id: 1,
                unblockable: true,
            },
        );
        assert!(running());
        drop(alarm);
        let dropped = Instant::now();
        while running() {
            assert!(
                dropped.elapsed() < IDLE * 3,
                "the timer thread is still up {:?} after its last alarm was dropped",
                dropped.elapsed()
            );
            thread::sleep(Duration::from_millis(20));
        }
        assert!(dropped.elapsed() >= IDLE, "it ended before its idle time");
    }
}
