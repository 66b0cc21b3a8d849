//! Where requests go: one server, a cluster, a Sentinel-managed primary or a quorum, each
//! behind [`Transport`] (blocking) and [`aio::AsyncTransport`], so the core and the driver do
//! not know which; and sending over them with the outcome rules of a send ([`send`]).

pub(crate) mod admin;
#[cfg(feature = "tokio")]
pub(crate) mod aio;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
mod conn;
pub(crate) mod eviction;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) mod nodes;
pub(crate) mod quorum;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) mod routed;
pub(crate) mod runs;
#[cfg(test)]
pub(crate) mod scripted;
pub(crate) mod send;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
pub(crate) mod server;
pub(crate) mod switch;
pub(crate) mod timer;

use std::sync::Arc;
use std::time::Instant;

use redis::{RedisError, Value};

use crate::protocol::request::Request;
pub(crate) use crate::protocol::ConnId;
use send::{now, Answered};

/// Why a request came back without its replies.
#[derive(Debug)]
pub(crate) enum Fault {
    /// Nothing reached the server: the request did not run.
    NotSent(RedisError),
    /// The request was sent but its replies did not all come back: it may have run, and it
    /// may still run unless `conn` is closed at the server first.
    Lost {
        conn: Option<ConnId>,
        error: RedisError,
    },
}

impl Fault {
    pub(crate) fn into_error(self) -> RedisError {
        match self {
            Fault::NotSent(error) | Fault::Lost { error, .. } => error,
        }
    }
}

/// How an administrative command (`CLIENT UNBLOCK`, `CLIENT KILL`) came out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admin {
    /// It acted on the connection.
    Done,
    /// There was nothing to do: the connection was not blocked, or is already gone.
    Nothing,
    /// The server refused the command (an ACL without the right).
    Refused,
}

/// One primary of a transport, as [`Transport::primaries`] lists them, for what must reach
/// every one (`SCAN`, `reset_all`, the eviction policies): `S` is the primary's own transport.
pub(crate) enum Primary<S> {
    /// The transport itself: one server.
    Itself,
    /// One of several servers, each with its own copy of the keys (a quorum's): requests about
    /// the keys found on it go to it.
    Own(S),
    /// One of several primaries, each serving its slots (a cluster's, or the primary a
    /// Sentinel names): requests about the keys found on it go through the transport, which
    /// routes each by its slot, wherever it lives by then.
    #[cfg_attr(not(any(feature = "cluster", feature = "sentinel")), allow(dead_code))]
    Routed(S),
}

impl<S> Primary<S> {
    /// The same primary, its transport made another kind of transport by `to`.
    #[cfg(feature = "tokio")]
    pub(crate) fn map<U>(self, to: impl FnOnce(S) -> U) -> Primary<U> {
        match self {
            Primary::Itself => Primary::Itself,
            Primary::Own(server) => Primary::Own(to(server)),
            Primary::Routed(server) => Primary::Routed(to(server)),
        }
    }
}

impl<T: ?Sized> Primary<Arc<T>> {
    /// The primary of `whole` (the transport that listed it), to scan and to ask about itself.
    pub(crate) fn server<'a>(&'a self, whole: &'a T) -> &'a T {
        match self {
            Primary::Itself => whole,
            Primary::Own(server) | Primary::Routed(server) => server,
        }
    }

    /// Where requests about the keys found on the primary go.
    pub(crate) fn keys_to<'a>(&'a self, whole: &'a T) -> &'a T {
        match self {
            Primary::Itself | Primary::Routed(_) => whole,
            Primary::Own(server) => server,
        }
    }
}

/// A blocking transport's primaries.
pub(crate) type Primaries = Vec<Primary<Arc<dyn Transport>>>;

/// Where a lock's requests go.
pub(crate) trait Transport: Send + Sync {
    /// Sends `request` over a connection that never blocks at the server, to the server that
    /// holds its slot, and returns its replies, all by `deadline`. Taking a connection counts
    /// against the same deadline.
    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault>;

    /// A connection of its own for waits on keys in `slot`, kept apart from those of short
    /// requests so that waiters can never starve a holder of the connection it needs to
    /// release.
    fn waiter(&self, slot: u16, deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault>;

    /// Closes connection `conn` at its server: whatever it sent and the server has not run
    /// yet never runs. A server that is down has nothing left to run: `Nothing`.
    fn kill(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault>;

    /// Whether a lock's keys must share a hash slot (a cluster): see [`Keys`].
    ///
    /// [`Keys`]: crate::protocol::keys::Keys
    fn hash_tags(&self) -> bool {
        false
    }

    /// Refuses settings this backend cannot honour (a quorum has no fencing tokens).
    fn check(&self, _settings: &crate::config::settings::Settings) -> Result<(), crate::Error> {
        Ok(())
    }

    /// Refuses an acquisition this backend cannot make with `settings` (a quorum lock without
    /// an expiry: a handle without one may still look at and reset the lock).
    fn check_acquire(
        &self,
        _settings: &crate::config::settings::Settings,
    ) -> Result<(), crate::Error> {
        Ok(())
    }

    /// Whether one server decides a try at a lock, so that the hub may carry a waiter's try
    /// behind its `BLPOP` there: not on a quorum, whose tries go to every server.
    fn one_server_decides(&self) -> bool {
        true
    }

    /// What to take off a lock's validity for its servers' clocks drifting apart over
    /// `expire` (a quorum's independent servers; nothing on one server).
    fn drift(&self, _expire: std::time::Duration) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// How long a call that lost a reply settles it itself, before it ends with
    /// `OutcomeUnknown` and the settling goes on in the background: `io_timeout`, or less
    /// where each round has a shorter bound of its own (a quorum's server timeout).
    fn settle_time(&self, io_timeout: std::time::Duration) -> std::time::Duration {
        io_timeout
    }

    /// Its primaries, by `deadline` (a cluster whose topology is not known yet learns it).
    fn primaries(&self, deadline: Instant) -> Result<Primaries, crate::Error>;

    /// Which server requests about keys in hash slot `slot` go to now, as last known (no
    /// round trip): a number that is the same for every transport reaching that server (where
    /// its [`Server`](server::Server) lives), so that the renewals of one server take turns
    /// and hold up no other server's (`driver/renew.rs`). The transport itself, unless it
    /// routes keys to several servers.
    fn server_of(&self, _slot: u16) -> usize {
        (self as *const Self).cast::<()>().addr()
    }

    /// When this process last learned that a new primary serves hash slot `slot` in place of
    /// the one it knew (a failover), if ever. What the old one granted or renewed meanwhile
    /// may be missing there: see [`after_failover`](crate::LockBuilder::after_failover).
    fn switched_at(&self, _slot: u16) -> Option<Instant> {
        None
    }

    /// A new connection found the server in run `run_id` (see [`runs`]): the async side's
    /// connections tell the blocking transport of their server.
    fn saw_run(&self, _run_id: String) {}

    /// One server's record of its eviction policy, for its async side to fill in.
    fn eviction(&self) -> Option<&eviction::Eviction> {
        None
    }

    /// The [`aio::AsyncTransport`] to the same servers, shared by every async handle on them.
    #[cfg(feature = "tokio")]
    fn to_async(self: Arc<Self>) -> Arc<dyn aio::AsyncTransport>;
}

/// A connection lent to one wait.
pub(crate) trait Waiter: Send {
    /// Its id at the server (`CLIENT ID`), when the server told it.
    fn id(&self) -> Option<ConnId>;

    /// Takes the connection the next request will go out on (after a redirection or a
    /// failover, a new one where its key lives now), by `deadline`, so that [`id`](Self::id)
    /// names it before the request is sent.
    fn ready(&mut self, _deadline: Instant) -> Result<(), Fault> {
        Ok(())
    }

    /// Sends `request` by `deadline`, without reading the replies.
    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault>;

    /// The next reply, by `deadline`.
    fn recv(&mut self, deadline: Instant) -> Result<Value, Fault>;

    /// Done with it for good (a waiting connection whose process stops waiting): closed, not
    /// kept idle.
    fn close(self: Box<Self>) {}
}

/// Sends a repeatable request, once more if the first reply was lost:
/// [`send::send_repeatable`], for callers that block.
pub(crate) fn send_repeatable(
    transport: &(dyn Transport + 'static),
    request: &Request,
    deadline: Instant,
) -> Result<Answered, RedisError> {
    now(send::send_repeatable(transport, request, deadline))
}
