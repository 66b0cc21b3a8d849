use std::fmt;

/// What went wrong in a lock operation.
///
/// Redis failures keep the server's own message (`WRONGTYPE`, `NOPERM`, `READONLY`, a refused
/// connection, ...), so a log line says what the server said.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::Lock::new(&client, "report")?;
/// match lock.release() {
///     Err(redis_blpop_lock::Error::NotAcquired { name }) => println!("{name} was not ours"),
///     other => other?,
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is already held under this handle's id (locks are not reentrant).
    #[error("lock {name:?} is already held by this owner id")]
    AlreadyAcquired {
        /// The lock's name.
        name: String,
    },
    /// The lock is not held under this handle's id, so it was not released or extended.
    #[error("lock {name:?} is not held by this owner id")]
    NotAcquired {
        /// The lock's name.
        name: String,
    },
    /// The lock was taken without an expiry, so there is nothing to extend.
    #[error("lock {name:?} has no expiry to extend")]
    NotExpirable {
        /// The lock's name.
        name: String,
    },
    /// The wait was cancelled through the lock's [`CancelToken`](crate::CancelToken); no lock
    /// was left held by it.
    #[error("waiting for lock {name:?} was cancelled")]
    Cancelled {
        /// The lock's name.
        name: String,
    },
    /// A request that may change the lock was sent, but its reply was lost (the connection
    /// dropped, or the deadline passed) and Redis could not be asked what happened before
    /// the deadline. The handle asks Redis before it next acquires or releases, and a
    /// release settles it: see the crate docs' outcome rules.
    #[error("the outcome of {operation} on lock {name:?} is unknown: {source}")]
    OutcomeUnknown {
        /// The lock's name.
        name: String,
        /// `"acquire"` or `"release"`.
        operation: &'static str,
        /// Why the reply was lost.
        source: redis::RedisError,
    },
    /// A key of the lock holds something no lock writes (a list at `lock:<name>`, a
    /// fencing counter that is not a non-negative integer). Nothing was written.
    #[error("{key:?} is corrupt: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Fewer replicas than [`LockBuilder::replicas`](crate::LockBuilder::replicas) asked for
    /// acknowledged a change in time. An acquisition is released before this is returned; an
    /// extension or a release did happen on the primary.
    #[error(
        "{operation} of lock {name:?} reached {acked} of the {wanted} replicas asked for in time"
    )]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// `"acquire"`, `"extend"` or `"release"`.
        operation: &'static str,
        /// How many replicas acknowledged.
        acked: u64,
        /// How many were asked for.
        wanted: u32,
    },
    /// The lock was lost while work ran under it (its expiry passed without a renewal
    /// getting through, or a renewal found another id in the key), so the work was stopped:
    /// the async [`with_lock`](crate::aio::with_lock) drops its future when this happens.
    #[error("lock {name:?} was lost while the work ran")]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// An argument was out of range or missing; the message says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// What was asked cannot be done safely on this backend, e.g. a semaphore on a
    /// [`Quorum`](crate::Quorum): a count across independent servers is not safe.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A thread holding a read lock asked for the write lock of the same handle: it would
    /// wait for itself for ever. Release the read lock first.
    #[error("read-write lock {name:?}: this thread holds a read lock, so a write lock would wait for ever")]
    WouldDeadlock {
        /// The read-write lock's name.
        name: String,
    },
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis answered with something the lock's scripts never return.
    #[error("unexpected reply from redis: {0}")]
    UnexpectedReply(String),
    /// The operating system's random source failed; no weaker source is used instead.
    #[error("the OS random source failed: {0}")]
    Random(String),
    /// The renewal thread could not be started.
    #[error("could not start the renewal thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl Error {
    pub(crate) fn invalid(message: impl fmt::Display) -> Self {
        Error::InvalidArgument(message.to_string())
    }

    pub(crate) fn unexpected(reply: &impl fmt::Debug) -> Self {
        Error::UnexpectedReply(format!("{reply:?}"))
    }
}
