//! The queue engine's model: the server's rules (`server.rs`) and clients that drive the real
//! client state machines (`redis_blpop_lock::model`: `QueueWait` through the line, a `Lease`
//! while held), their process's hub (its heartbeats and its inbox), and faults, all as actions
//! of one stateright `Model`.
//!
//! One clock: the server's ms are the clients' `Instant`s, as one base `Instant` plus the ms,
//! so that states hash the same way in every run. Clock drift is out of scope.

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis_blpop_lock::model::{Ask, Asked, Lease, QueueNext, QueueWait};
use stateright::{Model, Property};

use super::server::{Acquired, Bugs, Call, How, Id, Mail, Mode, Ms, Notes, Server};

// The properties, by name: the checker reports its discoveries by these.
pub const SAFE: &str = "units believed held fit the capacity";
pub const COUNTED: &str = "the kept count equals a recount";
pub const IN_ORDER: &str = "grants go in ticket order among live waiters";
pub const NONE_LEFT_FITTING: &str = "a grant pass leaves no live waiter first in line that fits";
pub const WOKEN: &str = "a first waiter that fits is woken by then";
pub const UNCLAIMED_RETURN: &str = "a grant nobody claimed ends with its grantee's heartbeat";
pub const TWO_HOLD: &str = "two clients hold at once";
pub const CLAIMED: &str = "a pushed grant is claimed";
pub const PUSHED: &str = "a grant reaches a waiter through its inbox";
pub const HEAD_WAKE: &str = "a head wake is pushed";
pub const LAPSED: &str = "a process finds it lapsed";

/// The model's `Instant` at server ms 0.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn at(ms: Ms) -> Instant {
    *BASE + Duration::from_millis(ms)
}

fn ms_of(instant: Instant) -> Ms {
    instant.saturating_duration_since(*BASE).as_millis() as Ms
}

/// One client: one process with one waiter at a time.
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    pub units: u64,
    pub lease: Ms,
}

/// Which faults the model may inject, and how many in one run.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub budget: u8,
    /// A request runs on the server and its reply is lost; the client sends it again.
    pub lost_replies: bool,
    /// A process stops (its heartbeats too) and resumes later.
    pub pauses: bool,
    /// A process stops for good.
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
    /// Acquisitions per client (ids `w<client>.0`, `w<client>.1`, ...).
    pub acquisitions: u8,
    /// Clients (and their hubs) take each step that is due before time passes: an ask, a
    /// wake at a timer or by mail, a pop of a process's inbox, a request sent again. Without
    /// it, any of them may be late by any number of ticks (a slow thread), which multiplies
    /// the states by the ticks.
    pub timely: bool,
    pub faults: Faults,
    pub bugs: Bugs,
    /// Steps taken before the exploration starts, from the empty state: the model is explored
    /// from where they lead (a line already formed), which spares it every order they could
    /// have come in.
    pub prefix: Vec<Action>,
}

/// What the hub told a waiter: the mailbox holds one, a grant over anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Told {
    Granted(u64, Option<Instant>),
    AskAgain,
}

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
    /// It never acts again.
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub epoch: u8,
    pub phase: Phase,
    pub paused: bool,
    /// When a request whose reply was lost was first sent: the next send is that request
    /// again, and its reply is taken as of then.
    pub resend: Option<Ms>,
    /// The hub's word on this waiter's process: it joined in this epoch.
    pub joined: bool,
    /// Its process lapsed since it joined: it leaves and joins again before its next ask.
    pub stale: bool,
    /// The server's time of the hub's last live heartbeat, which dates grants.
    pub clock: Option<Ms>,
    pub mailbox: Option<Told>,
    /// When the last ask that found it waiting was sent: kept only for the rule the model
    /// checker found wrong (`Bugs::grant_read_late_counts_from_the_last_ask`).
    pub waiting_since: Option<Ms>,
}

impl Client {
    fn id(&self, client: usize) -> Id {
        Id {
            client: client as u8,
            epoch: self.epoch,
        }
    }

    fn in_line(&self) -> bool {
        matches!(
            self.phase,
            Phase::Asking(_) | Phase::Blocked(..) | Phase::Leaving
        )
    }

    fn alive(&self) -> bool {
        !matches!(self.phase, Phase::Done | Phase::Crashed)
    }

    /// Its seat at the hub is gone: it holds, or its wait is over.
    fn unseat(&mut self) {
        self.joined = false;
        self.stale = false;
        self.clock = None;
        self.mailbox = None;
        self.waiting_since = None;
    }

    fn tell(&mut self, told: Told) {
        if !matches!(self.mailbox, Some(Told::Granted(..))) {
            self.mailbox = Some(told);
        }
    }

    /// The hub found its process lapsed: a new epoch, whose waiters ask again.
    fn lapsed(&mut self) {
        self.joined = false;
        self.stale = true;
        self.tell(Told::AskAgain);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Ms,
    pub server: Server,
    pub clients: Vec<Client>,
    pub faults_left: u8,
    /// The tokens an operator's reset took away: their holders' beliefs are void by design.
    pub reset_tokens: Vec<u64>,
    /// A grant pass granted a waiter while a live one ahead of it went on waiting.
    pub out_of_order: bool,
    /// A grant pass left a live waiter first in line that fits.
    pub left_fitting: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Ask(u8),
    AskLost(u8),
    Wake(u8),
    Deliver(u8),
    Renew(u8),
    RenewLost(u8),
    Release(u8),
    ReleaseLost(u8),
    Cancel(u8),
    CancelLost(u8),
    Leave(u8),
    Crash(u8),
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

    /// Its next acquisition, if it has one left.
    fn next_epoch(&self, client: &mut Client) {
        client.epoch += 1;
        client.resend = None;
        client.unseat();
        client.phase = if client.epoch < self.cfg.acquisitions {
            Phase::Asking(self.fresh.clone())
        } else {
            Phase::Done
        };
    }

    /// Where the client goes after the line's state machine said `next`.
    fn follow(&self, client: &mut Client, wait: QueueWait, next: QueueNext, now: Ms) {
        client.phase = match next {
            QueueNext::Ask => Phase::Asking(wait),
            QueueNext::Block { until } => Phase::Blocked(wait, until),
            QueueNext::Leave => Phase::Leaving,
            QueueNext::Granted { token, valid_until } => {
                client.unseat();
                Phase::Held(Lease::new(
                    u64::from(client.epoch),
                    at(now),
                    valid_until,
                    Some(token),
                ))
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

    /// The waiter of client `c` blocked while it is the first live one in line and fits,
    /// with nothing in its inbox or mailbox and no wake due by now: it sleeps past a moment
    /// it could be granted.
    pub fn sleeps_past_its_turn(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        let Phase::Blocked(_, until) = &client.phase else {
            return false;
        };
        if client.paused || client.mailbox.is_some() {
            return false;
        }
        let id = client.id(c);
        let first_live =
            (s.server.queue.iter()).find(|w| s.server.beats_past(w.id.process(), s.now));
        if first_live.is_none_or(|w| w.id != id) {
            return false;
        }
        let mailed = s.server.inboxes[c].mail.iter().any(|m| match *m {
            Mail::Granted { waiter, .. } => waiter == id,
            Mail::Head(waiter) => waiter == id,
        });
        let fits = s.server.live_units(s.now) + self.cfg.clients[c].units <= self.cfg.capacity;
        !mailed && fits && until.is_none_or(|u| u > at(s.now))
    }

    /// Whether client `c` (or its hub) has a step due now, which a timely one takes before
    /// time passes.
    fn has_a_step_due(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        if client.paused || !client.alive() {
            return false;
        }
        let waiting = matches!(client.phase, Phase::Asking(_) | Phase::Blocked(..));
        let own = match &client.phase {
            Phase::Asking(_) | Phase::Leaving | Phase::Releasing => true,
            Phase::Blocked(_, until) => {
                client.mailbox.is_some() || until.is_some_and(|u| u <= at(s.now))
            }
            _ => false,
        };
        own || (waiting && !s.server.inboxes[c].mail.is_empty())
    }

    /// Checks a script's grant pass against the state before it: grants in ticket order among
    /// live waiters (the caller, which may be leaving, aside), and no live waiter that fits
    /// left first in line.
    fn check_pass(&self, pre: &Server, post: &Server, now: Ms, caller: Id, next: &mut State) {
        let granted: Vec<Id> = (post.holders.iter())
            .filter(|h| h.token > pre.fence)
            .map(|h| h.id)
            .collect();
        for g in &granted {
            let at = (pre.queue.iter().position(|w| w.id == *g)).unwrap_or(pre.queue.len());
            let passed_over = pre.queue[..at].iter().any(|w| {
                w.id != caller && pre.beats_past(w.id.process(), now) && !granted.contains(&w.id)
            });
            next.out_of_order |= passed_over;
        }
        let first_live = (post.queue.iter()).find(|w| post.beats_past(w.id.process(), now));
        if let Some(w) = first_live {
            next.left_fitting |= post.live_units(now) + w.units <= self.cfg.capacity;
        }
    }

    /// The step `action` from `s`, with a line of what happened when `notes` are kept.
    pub fn step(&self, s: &State, action: Action, notes: &mut Notes) -> Option<State> {
        let mut n = s.clone();
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
                for (c, client) in n.clients.iter_mut().enumerate() {
                    if !client.in_line() || client.paused {
                        continue;
                    }
                    match n.server.beat(c, lapse, now) {
                        Some(server_ms) => client.clock = Some(server_ms),
                        None if client.joined => {
                            notes.note(|| format!("  process {c}'s heartbeat finds it lapsed"));
                            client.lapsed();
                        }
                        None => {}
                    }
                }
            }
            Action::Ask(c) | Action::AskLost(c) => {
                let lost = matches!(action, Action::AskLost(_));
                let client = &mut n.clients[t(c)];
                let Phase::Asking(mut wait) = client.phase.clone() else {
                    return None;
                };
                let id = client.id(t(c));
                if client.resend.is_none() && client.stale {
                    // A waiter whose process lapsed leaves, and joins again at the back.
                    let pre = n.server.clone();
                    let (left, _) = n.server.release(id, cap, now, bugs, notes);
                    notes.note(|| format!("t={now} {id} leaves to join again → {left}"));
                    self.check_pass(&pre, &n.server.clone(), now, id, &mut n);
                    let client = &mut n.clients[t(c)];
                    client.stale = false;
                }
                let client = &mut n.clients[t(c)];
                let sent = client.resend.take().unwrap_or(now);
                let mode = Mode::Wait {
                    known: client.joined,
                };
                let pre = n.server.clone();
                let mut server_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
                let (reply, passed) =
                    n.server
                        .acquire(&self.call(t(c), id, mode), now, bugs, &mut server_notes);
                let known = if client.joined { "known" } else { "new" };
                notes.note(|| {
                    let how = if lost { ", its reply lost" } else { "" };
                    format!("t={now} client {c} asks ({id}, {known}){how} → {reply}")
                });
                for line in server_notes.0.into_iter().flatten() {
                    notes.note(|| format!("  {line}"));
                }
                if passed {
                    let post = n.server.clone();
                    self.check_pass(&pre, &post, now, id, &mut n);
                }
                let client = &mut n.clients[t(c)];
                if lost {
                    client.resend = Some(sent);
                    return Some(n);
                }
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
                        client.joined = true;
                        if bugs.grant_read_late_counts_from_the_last_ask {
                            client.waiting_since = Some(sent);
                        }
                        Asked::Waiting {
                            position,
                            next: next.map(Duration::from_millis),
                            ticket,
                        }
                    }
                    Acquired::Refused => Asked::Refused,
                    Acquired::Lapsed => {
                        client.lapsed();
                        Asked::Lapsed
                    }
                };
                let next = wait.asked(at(sent), asked, at(now));
                self.follow(client, wait, next, now);
            }
            Action::Wake(c) => {
                let client = &mut n.clients[t(c)];
                let Phase::Blocked(mut wait, _) = client.phase.clone() else {
                    return None;
                };
                let told = client.mailbox.take();
                let next = match told {
                    Some(Told::Granted(token, dated))
                        if bugs.grant_read_late_counts_from_the_last_ask =>
                    {
                        // The rule before the model checker's counterexample: the claim
                        // window from the last ask that found it waiting, or the date if
                        // later.
                        let cfg = &self.cfg.clients[t(c)];
                        let claim = Duration::from_millis(cfg.lease.min(lapse));
                        let asked = at(client.waiting_since.unwrap_or(now)) + claim;
                        QueueNext::Granted {
                            token,
                            valid_until: Some(dated.map_or(asked, |d| d.max(asked))),
                        }
                    }
                    Some(Told::Granted(token, dated)) => wait.popped(Some(token), dated, at(now)),
                    _ => wait.popped(None, None, at(now)),
                };
                self.follow(client, wait, next, now);
                notes.note(|| {
                    let why = match told {
                        Some(Told::Granted(token, _)) => format!("by its grant (token {token})"),
                        Some(Told::AskAgain) => "to ask again".into(),
                        None => "at its timer".into(),
                    };
                    let what = match &client.phase {
                        Phase::Held(lease) => match lease.valid_until {
                            Some(v) => format!("holds until t={}", ms_of(v)),
                            None => "holds".into(),
                        },
                        _ => "asks again".into(),
                    };
                    format!("t={now} client {c} wakes {why} → {what}")
                });
            }
            Action::Deliver(c) => {
                let id = n.clients[t(c)].id(t(c));
                let mail = n.server.pop(t(c))?;
                let client = &mut n.clients[t(c)];
                match mail {
                    Mail::Granted {
                        token,
                        expiry,
                        waiter,
                    } if waiter == id => {
                        let dated = client.clock.filter(|&c| expiry >= c).map(|_| at(expiry));
                        client.tell(Told::Granted(token, dated));
                    }
                    Mail::Head(waiter) if waiter == id => client.tell(Told::AskAgain),
                    _ => {}
                }
                notes.note(|| format!("t={now} process {c}'s hub pops {mail:?}"));
            }
            Action::Renew(c) | Action::RenewLost(c) => {
                let lost = matches!(action, Action::RenewLost(_));
                let id = n.clients[t(c)].id(t(c));
                let lease_ms = self.cfg.clients[t(c)].lease;
                let extended = n.server.extend(id, lease_ms, now);
                let client = &mut n.clients[t(c)];
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
                let id = n.clients[t(c)].id(t(c));
                let pre = n.server.clone();
                let mut server_notes = Notes(notes.0.as_ref().map(|_| Vec::new()));
                let (held, _) = n.server.release(id, cap, now, bugs, &mut server_notes);
                let post = n.server.clone();
                self.check_pass(&pre, &post, now, id, &mut n);
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
                let client = &mut n.clients[t(c)];
                if lost {
                    client.resend = Some(now);
                    client.phase = match action {
                        Action::ReleaseLost(_) => Phase::Releasing,
                        _ => Phase::Leaving,
                    };
                } else {
                    self.next_epoch(client);
                }
            }
            Action::Crash(c) => {
                let client = &mut n.clients[t(c)];
                client.phase = Phase::Crashed;
                client.paused = false;
                client.unseat();
                notes.note(|| format!("t={now} client {c} crashes"));
            }
            Action::Pause(c) => {
                n.clients[t(c)].paused = true;
                notes.note(|| format!("t={now} client {c} pauses (its heartbeats too)"));
            }
            Action::Resume(c) => {
                n.clients[t(c)].paused = false;
                notes.note(|| format!("t={now} client {c} resumes"));
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
        Some(n)
    }

    /// The state before anything happened.
    fn empty(&self) -> State {
        let clients = (0..self.cfg.clients.len())
            .map(|_| Client {
                epoch: 0,
                phase: Phase::Asking(self.fresh.clone()),
                paused: false,
                resend: None,
                joined: false,
                stale: false,
                clock: None,
                mailbox: None,
                waiting_since: None,
            })
            .collect();
        State {
            now: 0,
            server: Server::new(self.cfg.clients.len()),
            clients,
            faults_left: self.cfg.faults.budget,
            reset_tokens: Vec::new(),
            out_of_order: false,
            left_fitting: false,
        }
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
        for (i, client) in s.clients.iter().enumerate() {
            let c = i as u8;
            if !client.alive() {
                continue;
            }
            if client.paused {
                actions.push(Action::Resume(c));
                continue;
            }
            let settled = client.resend.is_none();
            match &client.phase {
                Phase::Asking(_) => {
                    actions.push(Action::Ask(c));
                    if fault && f.lost_replies {
                        actions.push(Action::AskLost(c));
                    }
                }
                Phase::Blocked(_, until) => {
                    if client.mailbox.is_some() || until.is_some_and(|u| u <= at(s.now)) {
                        actions.push(Action::Wake(c));
                    }
                }
                Phase::Held(lease) => {
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
            let waiting = matches!(client.phase, Phase::Asking(_) | Phase::Blocked(..));
            if waiting && !s.server.inboxes[i].mail.is_empty() {
                actions.push(Action::Deliver(c));
            }
            if waiting && settled && fault && f.cancels {
                actions.push(Action::Cancel(c));
                if f.lost_replies {
                    actions.push(Action::CancelLost(c));
                }
            }
            let busy = waiting || matches!(client.phase, Phase::Held(_));
            if busy && fault && f.crashes {
                actions.push(Action::Crash(c));
            }
            if busy && fault && f.pauses {
                actions.push(Action::Pause(c));
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        self.step(s, action, &mut Notes(None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SAFE, |m: &QueueModel, s: &State| {
                m.believed_units(s) <= m.cfg.capacity
            }),
            Property::always(COUNTED, |_, s: &State| {
                s.server.kept().is_none_or(|k| k == s.server.recount())
            }),
            Property::always(IN_ORDER, |_, s: &State| !s.out_of_order),
            Property::always(NONE_LEFT_FITTING, |_, s: &State| !s.left_fitting),
            Property::always(WOKEN, |m: &QueueModel, s: &State| {
                (0..s.clients.len()).all(|c| !m.sleeps_past_its_turn(s, c))
            }),
            Property::always(UNCLAIMED_RETURN, |_, s: &State| {
                (s.server.holders.iter())
                    .filter(|h| h.how == How::Pushed && h.expiry > s.now)
                    .all(|h| s.server.beats[h.id.process()].is_some_and(|b| h.expiry <= b))
            }),
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
                (s.server.inboxes.iter()).any(|i| i.mail.iter().any(|m| matches!(m, Mail::Head(_))))
            }),
            Property::sometimes(LAPSED, |_, s: &State| s.clients.iter().any(|c| c.stale)),
        ]
    }

    fn format_action(&self, action: &Action) -> String {
        format!("{action:?}")
    }
}
