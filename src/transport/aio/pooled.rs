//! A blocking transport (a cluster, Sentinel, a quorum) under the async driver: each request
//! runs on tokio's blocking pool, and each shared wait's connection lives on a blocking thread
//! of its own. What these transports do per request is written once, in their blocking form.

use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use redis::{ErrorKind, RedisError, Value};
use tokio::sync::oneshot;

use super::{AsyncTransport, AsyncWaiter, BoxFuture};
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

    fn unblock(&self, conn: ConnId, deadline: Instant) -> BoxFuture<'_, Result<Admin, Fault>> {
        Box::pin(self.on_pool(move |blocking| blocking.unblock(conn, deadline)))
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

    fn waiter(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<Box<dyn AsyncWaiter>, Fault>> {
        let blocking = Arc::clone(&self.blocking);
        Box::pin(async move {
            let (jobs, taken) = crossbeam_channel::unbounded();
            let (opened, open) = oneshot::channel();
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return Err(Fault::NotSent(gone("no tokio runtime to wait on")));
            };
            runtime.spawn_blocking(move || serve(&*blocking, slot, deadline, &taken, opened));
            match open.await {
                Ok(Ok(())) => Ok(Box::new(ThreadWaiter { jobs, id: None }) as Box<dyn AsyncWaiter>),
                Ok(Err(fault)) => Err(fault),
                Err(_) => Err(Fault::NotSent(gone("the waiting thread ended"))),
            }
        })
    }
}

/// What a shared wait asks of its connection's thread.
enum Job {
    Ready(Instant, oneshot::Sender<Result<Option<ConnId>, Fault>>),
    Wait(Request, Instant, oneshot::Sender<Result<Vec<Value>, Fault>>),
}

/// A blocking waiter's thread: takes the connection, then runs the jobs sent to it until
/// their sender is dropped.
fn serve(
    blocking: &dyn Transport,
    slot: u16,
    deadline: Instant,
    jobs: &Receiver<Job>,
    opened: oneshot::Sender<Result<(), Fault>>,
) {
    let mut waiter = match blocking.waiter(slot, deadline) {
        Ok(waiter) => {
            let _ = opened.send(Ok(()));
            waiter
        }
        Err(fault) => {
            let _ = opened.send(Err(fault));
            return;
        }
    };
    for job in jobs {
        match job {
            Job::Ready(deadline, done) => {
                let _ = done.send(waiter.ready(deadline).map(|()| waiter.id()));
            }
            Job::Wait(request, deadline, done) => {
                let replies = waiter.send(&request, deadline).and_then(|()| {
                    (0..request.cmds.len())
                        .map(|_| waiter.recv(deadline))
                        .collect()
                });
                let _ = done.send(replies);
            }
        }
    }
}

/// The async side of a waiter living on a blocking thread.
struct ThreadWaiter {
    jobs: Sender<Job>,
    id: Option<ConnId>,
}

impl ThreadWaiter {
    async fn ask<R>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<R, Fault>>) -> Job,
    ) -> Result<R, Fault> {
        let (done, answer) = oneshot::channel();
        if self.jobs.send(job(done)).is_err() {
            return Err(Fault::NotSent(gone("the waiting thread ended")));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Fault::Lost {
                conn: self.id,
                error: gone("the waiting thread ended"),
            })
        })
    }
}

impl AsyncWaiter for ThreadWaiter {
    fn id(&self) -> Option<ConnId> {
        self.id
    }

    fn ready(&mut self, deadline: Instant) -> BoxFuture<'_, Result<(), Fault>> {
        Box::pin(async move {
            self.id = self.ask(|done| Job::Ready(deadline, done)).await?;
            Ok(())
        })
    }

    fn wait<'a>(
        &'a mut self,
        request: &'a Request,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<Value>, Fault>> {
        let request = request.clone();
        Box::pin(self.ask(move |done| Job::Wait(request, deadline, done)))
    }
}
