//! An election's watchers at the hub: one look at the leader per process for all of them.
//! Whoever changes the leader (a new leader announcing itself, a resigning one leaving the
//! election empty) pushes the news to the inbox of every process whose heartbeat is live in
//! the election; the hub hands what changed to each watcher. It reads the leader itself, on
//! its own connection, when it starts, when its connection failed, and when the lease it
//! last saw ends: what nobody announces, a leader that crashed with nobody waiting to
//! succeed it, it finds then. The read also keeps the process's heartbeat there, so that it
//! is told. A state older than one seen (news popped after a read) is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Hub, State, WAKE_EXPIRE_MS};
use crate::protocol::election::{self, Leader, Seen};
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::transport::send::FIRST_PAUSE;
use crate::transport::Waiter;

/// How long a read that found a successor about to lead waits before it reports nobody: far
/// longer than a hand-over takes (a round trip or two), far shorter than a lease.
const HANDOVER_GRACE: Duration = Duration::from_millis(100);

/// One election's watchers of this process, and what the hub last read there.
#[derive(Default)]
pub(crate) struct Watch {
    boxes: HashMap<u64, Arc<WatchBox>>,
    next_key: u64,
    /// When to read the leader (`None`: only when told).
    due: Option<Instant>,
    /// The leader last read, once there was a read.
    last: Option<Option<Leader>>,
    /// Whether a read found nobody leading while someone was about to, and it is read again
    /// before that is reported.
    deferred: bool,
    /// Where the last state seen stands (see [`Seen::order`]).
    order: Option<(u64, bool)>,
}

/// One watcher's changes, in order: each leader it has not seen yet (`None`: nobody leads).
#[derive(Default)]
pub(crate) struct WatchBox {
    seen: Mutex<VecDeque<Option<Leader>>>,
    arrived: Condvar,
    #[cfg(feature = "tokio")]
    pub(crate) notify: ::tokio::sync::Notify,
}

impl WatchBox {
    fn push(&self, leader: Option<Leader>) {
        self.seen.lock().push_back(leader);
        self.arrived.notify_all();
        #[cfg(feature = "tokio")]
        self.notify.notify_one();
    }

    /// The next change, if one came.
    #[cfg(feature = "tokio")]
    pub(crate) fn take(&self) -> Option<Option<Leader>> {
        self.seen.lock().pop_front()
    }

    /// Blocks until the next change, or `until`.
    pub(crate) fn wait(&self, until: Option<Instant>) -> Option<Option<Leader>> {
        let mut seen = self.seen.lock();
        loop {
            if let Some(leader) = seen.pop_front() {
                return Some(leader);
            }
            match until {
                Some(until) => {
                    if self.arrived.wait_until(&mut seen, until).timed_out() {
                        return seen.pop_front();
                    }
                }
                None => self.arrived.wait(&mut seen),
            }
        }
    }
}

impl Watch {
    pub(super) fn is_empty(&self) -> bool {
        self.boxes.is_empty()
    }

    /// Reads the leader again at the hub's next turn, if anyone watches.
    pub(super) fn look_now(&mut self) {
        if !self.is_empty() {
            self.due = Some(Instant::now());
        }
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.due.filter(|_| !self.is_empty())
    }

    /// What a read found, or the news unless it is older than what was seen (or came before
    /// the first read): each watcher
    /// hears of a leader that changed, and the hub reads again when its lease ends (a leader
    /// may crash unannounced). A read is the server's state now, even if it looks older: a
    /// server that restarted empty counts its terms from 1 again.
    pub(super) fn seen(&mut self, seen: Seen, read: bool) {
        // News before the first read may be older than anything the read will find (pushed
        // while this process listened for another reason): the first report is a read's.
        if !read && self.order.is_none_or(|order| seen.order < order) {
            return;
        }
        self.order = Some(seen.order);
        self.deferred = false;
        self.due = seen.look_again.map(|left| Instant::now() + left);
        if self.last.as_ref() != Some(&seen.leader) {
            for watcher in self.boxes.values() {
                watcher.push(seen.leader.clone());
            }
            self.last = Some(seen.leader);
        }
    }
}

/// A watcher's place at its hub: it hears of every change of the leader from its first read
/// on, until dropped.
pub(crate) struct Watching {
    hub: Arc<Hub>,
    inbox: String,
    key: u64,
    pub(crate) watcher: Arc<WatchBox>,
    wake: Option<Request>,
}

impl Watching {
    /// The wake the hub's thread needs to read for this watcher now, once: for the watcher to
    /// send, on its own runtime.
    pub(crate) fn wake(&mut self) -> Option<Request> {
        self.wake.take()
    }

    /// The hub's thread must run to read for it.
    pub(crate) fn start(&self) -> std::io::Result<()> {
        self.hub.start()
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.hub.leave(&self.inbox, |name| {
            name.watch.boxes.remove(&self.key);
        });
    }
}

impl Hub {
    /// A watcher of the election of `keys`, whose process's heartbeat there lapses after
    /// `lapse` without one.
    pub(crate) fn watch(self: &Arc<Hub>, keys: &QueueKeys, lapse: Duration) -> Watching {
        let inbox = keys.signal(&self.process);
        let watcher = Arc::new(WatchBox::default());
        let mut state = self.state.lock();
        let running = state.running;
        let name = Hub::name_of(&mut state, &inbox, keys, lapse);
        let watch = &mut name.watch;
        let key = watch.next_key;
        watch.next_key += 1;
        watch.boxes.insert(key, Arc::clone(&watcher));
        // A watcher starts from what the others last heard, or from a read now.
        let read_now = match &watch.last {
            Some(leader) => {
                watcher.push(leader.clone());
                false
            }
            None => {
                watch.look_now();
                true
            }
        };
        let wake =
            (running && read_now).then(|| queue::wake(&self.home, self.slot, WAKE_EXPIRE_MS));
        Watching {
            hub: Arc::clone(self),
            inbox,
            key,
            watcher,
            wake,
        }
    }

    /// When the first read of a watched election is due.
    pub(super) fn watch_due(state: &State) -> Option<Instant> {
        state.names.values().filter_map(|n| n.watch.due()).min()
    }

    /// Reads the leader of each watched election whose read is due, on the thread's
    /// connection, and tells its watchers what changed.
    pub(super) fn read_watches<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>) {
        let now = Instant::now();
        let due: Vec<(String, QueueKeys, Duration)> = {
            let state = self.state.lock();
            (state.names.iter())
                .filter(|(_, n)| n.watch.due().is_some_and(|due| due <= now))
                .map(|(inbox, n)| (inbox.clone(), n.keys.clone(), n.lapse))
                .collect()
        };
        for (inbox, keys, lapse) in due {
            let request = election::watcher_read(&keys, &self.process, lapse);
            let deadline = Instant::now() + self.io_timeout;
            let seen = self
                .exchange(conn, &request, deadline, deadline)
                .and_then(|reply| election::parse_read(&keys, &reply).map_err(|e| e.to_string()));
            let mut state = self.state.lock();
            let Some(name) = state.names.get_mut(&inbox) else {
                continue;
            };
            match seen {
                Ok(seen) if seen.handing_over && !name.watch.deferred => {
                    // A successor takes over within a round trip or two, and announces
                    // itself: "nobody" in between would only be noise, unless it still
                    // holds after a while (the successor died too).
                    name.watch.deferred = true;
                    name.watch.due = Some(Instant::now() + HANDOVER_GRACE);
                }
                Ok(seen) => name.watch.seen(seen, true),
                Err(e) => {
                    log::debug!("{inbox}: a read of the leader failed ({e}); read again shortly");
                    name.watch.due = Some(Instant::now() + FIRST_PAUSE.max(lapse / 20));
                }
            }
        }
    }
}
