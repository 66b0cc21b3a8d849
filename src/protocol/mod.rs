//! The protocol core, with no I/O: key names, requests and their replies, and what a handle
//! knows about its lock over time. The drivers and connection backends build on this.

pub(crate) mod admin;
pub(crate) mod cache;
pub(crate) mod cover;
pub(crate) mod election;
pub(crate) mod eviction;
pub(crate) mod hub;
pub(crate) mod keys;
pub(crate) mod lease;
pub(crate) mod leasing;
pub(crate) mod lock;
pub(crate) mod lock_wait;
pub(crate) mod primitive;
pub(crate) mod queue;
pub(crate) mod quorum;
pub(crate) mod readers;
pub(crate) mod redirect;
pub(crate) mod request;
pub(crate) mod scripts;
pub(crate) mod watch;

/// Values the protocol's unit tests build replies from.
#[cfg(test)]
pub(crate) mod testing {
    use redis::Value;

    use super::keys::Keys;

    /// The keys of lock `l` on one server.
    pub(crate) fn keys() -> Keys {
        Keys::new("l", false)
    }

    pub(crate) fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// The error reply `-text`, as the server sends it.
    pub(crate) fn server_error(text: &str) -> Value {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(reply @ Value::ServerError(_)) => reply,
            other => panic!("{other:?}"),
        }
    }
}

/// A connection at a server: its `CLIENT ID` there, and which of the transport's servers it
/// is on (ids are only unique per server). The core keeps it to close a connection whose
/// request may still run; only the transport knows what it points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnId {
    pub(crate) node: usize,
    pub(crate) id: u64,
}
