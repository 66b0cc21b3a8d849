//! How the driver's shared path runs on an async transport: waits share one `BLPOP` per name
//! ([`waits`](super::waits)), renewal is a task, and a dropped handle settles on a task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::finish;
use super::waits::{Ticket, Waited, Waits, Woken};
use crate::driver::{self, Exchange, Inner, Io, Renewing, Tried};
use crate::protocol::lease::Wait;
use crate::protocol::requests::Request;
use crate::transport::aio::Async;
use crate::transport::{Admin, ConnId, Fault, Transport};
use crate::{CancelToken, Error};

impl Exchange for Async {
    async fn exchange(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        if finish::blocking_here() {
            return finish::call_blocking(self.0.place(), deadline, |place| {
                place.call(request, deadline)
            });
        }
        self.0.call(request, deadline).await
    }
}

impl Io for Async {
    type Waiting<'a> = Ticket;

    fn place(&self) -> &dyn Transport {
        &**self.0.place()
    }

    async fn close(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        if finish::blocking_here() {
            return finish::call_blocking(self.0.place(), deadline, |place| {
                place.kill(conn, deadline)
            });
        }
        self.0.kill(conn, deadline).await
    }

    async fn pause(&self, pause: Duration, cancel: &CancelToken) -> bool {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = cancel.cancelled() => {}
        }
        cancel.is_cancelled()
    }

    async fn wait_once<'a>(
        inner: &'a Inner<Self>,
        slot: &mut Option<Ticket>,
        until: Instant,
        wait: Wait,
        cancel: &'a CancelToken,
    ) -> Result<Tried, Error> {
        let ticket = slot
            .get_or_insert_with(|| Waits::join(&inner.transport.0, &inner.keys, &inner.settings));
        let reply_by = inner.io_deadline_after(until, wait);
        let tried = match ticket.wait(until, reply_by, cancel).await {
            Woken::Waited(waited) => {
                let Waited {
                    request,
                    sent,
                    replies,
                } = *waited;
                inner
                    .after_wait(&request, sent, replies, wait, cancel)
                    .await
            }
            Woken::Try => inner.try_short(wait, cancel).await,
            Woken::Look => return inner.look(wait, cancel).await,
            // Refused for the queue, the try goes alone: it may still find the lock free.
            Woken::Refused(e) => match inner.try_short(wait, cancel).await {
                Ok(Tried::Busy { .. }) => Err(inner.refused(e)),
                tried => tried,
            },
            Woken::Cancelled => return Err(inner.error(|name| Error::Cancelled { name })),
        };
        match tried {
            // The try never went out, the server being away: the waiter looks at the lock
            // again after pauses until it is back, as a blocking waiter settling its wait does.
            Err(Error::Redis(e)) if e.is_io_error() || e.is_connection_refusal() => {
                inner.look(wait, cancel).await
            }
            tried => tried,
        }
    }

    fn keep_for_holder(waiting: Ticket) {
        drop(waiting);
    }

    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error> {
        let runtime = super::runtime()?;
        let weak = Arc::downgrade(inner);
        let task = runtime.spawn(async move {
            let mut wait = first;
            loop {
                tokio::time::sleep(wait).await;
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
        transport: &Arc<Self>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    ) {
        give_back(
            Arc::clone(transport),
            conn,
            unlock,
            deadline,
            "a dropped lock handle's release failed".to_string(),
        );
    }

    fn in_background(work: impl std::future::Future<Output = ()> + Send + 'static) {
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

/// Gives back a lock that a request nobody waits for may have taken: closes `conn`, where
/// that request may yet run, then sends `unlock`, by `deadline`; unattended (see
/// [`finish`]), a failure logged after `failed`.
pub(crate) fn give_back(
    transport: Arc<Async>,
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
    transport: Arc<Async>,
    conn: Option<ConnId>,
    unlock: Request,
    deadline: Instant,
    failed: String,
) {
    if let Some(conn) = conn {
        let _ = transport.close(conn, deadline).await;
    }
    if let Err(e) = driver::send_repeatable(&*transport, &unlock, deadline).await {
        log::error!("{failed}: {e}");
    }
}

/// The renewal task of one acquisition.
struct RenewalTask(tokio::task::AbortHandle);

impl Renewing for RenewalTask {
    fn stop(self: Box<Self>) {
        self.0.abort();
    }
}
