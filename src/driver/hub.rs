//! The process's inbox on one server: one waiting connection for all the waiters of the
//! process there, plain locks and the queue engine's, blocking threads and async tasks alike,
//! and one heartbeat per queue primitive for all of them.
//!
//! A plain lock's waiters listen on python-redis-lock's `lock-signal:<name>`, as its own
//! waiters do, but through the hub: a signal it pops goes to the first of the process's
//! waiters on that name that has not been told yet, which then tries. A signal nobody here
//! takes (its waiter left, or every one was told already) is pushed back for another
//! process's waiter, so a release's one wake-up is never swallowed. The waiters keep their
//! own time: at the holder's expiry, or their deadline, each tries or leaves by itself.
//!
//! A waiter's id ends in the hub's process id ([`queue::waiter_id`]). A grant to it is pushed
//! to the process's inbox of that primitive (`<base>signal:<process id>`, in the
//! primitive's hash slot) as `<token>:<waiter id>`. The hub's thread blocks in one `BLPOP`
//! over the inboxes of every primitive its waiters wait on (and the plain locks' signal
//! lists), hands each grant to its waiter's [`Mailbox`], and sends each primitive's heartbeat
//! (`queue_beat.lua`) every half lapse window, all over its one connection. A waiter on a key
//! it does not listen on yet pushes a wake to the hub's own list ([`keys::hub_home`]), which
//! it always listens on, so that it listens again: no `CLIENT UNBLOCK`, no `CLIENT KILL`.
//! With no waiter left it stops at the end of its `BLPOP` (a half lapse window, or
//! [`LISTEN_MAX`], at the latest), closing its connection. On a cluster there is one hub per
//! hash slot in use, since one `BLPOP` cannot span slots; on a quorum it blocks on one of the
//! servers, as python-redis-lock's waiters would.
//!
//! Faults: a `BLPOP` whose reply is lost may have popped a grant, so when the connection
//! fails every waiter asks again, which finds what its id holds. A heartbeat that finds the
//! process lapsed (it was stopped past its lapse window) starts a new epoch of that
//! primitive: its waiters leave and join again at the back, so that none keeps a place the
//! process lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use crate::cancel::Interrupt;
use crate::config::id::random_hex;
use crate::protocol::keys::{self, Keys, QueueKeys};
use crate::protocol::lock;
use crate::protocol::queue::{self, Mail, Mode, PROCESS_ID_LEN};
use crate::protocol::redirect;
use crate::protocol::request::Request;
use crate::transport::send::{longer, FIRST_PAUSE};
use crate::transport::{ConnId, Fault, Transport, Waiter};

/// The hubs alive, by transport and hash slot.
static HUBS: LazyLock<Mutex<Vec<Weak<Hub>>>> = LazyLock::new(Default::default);

/// How long a wake pushed to a hub's own list lasts if no hub pops it (it stopped meanwhile).
const WAKE_EXPIRE_MS: u64 = 10_000;

/// The longest `BLPOP` of a hub with no heartbeat due sooner: how long it may go on listening
/// on keys nobody here waits on any more (a signal it pops there is pushed back), and keep
/// its connection once the last waiter left.
const LISTEN_MAX: Duration = Duration::from_secs(1);

/// The waiting connection, inboxes and heartbeats of this process on one server (or one hash
/// slot of a cluster).
pub(crate) struct Hub {
    transport: Arc<dyn Transport>,
    slot: u16,
    /// This process's id in the queues, while the hub lives.
    process: String,
    /// The list it always listens on, for wakes.
    home: String,
    io_timeout: Duration,
    state: Mutex<State>,
    /// The last heartbeat that found the process live: when it was sent, and the server's
    /// time (ms) when it ran, which came after. A grant's claim expiry, in server ms, is then
    /// no earlier than the send plus its distance from that server time. Forgotten with the
    /// connection, which may come back to another server.
    clock: Mutex<Option<(Instant, u64)>>,
}

#[derive(Default)]
struct State {
    /// The primitives waited on, by inbox key.
    names: HashMap<String, Name>,
    /// The plain locks waited on, by signal key.
    signals: HashMap<String, Signal>,
    /// Signals popped that no waiter here took, to push back, with their hash slots.
    owed: Vec<(String, u16)>,
    /// Releases of what carried tries took for waiters that left, and the connection to close
    /// first where a try's reply was lost.
    give_backs: Vec<(Request, Option<ConnId>)>,
    /// Keys the server refused to `BLPOP`, while their waiters last: why, and whether they
    /// are left out of the `BLPOP` (not a list; an ACL's refusal may be lifted).
    refused: HashMap<String, (redis::ServerError, bool)>,
    /// How many listeners have arrived: their places among a lock's waiters.
    arrivals: u64,
    /// Whether the `BLPOP` in flight carries a waiter's try.
    carrying: bool,
    /// Told once the `BLPOP` in flight has ended and what it popped has been handed on: see
    /// [`Hub::lingering`].
    settling: Vec<Arc<Mailbox>>,
    /// The keys of the `BLPOP` in flight, while the thread runs.
    listening: Vec<String>,
    running: bool,
}

/// One plain lock's waiters of this process, by arrival.
struct Signal {
    slot: u16,
    seats: BTreeMap<u64, Arc<Ear>>,
}

impl Signal {
    /// The first waiter whose turn it is: not one whose carried try took the lock.
    fn next(&self) -> Option<Arc<Ear>> {
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
    keys: Keys,
    /// A try carried for it took the lock: it is about to leave, and the next waiter's try
    /// can ride behind the next `BLPOP`.
    won: std::sync::atomic::AtomicBool,
    /// Its try; `None` where one server cannot decide a try (a quorum's go to every server).
    tries_as: Option<Request>,
    /// Its owner-checked release, to give back what a carried try took for a waiter gone.
    gives_back: Request,
    carry: Mutex<Carry>,
}

/// Where a waiter's try is. A try is never sent twice at once: the hub carries one only for a
/// waiter that waits, and a waiter tries by itself only when the hub carries none for it.
enum Carry {
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

/// One primitive's waiters of this process.
struct Name {
    keys: QueueKeys,
    /// The shortest lapse window of its waiters: a heartbeat every half of it.
    lapse: Duration,
    beat_due: Instant,
    /// Bumped when the process is found lapsed there: its waiters join again.
    epoch: u64,
    /// Whether the process has joined its queue in this epoch, so that a heartbeat found
    /// gone means it lapsed.
    joined: bool,
    seats: HashMap<String, Arc<Mailbox>>,
}

/// What a `BLPOP` brought: the key and element popped, if any.
type Popped = Result<Option<(String, Vec<u8>)>, Failed>;

/// Why a `BLPOP` brought nothing.
enum Failed {
    /// The connection failed, or the key moved: a grant or signal may be lost with it.
    Io(String),
    /// The server refused it.
    Refused(redis::ServerError),
}

/// What a waiter is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Told {
    /// Granted, with this token, held at least until then unless claimed, where the hub
    /// could date the grant's claim window.
    Granted(u64, Option<Instant>),
    /// Ask again: a wake (`reset_all`), the hub's connection failed (a grant may have been
    /// lost with it), or its process lapsed (the ask then leaves and joins again).
    AskAgain,
    /// The server refused the `BLPOP` for this waiter's key (see [`Listener::refused`]).
    Refused,
}

/// One waiter's mail: what it was told last, a grant over anything else.
#[derive(Default)]
pub(crate) struct Mailbox {
    told: Mutex<Option<Told>>,
    /// A plain lock's waiter was told and its try is on its way.
    trying: std::sync::atomic::AtomicBool,
    arrived: Condvar,
    #[cfg(feature = "tokio")]
    pub(crate) notify: ::tokio::sync::Notify,
}

impl Mailbox {
    fn tell(&self, told: Told) {
        let mut slot = self.told.lock();
        if !matches!(*slot, Some(Told::Granted(..))) {
            *slot = Some(told);
        }
        self.arrived.notify_all();
        drop(slot);
        #[cfg(feature = "tokio")]
        self.notify.notify_one();
    }

    pub(crate) fn take(&self) -> Option<Told> {
        self.told.lock().take()
    }

    fn is_told(&self) -> bool {
        self.told.lock().is_some()
    }

    /// Marks the try of a told waiter on its way, or back.
    pub(crate) fn trying(&self, trying: bool) {
        self.trying
            .store(trying, std::sync::atomic::Ordering::SeqCst);
    }

    /// Blocks until told, `until` (`None`: no limit) or an interrupt (a cancel): what it was
    /// told, if anything.
    pub(crate) fn wait(&self, until: Option<Instant>, stop: impl Fn() -> bool) -> Option<Told> {
        let mut slot = self.told.lock();
        loop {
            if let Some(told) = slot.take() {
                return Some(told);
            }
            if stop() {
                return None;
            }
            match until {
                Some(until) => {
                    if self.arrived.wait_until(&mut slot, until).timed_out() {
                        return slot.take();
                    }
                }
                None => self.arrived.wait(&mut slot),
            }
        }
    }
}

impl Interrupt for Mailbox {
    fn interrupt(&self, _: &dyn Fn() -> bool) {
        let _slot = self.told.lock();
        self.arrived.notify_all();
    }
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

/// A waiter's place at its hub, from before its first ask to the end of its wait.
pub(crate) struct Seat {
    hub: Arc<Hub>,
    inbox: String,
    waiter: String,
    epoch: u64,
    pub(crate) mailbox: Arc<Mailbox>,
    /// See [`Seat::wake`].
    wake: Option<Request>,
}

impl Hub {
    /// This process's hub for keys in hash slot `slot` on `transport`.
    pub(crate) fn of(transport: &Arc<dyn Transport>, slot: u16, io_timeout: Duration) -> Arc<Hub> {
        let tagged = transport.hash_tags();
        let slot = if tagged { slot } else { 0 };
        let mut hubs = HUBS.lock();
        hubs.retain(|hub| hub.strong_count() > 0);
        let found = hubs.iter().filter_map(Weak::upgrade).find(|hub| {
            hub.slot == slot
                && std::ptr::addr_eq(Arc::as_ptr(&hub.transport), Arc::as_ptr(transport))
        });
        if let Some(hub) = found {
            return hub;
        }
        let process = random_hex(PROCESS_ID_LEN);
        let hub = Arc::new(Hub {
            transport: Arc::clone(transport),
            slot,
            home: keys::hub_home(&process, slot, tagged),
            process,
            io_timeout,
            state: Mutex::default(),
            clock: Mutex::default(),
        });
        hubs.push(Arc::downgrade(&hub));
        hub
    }

    pub(crate) fn process(&self) -> &str {
        &self.process
    }

    /// A seat for waiter `waiter` (its id made with [`queue::waiter_id`]) in the queue of
    /// `keys`, whose entry lapses after `lapse` without a heartbeat.
    pub(crate) fn seat(self: &Arc<Hub>, keys: &QueueKeys, waiter: &str, lapse: Duration) -> Seat {
        let inbox = keys.signal(&self.process);
        let mailbox = Arc::new(Mailbox::default());
        let mut state = self.state.lock();
        let new_name = !state.names.contains_key(&inbox);
        let name = state.names.entry(inbox.clone()).or_insert_with(|| Name {
            keys: keys.clone(),
            lapse,
            beat_due: Instant::now() + lapse / 2,
            epoch: 0,
            joined: false,
            seats: HashMap::new(),
        });
        name.lapse = name.lapse.min(lapse);
        name.seats.insert(waiter.to_owned(), Arc::clone(&mailbox));
        let epoch = name.epoch;
        let wake = self.wake(&state, new_name);
        Seat {
            hub: Arc::clone(self),
            inbox,
            waiter: waiter.to_owned(),
            epoch,
            mailbox,
            wake,
        }
    }

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

    /// Whether a waiter of the plain lock `signal` here was told of a signal and has not
    /// tried yet, or its try is on its way: the lock is being handed over to it.
    pub(crate) fn handing_over(&self, signal: &str) -> bool {
        let state = self.state.lock();
        state.signals.get(signal).is_some_and(|signal| {
            (signal.seats.values()).any(|e| {
                e.mailbox.is_told() || e.mailbox.trying.load(std::sync::atomic::Ordering::SeqCst)
            })
        })
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

    /// The wake a waiter sends when its key is new while the thread blocks on others.
    fn wake(&self, state: &State, new_name: bool) -> Option<Request> {
        (new_name && state.running).then(|| queue::wake(&self.home, self.slot, WAKE_EXPIRE_MS))
    }

    /// Starts the thread if it does not run.
    fn start(self: &Arc<Hub>) -> std::io::Result<()> {
        let mut state = self.state.lock();
        if !state.running {
            let hub = Arc::clone(self);
            std::thread::Builder::new()
                .name("redis-lock-inbox".into())
                .spawn(move || hub.run())?;
            state.running = true;
        }
        Ok(())
    }

    /// Tells every waiter of the inboxes `which` (all, and every listener, with `None`)
    /// `told`.
    fn tell_all(state: &State, which: Option<&str>, told: Told) {
        for (inbox, name) in &state.names {
            if which.is_none_or(|w| w == inbox) {
                for mailbox in name.seats.values() {
                    mailbox.tell(told);
                }
            }
        }
        if which.is_none() {
            for signal in state.signals.values() {
                for ear in signal.seats.values() {
                    ear.mailbox.tell(told);
                }
            }
        }
    }

    /// The thread: heartbeats when due, and one `BLPOP` over the inboxes in between, until
    /// no waiter is left (found at the end of a `BLPOP`: at the latest a half lapse window
    /// after the last one leaves). Everything goes over its one connection, closed then.
    fn run(self: Arc<Hub>) {
        let mut conn: Option<Box<dyn Waiter + '_>> = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let (owed, give_backs) = {
                let mut state = self.state.lock();
                (
                    std::mem::take(&mut state.owed),
                    std::mem::take(&mut state.give_backs),
                )
            };
            for (signal, slot) in owed {
                self.push_back(&mut conn, &signal, slot);
            }
            for (release, lost_on) in give_backs {
                self.give_back(&mut conn, &release, lost_on);
            }
            let (keys, signals, due) = {
                let mut state = self.state.lock();
                for settled in state.settling.drain(..) {
                    settled.tell(Told::AskAgain);
                }
                let pending = !state.owed.is_empty() || !state.give_backs.is_empty();
                if state.names.is_empty() && state.signals.is_empty() && !pending {
                    state.running = false;
                    state.listening.clear();
                    drop(state);
                    if let Some(conn) = conn.take() {
                        conn.close();
                    }
                    return;
                }
                let listening: Vec<String> = (state.names.keys())
                    .chain(state.signals.keys())
                    .filter(|key| !state.refused.get(*key).is_some_and(|(_, out)| *out))
                    .cloned()
                    .collect();
                state.listening.clone_from(&listening);
                let beat_due = state.names.values().map(|n| n.beat_due).min();
                let listen_end = Instant::now() + LISTEN_MAX;
                let due = beat_due.map_or(listen_end, |due| due.min(listen_end));
                let keys: Vec<String> = std::iter::once(self.home.clone())
                    .chain(listening)
                    .collect();
                let signals: HashMap<String, u16> = (state.signals.iter())
                    .map(|(key, signal)| (key.clone(), signal.slot))
                    .collect();
                (keys, signals, due)
            };
            if due <= Instant::now() {
                self.beat_all(&mut conn);
                continue;
            }
            let carried = self.carry(&signals);
            let (popped, landed) = self.pop(&mut conn, &keys, due, carried.as_deref());
            if let (Some(ear), Some(landed)) = (&carried, landed) {
                self.land(ear, landed);
            }
            match popped {
                Ok(Some((key, element))) => {
                    pause = FIRST_PAUSE;
                    // A signal of the lock whose try rode behind the `BLPOP` went to that try.
                    if carried.is_none() || !signals.contains_key(&key) {
                        self.deliver(&key, &element, signals.get(&key).copied());
                    }
                }
                Ok(None) => pause = FIRST_PAUSE,
                Err(Failed::Refused(e)) => {
                    self.refused(&mut conn, &keys, e);
                    // ok: a backoff before listening again, for a refusal the server may
                    // repeat (an ACL); the waiters keep their own deadlines meanwhile.
                    std::thread::sleep(pause);
                    pause = longer(pause);
                }
                Err(Failed::Io(e)) => {
                    log::debug!("the waiting connection failed ({e}); its waiters ask again");
                    self.lose(&mut conn);
                    Hub::tell_all(&self.state.lock(), None, Told::AskAgain);
                    // ok: a backoff before connecting again to a server that is away; the
                    // waiters keep their own deadlines meanwhile, asking on their own.
                    std::thread::sleep(pause);
                    pause = longer(pause);
                }
            }
        }
    }

    /// `request` on the thread's connection (opened when there is none), its first reply by
    /// `deadline` after it is sent by `sent_by`; the others are read too, so that none is left
    /// on the connection. A connection that failed is closed.
    fn exchange<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        request: &Request,
        sent_by: Instant,
        deadline: Instant,
    ) -> Result<Value, String> {
        let waiter = match conn {
            Some(waiter) => waiter,
            None => conn.insert(
                self.transport
                    .waiter(self.slot, sent_by)
                    .map_err(|f| f.into_error().to_string())?,
            ),
        };
        let replies: Result<Vec<Value>, Fault> = waiter
            .ready(sent_by)
            .and_then(|()| waiter.send(request, sent_by))
            .and_then(|()| {
                (0..request.cmds.len())
                    .map(|_| waiter.recv(deadline))
                    .collect()
            });
        match replies {
            Ok(replies) => Ok(replies.into_iter().next().unwrap_or(Value::Nil)),
            Err(f) => {
                self.lose(conn);
                Err(f.into_error().to_string())
            }
        }
    }

    /// Closes the thread's connection, which failed or is out of step (a reply may still be
    /// on its way on it, so it is never lent again), and forgets the clock it dated grants by.
    fn lose<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>) {
        if let Some(conn) = conn.take() {
            conn.close();
        }
        // The next connection may reach another server (a failover), on another clock.
        *self.clock.lock() = None;
    }

    /// The server refused a `BLPOP` of `keys` with `e`. A key of the wrong type is found and
    /// left out, its waiters told; any other refusal (an ACL) is told to every waiter.
    fn refused<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        keys: &[String],
        e: redis::ServerError,
    ) {
        log::warn!("the server refused the waiting connection's BLPOP: {e:?}");
        let culprits: Vec<&String> = if e.code() == "WRONGTYPE" {
            let deadline = Instant::now() + self.io_timeout;
            (keys.iter())
                .filter(|key| {
                    let request = Request::single(redis::cmd("TYPE").arg(key).clone(), true)
                        .on_slot(self.slot);
                    let kind = self.exchange(conn, &request, deadline, deadline);
                    !matches!(kind, Ok(Value::SimpleString(k)) if k == "list" || k == "none")
                })
                .collect()
        } else {
            keys.iter().collect()
        };
        let wrong_type = e.code() == "WRONGTYPE";
        let mut state = self.state.lock();
        for key in culprits {
            state.refused.insert(key.clone(), (e.clone(), wrong_type));
            if let Some(signal) = state.signals.get(key) {
                for ear in signal.seats.values() {
                    ear.mailbox.tell(Told::Refused);
                }
            }
            if let Some(name) = state.names.get(key) {
                for mailbox in name.seats.values() {
                    mailbox.tell(Told::AskAgain);
                }
            }
        }
    }

    /// The waiter whose try rides behind the next `BLPOP`, marked so: the first waiter of the
    /// one plain lock listened on (passing those whose carried try just took it), if it waits.
    /// One that tries by itself keeps its place: none is carried, and it wakes the hub when it
    /// waits again ([`Listener::waiting`]). With several locks, the signal that will come is
    /// not known, and a try behind for each would cost every lock a try per `BLPOP`.
    fn carry(&self, signals: &HashMap<String, u16>) -> Option<Arc<Ear>> {
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
    fn land(&self, ear: &Ear, landed: Carried) {
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
    fn give_back<'t>(
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

    /// One `BLPOP` over `keys` until `until`, with the try of `carried` behind it: the key
    /// and element popped, if any, and what came back for the try.
    fn pop<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        keys: &[String],
        until: Instant,
        carried: Option<&Ear>,
    ) -> (Popped, Option<Carried>) {
        let ms = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(keys)
            .arg(format!("{}.{:03}", ms / 1000, ms % 1000));
        let tries_as = carried.and_then(|ear| ear.tries_as.as_ref());
        let request = match tries_as {
            Some(tries_as) => Request::behind(blpop, tries_as),
            None => Request::single(blpop, false),
        }
        .on_slot(self.slot);
        let sent_by = Instant::now() + self.io_timeout;
        let mut sent = Instant::now();
        let replies = (|| {
            let waiter = match conn {
                Some(waiter) => waiter,
                None => conn.insert(self.transport.waiter(self.slot, sent_by)?),
            };
            waiter.ready(sent_by)?;
            if let Some(ear) = carried {
                *ear.carry.lock() = Carry::Carried { on: waiter.id() };
            }
            sent = Instant::now();
            waiter.send(&request, sent_by)?;
            let first = waiter.recv(until + self.io_timeout)?;
            let rest: Result<Vec<Value>, Fault> = (1..request.cmds.len())
                .map(|_| waiter.recv(Instant::now() + self.io_timeout))
                .collect();
            Ok((first, rest))
        })();
        let (first, rest) = match replies {
            Ok(replies) => replies,
            Err(fault) => {
                self.lose(conn);
                let landed = Carried {
                    sent,
                    replies: Err(match &fault {
                        Fault::NotSent(e) => Fault::NotSent(e.clone()),
                        Fault::Lost { conn, error } => Fault::Lost {
                            conn: *conn,
                            error: error.clone(),
                        },
                    }),
                };
                let error = fault.into_error().to_string();
                return (Err(Failed::Io(error)), tries_as.map(|_| landed));
            }
        };
        if rest.is_err() {
            self.lose(conn);
        }
        let landed = tries_as.map(|_| Carried {
            sent,
            replies: rest,
        });
        let popped = match first {
            Value::Nil => Ok(None),
            Value::Array(pair) => match pair.as_slice() {
                [Value::BulkString(key), Value::BulkString(element)] => Ok(Some((
                    String::from_utf8_lossy(key).into_owned(),
                    element.clone(),
                ))),
                _ => Err(Failed::Io(format!("an unexpected reply {pair:?}"))),
            },
            // A slot that moved, a primary that changed: the connection goes where it is now.
            Value::ServerError(e) if redirect::of(&e).is_some() => {
                self.lose(conn);
                Err(Failed::Io(format!("{e:?}")))
            }
            Value::ServerError(e) => Err(Failed::Refused(e)),
            other => Err(Failed::Io(format!("an unexpected reply {other:?}"))),
        };
        (popped, landed)
    }

    /// Pushes back a signal popped from `signal` that no waiter here takes, for another
    /// process's waiter; failing that, the waiters elsewhere try at their own time.
    fn push_back<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>, signal: &str, slot: u16) {
        let request = lock::pass_on_to(signal, slot);
        let deadline = Instant::now() + self.io_timeout;
        if let Err(e) = self.exchange(conn, &request, deadline, deadline) {
            log::debug!("{signal}: a wake-up nobody here takes was not pushed back: {e}");
        }
    }

    /// Hands what was popped from `key` to its waiter, or wakes them all. `signal` is the
    /// hash slot of a plain lock's signal list, which `key` was when the `BLPOP` was sent.
    fn deliver(&self, key: &str, element: &[u8], signal: Option<u16>) {
        let mut state = self.state.lock();
        if key == self.home {
            return;
        }
        if let Some(slot) = signal {
            // The first waiter not told yet: each signal is one waiter's turn to try.
            let ear = (state.signals.get(key))
                .and_then(|signal| signal.seats.values().find(|e| !e.mailbox.is_told()));
            match ear {
                Some(ear) => ear.mailbox.tell(Told::AskAgain),
                None => state.owed.push((key.to_owned(), slot)),
            }
            return;
        }
        let inbox = key;
        if element == b"hub" {
            return;
        }
        match queue::parse_mail(element) {
            Mail::Granted {
                token,
                expiry,
                waiter,
            } => {
                // A waiter no longer seated gave its grant back when it left.
                let seat = state.names.get(inbox).and_then(|n| n.seats.get(&waiter));
                if let Some(mailbox) = seat {
                    mailbox.tell(Told::Granted(token, self.date(expiry)));
                }
            }
            Mail::Wake => Hub::tell_all(&state, Some(inbox), Told::AskAgain),
        }
    }

    /// The earliest instant a claim expiry of `expiry` (server ms) can be, by the last live
    /// heartbeat; `None` before the first.
    fn date(&self, expiry: u64) -> Option<Instant> {
        let (sent, server_ms) = (*self.clock.lock())?;
        let ahead = Duration::from_millis(expiry.checked_sub(server_ms)?);
        sent.checked_add(ahead)
    }

    /// Sends the heartbeats due, on the thread's connection; a primitive where the process
    /// lapsed starts a new epoch.
    fn beat_all<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>) {
        let now = Instant::now();
        let due: Vec<(String, QueueKeys, Duration)> = {
            let state = self.state.lock();
            state
                .names
                .iter()
                .filter(|(_, n)| n.beat_due <= now)
                .map(|(inbox, n)| (inbox.clone(), n.keys.clone(), n.lapse))
                .collect()
        };
        for (inbox, keys, lapse) in due {
            let request = queue::beat(&keys, &self.process, lapse);
            let sent = Instant::now();
            let deadline = sent + self.io_timeout.min(lapse / 2);
            let live = self
                .exchange(conn, &request, deadline, deadline)
                .and_then(|reply| queue::parse_beat(&keys, &reply).map_err(|e| e.to_string()))
                .map(|server_ms| {
                    if let Some(server_ms) = server_ms {
                        *self.clock.lock() = Some((sent, server_ms));
                    }
                    server_ms.is_some()
                });
            let mut state = self.state.lock();
            let Some(name) = state.names.get_mut(&inbox) else {
                continue;
            };
            match live {
                Ok(true) => name.beat_due = now + name.lapse / 2,
                // Never joined in this epoch: nothing to prove yet.
                Ok(false) if !name.joined => name.beat_due = now + name.lapse / 2,
                Ok(false) => {
                    name.beat_due = now + name.lapse / 2;
                    name.lapsed();
                }
                Err(e) => {
                    log::debug!("{inbox}: a heartbeat failed ({e}); sent again shortly");
                    name.beat_due = now + FIRST_PAUSE.max(name.lapse / 20);
                }
            }
        }
    }
}

impl Name {
    /// The process lapsed here: a new epoch, whose waiters leave and join again.
    fn lapsed(&mut self) {
        self.epoch += 1;
        self.joined = false;
        for mailbox in self.seats.values() {
            mailbox.tell(Told::AskAgain);
        }
    }
}

impl Seat {
    /// How the next ask goes: whether the process has joined in this seat's epoch.
    pub(crate) fn mode(&self) -> Mode {
        let state = self.hub.state.lock();
        let name = state.names.get(&self.inbox);
        let known = name.is_some_and(|n| n.joined && n.epoch == self.epoch);
        Mode::Wait { known }
    }

    /// Whether the process lapsed since this waiter joined: it must leave and join again.
    pub(crate) fn stale(&self) -> bool {
        let state = self.hub.state.lock();
        state
            .names
            .get(&self.inbox)
            .is_some_and(|n| n.epoch != self.epoch)
    }

    /// Joins the current epoch, once it has left the line.
    pub(crate) fn rejoin(&mut self) {
        let state = self.hub.state.lock();
        if let Some(name) = state.names.get(&self.inbox) {
            self.epoch = name.epoch;
        }
    }

    /// The ask found it waiting: the process has joined.
    pub(crate) fn joined(&self) {
        let mut state = self.hub.state.lock();
        if let Some(name) = state
            .names
            .get_mut(&self.inbox)
            .filter(|n| n.epoch == self.epoch)
        {
            name.joined = true;
        }
    }

    /// The ask found its process lapsed.
    pub(crate) fn lapsed(&self) {
        let mut state = self.hub.state.lock();
        if let Some(name) = state
            .names
            .get_mut(&self.inbox)
            .filter(|n| n.epoch == self.epoch)
        {
            name.lapsed();
        }
    }

    /// The wake its thread needs to listen on this seat's inbox too, once: for the waiter to
    /// send, on its own runtime.
    pub(crate) fn wake(&mut self) -> Option<Request> {
        self.wake.take()
    }

    /// It blocks: the hub's thread must run to bring its mail.
    pub(crate) fn block(&self) -> std::io::Result<()> {
        self.hub.start()
    }
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

    /// It waits for its mail now: the hub may carry its try meanwhile. True when the hub
    /// should be woken to carry it: it is first, and the `BLPOP` in flight carries nobody's.
    pub(crate) fn waiting(&self) -> bool {
        let state = self.hub.state.lock();
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

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.hub.state.lock();
        let Some(name) = state.names.get_mut(&self.inbox) else {
            return;
        };
        name.seats.remove(&self.waiter);
        if name.seats.is_empty() {
            state.names.remove(&self.inbox);
            state.refused.remove(&self.inbox);
        }
    }
}
