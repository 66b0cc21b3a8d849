//! What each primitive on the queue engine is, in one place: its key prefix, its capacity
//! rule and the words for its units. The keys, the handles, `inspect` and the CLI all read it
//! from here. Every primitive runs the engine's scripts (`scripts/queue_*.lua`, through
//! [`protocol::queue`](super::queue)) and only turns its operations into units of a capacity,
//! as tokio's primitives do over one semaphore: a new one is a variant here, and one handle,
//! generic over its runtime (see `docs/design.md`).

use crate::Error;

/// The units a writer of a read-write lock holds: all of them, where a reader holds 1.
pub const WRITER_UNITS: u64 = 1_000_000;

/// A kind of primitive on the fair queue engine, as [`inspect::queues`](crate::inspect::queues)
/// reports it; its keys start with `semaphore:`, `fair-lock:`, `rwlock:` or `election:`.
///
/// ```
/// use redis_blpop_lock::inspect::Primitive;
///
/// assert_ne!(Primitive::Semaphore, Primitive::RwLock);
/// assert_eq!(Primitive::RwLock.word(), "rwlock");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A counting semaphore (`semaphore:{name}:*`, or `semaphore:=name:*` for a name with a
    /// hash tag of its own): each holder holds the permits it asked for.
    Semaphore,
    /// A fair lock: `Lock::builder(..).fair(true)` (`fair-lock:{name}:*`, or
    /// `fair-lock:=name:*`): a capacity of 1.
    FairLock,
    /// A read-write lock (`rwlock:{name}:*`, or `rwlock:=name:*`): a reader holds 1 unit, a
    /// writer [`WRITER_UNITS`](crate::inspect::WRITER_UNITS), all of them.
    RwLock,
    /// A leader election ([`Election`](crate::Election); `election:{name}:*`, or
    /// `election:=name:*`): a capacity of 1, whose holder leads.
    Election,
}

impl Primitive {
    pub(crate) const ALL: [Primitive; 4] = [
        Primitive::Semaphore,
        Primitive::FairLock,
        Primitive::RwLock,
        Primitive::Election,
    ];

    /// Its name in keys, logs and redis-lock's output.
    ///
    /// ```
    /// use redis_blpop_lock::inspect::Primitive;
    ///
    /// assert_eq!(Primitive::FairLock.word(), "fair-lock");
    /// ```
    pub fn word(self) -> &'static str {
        match self {
            Primitive::Semaphore => "semaphore",
            Primitive::FairLock => "fair-lock",
            Primitive::RwLock => "rwlock",
            Primitive::Election => "election",
        }
    }

    /// What `units` of it are, in words: "2 permits", "write", "read"; empty where a hold is
    /// all there is (a fair lock, an election).
    ///
    /// ```
    /// use redis_blpop_lock::inspect::{Primitive, WRITER_UNITS};
    ///
    /// assert_eq!(Primitive::Semaphore.units(2), "2 permits");
    /// assert_eq!(Primitive::RwLock.units(WRITER_UNITS), "write");
    /// ```
    pub fn units(self, units: u64) -> String {
        match self {
            Primitive::RwLock if units == WRITER_UNITS => "write".into(),
            Primitive::RwLock => "read".into(),
            Primitive::Semaphore if units == 1 => "1 permit".into(),
            Primitive::Semaphore => format!("{units} permits"),
            Primitive::FairLock | Primitive::Election => String::new(),
        }
    }

    /// Its capacity, for a handle (or an operator's reset) that says it has `permits`: only
    /// a semaphore's is its own to say; a fair lock has 1, a read-write lock
    /// [`WRITER_UNITS`].
    pub(crate) fn capacity(self, permits: u32) -> Result<u64, Error> {
        match self {
            Primitive::Semaphore if permits == 0 => {
                Err(Error::invalid("a semaphore needs at least 1 permit"))
            }
            Primitive::Semaphore => Ok(u64::from(permits)),
            Primitive::FairLock | Primitive::Election => Ok(1),
            Primitive::RwLock => Ok(WRITER_UNITS),
        }
    }

    /// The start of its keys, of both families.
    pub(crate) fn prefix(self) -> String {
        format!("{}:", self.word())
    }

    /// The `SCAN MATCH` pattern that finds every key of this kind, of both families.
    pub(crate) fn pattern(self) -> String {
        format!("{}*", self.prefix())
    }
}
