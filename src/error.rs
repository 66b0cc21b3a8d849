use std::fmt;

/// What went wrong in a lock operation.
///
/// Redis failures keep the server's own message (`WRONGTYPE`, `NOPERM`, `READONLY`, a refused
/// connection, ...), so a log line says what the server said.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_lock::Lock::new(&client, "report")?;
/// match lock.release() {
///     Err(redis_lock::Error::NotAcquired { name }) => println!("{name} was not ours"),
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
    /// An argument was out of range or missing; the message says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
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
