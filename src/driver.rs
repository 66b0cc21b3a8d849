//! The driver's one acquire path, and its release, extend, reset and renewal, over the
//! protocol core and the connection seam. Written once, as futures over [`Io`], for both APIs:
//! the blocking one runs them with [`now`] (its transports block, so each future is ready the
//! first time it is polled); the async one awaits them on tokio.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::observe::{self, Hold};
use crate::protocol::keys::Keys;
use crate::protocol::lease::{self, Attempting, Belief, Lease, Next, Unsure, Wait, Waiting};
use crate::protocol::redirect;
use crate::protocol::requests::{self, Attempt, Extended, Observed, Pttl, Request};
use crate::settings::{millis, Settings};
use crate::transport::{Admin, ConnId, Fault, Transport};
use crate::{CancelToken, Error, Holder};

/// Sends requests, as futures: a blocking transport, an async one.
pub(crate) trait Exchange: Send + Sync {
    /// [`Transport::call`]: sends `request` and returns its replies, all by `deadline`.
    fn exchange(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Value>, Fault>> + Send;
}

/// Where the driver's requests go, and how it waits: a blocking transport, or an async one.
/// `'static`: the background settle keeps the transport beyond the call.
pub(crate) trait Io: Exchange + 'static {
    /// What an acquire keeps between its waits (a connection, a place in a queue).
    type Waiting<'a>: Send
    where
        Self: 'a;

    /// The blocking transport underneath, which says what the place is (hash tags, the
    /// settings it refuses, its clocks' drift).
    fn place(&self) -> &dyn Transport;

    /// [`Transport::kill`]: closes connection `conn` at its server.
    fn close(
        &self,
        conn: ConnId,
        deadline: Instant,
    ) -> impl Future<Output = Result<Admin, Fault>> + Send;

    /// Pauses for `pause` (a backoff while the server is away); true if `cancel` was
    /// cancelled by the end.
    fn pause(&self, pause: Duration, cancel: &CancelToken) -> impl Future<Output = bool> + Send;

    /// Waits for a wake-up signal until `until` at the latest, then tries the lock.
    fn wait_once<'a>(
        inner: &'a Inner<Self>,
        slot: &mut Option<Self::Waiting<'a>>,
        until: Instant,
        wait: Wait,
        cancel: &'a CancelToken,
    ) -> impl Future<Output = Result<Tried, Error>> + Send;

    /// Done with what the waits kept, because they took the lock.
    fn keep_for_holder(waiting: Self::Waiting<'_>);

    /// Starts renewing the lock `inner` just took, first after `first`.
    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error>;

    /// Settles an unsure request of a handle being dropped: closes `conn`, then sends
    /// `unlock` (the handle's own release), by `deadline`, now or from a task of its own.
    fn settle_dropped(
        transport: &Arc<Self>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    );

    /// Runs `work` apart from the caller: on a thread of its own, or a task.
    fn in_background(work: impl Future<Output = ()> + Send + 'static);
}

/// A renewal under way, thread or task.
pub(crate) trait Renewing: Send {
    /// Stops it; it renews no more once this returns.
    fn stop(self: Box<Self>);
}

/// A lock handle's settings, keys and what it knows, over transport `T`.
pub(crate) struct Inner<T: Io + ?Sized> {
    pub(crate) settings: Settings,
    pub(crate) keys: Keys,
    pub(crate) transport: Arc<T>,
    /// What the servers' clocks may drift apart by over the expiry (a quorum's), taken off
    /// every validity.
    drift: Duration,
    /// Shared with the background settle, which may outlive the handle.
    state: Arc<Mutex<State>>,
    /// Told whenever the lease changes, for the async guard's `when_lost`.
    #[cfg(feature = "tokio")]
    pub(crate) lease_changed: tokio::sync::Notify,
}

struct State {
    belief: Belief,
    /// The epoch of the latest acquisition.
    epoch: u64,
    renewal: Option<Box<dyn Renewing>>,
    /// Whether the unsure belief is being settled now, by a call of the handle or by the
    /// background settle: one at a time (see [`Claim`]).
    settling: bool,
    /// Until when the background settle runs, while it does.
    settler: Option<Instant>,
    /// The lock held, for its metrics and span, until released or its loss is noticed.
    hold: Option<Hold>,
}

/// What one try found, settled: a lost reply has been resolved by reading the owner.
pub(crate) enum Tried {
    Acquired {
        valid_until: Option<Instant>,
        token: Option<u64>,
        /// When it followed a wait, the send that may have set the key, to be confirmed.
        attempt: Attempting,
        /// How many replicas acknowledged it, when the request asked (`WAIT`), or why the
        /// `WAIT` failed.
        acks: Result<Option<u64>, Error>,
    },
    Busy {
        owner: Option<Vec<u8>>,
        pttl: Pttl,
        /// When the reply came: the holder's TTL counts from no later than this.
        at: Instant,
    },
}

/// A lock just taken, confirmed by an extend.
struct Confirmed {
    valid_until: Option<Instant>,
    /// How many replicas acknowledged the extend, when that was asked.
    acks: Option<u64>,
}

/// The replies of a repeatable request.
pub(crate) struct Answered {
    pub(crate) replies: Vec<Value>,
    /// When the send that was answered went out.
    pub(crate) sent: Instant,
    /// Whether an earlier send lost its reply, and so may have run too.
    pub(crate) lost_before: bool,
}

impl Answered {
    /// The first reply (`nil` if, against the protocol, there was none).
    pub(crate) fn first(&self) -> &Value {
        self.replies.first().unwrap_or(&Value::Nil)
    }
}

/// The first pause of the backoff while a server is away (a restart, a failover); each
/// failure doubles it, up to [`MAX_PAUSE`]. Never a way of waiting for the lock.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// How long the background settle of a lock without expiry goes on (one with an expiry: until
/// that has passed).
const SETTLE_WITHOUT_EXPIRY: Duration = Duration::from_secs(60);

/// The pause after `pause`, in the backoff while a server is away.
pub(crate) fn longer(pause: Duration) -> Duration {
    (pause * 2).min(MAX_PAUSE)
}

/// Logs a refusal of `CLIENT KILL` once per process.
static KILL_REFUSED: AtomicBool = AtomicBool::new(false);

pub(crate) fn log_kill_refused_once() {
    if !KILL_REFUSED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "the server refuses CLIENT KILL: lost replies are settled by reading state only; \
             see the ACL rule in the crate docs"
        );
    }
}

/// Sends `request`, and its script's text in a second round trip if the server answered
/// `NOSCRIPT` (the refused call ran nothing).
pub(crate) async fn send<T: Exchange + ?Sized>(
    io: &T,
    request: &Request,
    deadline: Instant,
) -> Result<Vec<Value>, Fault> {
    let mut replies = io.exchange(request, deadline).await?;
    if let Some((at, retry)) = request.noscript_retry(&replies, 0) {
        let retried = io.exchange(&retry, deadline).await?;
        request.patch(&mut replies, at, retried);
    }
    Ok(replies)
}

/// Sends a repeatable request, once more on a new connection if the first reply was lost:
/// running it twice does no more than running it once.
pub(crate) async fn send_repeatable<T: Exchange + ?Sized>(
    io: &T,
    request: &Request,
    deadline: Instant,
) -> Result<Answered, redis::RedisError> {
    debug_assert!(request.repeatable);
    let mut lost_before = false;
    loop {
        let sent = Instant::now();
        match send(io, request, deadline).await {
            Ok(replies) => {
                return Ok(Answered {
                    replies,
                    sent,
                    lost_before,
                })
            }
            Err(Fault::Lost { error, .. }) if !lost_before && Instant::now() < deadline => {
                log::debug!("reply lost ({error}); sending again");
                lost_before = true;
            }
            // Not sent again, but the first send may have run: not a plain refusal.
            Err(Fault::NotSent(e)) if lost_before => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "reply lost, and sending again failed",
                    e.to_string(),
                )))
            }
            Err(fault) => return Err(fault.into_error()),
        }
    }
}

/// Runs a future of the blocking driver to its end on this thread. Its transports block, so
/// it is ready when first polled; should one ever not be, the thread parks until woken.
pub(crate) fn now<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}

impl<T: Io + ?Sized> Inner<T> {
    pub(crate) fn new(settings: Settings, transport: Arc<T>) -> Self {
        let place = transport.place();
        Inner {
            keys: Keys::new(&settings.name, place.hash_tags()),
            drift: settings.expire().map_or(Duration::ZERO, |e| place.drift(e)),
            settings,
            transport,
            state: Arc::new(Mutex::new(State {
                belief: Belief::Free,
                epoch: 0,
                renewal: None,
                settling: false,
                settler: None,
                hold: None,
            })),
            #[cfg(feature = "tokio")]
            lease_changed: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn error(&self, make: impl FnOnce(String) -> Error) -> Error {
        make(self.settings.name.clone())
    }

    fn unknown(&self, operation: &'static str, source: redis::RedisError) -> Error {
        Error::OutcomeUnknown {
            name: self.settings.name.clone(),
            operation,
            source,
        }
    }

    /// `valid_until` less the drift.
    fn less_drift(&self, valid_until: Option<Instant>) -> Option<Instant> {
        valid_until.map(|t| t.checked_sub(self.drift).unwrap_or(t))
    }

    pub(crate) fn is_ours(&self, owner: Option<&[u8]>) -> bool {
        owner == Some(self.settings.id.as_bytes())
    }

    /// The end of a round trip started now: the I/O timeout, and for a wait with a deadline,
    /// no later than the deadline plus the grace.
    pub(crate) fn io_deadline(&self, wait: Wait) -> Instant {
        self.io_deadline_after(Instant::now(), wait)
    }

    /// The end of a round trip whose reply is due at `due` rather than now: a wait's `BLPOP`.
    /// A `WAIT` for replicas may add its own timeout.
    pub(crate) fn io_deadline_after(&self, due: Instant, wait: Wait) -> Instant {
        let replicas = self.settings.replicas_timeout();
        let io = due + self.settings.io_timeout + replicas;
        match wait {
            Wait::Until(deadline) => io.min(deadline + self.settings.grace() + replicas),
            Wait::Never | Wait::Forever => io,
        }
    }

    async fn call_again(&self, request: &Request, deadline: Instant) -> Result<Answered, Error> {
        Ok(send_repeatable(&*self.transport, request, deadline).await?)
    }

    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    /// Reads owner, TTL and (with fencing) the counter in one round trip.
    async fn observe_by(&self, deadline: Instant) -> Result<(Observed, Instant), Error> {
        let request = requests::observe(&self.keys, self.settings.fencing);
        let answered = self.call_again(&request, deadline).await?;
        Ok((
            requests::parse_observe(&self.keys, &answered.replies)?,
            answered.sent,
        ))
    }

    /// Who holds the lock and for how much longer, read in one round trip.
    pub(crate) async fn holder(&self) -> Result<Option<Holder>, Error> {
        let (observed, _) = self.observe_by(self.io_deadline(Wait::Never)).await?;
        Ok(observed.owner.map(|id| Holder {
            id: String::from_utf8_lossy(&id).into_owned(),
            ttl: match observed.pttl {
                Pttl::Left(left) => Some(left),
                Pttl::Forever | Pttl::Gone => None,
            },
        }))
    }

    /// The acquire path: one try on a short connection, then waits for a wake-up signal and
    /// tries again, until the lock is ours, the wait is over, or `cancel` is cancelled.
    /// Returns the acquisition's epoch.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        let settings = &self.settings;
        let acquire = self.acquire_unobserved(wait, cancel);
        observe::acquiring(&settings.label, &settings.name, &settings.id, acquire).await
    }

    async fn acquire_unobserved(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        if cancel.is_cancelled() {
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        self.transport.place().check_acquire(&self.settings)?;
        if let Some(epoch) = self.before_acquire(wait, cancel).await? {
            return Ok(Some(epoch));
        }
        log::debug!("lock {:?}: acquiring", self.name());
        let mut waiting_slot: Option<T::Waiting<'_>> = None;
        let mut waiting = Waiting::new(wait);
        let mut tried = self.try_short(wait, cancel).await?;
        let mut woken = false;
        loop {
            match tried {
                Tried::Acquired {
                    mut valid_until,
                    token,
                    attempt,
                    mut acks,
                } => {
                    // A lock found ours by a read was not acknowledged by replicas yet: an
                    // extend, with its `WAIT`, confirms it.
                    let unacknowledged =
                        self.settings.replicas.is_some() && matches!(acks, Ok(None));
                    let confirming = self.settings.expire_ms.filter(|_| {
                        unacknowledged
                            || attempt.needs_confirming(
                                Instant::now(),
                                self.settings.expire(),
                                self.settings.auto_renewal,
                            )
                    });
                    if let Some(ms) = confirming {
                        match self.confirm(wait, ms).await {
                            Ok(Some(confirmed)) => {
                                valid_until = confirmed.valid_until;
                                if confirmed.acks.is_some() {
                                    acks = Ok(confirmed.acks);
                                }
                            }
                            Ok(None) => {
                                tried = self.try_short(wait, cancel).await?;
                                continue;
                            }
                            // Taken but not confirmed: give it back rather than leave it.
                            Err(e) => {
                                self.unlock_quietly().await;
                                return Err(e);
                            }
                        }
                    }
                    if let Err(e) = self.replicated("acquire", acks) {
                        // Not confirmed: a failover could hand it to someone else as well.
                        self.unlock_quietly().await;
                        return Err(e);
                    }
                    if cancel.is_cancelled() {
                        // Granted just as the wait was cancelled: give it back, which also
                        // passes the wake-up on to the next waiter.
                        self.unlock_quietly().await;
                        return Err(self.error(|name| Error::Cancelled { name }));
                    }
                    if let Some(waiting) = waiting_slot.take() {
                        T::keep_for_holder(waiting);
                    }
                    if woken {
                        observe::handoff(&self.settings.label);
                    }
                    return self.acquired(valid_until, token).map(Some);
                }
                Tried::Busy { owner, .. } if self.is_ours(owner.as_deref()) => {
                    return Err(self.error(|name| Error::AlreadyAcquired { name }));
                }
                Tried::Busy { pttl, at, .. } => {
                    if cancel.is_cancelled() {
                        return Err(self.error(|name| Error::Cancelled { name }));
                    }
                    tried = match waiting.after_busy(at, pttl) {
                        Next::GiveUp => {
                            log::debug!("lock {:?}: not acquired in time", self.name());
                            return Ok(None);
                        }
                        Next::TryNow => self.try_short(wait, cancel).await?,
                        Next::Block(block) => {
                            woken = true;
                            T::wait_once(self, &mut waiting_slot, at + block, wait, cancel).await?
                        }
                    };
                }
            }
        }
    }

    /// One try on a short connection; a lost reply is settled by reading the owner.
    pub(crate) async fn try_short(&self, wait: Wait, cancel: &CancelToken) -> Result<Tried, Error> {
        let request = requests::try_lock(
            &self.keys,
            &self.settings.id,
            self.settings.expire_ms,
            self.settings.fencing,
        )
        .replicated(self.settings.replicas);
        let deadline = self.io_deadline(wait);
        let sent = Instant::now();
        match send(&*self.transport, &request, deadline).await {
            Ok(mut replies) => {
                // The `WAIT`'s reply comes off first; if it failed, a lock taken is given back.
                let acks = request.acks(&mut replies);
                self.tried(&replies, Attempting::new(sent, false), acks)
            }
            Err(Fault::NotSent(e)) => Err(e.into()),
            Err(Fault::Lost { conn, error }) => self.settle_try(conn, error, wait, cancel).await,
        }
    }

    /// What a wait's `BLPOP` + try came to: `replies` are all of `request`'s (the `BLPOP`'s
    /// first), or the fault that cut them off, the try having been sent at `sent`.
    pub(crate) async fn after_wait(
        &self,
        request: &Request,
        sent: Instant,
        replies: Result<Vec<Value>, Fault>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Tried, Error> {
        let mut replies = match replies {
            Ok(replies) => replies,
            Err(Fault::NotSent(e)) => return Err(e.into()),
            Err(Fault::Lost { conn, error }) => {
                return self.settle_try(conn, error, wait, cancel).await
            }
        };
        // The `BLPOP`'s own reply says only whether it was refused (the signal key is not a
        // list) or turned away by a cluster or a changing primary, in which case it did not
        // wait and the try says what to do.
        let blpop = if replies.is_empty() {
            Value::Nil
        } else {
            replies.remove(0)
        };
        let refused = match blpop {
            Value::ServerError(e) if redirect::of(&e).is_none() => Some(e),
            _ => None,
        };
        // The try's NOSCRIPT: the `BLPOP` is done, so the try alone goes again.
        if let Some((at, retry)) = request.noscript_retry(&replies, 1) {
            match self
                .transport
                .exchange(&retry, self.io_deadline(wait))
                .await
            {
                Ok(retried) => request.patch(&mut replies, at, retried),
                Err(Fault::NotSent(e)) => return Err(e.into()),
                Err(Fault::Lost { conn, error }) => {
                    return self.settle_try(conn, error, wait, cancel).await
                }
            }
        }
        // Turned away whole after the wait (the key moved, the primary is changing): the
        // next try goes by the short path, which finds where the key lives now.
        if requests::try_redirected(&replies) {
            return Ok(Tried::Busy {
                owner: None,
                pttl: Pttl::Gone,
                at: Instant::now(),
            });
        }
        let acks = request.acks(&mut replies);
        match (
            self.tried(&replies, Attempting::new(sent, true), acks)?,
            refused,
        ) {
            (Tried::Busy { .. }, Some(e)) => Err(self.refused(e)),
            (tried, _) => Ok(tried),
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
    #[cfg(feature = "tokio")]
    pub(crate) async fn look(&self, wait: Wait, cancel: &CancelToken) -> Result<Tried, Error> {
        let (observed, sent) = self.settle(None, wait, cancel).await?;
        Ok(self.found(observed, sent))
    }

    /// What a read sent at `sent` found, as a try's outcome: the lock is ours if it holds our
    /// id (a try whose reply was lost took it), valid from the read's send.
    fn found(&self, observed: Observed, sent: Instant) -> Tried {
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
        Ok(match requests::parse_try(&self.keys, replies)? {
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

    /// A try whose reply was lost: close its connection at the server, so the try cannot run
    /// after the read, then read whose id the key holds. If that cannot be done in time the
    /// outcome is unknown, and the next call asks Redis first.
    pub(crate) async fn settle_try(
        &self,
        conn: Option<ConnId>,
        error: redis::RedisError,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Tried, Error> {
        log::warn!(
            "lock {:?}: reply to a try lost ({error}); settling",
            self.name()
        );
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

    /// Closes `conn` at the server (where allowed) and reads the lock.
    /// Keeps trying while the server is away (a restart, a failover), until the caller's
    /// deadline plus the grace, or for the I/O timeout when there is none.
    async fn settle(
        &self,
        conn: Option<ConnId>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<(Observed, Instant), Error> {
        // Past its time here, the settling goes on in the background (`unsure`).
        let settle_time = (self.transport.place()).settle_time(self.settings.io_timeout);
        let give_up = self.give_up(wait).min(Instant::now() + settle_time);
        let mut pause = FIRST_PAUSE;
        loop {
            let deadline = (Instant::now() + self.settings.io_timeout).min(give_up);
            let settled = async {
                if let Some(conn) = conn {
                    match self.transport.close(conn, deadline).await {
                        Ok(Admin::Refused) => log_kill_refused_once(),
                        Ok(Admin::Done | Admin::Nothing) => {}
                        Err(fault) => return Err(fault.into_error().into()),
                    }
                }
                self.observe_by(deadline).await
            };
            match self.away(settled.await, give_up, &mut pause, cancel).await {
                Some(outcome) => return outcome,
                None => continue,
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
    pub(crate) async fn away<R>(
        &self,
        outcome: Result<R, Error>,
        give_up: Instant,
        pause: &mut Duration,
        cancel: &CancelToken,
    ) -> Option<Result<R, Error>> {
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
        if self.transport.pause(*pause, cancel).await {
            return Some(Err(self.error(|name| Error::Cancelled { name })));
        }
        *pause = longer(*pause);
        None
    }

    /// Before a new acquisition: a handle that holds the lock may not take it again; one
    /// whose lock was lost may; one that is unsure asks Redis, and if the lock turns out to be
    /// ours it is acquired (its epoch is returned).
    async fn before_acquire(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
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

    /// The unsure belief settled by this call: reads whose id the key holds, after closing
    /// the connection that may still take it. Ours, it is acquired, its expiry counted from
    /// the read: the handle's own request took it, and a handle never takes its own id in the
    /// key for someone else's lock (`AlreadyAcquired`). Not settled in time, the background
    /// settle goes on.
    async fn ask_redis(
        self: &Arc<Self>,
        unsure: Unsure,
        _claim: Claim<'_>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
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

    /// The belief becomes `unsure`. Redis is asked before the handle assumes anything, and
    /// meanwhile a background settle gives back whatever the handle's id holds as soon as the
    /// servers answer, so that a request whose reply was lost (perhaps still queued at a
    /// frozen server) does not hold the lock for nobody until the handle's next call. It runs
    /// until that is done, the belief changed, or the expiry has passed since.
    fn unsure(&self, unsure: Unsure) {
        let span = self.settings.expire().unwrap_or(SETTLE_WITHOUT_EXPIRY);
        let now = Instant::now();
        let until = now.checked_add(span).unwrap_or(now);
        let start = {
            let mut state = self.state.lock();
            state.belief = Belief::Unsure(unsure);
            let start = state.settler.is_none();
            state.settler = Some(state.settler.map_or(until, |t| t.max(until)));
            start
        };
        if start {
            T::in_background(
                Settler {
                    state: Arc::clone(&self.state),
                    transport: Arc::clone(&self.transport),
                    unlock: self.unlock_request(),
                    io_timeout: self.settings.io_timeout,
                    name: self.settings.name.clone(),
                    label: self.settings.label.clone(),
                }
                .run(),
            );
        }
    }

    /// The settling of the unsure belief for a call of the handle, once a step of the
    /// background settle under way has ended (that takes a round trip once the servers
    /// answer; until then, pauses as while a server is away), by `give_up`. `None` when the
    /// belief is not unsure.
    async fn claim(
        &self,
        operation: &'static str,
        give_up: Instant,
        cancel: &CancelToken,
    ) -> Result<Option<(Unsure, Claim<'_>)>, Error> {
        let mut pause = FIRST_PAUSE;
        loop {
            {
                let mut state = self.state.lock();
                match state.belief {
                    Belief::Unsure(unsure) if !state.settling => {
                        state.settling = true;
                        return Ok(Some((unsure, Claim(&self.state))));
                    }
                    Belief::Unsure(_) => {}
                    Belief::Free | Belief::Held(_) => return Ok(None),
                }
            }
            if Instant::now() + pause >= give_up {
                let busy = redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the background settle of an earlier lost reply is under way",
                ));
                return Err(self.unknown(operation, busy));
            }
            if self.transport.pause(pause, cancel).await {
                return Err(self.error(|name| Error::Cancelled { name }));
            }
            pause = longer(pause);
        }
    }

    /// Restarts the expiry of a lock just taken; `None` if it is not ours. Says until when it
    /// is valid, and how many replicas acknowledged it when that was asked.
    async fn confirm(&self, wait: Wait, ms: u64) -> Result<Option<Confirmed>, Error> {
        let request =
            requests::extend(&self.keys, &self.settings.id, ms).replicated(self.settings.replicas);
        let mut answered = self.call_again(&request, self.io_deadline(wait)).await?;
        let acks = request.acks(&mut answered.replies)?;
        Ok(
            match requests::parse_extend(&self.keys, answered.first())? {
                Extended::NotOurs => None,
                Extended::Yes | Extended::NoExpiry => Some(Confirmed {
                    valid_until: self.less_drift(
                        Attempting::new(answered.sent, false).valid_until(self.settings.expire()),
                    ),
                    acks,
                }),
            },
        )
    }

    /// Fails with [`Error::NotReplicated`] when fewer replicas than asked for acknowledged
    /// `operation` (`acks` is `None` when no `WAIT` ran), or with the `WAIT`'s own error.
    fn replicated(
        &self,
        operation: &'static str,
        acks: Result<Option<u64>, Error>,
    ) -> Result<(), Error> {
        let acks = acks?;
        match self.settings.replicas {
            Some((wanted, _)) if acks.unwrap_or(0) < u64::from(wanted) => {
                Err(Error::NotReplicated {
                    name: self.settings.name.clone(),
                    operation,
                    acked: acks.unwrap_or(0),
                    wanted,
                })
            }
            _ => Ok(()),
        }
    }

    fn acquired(
        self: &Arc<Self>,
        valid_until: Option<Instant>,
        token: Option<u64>,
    ) -> Result<u64, Error> {
        let renewal = match self
            .settings
            .expire()
            .filter(|_| self.settings.auto_renewal)
        {
            Some(expire) => match T::renewal(self, self.renewal_due(valid_until, expire)) {
                Ok(renewal) => Some(renewal),
                Err(e) => {
                    // Without its renewal the lock would expire under the holder: give it back.
                    T::settle_dropped(
                        &self.transport,
                        None,
                        self.unlock_request(),
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
        state.belief = Belief::Held(Lease::new(state.epoch, valid_until, token));
        state.renewal = renewal;
        state.hold = Some(hold);
        self.lease_changed();
        log::debug!("lock {:?}: acquired", self.name());
        Ok(state.epoch)
    }

    /// Releases the lock: any acquisition (`epoch` `None`), or only acquisition `epoch`, as a
    /// guard does.
    pub(crate) async fn release(&self, epoch: Option<u64>) -> Result<(), Error> {
        let deadline = self.io_deadline(Wait::Never);
        // Settling an unsure belief is this call's from here: no background give-back
        // crosses it.
        let never = CancelToken::new();
        let _claim = self.claim("release", deadline, &never).await?;
        let belief = {
            let state = self.state.lock();
            match (epoch, state.belief) {
                (Some(epoch), Belief::Held(lease)) if lease.epoch != epoch => {
                    return Err(self.error(|name| Error::NotAcquired { name }))
                }
                (Some(_), Belief::Free) => {
                    return Err(self.error(|name| Error::NotAcquired { name }))
                }
                (_, belief) => belief,
            }
        };
        log::debug!("lock {:?}: releasing", self.name());
        if matches!(belief, Belief::Held(lease) if lease.is_lost(Instant::now())) {
            // Its expiry passed without a renewal (a lock that does not renew, held too
            // long): `lost()` turned true, and it counts as lost.
            self.note_lost("expired while held");
        }
        self.end_hold();
        self.stop_renewal();
        let mut unsure_release = false;
        if let Belief::Unsure(unsure) = belief {
            unsure_release = unsure.releasing;
            if let Some(conn) = unsure.conn {
                if let Err(fault) = self.transport.close(conn, deadline).await {
                    return Err(self.unknown("release", fault.into_error()));
                }
            }
        }
        let request = self.unlock_request().replicated(self.settings.replicas);
        let outcome = match self.call_again(&request, deadline).await {
            Ok(mut answered) => {
                let acks = request.acks(&mut answered.replies);
                let released = requests::parse_unlock(&self.keys, answered.first())?;
                self.state.lock().belief = Belief::Free;
                if released || answered.lost_before || unsure_release {
                    self.replicated("release", acks)
                } else {
                    Err(self.error(|name| Error::NotAcquired { name }))
                }
            }
            Err(e) => {
                // It may have run: the next acquire asks Redis instead of trusting a belief.
                self.unsure(Unsure {
                    conn: None,
                    releasing: true,
                });
                match e {
                    // Refused before anything was sent (see `send_repeatable`): nothing ran.
                    Error::Redis(source) if source.is_connection_refusal() => {
                        Err(Error::Redis(source))
                    }
                    Error::Redis(source) => Err(self.unknown("release", source)),
                    other => Err(other),
                }
            }
        };
        self.lease_changed();
        outcome
    }

    /// This handle's release: deletes the key if it holds this handle's id, and wakes one
    /// waiter.
    fn unlock_request(&self) -> Request {
        requests::unlock(
            &self.keys,
            self.settings.id.as_bytes(),
            self.settings.signal_expire_ms,
        )
    }

    /// Gives back a lock no caller will hold; a failure is logged, and the lock frees itself
    /// at its expiry.
    pub(crate) async fn unlock_quietly(&self) {
        let request = self.unlock_request();
        if let Err(e) = self
            .call_again(&request, self.io_deadline(Wait::Never))
            .await
        {
            log::error!("lock {:?}: release failed: {e}", self.name());
        }
    }

    /// Gives the lock a new expiry: `expire`, or the configured one when `None`.
    pub(crate) async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        let ms = match expire {
            Some(d) => millis("expire", d)?,
            None => self.settings.expire_ms.ok_or_else(|| {
                Error::invalid("extend(None) needs an expire configured on the lock")
            })?,
        };
        match self.extend_ms(ms).await? {
            Extended::Yes => Ok(()),
            Extended::NotOurs => {
                // If this handle thought it held the lock, it has just learned otherwise.
                self.mark_lost("an extend found another owner");
                Err(self.error(|name| Error::NotAcquired { name }))
            }
            Extended::NoExpiry => Err(self.error(|name| Error::NotExpirable { name })),
        }
    }

    /// Sets a new expiry of `ms` if the lock is ours, and moves the known deadline with it.
    async fn extend_ms(&self, ms: u64) -> Result<Extended, Error> {
        let request =
            requests::extend(&self.keys, &self.settings.id, ms).replicated(self.settings.replicas);
        let mut answered = self
            .call_again(&request, self.io_deadline(Wait::Never))
            .await?;
        let acks = request.acks(&mut answered.replies);
        let extended = requests::parse_extend(&self.keys, answered.first())?;
        if extended == Extended::Yes {
            // Not replicated, the longer expiry may not survive a failover: the lease keeps
            // the old one.
            self.replicated("extend", acks)?;
            if let Belief::Held(lease) = &mut self.state.lock().belief {
                // The drift of this expiry, which need not be the configured one.
                let expire = Duration::from_millis(ms);
                let granted = expire.saturating_sub(self.transport.place().drift(expire));
                lease.extended(answered.sent, granted);
            }
            self.lease_changed();
        }
        Ok(extended)
    }

    pub(crate) async fn reset(&self) -> Result<bool, Error> {
        let deadline = self.io_deadline(Wait::Never);
        let (observed, _) = self.observe_by(deadline).await?;
        let Some(owner) = observed.owner else {
            return Ok(false);
        };
        if self.is_ours(Some(&owner)) {
            self.forget();
        }
        let request = requests::reset(&self.keys, &owner, self.settings.signal_expire_ms, false);
        let answered = self.call_again(&request, deadline).await?;
        // Deleted now, or released by its owner in between: either way that owner's lock is
        // gone, and no later one was touched.
        requests::parse_reset(&self.keys, answered.first())?;
        log::info!("lock {:?} reset", self.name());
        Ok(true)
    }

    /// When the renewal of a lease valid until `valid_until` is due, from now: scheduled
    /// from the expiry the handle believes, not from when it got the lock, since a lease
    /// that followed a wait is counted from the wait's start.
    fn renewal_due(&self, valid_until: Option<Instant>, expire: Duration) -> Duration {
        valid_until.map_or(expire * 2 / 3, |until| {
            lease::renewal_due(Instant::now(), until, expire)
        })
    }

    /// One renewal: the wait before the next, or `None` to stop.
    pub(crate) async fn renew(&self) -> Option<Duration> {
        let expire = self.settings.expire()?;
        let interval = expire * 2 / 3;
        match self.extend_ms(self.settings.expire_ms?).await {
            Ok(Extended::Yes) => {
                let lease = match self.state.lock().belief {
                    Belief::Held(lease) => lease,
                    // Released meanwhile: the release stops this renewal.
                    Belief::Free | Belief::Unsure(_) => return None,
                };
                if lease.is_lost(Instant::now()) {
                    // Renewed only after the expiry passed: someone else may have held it
                    // meanwhile, and a lost lease stays lost.
                    self.note_lost("renewed too late");
                    log::error!("lock {:?}: lost (renewed too late)", self.name());
                    return None;
                }
                log::debug!("lock {:?}: renewed", self.name());
                Some(self.renewal_due(lease.valid_until, expire))
            }
            Ok(Extended::NotOurs) => {
                self.mark_lost("a renewal found another owner");
                log::error!("lock {:?}: lost (it is no longer ours)", self.name());
                None
            }
            Ok(Extended::NoExpiry) => {
                log::warn!(
                    "lock {:?}: its expiry was removed; renewal not needed",
                    self.name()
                );
                None
            }
            Err(e) if self.expired() => {
                self.mark_lost("expired before a renewal got through");
                log::error!(
                    "lock {:?}: lost (expired before a renewal got through: {e})",
                    self.name()
                );
                None
            }
            Err(e) => {
                // Try again soon: the lock is lost if the expiry passes first.
                observe::renewal_failed(&self.settings.label, self.name(), &e);
                log::warn!("lock {:?}: renewal failed, retrying: {e}", self.name());
                Some((interval / 8).max(Duration::from_millis(1)))
            }
        }
    }

    fn expired(&self) -> bool {
        matches!(self.state.lock().belief, Belief::Held(lease) if lease.is_lost(Instant::now()))
    }

    /// The lease is lost, for `why`.
    pub(crate) fn mark_lost(&self, why: &str) {
        if let Belief::Held(lease) = &mut self.state.lock().belief {
            lease.mark_lost();
        }
        self.note_lost(why);
        self.lease_changed();
    }

    /// `lost()` turned true, for `why`: counted once per acquisition, as its hold ends.
    fn note_lost(&self, why: &str) {
        let hold = self.state.lock().hold.take();
        if let Some(hold) = hold {
            hold.lost(&self.settings.label, self.name(), &self.settings.id, why);
        }
    }

    /// The hold is over, if it was not already (by a loss).
    fn end_hold(&self) {
        let hold = self.state.lock().hold.take();
        if let Some(hold) = hold {
            hold.end(&self.settings.label);
        }
    }

    /// Whether the lock this handle acquired has been lost since; see `Lock::lost`.
    pub(crate) fn lost(&self) -> bool {
        match self.state.lock().belief {
            Belief::Held(lease) => lease.is_lost(Instant::now()),
            Belief::Free | Belief::Unsure(_) => false,
        }
    }

    /// The fencing token of the current acquisition.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        match self.state.lock().belief {
            Belief::Held(lease) => lease.token,
            Belief::Free | Belief::Unsure(_) => None,
        }
    }

    /// Whether acquisition `epoch` is over or lost.
    pub(crate) fn lost_since(&self, epoch: u64) -> bool {
        self.valid_until(epoch).is_none()
    }

    /// Until when acquisition `epoch` is valid (`Some(None)`: no expiry), or `None` once it
    /// is over or lost.
    pub(crate) fn valid_until(&self, epoch: u64) -> Option<Option<Instant>> {
        match self.state.lock().belief {
            Belief::Held(lease) if lease.epoch == epoch && !lease.is_lost(Instant::now()) => {
                Some(lease.valid_until)
            }
            _ => None,
        }
    }

    /// Forgets the acquisition and stops its renewal.
    fn forget(&self) {
        self.state.lock().belief = Belief::Free;
        self.end_hold();
        self.stop_renewal();
        self.lease_changed();
    }

    fn stop_renewal(&self) {
        let renewal = self.state.lock().renewal.take();
        if let Some(renewal) = renewal {
            renewal.stop();
        }
    }

    fn lease_changed(&self) {
        #[cfg(feature = "tokio")]
        self.lease_changed.notify_waiters();
    }
}

impl<T: Io + ?Sized> Drop for Inner<T> {
    fn drop(&mut self) {
        // A held lock is left to expire, as python-redis-lock does; only renewing stops.
        let (renewal, belief, settler) = {
            let mut state = self.state.lock();
            (state.renewal.take(), state.belief, state.settler)
        };
        if let Some(renewal) = renewal {
            renewal.stop();
        }
        // But an unsettled request may have taken the lock for nobody: settle it now, or a
        // lock without expiry would stay held for good. A background settle under way goes on
        // without the handle.
        if let (Belief::Unsure(unsure), None) = (belief, settler) {
            let deadline = Instant::now() + self.settings.io_timeout;
            T::settle_dropped(
                &self.transport,
                unsure.conn,
                self.unlock_request(),
                deadline,
            );
        }
    }
}

/// The settling of an unsure belief, taken by a call of the handle or by a step of the
/// background settle: one at a time, so that a give-back never lands on a lock the handle
/// has just found ours, and only one of them counts on what it did.
struct Claim<'a>(&'a Mutex<State>);

impl Claim<'_> {
    /// Ends the claim, with `change` made under the same lock.
    fn end(self, change: impl FnOnce(&mut State)) {
        let mut state = self.0.lock();
        change(&mut state);
        state.settling = false;
        drop(state);
        // The claim is over already; its drop would only take the lock again.
        std::mem::forget(self);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.lock().settling = false;
    }
}

/// The background settle of a handle's unsure belief: what it needs, the handle gone or not.
struct Settler<T: Io + ?Sized> {
    state: Arc<Mutex<State>>,
    transport: Arc<T>,
    /// The handle's own release, owner-checked: it gives back only what holds its id.
    unlock: Request,
    io_timeout: Duration,
    name: String,
    label: observe::Label,
}

impl<T: Io + ?Sized> Settler<T> {
    /// Gives back what the handle's id holds, again after pauses while the servers are away,
    /// until done, the belief is no longer unsure (the handle settled it), or its time is up.
    async fn run(self) {
        // Nobody cancels a give-back: it is what frees the lock for the others.
        let never = CancelToken::new();
        let mut pause = FIRST_PAUSE;
        loop {
            let claimed = {
                let mut state = self.state.lock();
                match (state.belief, state.settler) {
                    (Belief::Unsure(unsure), Some(until)) if Instant::now() < until => {
                        // A call of the handle settling it now: see again after a pause.
                        (!state.settling).then(|| {
                            state.settling = true;
                            (unsure, Claim(&self.state))
                        })
                    }
                    (belief, _) => {
                        state.settler = None;
                        if let Belief::Unsure(_) = belief {
                            // Its time is up and the outcome still unknown.
                            observe::settle(&self.label, &self.name, false);
                        }
                        return;
                    }
                }
            };
            if let Some((unsure, claim)) = claimed {
                if self.give_back(unsure).await {
                    log::info!(
                        "lock {:?}: a lost reply settled in the background",
                        self.name
                    );
                    observe::settle(&self.label, &self.name, true);
                    claim.end(|state| {
                        // Unless something else changed it meanwhile (a reset).
                        if let Belief::Unsure(_) = state.belief {
                            state.belief = Belief::Free;
                        }
                        state.settler = None;
                    });
                    return;
                }
            }
            self.transport.pause(pause, &never).await;
            pause = longer(pause);
        }
    }

    /// Closes the connection the unsure request went out on, so that it cannot run later,
    /// then releases what holds the handle's id. True once the servers answered the release.
    async fn give_back(&self, unsure: Unsure) -> bool {
        let deadline = Instant::now() + self.io_timeout;
        if let Some(conn) = unsure.conn {
            match self.transport.close(conn, deadline).await {
                Ok(Admin::Refused) => log_kill_refused_once(),
                Ok(Admin::Done | Admin::Nothing) => {}
                Err(_) => return false,
            }
        }
        match send_repeatable(&*self.transport, &self.unlock, deadline).await {
            Ok(_) => true,
            Err(e) => {
                log::debug!("lock {:?}: background settle: {e}", self.name);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::task::Poll;

    use super::now;

    #[test]
    fn now_runs_a_ready_future_to_its_output() {
        assert_eq!(now(async { 7 }), 7);
    }

    #[test]
    fn now_parks_until_a_pending_future_is_woken_from_another_thread() {
        let mut polls = 0;
        let output = now(poll_fn(|context| {
            polls += 1;
            if polls == 1 {
                let waker = context.waker().clone();
                std::thread::spawn(move || waker.wake());
                return Poll::Pending;
            }
            Poll::Ready(polls)
        }));
        assert!(output >= 2);
    }
}
