//! python-redis-lock's acquire call, for the plain lock: one try on a short connection, then
//! waits for a wake-up signal (brought by the process's [`Hub`](super::hub::Hub)) and tries
//! again, until the lock is ours, the wait is over or it is cancelled. A [`Waiter`] does what
//! [`LockWait`] decides, step by step; its [`Call`] makes the tries (a lost reply settled by
//! reading the owner) and lands the one the hub carries behind its `BLPOP`.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::hub::{Carried, Heard, Listener, Told};
use super::{Inner, Runtime, Taken, Tried};
use crate::observe;
use crate::protocol::lease::{self, Attempting, Unsure, Wait};
use crate::protocol::lock::{self, Attempt, Observed};
use crate::protocol::lock_wait::{End, LockWait, Step, Terms};
use crate::protocol::request::Request;
use crate::transport::send::{send, AnyTransport};
use crate::transport::{ConnId, Fault};
use crate::{CancelToken, Error};

impl<R: Runtime> Inner<R> {
    /// The acquire path: one try on a short connection, then waits for a wake-up signal and
    /// tries again, until the lock is ours, the wait is over, or `cancel` is cancelled.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        let settings = &self.settings;
        let acquire = self.acquire_unobserved(wait, cancel);
        observe::acquiring(&settings.label, &settings.name, &settings.id, acquire).await
    }

    pub(super) async fn acquire_unobserved(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        if cancel.is_cancelled() {
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        self.transport.blocking().check_acquire(&self.settings)?;
        if let Some(taken) = self.before_acquire(wait, cancel).await? {
            return Ok(Some(taken));
        }
        log::debug!("lock {:?}: acquiring", self.name());
        let settings = &self.settings;
        let terms = Terms {
            expire: settings.expire(),
            renewing: settings.auto_renewal,
            replicated: settings.replicas.is_some(),
        };
        let mut waiter = Waiter {
            call: Call {
                inner: self,
                wait,
                cancel,
            },
            machine: LockWait::new(wait, terms),
            listener: None,
        };
        waiter.run().await
    }

    /// When the process's hub still blocks on the lock's signal list with no waiter of it
    /// left here, wakes it and waits until any signal it popped there has been pushed back,
    /// so that the process may exit without swallowing another process's wake-up: by
    /// `deadline`, the calling release's or wait's own (a hub that cannot be reached pushes
    /// nothing back either way).
    pub(super) async fn unlisten(&self, deadline: Instant) {
        let Some((wake, settled)) = self.hub.lingering(&self.keys.signal) else {
            return;
        };
        match send(&*self.transport, &wake, deadline).await {
            Ok(_) => {
                R::mail(&settled, Some(deadline), &CancelToken::new()).await;
            }
            Err(e) => log::debug!("lock {:?}: the hub was not woken: {e:?}", self.name()),
        }
    }

    /// The error of a wait whose `BLPOP` the server refused.
    pub(crate) fn refused(&self, e: redis::ServerError) -> Error {
        if e.code() == "WRONGTYPE" {
            return Error::Corrupt {
                key: self.keys.signal.clone(),
                reason: "it holds a value that is not a list, so waiters cannot block on it".into(),
            };
        }
        Error::Redis(e.into())
    }
}

/// A try after a wait, on its way: should its future be dropped before its reply (its
/// runtime ended), the lock it may take for nobody is given back, unattended. A try still on
/// its way may yet take it after that; the lock then expires, or is found by the handle's next
/// call, as after any lost reply.
struct GiveBack<'a, R: Runtime>(Option<&'a Inner<R>>);

impl<R: Runtime> Drop for GiveBack<'_, R> {
    fn drop(&mut self) {
        if let Some(inner) = self.0 {
            let deadline = Instant::now() + inner.settings.io_timeout;
            R::settle_dropped(&inner.transport, None, inner.leasing.release(), deadline);
        }
    }
}

/// One acquire call of a plain lock, under way: a thin loop of I/O around its
/// [`LockWait`], which decides every step, and its place among the process's waiters on the
/// lock (taken at its first block, kept to its end). Should its future be dropped while the hub
/// carries its try (its runtime ended), the connection the try went out on is closed and what
/// the try took given back, as for a try of its own (see [`GiveBack`]).
struct Waiter<'a, R: Runtime> {
    call: Call<'a, R>,
    machine: LockWait,
    listener: Option<Listener>,
}

impl<R: Runtime> Waiter<'_, R> {
    /// Does what each step says until the lock is the caller's or the call is over.
    async fn run(&mut self) -> Result<Option<Taken>, Error> {
        let inner = self.call.inner;
        let behind = inner.hub.behind(&inner.keys.signal);
        let mut step = self.machine.start(behind, Instant::now());
        loop {
            step = match step {
                Step::Try { woken } => {
                    let tried = self.call.try_short(woken).await?;
                    self.after(tried).await?
                }
                Step::Block { until } => self.block(until).await?,
                Step::Land => {
                    let tried = self.land().await?;
                    self.after(tried).await?
                }
                Step::Hand {
                    valid_until,
                    token,
                    handed_over,
                } => {
                    if handed_over {
                        observe::handoff(&inner.settings.label);
                    }
                    return inner.acquired(valid_until, token).map(Some);
                }
                Step::GiveBack => {
                    inner.unlock_quietly().await;
                    return Err(inner.error(|name| Error::Cancelled { name }));
                }
                Step::End(end) => {
                    self.stop_listening().await;
                    return match end {
                        End::TimedOut => {
                            log::debug!("lock {:?}: not acquired in time", inner.name());
                            Ok(None)
                        }
                        End::Cancelled => Err(inner.error(|name| Error::Cancelled { name })),
                        End::AlreadyAcquired => {
                            Err(inner.error(|name| Error::AlreadyAcquired { name }))
                        }
                    };
                }
            };
        }
    }

    /// The step after what a try came to. A lock taken is confirmed as the machine says
    /// before it counts; the signal a wait was told meanwhile is stale then.
    async fn after(&mut self, tried: Tried) -> Result<Step, Error> {
        let call = &self.call;
        let inner = call.inner;
        let now = Instant::now();
        let (valid_until, token, attempt, acks) = match tried {
            Tried::Busy { owner, pttl, at } => {
                let ours = inner.is_ours(owner.as_deref());
                let carried = self.listener.as_ref().is_some_and(Listener::carried);
                let cancelled = call.cancel.is_cancelled();
                return Ok(self.machine.busy(ours, pttl, at, cancelled, carried));
            }
            Tried::Acquired {
                valid_until,
                token,
                attempt,
                acks,
            } => (valid_until, token, attempt, acks),
        };
        if let Some(listener) = self.listener.take() {
            listener.leave();
        }
        let extend = self.machine.taken(&attempt, !matches!(acks, Ok(None)), now);
        let confirming = inner.settings.expire_ms.filter(|_| extend);
        let confirmed = inner.confirm_taken(call.wait, confirming, valid_until, acks);
        let confirmed = confirmed.await?;
        Ok((self.machine).confirmed(confirmed, token, call.cancel.is_cancelled()))
    }

    /// Waits for a release's signal, which the process's hub brings, until `until` at the
    /// latest (the holder's expiry, or the deadline: the waiter keeps its own time), then
    /// tries. The first wait takes a place among the process's waiters on the lock. While it
    /// waits, the hub may carry its try behind its `BLPOP` (see `Ear`, in `hub/listener.rs`).
    async fn block(&mut self, until: Instant) -> Result<Step, Error> {
        let call = &self.call;
        let (inner, cancel) = (call.inner, call.cancel);
        let listening = self.listener.get_or_insert_with(|| {
            let one_server = inner.transport.blocking().one_server_decides();
            let carried = one_server.then(|| call.try_request());
            inner
                .hub
                .listen(&inner.keys, carried, inner.leasing.release())
        });
        if let Some(wake) = listening.wake() {
            // Not heard, the signal list is listened on at the end of the hub's `BLPOP`; a
            // signal waits there until then.
            call.wake(&wake).await;
        }
        listening.block().map_err(Error::Thread)?;
        if listening.waiting(until) {
            // First again after a try of its own: the hub's `BLPOP` is to carry its try.
            call.wake(&listening.wake_hub()).await;
        }
        let mailbox = listening.ear.mailbox.clone();
        let told = R::mail(&mailbox, Some(until), cancel).await;
        if told.is_some() {
            observe::handoff_step("woken", &inner.keys.signal);
        }
        let tried = match listening.heard() {
            Heard::Landed(landed) => call.after_carried(landed).await?,
            // At its time, or on a cancel, with its try behind the hub's `BLPOP`.
            Heard::Carried(_) => self.land().await?,
            Heard::OnItsOwn => {
                let refused = matches!(told, Some(Told::Refused)).then(|| listening.refused());
                let step = self.machine.woke(told.is_some(), cancel.is_cancelled());
                let Step::Try { woken } = step else {
                    return Ok(step);
                };
                // Told (a signal, or the hub's connection failed and a signal may be lost
                // with it) or at its time, it tries. Should the caller's future be dropped
                // meanwhile (its runtime ended), what the try may take is given back.
                let mut unattended = GiveBack(Some(inner));
                mailbox.trying(told.is_some());
                let tried = call.try_short(woken).await;
                mailbox.trying(false);
                unattended.0 = None;
                match (tried, refused.flatten()) {
                    // Refused the wait, it may still have found the lock free.
                    (Ok(Tried::Busy { .. }), Some(e)) => return Err(inner.refused(e)),
                    // The try never went out, the server being away: it looks at the lock
                    // again after pauses until the server is back.
                    (Err(Error::Redis(e)), _) if e.is_io_error() || e.is_connection_refusal() => {
                        call.look().await?
                    }
                    (tried, _) => tried?,
                }
            }
        };
        self.after(tried).await
    }

    /// The try the hub carries for it: wakes the hub, so that its `BLPOP` ends and the try
    /// behind it runs now, and waits for the try's replies. Not back by the I/O deadline, the
    /// try is settled as any lost reply: its connection closed, the lock read.
    async fn land(&self) -> Result<Tried, Error> {
        let call = &self.call;
        let (inner, wait) = (call.inner, call.wait);
        // The machine lands only a try the hub carries, which has a place among the waiters;
        // without one there is nothing to land, and it tries by itself.
        let Some(listening) = &self.listener else {
            return call.try_short(true).await;
        };
        let since = Instant::now();
        let deadline = inner.io_deadline(wait);
        call.wake(&listening.wake_hub()).await;
        let never = CancelToken::new();
        loop {
            match listening.heard() {
                Heard::Landed(landed) => return call.after_carried(landed).await,
                Heard::Carried(on) if Instant::now() >= deadline => {
                    listening.settled();
                    let error = redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "the reply of a try behind the waiting connection's BLPOP did not come",
                    ));
                    return call.settle_try(on, error, since).await;
                }
                Heard::Carried(_) => {
                    R::mail(&listening.ear.mailbox, Some(deadline), &never).await;
                }
                Heard::OnItsOwn => return call.try_short(true).await,
            }
        }
    }

    /// Leaves the lock's waiters without the lock, passing on a signal it was told and did
    /// not act on, which no other waiter of the process can take; and, the last of them,
    /// sees that the hub no longer holds a signal of the lock (see [`Inner::unlisten`]).
    async fn stop_listening(&mut self) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        let call = &self.call;
        let (inner, wait) = (call.inner, call.wait);
        if listener.leave() {
            call.pass_on().await;
        }
        inner.unlisten(inner.io_deadline(wait)).await;
    }
}

/// One acquire call of a plain lock: its handle, its wait and what cancels it; what its tries
/// need.
struct Call<'a, R: Runtime> {
    inner: &'a Arc<Inner<R>>,
    wait: Wait,
    cancel: &'a CancelToken,
}

impl<R: Runtime> Call<'_, R> {
    /// One try on a short connection; a lost reply is settled by reading the owner. `woken`:
    /// it follows a wait, and is confirmed if its reply was slow (see
    /// [`Attempting::needs_confirming`]).
    async fn try_short(&self, woken: bool) -> Result<Tried, Error> {
        let inner = self.inner;
        let request = self.try_request();
        let deadline = inner.io_deadline(self.wait);
        let sent = Instant::now();
        match send(&*inner.transport, &request, deadline).await {
            Ok(mut replies) => {
                // The `WAIT`'s reply comes off first; if it failed, a lock taken is given back.
                let acks = request.acks(&mut replies);
                self.tried(&replies, Attempting::new(sent, woken), acks)
            }
            Err(Fault::NotSent(e)) => Err(e.into()),
            Err(Fault::Lost { conn, error }) => self.settle_try(conn, error, sent).await,
        }
    }

    /// A try at the lock, as this handle makes it.
    fn try_request(&self) -> Request {
        let settings = &self.inner.settings;
        lock::try_lock(
            &self.inner.keys,
            &settings.id,
            settings.expire_ms,
            settings.fencing,
        )
        .replicated(settings.replicas)
    }

    /// What a try's replies say, the try counted as `attempt`.
    fn tried(
        &self,
        replies: &[Value],
        attempt: Attempting,
        acks: Result<Option<u64>, Error>,
    ) -> Result<Tried, Error> {
        let inner = self.inner;
        Ok(match lock::parse_try(&inner.keys, replies)? {
            Attempt::Acquired { token } => Tried::Acquired {
                valid_until: inner.less_drift(attempt.valid_until(inner.settings.expire())),
                token,
                attempt,
                acks,
            },
            Attempt::Busy { owner, pttl } => Tried::Busy {
                owner,
                pttl,
                at: Instant::now(),
            },
        })
    }

    /// What the try the hub carried behind its `BLPOP` came to, settled as a try of its own
    /// would be: a lost reply by reading the owner.
    async fn after_carried(&self, landed: Carried) -> Result<Tried, Error> {
        let inner = self.inner;
        let request = self.try_request();
        let mut replies = match landed.replies {
            Ok(replies) => replies,
            // It never went out: it tries by itself.
            Err(Fault::NotSent(_)) => return self.try_short(true).await,
            Err(Fault::Lost { conn, error }) => {
                return self.settle_try(conn, error, landed.sent).await
            }
        };
        // Turned away whole (the key moved, the primary is changing), it took nothing: it
        // tries where the key lives now.
        if lock::try_redirected(&replies) {
            return self.try_short(true).await;
        }
        // The script was not known to the server: the try alone goes again, with its text.
        if let Some((at, retry)) = request.noscript_retry(&replies) {
            let since = Instant::now();
            let deadline = inner.io_deadline(self.wait);
            match inner.transport.exchange(&retry, deadline).await {
                Ok(retried) => request.patch(&mut replies, at, retried),
                Err(Fault::NotSent(e)) => return Err(e.into()),
                Err(Fault::Lost { conn, error }) => {
                    return self.settle_try(conn, error, since).await
                }
            }
        }
        let acks = request.acks(&mut replies);
        self.tried(&replies, Attempting::new(landed.sent, true), acks)
    }

    /// A try sent at `since` whose reply was lost: close its connection at the server, so the
    /// try cannot run after the read, then read whose id the key holds. If that cannot be done
    /// in time the outcome is unknown, and the next call asks Redis first. A call with no
    /// deadline of its own settles by the I/O timeout from `since` (and the grace): a server
    /// that does not answer costs it that much, not a second I/O timeout.
    async fn settle_try(
        &self,
        conn: Option<ConnId>,
        error: redis::RedisError,
        since: Instant,
    ) -> Result<Tried, Error> {
        let inner = self.inner;
        log::warn!(
            "lock {:?}: reply to a try lost ({error}); settling",
            inner.name()
        );
        let wait = self.wait.away_since(since, inner.settings.io_timeout);
        let settled = inner.settle(conn, wait, self.cancel).await;
        observe::settle(&inner.settings.label, inner.name(), settled.is_ok());
        match settled {
            Ok((observed, sent)) => Ok(self.found(observed, sent)),
            Err(settling) => {
                inner.unsure(Unsure {
                    conn,
                    releasing: false,
                });
                match settling {
                    // Redis answered, but refused the read (an ACL): that is what to fix.
                    Error::Redis(e) if !e.is_io_error() => Err(Error::Redis(e)),
                    _ => Err(inner.unknown("acquire", error)),
                }
            }
        }
    }

    /// The lock as a try would find it, read again after pauses while the server is away:
    /// for a waiter whose wait failed, a try of its own perhaps among what failed.
    async fn look(&self) -> Result<Tried, Error> {
        let (observed, sent) = self.inner.settle(None, self.wait, self.cancel).await?;
        Ok(self.found(observed, sent))
    }

    /// What a read sent at `sent` found, as a try's outcome: the lock is ours if it holds our
    /// id (a try whose reply was lost took it), valid from the read's send.
    fn found(&self, observed: Observed, sent: Instant) -> Tried {
        let inner = self.inner;
        if inner.is_ours(observed.owner.as_deref()) {
            return Tried::Acquired {
                valid_until: inner.less_drift(lease::valid_from_read(sent, observed.pttl)),
                token: observed.fence,
                attempt: Attempting::new(sent, false),
                acks: Ok(None),
            };
        }
        Tried::Busy {
            owner: observed.owner,
            pttl: observed.pttl,
            at: Instant::now(),
        }
    }

    /// Sends `wake` to the process's hub, whose `BLPOP` then ends. A wake that does not get
    /// there costs time only: the `BLPOP` ends within a second anyway.
    async fn wake(&self, wake: &Request) {
        let inner = self.inner;
        if let Err(e) = send(&*inner.transport, wake, inner.io_deadline(self.wait)).await {
            log::debug!("lock {:?}: the hub was not woken: {e:?}", inner.name());
        }
    }

    /// Passes a wake-up on, for another waiter: at worst a spurious wake, after which a waiter
    /// tries, finds the lock taken, and waits again.
    async fn pass_on(&self) {
        let inner = self.inner;
        let request = lock::pass_on(&inner.keys);
        if let Err(fault) = send(&*inner.transport, &request, inner.io_deadline(self.wait)).await {
            log::debug!("lock {:?}: passing a wake-up on: {fault:?}", inner.name());
        }
    }
}

impl<R: Runtime> Drop for Waiter<'_, R> {
    fn drop(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        if let Some(on) = listener.carried_on() {
            let inner = self.call.inner;
            let deadline = Instant::now() + inner.settings.io_timeout;
            R::settle_dropped(&inner.transport, on, inner.leasing.release(), deadline);
        }
    }
}
