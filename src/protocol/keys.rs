//! Key names: the only place they are spelled, and the hash slots they fall in.
//!
//! python-redis-lock's layout: `lock:<name>` holds the owner's id, `lock-signal:<name>` is the
//! list a release pushes to, and this crate adds `lock-fence:<name>` for fencing tokens. On a
//! Redis Cluster the three must share a hash slot, or the scripts and the `BLPOP` + try
//! pipeline could not run: there the name goes in braces (`lock:{name}`), unless it already
//! has a hash tag of its own, which then decides the slot as it is.

const LOCK_PREFIX: &str = "lock:";
const SIGNAL_PREFIX: &str = "lock-signal:";
const FENCE_PREFIX: &str = "lock-fence:";

/// The `SCAN MATCH` pattern that finds every lock key.
pub(crate) const LOCK_PATTERN: &str = "lock:*";

/// How many hash slots a Redis Cluster has.
const SLOTS: u16 = 16384;

/// The keys of one lock, and the hash slot of its lock key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) lock: String,
    pub(crate) signal: String,
    pub(crate) fence: String,
    pub(crate) slot: u16,
}

impl Keys {
    /// The keys of lock `name`; `tagged` when they must share a hash slot (a cluster).
    pub(crate) fn new(name: &str, tagged: bool) -> Keys {
        let name = if tagged { same_slot(name) } else { name.into() };
        let lock = format!("{LOCK_PREFIX}{name}");
        Keys {
            slot: slot(lock.as_bytes()),
            signal: format!("{SIGNAL_PREFIX}{name}"),
            fence: format!("{FENCE_PREFIX}{name}"),
            lock,
        }
    }
}

/// `text` in braces, unless it has a hash tag already: keys that embed the result share a
/// hash slot whatever else they add around it.
pub(crate) fn same_slot(text: &str) -> String {
    if hash_tag(text.as_bytes()).is_some() {
        text.into()
    } else {
        format!("{{{text}}}")
    }
}

/// What Redis Cluster hashes in `key`: the part between the first `{` and the first `}`
/// after it, when that part is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key`, as Redis Cluster computes it (CRC16-XMODEM of the hashed part).
pub(crate) fn slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
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
        let keys = Keys::new("a:b c", false);
        assert_eq!(keys.lock, "lock:a:b c");
        assert_eq!(keys.signal, "lock-signal:a:b c");
        assert_eq!(keys.fence, "lock-fence:a:b c");
    }

    #[test]
    fn on_a_cluster_the_name_becomes_the_hash_tag() {
        let keys = Keys::new("jobs", true);
        assert_eq!(keys.lock, "lock:{jobs}");
        assert_eq!(keys.signal, "lock-signal:{jobs}");
        assert_eq!(keys.fence, "lock-fence:{jobs}");
        assert_eq!(slot(keys.signal.as_bytes()), keys.slot);
        assert_eq!(slot(keys.fence.as_bytes()), keys.slot);
    }

    #[test]
    fn a_name_with_its_own_hash_tag_is_used_as_is() {
        // python-redis-lock's users reach `lock:{jobs}` by naming their lock `{jobs}`.
        assert_eq!(Keys::new("{jobs}", true).lock, "lock:{jobs}");
        assert_eq!(
            Keys::new("user:{42}:mail", true).lock,
            "lock:user:{42}:mail"
        );
        // An empty tag is no tag: Redis hashes the whole key.
        assert_eq!(Keys::new("a{}b", true).lock, "lock:{a{}b}");
    }

    #[test]
    fn slots_match_what_redis_cluster_computes() {
        // From CLUSTER KEYSLOT on Redis 7.0.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), 8363);
        assert_eq!(slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(slot(b""), 0);
    }

    #[test]
    fn the_signal_of_a_scanned_key_keeps_its_bytes() {
        assert_eq!(
            signal_of(b"lock:\xff\x00x"),
            Some(b"lock-signal:\xff\x00x".to_vec())
        );
        assert_eq!(signal_of(b"lock:{a}"), Some(b"lock-signal:{a}".to_vec()));
        assert_eq!(signal_of(b"lockx"), None);
    }
}

// ---- The fair queue engine's keys (semaphore, fair lock, read-write lock) ----
//
// `<kind>:{name}:<part>`, always hash-tagged, even on one server: so that a primitive's keys,
// and the signal list of each of its waiters, which a script reaches by name, share a slot.

/// A kind of primitive on the fair queue engine, as [`inspect::queues`](crate::inspect::queues)
/// reports it; its keys start with `semaphore:`, `fair-lock:` or `rwlock:`.
///
/// ```
/// use redis_blpop_lock::inspect::Primitive;
///
/// assert_ne!(Primitive::Semaphore, Primitive::RwLock);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A counting semaphore (`semaphore:{name}:*`).
    Semaphore,
    /// A fair lock: `Lock::builder(..).fair(true)` (`fair-lock:{name}:*`).
    FairLock,
    /// A read-write lock (`rwlock:{name}:*`): a reader holds 1 unit, a writer
    /// [`WRITER_UNITS`](crate::inspect::WRITER_UNITS).
    RwLock,
}

impl Primitive {
    pub(crate) const ALL: [Primitive; 3] =
        [Primitive::Semaphore, Primitive::FairLock, Primitive::RwLock];

    /// The `SCAN MATCH` pattern that finds every key of this kind.
    pub(crate) fn pattern(self) -> String {
        format!("{}*", self.prefix())
    }

    fn prefix(self) -> &'static str {
        match self {
            Primitive::Semaphore => "semaphore:",
            Primitive::FairLock => "fair-lock:",
            Primitive::RwLock => "rwlock:",
        }
    }
}

/// The keys of one queue-engine primitive (`scripts/queue_engine.lua` says what each holds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueKeys {
    pub(crate) holders: String,
    pub(crate) held: String,
    pub(crate) queue: String,
    pub(crate) beats: String,
    pub(crate) wants: String,
    pub(crate) tickets: String,
    pub(crate) fence: String,
    /// What each waiter's signal list is named with its id appended.
    pub(crate) signals: String,
    pub(crate) slot: u16,
}

impl QueueKeys {
    #[cfg_attr(not(test), allow(dead_code))] // Used by the handles: next.
    pub(crate) fn new(kind: Primitive, name: &str) -> QueueKeys {
        let base = format!("{}{}:", kind.prefix(), same_slot(name));
        let key = |part: &str| format!("{base}{part}");
        QueueKeys {
            slot: slot(base.as_bytes()),
            holders: key("holders"),
            held: key("held"),
            queue: key("queue"),
            beats: key("beats"),
            wants: key("wants"),
            tickets: key("tickets"),
            fence: key("fence"),
            signals: key("signal:"),
        }
    }

    /// The kind and the name (as `new` takes it) of the primitive whose key `SCAN` found, for
    /// any of its keys but its fence and its signal lists; `None` for any other key.
    pub(crate) fn of_key(key: &[u8]) -> Option<(Primitive, String)> {
        let key = std::str::from_utf8(key).ok()?;
        let kind = Primitive::ALL
            .into_iter()
            .find(|kind| key.starts_with(kind.prefix()))?;
        let (tagged, part) = key[kind.prefix().len()..].rsplit_once(':')?;
        let parts = ["holders", "held", "queue", "beats", "wants", "tickets"];
        if !parts.contains(&part) || hash_tag(tagged.as_bytes()).is_none() {
            return None;
        }
        // `new` puts braces around a name without a hash tag of its own.
        let name = match tagged.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            Some(inner) if !inner.is_empty() && !inner.contains(['{', '}']) => inner,
            _ => tagged,
        };
        (QueueKeys::new(kind, name).base() == format!("{}{tagged}:", kind.prefix()))
            .then(|| (kind, name.to_owned()))
    }

    /// What every key of the primitive starts with.
    fn base(&self) -> &str {
        self.signals.trim_end_matches("signal:")
    }

    /// The signal list of waiter `id`.
    pub(crate) fn signal(&self, id: &str) -> String {
        format!("{}{id}", self.signals)
    }

    /// The scripts' `KEYS`, in their order.
    pub(crate) fn all(&self) -> [&str; 8] {
        [
            &self.holders,
            &self.held,
            &self.queue,
            &self.beats,
            &self.wants,
            &self.tickets,
            &self.fence,
            &self.signals,
        ]
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    #[test]
    fn a_primitives_keys_are_tagged_with_its_name_and_share_its_slot() {
        let keys = QueueKeys::new(Primitive::Semaphore, "db");
        assert_eq!(keys.holders, "semaphore:{db}:holders");
        assert_eq!(keys.signal("w1"), "semaphore:{db}:signal:w1");
        for key in keys.all() {
            assert_eq!(slot(key.as_bytes()), keys.slot, "{key}");
        }
        assert_eq!(
            QueueKeys::new(Primitive::FairLock, "{jobs}").queue,
            "fair-lock:{jobs}:queue"
        );
        assert_eq!(
            QueueKeys::new(Primitive::RwLock, "a").fence,
            "rwlock:{a}:fence"
        );
    }

    #[test]
    fn a_scanned_key_names_its_primitive_as_new_takes_it() {
        for name in ["db", "{jobs}", "user:{42}:mail", "a:b", "{a}b{c}"] {
            for kind in Primitive::ALL {
                let keys = QueueKeys::new(kind, name);
                for key in [&keys.holders, &keys.queue, &keys.tickets] {
                    let (found, named) = QueueKeys::of_key(key.as_bytes()).unwrap();
                    assert_eq!((found, QueueKeys::new(found, &named)), (kind, keys.clone()));
                }
                assert_eq!(QueueKeys::of_key(keys.fence.as_bytes()), None);
                assert_eq!(QueueKeys::of_key(keys.signal("w").as_bytes()), None);
            }
        }
        assert_eq!(QueueKeys::of_key(b"semaphore:db:holders"), None);
        assert_eq!(QueueKeys::of_key(b"lock:{db}:holders"), None);
        assert_eq!(QueueKeys::of_key(b"semaphore:{db}:\xff"), None);
    }
}
