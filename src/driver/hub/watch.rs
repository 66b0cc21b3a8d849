//! An election's watchers at the hub: one look at the leader per process for all of them.
//! Whoever changes the leader (a new leader announcing itself, a resigning one leaving the
//! election empty) pushes the news to the inbox of every process whose heartbeat is live in
//! the election; the hub hands what changed to each watcher. It reads the leader itself, on
//! its own connection, when it starts, when its connection failed, and when the lease it
//! last saw ends, or the watching handles' own lease from the last word, whichever comes
//! first: what nobody announces, a leader that crashed with nobody waiting to succeed it, it
//! finds then, and a server that went quiet it finds out too. The read also keeps the
//! process's heartbeat there, so that it is told. A state older than one seen (news popped
//! after a read) is dropped.
//!
//! What the hub last heard vouches for itself only until the next read is due, and its
//! answer by the I/O timeout: a read that fails, or a watcher whose hub has said nothing by
//! then (its thread held up by a server that stopped answering), reports that it does not
//! know who leads, once, and the next read that gets through reports the leader again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Hub, State, WAKE_EXPIRE_MS};
use crate::config::settings::grace;
use crate::protocol::election::{self, Seen, Watched};
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::transport::send::FIRST_PAUSE;
use crate::transport::Waiter;

/// How long a read that found a successor about to lead waits before it reports nobody: far
/// longer than a hand-over takes (a round trip or two), far shorter than a lease.
const HANDOVER_GRACE: Duration = Duration::from_millis(100);

/// When the hub last heard from the server for a watch, and until when that vouches for what
/// it reported.
type Vouched = (Instant, Instant);

/// One election's watchers of this process, and what the hub last read there.
#[derive(Default)]
pub(crate) struct Watch {
    boxes: HashMap<u64, Arc<WatchBox>>,
    next_key: u64,
    /// When to read the leader (`None`: only when told).
    due: Option<Instant>,
    /// What the watchers were last told, once there was a read.
    last: Option<Watched>,
    /// Whether a read found nobody leading while someone was about to, and it is read again
    /// before that is reported.
    deferred: bool,
    /// Where the last state seen stands (see [`Seen::order`]); `None` before the first read,
    /// and after a read failed.
    order: Option<(u64, bool)>,
    /// The shortest lease of the watching handles: the longest the hub goes without reading
    /// the leader, whatever lease it read (none, when nobody leads).
    lease: Option<Duration>,
    /// The hub's I/O timeout: how long a read's answer may take once it is due.
    io_timeout: Duration,
    /// What vouches for `last` (`None`: nothing, it is not known).
    vouched: Option<Vouched>,
}

/// One watcher's changes, in order: each state of the leader it has not seen yet.
#[derive(Default)]
pub(crate) struct WatchBox {
    heard: Mutex<Heard>,
    arrived: Condvar,
    #[cfg(feature = "tokio")]
    pub(crate) notify: ::tokio::sync::Notify,
}

/// What a watcher has been told and not taken yet.
#[derive(Default)]
struct Heard {
    changes: VecDeque<Watched>,
    /// The last change queued, or the watcher's own "unknown": only a change from it is
    /// queued.
    last: Option<Watched>,
    /// What vouches for `last` (`None`: nothing yet, or it is not known). Past it, with no
    /// change queued, the watcher reports that it does not know.
    vouched: Option<Vouched>,
}

impl Heard {
    /// The next change, or when the watcher stops knowing by itself (`None`: never before
    /// the hub tells it something).
    fn next(&mut self, now: Instant) -> Result<Watched, Option<Instant>> {
        if let Some(change) = self.changes.pop_front() {
            return Ok(change);
        }
        match self.vouched {
            Some((heard, until)) if until <= now => {
                let silent = now.saturating_duration_since(heard);
                let unknown = Watched::Unknown {
                    reason: format!(
                        "nothing heard from the server for {:.1} s",
                        silent.as_secs_f64()
                    ),
                };
                self.last = Some(unknown.clone());
                self.vouched = None;
                Ok(unknown)
            }
            vouched => Err(vouched.map(|(_, until)| until)),
        }
    }
}

/// Whether `a` and `b` are the same state: every "unknown" is the same one.
fn same(a: &Watched, b: &Watched) -> bool {
    match (a, b) {
        (Watched::Unknown { .. }, Watched::Unknown { .. }) => true,
        _ => a == b,
    }
}

impl WatchBox {
    /// The hub's word: `change` is the state now, vouched for by `vouched`; queued unless
    /// it is the one told last.
    fn tell(&self, change: &Watched, vouched: Option<Vouched>) {
        let mut heard = self.heard.lock();
        heard.vouched = vouched.filter(|_| change.is_known());
        if heard.last.as_ref().is_some_and(|last| same(last, change)) {
            return;
        }
        heard.last = Some(change.clone());
        heard.changes.push_back(change.clone());
        drop(heard);
        self.arrived.notify_all();
        #[cfg(feature = "tokio")]
        self.notify.notify_one();
    }

    /// The hub heard from the server, and nothing changed: what the watcher knows, if it
    /// knows it, holds until `vouched`.
    fn vouch(&self, vouched: Vouched) {
        let mut heard = self.heard.lock();
        if heard.last.as_ref().is_some_and(Watched::is_known) {
            heard.vouched = Some(vouched);
        }
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
            self.due = Some(Instant::now());
        }
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.due.filter(|_| !self.is_empty())
    }

    /// What a read found, or the news unless it is older than what was seen (or came before
    /// the first read): each watcher hears of a state that changed, and the hub reads again
    /// when the lease it found ends (a leader may crash unannounced), or the watchers' lease
    /// from now, whichever comes first. A read is the server's state now, even if it looks
    /// older: a server that restarted empty counts its terms from 1 again.
    pub(super) fn seen(&mut self, seen: Seen, read: bool) {
        // News before the first read may be older than anything the read will find (pushed
        // while this process listened for another reason): the first report is a read's.
        if !read && self.order.is_none_or(|order| seen.order < order) {
            return;
        }
        self.order = Some(seen.order);
        self.deferred = false;
        let now = Instant::now();
        let next = seen.look_again.into_iter().chain(self.lease).min();
        self.due = next.and_then(|next| now.checked_add(next));
        let vouched = self.vouch_until(now, self.due);
        let change = Watched::from(seen.leader);
        for watcher in self.boxes.values() {
            watcher.tell(&change, vouched);
        }
        self.last = Some(change);
    }

    /// Heard from the server at `now`, the next read due at `due`: what that vouches for.
    fn vouch_until(&mut self, now: Instant, due: Option<Instant>) -> Option<Vouched> {
        self.vouched = due
            .and_then(|due| due.checked_add(self.io_timeout + grace(self.io_timeout)))
            .map(|until| (now, until));
        self.vouched
    }

    /// A read found nobody leading while a successor is about to: it takes over within a
    /// round trip or two, and announces itself, so "nobody" in between would only be noise,
    /// unless it still holds after a while (the successor died too). What was reported holds
    /// until that read.
    fn defer(&mut self) {
        let now = Instant::now();
        self.deferred = true;
        self.due = Some(now + HANDOVER_GRACE);
        if self.last.as_ref().is_some_and(Watched::is_known)
            && let Some(vouched) = self.vouch_until(now, self.due)
        {
            for watcher in self.boxes.values() {
                watcher.vouch(vouched);
            }
        }
    }

    /// A read failed: nobody here knows who leads until one gets through, which reports the
    /// leader again. Told once, however many fail.
    fn unknown(&mut self, reason: String) {
        self.order = None;
        self.deferred = false;
        self.vouched = None;
        if self.last.as_ref().is_some_and(|last| !last.is_known()) {
            return;
        }
        let change = Watched::Unknown { reason };
        for watcher in self.boxes.values() {
            watcher.tell(&change, None);
        }
        self.last = Some(change);
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
        watch.lease = watch.lease.into_iter().chain(lease).min();
        watch.io_timeout = self.io_timeout;
        // A watcher starts from what the others last heard, or from a read now.
        let read_now = match &watch.last {
            Some(last) => {
                watcher.tell(last, watch.vouched);
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
            match seen {
                Ok(seen) if seen.handing_over && !watch.deferred => watch.defer(),
                Ok(seen) => watch.seen(seen, true),
                Err(e) => {
                    log::debug!("{inbox}: a read of the leader failed ({e}); read again shortly");
                    watch.unknown(format!("a read of the leader failed: {e}"));
                    watch.due = Some(Instant::now() + FIRST_PAUSE.max(lapse / 20));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::election::Leader;

    fn leader(term: u64) -> Watched {
        Watched::Leader(Leader {
            id: format!("w:{term}"),
            info: String::new(),
            term,
            since: std::time::UNIX_EPOCH,
        })
    }

    fn unknown(reason: &str) -> Watched {
        Watched::Unknown {
            reason: reason.into(),
        }
    }

    fn vouched_for(d: Duration) -> Option<Vouched> {
        let now = Instant::now();
        Some((now, now + d))
    }

    #[test]
    fn a_watcher_is_told_each_state_once_and_every_unknown_is_one() {
        let watcher = WatchBox::default();
        let long = vouched_for(Duration::from_secs(60));
        watcher.tell(&leader(1), long);
        watcher.tell(&leader(1), long);
        watcher.tell(&unknown("a read failed"), None);
        watcher.tell(&unknown("another read failed"), None);
        watcher.tell(&leader(1), long);
        let now = Some(Instant::now());
        let told: Vec<Watched> = std::iter::from_fn(|| watcher.wait(now)).collect();
        assert_eq!(told, [leader(1), unknown("a read failed"), leader(1)]);
    }

    #[test]
    fn a_watcher_stops_knowing_by_itself_once_what_it_was_told_is_no_longer_vouched_for() {
        let watcher = WatchBox::default();
        watcher.tell(&Watched::Nobody, vouched_for(Duration::from_millis(20)));
        assert_eq!(watcher.wait(None), Some(Watched::Nobody));
        let started = Instant::now();
        let change = watcher.wait(Some(started + Duration::from_secs(5)));
        assert!(
            matches!(change, Some(Watched::Unknown { .. })),
            "{change:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        // Once: nothing vouches for it any more, and the hub's "unknown" is the same one.
        watcher.tell(&unknown("a read failed"), None);
        watcher.vouch((Instant::now(), Instant::now()));
        assert_eq!(
            watcher.wait(Some(Instant::now() + Duration::from_millis(50))),
            None
        );
        // The next read that gets through tells it again, though nothing changed.
        watcher.tell(&Watched::Nobody, vouched_for(Duration::from_secs(60)));
        assert_eq!(watcher.wait(Some(Instant::now())), Some(Watched::Nobody));
    }

    #[test]
    fn a_failed_read_makes_every_watcher_unknown_once_and_the_next_read_tells_them_again() {
        let mut watch = Watch {
            lease: Some(Duration::from_secs(10)),
            io_timeout: Duration::from_secs(1),
            ..Watch::default()
        };
        let watcher = Arc::new(WatchBox::default());
        watch.boxes.insert(0, Arc::clone(&watcher));
        let nobody = Seen {
            leader: None,
            look_again: None,
            handing_over: false,
            order: (3, true),
        };
        watch.seen(nobody.clone(), true);
        // Nobody leads, and still the hub reads again within the lease.
        let due = watch.due.expect("a read due");
        assert!(due <= Instant::now() + Duration::from_secs(10));
        watch.unknown("refused".into());
        watch.unknown("refused again".into());
        // News is not a read: it does not end the spell.
        watch.seen(nobody.clone(), false);
        watch.seen(nobody, true);
        let now = Some(Instant::now());
        let told: Vec<Watched> = std::iter::from_fn(|| watcher.wait(now)).collect();
        assert_eq!(told, [Watched::Nobody, unknown("refused"), Watched::Nobody]);
    }
}
