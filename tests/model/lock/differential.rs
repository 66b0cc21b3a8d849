//! The model's server rules against the real ones: seeded random operation sequences, run on
//! a `redis-server` (the scripts' own texts, and the crate's public API) and on `Server`, must
//! answer alike and leave the same owner, fencing counter and signal list. The scripts' run
//! covers `give_back.lua` too (Redlock's, which the public API's single-server lock never
//! sends), with and without its signal.
//!
//! Time: a tick is a real sleep longer than the short expiry, so after a tick every short key is
//! gone on both sides and every long one is there; between ticks nothing is compared to the
//! millisecond (a TTL is compared by class: none, short, long). A run where the operations
//! between two ticks took so long that a short key might have expired among them proves
//! nothing and is run again.

use std::time::{Duration, Instant};

use redis::{Script, Value};
use redis_blpop_lock::{Error, Lock};

use super::server::{ExtendReply, Flaw, Server, Tick, TryReply, Ttl};
use crate::support::RedisServer;
use crate::Rng;

/// The short expiry (a key that is gone after a tick), and the tick's sleep.
const SHORT_MS: u64 = 150;
const TICK_SLEEP: Duration = Duration::from_millis(230);
/// Past this since a short expiry was set, a key may be gone before the model says: the
/// comparison would prove nothing.
const GUARD: Duration = Duration::from_millis(100);
/// The long expiry: far past any run.
const LONG_MS: u64 = 600_000;
const LONG_TICKS: Tick = 10_000;
/// The seeds CI runs; `MODEL_SEED=<n>` runs that one as well.
const SEEDS: [u64; 3] = [1, 2, 3];
const OPS: usize = 40;

fn seeds() -> Vec<u64> {
    let mut seeds = SEEDS.to_vec();
    if let Some(seed) = std::env::var("MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        seeds.push(seed);
    }
    seeds
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    Short,
    Long,
    Forever,
}

impl Span {
    fn random(rng: &mut Rng, forever: bool) -> Span {
        match rng.below(if forever { 3 } else { 2 }) {
            0 => Span::Short,
            1 => Span::Long,
            _ => Span::Forever,
        }
    }

    fn ticks(self) -> Option<Tick> {
        match self {
            Span::Short => Some(1),
            Span::Long => Some(LONG_TICKS),
            Span::Forever => None,
        }
    }

    fn ms(self) -> u64 {
        match self {
            Span::Short => SHORT_MS,
            Span::Long => LONG_MS,
            Span::Forever => 0,
        }
    }
}

/// The class of a TTL: what survives a tick and what does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TtlClass {
    Gone,
    Forever,
    Short,
    Long,
}

fn class_of_model(ttl: Option<Ttl>) -> TtlClass {
    match ttl {
        None => TtlClass::Gone,
        Some(Ttl::Forever) => TtlClass::Forever,
        Some(Ttl::Left(1)) => TtlClass::Short,
        Some(Ttl::Left(_)) => TtlClass::Long,
    }
}

fn class_of_pttl(pttl: i64) -> TtlClass {
    match pttl {
        -2 => TtlClass::Gone,
        -1 => TtlClass::Forever,
        ms if ms <= SHORT_MS as i64 => TtlClass::Short,
        _ => TtlClass::Long,
    }
}

/// Owner, fencing counter, signal list length and the lock's TTL class.
#[derive(Debug, PartialEq, Eq)]
struct Keys {
    owner: Option<String>,
    /// The counter's rank among the tokens ([`Ranks`]).
    fence: Option<usize>,
    signals: usize,
    ttl: TtlClass,
}

/// Fencing tokens by their order: the model's are made of its ticks and the server's of its
/// milliseconds (a hybrid logical clock), so the two sides agree on the order in which tokens
/// came, not on their values.
#[derive(Default)]
struct Ranks(Vec<u64>);

impl Ranks {
    /// `token`'s place among the tokens seen so far, from 1; a token above them all is the
    /// next place, and one below the last that is none of them is 0, which no token has.
    fn of(&mut self, token: Option<u64>) -> Option<usize> {
        let token = token?;
        if let Some(at) = self.0.iter().position(|&t| t == token) {
            return Some(at + 1);
        }
        if self.0.last().is_none_or(|&last| token > last) {
            self.0.push(token);
            return Some(self.0.len());
        }
        Some(0)
    }

    fn of_try(&mut self, reply: TryReply) -> TryReply {
        match reply {
            TryReply::Acquired(token) => TryReply::Acquired(self.of(token).map(|r| r as u64)),
            busy => busy,
        }
    }
}

fn model_keys(server: &Server, ranks: &mut Ranks) -> Keys {
    let read = server.read();
    Keys {
        owner: read.owner.map(id),
        fence: ranks.of(read.fence),
        signals: usize::from(server.signal.is_some()),
        ttl: class_of_model(read.ttl),
    }
}

fn real_keys(conn: &mut redis::Connection, name: &str, ranks: &mut Ranks) -> Keys {
    let (owner, fence, signals, pttl): (Option<String>, Option<u64>, usize, i64) = redis::pipe()
        .get(format!("lock:{name}"))
        .get(format!("lock-fence:{name}"))
        .llen(format!("lock-signal:{name}"))
        .pttl(format!("lock:{name}"))
        .query(conn)
        .unwrap();
    Keys {
        owner,
        fence: ranks.of(fence),
        signals,
        ttl: class_of_pttl(pttl),
    }
}

fn id(client: u8) -> String {
    format!("c{client}")
}

/// A run that proves nothing: a short key may have expired where the model says it is there.
struct TooSlow;

/// When the first short expiry since the last tick was set: the operations after it must end
/// within `GUARD`.
struct Clock(Option<Instant>);

impl Clock {
    fn short_set(&mut self, span: Span) {
        if span == Span::Short && self.0.is_none() {
            self.0 = Some(Instant::now());
        }
    }

    fn check(&self) -> Result<(), TooSlow> {
        match self.0 {
            Some(set) if set.elapsed() >= GUARD => Err(TooSlow),
            _ => Ok(()),
        }
    }

    fn tick(&mut self, server: &mut Server) {
        std::thread::sleep(TICK_SLEEP);
        server.advance(1);
        self.0 = None;
    }
}

/// Runs `run(seed)` for each seed, again (up to three times) when it was too slow to prove
/// anything.
fn each_seed(what: &str, mut run: impl FnMut(u64) -> Result<(), TooSlow>) {
    for seed in seeds() {
        let proved = (0..3).any(|_| run(seed).is_ok());
        assert!(
            proved,
            "{what}, seed {seed}: too slow three times to compare"
        );
    }
}

/// The scripts' replies, in the model's terms.
fn parse_try(reply: &Value) -> TryReply {
    let Value::Array(items) = reply else {
        panic!("acquire.lua answered {reply:?}")
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(token)] => TryReply::Acquired(Some(*token as u64)),
        [Value::Int(0), Value::BulkString(owner), Value::Int(pttl)] => parse_busy(owner, *pttl),
        other => panic!("acquire.lua answered {other:?}"),
    }
}

fn parse_busy(owner: &[u8], pttl: i64) -> TryReply {
    let owner = std::str::from_utf8(owner).unwrap();
    let owner: u8 = owner.trim_start_matches('c').parse().unwrap();
    // The TTL's class only; the model's ticks are not milliseconds.
    let ttl = match class_of_pttl(pttl) {
        TtlClass::Forever => Ttl::Forever,
        TtlClass::Short => Ttl::Left(1),
        TtlClass::Long | TtlClass::Gone => Ttl::Left(LONG_TICKS),
    };
    TryReply::Busy { owner, ttl }
}

/// The model's try reply with a long TTL's exact ticks replaced by its class.
fn classed(reply: TryReply) -> TryReply {
    match reply {
        TryReply::Busy {
            owner,
            ttl: Ttl::Left(left),
        } if left > 1 => TryReply::Busy {
            owner,
            ttl: Ttl::Left(LONG_TICKS),
        },
        other => other,
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Try {
        who: u8,
        expire: Span,
        fencing: bool,
    },
    Unlock {
        who: u8,
        signal: Span,
    },
    Extend {
        who: u8,
        expire: Span,
    },
    Reset {
        owner: u8,
        signal: Span,
    },
    /// `give_back.lua`, with a signal of that expiry or none (`ARGV[2]` "0").
    GiveBack {
        who: u8,
        signal: Option<Span>,
    },
    Pop,
    Tick,
}

fn random_op(rng: &mut Rng) -> Op {
    let who = rng.below(3) as u8;
    match rng.below(23) {
        0..=6 => Op::Try {
            who,
            expire: Span::random(rng, true),
            fencing: rng.below(4) != 0,
        },
        7..=10 => Op::Unlock {
            who,
            signal: Span::random(rng, false),
        },
        11..=14 => Op::Extend {
            who,
            expire: Span::random(rng, false),
        },
        15 | 16 => Op::Reset {
            owner: who,
            signal: Span::random(rng, false),
        },
        17 => Op::Pop,
        18..=20 => Op::GiveBack {
            who,
            signal: (rng.below(2) == 0).then(|| Span::random(rng, false)),
        },
        _ => Op::Tick,
    }
}

struct Scripts {
    acquire: Script,
    unlock: Script,
    extend: Script,
    reset: Script,
    give_back: Script,
}

impl Scripts {
    fn load() -> Scripts {
        Scripts {
            acquire: Script::new(include_str!("../../../scripts/acquire.lua")),
            unlock: Script::new(include_str!("../../../scripts/unlock.lua")),
            extend: Script::new(include_str!("../../../scripts/extend.lua")),
            reset: Script::new(include_str!("../../../scripts/reset.lua")),
            give_back: Script::new(include_str!("../../../scripts/give_back.lua")),
        }
    }
}

/// How many give-backs the scripts' runs compared: of the owner with a signal and without,
/// and of another (0): a run that saw none of one proves nothing of it.
#[derive(Debug, Default)]
struct GaveBack {
    signalled: u64,
    quiet: u64,
    not_ours: u64,
}

impl GaveBack {
    fn all_reached(&self) -> bool {
        self.signalled > 0 && self.quiet > 0 && self.not_ours > 0
    }

    fn count(&mut self, signal: Option<Span>, given: bool) {
        match (given, signal) {
            (false, _) => self.not_ours += 1,
            (true, Some(_)) => self.signalled += 1,
            (true, None) => self.quiet += 1,
        }
    }
}

/// One seed's operations on the scripts and on the model's server, compared after each.
fn scripts_run(
    conn: &mut redis::Connection,
    scripts: &Scripts,
    seed: u64,
    gave_back: &mut GaveBack,
) -> Result<(), TooSlow> {
    let name = format!("s{seed}");
    let (lock, signal, fence) = (
        format!("lock:{name}"),
        format!("lock-signal:{name}"),
        format!("lock-fence:{name}"),
    );
    let _: () = redis::cmd("DEL")
        .arg(&lock)
        .arg(&signal)
        .arg(&fence)
        .query(conn)
        .unwrap();
    let mut rng = Rng(seed);
    let mut model = Server::new(Flaw::None);
    let mut clock = Clock(None);
    let (mut real_ranks, mut model_ranks) = (Ranks::default(), Ranks::default());
    for step in 0..OPS {
        let op = random_op(&mut rng);
        let (real, expected): (String, String) = match op {
            Op::Try {
                who,
                expire,
                fencing,
            } => {
                clock.short_set(expire);
                let real = if fencing {
                    let reply: Value = scripts
                        .acquire
                        .key(&lock)
                        .key(&fence)
                        .arg(id(who))
                        .arg(expire.ms())
                        .invoke(conn)
                        .unwrap();
                    parse_try(&reply)
                } else {
                    // The crate's try without fencing: SET NX [PX], GET, PTTL.
                    let mut set = redis::cmd("SET");
                    set.arg(&lock).arg(id(who)).arg("NX");
                    if expire != Span::Forever {
                        set.arg("PX").arg(expire.ms());
                    }
                    let (taken, owner, pttl): (Option<String>, Vec<u8>, i64) = redis::pipe()
                        .add_command(set)
                        .get(&lock)
                        .pttl(&lock)
                        .query(conn)
                        .unwrap();
                    match taken {
                        Some(_) => TryReply::Acquired(None),
                        None => parse_busy(&owner, pttl),
                    }
                };
                let real = real_ranks.of_try(real);
                let expected =
                    model_ranks.of_try(classed(model.acquire(who, expire.ticks(), fencing)));
                (format!("{real:?}"), format!("{expected:?}"))
            }
            Op::Unlock { who, signal: span } => {
                clock.short_set(span);
                let real: i64 = scripts
                    .unlock
                    .key(&lock)
                    .key(&signal)
                    .arg(id(who))
                    .arg(span.ms())
                    .invoke(conn)
                    .unwrap();
                let released = model.unlock(who, span.ticks().unwrap());
                (real.to_string(), if released { "0" } else { "1" }.into())
            }
            Op::Extend { who, expire } => {
                clock.short_set(expire);
                let real: i64 = scripts
                    .extend
                    .key(&lock)
                    .arg(id(who))
                    .arg(expire.ms())
                    .invoke(conn)
                    .unwrap();
                let expected = match model.extend(who, expire.ticks().unwrap()) {
                    ExtendReply::Yes => 0,
                    ExtendReply::NotOurs => 1,
                    ExtendReply::NoExpiry => 2,
                };
                (real.to_string(), expected.to_string())
            }
            Op::Reset {
                owner,
                signal: span,
            } => {
                clock.short_set(span);
                let real: i64 = scripts
                    .reset
                    .key(&lock)
                    .key(&signal)
                    .arg(id(owner))
                    .arg(span.ms())
                    .arg("0")
                    .invoke(conn)
                    .unwrap();
                let deleted = model.reset(owner, span.ticks().unwrap());
                (real.to_string(), if deleted { "0" } else { "1" }.into())
            }
            Op::GiveBack { who, signal: span } => {
                if let Some(span) = span {
                    clock.short_set(span);
                }
                // The crate's arguments (`protocol::lock::give_back`), with the run's spans
                // for the signal's expiry.
                let real: i64 = scripts
                    .give_back
                    .key(&lock)
                    .key(&signal)
                    .arg(id(who))
                    .arg(if span.is_some() { "1" } else { "0" })
                    .arg(span.unwrap_or(Span::Short).ms())
                    .invoke(conn)
                    .unwrap();
                let given = model.give_back(who, span.and_then(Span::ticks));
                (real.to_string(), u8::from(given).to_string())
            }
            Op::Pop => {
                // What a `BLPOP` that finds a signal does to the list.
                let real: Option<String> = redis::cmd("LPOP").arg(&signal).query(conn).unwrap();
                (real.is_some().to_string(), model.pop_signal().to_string())
            }
            Op::Tick => {
                clock.tick(&mut model);
                (String::new(), String::new())
            }
        };
        let keys = real_keys(conn, &name, &mut real_ranks);
        clock.check()?;
        assert_eq!(
            real, expected,
            "seed {seed}, step {step}: {op:?} answered differently (real, model)"
        );
        assert_eq!(
            keys,
            model_keys(&model, &mut model_ranks),
            "seed {seed}, step {step}: after {op:?} the keys differ (real, model)"
        );
        if let Op::GiveBack { signal, .. } = op {
            gave_back.count(signal, real == "1");
        }
    }
    Ok(())
}

#[test]
fn differential_the_scripts_answer_and_change_the_keys_as_the_model_server_does() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let scripts = Scripts::load();
    let mut compared = 0;
    let mut gave_back = GaveBack::default();
    each_seed("scripts", |seed| {
        scripts_run(&mut conn, &scripts, seed, &mut gave_back)?;
        compared += 1;
        Ok(())
    });
    assert!(compared >= SEEDS.len());
    println!("plain lock, differential: give-backs compared {gave_back:?}");
    assert!(gave_back.all_reached(), "{gave_back:?}");
}

/// What a handle of the crate believes, as the model has it: its token and the tick its lease
/// passes, and whether it was marked lost.
#[derive(Clone, Copy, Debug)]
struct Belief {
    token: u64,
    until: Option<Tick>,
    lost: bool,
}

impl Belief {
    fn is_lost(&self, now: Tick) -> bool {
        self.lost || self.until.is_some_and(|until| now >= until)
    }
}

#[derive(Clone, Copy, Debug)]
enum ApiOp {
    TryAcquire(u8),
    Release(u8),
    Extend(u8, Span),
    Reset(u8),
    Tick,
}

impl ApiOp {
    /// The handle the operation is called on.
    fn who(self) -> u8 {
        match self {
            ApiOp::TryAcquire(who)
            | ApiOp::Release(who)
            | ApiOp::Extend(who, _)
            | ApiOp::Reset(who) => who,
            ApiOp::Tick => 0,
        }
    }
}

/// Each handle's own expiry: handle 0 a short one, 1 a long one, 2 none.
const HANDLE_SPANS: [Span; 3] = [Span::Short, Span::Long, Span::Forever];

/// One seed's operations through the crate's public API, against the model's server and the
/// handles' beliefs as the model has them.
fn api_run(client: &redis::Client, conn: &mut redis::Connection, seed: u64) -> Result<(), TooSlow> {
    let name = format!("a{seed}");
    let _: () = redis::cmd("DEL")
        .arg(format!("lock:{name}"))
        .arg(format!("lock-signal:{name}"))
        .arg(format!("lock-fence:{name}"))
        .query(conn)
        .unwrap();
    let handles: Vec<Lock> = (0..3u8)
        .map(|i| {
            let mut builder = Lock::builder(client, &name)
                .id(id(i))
                .fencing(true)
                .signal_expire(Duration::from_millis(SHORT_MS));
            if HANDLE_SPANS[usize::from(i)] != Span::Forever {
                builder = builder.expire(Duration::from_millis(HANDLE_SPANS[usize::from(i)].ms()));
            }
            builder.build().unwrap()
        })
        .collect();
    let mut beliefs: [Option<Belief>; 3] = [None; 3];
    let mut rng = Rng(seed ^ 0xa91);
    let mut model = Server::new(Flaw::None);
    let mut clock = Clock(None);
    let (mut real_ranks, mut model_ranks) = (Ranks::default(), Ranks::default());
    for step in 0..OPS {
        let op = {
            let who = rng.below(3) as u8;
            match rng.below(12) {
                0..=3 => ApiOp::TryAcquire(who),
                4..=6 => ApiOp::Release(who),
                7 | 8 => ApiOp::Extend(who, Span::random(&mut rng, false)),
                9 => ApiOp::Reset(who),
                _ => ApiOp::Tick,
            }
        };
        let who = op.who();
        let h = usize::from(who);
        let now = model.now;
        let (real, expected) = match op {
            ApiOp::TryAcquire(_) => {
                clock.short_set(HANDLE_SPANS[h]);
                let real = handles[h].try_acquire();
                let expected = match beliefs[h] {
                    Some(belief) if !belief.is_lost(now) => "AlreadyAcquired".to_string(),
                    _ => {
                        beliefs[h] = None;
                        match model.acquire(who, HANDLE_SPANS[h].ticks(), true) {
                            TryReply::Acquired(token) => {
                                beliefs[h] = Some(Belief {
                                    token: token.unwrap(),
                                    until: HANDLE_SPANS[h].ticks().map(|t| now + t),
                                    lost: false,
                                });
                                "true".into()
                            }
                            TryReply::Busy { owner, .. } if owner == who => {
                                "AlreadyAcquired".into()
                            }
                            TryReply::Busy { .. } => "false".into(),
                        }
                    }
                };
                (outcome(real), expected)
            }
            ApiOp::Release(_) => {
                clock.short_set(Span::Short);
                let real = handles[h].release();
                beliefs[h] = None;
                let expected = if model.unlock(who, 1) {
                    "()"
                } else {
                    "NotAcquired"
                };
                (outcome(real), expected.to_string())
            }
            ApiOp::Extend(_, span) => {
                clock.short_set(span);
                let real = handles[h].extend(Some(Duration::from_millis(span.ms())));
                let expected = match model.extend(who, span.ticks().unwrap()) {
                    ExtendReply::Yes => {
                        if let Some(belief) = &mut beliefs[h] {
                            // `Lease::extended`: a lease already lost stays lost.
                            if belief.is_lost(now) {
                                belief.lost = true;
                            } else {
                                belief.until = span.ticks().map(|t| now + t);
                            }
                        }
                        "()"
                    }
                    ExtendReply::NotOurs => {
                        if let Some(belief) = &mut beliefs[h] {
                            belief.lost = true;
                        }
                        "NotAcquired"
                    }
                    ExtendReply::NoExpiry => "NotExpirable",
                };
                (outcome(real), expected.to_string())
            }
            ApiOp::Reset(_) => {
                clock.short_set(Span::Short);
                let real = handles[h].reset();
                let expected = match model.read().owner {
                    None => false,
                    Some(owner) => {
                        if owner == who {
                            beliefs[h] = None;
                        }
                        model.reset(owner, 1);
                        true
                    }
                };
                (outcome(real), expected.to_string())
            }
            ApiOp::Tick => {
                clock.tick(&mut model);
                (String::new(), String::new())
            }
        };
        let keys = real_keys(conn, &name, &mut real_ranks);
        let seen: Vec<(Option<usize>, bool)> = handles
            .iter()
            .map(|handle| (real_ranks.of(handle.fencing_token()), handle.lost()))
            .collect();
        clock.check()?;
        let now = model.now;
        let believed: Vec<(Option<usize>, bool)> = beliefs
            .iter()
            .map(|b| {
                b.map_or((None, false), |b| {
                    (model_ranks.of(Some(b.token)), b.is_lost(now))
                })
            })
            .collect();
        let context = format!("seed {seed}, step {step}: {op:?}");
        assert_eq!(
            real, expected,
            "{context} answered differently (real, model)"
        );
        assert_eq!(
            keys,
            model_keys(&model, &mut model_ranks),
            "{context}: the keys differ (real, model)"
        );
        assert_eq!(
            seen, believed,
            "{context}: the handles' (token, lost) differ (real, model)"
        );
    }
    Ok(())
}

/// A call's outcome as text: its value, or the error's variant.
fn outcome<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Ok(value) => format!("{value:?}"),
        Err(Error::AlreadyAcquired { .. }) => "AlreadyAcquired".into(),
        Err(Error::NotAcquired { .. }) => "NotAcquired".into(),
        Err(Error::NotExpirable { .. }) => "NotExpirable".into(),
        Err(other) => format!("unexpected error: {other}"),
    }
}

#[test]
fn differential_the_crates_lock_handles_agree_with_the_model() {
    let server = RedisServer::start();
    let client = server.client();
    let mut conn = server.conn();
    let mut compared = 0;
    each_seed("public API", |seed| {
        api_run(&client, &mut conn, seed)?;
        compared += 1;
        Ok(())
    });
    assert!(compared >= SEEDS.len());
}
