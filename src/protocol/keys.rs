//! Key names: the only place they are spelled, and the hash slots they fall in.
//!
//! python-redis-lock's layout: `lock:<name>` holds the owner's id, `lock-signal:<name>` is the
//! list a release pushes to, and this crate adds `lock-fence:<name>` for fencing tokens. On a
//! Redis Cluster the three must share a hash slot, or the scripts and the `BLPOP` + try
//! pipeline could not run: there the name goes in braces (`lock:{name}`), unless it already
//! has a hash tag of its own, which then decides the slot as it is.

use super::primitive::Primitive;

const LOCK_PREFIX: &str = "lock:";
const SIGNAL_PREFIX: &str = "lock-signal:";
const FENCE_PREFIX: &str = "lock-fence:";
const HUB_PREFIX: &str = "lock-hub:";

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

/// The list a process's hub always listens on, in hash slot `slot` when `tagged` (a
/// cluster): a push there makes it listen again on a new set of keys. Nothing else uses it,
/// so no waiter of another process or version pops what is pushed there.
pub(crate) fn hub_home(process: &str, slot: u16, tagged: bool) -> String {
    if !tagged {
        return format!("{HUB_PREFIX}{process}");
    }
    // The first short tag that hashes to `slot`: CRC16 spreads the numbers over every slot
    // within a few tens of thousands of them.
    let tag = (0u32..)
        .map(|n| n.to_string())
        .find(|tag| self::slot(tag.as_bytes()) == slot)
        .unwrap_or_default();
    format!("{HUB_PREFIX}{process}:{{{tag}}}")
}

/// The signal list that belongs to a lock key found by `SCAN` (any bytes after the prefix).
/// `None` for a key that is not a lock key.
pub(crate) fn signal_of(lock_key: &[u8]) -> Option<Vec<u8>> {
    let name = lock_key.strip_prefix(LOCK_PREFIX.as_bytes())?;
    Some([SIGNAL_PREFIX.as_bytes(), name].concat())
}

/// The fencing counter that belongs to a lock key found by `SCAN`. A key that is not a lock
/// key gets the prefix in front of it whole: its fence key is then one no lock has.
pub(crate) fn fence_of(lock_key: &[u8]) -> Vec<u8> {
    let name = lock_key
        .strip_prefix(LOCK_PREFIX.as_bytes())
        .unwrap_or(lock_key);
    [FENCE_PREFIX.as_bytes(), name].concat()
}

/// The lock name of a lock key found by `SCAN`: what follows `lock:`, without the braces
/// `Keys::new` puts around a name that has no hash tag of its own when `tagged` (a cluster:
/// `lock:{jobs}` is lock `jobs`).
pub(crate) fn lock_name_of(lock_key: &[u8], tagged: bool) -> String {
    let rest = lock_key
        .strip_prefix(LOCK_PREFIX.as_bytes())
        .unwrap_or(lock_key);
    let rest = String::from_utf8_lossy(rest).into_owned();
    let inner = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}'));
    match inner {
        Some(inner) if tagged && !inner.is_empty() && !inner.contains(['{', '}']) => inner.into(),
        _ => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hubs_home_on_a_cluster_is_in_its_slot() {
        for slot in [0, 1, 5000, 16383] {
            assert_eq!(super::slot(hub_home("p", slot, true).as_bytes()), slot);
        }
        assert_eq!(hub_home("p", 7, false), "lock-hub:p");
    }

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
    fn a_clusters_braces_are_not_part_of_the_name() {
        assert_eq!(lock_name_of(b"lock:{jobs}", true), "jobs");
        // A name with a hash tag of its own keeps it, as `Keys::new` does.
        assert_eq!(lock_name_of(b"lock:user:{42}:mail", true), "user:{42}:mail");
        assert_eq!(lock_name_of(b"lock:{a}b{c}", true), "{a}b{c}");
        // Off a cluster the braces are the name's own.
        assert_eq!(lock_name_of(b"lock:{jobs}", false), "{jobs}");
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
// Always hash-tagged, even on one server, so that a primitive's keys, and the signal list of
// each of its waiters, which a script reaches by name, share a slot. Two families, one rule:
// `<kind>:{<name>}:<part>` for a name without a hash tag of its own, `<kind>:=<name>:<part>`
// for a name with one, whose own tag then decides the slot. One starts `<kind>:{`, the other
// `<kind>:=`, and each keeps the name whole, so distinct names never share a key: `x` and
// `{x}` are two semaphores, `semaphore:{x}:*` and `semaphore:={x}:*`.

/// What a primitive's key puts after `<kind>:` for a name with a hash tag of its own.
const OWN_TAG: char = '=';

/// The parts of a primitive's keys that [`QueueKeys::of_key`] recognises: all but its fence
/// (which outlives the rest) and its signal lists.
const SCANNED_PARTS: [&str; 7] = [
    "holders", "held", "queue", "beats", "wants", "tickets", "count",
];

/// The keys of one queue-engine primitive (`scripts/queue_head.lua` says what each holds).
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
    /// The units in use, kept by the scripts so that none reads every holder.
    pub(crate) count: String,
    pub(crate) slot: u16,
}

impl QueueKeys {
    /// The keys of the `kind` primitive `name`.
    pub(crate) fn new(kind: Primitive, name: &str) -> QueueKeys {
        let prefix = kind.prefix();
        let base = if hash_tag(name.as_bytes()).is_some() {
            format!("{prefix}{OWN_TAG}{name}:")
        } else {
            format!("{prefix}{{{name}}}:")
        };
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
            count: key("count"),
        }
    }

    /// The kind and the name (as `new` takes it) of the primitive whose key `SCAN` found, for
    /// any of its keys but its fence and its signal lists; `None` for any other key,
    /// including one `new` would not make for the name it spells.
    pub(crate) fn of_key(key: &[u8]) -> Option<(Primitive, String)> {
        let key = std::str::from_utf8(key).ok()?;
        let kind = Primitive::ALL
            .into_iter()
            .find(|kind| key.starts_with(&kind.prefix()))?;
        // No part has a `:`, so the last one ends the name, whatever the name holds.
        let (spelled, part) = key[kind.prefix().len()..].rsplit_once(':')?;
        if !SCANNED_PARTS.contains(&part) {
            return None;
        }
        let name = match spelled.strip_prefix(OWN_TAG) {
            Some(name) => name,
            None => spelled.strip_prefix('{')?.strip_suffix('}')?,
        };
        (!name.is_empty() && QueueKeys::new(kind, name).base() == &key[..key.len() - part.len()])
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

    /// An election's leader record (`election_*.lua`'s `KEYS[10]`).
    pub(crate) fn leader(&self) -> String {
        format!("{}leader", self.base())
    }

    /// The scripts' `KEYS`, in their order.
    pub(crate) fn all(&self) -> [&str; 9] {
        [
            &self.holders,
            &self.held,
            &self.queue,
            &self.beats,
            &self.wants,
            &self.tickets,
            &self.fence,
            &self.signals,
            &self.count,
        ]
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;
    use proptest::prelude::*;

    /// Names that have tripped key rules: braces anywhere, empty tags, the `=` of the tagged
    /// family, and `:` / `signal:` that look like the key's own separators.
    const TRICKY: [&str; 24] = [
        "x",
        "{x}",
        "={x}",
        "=x",
        "{=x}",
        "a}b",
        "{a}b",
        "a{b",
        "a{b}",
        "{a}b{c}",
        "{a}b}",
        "x}:{x",
        "a{}b",
        "{}",
        "{}x",
        "{}{x}",
        "}{",
        "a:b",
        "a:holders",
        "user:{42}:mail",
        "x:signal:",
        "signal:x",
        "{x}:signal:w",
        "é{ü}",
    ];

    #[test]
    fn a_name_without_a_tag_of_its_own_becomes_the_tag() {
        let keys = QueueKeys::new(Primitive::Semaphore, "db");
        assert_eq!(keys.holders, "semaphore:{db}:holders");
        assert_eq!(keys.signal("w1"), "semaphore:{db}:signal:w1");
        assert_eq!(
            QueueKeys::new(Primitive::RwLock, "a").fence,
            "rwlock:{a}:fence"
        );
        // An empty tag is no tag.
        assert_eq!(
            QueueKeys::new(Primitive::FairLock, "a{}b").queue,
            "fair-lock:{a{}b}:queue"
        );
    }

    #[test]
    fn a_name_with_a_tag_of_its_own_follows_an_equals_sign_as_it_is() {
        assert_eq!(
            QueueKeys::new(Primitive::FairLock, "{jobs}").queue,
            "fair-lock:={jobs}:queue"
        );
        let keys = QueueKeys::new(Primitive::Semaphore, "user:{42}:mail");
        assert_eq!(keys.holders, "semaphore:=user:{42}:mail:holders");
        assert_eq!(keys.signal("w1"), "semaphore:=user:{42}:mail:signal:w1");
    }

    #[test]
    fn a_name_and_the_same_name_in_braces_are_two_primitives() {
        for kind in Primitive::ALL {
            let (plain, braced) = (QueueKeys::new(kind, "x"), QueueKeys::new(kind, "{x}"));
            for (a, b) in plain.all().into_iter().zip(braced.all()) {
                assert_ne!(a, b);
            }
            assert_ne!(plain.signal("w:1"), braced.signal("w:1"));
        }
    }

    #[test]
    fn every_key_of_a_primitive_shares_one_slot_its_own_tags_when_it_has_one() {
        // Braces cannot hold a name that starts with `}`: `{}...` is an empty tag, and each
        // key of such a name hashes whole (the key table says so).
        let bracable = |name: &&str| hash_tag(name.as_bytes()).is_some() || !name.starts_with('}');
        for name in TRICKY.into_iter().filter(bracable) {
            for kind in Primitive::ALL {
                let keys = QueueKeys::new(kind, name);
                for key in keys.all().into_iter().chain([keys.signal("w:1").as_str()]) {
                    assert_eq!(slot(key.as_bytes()), keys.slot, "{key}");
                }
                if hash_tag(name.as_bytes()).is_some() {
                    assert_eq!(keys.slot, slot(name.as_bytes()), "{name}");
                }
            }
        }
        assert_eq!(QueueKeys::new(Primitive::RwLock, "{x}").slot, slot(b"x"));
    }

    #[test]
    fn a_scanned_key_names_its_primitive_as_new_takes_it() {
        for name in TRICKY {
            for kind in Primitive::ALL {
                let keys = QueueKeys::new(kind, name);
                for key in &keys.all()[..6] {
                    let found = QueueKeys::of_key(key.as_bytes());
                    assert_eq!(found, Some((kind, name.to_owned())), "{key}");
                }
                assert_eq!(QueueKeys::of_key(keys.fence.as_bytes()), None);
                // An acquisition id ends in `:<count>`, never in a part's name.
                assert_eq!(QueueKeys::of_key(keys.signal("w:1").as_bytes()), None);
            }
        }
    }

    #[test]
    fn a_key_new_would_not_make_names_nothing() {
        for key in [
            "semaphore:db:holders",
            "semaphore:{}:holders",
            "semaphore:=:holders",
            "semaphore:=db:holders",
            "semaphore:{{x}}:holders",
            "semaphore:{x}:fence",
            "semaphore:{x}:signal:w:1",
            "lock:{db}:holders",
        ] {
            assert_eq!(QueueKeys::of_key(key.as_bytes()), None, "{key}");
        }
        assert_eq!(QueueKeys::of_key(b"semaphore:{db}:\xff"), None);
    }

    /// Any string, with the characters of the key rules far more often than chance.
    fn name() -> impl Strategy<Value = String> {
        let marks = ["{", "}", ":", "=", "signal:", "x", "holders"].map(String::from);
        proptest::collection::vec(
            prop_oneof![
                4 => proptest::sample::select(marks.to_vec()),
                1 => any::<char>().prop_map(String::from),
            ],
            0..8,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn two_names_never_share_a_key(a in name(), b in name(), kind in 0..3usize) {
            prop_assume!(a != b);
            let kind = Primitive::ALL[kind];
            let (ka, kb) = (QueueKeys::new(kind, &a), QueueKeys::new(kind, &b));
            for key in ka.all() {
                prop_assert!(!kb.all().contains(&key), "{a:?} and {b:?} share {key}");
            }
        }

        #[test]
        fn every_name_round_trips_through_its_keys(name in name(), kind in 0..3usize) {
            prop_assume!(!name.is_empty());
            let kind = Primitive::ALL[kind];
            let keys = QueueKeys::new(kind, &name);
            for key in &keys.all()[..6] {
                prop_assert_eq!(QueueKeys::of_key(key.as_bytes()), Some((kind, name.clone())));
            }
        }
    }
}

// ---- The dogpile cache's keys ----

/// Appended to the value key to name its freshness marker.
const FRESH_SUFFIX: &str = ":fresh";

/// The Redis keys of one cache entry.
#[derive(Clone)]
pub(crate) struct CacheKeys {
    /// The entry's name as the caller gave it, for the lock name and log lines.
    pub(crate) name: String,
    pub(super) value: String,
    pub(super) fresh: String,
    /// Their hash slot: on a cluster the freshness marker shares the value's.
    pub(super) slot: u16,
}

impl CacheKeys {
    /// The keys of entry `key` in a cache whose value keys start with `prefix`; `tagged` when
    /// the marker must share the value's hash slot (a cluster).
    pub(crate) fn new(prefix: &str, key: &str, tagged: bool) -> CacheKeys {
        let value = format!("{prefix}{key}");
        let fresh = if tagged {
            format!("{}{FRESH_SUFFIX}", same_slot(&value))
        } else {
            format!("{value}{FRESH_SUFFIX}")
        };
        CacheKeys {
            name: key.to_string(),
            slot: slot(value.as_bytes()),
            fresh,
            value,
        }
    }

    /// The computing worker's lock: the bare entry name, without the prefix, as
    /// python-redis-lock's Django cache names it in `locked_get_or_set`, so Python and Rust
    /// workers filling the same key take turns.
    pub(crate) fn lock_name(&self) -> String {
        format!("get_or_set:{}", self.name)
    }
}
