//! The queue engine's model: the server's rules (`server.rs`) and clients that drive the real
//! client state machines (`redis_blpop_lock::model`: `QueueWait` through the line, a `Lease`
//! while held), grouped in processes, each with the crate's own hub machine
//! (`protocol::hub`: its waiters' seats and epochs, its heartbeats' schedule and what their
//! replies mean, what a pop of the inbox means for whom, the grant's dating, and the `Cover`
//! of who times whom), pumped as the driver's `driver/hub` pumps it, and faults, all as
//! actions of one stateright `Model`.
//!
//! One clock: the server's ms are the clients' `Instant`s, as one base `Instant` plus the ms,
//! so that states hash the same way in every run. Clock drift is out of scope.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use redis::Value;
use redis_blpop_lock::model::{
    parse_news, parse_read, Ask, Asked, Heard, HubEvent, HubMachine, Lease, QueueNext, QueueWait,
    Told, Watch, Word,
};
use redis_blpop_lock::Watched;
use stateright::{Model, Property};

use super::server::{
    Acquired, Bugs, Call, How, Id, Lead, Mail, Mode, Ms, News, Notes, Server, INF,
};

// The properties, by name: the checker reports its discoveries by these.
pub const SAFE: &str = "units believed held fit the capacity";
pub const LIVE_FIT: &str = "the server's live units fit the capacity";
pub const BELIEVED_LIVE: &str = "every lease believed held is a live holder on the server";
pub const FENCED: &str = "a token believed held is the latest granted (capacity 1): tokens grow";
pub const COUNTED: &str = "the kept count equals a recount";
pub const IN_ORDER: &str = "grants go in ticket order among live waiters";
pub const NONE_LEFT_FITTING: &str = "a grant pass leaves no live waiter first in line that fits";
pub const WOKEN: &str = "a first waiter that fits is woken by then";
pub const NO_WAIT_WITHOUT_BOUND: &str =
    "every sleeping waiter has a timer or a timed waiter of its process ahead";
pub const UNCLAIMED_RETURN: &str = "a grant nobody claimed ends with its grantee's heartbeat";
pub const EVERY_INVARIANT: &str = "every always-property (INVARIANTS)";
pub const TWO_HOLD: &str = "two clients hold at once";
pub const CLAIMED: &str = "a pushed grant is claimed";
pub const PUSHED: &str = "a grant reaches a waiter through its inbox";
pub const HEAD_WAKE: &str = "a head wake is pushed";
pub const LAPSED: &str = "a process finds it lapsed";
pub const HANDED_OVER: &str = "a process's first waiter leaves and the next takes its timer over";
pub const SIBLINGS: &str = "two waiters of one process wait in line, the second untimed";
pub const WATCH_FRESH: &str =
    "a watcher reports the leader the server has, or learns of a change within a lease";
pub const WATCHED_LEADER: &str = "a watcher reports a leader";
pub const WATCHED_CHANGE: &str = "a watcher reports a leader after another";

/// Whether a state keeps an invariant.
pub type Holds = fn(&QueueModel, &State) -> bool;

/// Every `always` property (an invariant), by name: each is a property of its own, and all
/// of them are also one property, `EVERY_INVARIANT`, which an exploration checks instead (the
/// checker's cost at each state grows with the number of properties).
pub static INVARIANTS: [(&str, Holds); 11] = [
    (SAFE, |m, s| m.believed_units(s) <= m.cfg.capacity),
    (LIVE_FIT, |m, s| {
        s.server.live_units(s.now) <= m.cfg.capacity
    }),
    (BELIEVED_LIVE, |m, s| m.beliefs_are_held(s)),
    (FENCED, |m, s| m.fenced(s)),
    (COUNTED, |_, s| {
        s.server.kept().is_none_or(|k| k == s.server.recount())
    }),
    (IN_ORDER, |_, s| !s.out_of_order),
    (NONE_LEFT_FITTING, |_, s| !s.left_fitting),
    (WOKEN, |m, s| {
        (0..s.clients.len()).all(|c| !m.sleeps_past_its_turn(s, c))
    }),
    (NO_WAIT_WITHOUT_BOUND, |m, s| {
        (0..s.clients.len()).all(|c| !m.sleeps_without_bound(s, c))
    }),
    (WATCH_FRESH, |m, s| m.watches_are_fresh(s)),
    (UNCLAIMED_RETURN, |_, s| {
        (s.server.holders.iter())
            .filter(|h| h.how == How::Pushed && h.expiry > s.now)
            .all(|h| s.server.beats[h.id.process()].is_some_and(|b| h.expiry <= b))
    }),
];

/// The model's `Instant` at server ms 0.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn at(ms: Ms) -> Instant {
    *BASE + Duration::from_millis(ms)
}

fn ms_of(instant: Instant) -> Ms {
    instant.saturating_duration_since(*BASE).as_millis() as Ms
}

/// One client: a handle making its acquisitions one at a time, one waiter at a time, in its
/// process (several clients may share one: their waiters share its hub).
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    pub units: u64,
    pub lease: Ms,
    pub process: usize,
}

/// Which faults the model may inject, and how many in one run.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub budget: u8,
    /// A request runs on the server and its reply is lost; the client sends it again.
    pub lost_replies: bool,
    /// A process stops (its heartbeats and all its waiters too) and resumes later.
    pub pauses: bool,
    /// A process stops for good, with all its waiters.
    pub crashes: bool,
    /// A waiter leaves the line (its deadline, a cancel): `queue_release` on a waiter.
    pub cancels: bool,
    /// The operator's `queue_reset` of every holder.
    pub resets: bool,
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Config {
    pub clients: Vec<ClientConfig>,
    pub capacity: u64,
    /// Every process's lapse window: its waiters lapse this long after its last heartbeat.
    pub lapse: Ms,
    /// How far one tick moves the clock.
    pub step: Ms,
    /// No tick past this.
    pub horizon: Ms,
    /// Acquisitions per client (ids `w<client>.0@<process>`, `w<client>.1@<process>`, ...).
    pub acquisitions: u8,
    /// Clients (and their hubs) take each step that is due before time passes: an ask, a
    /// wake at a timer or by mail, a pop of a process's inbox, a request sent again. Without
    /// it, any of them may be late by any number of ticks (a slow thread), which multiplies
    /// the states by the ticks.
    pub timely: bool,
    pub faults: Faults,
    /// An ask's send, its run on the server and its reply are three steps, each of which may
    /// come a tick after the one before (a slow network): others' steps run in between.
    /// Without it, an ask runs and replies the moment it is sent.
    pub in_flight: bool,
    /// A leader election (capacity 1): a client that holds announces itself
    /// (`election_announce`), and one that releases leaves the election empty if nobody was
    /// granted in its place (`election_vacate`).
    pub election: bool,
    /// The processes with a watcher of the election, through their hub (`protocol::watch`).
    pub watchers: Vec<usize>,
    pub bugs: Bugs,
    /// The properties checked, by name (`None`: all of them): each costs the checker time at
    /// every state, so an exploration checks every `always` and only the `sometimes` it must
    /// reach, and a `catches_*` test only the property it breaks.
    pub properties: Option<Vec<&'static str>>,
    /// Steps taken before the exploration starts, from the empty state: the model is explored
    /// from where they lead (a line already formed), which spares it every order they could
    /// have come in.
    pub prefix: Vec<Action>,
}

impl Config {
    pub fn processes(&self) -> usize {
        (self.clients.iter().map(|c| c.process + 1))
            .chain(self.watchers.iter().map(|&p| p + 1))
            .max()
            .unwrap_or(0)
    }
}

/// The one primitive's inbox, as each process's hub machine names it.
const INBOX: &str = "inbox";

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its next step is an ask (`queue_acquire`, mode wait).
    Asking(QueueWait),
    /// Waiting for its mailbox, or until then.
    Blocked(QueueWait, Option<Instant>),
    /// Leaving the line (`queue_release` of a waiter), its reply lost: sent again.
    Leaving,
    /// It believes it holds, as the lease says.
    Held(Lease),
    /// Its release's reply was lost: sent again. It no longer counts itself a holder.
    Releasing,
    /// Its acquisitions are over.
    Done,
    /// Its process crashed: it never acts again.
    Crashed,
}

/// An ask on its way (`Config::in_flight`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flight {
    /// Sent at `sent`, in mode known or new; the server has not run it yet.
    Sent { sent: Ms, known: bool },
    /// The server ran it at `ran`; its reply is on its way.
    Ran { sent: Ms, ran: Ms, reply: Acquired },
}

impl Flight {
    /// Whether it is a tick late already: a slow request, not one that never comes.
    fn overdue(&self, now: Ms) -> bool {
        match *self {
            Flight::Sent { sent, .. } => sent < now,
            Flight::Ran { ran, .. } => ran < now,
        }
    }
}

/// One client (a handle) and its waiter's seat at its process's hub (`driver::hub::Seat`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Which acquisition it is on.
    pub epoch: u8,
    pub phase: Phase,
    /// When a request whose reply was lost was first sent: the next send is that request
    /// again, and its reply is taken as of then.
    pub resend: Option<Ms>,
    /// Its ask on its way, with `Config::in_flight`.
    pub flight: Option<Flight>,
    /// With `Config::election`, whether it announced the term it holds.
    pub announced: bool,
    /// Its seat at the hub while it waits (from its wait's start to its end: granted, left,
    /// stopped): the hub's epoch it joined in (`Seat::epoch`). Its process lapsed since when
    /// that is not the hub's epoch: it leaves and joins again before its next ask.
    pub seat: Option<u64>,
    pub mailbox: Option<Told>,
    /// When the last ask that found it waiting was sent: kept only for the rule the model
    /// checker found wrong (`Bugs::grant_read_late_counts_from_the_last_ask`).
    pub waiting_since: Option<Ms>,
}

impl Client {
    fn waiting(&self) -> bool {
        matches!(self.phase, Phase::Asking(_) | Phase::Blocked(..))
    }

    fn alive(&self) -> bool {
        !matches!(self.phase, Phase::Done | Phase::Crashed)
    }

    /// As `Mailbox::tell`: a grant over anything, anything over a timer.
    fn tell(&mut self, told: Told) {
        let keep = match self.mailbox {
            Some(Told::Granted(..)) => true,
            Some(Told::AskAgain | Told::Refused) => matches!(told, Told::AskBy(_)),
            Some(Told::AskBy(_)) | None => false,
        };
        if !keep {
            self.mailbox = Some(told);
        }
    }
}

/// A process's hub machine, shared between the states that did not change it (a copy of its
/// maps in each would cost the checker more than the rest of a state), and hashed by a digest
/// taken when it changes (the checker hashes every state it reaches; the machine changes only
/// when a waiter asks, leaves or is told, or a heartbeat goes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shared {
    hub: Arc<HubMachine<()>>,
    digest: u64,
}

impl Shared {
    /// Runs `change` on the machine, and takes what it decided (`HubMachine::poll`).
    fn change<T>(&mut self, change: impl FnOnce(&mut HubMachine<()>) -> T) -> (T, Vec<HubEvent>) {
        let hub = Arc::make_mut(&mut self.hub);
        let out = change(hub);
        let events = std::iter::from_fn(|| hub.poll()).collect();
        // Fixed keys: the same digest in every run; an empty machine's is a new one's.
        let mut hasher = std::hash::DefaultHasher::new();
        self.hub.hash(&mut hasher);
        let empty = *self.hub == HubMachine::default();
        self.digest = if empty { 0 } else { hasher.finish() };
        (out, events)
    }
}

impl Hash for Shared {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
    }
}

/// A process: whether it runs, and its hub's machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Process {
    /// Stopped (its heartbeats and its waiters), to resume later.
    pub paused: bool,
    pub crashed: bool,
    /// The crate's own: who is seated in which epoch, who times whom, when its heartbeat is
    /// due, the clock that dates grants.
    pub hub: Shared,
    /// Its election watch, with `Config::watchers`: the crate's own decisions (when to read,
    /// what a read or news means) and its watcher's queue of changes.
    pub watch: Option<(Watch, Heard)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Ms,
    pub server: Server,
    pub processes: Vec<Process>,
    pub clients: Vec<Client>,
    pub faults_left: u8,
    /// The tokens an operator's reset took away: their holders' beliefs are void by design.
    pub reset_tokens: Vec<u64>,
    /// A grant pass granted a waiter while a live one ahead of it went on waiting.
    pub out_of_order: bool,
    /// A grant pass left a live waiter first in line that fits.
    pub left_fitting: bool,
    /// In the step that led here, a process's first waiter left the line and the hub told
    /// the next to ask again (kept only when `HANDED_OVER` is checked: it splits states).
    pub handed_over: bool,
    /// When the election's state on the server (who leads, by term) last changed.
    pub changed_at: Ms,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// Client `c` asks (sends its ask, with `Config::in_flight`).
    Ask(u8),
    /// Its ask runs and its reply is lost (with `Config::in_flight`: the reply on its way).
    AskLost(u8),
    /// The server runs client `c`'s ask in flight.
    Run(u8),
    /// Client `c` takes the reply of its ask in flight.
    Reply(u8),
    /// Client `c`, holding, announces itself the leader (`Config::election`).
    Announce(u8),
    /// Process `p`'s hub reads the leader for its watch.
    Read(u8),
    Wake(u8),
    /// Process `p`'s hub pops its inbox.
    Deliver(u8),
    Renew(u8),
    RenewLost(u8),
    Release(u8),
    ReleaseLost(u8),
    Cancel(u8),
    CancelLost(u8),
    Leave(u8),
    /// Process `p` stops for good.
    Crash(u8),
    /// Process `p` stops.
    Pause(u8),
    Resume(u8),
    Reset,
}

pub struct QueueModel {
    pub cfg: Config,
    /// A fresh wait through the line (no deadline: a waiter leaves by a cancel, a fault).
    fresh: QueueWait,
}

impl QueueModel {
    pub fn new(cfg: Config) -> QueueModel {
        // The asks are built as the handles build them, which refuses what a script cannot
        // take; the wait through the line needs only its deadline (none: a cancel is a fault).
        for (i, c) in cfg.clients.iter().enumerate() {
            Ask::new(
                &format!("w{i}"),
                c.units,
                cfg.capacity,
                Some(Duration::from_millis(c.lease)),
                Duration::from_millis(cfg.lapse),
            )
            .expect("a valid ask");
        }
        let fresh = QueueWait::new(None);
        QueueModel { cfg, fresh }
    }

    /// The first invariant that state `s` breaks, if any.
    pub fn broken(&self, s: &State) -> Option<&'static str> {
        (INVARIANTS.iter())
            .find(|(_, holds)| !holds(self, s))
            .map(|&(name, _)| name)
    }

    /// Whether property `name` is checked.
    fn checks(&self, name: &str) -> bool {
        (self.cfg.properties.as_ref()).is_none_or(|names| names.contains(&name))
    }

    fn process_of(&self, c: usize) -> usize {
        self.cfg.clients[c].process
    }

    /// The clients of process `p`.
    fn members(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.cfg.clients.len()).filter(move |&c| self.cfg.clients[c].process == p)
    }

    fn id(&self, s: &State, c: usize) -> Id {
        Id {
            client: c as u8,
            epoch: s.clients[c].epoch,
            process: self.process_of(c) as u8,
        }
    }

    fn call(&self, c: usize, id: Id, mode: Mode) -> Call {
        Call {
            id,
            units: self.cfg.clients[c].units,
            capacity: self.cfg.capacity,
            lease: self.cfg.clients[c].lease,
            lapse: self.cfg.lapse,
            mode,
        }
    }

    /// Whether client `c`'s process lapsed since it joined (`Seat::stale`).
    fn stale(&self, s: &State, c: usize) -> bool {
        let hub = &s.processes[self.process_of(c)].hub.hub;
        s.clients[c].seat.is_some_and(|e| hub.stale(INBOX, e))
    }

    /// Runs `change` on process `p`'s hub machine, and carries out what it decided, as
    /// `driver/hub` pumps it: each waiter still seated is told its mail. Returns what
    /// `change` returned, and how many were told.
    fn hub<T>(
        &self,
        s: &mut State,
        p: usize,
        change: impl FnOnce(&mut HubMachine<()>) -> T,
        notes: &mut Notes,
    ) -> (T, usize) {
        let (out, events) = s.processes[p].hub.change(change);
        let mut told = 0;
        for event in events {
            let (waiter, what) = match event {
                HubEvent::Tell { waiter, told, .. } => (waiter, told),
                HubEvent::Look { .. } => {
                    if let Some((watch, _)) = &mut s.processes[p].watch {
                        watch.look_now(at(s.now));
                    }
                    continue;
                }
                HubEvent::News { news, .. } => {
                    self.news(s, p, &news, notes);
                    continue;
                }
            };
            let seated = self
                .members(p)
                .find(|&d| s.clients[d].seat.is_some() && self.id(s, d).to_string() == waiter);
            if let Some(d) = seated {
                s.clients[d].tell(what);
                told += 1;
                notes.note(|| format!("  process {p}'s hub tells {waiter} {what:?}"));
            }
        }
        (out, told)
    }

    /// Process `p`'s watch hears the news popped from its inbox (`Watch::news`), as the
    /// hub hands it on; news not well formed makes it read.
    fn news(&self, s: &mut State, p: usize, news: &[u8], notes: &mut Notes) {
        let now = at(s.now);
        let Some((watch, heard)) = &mut s.processes[p].watch else {
            return;
        };
        match parse_news(news) {
            Some(seen) => {
                let word = watch.news(seen, now);
                notes.note(|| format!("  process {p}'s watch hears the news → {word:?}"));
                say(heard, word);
            }
            None => watch.look_now(now),
        }
    }

    /// Whether every watcher that says who leads (not "unknown") says what the server has,
    /// or the server's state changed less than a lease and a tick ago: by then a read, if
    /// not the news, has told it.
    pub fn watches_are_fresh(&self, s: &State) -> bool {
        let leads = leads(&s.server, s.now);
        let bound = self.cfg.clients.iter().map(|c| c.lease).min().unwrap_or(0) + self.cfg.step;
        (s.processes.iter()).all(|process| {
            let Some((_, heard)) = &process.watch else {
                return true;
            };
            if process.paused || process.crashed {
                return true;
            }
            let mut heard = heard.clone();
            while heard.next(at(s.now)).is_ok() {}
            let says = match heard.last() {
                Some(Watched::Leader(leader)) => Some(leader.term),
                Some(Watched::Nobody) => None,
                _ => return true,
            };
            says == leads || s.now <= s.changed_at + bound
        })
    }

    /// Client `c` takes a seat at its process's hub (`Hub::seat`), in its current epoch.
    fn seat(&self, s: &mut State, c: usize, now: Ms) {
        let id = self.id(s, c).to_string();
        let lapse = Duration::from_millis(self.cfg.lapse);
        let p = self.process_of(c);
        let (epoch, _) = self.hub(
            s,
            p,
            |h| h.seat(INBOX, &(), &id, lapse, at(now)),
            &mut Notes(None),
        );
        s.clients[c].seat = Some(epoch);
    }

    /// Client `c`'s wait is over (granted, left, stopped): its seat goes, as `Seat`'s drop
    /// has it, holding until `held_until` if granted. The process's next waiter in line may
    /// have to take its timer over (the crate's `Cover::left`).
    fn unseat(
        &self,
        s: &mut State,
        c: usize,
        held_until: Option<Instant>,
        now: Ms,
        notes: &mut Notes,
    ) {
        if s.clients[c].seat.is_none() {
            return;
        }
        let p = self.process_of(c);
        let id = self.id(s, c).to_string();
        let client = &mut s.clients[c];
        client.seat = None;
        client.mailbox = None;
        client.waiting_since = None;
        let ((), told) = self.hub(s, p, |h| h.unseat(INBOX, &id, held_until, at(now)), notes);
        s.handed_over |= told > 0 && self.checks(HANDED_OVER);
    }

    /// Client `c` left the line to join again in its hub's current epoch (`Seat::rejoin`):
    /// its mail goes, as the leave gave back any grant in it.
    fn rejoin(&self, s: &mut State, c: usize, now: Ms, notes: &mut Notes) {
        let p = self.process_of(c);
        let id = self.id(s, c).to_string();
        s.clients[c].mailbox = None;
        let (epoch, told) = self.hub(s, p, |h| h.rejoin(INBOX, &id, at(now)), notes);
        if epoch.is_some() {
            s.clients[c].seat = epoch;
        }
        s.handed_over |= told > 0 && self.checks(HANDED_OVER);
    }

    /// Its next acquisition, if it has one left.
    fn next_epoch(&self, s: &mut State, c: usize, now: Ms, notes: &mut Notes) {
        self.unseat(s, c, None, now, notes);
        let client = &mut s.clients[c];
        client.epoch += 1;
        client.resend = None;
        client.announced = false;
        if client.epoch < self.cfg.acquisitions {
            client.phase = Phase::Asking(self.fresh.clone());
            self.seat(s, c, now);
        } else {
            client.phase = Phase::Done;
        }
    }

    /// The step after an ask at `now` answered `asked`, bounded as the process's `Cover`
    /// says, as `Seat::timed` has it.
    fn timed(
        &self,
        s: &mut State,
        c: usize,
        asked: Asked,
        next: QueueNext,
        sent: Ms,
        now: Ms,
    ) -> QueueNext {
        let (Asked::Waiting { ticket, .. }, QueueNext::Block { until }) = (asked, next) else {
            return next;
        };
        // The old hub, which ignored its cover: no cap, nobody to hand a timer over to.
        if self.cfg.bugs.no_cover {
            return next;
        }
        let id = self.id(s, c).to_string();
        let p = self.process_of(c);
        let timed = |h: &mut HubMachine<()>| h.timed(INBOX, &id, ticket, until, at(sent), at(now));
        let (until, _) = self.hub(s, p, timed, &mut Notes(None));
        QueueNext::Block { until }
    }

    /// Client `c` sends its ask at `now` (`Line::ask`): a waiter whose process lapsed leaves
    /// the line first, to join again. When it was sent (the first send, when this is one
    /// sent again), and whether in mode known.
    fn send_ask(&self, n: &mut State, c: usize, now: Ms, notes: &mut Notes) -> (Ms, bool) {
        let id = self.id(n, c);
        if n.clients[c].resend.is_none() && self.stale(n, c) {
            // A waiter whose process lapsed leaves, and joins again at the back.
            let pre = n.server.clone();
            let cap = self.cfg.capacity;
            let (left, _) = n.server.release(id, cap, now, &self.cfg.bugs, notes);
            notes.note(|| format!("t={now} {id} leaves to join again → {left}"));
            self.check_pass(&pre, now, id, n);
            self.rejoin(n, c, now, notes);
        }
        let sent = n.clients[c].resend.take().unwrap_or(now);
        let epoch = n.clients[c].seat.unwrap_or_default();
        let known = n.processes[self.process_of(c)].hub.hub.known(INBOX, epoch);
        (sent, known)
    }

    /// The server runs client `c`'s ask at `now`: its reply.
    fn run_ask(
        &self,
        n: &mut State,
        c: usize,
        known: bool,
        now: Ms,
        notes: &mut Notes,
    ) -> Acquired {
        let id = self.id(n, c);
        let pre = n.server.clone();
        let mut server_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
        let call = self.call(c, id, Mode::Wait { known });
        let (reply, passed) = n
            .server
            .acquire(&call, now, &self.cfg.bugs, &mut server_notes);
        notes.note(|| {
            let known = if known { "known" } else { "new" };
            format!("t={now} client {c} asks ({id}, {known}) → {reply}")
        });
        for line in server_notes.0.into_iter().flatten() {
            notes.note(|| format!("  {line}"));
        }
        if passed {
            self.check_pass(&pre, now, id, n);
        }
        reply
    }

    /// Client `c` takes the reply of its ask sent at `sent`, at `now`: what the hub's machine
    /// learns of it, and the line's next step, bounded as the machine says.
    fn take_reply(
        &self,
        n: &mut State,
        c: usize,
        sent: Ms,
        reply: Acquired,
        now: Ms,
        notes: &mut Notes,
    ) {
        let Phase::Asking(mut wait) = n.clients[c].phase.clone() else {
            return;
        };
        let p = self.process_of(c);
        let epoch = n.clients[c].seat.unwrap_or_default();
        let asked = match reply {
            Acquired::Granted { token, left } => Asked::Granted {
                token,
                lease_left: Some(Duration::from_millis(left)),
            },
            Acquired::Waiting {
                position,
                next,
                ticket,
            } => {
                self.hub(n, p, |h| h.joined(INBOX, epoch, at(now)), notes);
                if self.cfg.bugs.grant_read_late_counts_from_the_last_ask {
                    n.clients[c].waiting_since = Some(sent);
                }
                Asked::Waiting {
                    position,
                    next: next.map(Duration::from_millis),
                    ticket,
                }
            }
            Acquired::Refused => Asked::Refused,
            Acquired::Lapsed => {
                self.hub(n, p, |h| h.found_lapsed(INBOX, epoch), notes);
                Asked::Lapsed
            }
        };
        let next = wait.asked(at(sent), asked, at(now));
        let next = self.timed(n, c, asked, next, sent, now);
        if let QueueNext::Block { until } = next {
            notes.note(|| match until {
                Some(until) => format!("  client {c} sleeps until t={}", ms_of(until)),
                None => format!("  client {c} sleeps until told"),
            });
        }
        self.follow(n, c, wait, next, now, notes);
    }

    /// Where the client goes after the line's state machine said `next`.
    fn follow(
        &self,
        s: &mut State,
        c: usize,
        wait: QueueWait,
        next: QueueNext,
        now: Ms,
        notes: &mut Notes,
    ) {
        s.clients[c].phase = match next {
            QueueNext::Ask => Phase::Asking(wait),
            QueueNext::Block { until } => Phase::Blocked(wait, until),
            QueueNext::Leave => Phase::Leaving,
            QueueNext::Granted { token, valid_until } => {
                let epoch = u64::from(s.clients[c].epoch);
                let lease = Lease::new(epoch, at(now), valid_until, Some(token));
                // Out of the line: its seat goes (`Seat::granted`).
                self.unseat(s, c, valid_until, now, notes);
                Phase::Held(lease)
            }
        };
    }

    /// Units of the clients that believe they hold now, less those an operator's reset took.
    pub fn believed_units(&self, s: &State) -> u64 {
        (s.clients.iter().enumerate())
            .filter(|(_, c)| match &c.phase {
                Phase::Held(lease) => {
                    !lease.is_lost(at(s.now))
                        && !lease.token.is_some_and(|t| s.reset_tokens.contains(&t))
                }
                _ => false,
            })
            .map(|(i, _)| self.cfg.clients[i].units)
            .sum()
    }

    /// Whether every client that believes it holds (and was not reset) is a live holder on
    /// the server with its token, whose expiry is not before the end of the belief.
    pub fn beliefs_are_held(&self, s: &State) -> bool {
        (0..s.clients.len()).all(|c| {
            let Phase::Held(lease) = &s.clients[c].phase else {
                return true;
            };
            if lease.is_lost(at(s.now)) || lease.token.is_some_and(|t| s.reset_tokens.contains(&t))
            {
                return true;
            }
            s.server.holder(self.id(s, c)).is_some_and(|h| {
                h.expiry > s.now
                    && lease.token == Some(h.token)
                    && lease.valid_until.is_none_or(|v| v <= at(h.expiry))
            })
        })
    }

    /// Whether, with a capacity of 1, every token a client believes it holds (not lost, not
    /// taken by a reset) is the server's fencing counter: the latest granted. No grant can
    /// come while such a belief lasts, so each believed grant's token is above every earlier
    /// one's.
    pub fn fenced(&self, s: &State) -> bool {
        self.cfg.capacity > 1
            || s.clients.iter().all(|c| match &c.phase {
                Phase::Held(lease) => {
                    lease.is_lost(at(s.now))
                        || lease
                            .token
                            .is_none_or(|t| s.reset_tokens.contains(&t) || t == s.server.fence)
                }
                _ => true,
            })
    }

    /// Whether mail for client `c`'s waiter is in its process's inbox.
    fn mailed(&self, s: &State, c: usize) -> bool {
        let id = self.id(s, c);
        s.server.inboxes[self.process_of(c)]
            .mail
            .iter()
            .any(|m| match *m {
                Mail::Granted { waiter, .. } => waiter == id,
                Mail::Ask(waiter) => waiter == id,
                Mail::Watch(_) => false,
            })
    }

    /// The waiter of client `c` blocked while it is the first live one in line and fits,
    /// with nothing in its inbox or mailbox and no wake due by now: it sleeps past a moment
    /// it could be granted. Unless a sibling's ask is in flight (`Config::in_flight`), or
    /// its reply was lost and it is about to send it again: what the reply says (a grant,
    /// one already over) the hub learns, and hands the timer over, only when it lands, a
    /// reply's way late, or the sibling's I/O timeout after a lost one.
    pub fn sleeps_past_its_turn(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        let Phase::Blocked(_, until) = &client.phase else {
            return false;
        };
        let p = self.process_of(c);
        let sibling_in_flight = (self.members(p)).any(|d| {
            let sibling = &s.clients[d];
            d != c
                && sibling.seat.is_some()
                && (sibling.flight.is_some() || sibling.resend.is_some())
        });
        if s.processes[p].paused || client.mailbox.is_some() || sibling_in_flight {
            return false;
        }
        let id = self.id(s, c);
        let first_live =
            (s.server.queue.iter()).find(|w| s.server.beats_past(w.id.process(), s.now));
        if first_live.is_none_or(|w| w.id != id) {
            return false;
        }
        let fits = s.server.live_units(s.now) + self.cfg.clients[c].units <= self.cfg.capacity;
        !self.mailed(s, c) && fits && until.is_none_or(|u| u > at(s.now))
    }

    /// Whether client `c` will act by itself: it is about to ask or leave, has mail in its
    /// mailbox or its inbox, or sleeps with a timer.
    fn bounded(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        match &client.phase {
            Phase::Asking(_) | Phase::Leaving => true,
            Phase::Blocked(_, until) => {
                until.is_some() || client.mailbox.is_some() || self.mailed(s, c)
            }
            _ => false,
        }
    }

    /// The waiter of client `c` sleeps in line (its process live, its entry in the queue)
    /// with no timer and no mail, and no waiter of its process ahead of it in line will act
    /// by itself (nor one granted or gone from the line whose seat is still there, which
    /// is about to learn it): nothing bounds its sleep.
    pub fn sleeps_without_bound(&self, s: &State, c: usize) -> bool {
        let p = self.process_of(c);
        if !matches!(s.clients[c].phase, Phase::Blocked(..))
            || s.processes[p].paused
            || self.bounded(s, c)
            || !s.server.beats_past(p, s.now)
        {
            return false;
        }
        let ticket = |d: usize| {
            let id = self.id(s, d);
            (s.server.queue.iter())
                .find(|w| w.id == id)
                .map(|w| w.ticket)
        };
        let Some(mine) = ticket(c) else {
            return false;
        };
        let covered = self.members(p).any(|d| {
            d != c
                && s.clients[d].seat.is_some()
                && ticket(d).is_none_or(|t| t < mine)
                && self.bounded(s, d)
        });
        !covered
    }

    /// Whether client `c` (or its hub) has a step due now, which a timely one takes before
    /// time passes.
    fn has_a_step_due(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        let p = self.process_of(c);
        if s.processes[p].paused || !client.alive() {
            return false;
        }
        let own = match &client.phase {
            Phase::Asking(_) => client.flight.is_none_or(|f| f.overdue(s.now)),
            Phase::Leaving | Phase::Releasing => true,
            Phase::Held(lease) => {
                self.cfg.election && !client.announced && !lease.is_lost(at(s.now))
            }
            Phase::Blocked(_, until) => {
                client.mailbox.is_some() || until.is_some_and(|u| u <= at(s.now))
            }
            _ => false,
        };
        let watching = s.processes[p].watch.is_some();
        let mail = !s.server.inboxes[p].mail.is_empty();
        own || ((client.waiting() || watching) && mail) || read_due(&s.processes[p], s.now)
    }

    /// Checks a script's grant pass against the state before it: grants in ticket order among
    /// live waiters (the caller, which may be leaving, aside), and no live waiter that fits
    /// left first in line.
    fn check_pass(&self, pre: &Server, now: Ms, caller: Id, next: &mut State) {
        let post = &next.server;
        let granted: Vec<Id> = (post.holders.iter())
            .filter(|h| h.token > pre.fence)
            .map(|h| h.id)
            .collect();
        let out_of_order = granted.iter().any(|g| {
            let at = (pre.queue.iter().position(|w| w.id == *g)).unwrap_or(pre.queue.len());
            pre.queue[..at].iter().any(|w| {
                w.id != caller && pre.beats_past(w.id.process(), now) && !granted.contains(&w.id)
            })
        });
        let first_live = (post.queue.iter()).find(|w| post.beats_past(w.id.process(), now));
        let left_fitting =
            first_live.is_some_and(|w| post.live_units(now) + w.units <= self.cfg.capacity);
        next.out_of_order |= out_of_order;
        next.left_fitting |= left_fitting;
    }

    /// The step `action` from `s`, with a line of what happened when `notes` are kept.
    pub fn step(&self, s: &State, action: Action, notes: &mut Notes) -> Option<State> {
        let mut n = s.clone();
        n.handed_over = false;
        let now = s.now;
        let bugs = &self.cfg.bugs;
        let cap = self.cfg.capacity;
        let lapse = self.cfg.lapse;
        let t = |c: u8| usize::from(c);
        match action {
            Action::Tick => {
                n.now += self.cfg.step;
                let now = n.now;
                notes.note(|| format!("t={now} time passes"));
                n.server.expire_keys(now);
                for p in 0..n.processes.len() {
                    let process = &n.processes[p];
                    if process.paused || process.crashed {
                        continue;
                    }
                    // The heartbeats its hub's machine says are due (`Hub::beat_all`).
                    for _ in process.hub.hub.beats_due(at(now)) {
                        let live = n.server.beat(p, lapse, now);
                        notes.note(|| match live {
                            Some(_) => format!("  process {p}'s heartbeat"),
                            None => format!("  process {p}'s heartbeat finds it gone"),
                        });
                        let beaten =
                            |h: &mut HubMachine<()>| h.beaten(INBOX, at(now), Ok(live), at(now));
                        self.hub(&mut n, p, beaten, notes);
                    }
                }
            }
            Action::Ask(c) | Action::AskLost(c) if n.clients[t(c)].flight.is_none() => {
                let lost = matches!(action, Action::AskLost(_));
                let c = t(c);
                if !matches!(n.clients[c].phase, Phase::Asking(_)) {
                    return None;
                }
                let (sent, known) = self.send_ask(&mut n, c, now, notes);
                if self.cfg.in_flight {
                    n.clients[c].flight = Some(Flight::Sent { sent, known });
                    notes.note(|| format!("t={now} client {c} sends its ask"));
                    return Some(n);
                }
                let reply = self.run_ask(&mut n, c, known, now, notes);
                if lost {
                    notes.note(|| "  its reply is lost".to_owned());
                    n.clients[c].resend = Some(sent);
                    n.faults_left = n.faults_left.saturating_sub(1);
                    return Some(n);
                }
                self.take_reply(&mut n, c, sent, reply, now, notes);
            }
            // An ask in flight already.
            Action::Ask(_) => return None,
            Action::Run(c) => {
                let c = t(c);
                let Some(Flight::Sent { sent, known }) = n.clients[c].flight else {
                    return None;
                };
                let reply = self.run_ask(&mut n, c, known, now, notes);
                n.clients[c].flight = Some(Flight::Ran {
                    sent,
                    ran: now,
                    reply,
                });
            }
            Action::Reply(c) | Action::AskLost(c) => {
                let c = t(c);
                let Some(Flight::Ran { sent, reply, .. }) = n.clients[c].flight.take() else {
                    return None;
                };
                if matches!(action, Action::AskLost(_)) {
                    notes.note(|| format!("t={now} client {c}'s reply is lost"));
                    n.clients[c].resend = Some(sent);
                } else {
                    notes.note(|| format!("t={now} client {c} takes its reply"));
                    self.take_reply(&mut n, c, sent, reply, now, notes);
                }
            }
            Action::Announce(c) => {
                let c = t(c);
                let id = self.id(&n, c);
                let client = &mut n.clients[c];
                let Phase::Held(lease) = &client.phase else {
                    return None;
                };
                let term = lease.token.unwrap_or_default();
                client.announced = true;
                let done = n.server.announce(id, term, "", now);
                notes.note(|| format!("t={now} client {c} announces term {term} → {done}"));
            }
            Action::Read(p) => {
                let p = t(p);
                let lead = n.server.read_leader(Some(p), lapse, now);
                let seen = parse_read(&read_reply(lead));
                let Some((watch, heard)) = &mut n.processes[p].watch else {
                    return None;
                };
                let read = seen.ok_or_else(|| "not well formed".to_owned());
                let word = watch.read(read, Duration::from_millis(lapse), at(now));
                notes.note(|| format!("t={now} process {p}'s hub reads the leader → {word:?}"));
                say(heard, word);
            }
            Action::Wake(c) => {
                let c = t(c);
                let Phase::Blocked(mut wait, _) = n.clients[c].phase.clone() else {
                    return None;
                };
                let told = n.clients[c].mailbox.take();
                let next = match told {
                    Some(Told::Granted(token, dated))
                        if bugs.grant_read_late_counts_from_the_last_ask =>
                    {
                        // The rule before the model checker's counterexample: the claim
                        // window from the last ask that found it waiting, or the date if
                        // later.
                        let cfg = &self.cfg.clients[c];
                        let claim = Duration::from_millis(cfg.lease.min(lapse));
                        let asked = at(n.clients[c].waiting_since.unwrap_or(now)) + claim;
                        QueueNext::Granted {
                            token,
                            valid_until: Some(dated.map_or(asked, |d| d.max(asked))),
                        }
                    }
                    Some(Told::Granted(token, dated)) => wait.popped(Some(token), dated, at(now)),
                    Some(Told::AskBy(by)) => wait.retimed(by, at(now)),
                    _ => wait.popped(None, None, at(now)),
                };
                let mut follow_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
                self.follow(&mut n, c, wait, next, now, &mut follow_notes);
                notes.note(|| {
                    let why = match told {
                        Some(Told::Granted(token, _)) => format!("by its grant (token {token})"),
                        Some(Told::AskAgain | Told::Refused) => "to ask again".into(),
                        Some(Told::AskBy(by)) => format!("with a timer (t={})", ms_of(by)),
                        None => "at its timer".into(),
                    };
                    let what = match &n.clients[c].phase {
                        Phase::Held(lease) => match lease.valid_until {
                            Some(v) => format!("holds until t={}", ms_of(v)),
                            None => "holds".into(),
                        },
                        Phase::Blocked(_, Some(until)) => {
                            format!("sleeps until t={}", ms_of(*until))
                        }
                        _ => "asks again".into(),
                    };
                    format!("t={now} client {c} wakes {why} → {what}")
                });
                for line in follow_notes.0.into_iter().flatten() {
                    notes.note(|| line);
                }
            }
            Action::Deliver(p) => {
                let p = t(p);
                let mail = n.server.pop(p)?;
                notes.note(|| format!("t={now} process {p}'s hub pops {mail:?}"));
                // As the script pushed it, for the crate's own parse.
                let element = match mail {
                    Mail::Granted {
                        token,
                        expiry,
                        waiter,
                    } => format!("{token}:{expiry}:{waiter}"),
                    Mail::Ask(waiter) => format!("ask:{waiter}"),
                    Mail::Watch(News::Nobody(fence)) => format!("watch:{fence}"),
                    Mail::Watch(News::Leader { record, left }) => {
                        let id = record.id.to_string();
                        let left = if left == INF {
                            "-1".into()
                        } else {
                            left.to_string()
                        };
                        let (term, since, info) = (record.term, record.since, record.info);
                        format!("watch:{term}:{since}:{left}:{}:{id}{info}", id.len())
                    }
                };
                self.hub(&mut n, p, |h| h.popped(INBOX, element.as_bytes()), notes);
            }
            Action::Renew(c) | Action::RenewLost(c) => {
                let lost = matches!(action, Action::RenewLost(_));
                let c = t(c);
                let id = self.id(&n, c);
                let lease_ms = self.cfg.clients[c].lease;
                let extended = n.server.extend(id, lease_ms, now);
                let client = &mut n.clients[c];
                let sent = client.resend.take().unwrap_or(now);
                let Phase::Held(lease) = &mut client.phase else {
                    return None;
                };
                notes.note(|| {
                    let how = if lost { ", its reply lost" } else { "" };
                    format!("t={now} client {c} extends {id}{how} → {extended}")
                });
                if lost {
                    client.resend = Some(sent);
                } else if extended {
                    lease.extended(at(sent), Duration::from_millis(lease_ms));
                } else {
                    lease.mark_lost();
                }
            }
            Action::Release(c)
            | Action::ReleaseLost(c)
            | Action::Cancel(c)
            | Action::CancelLost(c)
            | Action::Leave(c) => {
                let lost = matches!(action, Action::ReleaseLost(_) | Action::CancelLost(_));
                let c = t(c);
                let id = self.id(&n, c);
                let pre = n.server.clone();
                let mut server_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
                let (held, _) = n.server.release(id, cap, now, bugs, &mut server_notes);
                self.check_pass(&pre, now, id, &mut n);
                let term = match &n.clients[c].phase {
                    Phase::Held(lease) if self.cfg.election => lease.token,
                    _ => None,
                };
                if let Some(term) = term {
                    // `Election`'s resign: the election left empty if nobody took over.
                    n.server.vacate(Some(term), now);
                }
                notes.note(|| {
                    let what = match action {
                        Action::Release(_) | Action::ReleaseLost(_) => "releases",
                        Action::Leave(_) => "leaves again",
                        _ => "cancels: leaves the line",
                    };
                    let how = if lost { ", its reply lost" } else { "" };
                    format!("t={now} client {c} {what} ({id}){how} → {}", u8::from(held))
                });
                for line in server_notes.0.into_iter().flatten() {
                    notes.note(|| format!("  {line}"));
                }
                if lost {
                    let client = &mut n.clients[c];
                    client.resend = Some(now);
                    client.phase = match action {
                        Action::ReleaseLost(_) => Phase::Releasing,
                        _ => Phase::Leaving,
                    };
                } else {
                    self.next_epoch(&mut n, c, now, notes);
                }
            }
            Action::Crash(p) => {
                let p = t(p);
                notes.note(|| format!("t={now} process {p} crashes"));
                for c in self.members(p) {
                    let client = &mut n.clients[c];
                    if client.alive() {
                        client.phase = Phase::Crashed;
                    }
                    client.seat = None;
                    client.mailbox = None;
                    client.resend = None;
                    client.flight = None;
                    client.waiting_since = None;
                }
                n.processes[p] = Process {
                    crashed: true,
                    ..Process::default()
                };
            }
            Action::Pause(p) => {
                n.processes[t(p)].paused = true;
                notes.note(|| format!("t={now} process {p} pauses (its heartbeats too)"));
            }
            Action::Resume(p) => {
                n.processes[t(p)].paused = false;
                notes.note(|| format!("t={now} process {p} resumes"));
            }
            Action::Reset => {
                let mut server_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
                let (tokens, _) = n.server.reset(None, cap, now, bugs, &mut server_notes);
                notes.note(|| {
                    format!(
                        "t={now} the operator resets every holder → {}",
                        tokens.len()
                    )
                });
                for line in server_notes.0.into_iter().flatten() {
                    notes.note(|| format!("  {line}"));
                }
                n.reset_tokens.extend(tokens);
            }
        }
        if action_is_fault(action) {
            n.faults_left = n.faults_left.saturating_sub(1);
        }
        if self.cfg.election && leads(&s.server, s.now) != leads(&n.server, n.now) {
            n.changed_at = n.now;
        }
        Some(n)
    }

    /// The state before anything happened: every client seated for its first acquisition.
    fn empty(&self) -> State {
        let clients = (0..self.cfg.clients.len())
            .map(|_| Client {
                epoch: 0,
                phase: Phase::Asking(self.fresh.clone()),
                resend: None,
                flight: None,
                announced: false,
                seat: None,
                mailbox: None,
                waiting_since: None,
            })
            .collect();
        let mut state = State {
            now: 0,
            server: Server::new(self.cfg.processes()),
            processes: vec![Process::default(); self.cfg.processes()],
            clients,
            faults_left: self.cfg.faults.budget,
            reset_tokens: Vec::new(),
            out_of_order: false,
            left_fitting: false,
            handed_over: false,
            changed_at: 0,
        };
        for c in 0..self.cfg.clients.len() {
            self.seat(&mut state, c, 0);
        }
        let lapse = Duration::from_millis(self.cfg.lapse);
        let lease = self.cfg.clients.iter().map(|c| c.lease).min();
        let slack = Duration::from_millis(self.cfg.step);
        for &p in &self.cfg.watchers {
            let watching = |h: &mut HubMachine<()>| h.watch(INBOX, &(), lapse, at(0));
            self.hub(&mut state, p, watching, &mut Notes(None));
            let mut watch = Watch::default();
            let _ = watch.joined(lease.map(Duration::from_millis), slack, at(0));
            state.processes[p].watch = Some((watch, Heard::default()));
        }
        state
    }

    /// The path as lines, one a step, with the server's notes under each; the configuration's
    /// prefix first.
    pub fn trace(&self, path: Vec<(State, Option<Action>)>) -> String {
        let mut out = String::new();
        let mut state = self.empty();
        for &action in &self.cfg.prefix {
            let mut notes = Notes(Some(Vec::new()));
            state = self.step(&state, action, &mut notes).expect("the prefix");
            for line in notes.0.into_iter().flatten() {
                let _ = writeln!(out, "{line} (the prefix)");
            }
        }
        for (state, action) in path {
            let Some(action) = action else { continue };
            let mut notes = Notes(Some(Vec::new()));
            self.step(&state, action, &mut notes);
            for line in notes.0.into_iter().flatten() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

/// Whether process `p`'s watch has a read due at `now`.
fn read_due(process: &Process, now: Ms) -> bool {
    (process.watch.as_ref()).is_some_and(|(watch, _)| watch.due().is_some_and(|d| d <= at(now)))
}

/// The term of the leader the server has: an announced record whose holder lasts.
fn leads(server: &Server, now: Ms) -> Option<u64> {
    let record = server.record?;
    let holder = server.holder(record.id)?;
    (holder.token == record.term && holder.expiry > now).then_some(record.term)
}

/// Tells a watcher the hub's word, as `driver/hub/watch.rs` does.
fn say(heard: &mut Heard, word: Option<Word>) {
    match word {
        Some(Word::Tell(change, vouched)) => {
            heard.tell(&change, vouched);
        }
        Some(Word::Vouch(vouched)) => heard.vouch(vouched),
        _ => {}
    }
}

/// `election_read.lua`'s reply, as the server sends it, for the crate's own parse.
fn read_reply(lead: Lead) -> Value {
    let bulk = |text: String| Value::BulkString(text.into_bytes());
    let ms = |left: Ms| Value::Int(if left == INF { -1 } else { left as i64 });
    match lead {
        Lead::Leader { record, left } => Value::Array(vec![
            Value::Int(1),
            bulk(record.id.to_string()),
            bulk(record.term.to_string()),
            bulk(record.since.to_string()),
            bulk(record.info.to_owned()),
            ms(left),
        ]),
        Lead::Nobody {
            left,
            waiting,
            over,
        } => Value::Array(vec![
            Value::Int(0),
            ms(left),
            Value::Int(i64::from(waiting)),
            bulk(over.to_string()),
        ]),
    }
}

fn action_is_fault(action: Action) -> bool {
    matches!(
        action,
        Action::AskLost(_)
            | Action::RenewLost(_)
            | Action::ReleaseLost(_)
            | Action::Cancel(_)
            | Action::CancelLost(_)
            | Action::Crash(_)
            | Action::Pause(_)
            | Action::Reset
    )
}

impl Model for QueueModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut state = self.empty();
        for &action in &self.cfg.prefix {
            state = self
                .step(&state, action, &mut Notes(None))
                .unwrap_or_else(|| panic!("the prefix's {action:?} cannot be taken"));
        }
        vec![state]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let f = &self.cfg.faults;
        let fault = s.faults_left > 0;
        let due = self.cfg.timely && (0..s.clients.len()).any(|c| self.has_a_step_due(s, c));
        if s.now + self.cfg.step <= self.cfg.horizon && !due {
            actions.push(Action::Tick);
        }
        if fault && f.resets && !s.server.holders.is_empty() {
            actions.push(Action::Reset);
        }
        for (p, process) in s.processes.iter().enumerate() {
            let pp = p as u8;
            let members: Vec<usize> = self.members(p).collect();
            let idle = members.iter().all(|&c| !s.clients[c].alive()) && process.watch.is_none();
            if process.crashed || idle {
                continue;
            }
            if process.paused {
                actions.push(Action::Resume(pp));
                continue;
            }
            for &i in &members {
                let (c, client) = (i as u8, &s.clients[i]);
                let settled = client.resend.is_none();
                match &client.phase {
                    Phase::Asking(_) => match client.flight {
                        None => {
                            actions.push(Action::Ask(c));
                            if fault && f.lost_replies && !self.cfg.in_flight {
                                actions.push(Action::AskLost(c));
                            }
                        }
                        Some(Flight::Sent { .. }) => actions.push(Action::Run(c)),
                        Some(Flight::Ran { .. }) => {
                            actions.push(Action::Reply(c));
                            if fault && f.lost_replies {
                                actions.push(Action::AskLost(c));
                            }
                        }
                    },
                    Phase::Blocked(_, until) => {
                        if client.mailbox.is_some() || until.is_some_and(|u| u <= at(s.now)) {
                            actions.push(Action::Wake(c));
                        }
                    }
                    Phase::Held(lease) => {
                        if self.cfg.election && !client.announced && !lease.is_lost(at(s.now)) {
                            actions.push(Action::Announce(c));
                        }
                        if !lease.is_lost(at(s.now)) {
                            actions.push(Action::Renew(c));
                            if fault && f.lost_replies {
                                actions.push(Action::RenewLost(c));
                            }
                        }
                        actions.push(Action::Release(c));
                        if fault && f.lost_replies && settled {
                            actions.push(Action::ReleaseLost(c));
                        }
                    }
                    Phase::Releasing => actions.push(Action::Release(c)),
                    Phase::Leaving => actions.push(Action::Leave(c)),
                    Phase::Done | Phase::Crashed => {}
                }
            }
            let waiting = members.iter().any(|&c| s.clients[c].waiting());
            let watching = process.watch.is_some();
            if (waiting || watching) && !s.server.inboxes[p].mail.is_empty() {
                actions.push(Action::Deliver(pp));
            }
            if read_due(process, s.now) {
                actions.push(Action::Read(pp));
            }
            for &i in &members {
                let client = &s.clients[i];
                let settled = client.resend.is_none() && client.flight.is_none();
                if client.waiting() && settled && fault && f.cancels {
                    actions.push(Action::Cancel(i as u8));
                    if f.lost_replies {
                        actions.push(Action::CancelLost(i as u8));
                    }
                }
            }
            let busy = (members.iter())
                .any(|&c| s.clients[c].waiting() || matches!(s.clients[c].phase, Phase::Held(_)));
            if busy && fault && f.crashes {
                actions.push(Action::Crash(pp));
            }
            if busy && fault && f.pauses {
                actions.push(Action::Pause(pp));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        self.step(s, action, &mut Notes(None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties: Vec<Property<Self>> = (INVARIANTS.iter())
            .map(|&(name, holds)| Property::always(name, holds))
            .collect();
        properties.push(Property::always(
            EVERY_INVARIANT,
            |m: &QueueModel, s: &State| m.broken(s).is_none(),
        ));
        properties.extend([
            Property::sometimes(TWO_HOLD, |m: &QueueModel, s: &State| {
                (s.clients.iter().enumerate())
                    .filter(|(_, c)| matches!(&c.phase, Phase::Held(l) if !l.is_lost(at(s.now))))
                    .count()
                    >= 2
                    || m.cfg.capacity < 2
            }),
            Property::sometimes(CLAIMED, |_, s: &State| {
                s.server.holders.iter().any(|h| h.how == How::Claimed)
            }),
            Property::sometimes(PUSHED, |_, s: &State| {
                s.clients
                    .iter()
                    .any(|c| matches!(c.mailbox, Some(Told::Granted(..))))
            }),
            Property::sometimes(HEAD_WAKE, |_, s: &State| {
                (s.server.inboxes.iter()).any(|i| i.mail.iter().any(|m| matches!(m, Mail::Ask(_))))
            }),
            Property::sometimes(LAPSED, |m: &QueueModel, s: &State| {
                (0..s.clients.len()).any(|c| m.stale(s, c))
            }),
            Property::sometimes(HANDED_OVER, |_, s: &State| s.handed_over),
            Property::sometimes(WATCHED_LEADER, |_, s: &State| {
                (s.processes.iter()).any(|p| {
                    (p.watch.as_ref())
                        .is_some_and(|(_, h)| matches!(h.last(), Some(Watched::Leader(_))))
                })
            }),
            Property::sometimes(WATCHED_CHANGE, |_, s: &State| {
                (s.processes.iter()).any(|p| {
                    (p.watch.as_ref()).is_some_and(
                        |(_, h)| matches!(h.last(), Some(Watched::Leader(l)) if l.term >= 2),
                    )
                })
            }),
            Property::sometimes(SIBLINGS, |m: &QueueModel, s: &State| {
                (0..s.clients.len()).any(|c| {
                    matches!(s.clients[c].phase, Phase::Blocked(_, None))
                        && (0..c).any(|d| {
                            m.process_of(d) == m.process_of(c)
                                && matches!(s.clients[d].phase, Phase::Blocked(_, Some(_)))
                        })
                })
            }),
        ]);
        match &self.cfg.properties {
            Some(names) => properties.retain(|p| names.contains(&p.name)),
            None => properties.retain(|p| p.name != EVERY_INVARIANT),
        }
        properties
    }

    fn format_action(&self, action: &Action) -> String {
        format!("{action:?}")
    }
}
