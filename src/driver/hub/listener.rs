//! A plain lock's waiters at the hub: their places in arrival order, the try the hub carries
//! behind its `BLPOP` for the first that waits, and how each leaves without swallowing a
//! signal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use redis::Value;

use super::{Hub, Mailbox, Told, WAKE_EXPIRE_MS};
use crate::protocol::keys::Keys;
use crate::protocol::lock;
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::transport::{ConnId, Fault, Waiter};

/// One plain lock's waiters of this process, by arrival.
pub(super) struct Signal {
    pub(super) slot: u16,
    pub(super) seats: BTreeMap<u64, Arc<Ear>>,
}

impl Signal {
    /// The first waiter whose turn it is: not one whose carried try took the lock.
    pub(super) fn next(&self) -> Option<Arc<Ear>> {
        (self.seats.values())
            .find(|ear| !ear.won.load(std::sync::atomic::Ordering::SeqCst))
            .cloned()
    }
}

/// A plain lock's waiter as its hub knows it: its mailbox, and the try the hub may carry for
/// it behind its `BLPOP`, so that the server runs it the moment a release's signal wakes the
/// `BLPOP`, a round trip before the waiter could send it.
pub(crate) struct Ear {
    pub(crate) mailbox: Arc<Mailbox>,
    pub(super) keys: Keys,
    /// A try carried for it took the lock: it is about to leave, and the next waiter's try
    /// can ride behind the next `BLPOP`.
    pub(super) won: std::sync::atomic::AtomicBool,
    /// Its try; `None` where one server cannot decide a try (a quorum's go to every server).
    pub(super) tries_as: Option<Request>,
    /// Its owner-checked release, to give back what a carried try took for a waiter gone.
    pub(super) gives_back: Request,
    pub(super) carry: Mutex<Carry>,
    /// When it last went to sleep, until when it sleeps by itself: the holder's expiry its
    /// last try read, or sooner (its deadline). An acquire that joins the line behind it
    /// without a try of its own takes that timer ([`Hub::behind`]).
    timer: Mutex<Option<Instant>>,
}

/// Where a waiter's try is. A try is never sent twice at once: the hub carries one only for a
/// waiter that waits, and a waiter tries by itself only when the hub carries none for it.
pub(super) enum Carry {
    /// It waits for its mail: the hub may carry its try.
    Waiting,
    /// It tries by itself (told, or at its time), or has not waited yet.
    OnItsOwn,
    /// Its try is behind the hub's `BLPOP`, sent on the connection `on`.
    Carried { on: Option<ConnId> },
    /// The carried try's replies, for it to take.
    Landed(Carried),
    /// It left while its try was carried: what the try took is given back.
    Gone,
    /// It settled the carried try by itself (its connection closed, the lock read): what
    /// lands is dropped.
    Settled,
}

/// A try the hub carried behind its `BLPOP` for a waiter: when it was sent, and its replies.
pub(crate) struct Carried {
    pub(crate) sent: Instant,
    pub(crate) replies: Result<Vec<Value>, Fault>,
}

/// Where a waiter's try is, once its wait for mail ended.
pub(crate) enum Heard {
    /// It tries by itself.
    OnItsOwn,
    /// The hub carries it, on the connection given: the waiter wakes the hub, and waits.
    Carried(Option<ConnId>),
    /// The carried try came back.
    Landed(Carried),
}

/// A plain lock waiter's place at its hub, from its first wait to the end of its acquire.
pub(crate) struct Listener {
    hub: Arc<Hub>,
    signal: String,
    arrival: u64,
    pub(crate) ear: Arc<Ear>,
    /// See [`Seat::wake`].
    wake: Option<Request>,
}

impl Listener {
    /// The wake its thread needs to listen on this lock's signal too, once: for the waiter to
    /// send, on its own runtime.
    pub(crate) fn wake(&mut self) -> Option<Request> {
        self.wake.take()
    }

    /// It blocks: the hub's thread must run to bring its signal.
    pub(crate) fn block(&self) -> std::io::Result<()> {
        self.hub.start()
    }

    /// It waits for its mail now, by itself until `until`: the hub may carry its try
    /// meanwhile. True when the hub should be woken to carry it: it is first, and the `BLPOP`
    /// in flight carries nobody's.
    pub(crate) fn waiting(&self, until: Instant) -> bool {
        let state = self.hub.state.lock();
        *self.ear.timer.lock() = Some(until);
        {
            let mut carry = self.ear.carry.lock();
            if matches!(*carry, Carry::OnItsOwn | Carry::Settled) {
                *carry = Carry::Waiting;
            }
        }
        let first = (state.signals.get(&self.signal))
            .and_then(Signal::next)
            .is_some_and(|ear| Arc::ptr_eq(&ear, &self.ear));
        // A `BLPOP` not sent yet, or not on this lock yet, is sent again anyway.
        let listened = state.listening.contains(&self.signal);
        state.running
            && listened
            && !state.carrying
            && state.signals.len() == 1
            && first
            && self.ear.tries_as.is_some()
    }

    /// Where its try is, its wait for mail over. Not carried, it is its own from now on.
    pub(crate) fn heard(&self) -> Heard {
        let mut carry = self.ear.carry.lock();
        match std::mem::replace(&mut *carry, Carry::OnItsOwn) {
            Carry::Carried { on } => {
                *carry = Carry::Carried { on };
                Heard::Carried(on)
            }
            Carry::Landed(landed) => Heard::Landed(landed),
            _ => Heard::OnItsOwn,
        }
    }

    /// Whether the hub carries its try now.
    pub(crate) fn carried(&self) -> bool {
        matches!(
            *self.ear.carry.lock(),
            Carry::Carried { .. } | Carry::Landed(_)
        )
    }

    /// Where the hub carries its try now: `Some` with the connection it went out on.
    pub(crate) fn carried_on(&self) -> Option<Option<ConnId>> {
        match &*self.ear.carry.lock() {
            Carry::Carried { on } => Some(*on),
            Carry::Landed(Carried {
                replies: Err(Fault::Lost { conn, .. }),
                ..
            }) => Some(*conn),
            Carry::Landed(_) => Some(None),
            _ => None,
        }
    }

    /// It settles its carried try by itself, its reply not come in time: what lands later
    /// is dropped.
    pub(crate) fn settled(&self) {
        *self.ear.carry.lock() = Carry::Settled;
    }

    /// The wake that ends the hub's `BLPOP` now, so that a try behind it runs now.
    pub(crate) fn wake_hub(&self) -> Request {
        queue::wake(&self.hub.home, self.hub.slot, WAKE_EXPIRE_MS)
    }

    /// Why the server refused to wait on its lock's signal, when it did.
    pub(crate) fn refused(&self) -> Option<redis::ServerError> {
        let state = self.hub.state.lock();
        state.refused.get(&self.signal).map(|(e, _)| e.clone())
    }

    /// Leaves, without the lock: true if it owes a signal it was told and did not act on,
    /// which no other waiter here can take, for the caller to push back now.
    pub(crate) fn leave(mut self) -> bool {
        self.part().is_some()
    }

    /// Out of its lock's waiters: a signal it was told and did not act on goes to the next
    /// one here not told yet, or else is returned, with its hash slot, to be pushed back.
    fn part(&mut self) -> Option<(String, u16)> {
        let mut state = self.hub.state.lock();
        let told = self.ear.mailbox.take();
        // A try the hub carries for it is given back by the hub when it lands; one landed
        // already, now.
        let landed = {
            let mut carry = self.ear.carry.lock();
            match std::mem::replace(&mut *carry, Carry::OnItsOwn) {
                Carry::Carried { .. } => {
                    *carry = Carry::Gone;
                    None
                }
                Carry::Landed(carried) => Some(carried),
                _ => None,
            }
        };
        if let Some(carried) = landed {
            let conn = match carried.replies {
                Err(Fault::Lost { conn, .. }) => conn,
                _ => None,
            };
            state.give_backs.push((self.ear.gives_back.clone(), conn));
        }
        let signal = state.signals.get_mut(&self.signal)?;
        signal.seats.remove(&self.arrival);
        let slot = signal.slot;
        let next = (signal.seats.values())
            .find(|e| !e.mailbox.is_told())
            .map(|e| Arc::clone(&e.mailbox));
        if signal.seats.is_empty() {
            state.signals.remove(&self.signal);
            state.refused.remove(&self.signal);
        }
        // A wake for the connection's fault, like a signal, asks one more waiter to try: at
        // worst a waiter tries once more than it needed to.
        told?;
        match next {
            Some(next) => {
                next.tell(Told::AskAgain);
                None
            }
            None => Some((self.signal.clone(), slot)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Left without a word (a future dropped, a lock taken by a try of its own): the hub
        // pushes back what it owes, and gives back what a carried try took, at the end of its
        // `BLPOP` at the latest.
        let owed = self.part();
        let mut state = self.hub.state.lock();
        if let Some(owed) = owed {
            state.owed.push(owed);
        }
        let pending = !state.owed.is_empty() || !state.give_backs.is_empty();
        drop(state);
        if pending && let Err(e) = self.hub.start() {
            log::error!("{}: a wake-up owed is not pushed back: {e}", self.signal);
        }
    }
}

impl Hub {
    /// A listener for a signal of the plain lock of `keys`, behind this process's earlier
    /// ones there; the hub may carry its try `tries_as` (given back with `gives_back`).
    pub(crate) fn listen(
        self: &Arc<Hub>,
        keys: &Keys,
        tries_as: Option<Request>,
        gives_back: Request,
    ) -> Listener {
        let ear = Arc::new(Ear {
            mailbox: Arc::new(Mailbox::default()),
            keys: keys.clone(),
            won: Default::default(),
            tries_as,
            gives_back,
            carry: Mutex::new(Carry::OnItsOwn),
            timer: Mutex::new(None),
        });
        let mut state = self.state.lock();
        state.arrivals += 1;
        let arrival = state.arrivals;
        let new_name = !state.signals.contains_key(&keys.signal);
        let signal = state
            .signals
            .entry(keys.signal.clone())
            .or_insert_with(|| Signal {
                slot: keys.slot,
                seats: BTreeMap::new(),
            });
        signal.seats.insert(arrival, Arc::clone(&ear));
        let wake = self.wake(&state, new_name);
        Listener {
            hub: Arc::clone(self),
            signal: keys.signal.clone(),
            arrival,
            ear,
            wake,
        }
    }

    /// Whether an acquire of the plain lock `signal` should join this process's waiters
    /// there without a try of its own, and if so until when it may sleep by itself (`None`:
    /// until told). It should when a waiter here was told of a signal and has not tried yet,
    /// or its try is on its way (the lock is being handed over to it), or when one waits for
    /// the hub to bring the next signal or carry its try: a try of its own would either find
    /// the lock held or take it past them, and leave the release's signal for their next
    /// try to find the lock held. It sleeps no longer than the soonest of their timers, the
    /// holder's expiry they read, so that it is timed as they are even if they all leave.
    pub(crate) fn behind(&self, signal: &str) -> Option<Option<Instant>> {
        let state = self.state.lock();
        let seats = state.signals.get(signal)?.seats.values();
        let (mut handing_over, mut timer) = (false, None::<Instant>);
        for ear in seats {
            let told = ear.mailbox.is_told()
                || ear.mailbox.trying.load(std::sync::atomic::Ordering::SeqCst);
            let waits = matches!(*ear.carry.lock(), Carry::Waiting | Carry::Carried { .. });
            handing_over |= told;
            if let Some(at) = *ear.timer.lock()
                && (told || waits)
            {
                timer = Some(timer.map_or(at, |t| t.min(at)));
            }
        }
        (handing_over || timer.is_some()).then_some(timer)
    }

    /// When the thread blocks on the signal list `signal` though no waiter of it is left here
    /// (they left, or took the lock), it would pop a release's signal there and push it back;
    /// a process that exits meanwhile would swallow it. Then this gives a wake for the caller
    /// to send, and a mailbox told once that `BLPOP` has ended and what it popped has been
    /// pushed back: after that the process may exit.
    pub(crate) fn lingering(&self, signal: &str) -> Option<(Request, Arc<Mailbox>)> {
        let mut state = self.state.lock();
        let lingers = state.running
            && !state.signals.contains_key(signal)
            && state.listening.iter().any(|key| key == signal);
        if !lingers {
            return None;
        }
        let settled = Arc::new(Mailbox::default());
        state.settling.push(Arc::clone(&settled));
        Some((queue::wake(&self.home, self.slot, WAKE_EXPIRE_MS), settled))
    }

    /// The waiter whose try rides behind the next `BLPOP`, marked so: the first waiter of the
    /// one plain lock listened on (passing those whose carried try just took it), if it waits.
    /// One that tries by itself keeps its place: none is carried, and it wakes the hub when it
    /// waits again ([`Listener::waiting`]). With several locks, the signal that will come is
    /// not known, and a try behind for each would cost every lock a try per `BLPOP`.
    pub(super) fn carry(&self, signals: &HashMap<String, u16>) -> Option<Arc<Ear>> {
        let mut state = self.state.lock();
        let carried = match signals.iter().collect::<Vec<_>>()[..] {
            [(signal, _)] => state
                .signals
                .get(signal)
                .and_then(Signal::next)
                .filter(|ear| {
                    let mut carry = ear.carry.lock();
                    let waits = ear.tries_as.is_some()
                        && !ear.mailbox.is_told()
                        && matches!(*carry, Carry::Waiting);
                    if waits {
                        *carry = Carry::Carried { on: None };
                    }
                    waits
                }),
            _ => None,
        };
        state.carrying = carried.is_some();
        carried
    }

    /// What came back for the try carried for `ear`: to it, or, if it left, given back.
    pub(super) fn land(&self, ear: &Ear, landed: Carried) {
        let mut carry = ear.carry.lock();
        match &*carry {
            Carry::Carried { .. } => {
                let won = matches!(&landed.replies, Ok(replies)
                    if matches!(lock::parse_try(&ear.keys, replies), Ok(lock::Attempt::Acquired { .. })));
                ear.won.store(won, std::sync::atomic::Ordering::SeqCst);
                *carry = Carry::Landed(landed);
                drop(carry);
                ear.mailbox.tell(Told::AskAgain);
            }
            Carry::Gone => {
                *carry = Carry::OnItsOwn;
                drop(carry);
                let lost_on = match landed.replies {
                    Err(Fault::NotSent(_)) => return,
                    Err(Fault::Lost { conn, .. }) => conn,
                    Ok(_) => None,
                };
                let mut state = self.state.lock();
                state.give_backs.push((ear.gives_back.clone(), lost_on));
            }
            // It settled the try by itself.
            _ => {}
        }
    }

    /// Gives back what a carried try took for a waiter that left, owner-checked (which
    /// wakes the next waiter), after closing `lost_on`, where the try may yet run.
    pub(super) fn give_back<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        release: &Request,
        lost_on: Option<ConnId>,
    ) {
        let deadline = Instant::now() + self.io_timeout;
        if let Some(lost_on) = lost_on {
            let _ = self.transport.kill(lost_on, deadline);
        }
        if let Err(e) = self.exchange(conn, release, deadline, deadline) {
            log::error!("a lock taken for a waiter that left stays until it expires: {e}");
        }
    }
}
