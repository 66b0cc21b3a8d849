//! What a server says of itself when a connection opens (`HELLO`): its flavour and version,
//! and so which administrative commands it can be trusted with.
//!
//! Redis from 6.2 until the fix (7.4.6, 8.0.4, 8.2.0) and Valkey until its fix (8.0.5; tested
//! here in 8.1.8) crash ("Unknown btype in replyToBlockedClientTimedOut") when `CLIENT UNBLOCK
//! <id> TIMEOUT` reaches a client whose command `CLIENT PAUSE` holds back, and any pause (an
//! operator's, `FAILOVER`, a manual `CLUSTER FAILOVER`) holds back a waiter's `BLPOP`. The fix
//! (redis/redis#14164, valkey-io/valkey#2117) makes the command answer 0 instead. A wait on
//! any other server, or on one that does not say what it is, is ended by closing its
//! connection (`CLIENT KILL`, which those versions take safely). That also ends a `BLPOP`
//! whose timeout a pause made the server forget (redis/redis#14165, fixed in the same
//! releases).

use redis::Value;

/// Which server a connection reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavour {
    Redis,
    Valkey,
}

/// A server's flavour and version, as its `HELLO` reply gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) flavour: Flavour,
    pub(crate) version: (u32, u32, u32),
}

/// The first release of each line that answers `CLIENT UNBLOCK` of a paused client with 0
/// instead of crashing, from the release notes; the last of each flavour holds for every line
/// after it. Lines not listed (Redis 6.2, 7.0, 7.2) have no such release. Valkey 8.1 is
/// listed from 8.1.8, the first tested here: its notes do not say which patch took the fix.
const SAFE_UNBLOCK: [(Flavour, (u32, u32, u32)); 6] = [
    (Flavour::Redis, (7, 4, 6)),
    (Flavour::Redis, (8, 0, 4)),
    (Flavour::Redis, (8, 2, 0)),
    (Flavour::Valkey, (8, 0, 5)),
    (Flavour::Valkey, (8, 1, 8)),
    (Flavour::Valkey, (9, 0, 0)),
];

/// The `HELLO` command with no arguments: it answers without changing the protocol.
pub(crate) fn hello_cmd() -> redis::Cmd {
    redis::cmd("HELLO")
}

impl Hello {
    /// The server described by a reply to `HELLO` (a RESP2 array of names and values, or a
    /// RESP3 map); `None` for an error (an ACL, a proxy that does not know the command) or a
    /// reply without a server and version it knows.
    pub(crate) fn parse(reply: &Value) -> Option<Hello> {
        let pairs: Vec<(&Value, &Value)> = match reply {
            Value::Array(items) => items
                .chunks_exact(2)
                .map(|pair| (&pair[0], &pair[1]))
                .collect(),
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            _ => return None,
        };
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| text(key) == Some(name))
                .and_then(|(_, value)| text(value))
        };
        let flavour = match field("server")? {
            "redis" => Flavour::Redis,
            "valkey" => Flavour::Valkey,
            _ => return None,
        };
        Some(Hello {
            flavour,
            version: version(field("version")?)?,
        })
    }

    /// Whether `CLIENT UNBLOCK` can end a wait on this server without risk of crashing it.
    pub(crate) fn unblock_is_safe(&self) -> bool {
        let (major, minor, _) = self.version;
        let mut fixes = SAFE_UNBLOCK
            .iter()
            .filter(|(flavour, _)| *flavour == self.flavour);
        let same_line = fixes
            .clone()
            .any(|(_, fixed)| (fixed.0, fixed.1) == (major, minor) && self.version >= *fixed);
        let newer_line = fixes
            .next_back()
            .is_some_and(|(_, fixed)| self.version >= *fixed);
        same_line || newer_line
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// `major.minor.patch`, ignoring anything after the patch number (`7.2.4-rc1`).
fn version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|part| {
        let digits = part
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(part.len());
        part[..digits].parse::<u32>().ok()
    });
    Some((parts.next()??, parts.next()??, parts.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::{bulk, server_error};

    fn hello(server: &str, version: &str) -> Value {
        Value::Array(vec![
            bulk("server"),
            bulk(server),
            bulk("version"),
            bulk(version),
            bulk("proto"),
            Value::Int(2),
            bulk("id"),
            Value::Int(5),
        ])
    }

    fn safe(server: &str, version: &str) -> bool {
        Hello::parse(&hello(server, version))
            .unwrap()
            .unblock_is_safe()
    }

    #[test]
    fn redis_is_trusted_with_client_unblock_only_from_the_releases_that_fixed_it() {
        for version in [
            "6.2.14", "6.2.20", "7.0.15", "7.2.12", "7.4.5", "8.0.3", "8.1.0",
        ] {
            assert!(!safe("redis", version), "{version}");
        }
        for version in [
            "7.4.6", "7.4.9", "8.0.4", "8.2.0", "8.2.3", "8.4.0", "10.0.0",
        ] {
            assert!(safe("redis", version), "{version}");
        }
    }

    #[test]
    fn valkey_is_trusted_with_client_unblock_only_from_the_releases_that_fixed_it() {
        for version in ["7.2.9", "8.0.4", "8.1.1", "8.1.7"] {
            assert!(!safe("valkey", version), "{version}");
        }
        for version in ["8.0.5", "8.1.8", "9.0.0", "9.1.2"] {
            assert!(safe("valkey", version), "{version}");
        }
    }

    #[test]
    fn a_resp3_map_is_read_as_well() {
        let map = Value::Map(vec![
            (bulk("server"), bulk("valkey")),
            (bulk("version"), bulk("8.1.8")),
        ]);
        assert_eq!(
            Hello::parse(&map),
            Some(Hello {
                flavour: Flavour::Valkey,
                version: (8, 1, 8)
            })
        );
    }

    #[test]
    fn a_server_that_does_not_say_what_it_is_is_unknown() {
        assert_eq!(
            Hello::parse(&server_error("ERR unknown command 'HELLO'")),
            None
        );
        assert_eq!(Hello::parse(&hello("keydb", "6.3.4")), None);
        assert_eq!(Hello::parse(&hello("redis", "seven")), None);
        assert_eq!(Hello::parse(&hello("redis", "7.2")), None);
        assert_eq!(Hello::parse(&Value::Array(vec![bulk("server")])), None);
        assert_eq!(Hello::parse(&Value::Nil), None);
    }

    #[test]
    fn a_suffix_after_the_patch_number_is_ignored() {
        let server = Hello::parse(&hello("redis", "8.2.0-rc1")).unwrap();
        assert_eq!(server.version, (8, 2, 0));
    }
}
