//! The acquire path: one try on a short connection, then waits for a wake-up signal (brought
//! by the process's [`Hub`](super::hub::Hub)) and tries again, until the lock is ours, the wait is over or it
//! is cancelled. A lock taken is confirmed (replicas, a try that followed a wait) before it
//! counts.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::hub::{Carried, Heard, Listener, Told};
use super::settle::Claim;
use super::{Inner, Runtime, Taken, Tried};
use crate::observe;
use crate::observe::Hold;
use crate::protocol::eviction;
use crate::protocol::lease::{self, Attempting, Belief, Lease, Unsure, Wait};
use crate::protocol::lock::{self, Attempt, Observed};
use crate::protocol::lock_wait::{End, LockWait, Step, Terms};
use crate::protocol::request::Request;
use crate::transport::send::{longer, send, AnyTransport};
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
            inner: self,
            wait,
            cancel,
            machine: LockWait::new(wait, terms),
            listener: None,
        };
        waiter.run().await
    }

    /// What the try the hub carried behind its `BLPOP` came to, settled as a try of its own
    /// would be: a lost reply by reading the owner.
    async fn after_carried(
        &self,
        landed: Carried,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Tried, Error> {
        let request = self.try_request();
        let mut replies = match landed.replies {
            Ok(replies) => replies,
            // It never went out: it tries by itself.
            Err(Fault::NotSent(_)) => return self.try_short(wait, cancel, true).await,
            Err(Fault::Lost { conn, error }) => {
                return self
                    .settle_try(conn, error, landed.sent, wait, cancel)
                    .await
            }
        };
        // Turned away whole (the key moved, the primary is changing), it took nothing: it
        // tries where the key lives now.
        if lock::try_redirected(&replies) {
            return self.try_short(wait, cancel, true).await;
        }
        // The script was not known to the server: the try alone goes again, with its text.
        if let Some((at, retry)) = request.noscript_retry(&replies) {
            let since = Instant::now();
            match self
                .transport
                .exchange(&retry, self.io_deadline(wait))
                .await
            {
                Ok(retried) => request.patch(&mut replies, at, retried),
                Err(Fault::NotSent(e)) => return Err(e.into()),
                Err(Fault::Lost { conn, error }) => {
                    return self.settle_try(conn, error, since, wait, cancel).await
                }
            }
        }
        let acks = request.acks(&mut replies);
        self.tried(&replies, Attempting::new(landed.sent, true), acks)
    }

    /// Sends `wake` to the process's hub, whose `BLPOP` then ends. A wake that does not get
    /// there costs time only: the `BLPOP` ends within a second anyway.
    async fn wake(&self, wake: &Request, wait: Wait) {
        if let Err(e) = send(&*self.transport, wake, self.io_deadline(wait)).await {
            log::debug!("lock {:?}: the hub was not woken: {e:?}", self.name());
        }
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

    /// Passes a wake-up on, for another waiter: at worst a spurious wake, after which a waiter
    /// tries, finds the lock taken, and waits again.
    async fn pass_on(&self, wait: Wait) {
        let request = lock::pass_on(&self.keys);
        if let Err(fault) = send(&*self.transport, &request, self.io_deadline(wait)).await {
            log::debug!("lock {:?}: passing a wake-up on: {fault:?}", self.name());
        }
    }

    /// A try at the lock, as this handle makes it.
    fn try_request(&self) -> Request {
        lock::try_lock(
            &self.keys,
            &self.settings.id,
            self.settings.expire_ms,
            self.settings.fencing,
        )
        .replicated(self.settings.replicas)
    }

    /// One try on a short connection; a lost reply is settled by reading the owner. `woken`:
    /// it follows a wait, and is confirmed if its reply was slow (see
    /// [`Attempting::needs_confirming`]).
    pub(crate) async fn try_short(
        &self,
        wait: Wait,
        cancel: &CancelToken,
        woken: bool,
    ) -> Result<Tried, Error> {
        let request = self.try_request();
        let deadline = self.io_deadline(wait);
        let sent = Instant::now();
        match send(&*self.transport, &request, deadline).await {
            Ok(mut replies) => {
                // The `WAIT`'s reply comes off first; if it failed, a lock taken is given back.
                let acks = request.acks(&mut replies);
                self.tried(&replies, Attempting::new(sent, woken), acks)
            }
            Err(Fault::NotSent(e)) => Err(e.into()),
            Err(Fault::Lost { conn, error }) => {
                self.settle_try(conn, error, sent, wait, cancel).await
            }
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

    /// The lock as a try would find it, read again after pauses while the server is away:
    /// for a waiter whose wait failed, a try of its own perhaps among what failed.
    pub(crate) async fn look(&self, wait: Wait, cancel: &CancelToken) -> Result<Tried, Error> {
        let (observed, sent) = self.settle(None, wait, cancel).await?;
        Ok(self.found(observed, sent))
    }

    /// What a read sent at `sent` found, as a try's outcome: the lock is ours if it holds our
    /// id (a try whose reply was lost took it), valid from the read's send.
    pub(super) fn found(&self, observed: Observed, sent: Instant) -> Tried {
        if self.is_ours(observed.owner.as_deref()) {
            return Tried::Acquired {
                valid_until: self.less_drift(lease::valid_from_read(sent, observed.pttl)),
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

    pub(crate) fn tried(
        &self,
        replies: &[Value],
        attempt: Attempting,
        acks: Result<Option<u64>, Error>,
    ) -> Result<Tried, Error> {
        Ok(match lock::parse_try(&self.keys, replies)? {
            Attempt::Acquired { token } => Tried::Acquired {
                valid_until: self.less_drift(attempt.valid_until(self.settings.expire())),
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

    /// A try sent at `since` whose reply was lost: close its connection at the server, so the
    /// try cannot run after the read, then read whose id the key holds. If that cannot be done
    /// in time the outcome is unknown, and the next call asks Redis first. A call with no
    /// deadline of its own settles by the I/O timeout from `since` (and the grace): a server
    /// that does not answer costs it that much, not a second I/O timeout.
    pub(crate) async fn settle_try(
        &self,
        conn: Option<ConnId>,
        error: redis::RedisError,
        since: Instant,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Tried, Error> {
        log::warn!(
            "lock {:?}: reply to a try lost ({error}); settling",
            self.name()
        );
        let wait = wait.away_since(since, self.settings.io_timeout);
        let settled = self.settle(conn, wait, cancel).await;
        observe::settle(&self.settings.label, self.name(), settled.is_ok());
        match settled {
            Ok((observed, sent)) => Ok(self.found(observed, sent)),
            Err(settling) => {
                self.unsure(Unsure {
                    conn,
                    releasing: false,
                });
                match settling {
                    // Redis answered, but refused the read (an ACL): that is what to fix.
                    Error::Redis(e) if !e.is_io_error() => Err(Error::Redis(e)),
                    _ => Err(self.unknown("acquire", error)),
                }
            }
        }
    }

    /// When a step that keeps failing for want of a connection stops trying: the caller's
    /// deadline plus the grace, or the I/O timeout when there is none.
    pub(crate) fn give_up(&self, wait: Wait) -> Instant {
        match wait {
            Wait::Until(deadline) => deadline + self.settings.grace(),
            Wait::Never | Wait::Forever => Instant::now() + self.settings.io_timeout,
        }
    }

    /// A step's outcome, or `None` after a pause when it failed for want of a connection and
    /// there is time to try again before `give_up`. Backoff for a server that is away, never
    /// a way of waiting for the lock.
    pub(crate) async fn away<O>(
        &self,
        outcome: Result<O, Error>,
        give_up: Instant,
        pause: &mut Duration,
        cancel: &CancelToken,
    ) -> Option<Result<O, Error>> {
        let error = match outcome {
            Err(Error::Redis(e)) if e.is_io_error() || e.is_connection_refusal() => e,
            other => return Some(other),
        };
        let left = give_up.saturating_duration_since(Instant::now());
        if left <= *pause {
            return Some(Err(error.into()));
        }
        log::debug!(
            "lock {:?}: server away ({error}); trying again",
            self.name()
        );
        if R::pause(*pause, cancel).await {
            return Some(Err(self.error(|name| Error::Cancelled { name })));
        }
        *pause = longer(*pause);
        None
    }

    /// Before a new acquisition: a handle that holds the lock may not take it again; one
    /// whose lock was lost may; one that is unsure asks Redis, and if the lock turns out to be
    /// ours it is acquired (and returned).
    pub(super) async fn before_acquire(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        self.refuse_evicting(wait).await?;
        if let Some((unsure, claim)) = self.claim("acquire", self.give_up(wait), cancel).await? {
            return self.ask_redis(unsure, claim, wait, cancel).await;
        }
        let belief = self.state.lock().belief;
        match belief {
            // Unsure again: made so meanwhile by a call on another thread, which settles it.
            Belief::Free | Belief::Unsure(_) => Ok(None),
            Belief::Held(lease) if !lease.is_lost(Instant::now()) => {
                Err(self.error(|name| Error::AlreadyAcquired { name }))
            }
            Belief::Held(_) => {
                self.forget();
                Ok(None)
            }
        }
    }

    /// With `refuse_evicting`, refuses the servers that can evict the lock's keys. A server's
    /// policy is read with the first request it gets; an `INFO memory` on the lock's slot,
    /// once per handle, makes sure that was before the handle's first acquisition.
    async fn refuse_evicting(&self, wait: Wait) -> Result<(), Error> {
        if !self.settings.refuse_evicting {
            return Ok(());
        }
        let deadline = self.io_deadline(wait);
        if !self.eviction_asked.load(Ordering::Relaxed) {
            let request = eviction::request().on_slot(self.keys.slot);
            // Unanswered, it is asked again before the next acquisition; this one fails on
            // the same server anyway.
            if send(&*self.transport, &request, deadline).await.is_ok() {
                self.eviction_asked.store(true, Ordering::Relaxed);
            }
        }
        let blocking = self.transport.blocking();
        let primaries = blocking.primaries(deadline)?;
        let evicting =
            (primaries.iter()).find_map(|primary| primary.server(blocking).eviction()?.evicting());
        match evicting {
            Some((server, policy)) => Err(Error::Unsupported(format!(
                "{}; refused, as refuse_evicting(true) asks",
                eviction::warning(&server, &policy)
            ))),
            None => Ok(()),
        }
    }

    /// The unsure belief settled by this call: reads whose id the key holds, after closing
    /// the connection that may still take it. Ours, it is acquired, its expiry counted from
    /// the read: the handle's own request took it, and a handle never takes its own id in the
    /// key for someone else's lock (`AlreadyAcquired`). Not settled in time, the background
    /// settle goes on.
    pub(super) async fn ask_redis(
        self: &Arc<Self>,
        unsure: Unsure,
        _claim: Claim<'_>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        let (observed, sent) = match self.settle(unsure.conn, wait, cancel).await {
            Ok(settled) => settled,
            Err(e) => {
                self.unsure(unsure);
                return Err(e);
            }
        };
        self.forget();
        if !self.is_ours(observed.owner.as_deref()) {
            return Ok(None);
        }
        if cancel.is_cancelled() {
            self.unlock_quietly().await;
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        let valid_until = self.less_drift(lease::valid_from_read(sent, observed.pttl));
        self.acquired(valid_until, observed.fence).map(Some)
    }

    pub(super) fn acquired(
        self: &Arc<Self>,
        valid_until: Option<Instant>,
        token: Option<u64>,
    ) -> Result<Taken, Error> {
        let renewal = match self
            .settings
            .expire()
            .filter(|_| self.settings.auto_renewal)
        {
            Some(expire) => match R::renewal(self, self.renewal_due(valid_until, expire)) {
                Ok(renewal) => Some(renewal),
                Err(e) => {
                    // Without its renewal the lock would expire under the holder: give it back.
                    R::settle_dropped(
                        &self.transport,
                        None,
                        self.leasing.release(),
                        self.io_deadline(Wait::Never),
                    );
                    return Err(e);
                }
            },
            None => None,
        };
        // Made before the state is locked: a subscriber's code runs when a span is made.
        let hold = Hold::start(self.name(), &self.settings.id);
        let mut state = self.state.lock();
        state.epoch += 1;
        let lease = Lease::new(state.epoch, Instant::now(), valid_until, token);
        state.belief = Belief::Held(lease);
        state.renewal = renewal;
        state.hold = Some(hold);
        // A fresh notice: the last acquisition's stays as its end left it.
        state.notice = CancelToken::new();
        state.watched = false;
        let notice = state.notice.clone();
        let floor = state.token_floor;
        let epoch = state.epoch;
        drop(state);
        // A token that went back (the counter lost, and the server's clock behind the last
        // grant) is not kept silent: the store that checks tokens would refuse this holder, or
        // take a stale one.
        if let Some(token) = token
            && let Some(top) = self.tokens.given(token, floor)
        {
            observe::fence_went_back(&self.settings.label, self.name(), top, token);
        }
        self.lease_changed();
        log::debug!("lock {:?}: acquired", self.name());
        Ok(Taken { epoch, notice })
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
    inner: &'a Arc<Inner<R>>,
    wait: Wait,
    cancel: &'a CancelToken,
    machine: LockWait,
    listener: Option<Listener>,
}

impl<R: Runtime> Waiter<'_, R> {
    /// Does what each step says until the lock is the caller's or the call is over.
    async fn run(&mut self) -> Result<Option<Taken>, Error> {
        let (inner, wait, cancel) = (self.inner, self.wait, self.cancel);
        let behind = inner.hub.behind(&inner.keys.signal);
        let mut step = self.machine.start(behind, Instant::now());
        loop {
            step = match step {
                Step::Try { woken } => {
                    let tried = inner.try_short(wait, cancel, woken).await?;
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
        let inner = self.inner;
        let now = Instant::now();
        let (valid_until, token, attempt, acks) = match tried {
            Tried::Busy { owner, pttl, at } => {
                let ours = inner.is_ours(owner.as_deref());
                let carried = self.listener.as_ref().is_some_and(Listener::carried);
                let cancelled = self.cancel.is_cancelled();
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
        let confirmed = inner.confirm_taken(self.wait, confirming, valid_until, acks);
        let confirmed = confirmed.await?;
        Ok((self.machine).confirmed(confirmed, token, self.cancel.is_cancelled()))
    }

    /// Waits for a release's signal, which the process's hub brings, until `until` at the
    /// latest (the holder's expiry, or the deadline: the waiter keeps its own time), then
    /// tries. The first wait takes a place among the process's waiters on the lock. While it
    /// waits, the hub may carry its try behind its `BLPOP` (see [`Ear`](super::hub::Ear)).
    async fn block(&mut self, until: Instant) -> Result<Step, Error> {
        let (inner, wait, cancel) = (self.inner, self.wait, self.cancel);
        let listening = self.listener.get_or_insert_with(|| {
            let one_server = inner.transport.blocking().one_server_decides();
            let carried = one_server.then(|| inner.try_request());
            inner
                .hub
                .listen(&inner.keys, carried, inner.leasing.release())
        });
        if let Some(wake) = listening.wake() {
            // Not heard, the signal list is listened on at the end of the hub's `BLPOP`; a
            // signal waits there until then.
            inner.wake(&wake, wait).await;
        }
        listening.block().map_err(Error::Thread)?;
        if listening.waiting(until) {
            // First again after a try of its own: the hub's `BLPOP` is to carry its try.
            inner.wake(&listening.wake_hub(), wait).await;
        }
        let mailbox = listening.ear.mailbox.clone();
        let told = R::mail(&mailbox, Some(until), cancel).await;
        if told.is_some() {
            observe::handoff_step("woken", &inner.keys.signal);
        }
        let tried = match listening.heard() {
            Heard::Landed(landed) => inner.after_carried(landed, wait, cancel).await?,
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
                let tried = inner.try_short(wait, cancel, woken).await;
                mailbox.trying(false);
                unattended.0 = None;
                match (tried, refused.flatten()) {
                    // Refused the wait, it may still have found the lock free.
                    (Ok(Tried::Busy { .. }), Some(e)) => return Err(inner.refused(e)),
                    // The try never went out, the server being away: it looks at the lock
                    // again after pauses until the server is back.
                    (Err(Error::Redis(e)), _) if e.is_io_error() || e.is_connection_refusal() => {
                        inner.look(wait, cancel).await?
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
        let (inner, wait, cancel) = (self.inner, self.wait, self.cancel);
        let Some(listening) = &self.listener else {
            return inner.try_short(wait, cancel, true).await;
        };
        let since = Instant::now();
        let deadline = inner.io_deadline(wait);
        inner.wake(&listening.wake_hub(), wait).await;
        let never = CancelToken::new();
        loop {
            match listening.heard() {
                Heard::Landed(landed) => return inner.after_carried(landed, wait, cancel).await,
                Heard::Carried(on) if Instant::now() >= deadline => {
                    listening.settled();
                    let error = redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "the reply of a try behind the waiting connection's BLPOP did not come",
                    ));
                    return inner.settle_try(on, error, since, wait, cancel).await;
                }
                Heard::Carried(_) => {
                    R::mail(&listening.ear.mailbox, Some(deadline), &never).await;
                }
                Heard::OnItsOwn => return inner.try_short(wait, cancel, true).await,
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
        let (inner, wait) = (self.inner, self.wait);
        if listener.leave() {
            inner.pass_on(wait).await;
        }
        inner.unlisten(inner.io_deadline(wait)).await;
    }
}

impl<R: Runtime> Drop for Waiter<'_, R> {
    fn drop(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        if let Some(on) = listener.carried_on() {
            let inner = self.inner;
            let deadline = Instant::now() + inner.settings.io_timeout;
            R::settle_dropped(&inner.transport, on, inner.leasing.release(), deadline);
        }
    }
}
