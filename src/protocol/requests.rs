//! Requests as commands to send, and replies as facts about the lock: no I/O here.
//!
//! Each builder says whether its request is safe to send twice ([`Request::repeatable`]); the
//! drivers never re-send one that is not, but settle its outcome by reading state.

use std::time::Duration;

use redis::{Cmd, Value};

use super::keys::Keys;
use super::redirect;
use super::scripts::{Script, ACQUIRE, EXTEND, GIVE_BACK, RESET, RESET_ALL, UNLOCK};
use crate::Error;

/// What a request does to the lock, which a backend over independent servers (a quorum)
/// needs to tell how to combine their answers.
#[derive(Clone)]
pub(crate) enum Kind {
    /// A try at the lock (after any `BLPOP`) by `id`, taken for `expire_ms`.
    Try {
        keys: Keys,
        id: Vec<u8>,
        expire_ms: Option<u64>,
    },
    /// A read of the owner and its TTL.
    Read { keys: Keys },
    /// An owner-checked unlock.
    Unlock { keys: Keys },
    /// An owner-checked extend by `id` to `ms`.
    Extend { keys: Keys, id: Vec<u8>, ms: u64 },
    /// Anything else: reads and writes of other keys, scans, resets.
    Other,
}

/// The signal expiry of a give-back that wakes a waiter (python-redis-lock's default).
const GIVE_BACK_SIGNAL_EXPIRE_MS: u64 = 1000;

/// Commands sent together in one round trip.
///
/// A request writes with its first command, or runs as one `MULTI` transaction: so when a
/// cluster redirects its first command (or aborts its transaction), nothing in it ran, and
/// it can go to the right node whatever it is ([`redirect::ran_nothing`]).
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) cmds: Vec<Cmd>,
    /// The script call among `cmds`, if any, and its script.
    eval: Option<(usize, &'static Script)>,
    /// Whether running it twice does no more than running it once.
    pub(crate) repeatable: bool,
    /// The hash slot of its keys, which a cluster routes by; `None` for any node.
    pub(crate) slot: Option<u16>,
    /// Whether its last command is a `WAIT` for replicas.
    waits: bool,
    pub(crate) kind: Kind,
}

impl Request {
    fn new(cmds: Vec<Cmd>, repeatable: bool) -> Self {
        Request {
            cmds,
            eval: None,
            repeatable,
            slot: None,
            waits: false,
            kind: Kind::Other,
        }
    }

    fn of_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// The first command alone, and the rest as a request of the same kind: a quorum's
    /// waiter blocks on one server, then tries on all.
    pub(crate) fn split_first(&self) -> (Request, Request) {
        let first = Request::new(self.cmds.iter().take(1).cloned().collect(), self.repeatable);
        let rest = Request {
            cmds: self.cmds.iter().skip(1).cloned().collect(),
            eval: self
                .eval
                .and_then(|(at, script)| Some((at.checked_sub(1)?, script))),
            kind: self.kind.clone(),
            ..*self
        };
        (first, rest)
    }

    /// The request for the keys of hash slot `slot`.
    pub(crate) fn on_slot(mut self, slot: u16) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The request followed, on the same connection, by `WAIT replicas timeout`: the reply
    /// says how many replicas have what this connection wrote.
    pub(crate) fn replicated(mut self, replicas: Option<(u32, u64)>) -> Self {
        if let Some((replicas, timeout_ms)) = replicas {
            let mut wait = redis::cmd("WAIT");
            wait.arg(replicas).arg(timeout_ms);
            self.cmds.push(wait);
            self.waits = true;
        }
        self
    }

    /// Takes the `WAIT`'s reply off `replies`: how many replicas acknowledged, or `None`
    /// when the request did not wait.
    pub(crate) fn acks(&self, replies: &mut Vec<Value>) -> Result<Option<u64>, Error> {
        if !self.waits {
            return Ok(None);
        }
        match replies.pop() {
            Some(Value::Int(n)) => Ok(Some(u64::try_from(n).unwrap_or(0))),
            Some(other) => Err(reply_error(&other)),
            None => Err(Error::unexpected(&replies)),
        }
    }

    /// Commands that do no more when run twice (reads, plain overwrites).
    pub(crate) fn repeatable(cmds: Vec<Cmd>) -> Self {
        Request::new(cmds, true)
    }

    /// One command on its own.
    pub(crate) fn single(cmd: Cmd, repeatable: bool) -> Self {
        Request::new(vec![cmd], repeatable)
    }

    pub(crate) fn with_script(
        mut self,
        script: &'static Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Self {
        self.eval = Some((self.cmds.len(), script));
        self.cmds.push(script.evalsha(keys, args));
        self
    }

    /// The request's bytes on the wire.
    pub(crate) fn packed(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for cmd in &self.cmds {
            cmd.write_packed_command(&mut out);
        }
        out
    }

    /// When the server answered `NOSCRIPT` to the script call, the request that sends its
    /// text, and where in `replies` its reply goes (`replies` answer the commands after the
    /// first `skipped`). The refused call ran nothing, so this is safe whatever the request
    /// is; the other commands ran and are not sent again, except a `WAIT`, which must follow
    /// the script's write to count it. [`patch`](Self::patch) puts the replies in place.
    pub(crate) fn noscript_retry(
        &self,
        replies: &[Value],
        skipped: usize,
    ) -> Option<(usize, Request)> {
        let (index, script) = self.eval?;
        let at = index.checked_sub(skipped)?;
        match (replies.get(at), self.cmds.get(index)) {
            (Some(Value::ServerError(e)), Some(evalsha)) if e.code() == "NOSCRIPT" => {
                let mut cmds = vec![script.eval_of(evalsha)];
                if self.waits {
                    cmds.extend(self.cmds.last().cloned());
                }
                let retry = Request {
                    cmds,
                    eval: None,
                    waits: self.waits,
                    kind: self.kind.clone(),
                    ..*self
                };
                Some((at, retry))
            }
            _ => None,
        }
    }

    /// Puts the replies of a [`noscript_retry`](Self::noscript_retry) into `replies`.
    pub(crate) fn patch(&self, replies: &mut [Value], at: usize, mut retried: Vec<Value>) {
        if self.waits
            && let (Some(wait), Some(last)) = (retried.pop(), replies.last_mut())
        {
            *last = wait;
        }
        if let (Some(reply), Some(slot)) = (retried.pop(), replies.get_mut(at)) {
            *slot = reply;
        }
    }
}

/// Sending a request where a cluster's `ASK` says.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
impl Request {
    /// The request for a node that answered `ASK`: each command preceded by `ASKING`, or the
    /// whole transaction by one (the flag lasts through `MULTI`).
    pub(crate) fn asking(&self) -> Request {
        let asking = || redis::cmd("ASKING");
        let cmds = if self.is_transaction() {
            std::iter::once(asking())
                .chain(self.cmds.iter().cloned())
                .collect()
        } else {
            self.cmds
                .iter()
                .flat_map(|c| [asking(), c.clone()])
                .collect()
        };
        Request {
            cmds,
            eval: None,
            kind: self.kind.clone(),
            ..*self
        }
    }

    /// The request with one `ASKING` in front: for a wait's `BLPOP`, whose key alone the
    /// `ASK` was about.
    pub(crate) fn asking_first(&self) -> Request {
        let cmds = std::iter::once(redis::cmd("ASKING"))
            .chain(self.cmds.iter().cloned())
            .collect();
        Request {
            cmds,
            eval: self.eval.map(|(at, script)| (at + 1, script)),
            kind: self.kind.clone(),
            ..*self
        }
    }

    /// The replies of [`asking`](Self::asking)'s request without those of the `ASKING`s.
    pub(crate) fn without_asking(&self, replies: Vec<Value>) -> Vec<Value> {
        if self.is_transaction() {
            replies.into_iter().skip(1).collect()
        } else {
            replies.into_iter().skip(1).step_by(2).collect()
        }
    }

    fn is_transaction(&self) -> bool {
        self.cmds
            .first()
            .and_then(|c| c.args_iter().next())
            .is_some_and(|verb| matches!(verb, redis::Arg::Simple(b"MULTI")))
    }
}

/// `ms` as the decimal text Redis takes.
fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// One try at the lock. Without fencing it is `SET NX [PX]`, `GET`, `PTTL`: plain commands
/// cost the server a third of a script, and need not be atomic (if the owner lets go between
/// them, `GET` finds no owner and the next try follows at once). With fencing, `acquire.lua`
/// takes the token and the lock together, or neither.
///
/// Not repeatable: a second run could take a lock freed after the first. A lost reply is
/// settled by reading the owner ([`holder`]).
pub(crate) fn try_lock(keys: &Keys, id: &str, expire_ms: Option<u64>, fencing: bool) -> Request {
    wait_then_try(keys, id, expire_ms, fencing, None)
}

/// [`try_lock`] behind a `BLPOP` of the signal list for `block` when given: in one pipeline,
/// Redis runs the try the moment the `BLPOP` returns, so a woken waiter has the lock one
/// network trip after the release.
pub(crate) fn wait_then_try(
    keys: &Keys,
    id: &str,
    expire_ms: Option<u64>,
    fencing: bool,
    block: Option<Duration>,
) -> Request {
    let kind = Kind::Try {
        keys: keys.clone(),
        id: id.as_bytes().to_vec(),
        expire_ms,
    };
    let mut cmds = Vec::with_capacity(4);
    if let Some(block) = block {
        let ms = block.as_millis().max(1);
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(&keys.signal)
            .arg(format!("{}.{:03}", ms / 1000, ms % 1000));
        cmds.push(blpop);
    }
    if fencing {
        let expire = num(expire_ms.unwrap_or(0));
        return Request::new(cmds, false)
            .with_script(
                &ACQUIRE,
                &[keys.lock.as_bytes(), keys.fence.as_bytes()],
                &[id.as_bytes(), &expire],
            )
            .on_slot(keys.slot)
            .of_kind(kind);
    }
    let mut set = redis::cmd("SET");
    set.arg(&keys.lock).arg(id).arg("NX");
    if let Some(ms) = expire_ms {
        set.arg("PX").arg(ms);
    }
    cmds.push(set);
    cmds.push(on_key("GET", &keys.lock));
    cmds.push(on_key("PTTL", &keys.lock));
    Request::new(cmds, false).on_slot(keys.slot).of_kind(kind)
}

/// How long a key has left, as `PTTL` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pttl {
    /// -2: the key is gone (expired or deleted since it was read).
    Gone,
    /// -1: the key has no expiry.
    Forever,
    Left(Duration),
}

impl Pttl {
    fn parse(value: &Value) -> Result<Pttl, Error> {
        match value {
            Value::Int(-2) => Ok(Pttl::Gone),
            Value::Int(-1) => Ok(Pttl::Forever),
            Value::Int(ms) => u64::try_from(*ms)
                .map(|ms| Pttl::Left(Duration::from_millis(ms)))
                .map_err(|_| Error::unexpected(value)),
            other => Err(reply_error(other)),
        }
    }
}

/// How one try came out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired {
        token: Option<u64>,
    },
    /// `owner` is `None` when the lock came free between the try's commands.
    Busy {
        owner: Option<Vec<u8>>,
        pttl: Pttl,
    },
}

/// Takes the lock again where it went missing (a quorum server that restarted empty), for
/// `ms`. A plain `SET NX`: repeatable, as it never touches a key that is there.
pub(crate) fn retake(keys: &Keys, id: &[u8], ms: u64) -> Request {
    let mut set = redis::cmd("SET");
    set.arg(&keys.lock).arg(id).arg("NX").arg("PX").arg(ms);
    Request::new(vec![set], true).on_slot(keys.slot)
}

/// Gives back `id`'s key after a quorum vote it lost, waking a waiter only with `signal`
/// (`give_back.lua` says why). Owner-checked, so repeatable.
pub(crate) fn give_back(keys: &Keys, id: &[u8], signal: bool) -> Request {
    let signal_arg: &[u8] = if signal { b"1" } else { b"0" };
    Request::new(Vec::new(), true)
        .with_script(
            &GIVE_BACK,
            &[keys.lock.as_bytes(), keys.signal.as_bytes()],
            &[id, signal_arg, &num(GIVE_BACK_SIGNAL_EXPIRE_MS)],
        )
        .on_slot(keys.slot)
}

/// Passes a wake-up signal on: a wait that consumed one but could not use it puts it back.
pub(crate) fn pass_on(keys: &Keys) -> Request {
    let mut push = redis::cmd("LPUSH");
    push.arg(&keys.signal).arg(1);
    let mut expire = redis::cmd("PEXPIRE");
    expire.arg(&keys.signal).arg(GIVE_BACK_SIGNAL_EXPIRE_MS);
    Request::new(vec![push, expire], true).on_slot(keys.slot)
}

/// Whether a try was turned away whole, having taken nothing: by a cluster that moved the
/// key, or a primary that is changing. Where its key lives now, it may be free.
pub(crate) fn try_redirected(replies: &[Value]) -> bool {
    replies.first().is_some_and(moved)
}

fn moved(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if redirect::of(e).is_some())
}

/// The try's replies (after any `BLPOP` reply), for the lock with `keys`.
pub(crate) fn parse_try(keys: &Keys, replies: &[Value]) -> Result<Attempt, Error> {
    match replies {
        // Taken, then the key moved before the reads (a slot migration): the reads do not
        // matter.
        [Value::Okay, get, _] if moved(get) => Ok(Attempt::Acquired { token: None }),
        [Value::Nil, get, pttl] if moved(get) || moved(pttl) => Ok(Attempt::Busy {
            owner: None,
            pttl: Pttl::Gone,
        }),
        [set, get, pttl] => {
            let owner = owner(keys, get)?;
            match set {
                Value::Okay => Ok(Attempt::Acquired { token: None }),
                Value::Nil => Ok(Attempt::Busy {
                    pttl: if owner.is_some() {
                        Pttl::parse(pttl)?
                    } else {
                        Pttl::Gone
                    },
                    owner,
                }),
                other => Err(reply_error(other)),
            }
        }
        [script] => parse_acquire_script(keys, script),
        _ => Err(Error::unexpected(&replies)),
    }
}

fn parse_acquire_script(keys: &Keys, reply: &Value) -> Result<Attempt, Error> {
    let Value::Array(items) = reply else {
        return Err(reply_error(reply));
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(token)] => Ok(Attempt::Acquired {
            token: Some(u64::try_from(*token).map_err(|_| Error::unexpected(reply))?),
        }),
        [Value::Int(0), owner_reply, pttl] => Ok(Attempt::Busy {
            owner: owner(keys, owner_reply)?,
            pttl: Pttl::parse(pttl)?,
        }),
        [Value::Int(-1), Value::Int(which), Value::BulkString(reason)] => Err(Error::Corrupt {
            key: if *which == 1 {
                keys.lock.clone()
            } else {
                keys.fence.clone()
            },
            reason: String::from_utf8_lossy(reason).into_owned(),
        }),
        _ => Err(Error::unexpected(reply)),
    }
}

/// The owner id in a `GET` of the lock key; a key of another type is not a lock.
fn owner(keys: &Keys, reply: &Value) -> Result<Option<Vec<u8>>, Error> {
    match reply {
        Value::Nil => Ok(None),
        Value::BulkString(id) => Ok(Some(id.clone())),
        Value::ServerError(e) if wrong_type(e) => Err(not_a_lock(keys)),
        other => Err(reply_error(other)),
    }
}

/// Whether `e` says a key holds the wrong type: `WRONGTYPE`, or, from inside a script on Redis
/// 6.2, `ERR Error running script (...): ... WRONGTYPE ...`.
fn wrong_type(e: &redis::ServerError) -> bool {
    e.code() == "WRONGTYPE"
        || (e.code() == "ERR" && e.details().is_some_and(|d| d.contains(": WRONGTYPE ")))
}

/// A key at `lock:<name>` that is not a string.
fn not_a_lock(keys: &Keys) -> Error {
    Error::Corrupt {
        key: keys.lock.clone(),
        reason: "it holds a value that is not a string, so it is not a lock".into(),
    }
}

/// `verb key`.
fn on_key(verb: &str, key: &str) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(key);
    cmd
}

/// An error reply as the server's error; anything else as a reply the lock never expects.
fn reply_error(reply: &Value) -> Error {
    match reply {
        Value::ServerError(e) => Error::Redis(e.clone().into()),
        other => Error::unexpected(other),
    }
}

/// What a read of the lock found, in one atomic step.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) owner: Option<Vec<u8>>,
    pub(crate) pttl: Pttl,
    /// The fencing counter, when asked for.
    pub(crate) fence: Option<u64>,
}

/// `GET`, `PTTL` (and the fencing counter) in one `MULTI`, so the TTL belongs to the owner
/// read with it. A read: repeatable.
pub(crate) fn observe(keys: &Keys, with_fence: bool) -> Request {
    let mut cmds = vec![
        redis::cmd("MULTI"),
        on_key("GET", &keys.lock),
        on_key("PTTL", &keys.lock),
    ];
    if with_fence {
        cmds.push(on_key("GET", &keys.fence));
    }
    cmds.push(redis::cmd("EXEC"));
    Request::new(cmds, true)
        .on_slot(keys.slot)
        .of_kind(Kind::Read { keys: keys.clone() })
}

pub(crate) fn parse_observe(keys: &Keys, replies: &[Value]) -> Result<Observed, Error> {
    // MULTI's +OK and each QUEUED come first; EXEC's array has the answers. A command refused
    // while queueing (an ACL) says why there, and EXEC only that it was discarded.
    if let Some(refused) = replies[..replies.len().saturating_sub(1)]
        .iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(reply_error(refused));
    }
    let Some(exec) = replies.last() else {
        return Err(Error::unexpected(&replies));
    };
    let Value::Array(items) = exec else {
        return Err(reply_error(exec));
    };
    let (get, pttl, fence) = match items.as_slice() {
        [get, pttl] => (get, pttl, None),
        [get, pttl, fence] => (get, pttl, Some(fence)),
        _ => return Err(Error::unexpected(exec)),
    };
    let owner = owner(keys, get)?;
    let fence = match fence {
        None | Some(Value::Nil) => None,
        Some(Value::BulkString(text)) => Some(
            std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| Error::Corrupt {
                    key: keys.fence.clone(),
                    reason: "the fencing counter is not a non-negative integer".into(),
                })?,
        ),
        Some(other) => return Err(reply_error(other)),
    };
    Ok(Observed {
        pttl: if owner.is_some() {
            Pttl::parse(pttl)?
        } else {
            Pttl::Gone
        },
        owner,
        fence,
    })
}

/// Releases the lock held by `owner` and wakes one waiter (python-redis-lock's unlock).
/// Owner-checked, so repeatable: a second run finds the key gone or someone else's, and
/// changes nothing.
pub(crate) fn unlock(keys: &Keys, owner: &[u8], signal_expire_ms: u64) -> Request {
    Request::new(Vec::new(), true)
        .with_script(
            &UNLOCK,
            &[keys.lock.as_bytes(), keys.signal.as_bytes()],
            &[owner, &num(signal_expire_ms)],
        )
        .on_slot(keys.slot)
        .of_kind(Kind::Unlock { keys: keys.clone() })
}

/// Whether an unlock released the lock: `false` when it was not held by that owner.
pub(crate) fn parse_unlock(keys: &Keys, reply: &Value) -> Result<bool, Error> {
    match reply {
        Value::Int(0) => Ok(true),
        Value::Int(1) => Ok(false),
        Value::ServerError(e) if wrong_type(e) => Err(not_a_lock(keys)),
        other => Err(reply_error(other)),
    }
}

/// Sets a new expiry of `ms` on the lock if `id` holds it. Owner-checked, so repeatable.
pub(crate) fn extend(keys: &Keys, id: &str, ms: u64) -> Request {
    let kind = Kind::Extend {
        keys: keys.clone(),
        id: id.as_bytes().to_vec(),
        ms,
    };
    Request::new(Vec::new(), true)
        .with_script(&EXTEND, &[keys.lock.as_bytes()], &[id.as_bytes(), &num(ms)])
        .on_slot(keys.slot)
        .of_kind(kind)
}

/// How an extend came out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Extended {
    Yes,
    NotOurs,
    NoExpiry,
}

pub(crate) fn parse_extend(keys: &Keys, reply: &Value) -> Result<Extended, Error> {
    match reply {
        Value::Int(0) => Ok(Extended::Yes),
        Value::Int(1) => Ok(Extended::NotOurs),
        Value::Int(2) => Ok(Extended::NoExpiry),
        Value::ServerError(e) if wrong_type(e) => Err(not_a_lock(keys)),
        other => Err(reply_error(other)),
    }
}

/// One `SCAN` step over the keys that match `pattern`. A read.
pub(crate) fn scan(cursor: u64, pattern: &str, count: usize) -> Request {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count);
    Request::new(vec![cmd], true)
}

/// The next cursor and the keys found.
pub(crate) fn parse_scan(reply: &Value) -> Result<(u64, Vec<Vec<u8>>), Error> {
    let Value::Array(items) = reply else {
        return Err(reply_error(reply));
    };
    let [Value::BulkString(cursor), Value::Array(keys)] = items.as_slice() else {
        return Err(Error::unexpected(reply));
    };
    let cursor = std::str::from_utf8(cursor)
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::unexpected(reply))?;
    let keys = keys
        .iter()
        .map(|k| match k {
            Value::BulkString(k) => Ok(k.clone()),
            other => Err(Error::unexpected(other)),
        })
        .collect::<Result<_, _>>()?;
    Ok((cursor, keys))
}

/// The owners of the lock keys found by a scan (`MGET`: `nil` for a key that is gone or not
/// a string). A read. On a cluster the keys must share a hash slot.
pub(crate) fn owners(lock_keys: &[Vec<u8>]) -> Request {
    let mut cmd = redis::cmd("MGET");
    cmd.arg(lock_keys);
    Request::new(vec![cmd], true).on_slot(first_slot(lock_keys.iter().map(Vec::as_slice)))
}

/// The hash slot of the first of `keys` (0 for none): a batch's keys share it on a cluster.
fn first_slot<'k>(mut keys: impl Iterator<Item = &'k [u8]>) -> u16 {
    keys.next().map_or(0, super::keys::slot)
}

pub(crate) fn parse_owners(reply: &Value, n: usize) -> Result<Vec<Option<Vec<u8>>>, Error> {
    match reply {
        Value::Array(items) if items.len() == n => items
            .iter()
            .map(|v| match v {
                Value::Nil => Ok(None),
                Value::BulkString(id) => Ok(Some(id.clone())),
                other => Err(Error::unexpected(other)),
            })
            .collect(),
        other => Err(reply_error(other)),
    }
}

/// Resets every lock in `held` (lock key, its signal list, the owner read) that the owner
/// still holds, waking a waiter on each. Owner-checked, so repeatable, and never deletes a
/// lock taken after the owners were read. On a cluster the keys must share a hash slot.
pub(crate) fn reset_batch(held: &[(Vec<u8>, Vec<u8>, Vec<u8>)], signal_expire_ms: u64) -> Request {
    let keys: Vec<&[u8]> = held
        .iter()
        .flat_map(|(lock, signal, _)| [lock.as_slice(), signal.as_slice()])
        .collect();
    let expire = num(signal_expire_ms);
    let mut args: Vec<&[u8]> = vec![&expire];
    args.extend(held.iter().map(|(_, _, owner)| owner.as_slice()));
    Request::new(Vec::new(), true)
        .with_script(&RESET_ALL, &keys, &args)
        .on_slot(first_slot(held.iter().map(|(lock, _, _)| lock.as_slice())))
}

/// How many locks a reset batch deleted.
pub(crate) fn parse_count(reply: &Value) -> Result<usize, Error> {
    match reply {
        Value::Int(n) => usize::try_from(*n).map_err(|_| Error::unexpected(reply)),
        other => Err(reply_error(other)),
    }
}

/// The operator's reset of the lock held by `owner` (the owner it read): deletes it only if
/// that owner still holds it, and wakes one waiter. With `force`, a key at the lock's name
/// that is not a lock is deleted instead of reported; a lock is still never deleted unless it
/// holds `owner`. Owner-checked, so repeatable. Voted on as an unlock: without `force` it
/// answers as `unlock.lua` does.
pub(crate) fn reset(keys: &Keys, owner: &[u8], signal_expire_ms: u64, force: bool) -> Request {
    let force_arg: &[u8] = if force { b"1" } else { b"0" };
    let kind = if force {
        Kind::Other
    } else {
        Kind::Unlock { keys: keys.clone() }
    };
    Request::new(Vec::new(), true)
        .with_script(
            &RESET,
            &[keys.lock.as_bytes(), keys.signal.as_bytes()],
            &[owner, &num(signal_expire_ms), force_arg],
        )
        .on_slot(keys.slot)
        .of_kind(kind)
}

/// How a reset came out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The lock held the owner read, and is gone.
    Deleted,
    /// The lock no longer held that owner: released, expired or taken since.
    NotThatOwner,
    /// The key was not a lock, and `force` deleted it.
    NotALockDeleted,
}

pub(crate) fn parse_reset(keys: &Keys, reply: &Value) -> Result<Reset, Error> {
    match reply {
        Value::Int(0) => Ok(Reset::Deleted),
        Value::Int(1) => Ok(Reset::NotThatOwner),
        Value::Int(2) => Ok(Reset::NotALockDeleted),
        Value::ServerError(e) if wrong_type(e) => Err(not_a_lock(keys)),
        other => Err(reply_error(other)),
    }
}

/// The owner, TTL and fencing counter of each of `lock_keys` (found by a scan, sharing a
/// hash slot), read in one `MULTI` so each TTL and token belong to the owner read with them:
/// `GET`, `PTTL` and `GET lock-fence:<name>` per key (the fence key shares the lock key's
/// slot). A read, so repeatable. A key that is not a string answers its `GET` with an error.
pub(crate) fn holders(lock_keys: &[Vec<u8>]) -> Request {
    let mut cmds = vec![redis::cmd("MULTI")];
    for key in lock_keys {
        let mut get = redis::cmd("GET");
        get.arg(key);
        let mut pttl = redis::cmd("PTTL");
        pttl.arg(key);
        let mut fence = redis::cmd("GET");
        fence.arg([FENCE_PREFIX, key.strip_prefix(LOCK_PREFIX).unwrap_or(key)].concat());
        cmds.extend([get, pttl, fence]);
    }
    cmds.push(redis::cmd("EXEC"));
    Request::new(cmds, true).on_slot(first_slot(lock_keys.iter().map(Vec::as_slice)))
}

const LOCK_PREFIX: &[u8] = b"lock:";
const FENCE_PREFIX: &[u8] = b"lock-fence:";

/// A lock key's owner id, what is left of its expiry, and its fencing counter when
/// `lock-fence:<name>` holds one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holding {
    pub(crate) id: Vec<u8>,
    pub(crate) pttl: Pttl,
    pub(crate) token: Option<u64>,
}

/// For each key of a [`holders`] request, in order: its holding, or `None` when the key is
/// gone or is not a lock.
pub(crate) fn parse_holders(replies: &[Value], n: usize) -> Result<Vec<Option<Holding>>, Error> {
    if let Some(refused) = replies[..replies.len().saturating_sub(1)]
        .iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(reply_error(refused));
    }
    let exec = replies.last().ok_or_else(|| Error::unexpected(&replies))?;
    let Value::Array(items) = exec else {
        return Err(reply_error(exec));
    };
    if items.len() != 3 * n {
        return Err(Error::unexpected(exec));
    }
    items
        .chunks_exact(3)
        .map(|triple| match triple {
            [Value::BulkString(id), pttl, fence] => match Pttl::parse(pttl)? {
                Pttl::Gone => Ok(None),
                pttl => Ok(Some(Holding {
                    id: id.clone(),
                    pttl,
                    token: token(fence),
                })),
            },
            // Gone, or not a string (WRONGTYPE): no lock to list.
            [Value::Nil | Value::ServerError(_), _, _] => Ok(None),
            _ => Err(Error::unexpected(exec)),
        })
        .collect()
}

/// A fencing counter as a listing shows it: one that is missing or not a number is no
/// token, rather than a failed listing of every other lock.
fn token(fence: &Value) -> Option<u64> {
    match fence {
        Value::BulkString(text) => std::str::from_utf8(text).ok()?.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::*;

    #[test]
    fn a_listing_reads_each_locks_fence_key_and_a_bad_counter_is_no_token() {
        let wire = String::from_utf8(holders(&[b"lock:{a}".to_vec()]).packed()).unwrap();
        assert!(wire.contains("$3\r\nGET\r\n$14\r\nlock-fence:{a}\r\n"));
        let exec = Value::Array(vec![
            bulk("me"),
            Value::Int(-1),
            bulk("7"),
            bulk("you"),
            Value::Int(-1),
            bulk("not a number"),
        ]);
        let found = parse_holders(&[exec], 2).unwrap();
        let tokens: Vec<_> = found.into_iter().map(|h| h.unwrap().token).collect();
        assert_eq!(tokens, [Some(7), None]);
    }

    #[test]
    fn a_try_without_fencing_is_three_plain_commands() {
        let req = try_lock(&keys(), "me", Some(500), false);
        assert_eq!(req.cmds.len(), 3);
        assert!(!req.repeatable);
        let wire = String::from_utf8(req.packed()).unwrap();
        assert!(
            wire.contains("SET\r\n$6\r\nlock:l\r\n$2\r\nme\r\n$2\r\nNX\r\n$2\r\nPX\r\n$3\r\n500")
        );
    }

    #[test]
    fn a_wait_puts_the_blpop_first_with_millisecond_timeout() {
        let req = wait_then_try(
            &keys(),
            "me",
            None,
            false,
            Some(Duration::from_millis(1500)),
        );
        assert_eq!(req.cmds.len(), 4);
        let wire = String::from_utf8(req.packed()).unwrap();
        assert!(wire.starts_with("*3\r\n$5\r\nBLPOP\r\n$13\r\nlock-signal:l\r\n$5\r\n1.500\r\n"));
    }

    #[test]
    fn a_taken_try_is_acquired() {
        let replies = [Value::Okay, bulk("me"), Value::Int(500)];
        assert_eq!(
            parse_try(&keys(), &replies).unwrap(),
            Attempt::Acquired { token: None }
        );
    }

    #[test]
    fn a_busy_try_reports_owner_and_ttl() {
        let replies = [Value::Nil, bulk("other"), Value::Int(250)];
        assert_eq!(
            parse_try(&keys(), &replies).unwrap(),
            Attempt::Busy {
                owner: Some(b"other".to_vec()),
                pttl: Pttl::Left(Duration::from_millis(250))
            }
        );
    }

    #[test]
    fn a_key_expiring_between_get_and_pttl_reads_as_gone_not_forever() {
        let replies = [Value::Nil, bulk("other"), Value::Int(-2)];
        assert_eq!(
            parse_try(&keys(), &replies).unwrap(),
            Attempt::Busy {
                owner: Some(b"other".to_vec()),
                pttl: Pttl::Gone
            }
        );
    }

    #[test]
    fn a_lock_freed_between_set_and_get_is_gone() {
        let replies = [Value::Nil, Value::Nil, Value::Int(-1)];
        assert_eq!(
            parse_try(&keys(), &replies).unwrap(),
            Attempt::Busy {
                owner: None,
                pttl: Pttl::Gone
            }
        );
    }

    #[test]
    fn a_list_at_the_lock_key_is_corrupt() {
        let replies = [
            Value::Nil,
            server_error("WRONGTYPE Operation"),
            Value::Int(-1),
        ];
        let err = parse_try(&keys(), &replies).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { ref key, .. } if key == "lock:l"),
            "{err}"
        );
    }

    #[test]
    fn the_fencing_script_reports_a_corrupt_counter() {
        let reply = Value::Array(vec![Value::Int(-1), Value::Int(2), bulk("not an integer")]);
        let err = parse_try(&keys(), &[reply]).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { ref key, .. } if key == "lock-fence:l"),
            "{err}"
        );
    }

    #[test]
    fn the_fencing_script_hands_out_its_token() {
        let reply = Value::Array(vec![Value::Int(1), Value::Int(7)]);
        assert_eq!(
            parse_try(&keys(), &[reply]).unwrap(),
            Attempt::Acquired { token: Some(7) }
        );
    }

    #[test]
    fn an_observation_reads_the_exec_answers() {
        let replies = [
            Value::Okay,
            Value::SimpleString("QUEUED".into()),
            Value::SimpleString("QUEUED".into()),
            Value::SimpleString("QUEUED".into()),
            Value::Array(vec![bulk("me"), Value::Int(-1), bulk("12")]),
        ];
        assert_eq!(
            parse_observe(&keys(), &replies).unwrap(),
            Observed {
                owner: Some(b"me".to_vec()),
                pttl: Pttl::Forever,
                fence: Some(12)
            }
        );
    }

    #[test]
    fn unlock_and_reset_are_repeatable_but_a_try_is_not() {
        assert!(unlock(&keys(), b"me", 1000).repeatable);
        assert!(extend(&keys(), "me", 1000).repeatable);
        assert!(observe(&keys(), true).repeatable);
        assert!(!try_lock(&keys(), "me", None, true).repeatable);
    }

    #[test]
    fn noscript_resends_only_the_script_with_its_text() {
        let req = wait_then_try(&keys(), "me", Some(100), true, Some(Duration::from_secs(1)));
        let replies = [Value::Nil, server_error("NOSCRIPT No matching script")];
        let (at, retry) = req.noscript_retry(&replies, 0).unwrap();
        assert_eq!(at, 1);
        assert_eq!(retry.cmds.len(), 1);
        let wire = String::from_utf8(retry.packed()).unwrap();
        assert!(wire.starts_with("*7\r\n$4\r\nEVAL\r\n"), "{wire}");
        let args = "$1\r\n2\r\n$6\r\nlock:l\r\n$12\r\nlock-fence:l\r\n$2\r\nme\r\n$3\r\n100\r\n";
        assert!(
            wire.ends_with(args),
            "the retry keeps the call's keys and arguments: {wire}"
        );
        assert!(req
            .noscript_retry(&[Value::Nil, Value::Int(0)], 0)
            .is_none());
        let (at, _) = req.noscript_retry(&replies[1..], 1).unwrap();
        assert_eq!(at, 0, "after the BLPOP's reply is left out");
    }

    #[test]
    fn a_request_for_replicas_ends_in_wait_and_hands_its_reply_back() {
        let req = unlock(&keys(), b"me", 1000).replicated(Some((1, 50)));
        let wire = String::from_utf8(req.packed()).unwrap();
        assert!(
            wire.ends_with("*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$2\r\n50\r\n"),
            "{wire}"
        );
        let mut replies = vec![Value::Int(0), Value::Int(1)];
        assert_eq!(req.acks(&mut replies).unwrap(), Some(1));
        assert_eq!(replies, [Value::Int(0)]);
        let plain = unlock(&keys(), b"me", 1000);
        assert_eq!(plain.acks(&mut vec![Value::Int(0)]).unwrap(), None);
    }

    #[test]
    fn a_noscript_retry_waits_for_replicas_after_the_script() {
        let req = extend(&keys(), "me", 100).replicated(Some((1, 50)));
        let mut replies = vec![server_error("NOSCRIPT No matching script"), Value::Int(1)];
        let (at, retry) = req.noscript_retry(&replies, 0).unwrap();
        assert_eq!(
            retry.cmds.len(),
            2,
            "the script's text, then the WAIT again"
        );
        req.patch(&mut replies, at, vec![Value::Int(0), Value::Int(2)]);
        assert_eq!(replies, [Value::Int(0), Value::Int(2)]);
    }

    #[test]
    fn a_lock_requests_slot_is_its_lock_keys() {
        let keys = Keys::new("jobs", true);
        assert_eq!(try_lock(&keys, "me", None, false).slot, Some(keys.slot));
        assert_eq!(observe(&keys, false).slot, Some(keys.slot));
        assert_eq!(owners(&[b"lock:{jobs}".to_vec()]).slot, Some(keys.slot));
    }

    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    #[test]
    fn asking_goes_before_each_command_or_once_before_a_transaction() {
        let try_req = try_lock(&keys(), "me", None, false);
        let asked = try_req.asking();
        assert_eq!(asked.cmds.len(), 6);
        let replies = (0..6).map(Value::Int).collect();
        assert_eq!(
            try_req.without_asking(replies),
            [Value::Int(1), Value::Int(3), Value::Int(5)]
        );
        let read = observe(&keys(), false);
        assert_eq!(read.asking().cmds.len(), read.cmds.len() + 1);
        let replies = (0..5).map(Value::Int).collect::<Vec<_>>();
        assert_eq!(read.without_asking(replies).len(), 4);
    }

    #[test]
    fn a_try_turned_away_whole_took_nothing() {
        assert!(try_redirected(&[server_error("MOVED 1 127.0.0.1:7000")]));
        assert!(!try_redirected(&[Value::Okay, Value::Nil, Value::Int(-2)]));
        let partial = [
            Value::Okay,
            server_error("ASK 1 127.0.0.1:7000"),
            Value::Int(5),
        ];
        assert_eq!(
            parse_try(&keys(), &partial).unwrap(),
            Attempt::Acquired { token: None }
        );
    }

    #[test]
    fn a_reset_batch_declares_every_key_it_touches() {
        let held = vec![(
            b"lock:a".to_vec(),
            b"lock-signal:a".to_vec(),
            b"id".to_vec(),
        )];
        let wire = String::from_utf8(reset_batch(&held, 1000).packed()).unwrap();
        assert!(wire.contains(
            "$1\r\n2\r\n$6\r\nlock:a\r\n$13\r\nlock-signal:a\r\n$4\r\n1000\r\n$2\r\nid\r\n"
        ));
    }

    #[test]
    fn a_wrong_type_inside_a_script_on_redis_6_2_is_a_wrong_type() {
        let in_script = server_error(
            "ERR Error running script (call to f_a5): @user_script:1: WRONGTYPE Operation \
             against a key holding the wrong kind of value",
        );
        let Value::ServerError(e) = in_script else {
            unreachable!()
        };
        assert!(wrong_type(&e));
        let Value::ServerError(other) = server_error("ERR max number of clients reached") else {
            unreachable!()
        };
        assert!(!wrong_type(&other));
    }
}
