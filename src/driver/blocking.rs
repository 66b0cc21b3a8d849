//! The driver on the blocking runtime: each wait blocks in `BLPOP` + try on a connection of
//! its own, ended on time by the timer thread or a [`CancelToken`]; renewals are the
//! process's one renewal scheduler's; a lost reply settles on a thread of its own.

use std::future::{ready, Future};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::renew::Renewal;
use super::{Inner, Renewing, Runtime, Tried};
use crate::protocol::keys::QueueKeys;
use crate::protocol::lease::Wait;
use crate::protocol::lock;
use crate::protocol::queue::Ask;
use crate::protocol::request::Request;
use crate::queue::Waited;
use crate::transport::admin::{closed_by_end, Blocked};
use crate::transport::send::{now, send_repeatable, FIRST_PAUSE};
use crate::transport::timer;
use crate::transport::{ConnId, Fault, Transport, Waiter};
use crate::{CancelToken, Error};

/// The blocking runtime: the caller's thread blocks in each round trip.
pub(crate) struct Blocking;

impl Runtime for Blocking {
    type Transport = dyn Transport;
    type Waiting<'a> = Box<dyn Waiter + 'a>;

    fn pause(pause: Duration, cancel: &CancelToken) -> impl Future<Output = bool> + Send {
        ready(cancel.pause(pause))
    }

    fn wait_once<'a>(
        inner: &'a Inner<Self>,
        slot: &mut Option<Self::Waiting<'a>>,
        until: Instant,
        wait: Wait,
        cancel: &'a CancelToken,
    ) -> impl Future<Output = Result<Tried, Error>> + Send {
        ready(wait_once(inner, slot, until, wait, cancel))
    }

    fn wait_queue(
        inner: &Inner<Self>,
        queue: &QueueKeys,
        ask: &Ask,
        wait: Wait,
        cancel: &CancelToken,
    ) -> impl Future<Output = Result<Waited, Error>> + Send {
        let line = inner.line(queue);
        ready(match wait {
            Wait::Never => line.try_once(ask),
            Wait::Until(deadline) => line.wait(ask, Some(deadline), cancel),
            Wait::Forever => line.wait(ask, None, cancel),
        })
    }

    fn keep_for_holder(waiting: Self::Waiting<'_>) {
        waiting.keep_for_holder();
    }

    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error> {
        let renewal = Renewal::start(inner, first, |inner| now(inner.renew()));
        Ok(Box::new(renewal.map_err(Error::Thread)?))
    }

    fn settle_dropped(
        transport: &Arc<dyn Transport>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    ) {
        if let Some(conn) = conn {
            let _ = transport.kill(conn, deadline);
        }
        if let Err(e) = now(send_repeatable(&**transport, &unlock, deadline)) {
            log::error!("a dropped lock handle's release failed: {e}");
        }
    }

    fn in_background(work: impl Future<Output = ()> + Send + 'static) {
        let spawned = std::thread::Builder::new()
            .name("redis-lock-settle".into())
            .spawn(move || now(work));
        if let Err(e) = spawned {
            log::error!("no thread to settle a lost reply on: {e}; the handle's next call does");
        }
    }
}

/// Blocks in `BLPOP` until `until` at the latest, then tries, all in one round trip on the
/// wait's own connection. The client keeps the time: at `until` it ends the `BLPOP` with
/// `CLIENT UNBLOCK`, instead of waiting for the server's timer (up to 100 ms late at the
/// default `hz 10`).
fn wait_once<'t>(
    inner: &'t Inner<Blocking>,
    slot: &mut Option<Box<dyn Waiter + 't>>,
    until: Instant,
    wait: Wait,
    cancel: &CancelToken,
) -> Result<Tried, Error> {
    let conn = match slot {
        Some(conn) => conn,
        None => slot.insert(waiter_conn(inner, wait, cancel)?),
    };
    let block = until.saturating_duration_since(Instant::now());
    let request = lock::wait_then_try(
        &inner.keys,
        &inner.settings.id,
        inner.settings.expire_ms,
        inner.settings.fencing,
        Some(block),
    )
    .replicated(inner.settings.replicas);
    // Connected where the wait will block before its id is read, so that a cancel or the
    // timer reaches that connection.
    if let Err(fault) = conn.ready(inner.io_deadline(wait)) {
        *slot = None;
        return Err(fault.into_error().into());
    }
    let id = conn.id();
    // While registered, a cancel ends the `BLPOP` from the cancelling thread.
    let registration = match id {
        Some(conn) => match cancel.blocking(Arc::new(Blocked {
            transport: Arc::clone(&inner.transport),
            conn,
        })) {
            Some(registration) => Some(registration),
            None => return Err(inner.error(|name| Error::Cancelled { name })),
        },
        None => None,
    };
    let sent = Instant::now();
    let replies = exchange_wait(inner, conn.as_mut(), &request, until, wait);
    drop(registration);
    if replies.is_err() {
        // The connection was closed on the failure; the next wait takes another.
        *slot = None;
    }
    // Ended by the timer at `until`, or by a cancel.
    if let Err(Fault::Lost { error, .. }) = &replies
        && (Instant::now() >= until || cancel.is_cancelled())
        && closed_by_end(id, error)
    {
        return now(inner.look(wait, cancel));
    }
    now(inner.after_wait(&request, sent, replies, wait, cancel))
}

/// A connection for the waits, again after a pause while the server is away.
fn waiter_conn<'t>(
    inner: &'t Inner<Blocking>,
    wait: Wait,
    cancel: &CancelToken,
) -> Result<Box<dyn Waiter + 't>, Error> {
    let give_up = inner.give_up(wait);
    let mut pause = FIRST_PAUSE;
    loop {
        let deadline = (Instant::now() + inner.settings.io_timeout).min(give_up);
        let conn = inner
            .transport
            .waiter(inner.keys.slot, deadline)
            .map_err(|fault| {
                let e = fault.into_error();
                log::warn!("lock {:?}: no connection to wait on: {e}", inner.name());
                e.into()
            });
        if let Some(outcome) = now(inner.away(conn, give_up, &mut pause, cancel)) {
            return outcome;
        }
    }
}

/// Sends the `BLPOP` + try and reads all their replies. The timer thread ends the `BLPOP` at
/// `until`; the reads' deadline is only the backstop for a server that does not answer.
fn exchange_wait(
    inner: &Inner<Blocking>,
    conn: &mut dyn Waiter,
    request: &Request,
    until: Instant,
    wait: Wait,
) -> Result<Vec<Value>, Fault> {
    conn.send(request, inner.io_deadline(wait))?;
    let alarm = conn.id().map(|id| timer::set(until, &inner.transport, id));
    let blpop = conn.recv(inner.io_deadline_after(until, wait));
    drop(alarm);
    let mut replies = Vec::with_capacity(request.cmds.len());
    replies.push(blpop?);
    let reply_deadline = inner.io_deadline(wait);
    for _ in 1..request.cmds.len() {
        replies.push(conn.recv(reply_deadline)?);
    }
    Ok(replies)
}
