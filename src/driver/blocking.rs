//! The driver on the blocking runtime: each wait blocks the caller's thread on its mailbox
//! (filled by the process's [hub](super::hub)) until its time or a [`CancelToken`]; renewals
//! are the process's [renewal scheduler](super::renew)'s; a lost reply settles on a thread of
//! its own.

use std::future::{ready, Future};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hub::{Mailbox, Told};
use super::renew::Renewal;
use super::{Inner, Renewing, Runtime};
use crate::cancel::Interrupt;
use crate::protocol::request::Request;
use crate::transport::send::{now, send_repeatable};
use crate::transport::{ConnId, Transport};
use crate::{CancelToken, Error};

/// The blocking runtime, the handles' default: each call blocks the calling thread in its
/// round trips, and renewals run on the process's renewal thread.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// use redis_blpop_lock::{handle, Blocking};
///
/// // The crate root's `Semaphore` is this type.
/// let exports: handle::Semaphore<Blocking> = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Blocking;

impl Runtime for Blocking {
    const API: &'static str = "";
    type Turns = ();
    type Transport = dyn Transport;
    fn over(transport: Arc<dyn Transport>) -> Arc<dyn Transport> {
        transport
    }

    fn pause(pause: Duration, cancel: &CancelToken) -> impl Future<Output = bool> + Send {
        ready(cancel.pause(pause))
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

    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error> {
        let renewal = Renewal::start(
            inner,
            first,
            |inner| inner.transport.server_of(inner.lease_slot()),
            |inner| now(inner.renew()),
        );
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
