//! The plain lock's model (docs/model.md, "The plain lock model"): python-redis-lock's keys on
//! one server (`server.rs`, the scripts' rules), and clients that drive the crate's own state
//! machines (`LockWait`, `Lease`, `valid_from_read`, `renewal_due`) through tries, waits in
//! `BLPOP`, confirms, holds, renewals and releases, with replies that come late or never. The checker
//! explores every interleaving within the bounds; `differential.rs` holds the server rules
//! against the real scripts on a `redis-server`.

mod differential;
mod server;

use std::time::{Duration, Instant};

use redis_blpop_lock::model::{
    renewal_due, valid_from_read, Attempting, Lease, LockStep, LockWait, Pttl, Terms, Wait,
};
use stateright::{Checker, HasDiscoveries, Model, Path, Property};

use server::{ExtendReply, Flaw, Read, Server, Tick, TryReply, Ttl};

/// One tick of the model's clock, as the client state machines see it.
const TICK_MS: u64 = 100;
/// The lock's expiry, in ticks: long enough for a renewal to be due before it passes.
const EXPIRE: Tick = 3;
/// The wake-up signal's expiry, in ticks: a waiter that is slow to `BLPOP` can miss it.
const SIGNAL_EXPIRE: Tick = 2;
/// What a take needs before it counts: the lock expires, its holder renews, no replicas.
const TERMS: Terms = Terms {
    expire: Some(Duration::from_millis(EXPIRE as u64 * TICK_MS)),
    renewing: true,
    replicated: false,
};
/// How far a waiter with a deadline waits, in ticks.
const PATIENCE: Tick = 5;
/// Where the clock stops: past it, the clients finish what they are doing at that instant.
const HORIZON: Tick = 7;
/// The breadth-first search's depth in CI (depth 13, 692,775 unique states, takes about
/// twice as long: the model group's time is kept within 30 s); `MODEL_DEPTH` asks for more.
const DEPTH: usize = 12;
/// What the CI depth must explore at least (352,326 unique states when this was written): a
/// model that shrinks by accident fails here.
const MIN_STATES: usize = 320_000;

const WOKEN: &str = "a waiter is woken by a release";
const SETTLED: &str = "a lost reply is settled into a hold";
const CONFIRMED: &str = "a slow take after a wait is confirmed by an extend into a hold";
const TAKEN_OVER: &str = "a paused holder's lock is taken over after its expiry";

/// The depth the checker explores to: `MODEL_DEPTH`, else `default`.
fn model_depth(default: usize) -> usize {
    std::env::var("MODEL_DEPTH")
        .ok()
        .and_then(|depth| depth.parse().ok())
        .unwrap_or(default)
}

/// A rule broken on purpose, for the `catches_*` tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Broken {
    Nothing,
    /// The client counts a lease from the try's reply instead of its send.
    LeaseFromReply,
    /// The server's rules broken as `Flaw` says.
    Server(Flaw),
}

/// How long an acquire waits, as the caller asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Asked {
    /// `try_acquire`: one try (and the crate's two more on a lock found free mid-try).
    Once,
    /// `acquire_timeout(PATIENCE)`.
    Patient,
}

/// A request on its way: not yet run by the server, or run and its reply on the way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Flight<R> {
    Sent,
    Answered(R),
}

/// Where a client is in its acquire, hold and release.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// A try sent at tick `sent`; `woken`: after a wait.
    Trying {
        sent: Tick,
        woken: bool,
        waiting: LockWait,
        reply: Flight<TryReply>,
    },
    /// In `BLPOP` on the signal list until a signal comes or `until`.
    Blocked {
        waiting: LockWait,
        until: Instant,
    },
    /// A lock just taken, confirmed by an extend sent at `sent` before it counts, as the
    /// crate's `LockWait` asks for a take after a wait whose count left too little of it.
    Confirming {
        waiting: LockWait,
        token: Option<u64>,
        sent: Tick,
        reply: Flight<ExtendReply>,
    },
    /// A try's reply was lost: its connection is closed (so it cannot run later) and the lock
    /// read, by a read sent at `sent`.
    Settling {
        sent: Tick,
        waiting: LockWait,
        reply: Flight<Read>,
    },
    Holding {
        lease: Lease,
    },
    /// A renewal (extend) sent at `sent`; the holder still holds meanwhile.
    Renewing {
        lease: Lease,
        sent: Tick,
        reply: Flight<ExtendReply>,
    },
    /// The holder let go when it sent the unlock: it no longer uses the lock.
    Releasing {
        reply: Flight<bool>,
    },
    /// The settle could not be done in time: the acquire said the outcome is unknown, and the
    /// background settle's give-back (an owner-checked unlock) is still to run.
    Unsure,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    phase: Phase,
    /// Acquires this client may still start.
    left: u8,
    /// Its acquisitions so far (the lease's epoch).
    epoch: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    server: Server,
    clients: Vec<Client>,
    /// The token of the last client that became a believed holder, with who and which
    /// acquisition it was: a believed holder's token must be higher, or that same acquisition's.
    top_token: Option<(u64, usize, u64)>,
    fence_in_order: bool,
    /// Non-vacuity: a waiter took a release's signal; a lost reply was settled into a hold; a
    /// take was confirmed into a hold; a holder's lease passed while it was paused and another
    /// client then held the lock.
    woken_by_release: bool,
    settled_into_hold: bool,
    confirmed_into_hold: bool,
    taken_over: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// The clock moves one tick: a pause for every client that does nothing meanwhile.
    Tick,
    Start(usize, Asked),
    /// The server runs the client's request.
    Run(usize),
    /// The reply reaches the client, which acts on it.
    Reply(usize),
    /// The reply is lost (the request ran, or not).
    Lose(usize),
    /// The settle cannot read the lock in time.
    SettleFails(usize),
    /// The client's `BLPOP` takes the signal.
    Woken(usize),
    /// The client's `BLPOP` ends at its time.
    BlockEnds(usize),
    Renew(usize),
    Release(usize),
}

struct LockModel {
    base: Instant,
    clients: usize,
    acquisitions: u8,
    broken: Broken,
    /// Replies may be lost, and settles fail.
    lossy: bool,
    /// Where the clock stops.
    horizon: Tick,
}

impl LockModel {
    fn new(clients: usize, acquisitions: u8, broken: Broken) -> LockModel {
        LockModel {
            base: Instant::now(),
            clients,
            acquisitions,
            broken,
            lossy: true,
            horizon: HORIZON,
        }
    }

    /// The model without lost replies, its clock stopped at `horizon`: fewer states, so
    /// longer paths within the same time.
    fn reliable(self, horizon: Tick) -> LockModel {
        LockModel {
            lossy: false,
            horizon,
            ..self
        }
    }

    /// The instant of tick `t`: one fixed base, so that states hash the same every time.
    fn at(&self, t: Tick) -> Instant {
        self.base + ticks(t)
    }

    /// The lease each believed holder acts on: held, renewing, and not lost by now.
    fn believers<'a>(&'a self, s: &'a State) -> impl Iterator<Item = (usize, &'a Lease)> + 'a {
        let now = self.at(s.server.now);
        s.clients
            .iter()
            .enumerate()
            .filter_map(move |(i, c)| match &c.phase {
                Phase::Holding { lease } | Phase::Renewing { lease, .. } if !lease.is_lost(now) => {
                    Some((i, lease))
                }
                _ => None,
            })
    }

    fn flaw(&self) -> Flaw {
        match self.broken {
            Broken::Server(flaw) => flaw,
            Broken::Nothing | Broken::LeaseFromReply => Flaw::None,
        }
    }

    /// What the crate's `LockWait` says next, done at tick `now` by `client`.
    fn enter(&self, client: &mut Client, now: Tick, waiting: LockWait, step: LockStep) -> Phase {
        match step {
            LockStep::Try { woken } => Phase::Trying {
                sent: now,
                woken,
                waiting,
                reply: Flight::Sent,
            },
            LockStep::Block { until } => Phase::Blocked { waiting, until },
            LockStep::Hand {
                valid_until, token, ..
            } => {
                client.epoch += 1;
                Phase::Holding {
                    lease: Lease::new(client.epoch, self.at(now), valid_until, token),
                }
            }
            // Nothing here cancels, and no hub carries a try (`Land`, `GiveBack`).
            LockStep::End(_) | LockStep::Land | LockStep::GiveBack => Phase::Idle,
        }
    }

    /// What a try found busy for `ttl` at tick `now` leads to, as the crate's `LockWait`
    /// says; held by the client itself if `ours`.
    fn after_busy(
        &self,
        client: &mut Client,
        now: Tick,
        mut waiting: LockWait,
        ours: bool,
        ttl: Option<Ttl>,
    ) -> Phase {
        let step = waiting.busy(ours, pttl(ttl), self.at(now), false, false);
        self.enter(client, now, waiting, step)
    }

    /// A lock taken at tick `now` by a try counted as `attempt`, valid until `valid_until`,
    /// with `token`: held at once, or first confirmed by an extend, as the crate's `LockWait`
    /// says.
    fn taken(
        &self,
        client: &mut Client,
        now: Tick,
        mut waiting: LockWait,
        attempt: Attempting,
        (valid_until, token): (Option<Instant>, Option<u64>),
    ) -> Phase {
        // No replicas are asked for: no `WAIT` acknowledges it.
        if waiting.taken(&attempt, false, self.at(now)) {
            return Phase::Confirming {
                waiting,
                token,
                sent: now,
                reply: Flight::Sent,
            };
        }
        let step = waiting.confirmed(Some(valid_until), token, false);
        self.enter(client, now, waiting, step)
    }

    /// The client's request runs on the server.
    fn run(&self, s: &mut State, i: usize) -> Option<()> {
        let id = i as u8;
        let server = &mut s.server;
        match &mut s.clients[i].phase {
            Phase::Trying { reply, .. } if *reply == Flight::Sent => {
                *reply = Flight::Answered(server.acquire(id, Some(EXPIRE), true));
            }
            Phase::Settling { reply, .. } if *reply == Flight::Sent => {
                *reply = Flight::Answered(server.read());
            }
            Phase::Renewing { reply, .. } | Phase::Confirming { reply, .. }
                if *reply == Flight::Sent =>
            {
                *reply = Flight::Answered(server.extend(id, EXPIRE));
            }
            Phase::Releasing { reply } if *reply == Flight::Sent => {
                *reply = Flight::Answered(server.unlock(id, SIGNAL_EXPIRE));
            }
            // The background settle's give-back: nobody waits for its reply.
            Phase::Unsure => {
                server.unlock(id, SIGNAL_EXPIRE);
                s.clients[i].phase = Phase::Idle;
            }
            _ => return None,
        }
        Some(())
    }

    /// The reply reaches the client.
    fn reply(&self, s: &mut State, i: usize) -> Option<()> {
        let now = s.server.now;
        let client = &mut s.clients[i];
        client.phase = match client.phase.clone() {
            Phase::Trying {
                sent,
                woken,
                waiting,
                reply: Flight::Answered(answer),
            } => match answer {
                TryReply::Acquired(token) => {
                    // Valid from the send, as the crate's `Attempting` counts it: the key was
                    // set no earlier than that.
                    let from = match self.broken {
                        Broken::LeaseFromReply => now,
                        _ => sent,
                    };
                    let attempt = Attempting::new(self.at(from), woken);
                    let until = attempt.valid_until(Some(ticks(EXPIRE)));
                    self.taken(client, now, waiting, attempt, (until, token))
                }
                // Its own id: the crate's `AlreadyAcquired`, which this model never reaches.
                TryReply::Busy { owner, ttl } => {
                    let ours = usize::from(owner) == i;
                    self.after_busy(client, now, waiting, ours, Some(ttl))
                }
            },
            Phase::Settling {
                sent,
                waiting,
                reply: Flight::Answered(read),
            } => {
                if read.owner.is_some_and(|o| usize::from(o) == i) {
                    s.settled_into_hold = true;
                    // Found by a read: counted from the read's send, as the crate does.
                    let attempt = Attempting::new(self.at(sent), false);
                    let until = valid_from_read(self.at(sent), pttl(read.ttl));
                    self.taken(client, now, waiting, attempt, (until, read.fence))
                } else {
                    self.after_busy(client, now, waiting, false, read.ttl)
                }
            }
            Phase::Confirming {
                mut waiting,
                token,
                sent,
                reply: Flight::Answered(answer),
            } => {
                // Valid from the extend's send; not ours, it holds nothing and tries again.
                let confirmed = match answer {
                    ExtendReply::Yes | ExtendReply::NoExpiry => {
                        Some(Attempting::new(self.at(sent), false).valid_until(Some(ticks(EXPIRE))))
                    }
                    ExtendReply::NotOurs => None,
                };
                s.confirmed_into_hold |= confirmed.is_some();
                let step = waiting.confirmed(confirmed, token, false);
                self.enter(client, now, waiting, step)
            }
            Phase::Renewing {
                mut lease,
                sent,
                reply: Flight::Answered(answer),
            } => {
                match answer {
                    ExtendReply::Yes => lease.extended(self.at(sent), ticks(EXPIRE)),
                    ExtendReply::NotOurs | ExtendReply::NoExpiry => lease.mark_lost(),
                }
                Phase::Holding { lease }
            }
            Phase::Releasing {
                reply: Flight::Answered(_),
            } => Phase::Idle,
            _ => return None,
        };
        Some(())
    }

    /// The reply is lost. A try's is settled by reading (never by trying again: a second try
    /// could take a lock freed after the first); a repeatable request goes again.
    fn lose(&self, s: &mut State, i: usize) -> Option<()> {
        let now = s.server.now;
        let client = &mut s.clients[i];
        client.phase = match client.phase.clone() {
            Phase::Trying { waiting, .. } => Phase::Settling {
                sent: now,
                waiting,
                reply: Flight::Sent,
            },
            Phase::Settling {
                waiting,
                reply: Flight::Answered(_),
                ..
            } => Phase::Settling {
                sent: now,
                waiting,
                reply: Flight::Sent,
            },
            Phase::Renewing {
                lease,
                reply: Flight::Answered(_),
                ..
            } => Phase::Renewing {
                lease,
                sent: now,
                reply: Flight::Sent,
            },
            // An extend is safe to send again.
            Phase::Confirming {
                waiting,
                token,
                reply: Flight::Answered(_),
                ..
            } => Phase::Confirming {
                waiting,
                token,
                sent: now,
                reply: Flight::Sent,
            },
            Phase::Releasing {
                reply: Flight::Answered(_),
            } => Phase::Releasing {
                reply: Flight::Sent,
            },
            _ => return None,
        };
        Some(())
    }

    /// A line of a counterexample's trace: the step, then what each client and the server
    /// are after it.
    fn trace_line(&self, action: &Action, after: &State) -> String {
        let now = after.server.now;
        let step = match *action {
            Action::Tick => "time passes".to_string(),
            Action::Start(i, asked) => format!("c{i} starts an acquire ({asked:?})"),
            Action::Run(i) => format!("the server runs c{i}'s request"),
            Action::Reply(i) => format!("c{i} gets its reply"),
            Action::Lose(i) => format!("c{i}'s reply is lost"),
            Action::SettleFails(i) => format!("c{i} cannot settle in time"),
            Action::Woken(i) => format!("c{i} is woken by the signal"),
            Action::BlockEnds(i) => format!("c{i}'s BLPOP ends at its time"),
            Action::Renew(i) => format!("c{i} sends a renewal"),
            Action::Release(i) => format!("c{i} releases"),
        };
        let clients: Vec<String> = (after.clients.iter().enumerate())
            .map(|(i, c)| format!("c{i} {}", self.phase_text(&c.phase, now)))
            .collect();
        let lock = match after.server.lock {
            Some(key) => format!(
                "c{} until t{}",
                key.owner,
                key.expires.map_or("-".into(), |t| t.to_string())
            ),
            None => "free".into(),
        };
        format!(
            "t{now:<2} {step:<34} | lock {lock}, fence {}, signal {} | {}",
            after.server.fence,
            u8::from(after.server.signal.is_some()),
            clients.join("; ")
        )
    }

    fn phase_text(&self, phase: &Phase, now: Tick) -> String {
        let lease_text = |lease: &Lease| {
            let until = lease
                .valid_until
                .map_or("-".into(), |u| self.tick_of(u).to_string());
            let state = if lease.is_lost(self.at(now)) {
                "lost"
            } else {
                "BELIEVES"
            };
            format!(
                "{state} token {:?} until t{until}",
                lease.token.unwrap_or(0)
            )
        };
        match phase {
            Phase::Idle => "idle".into(),
            Phase::Trying { sent, reply, .. } => format!("trying (sent t{sent}, {reply:?})"),
            Phase::Blocked { until, .. } => format!("in BLPOP until t{}", self.tick_of(*until)),
            Phase::Settling { sent, .. } => format!("settling (read sent t{sent})"),
            Phase::Confirming { sent, .. } => format!("confirming (extend sent t{sent})"),
            Phase::Holding { lease } => format!("holds, {}", lease_text(lease)),
            Phase::Renewing { lease, .. } => format!("renewing, {}", lease_text(lease)),
            Phase::Releasing { .. } => "releasing".into(),
            Phase::Unsure => "unsure".into(),
        }
    }

    /// The tick of an instant, rounded up (a wait of an expiry + 1 ms ends at the next tick).
    fn tick_of(&self, at: Instant) -> u128 {
        (at - self.base).as_millis().div_ceil(u128::from(TICK_MS))
    }

    /// One line per step of a path.
    fn trace(&self, path: &Path<State, Action>) -> Vec<String> {
        let steps = path.clone().into_vec();
        let mut lines = Vec::new();
        for pair in steps.windows(2) {
            if let (_, Some(action)) = &pair[0] {
                lines.push(self.trace_line(action, &pair[1].0));
            }
        }
        lines
    }
}

fn ticks(t: Tick) -> Duration {
    Duration::from_millis(u64::from(t) * TICK_MS)
}

/// The crate's `Pttl` of what the server says is left (`None`: the key is gone).
fn pttl(ttl: Option<Ttl>) -> Pttl {
    match ttl {
        None => Pttl::Gone,
        Some(Ttl::Forever) => Pttl::Forever,
        Some(Ttl::Left(left)) => Pttl::Left(ticks(left)),
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            server: Server::new(self.flaw()),
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    left: self.acquisitions,
                    epoch: 0,
                };
                self.clients
            ],
            top_token: None,
            fence_in_order: true,
            woken_by_release: false,
            settled_into_hold: false,
            confirmed_into_hold: false,
            taken_over: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.server.now < self.horizon {
            actions.push(Action::Tick);
        }
        let now = self.at(s.server.now);
        for (i, c) in s.clients.iter().enumerate() {
            match &c.phase {
                Phase::Idle if c.left > 0 => {
                    actions.push(Action::Start(i, Asked::Once));
                    actions.push(Action::Start(i, Asked::Patient));
                }
                Phase::Idle => {}
                Phase::Trying { reply, .. } => {
                    match reply {
                        Flight::Sent => actions.push(Action::Run(i)),
                        Flight::Answered(_) => actions.push(Action::Reply(i)),
                    }
                    actions.push(Action::Lose(i));
                }
                Phase::Settling { reply, .. } => match reply {
                    Flight::Sent => {
                        actions.push(Action::Run(i));
                        actions.push(Action::SettleFails(i));
                    }
                    Flight::Answered(_) => {
                        actions.push(Action::Reply(i));
                        actions.push(Action::Lose(i));
                    }
                },
                Phase::Renewing {
                    reply: Flight::Sent,
                    ..
                }
                | Phase::Confirming {
                    reply: Flight::Sent,
                    ..
                }
                | Phase::Releasing {
                    reply: Flight::Sent,
                } => actions.push(Action::Run(i)),
                Phase::Renewing { .. } | Phase::Confirming { .. } | Phase::Releasing { .. } => {
                    actions.push(Action::Reply(i));
                    actions.push(Action::Lose(i));
                }
                Phase::Blocked { until, .. } => {
                    if s.server.signal.is_some() {
                        actions.push(Action::Woken(i));
                    }
                    if now >= *until {
                        actions.push(Action::BlockEnds(i));
                    }
                }
                Phase::Holding { lease } => {
                    let due = lease.valid_until.is_some_and(|until| {
                        renewal_due(now, until, ticks(EXPIRE)) == Duration::ZERO
                    });
                    if due && !lease.is_lost(now) {
                        actions.push(Action::Renew(i));
                    }
                    actions.push(Action::Release(i));
                }
                Phase::Unsure => actions.push(Action::Run(i)),
            }
        }
        if !self.lossy {
            actions.retain(|a| !matches!(a, Action::Lose(_) | Action::SettleFails(_)));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.server.now;
        match action {
            Action::Tick => s.server.advance(1),
            Action::Start(i, asked) => {
                let wait = match asked {
                    Asked::Once => Wait::Never,
                    Asked::Patient => Wait::Until(self.at(now + PATIENCE)),
                };
                let client = &mut s.clients[i];
                client.left -= 1;
                let mut waiting = LockWait::new(wait, TERMS);
                // No other waiter of its process is ahead of it.
                let step = waiting.start(None, self.at(now));
                client.phase = self.enter(client, now, waiting, step);
            }
            Action::Run(i) => self.run(&mut s, i)?,
            Action::Reply(i) => self.reply(&mut s, i)?,
            Action::Lose(i) => self.lose(&mut s, i)?,
            Action::SettleFails(i) => s.clients[i].phase = Phase::Unsure,
            Action::Woken(i) | Action::BlockEnds(i) => {
                if action == Action::Woken(i) {
                    s.server.pop_signal();
                    s.woken_by_release = true;
                }
                let Phase::Blocked { mut waiting, .. } = s.clients[i].phase.clone() else {
                    return None;
                };
                let step = waiting.woke(action == Action::Woken(i), false);
                let client = &mut s.clients[i];
                client.phase = self.enter(client, now, waiting, step);
            }
            Action::Renew(i) => {
                let Phase::Holding { lease } = s.clients[i].phase else {
                    return None;
                };
                s.clients[i].phase = Phase::Renewing {
                    lease,
                    sent: now,
                    reply: Flight::Sent,
                };
            }
            Action::Release(i) => {
                s.clients[i].phase = Phase::Releasing {
                    reply: Flight::Sent,
                }
            }
        }
        self.check_grants(last, &mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("at most one believed holder", |m: &LockModel, s| {
                m.believers(s).count() <= 1
            }),
            Property::always("fencing tokens grow in grant order", |_, s: &State| {
                s.fence_in_order
            }),
            Property::sometimes(WOKEN, |_, s: &State| s.woken_by_release),
            Property::sometimes(SETTLED, |_, s: &State| s.settled_into_hold),
            Property::sometimes(TAKEN_OVER, |_, s: &State| s.taken_over),
        ];
        // A confirm takes a longer path than the lossy model's depth reaches.
        if !self.lossy {
            properties.push(Property::sometimes(CONFIRMED, |_, s: &State| {
                s.confirmed_into_hold
            }));
        }
        properties
    }
}

impl LockModel {
    /// Each client that became a believed holder in this step: its token must be above every
    /// earlier believed holder's (or be that same acquisition's, believed again after a
    /// renewal). And a holder that came after another's lease passed is a take-over.
    fn check_grants(&self, last: &State, s: &mut State) {
        let before: Vec<usize> = self.believers(last).map(|(i, _)| i).collect();
        let new: Vec<(usize, Lease)> = self
            .believers(s)
            .filter(|(i, _)| !before.contains(i))
            .map(|(i, lease)| (i, *lease))
            .collect();
        for (i, lease) in new {
            let token = lease.token.unwrap_or(0);
            if let Some((top, who, epoch)) = s.top_token {
                if token < top || (token == top && (who, epoch) != (i, lease.epoch)) {
                    s.fence_in_order = false;
                }
                if who != i {
                    let now = self.at(s.server.now);
                    let paused_out = matches!(
                        &s.clients[who].phase,
                        Phase::Holding { lease } if lease.is_lost(now)
                    );
                    s.taken_over |= paused_out;
                }
            }
            if s.top_token.is_none_or(|(top, _, _)| token >= top) {
                s.top_token = Some((token, i, lease.epoch));
            }
        }
    }
}

/// Explores `model` to `depth` and returns the checker, its count printed.
fn explore(model: LockModel, depth: usize, stop_at_failure: bool) -> impl Checker<LockModel> {
    let mut builder = model.checker().target_max_depth(depth);
    if stop_at_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let started = Instant::now();
    let checker = builder.spawn_bfs().join();
    println!(
        "plain lock model: {} states ({} unique) to depth {} in {:?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

#[test]
fn at_most_one_client_believes_it_holds_the_lock_and_tokens_grow_in_grant_order() {
    let depth = model_depth(DEPTH);
    let checker = explore(LockModel::new(2, 2, Broken::Nothing), depth, false);
    checker.assert_properties();
    // The examples of the `sometimes` properties: the model reaches what it is about.
    for property in [WOKEN, SETTLED, TAKEN_OVER] {
        let path = checker.assert_any_discovery(property);
        println!("example of {property:?}:");
        for line in checker.model().trace(&path) {
            println!("  {line}");
        }
    }
    if depth >= DEPTH {
        assert!(
            checker.unique_state_count() >= MIN_STATES,
            "the model explored {} states, fewer than {MIN_STATES}: it shrank",
            checker.unique_state_count()
        );
    }
}

/// A take after a wait whose reply came late is confirmed by an extend before it counts: a
/// longer path than the depth above reaches, explored with one acquisition per client and no
/// lost replies.
#[test]
fn a_slow_take_after_a_wait_is_confirmed_before_it_counts_and_safety_holds_meanwhile() {
    // The clock runs to the end of the confirmed lease of the shortest path (tick 5).
    let model = LockModel::new(2, 1, Broken::Nothing).reliable(5);
    let checker = explore(model, model_depth(17), false);
    checker.assert_no_discovery("at most one believed holder");
    checker.assert_no_discovery("fencing tokens grow in grant order");
    let path = checker.assert_any_discovery(CONFIRMED);
    println!("example of {CONFIRMED:?}:");
    for line in checker.model().trace(&path) {
        println!("  {line}");
    }
}

/// The broken model's counterexample for `property`, its trace printed; the trace's lines.
fn counterexample(broken: Broken, property: &'static str) -> Vec<String> {
    let model = LockModel::new(2, 2, broken);
    let checker = explore(model, model_depth(DEPTH), true);
    let path = checker.assert_any_discovery(property);
    let lines = checker.model().trace(&path);
    println!("{broken:?} breaks {property:?}:");
    for line in &lines {
        println!("  {line}");
    }
    lines
}

#[test]
fn catches_a_lease_counted_from_the_reply_instead_of_the_send() {
    let lines = counterexample(Broken::LeaseFromReply, "at most one believed holder");
    // Two clients believe at once, one of them on a reply that came after its key expired.
    let last = lines.last().unwrap();
    assert_eq!(last.matches("BELIEVES").count(), 2, "{last}");
    assert!(
        lines.iter().any(|l| l.contains("time passes")),
        "the reply must be late for the flaw to show"
    );
}

#[test]
fn catches_an_unlock_that_does_not_check_the_owner() {
    let lines = counterexample(
        Broken::Server(Flaw::UnlockAnyOwner),
        "at most one believed holder",
    );
    let last = lines.last().unwrap();
    assert_eq!(last.matches("BELIEVES").count(), 2, "{last}");
    // An unlock by a client that did not hold the lock (here the background give-back of an
    // unsure try) deleted the holder's key.
    let stolen = lines.windows(2).any(|pair| {
        let runs = |i: usize| pair[1].contains(&format!("the server runs c{i}'s request"));
        let held_by = |i: usize| pair[0].contains(&format!("lock c{i} until"));
        pair[1].contains("lock free") && ((runs(0) && held_by(1)) || (runs(1) && held_by(0)))
    });
    assert!(stolen, "{lines:#?}");
}

#[test]
fn a_fencing_counter_lost_with_its_lock_still_gives_growing_tokens() {
    // The counter gone (an eviction, a restart without persistence), the clock's part of the
    // token is still above every token of an earlier tick.
    let model = LockModel::new(2, 2, Broken::Server(Flaw::FenceExpiresWithLock));
    let checker = explore(model, model_depth(DEPTH), false);
    checker.assert_properties();
}

#[test]
fn catches_a_fencing_token_from_the_clock_alone() {
    let lines = counterexample(
        Broken::Server(Flaw::TokenFromClockOnly),
        "fencing tokens grow in grant order",
    );
    // Two clients believed they held with the same token, the second within the first's
    // tick.
    let believed: Vec<(char, &str)> = (lines.iter())
        .filter_map(|l| {
            let (before, after) = l.split_once(" holds, BELIEVES token ")?;
            let client = before.chars().rev().find(|c| c.is_ascii_digit())?;
            Some((client, after.split(' ').next()?))
        })
        .collect();
    let shared = (believed.iter()).any(|a| (believed.iter()).any(|b| a.0 != b.0 && a.1 == b.1));
    assert!(shared, "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("time passes")),
        "{lines:#?}"
    );
}
