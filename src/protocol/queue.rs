//! The fair queue engine's requests and replies, and a waiter's way through the queue: no I/O,
//! time passed in.
//!
//! One engine carries three primitives: a fair, weighted, leased semaphore of `capacity` units
//! (a semaphore: its permits; a fair lock: 1; a read-write lock: [`WRITER_UNITS`](super::primitive::WRITER_UNITS), a reader
//! taking 1 and a writer all). Grants go in arrival order, and a request that does not fit
//! blocks those behind it. `scripts/queue_engine.lua` has the rules; every script is safe to
//! send twice, as each does what it does by acquisition id.
//!
//! The capacity comes from each caller: handles with another count see another limit. Raising
//! it lets in the waiters that now fit at the next script run; lowering it takes nothing back.

use std::time::{Duration, Instant};

use redis::Value;

use super::keys::QueueKeys;
use super::request::Request;
use super::scripts::{
    Script, QUEUE_ACQUIRE, QUEUE_BEAT, QUEUE_EXTEND, QUEUE_RELEASE, QUEUE_RESET, QUEUE_RESET_ALL,
    QUEUE_SHRINK, QUEUE_STATE,
};
use crate::Error;

/// The largest count or time in milliseconds a script takes: 15 digits stay exact in Lua.
pub(crate) const MAX_NUMBER: u64 = 999_999_999_999_999;

/// One acquisition's request: who asks, for how much of what, held for how long.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ask {
    id: String,
    units: u64,
    capacity: u64,
    /// 0: no expiry.
    lease_ms: u64,
    lapse_ms: u64,
}

impl Ask {
    /// `units` of `capacity` for `id`, held for `lease` (`None`: until released), queued as
    /// long as the waiter heartbeats within `lapse`. Refuses what would wait for ever (more
    /// units than there are) and numbers a script cannot take.
    pub fn new(
        id: &str,
        units: u64,
        capacity: u64,
        lease: Option<Duration>,
        lapse: Duration,
    ) -> Result<Ask, Error> {
        let invalid = |what: String| Err(Error::InvalidArgument(what));
        if !(1..=MAX_NUMBER).contains(&capacity) {
            return invalid(format!("a capacity of {capacity}: it must be 1 or more"));
        }
        if !(1..=capacity).contains(&units) {
            return invalid(format!(
                "{units} units of {capacity}: from 1 to all of them"
            ));
        }
        let lease_ms = match lease {
            None => 0,
            Some(lease) => match whole_ms(lease) {
                Some(ms) if ms > 0 => ms,
                _ => return invalid(format!("a lease of {lease:?}")),
            },
        };
        // Under 2 ms there is no half of it to heartbeat in.
        let lapse_ms = match whole_ms(lapse) {
            Some(ms) if ms >= 2 => ms,
            _ => return invalid(format!("a lapse window of {lapse:?}")),
        };
        Ok(Ask {
            id: id.into(),
            units,
            capacity,
            lease_ms,
            lapse_ms,
        })
    }

    /// Its acquisition id.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How long its entry stays in line without a heartbeat.
    pub(crate) fn lapse(&self) -> Duration {
        Duration::from_millis(self.lapse_ms)
    }

    /// When this waiter must ask again at the latest to stay in the queue.
    #[cfg(test)]
    pub(crate) fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.lapse_ms / 2)
    }
}

/// `d` in whole milliseconds, rounded up, if a script takes it.
pub(crate) fn whole_ms(d: Duration) -> Option<u64> {
    let ms = u64::try_from(d.as_nanos().div_ceil(1_000_000)).ok()?;
    (ms <= MAX_NUMBER).then_some(ms)
}

/// Whether an acquire may queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Granted at once or not at all, never queued.
    Try,
    /// Queued when it cannot be granted now. `known`: the waiter's process has joined this
    /// primitive's queue before (since it last lapsed), so a heartbeat of its that is gone
    /// means it lapsed ([`Asked::Lapsed`]), not that it is new.
    Wait { known: bool },
}

/// The length of a process id: 16 hex digits, after the `@` that ends a waiter's id.
pub(crate) const PROCESS_ID_LEN: usize = 16;

/// The id of waiter `id` of process `process` (16 hex digits): the scripts read the process
/// from its end, and one heartbeat of the process keeps all its waiters in line.
pub(crate) fn waiter_id(id: &str, process: &str) -> String {
    format!("{id}@{process}")
}

fn script(keys: &QueueKeys, script: &'static Script, args: &[&[u8]]) -> Request {
    let names = keys.all().map(str::as_bytes);
    Request::repeatable(Vec::new())
        .with_script(script, &names, args)
        .on_slot(keys.slot)
}

pub(crate) fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// Asks for the units, or asks again as a waiter's heartbeat (`queue_acquire.lua`).
pub(crate) fn acquire(keys: &QueueKeys, ask: &Ask, mode: Mode) -> Request {
    let (mode, process): (&[u8], &[u8]) = match mode {
        Mode::Try => (b"try", b"new"),
        Mode::Wait { known: false } => (b"wait", b"new"),
        Mode::Wait { known: true } => (b"wait", b"known"),
    };
    script(
        keys,
        &QUEUE_ACQUIRE,
        &[
            ask.id.as_bytes(),
            &num(ask.units),
            &num(ask.capacity),
            &num(ask.lease_ms),
            &num(ask.lapse_ms),
            mode,
            process,
        ],
    )
}

/// Process `process`'s heartbeat in the queue of `keys` for `lapse` more (`queue_beat.lua`,
/// sent as text: its process's waiting connection sends it, which answers nothing else):
/// [`parse_beat`] says whether it was still live, and the server's time then.
pub(crate) fn beat(keys: &QueueKeys, process: &str, lapse: Duration) -> Request {
    let ms = whole_ms(lapse).unwrap_or(MAX_NUMBER).max(2);
    let names = keys.all().map(str::as_bytes);
    let eval = QUEUE_BEAT.eval(&names, &[process.as_bytes(), &num(ms)]);
    Request::repeatable(vec![eval]).on_slot(keys.slot)
}

/// A wake for the process's waiting connection, pushed to `inbox`, one it listens on: it then
/// listens again, on the inboxes it has now. Kept `expire_ms` if nobody pops it.
pub(crate) fn wake(inbox: &str, slot: u16, expire_ms: u64) -> Request {
    let mut push = redis::cmd("LPUSH");
    push.arg(inbox).arg("hub");
    let mut expire = redis::cmd("PEXPIRE");
    expire.arg(inbox).arg(expire_ms);
    // Sent twice, it wakes twice: no harm.
    Request::repeatable(vec![push, expire]).on_slot(slot)
}

/// The server's time (ms) when a live process's heartbeat ran; `None` when the process had
/// lapsed.
pub(crate) fn parse_beat(keys: &QueueKeys, reply: &Value) -> Result<Option<u64>, Error> {
    match reply {
        Value::Int(0) => Ok(None),
        Value::Int(now) => u64::try_from(*now)
            .map(Some)
            .map_err(|_| Error::unexpected(reply)),
        other => Err(array(keys, other)
            .err()
            .unwrap_or_else(|| Error::unexpected(other))),
    }
}

/// What a process's inbox holds: a grant to one of its waiters, a wake for them all, a word
/// to one waiter to ask again, or an election's word that its leader changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mail {
    /// Waiter `waiter` was granted, with this fencing token, held until `expiry` (server ms)
    /// unless it claims it.
    Granted {
        token: u64,
        expiry: u64,
        waiter: String,
    },
    /// `reset_all` took every entry away (or the process's own wake): its waiters ask again.
    Wake,
    /// The leader of the election changed, with the news (see
    /// [`election::parse_news`](super::election::parse_news)).
    Watch(Vec<u8>),
    /// `ask:<waiter id>`: waiter `0` had timed its next ask to the lapse of the waiter ahead
    /// of it, which left the line first (granted with a lease that ends before that lapse, or
    /// gone of its own accord): it asks again. (`head:<waiter id>` from a server whose scripts
    /// are older.)
    Ask(String),
}

/// An element popped from a process's inbox: `<token>:<expiry>:<waiter id>` (a grant),
/// `ask:<waiter id>` (or the older `head:<waiter id>`), `watch...` (an election's news), or
/// anything else (the wake of `reset_all`, or of the process itself), which wakes its waiters.
pub(crate) fn parse_mail(element: &[u8]) -> Mail {
    let text = String::from_utf8_lossy(element);
    let granted = text.split_once(':').and_then(|(token, rest)| {
        let (expiry, waiter) = rest.split_once(':')?;
        Some(Mail::Granted {
            token: token.parse().ok()?,
            expiry: expiry.parse().ok()?,
            waiter: waiter.to_owned(),
        })
    });
    let ask = (text.strip_prefix("ask:")).or_else(|| text.strip_prefix("head:"));
    match (granted, ask) {
        (Some(granted), _) => granted,
        (None, Some(waiter)) => Mail::Ask(waiter.to_owned()),
        (None, None) if element.starts_with(b"watch") => Mail::Watch(element.to_vec()),
        (None, None) => Mail::Wake,
    }
}

/// Gives back what `ask`'s id holds (`queue_release.lua`): [`parse_held`] says whether it held.
/// The same script as [`leave`]: a holder is in no queue, and a waiter holds nothing unless a
/// grant came.
pub(crate) fn release(keys: &QueueKeys, ask: &Ask) -> Request {
    script(
        keys,
        &QUEUE_RELEASE,
        &[ask.id.as_bytes(), &num(ask.capacity)],
    )
}

/// Leaves the queue, giving back a grant received meanwhile (`queue_release.lua`):
/// [`parse_held`] says whether there was one.
pub(crate) fn leave(keys: &QueueKeys, ask: &Ask) -> Request {
    release(keys, ask)
}

/// Sets the lease of what `ask`'s id holds to `ms` from now (`queue_extend.lua`):
/// [`parse_held`] says whether it still held.
pub(crate) fn extend(keys: &QueueKeys, ask: &Ask, ms: u64) -> Request {
    script(keys, &QUEUE_EXTEND, &[ask.id.as_bytes(), &num(ms)])
}

/// Keeps `units` of what `ask`'s id holds (`queue_shrink.lua`, a downgrade): [`parse_held`]
/// says whether it held.
pub(crate) fn shrink(keys: &QueueKeys, ask: &Ask, units: u64) -> Request {
    script(
        keys,
        &QUEUE_SHRINK,
        &[ask.id.as_bytes(), &num(units), &num(ask.capacity)],
    )
}

/// Removes holder `id`, or every holder with `None`, whatever their leases
/// (`queue_reset.lua`): [`parse_reset`] says how many.
pub(crate) fn reset(keys: &QueueKeys, id: Option<&str>, capacity: u64) -> Request {
    let id = id.unwrap_or_default();
    script(keys, &QUEUE_RESET, &[id.as_bytes(), &num(capacity)])
}

/// Deletes the primitive's holders and queue, keeping its fencing counter, and wakes each
/// waiter (a [`Mail::Wake`] in its process's inbox), kept for `signal_expire_ms` (`queue_reset_all.lua`): [`parse_reset`]
/// says how many live holders it removed. Needs no capacity: it grants nothing.
pub(crate) fn reset_all(keys: &QueueKeys, signal_expire_ms: u64) -> Request {
    script(keys, &QUEUE_RESET_ALL, &[&num(signal_expire_ms)])
}

/// The operator's read of holders and waiters (`queue_state.lua`), which counts the holders'
/// units again and checks the kept count against that ([`QueueState::counted`]); its cost
/// grows with the holders and waiters.
pub(crate) fn state(keys: &QueueKeys) -> Request {
    script(keys, &QUEUE_STATE, &[b""])
}

/// A holder's read, as cheap as any script (`queue_state.lua`): the units in use, and `id`'s
/// entry when it holds, else the first holder to expire; no waiters.
pub(crate) fn peek(keys: &QueueKeys, id: &str) -> Request {
    script(keys, &QUEUE_STATE, &[id.as_bytes()])
}

/// How an acquire came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Asked {
    /// The id holds its units, with this token, for this long from the server's look (`None`:
    /// no expiry).
    Granted {
        /// Its fencing token.
        token: u64,
        /// What is left of its lease, by the server's clock.
        lease_left: Option<Duration>,
    },
    /// Queued at `position` (from 1): ask again after `next` at the latest (`None`: only a
    /// grant, which comes to the process's inbox, can let it in, or a waiter of its process
    /// ahead of it times it: see [`Cover`](crate::protocol::cover::Cover)).
    Waiting {
        /// Its place in line, from 1.
        position: u64,
        /// When to ask again at the latest.
        next: Option<Duration>,
        /// Its ticket: its place in the line's order (which starts again at 1 once the line
        /// has emptied).
        ticket: u64,
    },
    /// A try that could not be granted at once, and was not queued.
    Refused,
    /// The waiter's process lapsed (it was stopped): nothing was written, and the process
    /// makes all its waiters in this queue join again.
    Lapsed,
}

pub(crate) fn parse_acquire(keys: &QueueKeys, reply: &Value) -> Result<Asked, Error> {
    let items = array(keys, reply)?;
    let number = |at: usize| items.get(at).and_then(int);
    if let [Value::Int(-2)] = items {
        return Ok(Asked::Lapsed);
    }
    match (number(0), number(1), number(2), number(3)) {
        (Some(1), Some(token), Some(left), None) => Ok(Asked::Granted {
            token: u64::try_from(token).map_err(|_| Error::unexpected(reply))?,
            lease_left: u64::try_from(left).ok().map(Duration::from_millis),
        }),
        (Some(0), Some(0), Some(_), None) => Ok(Asked::Refused),
        (Some(0), Some(position), Some(next), Some(ticket)) => Ok(Asked::Waiting {
            position: u64::try_from(position).map_err(|_| Error::unexpected(reply))?,
            next: (next >= 0).then(|| Duration::from_millis(next.unsigned_abs().max(1))),
            ticket: u64::try_from(ticket).map_err(|_| Error::unexpected(reply))?,
        }),
        _ => Err(Error::unexpected(reply)),
    }
}

/// The reply of release, leave, extend or shrink: whether the id held.
pub(crate) fn parse_held(keys: &QueueKeys, reply: &Value) -> Result<bool, Error> {
    match reply {
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        other => Err(array(keys, other)
            .err()
            .unwrap_or_else(|| Error::unexpected(other))),
    }
}

/// The reply of a reset: how many holders it removed.
pub(crate) fn parse_reset(keys: &QueueKeys, reply: &Value) -> Result<u64, Error> {
    match reply {
        Value::Int(n) => u64::try_from(*n).map_err(|_| Error::unexpected(reply)),
        other => Err(array(keys, other)
            .err()
            .unwrap_or_else(|| Error::unexpected(other))),
    }
}

/// A holder, as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueHolder {
    pub(crate) id: Vec<u8>,
    pub(crate) units: u64,
    /// `None`: no expiry.
    pub(crate) left: Option<Duration>,
    pub(crate) token: u64,
}

/// A waiter, as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueWaiter {
    pub(crate) id: Vec<u8>,
    pub(crate) units: u64,
    /// Until its heartbeat lapses.
    pub(crate) lapses_in: Duration,
}

/// A primitive's state: units in use, holders, and waiters in arrival order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueState {
    pub(crate) used: u64,
    pub(crate) holders: Vec<QueueHolder>,
    pub(crate) waiters: Vec<QueueWaiter>,
    /// What the kept count said when a recount found `used` instead (a hand's edit, or a
    /// bug): the script deleted it, so the next one counts again.
    pub(crate) counted: Option<u64>,
}

pub(crate) fn parse_state(keys: &QueueKeys, reply: &Value) -> Result<QueueState, Error> {
    let unexpected = || Error::unexpected(reply);
    let items = array(keys, reply)?;
    let [used, Value::Array(holders), Value::Array(waiters), Value::Int(counted)] = items else {
        return Err(unexpected());
    };
    let count = |v: &Value| int(v).and_then(|n| u64::try_from(n).ok());
    let ms = |v: &Value| count(v).map(Duration::from_millis);
    let mut state = QueueState {
        used: count(used).ok_or_else(unexpected)?,
        counted: u64::try_from(*counted).ok(),
        ..QueueState::default()
    };
    for fields in holders.chunks(4) {
        let [Value::BulkString(id), units, left, token] = fields else {
            return Err(unexpected());
        };
        state.holders.push(QueueHolder {
            id: id.clone(),
            units: count(units).ok_or_else(unexpected)?,
            left: ms(left),
            token: count(token).ok_or_else(unexpected)?,
        });
    }
    for fields in waiters.chunks(3) {
        let [Value::BulkString(id), units, lapses_in] = fields else {
            return Err(unexpected());
        };
        state.waiters.push(QueueWaiter {
            id: id.clone(),
            units: count(units).ok_or_else(unexpected)?,
            lapses_in: ms(lapses_in).ok_or_else(unexpected)?,
        });
    }
    Ok(state)
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// A script's array reply; a corrupt key's `{-1, k, reason}` and error replies as errors.
pub(crate) fn array<'v>(keys: &QueueKeys, reply: &'v Value) -> Result<&'v [Value], Error> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-1), Value::Int(k), Value::BulkString(reason)] => Err(Error::Corrupt {
                key: usize::try_from(*k - 1)
                    .ok()
                    .and_then(|at| keys.all().get(at).map(|key| key.to_string()))
                    .ok_or_else(|| Error::unexpected(reply))?,
                reason: String::from_utf8_lossy(reason).into_owned(),
            }),
            items => Ok(items),
        },
        Value::ServerError(e) => Err(Error::Redis(e.clone().into())),
        other => Err(Error::unexpected(other)),
    }
}

/// What a waiter does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Next {
    /// Send an acquire (`Mode::Wait`): the first ask, or a heartbeat.
    Ask,
    /// Wait for its process's inbox to bring a grant, until then (`None`: no limit).
    Block {
        /// When to stop waiting and ask again, or leave.
        until: Option<Instant>,
    },
    /// Its time is up: leave the queue (giving back any grant that came meanwhile).
    Leave,
    /// It holds its units, until `valid_until` at the earliest (`None`: no expiry).
    Granted {
        /// Its fencing token.
        token: u64,
        /// Until when its lease lasts at the earliest, by this process's clock.
        valid_until: Option<Instant>,
    },
}

/// One waiter's way through the queue, up to `deadline` (`None`: no limit).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueWait {
    deadline: Option<Instant>,
}

impl QueueWait {
    /// A way through the queue, given up at `deadline`.
    pub fn new(deadline: Option<Instant>) -> Self {
        QueueWait { deadline }
    }

    /// After an ask sent at `sent` was answered at `now`.
    pub fn asked(&mut self, sent: Instant, answer: Asked, now: Instant) -> Next {
        match answer {
            // The server's count of what is left started after the send.
            Asked::Granted { token, lease_left } => Next::Granted {
                token,
                valid_until: lease_left.map(|left| sent + left),
            },
            Asked::Waiting { next, .. } => {
                // As the lease left: counted on the server after the send. From the reply it
                // would be late by the reply's way back, which may be long (a slow network,
                // a connection held up), past the moment the waiter could go in.
                let event = next.map(|next| sent + next);
                match self.deadline {
                    Some(deadline) if now >= deadline => Next::Leave,
                    Some(deadline) => Next::Block {
                        until: Some(event.map_or(deadline, |e| e.min(deadline))),
                    },
                    None => Next::Block { until: event },
                }
            }
            // Only a try is refused; a waiter that meets it (against the protocol) stops.
            Asked::Refused => Next::Leave,
            // Its process makes it join again; until then it waits for nothing.
            Asked::Lapsed => Next::Ask,
        }
    }

    /// Told at `now` to ask again by `at` at the latest (its process's first waiter in line
    /// left it that timer): it waits on until then, or its deadline if sooner.
    pub fn retimed(&mut self, at: Instant, now: Instant) -> Next {
        match self.deadline {
            Some(deadline) if now >= deadline => Next::Leave,
            Some(deadline) => Next::Block {
                until: Some(at.min(deadline)),
            },
            None => Next::Block { until: Some(at) },
        }
    }

    /// After a wait for the inbox that ended at `now`, with the token a grant pushed, or none
    /// (its time ran out, or it was woken to ask again). `dated`: when the grant's claim
    /// window ends at the earliest, where its process could date it (see the hub).
    pub fn popped(&mut self, token: Option<u64>, dated: Option<Instant>, now: Instant) -> Next {
        match (token, dated) {
            // Until its claim expiry, as its process dated it: a bound taken from the grant
            // itself, which holds however late the grant is read.
            (Some(token), Some(dated)) => Next::Granted {
                token,
                valid_until: Some(dated),
            },
            // A grant read after an ask that found the waiter waiting need not have come
            // after that ask: pushed before it, and run out by the time it ran (the waiter was
            // slow to ask, its process's hub slow to pop), it is another's now. Undated, it is
            // settled by an ask, which reads what the id holds (docs/model.md).
            (Some(_), None) => Next::Ask,
            (None, _) if self.deadline.is_some_and(|d| now >= d) => Next::Leave,
            (None, _) => Next::Ask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::primitive::Primitive;
    use crate::protocol::testing::{bulk, server_error};

    fn keys() -> QueueKeys {
        QueueKeys::new(Primitive::Semaphore, "db")
    }

    fn ints(ns: &[i64]) -> Value {
        Value::Array(ns.iter().map(|&n| Value::Int(n)).collect())
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn an_ask_for_more_than_there_is_is_refused_before_it_is_sent() {
        let ask = |units, capacity| Ask::new("w", units, capacity, None, secs(2));
        assert!(ask(1, 1).is_ok());
        assert!(matches!(ask(2, 1), Err(Error::InvalidArgument(_))));
        assert!(matches!(ask(0, 1), Err(Error::InvalidArgument(_))));
        assert!(matches!(ask(1, 0), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            ask(1, MAX_NUMBER + 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(Ask::new("w", 1, 1, Some(Duration::MAX), secs(2)).is_err());
        assert!(Ask::new("w", 1, 1, Some(Duration::ZERO), secs(2)).is_err());
        assert!(Ask::new("w", 1, 1, None, Duration::from_millis(1)).is_err());
    }

    #[test]
    fn a_lease_rounds_up_to_whole_milliseconds_and_the_heartbeat_is_half_the_lapse() {
        let ask = Ask::new("w", 1, 4, Some(Duration::from_nanos(1)), secs(4)).unwrap();
        assert_eq!(ask.lease_ms, 1);
        assert_eq!(ask.heartbeat(), secs(2));
    }

    #[test]
    fn acquire_sends_the_keys_in_the_scripts_order_and_may_be_sent_again() {
        let ask = Ask::new("w", 2, 4, Some(secs(10)), secs(2)).unwrap();
        let request = acquire(&keys(), &ask, Mode::Wait { known: true });
        assert!(request.repeatable);
        assert_eq!(request.slot, Some(keys().slot));
        let packed = String::from_utf8(request.packed()).unwrap();
        let holders = packed.find("semaphore:{db}:holders").unwrap();
        let signals = packed.find("semaphore:{db}:signal:").unwrap();
        assert!(holders < signals);
        assert!(packed.ends_with(
            "$1\r\nw\r\n$1\r\n2\r\n$1\r\n4\r\n$5\r\n10000\r\n$4\r\n2000\r\n$4\r\nwait\r\n$5\r\nknown\r\n"
        ));
    }

    #[test]
    fn acquire_replies_parse_into_granted_waiting_or_refused() {
        let keys = keys();
        assert_eq!(
            parse_acquire(&keys, &ints(&[1, 7, 9000])).unwrap(),
            Asked::Granted {
                token: 7,
                lease_left: Some(Duration::from_millis(9000))
            }
        );
        assert_eq!(
            parse_acquire(&keys, &ints(&[1, 7, -1])).unwrap(),
            Asked::Granted {
                token: 7,
                lease_left: None
            }
        );
        assert_eq!(
            parse_acquire(&keys, &ints(&[0, 3, 250, 9])).unwrap(),
            Asked::Waiting {
                position: 3,
                next: Some(Duration::from_millis(250)),
                ticket: 9,
            }
        );
        assert_eq!(
            parse_acquire(&keys, &ints(&[0, 0, 0])).unwrap(),
            Asked::Refused
        );
        assert!(matches!(
            parse_acquire(&keys, &ints(&[1, -7, 0])),
            Err(Error::UnexpectedReply(_))
        ));
        assert!(matches!(
            parse_acquire(&keys, &Value::Int(1)),
            Err(Error::UnexpectedReply(_))
        ));
        assert!(matches!(
            parse_acquire(&keys, &server_error("ERR 3 units asked of a capacity of 2")),
            Err(Error::Redis(_))
        ));
    }

    #[test]
    fn a_waiter_with_no_event_ahead_waits_for_its_grant_alone_and_a_lapsed_one_is_told() {
        let keys = keys();
        assert_eq!(
            parse_acquire(&keys, &ints(&[0, 3, -1, 9])).unwrap(),
            Asked::Waiting {
                position: 3,
                next: None,
                ticket: 9,
            }
        );
        assert_eq!(parse_acquire(&keys, &ints(&[-2])).unwrap(), Asked::Lapsed);
        let t0 = Instant::now();
        let waiting = Asked::Waiting {
            position: 3,
            next: None,
            ticket: 9,
        };
        assert_eq!(
            QueueWait::new(None).asked(t0, waiting, t0),
            Next::Block { until: None }
        );
        assert_eq!(
            QueueWait::new(Some(t0 + secs(5))).asked(t0, waiting, t0),
            Next::Block {
                until: Some(t0 + secs(5))
            }
        );
    }

    #[test]
    fn an_inbox_element_names_the_waiter_granted_or_wakes_them_all() {
        assert_eq!(
            parse_mail(b"12:1795654395312:w:3@0123456789abcdef"),
            Mail::Granted {
                token: 12,
                expiry: 1_795_654_395_312,
                waiter: "w:3@0123456789abcdef".into()
            }
        );
        assert_eq!(parse_mail(b"reset"), Mail::Wake);
        assert_eq!(parse_mail(b"watch:3"), Mail::Watch(b"watch:3".to_vec()));
        assert_eq!(
            parse_mail(b"ask:w:3@0123456789abcdef"),
            Mail::Ask("w:3@0123456789abcdef".into())
        );
        // From a server whose scripts are older.
        assert_eq!(
            parse_mail(b"head:w:3@0123456789abcdef"),
            Mail::Ask("w:3@0123456789abcdef".into())
        );
        assert_eq!(parse_mail(b"12:w:3"), Mail::Wake);
        assert_eq!(parse_mail(b"x:1:w"), Mail::Wake);
    }

    #[test]
    fn a_waiter_id_ends_in_its_process() {
        let id = waiter_id("h:1", "0123456789abcdef");
        assert_eq!(id, "h:1@0123456789abcdef");
        assert_eq!(id.len() - id.rfind('@').unwrap() - 1, PROCESS_ID_LEN);
    }

    #[test]
    fn a_corrupt_key_is_named_by_its_place_in_the_scripts_keys() {
        let keys = keys();
        let corrupt =
            |k| Value::Array(vec![Value::Int(-1), Value::Int(k), bulk("it holds a list")]);
        for (k, key) in keys.all().iter().enumerate() {
            let reply = corrupt(k as i64 + 1);
            match parse_held(&keys, &reply) {
                Err(Error::Corrupt { key: found, .. }) => assert_eq!(found, *key),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            parse_acquire(&keys, &corrupt(10)),
            Err(Error::UnexpectedReply(_))
        ));
        assert!(matches!(
            parse_reset(&keys, &corrupt(0)),
            Err(Error::UnexpectedReply(_))
        ));
    }

    #[test]
    fn held_and_reset_replies_are_counts() {
        let keys = keys();
        assert!(parse_held(&keys, &Value::Int(1)).unwrap());
        assert!(!parse_held(&keys, &Value::Int(0)).unwrap());
        assert!(parse_held(&keys, &Value::Int(2)).is_err());
        assert_eq!(parse_reset(&keys, &Value::Int(3)).unwrap(), 3);
        assert!(parse_reset(&keys, &Value::Int(-3)).is_err());
    }

    #[test]
    fn state_lists_holders_and_waiters_in_order() {
        let reply = Value::Array(vec![
            Value::Int(3),
            Value::Array(vec![
                bulk("a"),
                Value::Int(2),
                Value::Int(-1),
                Value::Int(5),
                bulk("b"),
                Value::Int(1),
                Value::Int(900),
                Value::Int(6),
            ]),
            Value::Array(vec![bulk("c"), Value::Int(4), Value::Int(1500)]),
            Value::Int(-1),
        ]);
        let state = parse_state(&keys(), &reply).unwrap();
        assert_eq!(state.used, 3);
        assert_eq!(state.counted, None);
        assert_eq!(state.holders[0].left, None);
        assert_eq!(state.holders[1].left, Some(Duration::from_millis(900)));
        assert_eq!(state.holders[1].token, 6);
        assert_eq!(
            state.waiters,
            vec![QueueWaiter {
                id: b"c".to_vec(),
                units: 4,
                lapses_in: Duration::from_millis(1500)
            }]
        );
        let truncated = Value::Array(vec![
            Value::Int(0),
            Value::Array(vec![bulk("a"), Value::Int(2)]),
            Value::Array(vec![]),
            Value::Int(-1),
        ]);
        assert!(parse_state(&keys(), &truncated).is_err());
    }

    #[test]
    fn a_count_found_off_by_the_recount_is_reported() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![]),
            Value::Int(2),
        ]);
        assert_eq!(parse_state(&keys(), &reply).unwrap().counted, Some(2));
    }

    #[test]
    fn the_holders_read_names_its_id_and_the_operators_read_none() {
        let packed = |request: Request| String::from_utf8(request.packed()).unwrap();
        assert!(packed(peek(&keys(), "w:1")).ends_with("$3\r\nw:1\r\n"));
        assert!(packed(state(&keys())).ends_with("$0\r\n\r\n"));
    }

    #[test]
    fn a_waiter_blocks_until_its_next_event_or_its_deadline_whichever_is_first() {
        let t0 = Instant::now();
        let waiting = |ms| Asked::Waiting {
            position: 2,
            next: Some(Duration::from_millis(ms)),
            ticket: 9,
        };
        let mut wait = QueueWait::new(Some(t0 + secs(5)));
        assert_eq!(
            wait.asked(t0, waiting(1000), t0),
            Next::Block {
                until: Some(t0 + secs(1))
            }
        );
        assert_eq!(
            wait.asked(t0, waiting(9000), t0),
            Next::Block {
                until: Some(t0 + secs(5))
            }
        );
        let mut forever = QueueWait::new(None);
        assert_eq!(
            forever.asked(t0, waiting(1000), t0),
            Next::Block {
                until: Some(t0 + secs(1))
            }
        );
        // A reply 600 ms on its way: the event is still 1 s from the send at the latest.
        assert_eq!(
            forever.asked(t0, waiting(1000), t0 + Duration::from_millis(600)),
            Next::Block {
                until: Some(t0 + secs(1))
            }
        );
    }

    #[test]
    fn a_waiter_that_pops_nothing_asks_again_until_its_deadline_then_leaves() {
        let t0 = Instant::now();
        let mut wait = QueueWait::new(Some(t0 + secs(5)));
        assert_eq!(wait.popped(None, None, t0 + secs(1)), Next::Ask);
        assert_eq!(wait.popped(None, None, t0 + secs(5)), Next::Leave);
        let waiting = Asked::Waiting {
            position: 1,
            next: Some(secs(1)),
            ticket: 9,
        };
        assert_eq!(wait.asked(t0, waiting, t0 + secs(6)), Next::Leave);
    }

    #[test]
    fn a_timer_handed_over_is_kept_until_the_deadline() {
        let t0 = Instant::now();
        let mut forever = QueueWait::new(None);
        let at = t0 + secs(1);
        assert_eq!(forever.retimed(at, t0), Next::Block { until: Some(at) });
        let half = Duration::from_millis(500);
        let mut timed = QueueWait::new(Some(t0 + half));
        assert_eq!(
            timed.retimed(at, t0),
            Next::Block {
                until: Some(t0 + half)
            }
        );
        assert_eq!(timed.retimed(at, t0 + secs(1)), Next::Leave);
    }

    #[test]
    fn a_pushed_grant_lasts_until_the_claim_expiry_its_process_dated() {
        let t0 = Instant::now();
        let mut wait = QueueWait::new(None);
        let waiting = Asked::Waiting {
            position: 1,
            next: None,
            ticket: 9,
        };
        wait.asked(t0, waiting, t0);
        let dated = t0 + secs(60);
        assert_eq!(
            wait.popped(Some(4), Some(dated), t0 + secs(59)),
            Next::Granted {
                token: 4,
                valid_until: Some(dated)
            }
        );
    }

    #[test]
    fn a_pushed_grant_read_after_a_later_ask_lasts_no_longer_than_its_own_claim_expiry() {
        // The model checker's counterexample (docs/model.md): the grant was pushed before the
        // last ask, which found the waiter waiting because the grant's claim had run out by
        // then. The ask's send is no bound for it; its own dated expiry is.
        let t0 = Instant::now();
        let mut wait = QueueWait::new(None);
        let waiting = Asked::Waiting {
            position: 1,
            next: Some(secs(1)),
            ticket: 9,
        };
        wait.asked(t0, waiting, t0);
        let claim_expiry = t0 + secs(3);
        wait.asked(t0 + secs(3), waiting, t0 + secs(3));
        assert_eq!(
            wait.popped(Some(4), Some(claim_expiry), t0 + secs(3)),
            Next::Granted {
                token: 4,
                valid_until: Some(claim_expiry)
            }
        );
    }

    #[test]
    fn a_pushed_grant_its_process_could_not_date_is_settled_by_an_ask() {
        let t0 = Instant::now();
        let mut wait = QueueWait::new(Some(t0 + secs(5)));
        let waiting = Asked::Waiting {
            position: 1,
            next: Some(secs(1)),
            ticket: 9,
        };
        wait.asked(t0, waiting, t0);
        assert_eq!(wait.popped(Some(4), None, t0 + secs(1)), Next::Ask);
        // Past the deadline too: the ask takes a grant that is still good.
        assert_eq!(wait.popped(Some(4), None, t0 + secs(6)), Next::Ask);
    }

    #[test]
    fn a_grant_found_by_an_ask_lasts_what_the_server_said_from_the_asks_send() {
        let t0 = Instant::now();
        let granted = Asked::Granted {
            token: 4,
            lease_left: Some(secs(30)),
        };
        assert_eq!(
            QueueWait::new(None).asked(t0, granted, t0 + secs(1)),
            Next::Granted {
                token: 4,
                valid_until: Some(t0 + secs(30))
            }
        );
        let forever = Asked::Granted {
            token: 4,
            lease_left: None,
        };
        assert_eq!(
            QueueWait::new(None).asked(t0, forever, t0),
            Next::Granted {
                token: 4,
                valid_until: None
            }
        );
    }
}
