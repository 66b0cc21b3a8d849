//! The operator's requests over every lock on a server, for `inspect` and `reset_all`: `SCAN`
//! steps, and batches over the lock keys a scan found, which on a cluster share a hash slot.

use redis::Value;

use super::keys::{fence_of, slot};
use super::lock::Pttl;
use super::request::{num, reply_error, Request};
use super::scripts::RESET_ALL;
use crate::Error;

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
    keys.next().map_or(0, slot)
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
        fence.arg(fence_of(key));
        cmds.extend([get, pttl, fence]);
    }
    cmds.push(redis::cmd("EXEC"));
    Request::new(cmds, true).on_slot(first_slot(lock_keys.iter().map(Vec::as_slice)))
}

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
}
