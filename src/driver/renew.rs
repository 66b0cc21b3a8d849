//! The renewal scheduler: keeps the blocking API's expiring locks alive while their holders
//! work.
//!
//! The rule: every renewal waits for its time on one process-wide schedule, and runs on the
//! lane of the server it goes to. The scheduler thread only keeps the time: when a renewal is
//! due, it hands it to that server's lane (`Transport::server_of`), a thread that runs the
//! server's renewals one at a time, in the order they came due. A renewal stuck on a frozen
//! server, up to its I/O deadline, so holds up only the renewals that go to that same server,
//! which would hang as well; another server's renewals come on time. Renewals that are slow
//! while their server answers (a quorum round waiting out a frozen member, a `WAIT` for
//! replicas that are away) take turns too: docs/design.md says what that costs.
//!
//! Threads: the scheduler, plus one lane per server that had a renewal due in the last
//! [`LINGER`], however many locks each holds; a frozen server costs one thread. Each ends
//! [`LINGER`] after its last work: a process that takes and gives back leases in a loop (a
//! semaphore's permits) would otherwise start and join threads for each, which costs more
//! than the round trips.
//!
//! It holds only a `Weak` reference to what it renews, so dropping the handle stops the
//! renewing and the lock then expires on its own. What one renewal does is the lock's
//! business: this is only the scheduling.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Once, Weak};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::transport::switch;

/// What the renewal threads are called (Linux shows the first 15 bytes).
const THREAD_NAME: &str = "redis-lock-renew";

/// How long a renewal thread with nothing to do waits for more before it ends.
const LINGER: Duration = Duration::from_secs(2);

/// One renewal: the wait before the next and the server that one goes to, or `None` to stop
/// (or its handle is gone).
type Renew = Box<dyn FnMut() -> Option<(Duration, usize)> + Send>;

static SCHEDULE: LazyLock<Schedule> = LazyLock::new(|| Schedule {
    state: Mutex::new(State::default()),
    changed: Condvar::new(),
});

struct Schedule {
    state: Mutex<State>,
    /// Told when a renewal is added, removed, handed to a lane or done.
    changed: Condvar,
}

/// Where a renewal is.
enum At {
    /// On the schedule, due then.
    Due(Instant),
    /// Due, in the queue of the lane of this server.
    Queued(usize),
    /// Running on thread `on`; not scheduled again once `stopped`.
    Running { on: ThreadId, stopped: bool },
}

#[derive(Default)]
struct State {
    /// The renewals waiting for their time, with the server each goes to.
    due: BTreeMap<(Instant, u64), (usize, Renew)>,
    /// Where each renewal is, by key.
    at: HashMap<u64, At>,
    /// Each lane's renewals that are due, in the order they came due, by server. A lane's
    /// thread runs for as long as its entry is here.
    lanes: HashMap<usize, VecDeque<(u64, Renew)>>,
    next_key: u64,
    /// Whether the scheduler thread runs.
    scheduling: bool,
    /// When the scheduler will look at the schedule next by itself (`None`: it does not run):
    /// a change it would see in time need not wake it.
    looks_at: Option<Instant>,
}

impl State {
    /// Whether the scheduler looks at the schedule by `at` without being woken.
    fn looks_in_time(&self, at: Instant) -> bool {
        self.looks_at.is_some_and(|looks| looks <= at)
    }
}

/// One lock's renewals, scheduled.
pub(crate) struct Renewal {
    key: u64,
}

impl Renewal {
    /// Calls `renew` on `target` after `first`, and again after each wait it returns, until
    /// it returns `None`, the renewal is stopped, or `target` is dropped. Each call runs on
    /// the lane of the server `server` says it goes to.
    pub(crate) fn start<T: Send + Sync + 'static>(
        target: &Arc<T>,
        first: Duration,
        server: fn(&T) -> usize,
        renew: fn(&T) -> Option<Duration>,
    ) -> std::io::Result<Renewal> {
        let weak: Weak<T> = Arc::downgrade(target);
        let goes_to = server(target);
        let renew: Renew = Box::new(move || {
            let target = weak.upgrade()?;
            Some((renew(&target)?, server(&target)))
        });
        static HOOKED: Once = Once::new();
        HOOKED.call_once(|| switch::on_switch(all_now));
        let mut state = SCHEDULE.state.lock();
        if !state.scheduling {
            spawn(schedule)?;
            state.scheduling = true;
            // A new thread looks at the schedule as soon as it runs.
            state.looks_at = Some(Instant::now());
        }
        let key = state.next_key;
        state.next_key += 1;
        let at = Instant::now() + first;
        state.at.insert(key, At::Due(at));
        state.due.insert((at, key), (goes_to, renew));
        // Leases taken and given back in a loop (a semaphore's permits) then cost no thread
        // switch each.
        if !state.looks_in_time(at) {
            SCHEDULE.changed.notify_all();
        }
        Ok(Renewal { key })
    }
}

impl super::Renewing for Renewal {
    /// Unschedules the renewal, and waits for it if it is running on another thread (on this
    /// one, the last reference to the lock was dropped by the renewal itself). That wait ends
    /// with the renewal's round trips, each bounded by the lock's I/O timeout.
    fn stop(self: Box<Self>) {
        let me = thread::current().id();
        let key = self.key;
        let mut state = SCHEDULE.state.lock();
        match state.at.remove(&key) {
            Some(At::Due(at)) => drop(state.due.remove(&(at, key))),
            Some(At::Queued(server)) => {
                if let Some(queue) = state.lanes.get_mut(&server) {
                    queue.retain(|(queued, _)| *queued != key);
                }
            }
            Some(At::Running { on, .. }) => {
                state.at.insert(key, At::Running { on, stopped: true });
            }
            None => {}
        }
        while matches!(state.at.get(&key), Some(At::Running { on, .. }) if *on != me) {
            SCHEDULE.changed.wait(&mut state);
        }
        // A scheduler asleep until the renewal just removed finds the next one when it wakes;
        // but with nothing left it should start lingering now, not then.
        if state.at.is_empty() && !state.looks_in_time(Instant::now() + LINGER) {
            SCHEDULE.changed.notify_all();
        }
    }
}

/// Makes every scheduled renewal due now: another server took over some lock's keys (a
/// failover, a restart), and a holder's renewals acknowledged by the old one meanwhile may be
/// missing there. Renewed now, on the new server, it keeps its lock, or learns it lost it.
fn all_now() {
    let mut state = SCHEDULE.state.lock();
    let now = Instant::now();
    let later: Vec<(Instant, u64)> = state
        .due
        .range((now, u64::MAX)..)
        .map(|(k, _)| *k)
        .collect();
    for (at, key) in later {
        if let Some(renewal) = state.due.remove(&(at, key)) {
            state.due.insert((now, key), renewal);
            state.at.insert(key, At::Due(now));
        }
    }
    SCHEDULE.changed.notify_all();
}

/// Starts a renewal thread (the scheduler or a lane), detached.
fn spawn(work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    // A fixed name: lock names may hold bytes a thread name cannot (NUL).
    let thread = thread::Builder::new().name(THREAD_NAME.to_string());
    thread.spawn(work).map(drop)
}

/// The scheduler thread: hands each renewal to its server's lane when it is due, until no
/// renewal has been left for [`LINGER`].
fn schedule() {
    let mut state = SCHEDULE.state.lock();
    loop {
        let now = Instant::now();
        match state.due.first_key_value().map(|(&(at, _), _)| at) {
            Some(at) if at <= now => hand_over(&mut state),
            Some(at) => {
                state.looks_at = Some(at);
                SCHEDULE.changed.wait_until(&mut state, at);
            }
            // Nothing is scheduled; what the lanes run now comes back to the schedule.
            None => {
                let idle_until = now + LINGER;
                state.looks_at = Some(idle_until);
                let idle = (SCHEDULE.changed.wait_until(&mut state, idle_until)).timed_out();
                if idle && state.at.is_empty() {
                    state.scheduling = false;
                    state.looks_at = None;
                    return;
                }
            }
        }
    }
}

/// Hands the first renewal due to the lane of its server, and starts the lane if it has none.
fn hand_over(state: &mut MutexGuard<'_, State>) {
    let Some(((_, key), (server, renew))) = state.due.pop_first() else {
        return;
    };
    if !state.lanes.contains_key(&server)
        && let Err(e) = spawn(move || lane(server))
    {
        log::warn!("no thread for a server's renewals ({e}): the scheduler runs this one");
        run(state, key, renew);
        return;
    }
    state
        .lanes
        .entry(server)
        .or_default()
        .push_back((key, renew));
    state.at.insert(key, At::Queued(server));
    SCHEDULE.changed.notify_all();
}

/// The lane of `server`: runs its renewals that are due, one at a time, and ends once none
/// has come for [`LINGER`].
fn lane(server: usize) {
    let mut state = SCHEDULE.state.lock();
    let mut idle_until = Instant::now() + LINGER;
    loop {
        let next = state.lanes.get_mut(&server).and_then(VecDeque::pop_front);
        let Some((key, renew)) = next else {
            if Instant::now() >= idle_until {
                state.lanes.remove(&server);
                return;
            }
            SCHEDULE.changed.wait_until(&mut state, idle_until);
            continue;
        };
        run(&mut state, key, renew);
        idle_until = Instant::now() + LINGER;
    }
}

/// Runs renewal `key` on this thread, then puts it back on the schedule unless it is done or
/// was stopped meanwhile.
fn run(state: &mut MutexGuard<'_, State>, key: u64, mut renew: Renew) {
    let on = thread::current().id();
    state.at.insert(key, At::Running { on, stopped: false });
    // Not under the schedule's lock: the renewal may drop the last reference to its lock,
    // whose drop stops the renewal.
    let next = MutexGuard::unlocked(state, &mut renew);
    let stopped = matches!(
        state.at.remove(&key),
        Some(At::Running { stopped: true, .. })
    );
    if let (Some((wait, server)), false) = (next, stopped) {
        let at = Instant::now() + wait;
        state.at.insert(key, At::Due(at));
        state.due.insert((at, key), (server, renew));
    }
    SCHEDULE.changed.notify_all();
}
