//! An election's watchers at the hub: one look at the leader per process for all of them,
//! on the hub's connection. What a read or a word of news means, and when to read, is
//! decided with no I/O ([`protocol::watch`](crate::protocol::watch)); here each watcher
//! waits for its changes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Hub, State, WAKE_EXPIRE_MS};
use crate::config::settings::grace;
use crate::protocol::election::{self, Seen, Watched};
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::protocol::watch::{self as decide, Heard, Vouched, Word};
use crate::transport::Waiter;

/// One election's watchers of this process, and what the hub decided of their watch.
#[derive(Default)]
pub(crate) struct Watch {
    boxes: HashMap<u64, Arc<WatchBox>>,
    next_key: u64,
    watch: decide::Watch,
}

/// One watcher's changes, in order: each state of the leader it has not seen yet.
#[derive(Default)]
pub(crate) struct WatchBox {
    heard: Mutex<Heard>,
    arrived: Condvar,
    #[cfg(feature = "tokio")]
    pub(crate) notify: ::tokio::sync::Notify,
}

impl WatchBox {
    /// The hub's word: `change` is the state now, vouched for by `vouched`; queued unless
    /// it is the one told last.
    fn tell(&self, change: &Watched, vouched: Option<Vouched>) {
        if !self.heard.lock().tell(change, vouched) {
            return;
        }
        self.arrived.notify_all();
        #[cfg(feature = "tokio")]
        self.notify.notify_one();
    }

    /// The next change, if one came, or the watcher's own "unknown"; else when that is due
    /// (`None`: not before the hub tells it something).
    #[cfg(feature = "tokio")]
    pub(crate) fn take(&self) -> Result<Watched, Option<Instant>> {
        self.heard.lock().next(Instant::now())
    }

    /// Blocks until the next change, the watcher's own "unknown", or `until`.
    pub(crate) fn wait(&self, until: Option<Instant>) -> Option<Watched> {
        let mut heard = self.heard.lock();
        loop {
            let stale_at = match heard.next(Instant::now()) {
                Ok(change) => return Some(change),
                Err(stale_at) => stale_at,
            };
            if until.is_some_and(|until| until <= Instant::now()) {
                return None;
            }
            match until.into_iter().chain(stale_at).min() {
                Some(at) => {
                    self.arrived.wait_until(&mut heard, at);
                }
                None => self.arrived.wait(&mut heard),
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
            self.watch.look_now(Instant::now());
        }
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.watch.due().filter(|_| !self.is_empty())
    }

    /// News popped from the inbox.
    pub(super) fn news(&mut self, seen: Seen) {
        let word = self.watch.news(seen, Instant::now());
        self.say(word);
    }

    /// What a read found, or why it failed.
    fn read(&mut self, read: Result<Seen, String>, lapse: Duration) {
        let word = self.watch.read(read, lapse, Instant::now());
        self.say(word);
    }

    /// Tells every watcher `word`.
    fn say(&self, word: Option<Word>) {
        for watcher in self.boxes.values() {
            match &word {
                Some(Word::Tell(change, vouched)) => watcher.tell(change, *vouched),
                Some(Word::Vouch(vouched)) => watcher.heard.lock().vouch(*vouched),
                None => {}
            }
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
        let mut state = self.hub.state.lock();
        if let Some(watch) = state.watches.get_mut(&self.inbox) {
            watch.boxes.remove(&self.key);
            if watch.is_empty() {
                state.watches.remove(&self.inbox);
            }
        }
        state.machine.unwatch(&self.inbox);
        if !state.machine.knows(&self.inbox) {
            state.refused.remove(&self.inbox);
        }
    }
}

impl Hub {
    /// A watcher of the election of `keys`, whose process's heartbeat there lapses after
    /// `lapse` without one, and who reads the leader at least once a `lease`.
    pub(crate) fn watch(
        self: &Arc<Hub>,
        keys: &QueueKeys,
        lapse: Duration,
        lease: Option<Duration>,
    ) -> Watching {
        let inbox = keys.signal(&self.process);
        let watcher = Arc::new(WatchBox::default());
        let mut state = self.state.lock();
        let running = state.running;
        (state.machine).watch(&inbox, keys, lapse, Instant::now());
        let watch = state.watches.entry(inbox.clone()).or_default();
        let key = watch.next_key;
        watch.next_key += 1;
        watch.boxes.insert(key, Arc::clone(&watcher));
        // A watcher starts from what the others last heard, or from a read now.
        let slack = self.io_timeout + grace(self.io_timeout);
        let joined = watch.watch.joined(lease, slack, Instant::now());
        let read_now = joined.is_none();
        if let Some((last, vouched)) = joined {
            watcher.tell(&last, vouched);
        }
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
        state.watches.values().filter_map(Watch::due).min()
    }

    /// Reads the leader of each watched election whose read is due, on the thread's
    /// connection, and tells its watchers what changed.
    pub(super) fn read_watches<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>) {
        let now = Instant::now();
        let due: Vec<(String, QueueKeys, Duration)> = {
            let state = self.state.lock();
            (state.watches.iter())
                .filter(|(_, w)| w.due().is_some_and(|due| due <= now))
                .filter_map(|(inbox, _)| {
                    let (keys, lapse) = state.machine.name(inbox)?;
                    Some((inbox.clone(), keys.clone(), lapse))
                })
                .collect()
        };
        for (inbox, keys, lapse) in due {
            let request = election::watcher_read(&keys, &self.process, lapse);
            let deadline = Instant::now() + self.io_timeout;
            let seen = self
                .exchange(conn, &request, deadline, deadline)
                .and_then(|reply| election::parse_read(&keys, &reply).map_err(|e| e.to_string()));
            let mut state = self.state.lock();
            let Some(watch) = state.watches.get_mut(&inbox) else {
                continue;
            };
            if let Err(e) = &seen {
                log::debug!("{inbox}: a read of the leader failed ({e}); read again shortly");
            }
            watch.read(seen, lapse);
        }
    }
}
