//! The driver on tokio: a wait is a task awaiting its mailbox (filled by the process's
//! [hub](super::hub)), renewal is a task, and a dropped handle settles on a task.

use std::future::Future;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use super::hub::{Mailbox, Told};
use super::{Inner, Renewing, Runtime};
use crate::protocol::request::Request;
use crate::transport::aio::{finish, AsyncTransport};
use crate::transport::send::{send_repeatable, AnyTransport};
use crate::transport::{switch, ConnId, Transport};
use crate::{CancelToken, Error};

/// The runtime the async API spawns its tasks on: the caller's.
pub(crate) fn runtime() -> Result<tokio::runtime::Handle, Error> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| Error::invalid(crate::transport::aio::NO_RUNTIME))
}

/// The async runtime, tokio's (feature `tokio`): each call is a future, and renewals and
/// releases on drop are tasks on the caller's runtime. The handles in [`crate::aio`] are the
/// crate's handles on it.
///
/// ```no_run
/// # async fn run() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// use redis_blpop_lock::{aio::Tokio, handle};
///
/// // `aio::Semaphore` is this type.
/// let exports: handle::Semaphore<Tokio> = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
/// let permit = exports.acquire().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Tokio;

impl Runtime for Tokio {
    const API: &'static str = "aio::";
    type Turns = super::turn::Turns;
    type Transport = dyn AsyncTransport;
    fn over(transport: Arc<dyn Transport>) -> Arc<dyn AsyncTransport> {
        transport.to_async()
    }

    async fn pause(pause: Duration, cancel: &CancelToken) -> bool {
        // Finishing work its runtime dropped: no timer is left, the thread sleeps.
        if finish::blocking_here() {
            return cancel.pause(pause);
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = cancel.cancelled() => {}
        }
        cancel.is_cancelled()
    }

    async fn mail(
        mailbox: &Arc<Mailbox>,
        until: Option<Instant>,
        cancel: &CancelToken,
    ) -> Option<Told> {
        // Finishing work its runtime dropped (a release), there is no timer left to wait by:
        // the thread blocks, as a blocking caller's does.
        if finish::blocking_here() {
            return mailbox.wait(until, || cancel.is_cancelled());
        }
        loop {
            // A permit stored by a tell between the take and the wait is not lost.
            if let Some(told) = mailbox.take() {
                return Some(told);
            }
            let alarm = async {
                match until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = mailbox.notify.notified() => {}
                () = alarm => return mailbox.take(),
                () = cancel.cancelled() => return None,
            }
        }
    }

    async fn apart<T, F>(
        name: &str,
        cancel: &CancelToken,
        acquire: impl FnOnce(CancelToken) -> F + Send + 'static,
    ) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let runtime = runtime()?;
        let abandon = Abandon(CancelToken::new());
        let acquiring = runtime.spawn(acquire(abandon.0.clone()));
        tokio::pin!(acquiring);
        // The handle's own token, if it was built with one, cancels the task's wait.
        let outcome = tokio::select! {
            outcome = &mut acquiring => outcome,
            () = cancel.cancelled() => {
                abandon.0.cancel();
                acquiring.await
            }
        };
        drop(abandon);
        outcome.unwrap_or_else(|e| {
            log::error!("{name:?}: the acquiring task failed: {e}");
            Err(Error::Cancelled { name: name.into() })
        })
    }

    fn on_drop<A: Future<Output = ()>>(
        work: impl Future<Output = ()> + Send + 'static,
        again: impl FnOnce() -> A + Send + 'static,
    ) {
        finish::spawn_or_block(work, again);
    }

    fn unattended<F>(make: impl Fn() -> F + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let work = make();
        finish::spawn_or_block(work, make);
    }

    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error> {
        static HOOKED: Once = Once::new();
        HOOKED.call_once(|| switch::on_switch(|| SWITCHED.notify_waiters()));
        let runtime = runtime()?;
        let weak = Arc::downgrade(inner);
        let task = runtime.spawn(async move {
            let mut wait = first;
            loop {
                // Renewed at once after a switch (see `transport::switch`).
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = SWITCHED.notified() => {}
                }
                let Some(inner) = weak.upgrade() else { return };
                match inner.renew().await {
                    Some(next) => wait = next,
                    None => return,
                }
            }
        });
        Ok(Box::new(RenewalTask(task.abort_handle())))
    }

    fn settle_dropped(
        transport: &Arc<dyn AsyncTransport>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    ) {
        give_back_unattended(
            Arc::clone(transport),
            conn,
            unlock,
            deadline,
            "a dropped lock handle's release failed".to_string(),
        );
    }

    fn in_background(work: impl Future<Output = ()> + Send + 'static) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(work)),
            // No runtime (a handle dropped after its runtime ended): a thread with one of
            // its own, for as long as the work takes.
            Err(_) => {
                let spawned = std::thread::Builder::new()
                    .name("redis-lock-settle".to_string())
                    .spawn(move || {
                        match tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            Ok(runtime) => runtime.block_on(work),
                            Err(e) => log::error!("no runtime to settle a lock's outcome: {e}"),
                        }
                    });
                if let Err(e) = spawned {
                    log::error!("no thread to settle a lock's outcome: {e}");
                }
            }
        }
    }
}

/// Cancels a spawned acquire when the future waiting for it is dropped.
pub(crate) struct Abandon(pub(crate) CancelToken);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Told at each switch: renewal tasks renew at once.
static SWITCHED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The renewal task of one acquisition.
struct RenewalTask(tokio::task::AbortHandle);

impl Renewing for RenewalTask {
    fn stop(self: Box<Self>) {
        self.0.abort();
    }
}

/// Gives back a lock that a request nobody waits for may have taken: closes `conn`, where
/// that request may yet run, then sends `unlock`, by `deadline`; unattended (see
/// [`finish`](crate::transport::aio::finish)), a failure logged after `failed`.
pub(crate) fn give_back_unattended(
    transport: Arc<dyn AsyncTransport>,
    conn: Option<ConnId>,
    unlock: Request,
    deadline: Instant,
    failed: String,
) {
    let giving = settle(
        Arc::clone(&transport),
        conn,
        unlock.clone(),
        deadline,
        failed.clone(),
    );
    finish::spawn_or_block(giving, move || {
        settle(transport, conn, unlock, deadline, failed)
    });
}

async fn settle(
    transport: Arc<dyn AsyncTransport>,
    conn: Option<ConnId>,
    unlock: Request,
    deadline: Instant,
    failed: String,
) {
    if let Some(conn) = conn {
        let _ = transport.close(conn, deadline).await;
    }
    if let Err(e) = send_repeatable(&*transport, &unlock, deadline).await {
        log::error!("{failed}: {e}");
    }
}
