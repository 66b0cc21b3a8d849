//! The renewal scheduler: keeps the blocking API's expiring locks alive while their holders
//! work, from one thread per process however many locks it holds.
//!
//! It holds only a `Weak` reference to what it renews, so dropping the handle stops the
//! renewing and the lock then expires on its own. The thread sleeps until the earliest renewal
//! is due, runs it, and ends [`LINGER`] after the last renewal is gone: a process that takes and
//! gives back leases in a loop (a semaphore's permits) would otherwise start and join a thread
//! for each, which costs more than the round trips.
//!
//! One renewal stuck on a frozen server (up to its I/O deadline) must not make the others late.
//! So each renewal runs under a watchdog on the timer thread: still running after [`PATIENCE`]
//! with no thread free to keep the schedule, it starts another scheduler thread, which ends
//! once two are idle again. A frozen server costs one extra thread for as long as its renewals
//! hang, never a late renewal elsewhere. What one renewal does is the lock's business: this is
//! only the scheduling.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, LazyLock, Weak};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::transport::timer;

/// What the renewal threads are called (Linux shows the first 15 bytes).
const THREAD_NAME: &str = "redis-lock-renew";

/// How long a renewal may run before the schedule is handed to another thread: a round trip
/// to a healthy server takes far less, and a renewal is due a third of the expiry early.
const PATIENCE: Duration = Duration::from_millis(100);

/// How long a scheduler thread with nothing to renew waits for a new renewal before it ends.
const LINGER: Duration = Duration::from_secs(2);

/// One renewal: the wait before the next, or `None` to stop (or its handle is gone).
type Renew = Box<dyn FnMut() -> Option<Duration> + Send>;

static SCHEDULE: LazyLock<Schedule> = LazyLock::new(|| Schedule {
    state: Mutex::new(State::default()),
    changed: Condvar::new(),
});

struct Schedule {
    state: Mutex<State>,
    /// Told when a renewal is added, removed or ends, and when a thread ends.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    due: BTreeMap<(Instant, u64), Renew>,
    /// When each scheduled renewal is due, by key.
    when: HashMap<u64, Instant>,
    /// The renewals running now, and on which thread.
    running: HashMap<u64, ThreadId>,
    /// Renewals stopped while running: not scheduled again.
    stopped: HashSet<u64>,
    next_key: u64,
    /// The scheduler threads (each leaves itself when it ends).
    threads: Vec<JoinHandle<()>>,
}

impl State {
    fn idle_threads(&self) -> usize {
        self.threads.len().saturating_sub(self.running.len())
    }

    fn is_empty(&self) -> bool {
        self.due.is_empty() && self.running.is_empty()
    }

    /// Starts a scheduler thread.
    fn spawn(&mut self) -> std::io::Result<()> {
        // A fixed name: lock names may hold bytes a thread name cannot (NUL).
        let thread = thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(serve)?;
        self.threads.push(thread);
        Ok(())
    }
}

/// One lock's renewals, scheduled.
pub(crate) struct Renewal {
    key: u64,
}

impl Renewal {
    /// Calls `renew` on `target` after `first`, and again after each wait it returns, until
    /// it returns `None`, the renewal is stopped, or `target` is dropped.
    pub(crate) fn start<T: Send + Sync + 'static>(
        target: &Arc<T>,
        first: Duration,
        renew: fn(&T) -> Option<Duration>,
    ) -> std::io::Result<Renewal> {
        let weak: Weak<T> = Arc::downgrade(target);
        let mut state = SCHEDULE.state.lock();
        if state.threads.is_empty() {
            state.spawn()?;
        }
        let key = state.next_key;
        state.next_key += 1;
        let at = Instant::now() + first;
        state.when.insert(key, at);
        state
            .due
            .insert((at, key), Box::new(move || renew(&*weak.upgrade()?)));
        SCHEDULE.changed.notify_all();
        Ok(Renewal { key })
    }
}

impl super::Renewing for Renewal {
    /// Unschedules the renewal, and waits for it if it is running on another thread (on this
    /// one, the last reference to the lock was dropped by the renewal itself).
    fn stop(self: Box<Self>) {
        let me = thread::current().id();
        let mut state = SCHEDULE.state.lock();
        if let Some(at) = state.when.remove(&self.key) {
            state.due.remove(&(at, self.key));
        }
        if state.running.contains_key(&self.key) {
            state.stopped.insert(self.key);
        }
        while state.running.get(&self.key).is_some_and(|on| *on != me) {
            SCHEDULE.changed.wait(&mut state);
        }
        SCHEDULE.changed.notify_all();
    }
}

/// A scheduler thread: runs each renewal when it is due, until none has been left for
/// [`LINGER`], or it is an extra thread and another is idle.
fn serve() {
    let me = thread::current().id();
    let mut state = SCHEDULE.state.lock();
    loop {
        if state.is_empty() {
            let idle_until = Instant::now() + LINGER;
            while state.is_empty()
                && !SCHEDULE
                    .changed
                    .wait_until(&mut state, idle_until)
                    .timed_out()
            {}
            if state.is_empty() {
                leave(&mut state, me);
                return;
            }
            continue;
        }
        if state.idle_threads() > 1 && first_due(&state).is_none_or(|at| at > Instant::now()) {
            leave(&mut state, me);
            return;
        }
        let Some(at) = first_due(&state) else {
            SCHEDULE.changed.wait(&mut state);
            continue;
        };
        if at > Instant::now() {
            SCHEDULE.changed.wait_until(&mut state, at);
            continue;
        }
        let Some(((_, key), mut renew)) = state.due.pop_first() else {
            continue;
        };
        state.when.remove(&key);
        state.running.insert(key, me);
        drop(state);
        let watchdog = timer::call_at(Instant::now() + PATIENCE, keep_schedule);
        // Not under the schedule's lock: the renewal may drop the last reference to its lock,
        // whose drop stops the renewal.
        let next = renew();
        drop(watchdog);
        state = SCHEDULE.state.lock();
        state.running.remove(&key);
        let stopped = state.stopped.remove(&key);
        if let (Some(wait), false) = (next, stopped) {
            let at = Instant::now() + wait;
            state.when.insert(key, at);
            state.due.insert((at, key), renew);
        }
        SCHEDULE.changed.notify_all();
    }
}

/// When the earliest scheduled renewal is due.
fn first_due(state: &State) -> Option<Instant> {
    state.due.keys().next().map(|(at, _)| *at)
}

/// This thread ends: it leaves the schedule's threads (its handle is dropped: detached).
fn leave(state: &mut State, me: ThreadId) {
    state.threads.retain(|t| t.thread().id() != me);
    SCHEDULE.changed.notify_all();
}

/// The watchdog of a renewal still running after [`PATIENCE`]: with no thread idle to keep the
/// schedule, starts another, even with nothing else scheduled yet (a lock taken meanwhile).
fn keep_schedule() {
    let mut state = SCHEDULE.state.lock();
    if state.idle_threads() == 0 {
        log::debug!("a lock renewal is slow: another renewal thread keeps the schedule");
        if let Err(e) = state.spawn() {
            log::warn!("no thread to keep the renewal schedule ({e}); renewals may be late");
        }
    }
}
