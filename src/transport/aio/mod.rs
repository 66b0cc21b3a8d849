//! The connection seam for the async driver: where its requests go, as futures.
//!
//! One server is served natively, over one multiplexed connection for short requests and a
//! connection of its own for each shared wait ([`native`]). The other backends run their
//! blocking transports on tokio's blocking pool ([`pooled`]): what they do per request (follow
//! a cluster's redirections, ask Sentinel, count a quorum's votes) is written once, there.

pub(crate) mod native;
pub(crate) mod pooled;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::{Admin, ConnId, Fault, Transport};
use crate::aio::waits::Waits;
use crate::protocol::requests::Request;

/// Why an async call could not be made: the async API's timers and tasks are tokio's.
pub(crate) const NO_RUNTIME: &str = "the async API runs on a tokio runtime, and none is running";

/// An async transport as the driver holds it.
pub(crate) struct Async(pub(crate) Arc<dyn AsyncTransport>);

/// A future that may be sent to another thread.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where an async lock's requests go.
pub(crate) trait AsyncTransport: Send + Sync + 'static {
    /// The blocking transport for the same place: what the place is, and the way out when
    /// no runtime is left to run a future on.
    fn place(&self) -> &Arc<dyn Transport>;

    /// [`Transport::call`], as a future.
    fn call<'a>(
        &'a self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>>;

    /// [`Transport::unblock`], as a future.
    fn unblock(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>>;

    /// [`Transport::kill`], as a future.
    fn kill(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>>;

    /// A connection of its own for the shared waits on keys in `slot`.
    fn waiter(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<Box<dyn AsyncWaiter>, Fault>>;

    /// Takes back a waiter whose waits are over and went well, to lend again.
    fn rest(&self, waiter: Box<dyn AsyncWaiter>) {
        drop(waiter);
    }

    /// The process's shared waits at this place.
    fn waits(&self) -> &Waits;
}

/// A connection lent to the shared waits on one name.
pub(crate) trait AsyncWaiter: Send {
    /// Its id at the server, when the server told it; after [`ready`](Self::ready), the
    /// connection the next wait blocks on.
    fn id(&self) -> Option<ConnId>;

    /// Takes the connection the next wait will block on (after a redirection or a failover, a
    /// new one where its key lives now).
    fn ready(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), Fault>>;

    /// Sends `request` (a `BLPOP` and the try behind it) and returns its replies, by
    /// `deadline`.
    fn wait<'a>(
        &'a mut self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>>;
}
