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
//! primitive's hash slot) as `<token>:<expiry>:<waiter id>`; a word to ask again as
//! `ask:<waiter id>`, and an election's news as `watch...` ([`queue::parse_mail`]). The hub's
//! thread blocks in one `BLPOP` over the inboxes of every primitive its waiters wait on (and
//! the plain locks' signal lists), with an `LPOP` of each inbox behind it that takes the grants already there, hands
//! each grant to its waiter's [`Mailbox`], and sends each primitive's heartbeat
//! (`queue_beat.lua`) every half lapse window, all over its one connection. A waiter on a key
//! it does not listen on yet pushes a wake to the hub's own list ([`keys::hub_home`]), which
//! it always listens on, so that it listens again: no `CLIENT UNBLOCK`, no `CLIENT KILL`.
//! With no waiter left it stops at the end of its `BLPOP` (a half lapse window, or
//! [`LISTEN_MAX`], at the latest), closing its connection. On a cluster there is one hub per
//! hash slot in use, since one `BLPOP` cannot span slots; on a quorum it blocks on one of the
//! servers, as python-redis-lock's waiters would.
//!
//! Faults: a `BLPOP` or `LPOP` whose reply is lost may have popped a grant, so when the
//! connection fails every waiter asks again, which finds what its id holds. A heartbeat that
//! finds the process lapsed (it was stopped past its lapse window) starts a new epoch of that
//! primitive: its waiters leave and join again at the back, so that none keeps a place the
//! process lost.
//!
//! What the queue primitives' waiters are told, and when, is decided by the hub's machine
//! with no I/O ([`protocol::hub`](crate::protocol::hub)): the thread only pumps it, telling
//! it what came back and carrying out what it says.

mod listener;
mod seat;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use crate::cancel::Interrupt;
use crate::config::id::random_hex;
use crate::protocol::election;
use crate::protocol::hub::{self as machine, Event};
use crate::protocol::keys::{self, QueueKeys};
use crate::protocol::lock;
use crate::protocol::queue::{self, PROCESS_ID_LEN};
use crate::protocol::redirect;
use crate::protocol::request::Request;
use crate::transport::send::{longer, FIRST_PAUSE};
use crate::transport::{ConnId, Fault, Transport, Waiter};

pub(crate) use crate::protocol::hub::Told;
pub(crate) use listener::{Carried, Heard, Listener};
use listener::{Carry, Ear, Signal};
pub(crate) use seat::Seat;
use watch::Watch;
pub(crate) use watch::Watching;

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
}

#[derive(Default)]
struct State {
    /// The queue primitives waited on or watched: who is told what, and when.
    machine: machine::Hub<QueueKeys>,
    /// The queue primitives' waiters' mailboxes, by waiter id.
    mailboxes: HashMap<String, Arc<Mailbox>>,
    /// The elections watched, by inbox key.
    watches: HashMap<String, Watch>,
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

/// What a `BLPOP` brought: the key and element popped, if any.
type Popped = Result<Option<(String, Vec<u8>)>, Failed>;

/// What the `LPOP`s behind a `BLPOP` brought, by inbox; `None` when their replies were lost
/// (they may have popped grants).
type Drained = Option<Vec<(String, Vec<u8>)>>;

/// The most elements one `LPOP` behind the `BLPOP` takes from an inbox.
const DRAIN: usize = 64;

/// Why a `BLPOP` brought nothing.
enum Failed {
    /// The connection failed, or the key moved: a grant or signal may be lost with it.
    Io(String),
    /// The server refused it.
    Refused(redis::ServerError),
}

impl State {
    /// Carries out what the machine decided: each waiter's mail, each watch's read or news.
    fn pump(&mut self) {
        while let Some(event) = self.machine.poll() {
            match event {
                Event::Tell { waiter, told, .. } => {
                    if let Some(mailbox) = self.mailboxes.get(&waiter) {
                        mailbox.tell(told);
                    }
                }
                Event::Look { inbox } => {
                    if let Some(watch) = self.watches.get_mut(&inbox) {
                        watch.look_now();
                    }
                }
                Event::News { inbox, news } => {
                    if let Some(watch) = self.watches.get_mut(&inbox) {
                        match election::parse_news(&news) {
                            Some(seen) => watch.news(seen),
                            None => watch.look_now(),
                        }
                    }
                }
            }
        }
    }
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
        // A grant over anything, anything over a timer.
        let keep = match *slot {
            Some(Told::Granted(..)) => true,
            Some(Told::AskAgain | Told::Refused) => matches!(told, Told::AskBy(_)),
            Some(Told::AskBy(_)) | None => false,
        };
        if !keep {
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
        });
        hubs.push(Arc::downgrade(&hub));
        hub
    }

    pub(crate) fn process(&self) -> &str {
        &self.process
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

    /// The connection failed: a grant or a signal may have been lost with it, so every
    /// waiter asks again, and every watch reads the leader.
    fn ask_all_again(state: &mut State) {
        state.machine.lost();
        state.pump();
        for signal in state.signals.values() {
            for ear in signal.seats.values() {
                ear.mailbox.tell(Told::AskAgain);
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
            let (keys, drains, signals, due) = {
                let mut state = self.state.lock();
                for settled in state.settling.drain(..) {
                    settled.tell(Told::AskAgain);
                }
                let pending = !state.owed.is_empty() || !state.give_backs.is_empty();
                if state.machine.is_empty() && state.signals.is_empty() && !pending {
                    state.running = false;
                    state.listening.clear();
                    drop(state);
                    if let Some(conn) = conn.take() {
                        conn.close();
                    }
                    return;
                }
                let heard = |key: &&str| !state.refused.get(*key).is_some_and(|(_, out)| *out);
                let drains: Vec<String> = (state.machine.inboxes())
                    .filter(heard)
                    .map(str::to_owned)
                    .collect();
                let listening: Vec<String> = (drains.iter().map(String::as_str))
                    .chain(state.signals.keys().map(String::as_str))
                    .filter(heard)
                    .map(str::to_owned)
                    .collect();
                state.listening.clone_from(&listening);
                let beat_due = state.machine.next_beat();
                let listen_end = Instant::now() + LISTEN_MAX;
                let due = (beat_due.into_iter())
                    .chain(Hub::watch_due(&state))
                    .fold(listen_end, Instant::min);
                let keys: Vec<String> = std::iter::once(self.home.clone())
                    .chain(listening)
                    .collect();
                let signals: HashMap<String, u16> = (state.signals.iter())
                    .map(|(key, signal)| (key.clone(), signal.slot))
                    .collect();
                (keys, drains, signals, due)
            };
            if due <= Instant::now() {
                self.beat_all(&mut conn);
                self.read_watches(&mut conn);
                continue;
            }
            let carried = self.carry(&signals);
            let (popped, landed, drained) =
                self.pop(&mut conn, &keys, &drains, due, carried.as_deref());
            if let (Some(ear), Some(landed)) = (&carried, landed) {
                self.land(ear, landed);
            }
            match popped {
                Ok(Some((key, element))) => {
                    pause = FIRST_PAUSE;
                    if signals.contains_key(&key) {
                        crate::observe::handoff_step("popped", &key);
                    }
                    // A signal of the lock whose try rode behind the `BLPOP` went to that try.
                    if carried.is_none() || !signals.contains_key(&key) {
                        self.deliver(&key, &element, signals.get(&key).copied());
                    }
                    self.drained(drained);
                }
                Ok(None) => {
                    pause = FIRST_PAUSE;
                    self.drained(drained);
                }
                Err(Failed::Refused(e)) => {
                    self.drained(drained);
                    self.refused(&mut conn, &keys, e);
                    // ok: a backoff before listening again, for a refusal the server may
                    // repeat (an ACL); the waiters keep their own deadlines meanwhile.
                    std::thread::sleep(pause);
                    pause = longer(pause);
                }
                Err(Failed::Io(e)) => {
                    log::debug!("the waiting connection failed ({e}); its waiters ask again");
                    self.lose(&mut conn);
                    Hub::ask_all_again(&mut self.state.lock());
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
        self.state.lock().machine.closed();
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
            if state.machine.knows(key) {
                state.machine.ask_again(Some(key));
            }
        }
        state.pump();
    }

    /// One `BLPOP` over `keys` until `until`, with the try of `carried` behind it, then an
    /// `LPOP` of each queue inbox in `drains`: the key and element popped, if any, what came
    /// back for the try, and what the `LPOP`s took. Grants pushed while the thread was away
    /// come in this round trip, not one `BLPOP` each: when several holders release at once,
    /// the last grant is not a round trip late for each one before it.
    fn pop<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        keys: &[String],
        drains: &[String],
        until: Instant,
        carried: Option<&Ear>,
    ) -> (Popped, Option<Carried>, Drained) {
        let ms = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(keys)
            .arg(format!("{}.{:03}", ms / 1000, ms % 1000));
        let tries_as = carried.and_then(|ear| ear.tries_as.as_ref());
        let lpops = drains.iter().map(|inbox| {
            let mut lpop = redis::cmd("LPOP");
            lpop.arg(inbox).arg(DRAIN);
            lpop
        });
        let request = match tries_as {
            Some(tries_as) => Request::behind(blpop, tries_as),
            None => Request::single(blpop, false),
        }
        .on_slot(self.slot);
        let tried = request.cmds.len() - 1;
        let request = request.then(lpops);
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
                return (Err(Failed::Io(error)), tries_as.map(|_| landed), None);
            }
        };
        let (rest, drained) = match rest {
            Ok(mut replies) => {
                let lpopped = replies.split_off(tried.min(replies.len()));
                (
                    Ok(replies),
                    Some(drains.iter().zip(lpopped).flat_map(popped_from).collect()),
                )
            }
            Err(fault) => {
                self.lose(conn);
                (Err(fault), None)
            }
        };
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
        (popped, landed, drained)
    }

    /// Hands on what the `LPOP`s behind a `BLPOP` took, in the order they took it; replies
    /// lost may have taken grants, so then every waiter asks again, as for a lost `BLPOP`.
    fn drained(&self, drained: Drained) {
        match drained {
            Some(elements) => {
                for (inbox, element) in elements {
                    self.deliver(&inbox, &element, None);
                }
            }
            None => Hub::ask_all_again(&mut self.state.lock()),
        }
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
        state.machine.popped(key, element);
        state.pump();
    }

    /// Sends the heartbeats due, on the thread's connection; a primitive where the process
    /// lapsed starts a new epoch.
    fn beat_all<'t>(&'t self, conn: &mut Option<Box<dyn Waiter + 't>>) {
        let due = self.state.lock().machine.beats_due(Instant::now());
        for beat in due {
            let request = queue::beat(&beat.keys, &self.process, beat.lapse);
            let sent = Instant::now();
            let deadline = sent + self.io_timeout.min(beat.lapse / 2);
            let live = self
                .exchange(conn, &request, deadline, deadline)
                .and_then(|reply| queue::parse_beat(&beat.keys, &reply).map_err(|e| e.to_string()))
                .map_err(|e| {
                    log::debug!(
                        "{}: a heartbeat failed ({e}); sent again shortly",
                        beat.inbox
                    )
                });
            let mut state = self.state.lock();
            state
                .machine
                .beaten(&beat.inbox, sent, live, Instant::now());
            state.pump();
        }
    }
}

/// The elements an `LPOP <inbox> <count>` reply holds, with their inbox. An error (a server
/// before 6.2 knows no count) takes nothing: the next `BLPOP` pops them one by one.
fn popped_from((inbox, reply): (&String, Value)) -> Vec<(String, Vec<u8>)> {
    match reply {
        Value::Array(elements) => (elements.into_iter())
            .filter_map(|element| match element {
                Value::BulkString(element) => Some((inbox.clone(), element)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}
