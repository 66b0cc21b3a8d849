//! The process's clock: runs the loss notices' alarms (at a watched lease's end) from one
//! thread per process, which wakes within a fraction of a millisecond of its alarm.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long the thread stays up with nothing to do before it ends.
const IDLE: Duration = Duration::from_secs(5);

static CLOCK: LazyLock<Clock> = LazyLock::new(|| Clock {
    state: Mutex::new(State::default()),
    changed: Condvar::new(),
});

struct Clock {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    alarms: BTreeMap<(Instant, u64), Box<dyn FnOnce() + Send>>,
    next_key: u64,
    running: bool,
}

/// A pending call; dropping it takes it back.
pub(crate) struct Alarm {
    slot: Option<(Instant, u64)>,
}

/// Runs `call` at `at` on the timer thread, unless the alarm is dropped first; `call` must be
/// quick and do no I/O, so the other alarms are not held up. Without a thread to keep the
/// time it never runs.
pub(crate) fn call_at(at: Instant, call: impl FnOnce() + Send + 'static) -> Alarm {
    let due: Box<dyn FnOnce() + Send> = Box::new(call);
    let mut state = CLOCK.state.lock();
    if !state.running {
        let spawned = thread::Builder::new()
            .name("redis-lock-timer".to_string())
            .spawn(keep_time);
        match spawned {
            Ok(_) => state.running = true,
            Err(e) => {
                log::warn!("no timer thread ({e}): the loss notices' alarms do not run");
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
        due();
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
        // Never fires: dropped long before its time, as the alarm of a lease renewed in time.
        let alarm = call_at(Instant::now() + Duration::from_secs(3600), || {});
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
