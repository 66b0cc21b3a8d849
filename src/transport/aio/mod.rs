//! Where the async driver's requests go: [`AsyncTransport`], as futures.
//!
//! One server is served natively, over one multiplexed connection for short requests and a
//! connection of its own for each shared wait ([`native`]). The other backends run their
//! blocking transports on tokio's blocking pool ([`pooled`]): what they do per request (follow
//! a cluster's redirections, ask Sentinel, count a quorum's votes) is written once, there.

pub(crate) mod finish;
pub(crate) mod native;
pub(crate) mod pooled;

use std::future::{ready, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::send::AnyTransport;
use super::{Admin, ConnId, Fault, Primaries, Primary, Transport};
use crate::protocol::request::Request;
use crate::Error;

/// Why an async call could not be made: the async API's timers and tasks are tokio's.
pub(crate) const NO_RUNTIME: &str = "the async API runs on a tokio runtime, and none is running";

/// A future that may be sent to another thread.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where an async lock's requests go.
pub(crate) trait AsyncTransport: Send + Sync + 'static {
    /// The blocking transport to the same servers: what they are, and the way out when no
    /// runtime is left to run a future on.
    fn blocking(&self) -> &Arc<dyn Transport>;

    /// [`Transport::call`], as a future.
    fn call<'a>(
        &'a self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>>;

    /// [`Transport::kill`], as a future.
    fn kill(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>>;

    /// [`Transport::primaries`], as a future.
    fn primaries(&self, deadline: Instant) -> BoxFuture<'_, Result<Primaries, Error>> {
        Box::pin(ready(self.blocking().primaries(deadline)))
    }
}

impl AnyTransport for dyn AsyncTransport + '_ {
    async fn exchange(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        if finish::blocking_here() {
            return finish::call_blocking(self.blocking(), deadline, |blocking| {
                blocking.call(request, deadline)
            });
        }
        self.call(request, deadline).await
    }

    async fn close(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        if finish::blocking_here() {
            return finish::call_blocking(self.blocking(), deadline, |blocking| {
                blocking.kill(conn, deadline)
            });
        }
        self.kill(conn, deadline).await
    }

    fn blocking(&self) -> &dyn Transport {
        &**AsyncTransport::blocking(self)
    }

    async fn list_primaries(&self, deadline: Instant) -> Result<Vec<Primary<Arc<Self>>>, Error> {
        let listed = AsyncTransport::primaries(self, deadline).await?;
        let to_async = |server: Arc<dyn Transport>| -> Arc<Self> { server.to_async() };
        Ok(listed
            .into_iter()
            .map(|primary| primary.map(to_async))
            .collect())
    }
}
