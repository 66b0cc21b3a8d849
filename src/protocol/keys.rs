//! Key names: the only place they are spelled.
//!
//! python-redis-lock's layout: `lock:<name>` holds the owner's id, `lock-signal:<name>` is the
//! list a release pushes to, and this crate adds `lock-fence:<name>` for fencing tokens.

const LOCK_PREFIX: &str = "lock:";
const SIGNAL_PREFIX: &str = "lock-signal:";
const FENCE_PREFIX: &str = "lock-fence:";

/// The `SCAN MATCH` pattern that finds every lock key.
pub(crate) const LOCK_PATTERN: &str = "lock:*";

/// The keys of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) lock: String,
    pub(crate) signal: String,
    pub(crate) fence: String,
}

impl Keys {
    pub(crate) fn new(name: &str) -> Keys {
        Keys {
            lock: format!("{LOCK_PREFIX}{name}"),
            signal: format!("{SIGNAL_PREFIX}{name}"),
            fence: format!("{FENCE_PREFIX}{name}"),
        }
    }
}

/// The signal list that belongs to a lock key found by `SCAN` (any bytes after the prefix).
/// `None` for a key that is not a lock key.
pub(crate) fn signal_of(lock_key: &[u8]) -> Option<Vec<u8>> {
    let name = lock_key.strip_prefix(LOCK_PREFIX.as_bytes())?;
    Some([SIGNAL_PREFIX.as_bytes(), name].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_python_redis_locks_with_the_name_as_given() {
        let keys = Keys::new("a:b c");
        assert_eq!(keys.lock, "lock:a:b c");
        assert_eq!(keys.signal, "lock-signal:a:b c");
        assert_eq!(keys.fence, "lock-fence:a:b c");
    }

    #[test]
    fn the_signal_of_a_scanned_key_keeps_its_bytes() {
        assert_eq!(
            signal_of(b"lock:\xff\x00x"),
            Some(b"lock-signal:\xff\x00x".to_vec())
        );
        assert_eq!(signal_of(b"lockx"), None);
    }
}
