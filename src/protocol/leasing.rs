//! What a primitive sends to hold a lease, and how it reads the replies: the hold, renewal,
//! settle and guard machinery is written once over [`Leasing`], and each primitive gives its
//! own requests (the lock's are [`LockLeasing`], python-redis-lock's wire format).

use redis::Value;

use crate::config::settings::Settings;
use crate::protocol::keys::{Keys, QueueKeys};
use crate::protocol::lock::{self, Extended, Observed, Pttl};
use crate::protocol::queue::{self, Ask};
use crate::protocol::request::Request;
use crate::Error;

/// The owner-checked requests of one holder's lease, and their replies' parsers.
pub(crate) trait Leasing: Send + Sync + 'static {
    /// Gives back what this holder holds, waking whoever can proceed. Repeatable: it only
    /// ever gives back what holds this holder's id.
    fn release(&self) -> Request;

    /// Whether [`release`](Self::release) found the lease held by this holder.
    fn released(&self, reply: &Value) -> Result<bool, Error>;

    /// Sets the lease's expiry to `ms` from now, if this holder holds it. Repeatable.
    fn extend(&self, ms: u64) -> Request;

    /// What [`extend`](Self::extend) found.
    fn extended(&self, reply: &Value) -> Result<Extended, Error>;

    /// Reads the owner, TTL and fencing counter in one round trip. Repeatable.
    fn read(&self) -> Request;

    /// What [`read`](Self::read) found.
    fn parse_read(&self, replies: &[Value]) -> Result<Observed, Error>;

    /// Frees the lease held by `owner`, if `owner` still holds it (an operator's reset).
    fn reset(&self, owner: &[u8]) -> Request;

    /// Checks what [`reset`](Self::reset) answered: whether deleted now or let go meanwhile,
    /// that owner's lease is gone.
    fn parse_reset(&self, reply: &Value) -> Result<(), Error>;
}

/// A lock's lease: `lock:<name>` holding the owner's id.
pub(crate) struct LockLeasing {
    keys: Keys,
    id: String,
    signal_expire_ms: u64,
    fencing: bool,
}

impl LockLeasing {
    pub(crate) fn new(keys: &Keys, settings: &Settings) -> LockLeasing {
        LockLeasing {
            keys: keys.clone(),
            id: settings.id.clone(),
            signal_expire_ms: settings.signal_expire_ms,
            fencing: settings.fencing,
        }
    }
}

impl Leasing for LockLeasing {
    fn release(&self) -> Request {
        lock::unlock(&self.keys, self.id.as_bytes(), self.signal_expire_ms)
    }

    fn released(&self, reply: &Value) -> Result<bool, Error> {
        lock::parse_unlock(&self.keys, reply)
    }

    fn extend(&self, ms: u64) -> Request {
        lock::extend(&self.keys, &self.id, ms)
    }

    fn extended(&self, reply: &Value) -> Result<Extended, Error> {
        lock::parse_extend(&self.keys, reply)
    }

    fn read(&self) -> Request {
        lock::observe(&self.keys, self.fencing)
    }

    fn parse_read(&self, replies: &[Value]) -> Result<Observed, Error> {
        lock::parse_observe(&self.keys, replies)
    }

    fn reset(&self, owner: &[u8]) -> Request {
        lock::reset(&self.keys, owner, self.signal_expire_ms, false)
    }

    fn parse_reset(&self, reply: &Value) -> Result<(), Error> {
        lock::parse_reset(&self.keys, reply).map(drop)
    }
}

/// A queue primitive's lease (a permit, a read or write hold, a fair lock): an entry of the
/// holders' set under this acquisition's id, which holds `units`.
pub(crate) struct QueueLeasing {
    keys: QueueKeys,
    ask: Ask,
}

impl QueueLeasing {
    pub(crate) fn new(keys: &QueueKeys, ask: &Ask) -> QueueLeasing {
        QueueLeasing {
            keys: keys.clone(),
            ask: ask.clone(),
        }
    }
}

impl Leasing for QueueLeasing {
    fn release(&self) -> Request {
        queue::release(&self.keys, &self.ask)
    }

    fn released(&self, reply: &Value) -> Result<bool, Error> {
        queue::parse_held(&self.keys, reply)
    }

    fn extend(&self, ms: u64) -> Request {
        queue::extend(&self.keys, &self.ask, ms)
    }

    fn extended(&self, reply: &Value) -> Result<Extended, Error> {
        Ok(match queue::parse_held(&self.keys, reply)? {
            true => Extended::Yes,
            false => Extended::NotOurs,
        })
    }

    fn read(&self) -> Request {
        queue::peek(&self.keys, self.ask.id())
    }

    /// This acquisition as the owner when it holds, else the first holder (or none), so
    /// that "is it ours" reads the same as for a lock.
    fn parse_read(&self, replies: &[Value]) -> Result<Observed, Error> {
        let reply = replies.first().ok_or_else(|| Error::unexpected(&replies))?;
        let state = queue::parse_state(&self.keys, reply)?;
        let ours = state
            .holders
            .iter()
            .find(|holder| holder.id == self.ask.id().as_bytes());
        Ok(match ours.or(state.holders.first()) {
            None => Observed {
                owner: None,
                pttl: Pttl::Gone,
                fence: None,
            },
            Some(holder) => Observed {
                owner: Some(holder.id.clone()),
                pttl: holder.left.map_or(Pttl::Forever, Pttl::Left),
                fence: Some(holder.token),
            },
        })
    }

    fn reset(&self, owner: &[u8]) -> Request {
        queue::reset(
            &self.keys,
            Some(&String::from_utf8_lossy(owner)),
            self.ask.capacity(),
        )
    }

    fn parse_reset(&self, reply: &Value) -> Result<(), Error> {
        queue::parse_reset(&self.keys, reply).map(drop)
    }
}
