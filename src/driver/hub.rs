//! The process's inbox on one server: one waiting connection for all the queue engine's
//! waiters of the process there, blocking threads and async tasks alike, and one heartbeat
//! per primitive for all of them.
//!
//! A waiter's id ends in the hub's process id ([`queue::waiter_id`]). A grant to it is pushed
//! to the process's inbox of that primitive (`<base>signal:<process id>`, in the
//! primitive's hash slot) as `<token>:<waiter id>`. The hub's thread blocks in one `BLPOP`
//! over the inboxes of every primitive its waiters wait on, hands each grant to its waiter's
//! [`Mailbox`], and sends each primitive's heartbeat (`queue_beat.lua`) every half lapse
//! window, all over its one connection. A waiter on a primitive it does not listen on yet
//! pushes a wake to an inbox it is blocked on, so that it listens again: no `CLIENT UNBLOCK`,
//! no `CLIENT KILL`. With no waiter left it stops at the end of its `BLPOP` (a half lapse
//! window at the latest), closing its connection. On a cluster there is one hub per hash slot
//! in use, since one `BLPOP` cannot span slots.
//!
//! Faults: a `BLPOP` whose reply is lost may have popped a grant, so when the connection
//! fails every waiter asks again, which finds what its id holds. A heartbeat that finds the
//! process lapsed (it was stopped past its lapse window) starts a new epoch of that
//! primitive: its waiters leave and join again at the back, so that none keeps a place the
//! process lost.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use crate::cancel::Interrupt;
use crate::config::id::random_hex;
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue::{self, Mail, Mode, PROCESS_ID_LEN};
use crate::protocol::request::Request;
use crate::transport::send::{longer, FIRST_PAUSE};
use crate::transport::{Transport, Waiter};

/// The hubs alive, by transport and hash slot.
static HUBS: LazyLock<Mutex<Vec<Weak<Hub>>>> = LazyLock::new(Default::default);

/// How long a wake pushed to an inbox lasts if no hub pops it (its hub stopped meanwhile).
const WAKE_EXPIRE_MS: u64 = 10_000;

/// The waiting connection, inboxes and heartbeats of this process on one server (or one hash
/// slot of a cluster).
pub(crate) struct Hub {
    transport: Arc<dyn Transport>,
    slot: u16,
    /// This process's id in the queues, while the hub lives.
    process: String,
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
    /// The inboxes of the `BLPOP` in flight, while the thread runs.
    listening: Vec<String>,
    running: bool,
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

/// What a waiter is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Told {
    /// Granted, with this token, held at least until then unless claimed, where the hub
    /// could date the grant's claim window.
    Granted(u64, Option<Instant>),
    /// Ask again: a wake (`reset_all`), the hub's connection failed (a grant may have been
    /// lost with it), or its process lapsed (the ask then leaves and joins again).
    AskAgain,
}

/// One waiter's mail: what it was told last, a grant over anything else.
#[derive(Default)]
pub(crate) struct Mailbox {
    told: Mutex<Option<Told>>,
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

    #[cfg(feature = "tokio")]
    pub(crate) fn take(&self) -> Option<Told> {
        self.told.lock().take()
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
    /// This process's hub for the queue of `keys` on `transport`.
    pub(crate) fn of(
        transport: &Arc<dyn Transport>,
        keys: &QueueKeys,
        io_timeout: Duration,
    ) -> Arc<Hub> {
        let slot = if transport.hash_tags() { keys.slot } else { 0 };
        let mut hubs = HUBS.lock();
        hubs.retain(|hub| hub.strong_count() > 0);
        let found = hubs.iter().filter_map(Weak::upgrade).find(|hub| {
            hub.slot == slot
                && std::ptr::addr_eq(Arc::as_ptr(&hub.transport), Arc::as_ptr(transport))
        });
        if let Some(hub) = found {
            return hub;
        }
        let hub = Arc::new(Hub {
            transport: Arc::clone(transport),
            slot,
            process: random_hex(PROCESS_ID_LEN),
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
        // A new inbox while the thread blocks on the others: it must listen again.
        let wake = (new_name && state.running)
            .then(|| state.listening.first())
            .flatten()
            .map(|listening| queue::wake(listening, self.slot, WAKE_EXPIRE_MS));
        Seat {
            hub: Arc::clone(self),
            inbox,
            waiter: waiter.to_owned(),
            epoch,
            mailbox,
            wake,
        }
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

    /// Tells every waiter of the inboxes `which` (all with `None`) `told`.
    fn tell_all(state: &State, which: Option<&str>, told: Told) {
        for (inbox, name) in &state.names {
            if which.is_none_or(|w| w == inbox) {
                for mailbox in name.seats.values() {
                    mailbox.tell(told);
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
            let (inboxes, due) = {
                let mut state = self.state.lock();
                if state.names.is_empty() {
                    state.running = false;
                    state.listening.clear();
                    drop(state);
                    if let Some(conn) = conn.take() {
                        conn.close();
                    }
                    return;
                }
                let inboxes: Vec<String> = state.names.keys().cloned().collect();
                state.listening.clone_from(&inboxes);
                let due = state.names.values().map(|n| n.beat_due).min();
                (inboxes, due.unwrap_or_else(Instant::now))
            };
            if due <= Instant::now() {
                self.beat_all(&mut conn);
                continue;
            }
            match self.pop(&mut conn, &inboxes, due) {
                Ok(Some((inbox, element))) => {
                    pause = FIRST_PAUSE;
                    self.deliver(&inbox, &element);
                }
                Ok(None) => pause = FIRST_PAUSE,
                Err(e) => {
                    log::debug!("the waiting connection failed ({e}); its waiters ask again");
                    conn = None;
                    Hub::tell_all(&self.state.lock(), None, Told::AskAgain);
                    // ok: a backoff before connecting again to a server that is away; the
                    // waiters keep their own deadlines meanwhile, asking on their own.
                    std::thread::sleep(pause);
                    pause = longer(pause);
                }
            }
        }
    }

    /// `request` on the thread's connection (opened when there is none), its reply by
    /// `deadline` after it is sent by `sent_by`. A connection that failed is dropped.
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
        let reply = waiter
            .ready(sent_by)
            .and_then(|()| waiter.send(request, sent_by))
            .and_then(|()| waiter.recv(deadline));
        reply.map_err(|f| {
            *conn = None;
            // The next connection may reach another server (a failover), on another clock.
            *self.clock.lock() = None;
            f.into_error().to_string()
        })
    }

    /// One `BLPOP` over `inboxes` until `until`: the inbox and element popped, if any.
    fn pop<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        inboxes: &[String],
        until: Instant,
    ) -> Result<Option<(String, Vec<u8>)>, String> {
        let ms = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(inboxes)
            .arg(format!("{}.{:03}", ms / 1000, ms % 1000));
        let request = Request::single(blpop, false).on_slot(self.slot);
        let sent_by = Instant::now() + self.io_timeout;
        let reply = self.exchange(conn, &request, sent_by, until + self.io_timeout)?;
        match reply {
            Value::Nil => Ok(None),
            Value::Array(pair) => match pair.as_slice() {
                [Value::BulkString(inbox), Value::BulkString(element)] => Ok(Some((
                    String::from_utf8_lossy(inbox).into_owned(),
                    element.clone(),
                ))),
                _ => Err(format!("an unexpected reply {pair:?}")),
            },
            // A slot that moved, a primary that changed: the connection goes where it is now.
            Value::ServerError(e) => Err(format!("{e:?}")),
            other => Err(format!("an unexpected reply {other:?}")),
        }
    }

    /// Hands what was popped from `inbox` to its waiter, or wakes them all.
    fn deliver(&self, inbox: &str, element: &[u8]) {
        let state = self.state.lock();
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

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.hub.state.lock();
        let Some(name) = state.names.get_mut(&self.inbox) else {
            return;
        };
        name.seats.remove(&self.waiter);
        if name.seats.is_empty() {
            state.names.remove(&self.inbox);
        }
    }
}
