//! python-redis-lock's wire format for the plain lock: the try, the owner-checked unlock, extend and reset, the atomic read of owner and TTL, and
//! what their replies say about the lock.

use std::time::Duration;

use redis::Value;

use super::keys::Keys;
use super::redirect;
use super::request::{num, on_key, reply_error, Kind, Request};
use super::scripts::{ACQUIRE, EXTEND, GIVE_BACK, RESET, UNLOCK};
use crate::Error;

/// The signal expiry of a give-back that wakes a waiter (python-redis-lock's default).
const GIVE_BACK_SIGNAL_EXPIRE_MS: u64 = 1000;

/// One try at the lock. Without fencing it is `SET NX [PX]`, `GET`, `PTTL`: plain commands
/// cost the server a third of a script, and need not be atomic (if the owner lets go between
/// them, `GET` finds no owner and the next try follows at once). With fencing, `acquire.lua`
/// takes the token and the lock together, or neither.
///
/// Not repeatable: a second run could take a lock freed after the first. A lost reply is
/// settled by reading the owner ([`holder`]).
pub(crate) fn try_lock(keys: &Keys, id: &str, expire_ms: Option<u64>, fencing: bool) -> Request {
    let kind = Kind::Try {
        keys: keys.clone(),
        id: id.as_bytes().to_vec(),
        expire_ms,
    };
    let mut cmds = Vec::with_capacity(3);
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pttl {
    /// -2: the key is gone (expired or deleted since it was read).
    Gone,
    /// -1: the key has no expiry.
    Forever,
    /// This much is left of its expiry.
    Left(Duration),
}

impl Pttl {
    pub(super) fn parse(value: &Value) -> Result<Pttl, Error> {
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
    pass_on_to(&keys.signal, keys.slot)
}

/// [`pass_on`] for the signal list `signal`, in hash slot `slot`.
pub(crate) fn pass_on_to(signal: &str, slot: u16) -> Request {
    let mut push = redis::cmd("LPUSH");
    push.arg(signal).arg(1);
    let mut expire = redis::cmd("PEXPIRE");
    expire.arg(signal).arg(GIVE_BACK_SIGNAL_EXPIRE_MS);
    Request::new(vec![push, expire], true).on_slot(slot)
}

/// Whether a try was turned away whole, having taken nothing: by a cluster that moved the
/// key, or a primary that is changing. Where its key lives now, it may be free.
pub(crate) fn try_redirected(replies: &[Value]) -> bool {
    replies.first().is_some_and(moved)
}

fn moved(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if redirect::of(e).is_some())
}

/// The try's replies, for the lock with `keys`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::admin::owners;
    use crate::protocol::testing::*;

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
    fn a_lock_requests_slot_is_its_lock_keys() {
        let keys = Keys::new("jobs", true);
        assert_eq!(try_lock(&keys, "me", None, false).slot, Some(keys.slot));
        assert_eq!(observe(&keys, false).slot, Some(keys.slot));
        assert_eq!(owners(&[b"lock:{jobs}".to_vec()]).slot, Some(keys.slot));
    }

    #[test]
    fn a_try_turned_away_whole_took_nothing() {
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
