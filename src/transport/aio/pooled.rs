//! A blocking transport (a cluster, Sentinel, a quorum) under the async driver: each request
//! runs on tokio's blocking pool. What these transports do per request is written once, in
//! their blocking form.

use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use std::time::Instant;

use redis::{ErrorKind, RedisError, Value};

use super::{AsyncTransport, BoxFuture};
use crate::protocol::request::Request;
use crate::transport::{Admin, ConnId, Fault, Primaries, Transport};
use crate::Error;

/// A blocking transport, run on the blocking pool.
pub(crate) struct Pooled {
    blocking: Arc<dyn Transport>,
}

impl Pooled {
    /// The async side of `blocking`, shared by every async handle on it while any is alive.
    pub(crate) fn shared(blocking: Arc<dyn Transport>) -> Arc<dyn AsyncTransport> {
        static ALL: LazyLock<Mutex<Vec<Weak<Pooled>>>> = LazyLock::new(Default::default);
        let mut all = ALL.lock();
        all.retain(|pooled| pooled.strong_count() > 0);
        let found = all.iter().filter_map(Weak::upgrade).find(|pooled| {
            std::ptr::addr_eq(Arc::as_ptr(&pooled.blocking), Arc::as_ptr(&blocking))
        });
        found.unwrap_or_else(|| {
            let pooled = Arc::new(Pooled { blocking });
            all.push(Arc::downgrade(&pooled));
            pooled
        })
    }

    /// Runs `work` on the blocking pool (on this thread when no runtime is running), so that
    /// it blocks no task.
    async fn on_pool<R: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn Transport) -> Result<R, Fault> + Send + 'static,
    ) -> Result<R, Fault> {
        let blocking = Arc::clone(&self.blocking);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return work(&*blocking);
        };
        runtime
            .spawn_blocking(move || work(&*blocking))
            .await
            .unwrap_or_else(|e| {
                Err(Fault::Lost {
                    conn: None,
                    error: gone(&format!("the blocking call did not finish: {e}")),
                })
            })
    }
}

fn gone(what: &str) -> RedisError {
    RedisError::from((ErrorKind::Io, "connection lost", what.to_string()))
}

impl AsyncTransport for Pooled {
    fn blocking(&self) -> &Arc<dyn Transport> {
        &self.blocking
    }

    fn call<'a>(
        &'a self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>> {
        let request = request.clone();
        Box::pin(self.on_pool(move |blocking| blocking.call(&request, deadline)))
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>> {
        Box::pin(self.on_pool(move |blocking| blocking.kill(conn, deadline)))
    }

    fn primaries(&self, deadline: Instant) -> BoxFuture<'_, Result<Primaries, Error>> {
        // A cluster whose topology is not known yet learns it, blocking.
        Box::pin(async move {
            let listed = self.on_pool(move |blocking| Ok(blocking.primaries(deadline)));
            listed.await.map_err(Fault::into_error)?
        })
    }
}
