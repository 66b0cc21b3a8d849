//! The model's server rules (`server.rs`) against the real scripts on a `redis-server`: random
//! operations (seeded), each sent as the crate sends it (the texts joined as
//! `src/protocol/scripts.rs` joins them, the keys and arguments in `src/protocol/queue.rs`'s
//! layout, and `src/protocol/election.rs`'s for the election's scripts) and applied to the
//! model; the replies and then every key must agree. An election's run ([`ELECTION`]) is the
//! engine's with capacity 1, a unit each, and the election's announcements, reads and
//! vacatings among the operations.
//!
//! Time is the server's. The model takes the script's `NOW` from the server's `TIME` read just
//! before the call; a script's `NOW` lies between that and a `TIME` read just after, so the
//! times a script writes (expiries, heartbeats, `next`) are compared within that window, and
//! then the model takes the server's exact values. Before each call, the run sleeps past any
//! expiry or lapse within a few ms of the clock, so that which side of it a script falls on
//! does not depend on the ms; should a call still straddle one (a slow machine), the model is
//! also run at that moment, and either outcome is accepted. Fencing tokens are made of the
//! script's ms (a hybrid logical clock), so the model is run at each ms of the window until
//! one agrees.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::thread;
use std::time::Duration;

use redis::{Commands, Connection, FromRedisValue, Script, ScriptInvocation, Value};

use super::server::{
    Acquired, Bugs, Call, Count, Element, Id, Inbox, Lead, Mail, Mode, Ms, News, Notes, Record,
    Server, Waiter, INF,
};
use crate::support::{server_version, RedisServer};
use crate::Rng;

const PARTS: [&str; 9] = [
    "holders", "held", "queue", "beats", "wants", "tickets", "fence", "signal:", "count",
];

fn key(part: &str) -> String {
    format!("model:{{q}}:{part}")
}

/// An election's KEYS[10], the leader's record, after the engine's.
const LEADER: &str = "leader";

/// A queue engine script as the client sends it: the head, then `parts`.
fn engine(parts: &[&str]) -> Script {
    let head = include_str!("../../../scripts/queue_head.lua");
    Script::new(&format!("{head}{}", parts.concat()))
}

struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    reset: Script,
    shrink: Script,
    reset_all: Script,
    beat: Script,
    announce: Script,
    read: Script,
    vacate: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let reads = include_str!("../../../scripts/queue_reads.lua");
        let engine_text = &format!(
            "{reads}{}",
            include_str!("../../../scripts/queue_engine.lua")
        );
        Scripts {
            acquire: engine(&[
                include_str!("../../../scripts/queue_acquire_fast.lua"),
                engine_text,
                include_str!("../../../scripts/queue_acquire.lua"),
            ]),
            release: engine(&[
                include_str!("../../../scripts/queue_release_fast.lua"),
                engine_text,
                include_str!("../../../scripts/queue_release.lua"),
            ]),
            extend: engine(&[reads, include_str!("../../../scripts/queue_extend.lua")]),
            reset: engine(&[
                engine_text,
                include_str!("../../../scripts/queue_reset.lua"),
            ]),
            shrink: engine(&[
                engine_text,
                include_str!("../../../scripts/queue_shrink.lua"),
            ]),
            // After the head alone, as the crate sends it.
            reset_all: engine(&[include_str!("../../../scripts/queue_reset_all.lua")]),
            // queue_beat runs alone, as the hub sends it.
            beat: Script::new(include_str!("../../../scripts/queue_beat.lua")),
            announce: engine(&[
                include_str!("../../../scripts/election_watchers.lua"),
                include_str!("../../../scripts/election_announce.lua"),
            ]),
            vacate: engine(&[
                include_str!("../../../scripts/election_watchers.lua"),
                include_str!("../../../scripts/election_vacate.lua"),
            ]),
            read: engine(&[include_str!("../../../scripts/election_read.lua")]),
        }
    }
}

const PROCESSES: usize = 3;

/// What a run's primitive is: its capacity, each process's (client's) units, and whether the
/// election's scripts are among the operations.
pub struct Setup {
    capacity: u64,
    units: [u64; PROCESSES],
    election: bool,
}

/// A semaphore of 2: units of 1 and 2, so that one waiter fits where another does not.
pub const ENGINE: Setup = Setup {
    capacity: 2,
    units: [1, 2, 1],
    election: false,
};

/// An election: the one unit of capacity 1, and the election's scripts.
pub const ELECTION: Setup = Setup {
    capacity: 1,
    units: [1, 1, 1],
    election: true,
};

/// Per process (client): lease ms. Leases short enough to run out within a run, one shorter
/// than the lapse window (its grants are "short": the head wake).
const LEASES: [Ms; PROCESSES] = [120, 400, 250];
/// Per client: the info it announces as a leader, with colons and empty, as the news and
/// the record must carry them.
const INFO: [&str; PROCESSES] = ["10.0.0.1:80", "", "h:1:w0.0@"];
/// The acquisition whose lease has no expiry (`lease ms` 0: its score is `+inf`): w2.1.
const NO_EXPIRY: (u8, u8) = (2, 1);
/// `queue_reset_all`'s signal expiry (ARGV[1]), ms.
const SIGNAL_EXPIRY: Ms = 300;
const LAPSE: Ms = 250;
/// How near an expiry a call is not sent.
const GUARD: Ms = 8;

/// The lease `id` asks for and extends by.
fn lease(id: Id) -> Ms {
    if (id.client, id.epoch) == NO_EXPIRY {
        0
    } else {
        LEASES[usize::from(id.client)]
    }
}

/// A score of the holders' ZSET: an expiry, or none (`inf`).
fn parse_expiry(text: &str) -> Ms {
    match text {
        "inf" => INF,
        _ => text.parse().expect("an expiry"),
    }
}

fn process_text(p: usize) -> String {
    format!("{:016x}", 0x5eed_0000 + p)
}

fn id_text(id: Id) -> String {
    format!("w{}.{}@{}", id.client, id.epoch, process_text(id.process()))
}

fn parse_id(text: &str) -> Id {
    let parsed = (|| {
        let (own, process) = text.strip_prefix('w')?.split_once('@')?;
        let (client, epoch) = own.split_once('.')?;
        let client: u8 = client.parse().ok()?;
        let id = Id {
            client,
            epoch: epoch.parse().ok()?,
            process: client,
        };
        (process == process_text(id.process())).then_some(id)
    })();
    parsed.unwrap_or_else(|| panic!("not a model id: {text:?}"))
}

fn parse_info(text: &str) -> &'static str {
    (INFO.iter().find(|&&info| info == text))
        .unwrap_or_else(|| panic!("not a model info: {text:?}"))
}

fn parse_number<T: std::str::FromStr>(text: &str) -> T {
    text.parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

fn parse_process(text: &str) -> usize {
    (0..PROCESSES)
        .find(|&p| process_text(p) == text)
        .unwrap_or_else(|| panic!("not a model process: {text:?}"))
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(Id, Mode),
    Release(Id),
    Extend(Id),
    /// `queue_shrink`: keep 1 or 2 units (a 1-unit holder asking for 2, or a 2-unit one that
    /// shrank, would grow, which the script refuses).
    Shrink(Id, u64),
    Beat(usize),
    Reset(Option<Id>),
    /// `queue_reset_all`.
    ResetAll,
    /// The hub's `BLPOP`, as an `LPOP`.
    Pop(usize),
    Sleep(Ms),
    /// `election_announce`: an id with a term (the one it holds, or not).
    Announce(Id, u64),
    /// `election_read`, by a watching process (its heartbeat) or by none.
    ReadLeader(Option<usize>),
    /// `election_vacate` of a term (`None`: whichever).
    Vacate(Option<u64>),
}

/// A random operation, for the differential runs.
impl Rng {
    /// An operation of `setup`'s run: the election's a quarter of the time in an election's
    /// (the engine's run draws as it did before they were added, so its seeds keep their
    /// sequences).
    fn op(&mut self, setup: &Setup, model: &Server) -> Op {
        if setup.election && self.below(4) == 0 {
            return self.election_op(model);
        }
        let client = self.below(PROCESSES as u64) as u8;
        let id = Id {
            client,
            epoch: self.below(2) as u8,
            process: client,
        };
        match self.below(100) {
            0..=34 => Op::Acquire(
                id,
                match self.below(5) {
                    0 => Mode::Try,
                    1 | 2 => Mode::Wait { known: false },
                    _ => Mode::Wait { known: true },
                },
            ),
            35..=49 => Op::Release(id),
            50..=59 => Op::Extend(id),
            60..=67 => Op::Beat(id.process()),
            68..=77 => Op::Pop(id.process()),
            78..=81 => Op::Reset((self.below(2) == 0).then_some(id)),
            82..=86 => Op::Shrink(id, 1 + self.below(2)),
            87 => Op::ResetAll,
            _ => Op::Sleep(20 + self.below(130)),
        }
    }

    /// An election's operation, or a watching process's pop (of news on top of its inbox
    /// when a process has some: the news lasts only as long as a watcher's heartbeat, and
    /// later mail covers it); the terms it sends are read from
    /// `model`: mostly the one an id holds (or the record's), else one nobody held. Half the
    /// announcements are a holder's, as the crate sends them (once granted).
    fn election_op(&mut self, model: &Server) -> Op {
        let client = self.below(PROCESSES as u64) as u8;
        let id = Id {
            client,
            epoch: self.below(2) as u8,
            process: client,
        };
        let unheld = model.fence + 1;
        match self.below(4) {
            0 => {
                let id = match model.holders.first() {
                    Some(h) if self.below(2) == 0 => h.id,
                    _ => id,
                };
                let term = match model.holder(id) {
                    Some(h) if self.below(4) != 0 => h.token,
                    _ => unheld,
                };
                Op::Announce(id, term)
            }
            1 => Op::ReadLeader((self.below(2) == 0).then_some(id.process())),
            2 => Op::Pop(
                (0..PROCESSES)
                    .find(|&p| matches!(model.inboxes[p].mail.first(), Some(Mail::Watch(_))))
                    .unwrap_or(id.process()),
            ),
            _ => Op::Vacate(match self.below(3) {
                0 => None,
                1 => Some(model.record.map_or(unheld, |r| r.term)),
                _ => Some(unheld),
            }),
        }
    }
}

/// A reply, as the model gives it and as the server's is read.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Acquired(Acquired),
    Held(bool),
    /// queue_shrink's error: the holder holds only this many units.
    CannotGrow(u64),
    /// queue_beat: the server's time when live.
    Beat(Option<Ms>),
    Reset(u64),
    Popped(Option<Element>),
    Lead(Lead),
}

/// Every key, read back from the server.
#[derive(Debug)]
struct Keys {
    holders: Vec<(Id, Ms)>,
    held: BTreeMap<Id, String>,
    queue: Vec<(Id, u64)>,
    wants: BTreeMap<Id, String>,
    tickets: u64,
    fence: u64,
    count: Option<String>,
    beats: Vec<(usize, Ms)>,
    beats_expiry: Option<Ms>,
    /// Each inbox's mail, whether `reset_all`'s wake ends it, and its expiry.
    inboxes: Vec<(Vec<Mail>, bool, Option<Ms>)>,
    /// The leader's record (an election's KEYS[10]).
    record: Option<Record>,
    /// The server's time when they were read (all in one transaction).
    read: Ms,
}

/// "watch:<fencing counter>", or "watch:<term>:<since>:<left>:<id's length>:<id><info>".
fn parse_news(text: &str) -> News {
    let mut fields = text.splitn(5, ':');
    let first = parse_number(fields.next().expect("a term"));
    let Some(since) = fields.next() else {
        return News::Nobody(first);
    };
    let left: i64 = parse_number(fields.next().expect("a lease left"));
    let length = parse_number(fields.next().expect("an id's length"));
    let (id, info) = fields.next().expect("an id").split_at(length);
    News::Leader {
        record: Record {
            term: first,
            id: parse_id(id),
            since: parse_number(since),
            info: parse_info(info),
        },
        left: u64::try_from(left).unwrap_or(INF),
    }
}

fn parse_mail(text: &str) -> Mail {
    if let Some(waiter) = text.strip_prefix("ask:") {
        return Mail::Ask(parse_id(waiter));
    }
    if let Some(news) = text.strip_prefix("watch:") {
        return Mail::Watch(parse_news(news));
    }
    let mut fields = text.splitn(3, ':');
    let mut number = || fields.next().and_then(|f| f.parse().ok());
    let (Some(token), Some(expiry)) = (number(), number()) else {
        panic!("not a grant: {text:?}");
    };
    Mail::Granted {
        token,
        expiry,
        waiter: parse_id(fields.next().expect("a waiter")),
    }
}

/// A call of `script` with the engine's keys (and the leader's record after them for the
/// `election`'s scripts) and `args`.
fn invocation<'a>(script: &'a Script, args: &[String], election: bool) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for part in PARTS {
        invocation.key(key(part));
    }
    if election {
        invocation.key(key(LEADER));
    }
    for arg in args {
        invocation.arg(arg);
    }
    invocation
}

/// Whether two records agree, their `since` within `tol` ms.
fn records_agree(a: &Record, b: &Record, tol: Ms) -> bool {
    a.since.abs_diff(b.since) <= tol
        && Record {
            since: b.since,
            ..*a
        } == *b
}

/// Whether two elements of an inbox agree, their times (claim expiry; since, lease left)
/// within `tol` ms.
fn mail_agrees(a: &Mail, b: &Mail, tol: Ms) -> bool {
    match (a, b) {
        (
            Mail::Granted {
                token: a,
                expiry: x,
                waiter: v,
            },
            Mail::Granted {
                token: b,
                expiry: y,
                waiter: w,
            },
        ) => a == b && v == w && x.abs_diff(*y) <= tol,
        (
            Mail::Watch(News::Leader { record: a, left: x }),
            Mail::Watch(News::Leader { record: b, left: y }),
        ) => records_agree(a, b, tol) && x.abs_diff(*y) <= tol,
        (a, b) => a == b,
    }
}

/// `election_read`'s reply: {1, id, term, since, info, left} or {0, left, waiting, fence}.
fn parse_lead(reply: &Value) -> Lead {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).expect("a text"),
        _ => panic!("election_read answered {reply:?}"),
    };
    let left = |ms: i64| u64::try_from(ms).unwrap_or(INF);
    let Value::Array(items) = reply else {
        panic!("election_read answered {reply:?}");
    };
    match &items[..] {
        [Value::Int(1), id, term, since, info, Value::Int(ms)] => Lead::Leader {
            record: Record {
                term: parse_number(&text(term)),
                id: parse_id(&text(id)),
                since: parse_number(&text(since)),
                info: parse_info(&text(info)),
            },
            left: left(*ms),
        },
        [Value::Int(0), Value::Int(ms), Value::Int(waiting), over] => Lead::Nobody {
            left: left(*ms),
            waiting: *waiting == 1,
            over: parse_number(&text(over)),
        },
        _ => panic!("election_read answered {reply:?}"),
    }
}

/// The seeds the default run sends, which reach every outcome [`Seen::assert_all_reached`]
/// asks for (`MODEL_SEED=<n>` runs seed n instead).
pub const SEEDS: [u64; 8] = [1, 2, 7, 10, 15, 23, 29, 36];

/// The seeds an election's default run sends, which reach every outcome
/// [`Seen::election_reached`] asks for.
pub const ELECTION_SEEDS: [u64; 2] = [1, 9];

/// How many of each outcome the runs saw: a run that saw none of one proves nothing of it.
#[derive(Debug, Default)]
pub struct Seen {
    pub granted: u64,
    /// Grants (in a reply) of a lease without expiry.
    pub granted_without_expiry: u64,
    /// Grants of a lease without expiry to a waiter in line, another live waiter behind it,
    /// and no head wake (a lease without expiry is not "short").
    pub granted_without_expiry_before_a_waiter: u64,
    pub waiting: u64,
    pub refused: u64,
    pub lapsed: u64,
    pub grants_popped: u64,
    /// Pushed grants of a lease without expiry (claimed until the lapse), popped.
    pub grants_without_expiry_popped: u64,
    pub head_wakes_popped: u64,
    /// Shrinks of a holder, and those refused (it would grow).
    pub shrunk: u64,
    pub cannot_grow: u64,
    /// `queue_reset_all`s, the live holders they removed, and their wakes popped.
    pub resets_of_all: u64,
    pub removed_by_resets_of_all: u64,
    pub reset_wakes_popped: u64,
    /// Shrinks that let units go and granted a waiter.
    pub granted_by_shrink: u64,
    pub straddled: u64,
    /// Steps after which a key expired while the keys were read.
    pub expired_while_read: u64,
    /// An election's announcements that held their term (1) and that did not (0).
    pub announced: u64,
    pub not_announced: u64,
    /// Reads of an announced leader; of nobody, with nobody about to lead (`waiting` 0);
    /// of nobody while a holder is about to announce or candidates wait (`waiting` 1).
    pub read_leader: u64,
    pub read_nobody: u64,
    pub read_handing_over: u64,
    /// Vacatings that left the election empty (1), and that did not (0).
    pub vacated: u64,
    pub not_vacated: u64,
    /// Watch news popped: of a new leader, and that nobody leads.
    pub leader_news_popped: u64,
    pub nobody_news_popped: u64,
}

impl Seen {
    /// The default seeds' runs reached every script's outcomes, so that their agreement
    /// means something (the engine's outcomes are asserted by the test itself).
    /// Whether the runs reached every outcome, so that their agreement means something.
    pub fn all_reached(&self) -> bool {
        [
            self.granted,
            self.waiting,
            self.refused,
            self.lapsed,
            self.grants_popped,
            self.head_wakes_popped,
            self.granted_without_expiry,
            self.granted_without_expiry_before_a_waiter,
            self.shrunk,
            self.cannot_grow,
            self.granted_by_shrink,
            self.resets_of_all,
            self.removed_by_resets_of_all,
            self.reset_wakes_popped,
        ]
        .iter()
        .all(|&n| n > 0)
    }

    /// Whether an election's runs reached each of its scripts' outcomes, the news popped,
    /// and the engine's under them.
    pub fn election_reached(&self) -> bool {
        [
            self.granted,
            self.waiting,
            self.lapsed,
            self.grants_popped,
            self.announced,
            self.not_announced,
            self.read_leader,
            self.read_nobody,
            self.read_handing_over,
            self.vacated,
            self.not_vacated,
            self.leader_news_popped,
            self.nobody_news_popped,
        ]
        .iter()
        .all(|&n| n > 0)
    }
}

pub struct Run {
    _server: RedisServer,
    conn: Connection,
    scripts: Scripts,
    setup: &'static Setup,
    /// Whether the server has `PEXPIRETIME` (Redis >= 7); else a TTL is read.
    expire_time: bool,
    pub seen: Seen,
}

impl Run {
    pub fn new(setup: &'static Setup) -> Run {
        let server = RedisServer::start();
        let conn = server.conn();
        Run {
            _server: server,
            conn,
            scripts: Scripts::new(),
            setup,
            expire_time: server_version() >= (7, 0),
            seen: Seen::default(),
        }
    }

    /// Whether the runs so far reached every outcome of the setup's scripts.
    pub fn reached(&self) -> bool {
        if self.setup.election {
            self.seen.election_reached()
        } else {
            self.seen.all_reached()
        }
    }

    fn server_ms(&mut self) -> Ms {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut self.conn).unwrap();
        s * 1000 + us / 1000
    }

    /// Every moment at which a script's outcome turns: expiries and lapses.
    fn deadlines(model: &Server) -> Vec<Ms> {
        let mut at: Vec<Ms> = (model.holders.iter())
            .map(|h| h.expiry)
            .filter(|&e| e != INF)
            .collect();
        at.extend(model.beats.iter().flatten());
        if model.beats.iter().any(Option::is_some) {
            at.push(model.beats_expiry);
        }
        at.extend(
            (model.inboxes.iter())
                .filter(|i| i.exists())
                .map(|i| i.expiry),
        );
        at
    }

    /// Sleeps until no deadline is within `GUARD` ms of the clock.
    fn clear_of_deadlines(&mut self, model: &Server) {
        loop {
            let now = self.server_ms();
            let near = (Self::deadlines(model).into_iter())
                .filter(|&d| d + GUARD >= now && d <= now + GUARD)
                .max();
            match near {
                Some(d) => thread::sleep(Duration::from_millis(d + GUARD + 1 - now)),
                None => return,
            }
        }
    }

    fn on_server(&mut self, op: Op) -> Reply {
        let (scripts, conn, setup) = (&self.scripts, &mut self.conn, self.setup);
        let capacity = setup.capacity.to_string();
        let election = matches!(op, Op::Announce(..) | Op::ReadLeader(_) | Op::Vacate(_));
        let mut invoke = |script: &Script, args: &[String]| -> i64 {
            invocation(script, args, election).invoke(conn).unwrap()
        };
        match op {
            Op::Acquire(id, mode) => {
                let c = usize::from(id.client);
                let (how, process) = match mode {
                    Mode::Try => ("try", "new"),
                    Mode::Wait { known: false } => ("wait", "new"),
                    Mode::Wait { known: true } => ("wait", "known"),
                };
                let args = [
                    id_text(id),
                    setup.units[c].to_string(),
                    capacity.clone(),
                    lease(id).to_string(),
                    LAPSE.to_string(),
                    how.into(),
                    process.into(),
                ];
                let mut invocation = scripts.acquire.prepare_invoke();
                for part in PARTS {
                    invocation.key(key(part));
                }
                let reply: Vec<i64> = invocation.arg(&args[..]).invoke(conn).unwrap();
                Reply::Acquired(match reply[..] {
                    [-2] => Acquired::Lapsed,
                    [1, token, left] => Acquired::Granted {
                        token: token as u64,
                        left: u64::try_from(left).unwrap_or(INF),
                    },
                    [0, 0, 0] => Acquired::Refused,
                    [0, position, next, ticket] => Acquired::Waiting {
                        position: position as u64,
                        next: (next >= 0).then_some(next as Ms),
                        ticket: ticket as u64,
                    },
                    _ => panic!("queue_acquire answered {reply:?}"),
                })
            }
            Op::Release(id) => {
                let n = invoke(&scripts.release, &[id_text(id), capacity]);
                Reply::Held(n == 1)
            }
            Op::Extend(id) => {
                let n = invoke(&scripts.extend, &[id_text(id), lease(id).to_string()]);
                Reply::Held(n == 1)
            }
            Op::Shrink(id, units) => {
                let mut invocation = scripts.shrink.prepare_invoke();
                for part in PARTS {
                    invocation.key(key(part));
                }
                let args = [id_text(id), units.to_string(), capacity];
                let reply: redis::RedisResult<i64> = invocation.arg(&args[..]).invoke(conn);
                match reply {
                    Ok(n) => Reply::Held(n == 1),
                    Err(e) => {
                        // "ERR a holder cannot grow: it holds <n> units"
                        let text = e.to_string();
                        let held = (text.split("it holds ").nth(1))
                            .and_then(|rest| rest.split(' ').next()?.parse().ok());
                        Reply::CannotGrow(held.unwrap_or_else(|| panic!("queue_shrink: {text}")))
                    }
                }
            }
            Op::Beat(p) => {
                let n = invoke(&scripts.beat, &[process_text(p), LAPSE.to_string()]);
                Reply::Beat((n > 0).then_some(n as Ms))
            }
            Op::Reset(id) => {
                let id = id.map(id_text).unwrap_or_default();
                Reply::Reset(invoke(&scripts.reset, &[id, capacity]) as u64)
            }
            Op::ResetAll => {
                Reply::Reset(invoke(&scripts.reset_all, &[SIGNAL_EXPIRY.to_string()]) as u64)
            }
            Op::Pop(p) => {
                let inbox = key(&format!("signal:{}", process_text(p)));
                let popped: Option<String> = conn.lpop(inbox, None).unwrap();
                Reply::Popped(popped.as_deref().map(|text| match text {
                    "reset" => Element::Wake,
                    mail => Element::Mail(parse_mail(mail)),
                }))
            }
            Op::Announce(id, term) => {
                let info = INFO[usize::from(id.client)].to_owned();
                let n = invoke(&scripts.announce, &[id_text(id), term.to_string(), info]);
                Reply::Held(n == 1)
            }
            Op::Vacate(term) => {
                let term = term.map(|t| t.to_string()).unwrap_or_default();
                Reply::Held(invoke(&scripts.vacate, &[term]) == 1)
            }
            Op::ReadLeader(watcher) => {
                let args = match watcher {
                    Some(p) => [process_text(p), LAPSE.to_string()],
                    None => [String::new(), "0".into()],
                };
                let reply: Value = (invocation(&scripts.read, &args, true).invoke(conn)).unwrap();
                Reply::Lead(parse_lead(&reply))
            }
            Op::Sleep(_) => unreachable!(),
        }
    }

    fn in_model(model: &mut Server, op: Op, now: Ms, setup: &Setup) -> Reply {
        let capacity = setup.capacity;
        let bugs = Bugs::default();
        let notes = &mut Notes(None);
        model.expire_keys(now);
        match op {
            Op::Acquire(id, mode) => {
                let c = usize::from(id.client);
                let call = Call {
                    id,
                    units: setup.units[c],
                    capacity,
                    lease: lease(id),
                    lapse: LAPSE,
                    mode,
                };
                Reply::Acquired(model.acquire(&call, now, &bugs, notes).0)
            }
            Op::Release(id) => Reply::Held(model.release(id, capacity, now, &bugs, notes).0),
            Op::Extend(id) => Reply::Held(model.extend(id, lease(id), now)),
            Op::Shrink(id, units) => match model.shrink(id, units, capacity, now, &bugs, notes) {
                Ok(held) => Reply::Held(held),
                Err(units) => Reply::CannotGrow(units),
            },
            Op::Beat(p) => Reply::Beat(model.beat(p, LAPSE, now)),
            Op::Reset(id) => {
                Reply::Reset(model.reset(id, capacity, now, &bugs, notes).0.len() as u64)
            }
            Op::ResetAll => Reply::Reset(model.reset_all(SIGNAL_EXPIRY, now, notes)),
            Op::Pop(p) => Reply::Popped(model.pop_element(p)),
            Op::Announce(id, term) => {
                Reply::Held(model.announce(id, term, INFO[usize::from(id.client)], now))
            }
            Op::ReadLeader(watcher) => Reply::Lead(model.read_leader(watcher, LAPSE, now)),
            Op::Vacate(term) => Reply::Held(model.vacate(term, now)),
            Op::Sleep(_) => unreachable!(),
        }
    }

    /// Every key, read in one transaction with the server's time, so that all are read at
    /// one moment (`Keys::read`): a key that expires while they are read cannot be read
    /// alive in one read and gone in the next (its mail and then its expiry, or the
    /// heartbeats and then an inbox with the same expiry), however slow the machine.
    fn read_keys(&mut self) -> Keys {
        let expiry_cmd = if self.expire_time {
            "PEXPIRETIME"
        } else {
            "PTTL"
        };
        let inbox_keys: Vec<String> = (0..PROCESSES)
            .map(|p| key(&format!("signal:{}", process_text(p))))
            .collect();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .zrange_withscores(key("holders"), 0, -1)
            .hgetall(key("held"))
            .zrange_withscores(key("queue"), 0, -1)
            .hgetall(key("wants"))
            .zrange_withscores(key("beats"), 0, -1)
            .cmd(expiry_cmd)
            .arg(key("beats"))
            .get(key("tickets"))
            .get(key("fence"))
            .get(key("count"))
            .hgetall(key(LEADER));
        for inbox in &inbox_keys {
            pipe.lrange(inbox, 0, -1).cmd(expiry_cmd).arg(inbox);
        }
        pipe.cmd("TIME");
        let values: Vec<Value> = pipe.query(&mut self.conn).unwrap();
        let mut values = values.into_iter();
        let mut next = || values.next().expect("a reply for each read");
        fn parse<T: FromRedisValue>(value: Value) -> T {
            T::from_redis_value(value).expect("a reply of its type")
        }
        let number = |s: Option<String>| s.map_or(0, |s| s.parse().unwrap());
        let holders: Vec<(String, String)> = parse(next());
        let held: BTreeMap<String, String> = parse(next());
        let queue: Vec<(String, u64)> = parse(next());
        let wants: BTreeMap<String, String> = parse(next());
        let beats: Vec<(String, Ms)> = parse(next());
        let beats_expiry: i64 = parse(next());
        let tickets = number(parse(next()));
        let fence = number(parse(next()));
        let count: Option<String> = parse(next());
        let mut record: BTreeMap<String, String> = parse(next());
        let recorded = !record.is_empty();
        let mut field = |name: &str| record.remove(name).expect("a record's field");
        let record = recorded.then(|| Record {
            term: parse_number(&field("term")),
            id: parse_id(&field("id")),
            since: parse_number(&field("since")),
            info: parse_info(&field("info")),
        });
        let mut inboxes = Vec::new();
        for _ in 0..PROCESSES {
            let mail: Vec<String> = parse(next());
            let expiry: i64 = parse(next());
            inboxes.push((mail, expiry));
        }
        let (s, us): (u64, u64) = parse(next());
        let read = s * 1000 + us / 1000;
        // PEXPIRETIME says when; PTTL how long from now (then -2: gone, -1: no expiry).
        let at = |expiry: i64| {
            let expiry = u64::try_from(expiry).ok()?;
            Some(if self.expire_time {
                expiry
            } else {
                read + expiry
            })
        };
        let beats_expiry = at(beats_expiry);
        let inboxes = (inboxes.into_iter())
            .map(|(mut mail, expiry): (Vec<String>, i64)| {
                let wake = mail.last().is_some_and(|m| m == "reset");
                if wake {
                    mail.pop();
                }
                (
                    mail.iter().map(|m| parse_mail(m)).collect(),
                    wake,
                    at(expiry),
                )
            })
            .collect();
        Keys {
            holders: (holders.into_iter())
                .map(|(id, score)| (parse_id(&id), parse_expiry(&score)))
                .collect(),
            held: held.into_iter().map(|(id, v)| (parse_id(&id), v)).collect(),
            queue: queue
                .into_iter()
                .map(|(id, t)| (parse_id(&id), t))
                .collect(),
            wants: wants
                .into_iter()
                .map(|(id, v)| (parse_id(&id), v))
                .collect(),
            tickets,
            fence,
            count,
            // By process, as the model keeps them (the ZSET is by time).
            beats: {
                let mut beats: Vec<(usize, Ms)> = (beats.into_iter())
                    .map(|(p, at)| (parse_process(&p), at))
                    .collect();
                beats.sort();
                beats
            },
            beats_expiry,
            inboxes,
            record,
            read,
        }
    }

    /// What differs between the model's reply and keys and the server's; times within `tol`
    /// ms agree.
    fn differences(model: &Server, ours: &Reply, theirs: &Reply, keys: &Keys, tol: Ms) -> String {
        let mut out = String::new();
        let near = |a: Ms, b: Ms| a.abs_diff(b) <= tol;
        let replies_agree = match (ours, theirs) {
            (
                Reply::Acquired(Acquired::Granted { token: a, left: x }),
                Reply::Acquired(Acquired::Granted { token: b, left: y }),
            ) => a == b && near(*x, *y),
            (
                Reply::Acquired(Acquired::Waiting {
                    position: a,
                    next: x,
                    ..
                }),
                Reply::Acquired(Acquired::Waiting {
                    position: b,
                    next: y,
                    ..
                }),
            ) => {
                a == b
                    && match (x, y) {
                        (Some(x), Some(y)) => near(*x, *y),
                        (x, y) => x == y,
                    }
            }
            (Reply::Beat(Some(x)), Reply::Beat(Some(y))) => near(*x, *y),
            (Reply::Popped(Some(Element::Mail(a))), Reply::Popped(Some(Element::Mail(b)))) => {
                mail_agrees(a, b, tol)
            }
            (
                Reply::Lead(Lead::Leader { record: a, left: x }),
                Reply::Lead(Lead::Leader { record: b, left: y }),
            ) => records_agree(a, b, tol) && near(*x, *y),
            (
                Reply::Lead(Lead::Nobody {
                    left: x,
                    waiting: a,
                    over: v,
                }),
                Reply::Lead(Lead::Nobody {
                    left: y,
                    waiting: b,
                    over: w,
                }),
            ) => a == b && v == w && near(*x, *y),
            (ours, theirs) => ours == theirs,
        };
        if !replies_agree {
            let _ = writeln!(out, "  reply: model {ours:?}, server {theirs:?}");
        }
        let ids: Vec<Id> = model.holders.iter().map(|h| h.id).collect();
        let mut real_ids: Vec<Id> = keys.holders.iter().map(|h| h.0).collect();
        real_ids.sort();
        if ids != real_ids {
            let _ = writeln!(out, "  holders: model {ids:?}, server {real_ids:?}");
        }
        for h in &model.holders {
            let entry = format!("{}:{}", h.units, h.token);
            if keys.held.get(&h.id) != Some(&entry) {
                let _ = writeln!(
                    out,
                    "  held {}: model {entry}, server {:?}",
                    h.id,
                    keys.held.get(&h.id)
                );
            }
            if let Some(&(_, at)) = keys.holders.iter().find(|r| r.0 == h.id)
                && !near(h.expiry, at)
            {
                let _ = writeln!(out, "  {} expires: model {}, server {at}", h.id, h.expiry);
            }
        }
        if keys.held.len() != model.holders.len() {
            let _ = writeln!(out, "  held: server {:?}", keys.held);
        }
        let queue: Vec<(Id, u64)> = model.queue.iter().map(|w| (w.id, w.ticket)).collect();
        if queue != keys.queue {
            let _ = writeln!(out, "  queue: model {queue:?}, server {:?}", keys.queue);
        }
        let wants: BTreeMap<Id, String> = (model.queue.iter())
            .map(|w| (w.id, format!("{}:{}", w.units, w.lease)))
            .collect();
        if wants != keys.wants {
            let _ = writeln!(out, "  wants: model {wants:?}, server {:?}", keys.wants);
        }
        if (model.tickets, model.fence) != (keys.tickets, keys.fence) {
            let _ = writeln!(
                out,
                "  tickets, fence: model {:?}, server {:?}",
                (model.tickets, model.fence),
                (keys.tickets, keys.fence)
            );
        }
        let count = model
            .count
            .map(|Count { units, fence, size }| format!("{units}:{fence}:{size}"));
        if count != keys.count {
            let _ = writeln!(out, "  count: model {count:?}, server {:?}", keys.count);
        }
        let beats: Vec<(usize, Ms)> = (model.beats.iter().enumerate())
            .filter_map(|(p, b)| b.map(|b| (p, b)))
            .collect();
        let beats_agree = beats.len() == keys.beats.len()
            && (beats.iter().zip(&keys.beats)).all(|(a, b)| a.0 == b.0 && near(a.1, b.1));
        if !beats_agree {
            let _ = writeln!(out, "  beats: model {beats:?}, server {:?}", keys.beats);
        }
        if let (Some(at), false) = (keys.beats_expiry, beats.is_empty())
            && !near(model.beats_expiry, at)
        {
            let _ = writeln!(
                out,
                "  beats expire: model {}, server {at}",
                model.beats_expiry
            );
        }
        for (p, (inbox, (mail, wake, expiry))) in
            (model.inboxes.iter().zip(&keys.inboxes)).enumerate()
        {
            let mail_agrees = inbox.mail.len() == mail.len()
                && (inbox.mail.iter().zip(mail)).all(|(a, b)| mail_agrees(a, b, tol));
            let expiry_agrees = match (mail.is_empty() && !wake, expiry) {
                (true, _) => true,
                (false, Some(at)) => near(inbox.expiry, *at),
                (false, None) => false,
            };
            if !mail_agrees || inbox.wake != *wake || !expiry_agrees {
                let _ = writeln!(
                    out,
                    "  inbox {p}: model {:?} (wake {}) until {}, server {mail:?} (wake {wake}) \
                     until {expiry:?}",
                    inbox.mail, inbox.wake, inbox.expiry
                );
            }
        }
        let record_agrees = match (&model.record, &keys.record) {
            (Some(a), Some(b)) => records_agree(a, b, tol),
            (a, b) => a == b,
        };
        if !record_agrees {
            let _ = writeln!(
                out,
                "  record: model {:?}, server {:?}",
                model.record, keys.record
            );
        }
        out
    }

    /// `model` with each of its inboxes and its heartbeats gone that the server no longer has
    /// and that expire before `read`.
    fn expired_while_read(model: &Server, keys: &Keys, read: Ms) -> Server {
        let mut expired = model.clone();
        for (inbox, (mail, wake, _)) in expired.inboxes.iter_mut().zip(&keys.inboxes) {
            if inbox.exists() && inbox.expiry < read && mail.is_empty() && !wake {
                *inbox = Inbox::default();
            }
        }
        if keys.beats.is_empty()
            && expired.beats.iter().any(Option::is_some)
            && expired.beats_expiry < read
        {
            expired.beats.iter_mut().for_each(|b| *b = None);
            expired.beats_expiry = 0;
        }
        expired
    }

    /// `op` in the model at ms `now`, its fencing tokens made of the server's microsecond
    /// within that ms: what the server's counter says, less the tokens the step granted, when
    /// it lies in that ms (the model takes the server's exact time, as [`take_times`] does).
    /// The model's first token comes from the counter instead when that is above the clock,
    /// which a rerun at that microsecond finds too.
    fn at_the_servers_microsecond(
        model: &Server,
        op: Op,
        now: Ms,
        setup: &Setup,
        keys: &Keys,
    ) -> (Server, Reply) {
        let mut candidate = model.clone();
        let ours = Self::in_model(&mut candidate, op, now, setup);
        let ms = now * 1000..(now + 1) * 1000;
        if candidate.fence == model.fence {
            return (candidate, ours);
        }
        let first = (model.fence + 1).max(ms.start);
        let granted = candidate.fence - first + 1;
        let us = keys.fence.saturating_sub(granted - 1);
        if !ms.contains(&us) {
            return (candidate, ours);
        }
        let mut candidate = model.clone();
        candidate.clock_us = Some(us);
        let ours = Self::in_model(&mut candidate, op, now, setup);
        candidate.clock_us = None;
        (candidate, ours)
    }

    /// The model takes the server's exact times, now that they agree within the window.
    fn take_times(model: &mut Server, keys: &Keys) {
        for h in &mut model.holders {
            if let Some(&(_, at)) = keys.holders.iter().find(|r| r.0 == h.id) {
                h.expiry = at;
            }
        }
        for &(p, at) in &keys.beats {
            model.beats[p] = Some(at);
        }
        if let Some(at) = keys.beats_expiry {
            model.beats_expiry = at;
        }
        model.record = keys.record;
        for (inbox, (mail, wake, expiry)) in model.inboxes.iter_mut().zip(&keys.inboxes) {
            *inbox = match expiry {
                Some(at) if !mail.is_empty() || *wake => Inbox {
                    mail: mail.clone(),
                    wake: *wake,
                    expiry: *at,
                },
                _ => Inbox::default(),
            };
        }
    }

    fn count(&mut self, op: Op, reply: &Reply) {
        if let (Op::Shrink(..), Reply::Held(true)) = (op, reply) {
            self.seen.shrunk += 1;
        }
        if let (Op::ResetAll, Reply::Reset(n)) = (op, reply) {
            self.seen.resets_of_all += 1;
            self.seen.removed_by_resets_of_all += n;
        }
        match (op, reply) {
            (Op::Announce(..), Reply::Held(true)) => self.seen.announced += 1,
            (Op::Announce(..), Reply::Held(false)) => self.seen.not_announced += 1,
            (Op::Vacate(_), Reply::Held(true)) => self.seen.vacated += 1,
            (Op::Vacate(_), Reply::Held(false)) => self.seen.not_vacated += 1,
            _ => {}
        }
        match reply {
            Reply::Acquired(Acquired::Granted { left, .. }) => {
                self.seen.granted += 1;
                self.seen.granted_without_expiry += u64::from(*left == INF);
            }
            Reply::Acquired(Acquired::Waiting { .. }) => self.seen.waiting += 1,
            Reply::Acquired(Acquired::Refused) => self.seen.refused += 1,
            Reply::Acquired(Acquired::Lapsed) => self.seen.lapsed += 1,
            Reply::Popped(Some(Element::Mail(Mail::Granted { waiter, .. }))) => {
                self.seen.grants_popped += 1;
                self.seen.grants_without_expiry_popped +=
                    u64::from((waiter.client, waiter.epoch) == NO_EXPIRY);
            }
            Reply::Popped(Some(Element::Mail(Mail::Ask(_)))) => self.seen.head_wakes_popped += 1,
            Reply::Popped(Some(Element::Wake)) => self.seen.reset_wakes_popped += 1,
            Reply::Popped(Some(Element::Mail(Mail::Watch(News::Leader { .. })))) => {
                self.seen.leader_news_popped += 1
            }
            Reply::Popped(Some(Element::Mail(Mail::Watch(News::Nobody(_))))) => {
                self.seen.nobody_news_popped += 1
            }
            Reply::Lead(Lead::Leader { .. }) => self.seen.read_leader += 1,
            Reply::Lead(Lead::Nobody { waiting: false, .. }) => self.seen.read_nobody += 1,
            Reply::Lead(Lead::Nobody { waiting: true, .. }) => self.seen.read_handing_over += 1,
            Reply::CannotGrow(_) => self.seen.cannot_grow += 1,
            _ => {}
        }
    }

    /// `steps` random operations from `seed` on an empty primitive, on the server and in the
    /// model; panics at the first that differs, naming the seed and the operations so far.
    pub fn run(&mut self, seed: u64, steps: usize) {
        let _: () = redis::cmd("FLUSHALL").query(&mut self.conn).unwrap();
        let mut rng = Rng(seed);
        let mut model = Server::new(PROCESSES);
        let mut history = String::new();
        for step in 0..steps {
            let op = rng.op(self.setup, &model);
            if let Op::Sleep(ms) = op {
                let _ = writeln!(history, "{step}: sleep {ms} ms");
                thread::sleep(Duration::from_millis(ms));
                continue;
            }
            self.clear_of_deadlines(&model);
            let before = self.server_ms();
            let theirs = self.on_server(op);
            let after = self.server_ms();
            let keys = self.read_keys();
            let _ = writeln!(history, "{step}: t={before}..{after} {op:?} → {theirs:?}");
            // The script ran at `before`, or at a later ms up to `after`: past a deadline it
            // straddled, and with fencing tokens of that ms.
            let moments: Vec<Ms> = (before..=after).collect();
            let tol = after - before + 1;
            let mut first = None;
            for (i, &now) in moments.iter().enumerate() {
                let (mut candidate, ours) =
                    Self::at_the_servers_microsecond(&model, op, now, self.setup, &keys);
                let mut differences = Self::differences(&candidate, &ours, &theirs, &keys, tol);
                if !differences.is_empty() {
                    // The keys are read after the call, all at one moment (`Keys::read`): an
                    // inbox or the heartbeats may expire in between, however slow the machine
                    // (the guard before the call covers only a few ms). Each key is taken as
                    // expired on its own, when the server no longer has it and the model has it
                    // expire by then, within the call's window as every time here: Redis 7
                    // dates a script's `PEXPIRE` by the time its event loop woke
                    // (redis/redis#10300), which on a loaded machine is earlier.
                    let expired = Self::expired_while_read(&candidate, &keys, keys.read + tol);
                    if Self::differences(&expired, &ours, &theirs, &keys, tol).is_empty() {
                        self.seen.expired_while_read += 1;
                        candidate = expired;
                        differences.clear();
                    }
                }
                if differences.is_empty() {
                    if i > 0 {
                        self.seen.straddled += 1;
                    }
                    Self::take_times(&mut candidate, &keys);
                    // A grant without expiry from the line, with a live waiter behind it: no
                    // head wake (its lease is not "short").
                    let from_line = |w: &&Waiter| (w.id.client, w.id.epoch) == NO_EXPIRY;
                    let heads = |m: &Server| {
                        (m.inboxes.iter().flat_map(|i| &i.mail))
                            .filter(|m| matches!(m, Mail::Ask(_)))
                            .count()
                    };
                    if let Some(w) = model.queue.iter().find(from_line)
                        && model.beats_past(w.id.process(), now)
                        && candidate.holder(w.id).is_some()
                        && (candidate.queue.iter())
                            .any(|b| candidate.beats_past(b.id.process(), now))
                        && heads(&candidate) <= heads(&model)
                    {
                        self.seen.granted_without_expiry_before_a_waiter += 1;
                    }
                    if let (Op::Shrink(id, units), Reply::Held(true)) = (op, &theirs)
                        && model.holder(id).is_some_and(|h| h.units > units)
                        && candidate.fence > model.fence
                    {
                        self.seen.granted_by_shrink += 1;
                    }
                    model = candidate;
                    first = None;
                    break;
                }
                first.get_or_insert(differences);
            }
            if let Some(differences) = first {
                panic!(
                    "seed {seed} (MODEL_SEED={seed}): step {step} differs from the scripts:\n\
                     {differences}the operations:\n{history}the model before the step: \
                     {model:#?}"
                );
            }
            self.count(op, &theirs);
        }
    }
}
