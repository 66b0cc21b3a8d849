//! One server, natively async: requests share one multiplexed connection. (Waits block on the
//! process's hub, on a blocking connection of its own.)

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};

use super::{AsyncTransport, BoxFuture};
use crate::protocol::request::Request;
use crate::transport::admin::{admin_outcome, client_id, kill_cmd};
use crate::transport::conn;
use crate::transport::runs::run_id;
use crate::transport::send::{send_repeatable, AnyTransport};
use crate::transport::{Admin, ConnId, Fault, Primary, Transport};
use crate::Error;

/// The async side of a [`Server`](crate::transport::server::Server), one per server in the
/// process.
pub(crate) struct Native {
    blocking: Arc<dyn Transport>,
    client: redis::Client,
    /// The multiplexed connection and its id, once made; see [`retire`](Self::retire).
    short: tokio::sync::Mutex<Option<Short>>,
}

/// A connection, its id at the server, and the runtime it lives on: a multiplexed
/// connection's reading and writing is a task of that runtime, and ends with it. A process
/// may run one runtime after another (a test each, a `block_on` each), with the connections of
/// the first one closed.
#[derive(Clone)]
struct Short {
    con: MultiplexedConnection,
    id: Option<ConnId>,
    runtime: tokio::runtime::Id,
}

/// The runtime this runs on.
fn runtime() -> Result<tokio::runtime::Id, RedisError> {
    tokio::runtime::Handle::try_current()
        .map(|runtime| runtime.id())
        .map_err(|_| RedisError::from((redis::ErrorKind::Client, super::NO_RUNTIME)))
}

impl Native {
    /// The async side of the server `blocking` connects to with `client`, shared by every
    /// async handle on it. Servers are never dropped (see `Server::shared`), nor is their
    /// async side.
    pub(crate) fn shared(blocking: Arc<dyn Transport>, client: &redis::Client) -> Arc<Native> {
        static ALL: LazyLock<Mutex<Vec<Arc<Native>>>> = LazyLock::new(Default::default);
        let mut all = ALL.lock();
        let same = |native: &&Arc<Native>| {
            std::ptr::addr_eq(Arc::as_ptr(&native.blocking), Arc::as_ptr(&blocking))
        };
        if let Some(native) = all.iter().find(same) {
            return Arc::clone(native);
        }
        let native = Arc::new(Native {
            blocking,
            client: client.clone(),
            short: tokio::sync::Mutex::new(None),
        });
        all.push(Arc::clone(&native));
        native
    }

    /// A new connection, set up by `deadline`, that knows its id at the server.
    async fn connect(&self, deadline: Instant) -> Result<Short, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(conn::remaining(deadline)?))
            .set_response_timeout(None);
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let mut con = by(deadline, connecting).await??;
        let mut setup = redis::pipe();
        setup.cmd("CLIENT").arg("ID");
        setup.cmd("INFO").arg("server");
        let replies = by(deadline, con.send_packed_commands(&setup, 0, 2)).await??;
        let mut replies = replies.into_iter();
        let id = client_id(replies.next().unwrap_or(Value::Nil))?;
        if let Some(run_id) = replies.next().as_ref().and_then(run_id) {
            self.blocking.saw_run(run_id);
        }
        Ok(Short {
            id: id.map(|id| ConnId { node: 0, id }),
            con,
            runtime: runtime()?,
        })
    }

    /// The multiplexed connection, made if there is none. Waiting for another call that is
    /// making it counts against this call's deadline too.
    async fn short(&self, deadline: Instant) -> Result<Short, RedisError> {
        let mut short = by(deadline, self.short.lock()).await?;
        if let Some(short) = short.as_ref().filter(|s| Ok(s.runtime) == runtime()) {
            return Ok(short.clone());
        }
        let made = self.connect(deadline).await?;
        *short = Some(made.clone());
        Ok(made)
    }

    /// Takes connection `id` out of use after a request on it failed or timed out: it may be
    /// dead, and settling that request closes it at the server. Not past the call's
    /// `deadline`: if it cannot be done by then, the next failure on the connection does it.
    async fn retire(&self, id: Option<ConnId>, deadline: Instant) {
        let Ok(mut short) = by(deadline, self.short.lock()).await else {
            return;
        };
        if short.as_ref().is_some_and(|s| s.id == id) {
            *short = None;
        }
    }

    async fn pipelined_call(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> Result<Vec<Value>, Fault> {
        let Short { mut con, id, .. } = self.short(deadline).await.map_err(Fault::NotSent)?;
        let eviction = self.blocking.eviction().filter(|e| e.unread());
        let replies = match eviction {
            // Until the server's eviction policy is known, an `INFO memory` goes out on the
            // same connection, pipelined with the request: no round trip of its own.
            Some(eviction) => {
                let (mut probe, info) = (con.clone(), crate::protocol::eviction::request());
                let (info, replies) = tokio::join!(
                    pipelined(&mut probe, &info, deadline),
                    pipelined(&mut con, request, deadline)
                );
                if let Some(reply) = info.ok().as_ref().and_then(|info| info.first()) {
                    eviction.record(reply);
                }
                replies
            }
            None => pipelined(&mut con, request, deadline).await,
        };
        match replies {
            Ok(replies) => Ok(replies),
            Err(error) => {
                self.retire(id, deadline).await;
                Err(Fault::Lost { conn: id, error })
            }
        }
    }

    async fn admin(&self, cmd: redis::Cmd, deadline: Instant) -> Result<Admin, Fault> {
        // Killing or unblocking twice does no more than once.
        let request = Request::single(cmd, true);
        let answered = send_repeatable(self, &request, deadline).await;
        admin_outcome(&request, answered)
    }
}

/// Sends `request` on `con` and reads its replies, all by `deadline`. Server errors are
/// replies (`Value::ServerError`), as on a blocking connection.
async fn pipelined(
    con: &mut MultiplexedConnection,
    request: &Request,
    deadline: Instant,
) -> Result<Vec<Value>, RedisError> {
    let mut pipeline = redis::pipe();
    for cmd in &request.cmds {
        pipeline.add_command(cmd.clone());
    }
    by(
        deadline,
        con.send_packed_commands(&pipeline, 0, request.cmds.len()),
    )
    .await?
}

/// `future`'s output, or a timeout error at `deadline`. The timer is tokio's: polled outside
/// a runtime, this is an error rather than tokio's panic.
async fn by<F: std::future::Future>(deadline: Instant, future: F) -> Result<F::Output, RedisError> {
    runtime()?;
    tokio::time::timeout_at(deadline.into(), future)
        .await
        .map_err(|_| conn::timed_out())
}

impl AnyTransport for Native {
    fn exchange(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Vec<Value>, Fault>> + Send {
        self.pipelined_call(request, deadline)
    }

    fn close(
        &self,
        conn: ConnId,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Admin, Fault>> + Send {
        self.admin(kill_cmd(conn), deadline)
    }

    fn blocking(&self) -> &dyn Transport {
        &*self.blocking
    }

    fn list_primaries(
        &self,
        _deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Vec<Primary<Arc<Self>>>, Error>> + Send {
        // One server: its own only primary.
        std::future::ready(Ok(vec![Primary::Itself]))
    }
}

impl AsyncTransport for Native {
    fn blocking(&self) -> &Arc<dyn Transport> {
        &self.blocking
    }

    fn call<'a>(
        &'a self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>> {
        Box::pin(self.pipelined_call(request, deadline))
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>> {
        Box::pin(self.admin(kill_cmd(conn), deadline))
    }
}
