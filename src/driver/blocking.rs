//! The driver on the blocking runtime: each wait blocks in `BLPOP` + try on a connection of
//! its own, ended on time by the timer thread or a [`CancelToken`]; renewals are the
//! process's one renewal scheduler's; a lost reply settles on a thread of its own.

use std::future::{ready, Future};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::hub::{Mailbox, Told};
use super::renew::Renewal;
use super::{Inner, Renewing, Runtime, Tried};
use crate::cancel::Interrupt;
use crate::protocol::lease::Wait;
use crate::protocol::lock;
use crate::protocol::request::Request;
use crate::transport::admin::{self, closed_by_end};
use crate::transport::send::{now, send_repeatable, FIRST_PAUSE};
use crate::transport::timer;
use crate::transport::{ConnId, Fault, Transport, Waiter};
use crate::{CancelToken, Error};

/// The blocking runtime: the caller's thread blocks in each round trip.
pub(crate) struct Blocking;

impl Runtime for Blocking {
    type Transport = dyn Transport;
    fn over(transport: Arc<dyn Transport>) -> Arc<dyn Transport> {
        transport
    }

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

    fn mail(
        mailbox: &Arc<Mailbox>,
        until: Option<Instant>,
        cancel: &CancelToken,
    ) -> impl Future<Output = Option<Told>> + Send {
        let interrupt: Arc<dyn Interrupt> = Arc::clone(mailbox) as _;
        let told = match cancel.blocking(interrupt) {
            Some(_registered) => mailbox.wait(until, || cancel.is_cancelled()),
            None => None,
        };
        ready(told)
    }

    fn apart<T, F>(
        _: &str,
        cancel: &CancelToken,
        acquire: impl FnOnce(CancelToken) -> F + Send + 'static,
    ) -> impl Future<Output = Result<T, Error>> + Send
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        acquire(cancel.clone())
    }

    fn on_drop<A: Future<Output = ()>>(
        work: impl Future<Output = ()> + Send + 'static,
        _: impl FnOnce() -> A + Send + 'static,
    ) {
        now(work);
    }

    fn unattended<F>(make: impl Fn() -> F + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Self::in_background(make());
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
    let blocking_for = until.saturating_duration_since(Instant::now());
    let request = lock::wait_then_try(
        &inner.keys,
        &inner.settings.id,
        inner.settings.expire_ms,
        inner.settings.fencing,
        Some(blocking_for),
    )
    .replicated(inner.settings.replicas);
    // Connected where the wait will block before its id is read, so that a cancel or the
    // timer reaches that connection.
    if let Err(fault) = conn.ready(inner.io_deadline(wait)) {
        *slot = None;
        return Err(fault.into_error().into());
    }
    let sent = Instant::now();
    let blocked = block(
        &inner.transport,
        conn.as_mut(),
        &request,
        until,
        inner.io_deadline_after(until, wait),
        inner.io_deadline(wait),
        cancel,
    );
    if !matches!(blocked, Ok(Blocked::Replied(_))) {
        // The connection was closed on the failure; the next wait takes another.
        *slot = None;
    }
    let replies = match blocked {
        Ok(Blocked::Replied(replies)) => Ok(replies),
        Ok(Blocked::Cancelled) => return Err(inner.error(|name| Error::Cancelled { name })),
        // Ended by the timer at `until`, or by a cancel.
        Ok(Blocked::Ended) => return now(inner.look(wait, cancel)),
        Err(fault) => Err(fault),
    };
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

/// What a request that blocks came to.
enum Blocked {
    Replied(Vec<Value>),
    /// Its connection was closed at its end or on a cancel, where `CLIENT UNBLOCK` is not
    /// safe.
    Ended,
    /// Cancelled before it was sent.
    Cancelled,
}

/// Sends `request`, whose first command blocks until `until`, on `conn` and reads all its
/// replies: the first by `first_by`, the rest by `rest_by`. The timer thread ends the block at
/// `until`, and a cancel from another thread at once; the deadlines are only the backstop for
/// a server that does not answer.
fn block(
    transport: &Arc<dyn Transport>,
    conn: &mut dyn Waiter,
    request: &Request,
    until: Instant,
    first_by: Instant,
    rest_by: Instant,
    cancel: &CancelToken,
) -> Result<Blocked, Fault> {
    let id = conn.id();
    // While registered, a cancel ends the block from the cancelling thread.
    let registration = match id {
        Some(conn) => match cancel.blocking(Arc::new(admin::Blocked {
            transport: Arc::clone(transport),
            conn,
        })) {
            Some(registration) => Some(registration),
            None => return Ok(Blocked::Cancelled),
        },
        None => None,
    };
    let replies = (|| {
        conn.send(request, rest_by)?;
        let alarm = conn.id().map(|id| timer::set(until, transport, id));
        let first = conn.recv(first_by);
        drop(alarm);
        let mut replies = Vec::with_capacity(request.cmds.len());
        replies.push(first?);
        for _ in 1..request.cmds.len() {
            replies.push(conn.recv(rest_by)?);
        }
        Ok(replies)
    })();
    drop(registration);
    match replies {
        Err(Fault::Lost { error, .. })
            if (Instant::now() >= until || cancel.is_cancelled()) && closed_by_end(id, &error) =>
        {
            Ok(Blocked::Ended)
        }
        replies => replies.map(Blocked::Replied),
    }
}
