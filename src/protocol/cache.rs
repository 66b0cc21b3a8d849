//! The dogpile cache's requests and replies: reads and writes of an entry's value and its
//! freshness marker, which every one of them may send twice. No I/O here; the entry's keys
//! are named in [`keys`](super::keys).

use std::time::Duration;

use redis::{FromRedisValue, ToRedisArgs, Value};

use super::keys::CacheKeys;
use super::request::Request;
use crate::config::settings::millis;
use crate::Error;

/// What one `MGET` of the value and its freshness marker found.
pub(crate) enum Lookup<T> {
    Fresh(T),
    Stale(T),
    Missing,
}

/// `SET key value` with a value of zero or several arguments would be a syntax error or,
/// worse, a different command.
fn single_arg<T: ToRedisArgs>(value: &T) -> Result<(), Error> {
    match value.num_of_args() {
        1 => Ok(()),
        n => Err(Error::invalid(format!(
            "a cached value must be one Redis argument, not {n}"
        ))),
    }
}

/// `fresh_for` and `keep_for` of
/// [`Cache::get_or_revalidate`](crate::Cache::get_or_revalidate), in milliseconds, checked.
pub(crate) fn revalidate_ms(fresh_for: Duration, keep_for: Duration) -> Result<(u64, u64), Error> {
    let fresh_ms = millis("fresh_for", fresh_for)?;
    let keep_ms = millis("keep_for", keep_for)?;
    if keep_ms < fresh_ms {
        return Err(Error::invalid(format!(
            "keep_for ({keep_for:?}) is shorter than fresh_for ({fresh_for:?})"
        )));
    }
    Ok((fresh_ms, keep_ms))
}

/// The request of a plain read of the value.
pub(crate) fn get_request(keys: &CacheKeys) -> Request {
    let mut get = redis::cmd("GET");
    get.arg(&keys.value);
    Request::repeatable(vec![get]).on_slot(keys.slot)
}

/// The request that reads the value and its freshness marker together.
pub(crate) fn lookup_request(keys: &CacheKeys) -> Request {
    let mut mget = redis::cmd("MGET");
    mget.arg(&keys.value).arg(&keys.fresh);
    Request::repeatable(vec![mget]).on_slot(keys.slot)
}

/// What [`lookup_request`] found.
pub(crate) fn parse_lookup<T>(
    (value, fresh): (Option<T>, Option<Value>),
) -> Result<Lookup<T>, Error> {
    Ok(match (value, fresh) {
        (Some(value), Some(_)) => Lookup::Fresh(value),
        (Some(value), None) => Lookup::Stale(value),
        (None, _) => Lookup::Missing,
    })
}

/// The request of whether the value is still fresh.
pub(crate) fn fresh_request(keys: &CacheKeys) -> Request {
    let mut exists = redis::cmd("EXISTS");
    exists.arg(&keys.fresh);
    Request::repeatable(vec![exists]).on_slot(keys.slot)
}

/// The request that stores `value` for `ttl_ms` ([`Cache::get_or_set`](crate::Cache::get_or_set)).
pub(crate) fn set_request<T: ToRedisArgs>(
    keys: &CacheKeys,
    value: &T,
    ttl_ms: u64,
) -> Result<Request, Error> {
    single_arg(value)?;
    let mut set = redis::cmd("SET");
    set.arg(&keys.value).arg(value).arg("PX").arg(ttl_ms);
    Ok(Request::repeatable(vec![set]).on_slot(keys.slot))
}

/// The request that writes the value and its freshness marker together, so that no reader
/// sees a new marker next to an old value.
pub(crate) fn store_request<T: ToRedisArgs>(
    keys: &CacheKeys,
    value: &T,
    fresh_ms: u64,
    keep_ms: u64,
) -> Result<Request, Error> {
    single_arg(value)?;
    let mut set_value = redis::cmd("SET");
    set_value.arg(&keys.value).arg(value).arg("PX").arg(keep_ms);
    let mut set_fresh = redis::cmd("SET");
    set_fresh.arg(&keys.fresh).arg(1).arg("PX").arg(fresh_ms);
    let cmds = vec![
        redis::cmd("MULTI"),
        set_value,
        set_fresh,
        redis::cmd("EXEC"),
    ];
    Ok(Request::repeatable(cmds).on_slot(keys.slot))
}

/// Whether [`store_request`] wrote both keys.
pub(crate) fn stored(written: Vec<Value>) -> Result<(), Error> {
    match written.as_slice() {
        [Value::Okay, Value::Okay] => Ok(()),
        _ => Err(Error::unexpected(&written)),
    }
}

/// The last of `replies` as `T`.
pub(crate) fn last_reply<T: FromRedisValue>(mut replies: Vec<Value>) -> Result<T, Error> {
    let last = replies.pop().unwrap_or(Value::Nil);
    if let Value::ServerError(e) = last {
        return Err(Error::Redis(e.into()));
    }
    T::from_redis_value(last).map_err(|e| Error::UnexpectedReply(e.to_string()))
}
