//! Whether a server may evict a lock's keys: its `maxmemory-policy`, as `INFO memory` says.
//! (`CONFIG GET` is often refused under ACLs and on managed services; `INFO` rarely is.)

use redis::Value;

use super::request::Request;

/// A server's `maxmemory-policy`, when it is one that can evict keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Evicts {
    /// The policy's name, e.g. `allkeys-lru`.
    pub(crate) policy: String,
}

/// `INFO memory`, which carries `maxmemory_policy`. Reading it twice does no harm.
pub(crate) fn request() -> Request {
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    Request::single(info, true)
}

/// What the reply to [`request`] says: `Some(None)` for a policy that never evicts
/// (`noeviction`), `Some(Some(_))` for one that can, `None` when it does not say (an error,
/// no such field, a policy this crate does not know).
pub(crate) fn parse(reply: &Value) -> Option<Option<Evicts>> {
    let text = match reply {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
        Value::VerbatimString { text, .. } => text,
        Value::SimpleString(text) => text,
        _ => return None,
    };
    let policy = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("maxmemory_policy:"))?
        .trim();
    match policy {
        "noeviction" => Some(None),
        _ if threatened(policy).is_some() => Some(Some(Evicts {
            policy: policy.to_owned(),
        })),
        _ => None,
    }
}

/// Which of a lock's keys `policy` may evict; `None` for a policy that evicts none.
fn threatened(policy: &str) -> Option<&'static str> {
    if policy.starts_with("volatile-") {
        Some("the keys of locks that carry an expiry")
    } else if policy.starts_with("allkeys-") {
        Some(
            "any key: locks, fencing counters (tokens then rest on the server's clock alone) \
             and queue keys",
        )
    } else {
        None
    }
}

/// The warning about `server`, whose policy is `policy`: what it threatens and the fix.
pub(crate) fn warning(server: &str, policy: &str) -> String {
    let threatened = threatened(policy).unwrap_or("keys");
    format!(
        "server {server} evicts keys (maxmemory-policy {policy}): locks can be lost, since it may \
         evict {threatened}; set maxmemory-policy noeviction or use a separate instance for locks"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::{bulk, server_error};

    fn info(policy: &str) -> Value {
        bulk(&format!(
            "# Memory\r\nused_memory:1024\r\nmaxmemory:8388608\r\nmaxmemory_human:8.00M\r\n\
             maxmemory_policy:{policy}\r\nallocator_frag_ratio:1.00\r\n"
        ))
    }

    #[test]
    fn noeviction_never_evicts() {
        assert_eq!(parse(&info("noeviction")), Some(None));
    }

    #[test]
    fn every_allkeys_and_volatile_policy_evicts() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let evicts = Evicts {
                policy: policy.to_owned(),
            };
            assert_eq!(parse(&info(policy)), Some(Some(evicts)), "{policy}");
        }
    }

    #[test]
    fn a_reply_that_does_not_say_is_unknown() {
        assert_eq!(
            parse(&server_error("NOPERM this user has no permissions")),
            None
        );
        assert_eq!(parse(&bulk("# Memory\r\nused_memory:1024\r\n")), None);
        assert_eq!(parse(&info("some-future-policy")), None);
        assert_eq!(parse(&Value::Nil), None);
        assert_eq!(parse(&Value::BulkString(vec![0xff, 0xfe])), None);
    }

    #[test]
    fn the_warning_names_the_policy_what_it_threatens_and_the_fix() {
        let volatile = warning("127.0.0.1:6379", "volatile-ttl");
        assert!(volatile.contains("127.0.0.1:6379"), "{volatile}");
        assert!(
            volatile.contains("maxmemory-policy volatile-ttl"),
            "{volatile}"
        );
        assert!(
            volatile.contains("locks that carry an expiry"),
            "{volatile}"
        );
        assert!(volatile.contains("noeviction"), "{volatile}");
        let allkeys = warning("127.0.0.1:6379", "allkeys-lru");
        assert!(allkeys.contains("fencing counters"), "{allkeys}");
        assert!(allkeys.contains("separate instance"), "{allkeys}");
    }
}
