//! A lock's checked settings and the limits on them.

use std::time::Duration;

use crate::observe::Label;
use crate::{CancelToken, Error};

/// How long the wake-up signal waits for a waiter, as in python-redis-lock.
pub(crate) const DEFAULT_SIGNAL_EXPIRE: Duration = Duration::from_millis(1000);
/// The deadline of a call that has none of its own, and of each round trip of `acquire()`.
pub(crate) const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// A queue primitive's expiry unless told otherwise: renewed, so a crashed holder's share
/// comes back within it.
pub(crate) const DEFAULT_QUEUE_EXPIRE: Duration = Duration::from_secs(30);
/// The largest expiry or signal expiry accepted, about 34 years: far beyond any real use, and
/// far below what would overflow Redis's millisecond clock arithmetic.
const MAX_MILLIS: u64 = 1 << 40;

/// What [`LockBuilder::build`](crate::LockBuilder::build) checked.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) name: String,
    pub(crate) id: String,
    pub(crate) expire_ms: Option<u64>,
    pub(crate) signal_expire_ms: u64,
    pub(crate) auto_renewal: bool,
    /// How long an acquisition is renewed at the most, counted from its grant.
    pub(crate) max_hold: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) io_timeout: Duration,
    /// The caller's token, or one of the handle's own that nobody cancels.
    pub(crate) cancel: CancelToken,
    /// How many replicas must acknowledge a change, and within how many milliseconds.
    pub(crate) replicas: Option<(u32, u64)>,
    /// The `lock` label of the handle's metrics.
    pub(crate) label: Label,
    /// A queue primitive's heartbeat: a waiter that misses two leaves the queue.
    pub(crate) heartbeat: Duration,
    /// Whether the handle is a queue primitive (a semaphore, a read-write lock, a fair lock).
    pub(crate) on_queue_engine: bool,
    /// Whether a server that can evict the lock's keys is refused.
    pub(crate) refuse_evicting: bool,
    /// How long after a failover an acquisition waits before it is handed over (`None`:
    /// the expire).
    pub(crate) after_failover: Option<Duration>,
}

impl Settings {
    /// The lapse window of a queue primitive's waiter: two heartbeats.
    pub(crate) fn lapse(&self) -> Duration {
        self.heartbeat.saturating_mul(2)
    }

    pub(crate) fn expire(&self) -> Option<Duration> {
        self.expire_ms.map(Duration::from_millis)
    }

    /// How long after its backend learned of a new primary nothing this handle takes is
    /// handed over: [`after_failover`](crate::LockBuilder::after_failover).
    pub(crate) fn after_failover(&self) -> Duration {
        (self.after_failover.or(self.expire())).unwrap_or_default()
    }

    /// How long a request's `WAIT` for replicas may add to its round trip.
    pub(crate) fn replicas_timeout(&self) -> Duration {
        self.replicas
            .map_or(Duration::ZERO, |(_, ms)| Duration::from_millis(ms))
    }

    /// How long after a caller's deadline the round trip under way may still finish: enough
    /// for the `CLIENT UNBLOCK` and the try that follow a wait's end on a live server, short
    /// enough that a frozen one does not hold the caller much past its deadline.
    pub(crate) fn grace(&self) -> Duration {
        grace(self.io_timeout)
    }
}

/// [`Settings::grace`] for an I/O timeout of `io_timeout`.
pub(crate) fn grace(io_timeout: Duration) -> Duration {
    io_timeout.min(Duration::from_millis(250))
}

/// Whole milliseconds for Redis, rounded up so a sub-millisecond duration is not zero.
pub(crate) fn millis(what: &str, d: Duration) -> Result<u64, Error> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms == 0 {
        return Err(Error::invalid(format!("{what} must be at least 1 ms")));
    }
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_MILLIS => Ok(ms),
        _ => Err(Error::invalid(format!(
            "{what} must be at most {MAX_MILLIS} ms"
        ))),
    }
}
