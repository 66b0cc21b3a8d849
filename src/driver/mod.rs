//! The driver: a handle's engine, written once, as futures, for both APIs and every
//! primitive. Over the transport layer's sending (`crate::transport::send`) it keeps what the
//! handle knows (the lease) and runs the paths of a hold's life, one file each:
//! - [`take`]: [`Inner::take`], the one acquire path, what comes before an acquire and what
//!   every acquisition starts with; between them [`acquire`] for python-redis-lock's lock (one
//!   try, then a wait for a wake-up signal and another try, as
//!   [`LockWait`](crate::protocol::lock_wait::LockWait) decides), [`acquire_line`] for the queue
//!   engine's primitives (a place in [`line`], the wait in line, then the grant claimed);
//! - [`failover`]: an acquisition made just after a failover, held back until no holder of
//!   the old primary can believe it holds;
//! - [`hold`]: what a holder does (release, extend, renew, reset), over [`known`], what the
//!   handle knows of its lock (`lost()`, the fencing token, the loss notice's alarm);
//! - [`settle`]: a lost reply's outcome, settled by reading state, now or in the background;
//! - [`acquirer`]: an [`Acquisition`](acquirer::Acquisition) for each one taken, and the handles that
//!   make many.
//!
//! How it waits, pauses and runs work apart from the caller is its [`Runtime`]'s:
//! [`blocking::Blocking`] (each future is ready when first polled) or [`tokio::Tokio`].

mod acquire;
mod acquire_line;
pub(crate) mod acquirer;
pub(crate) mod blocking;
mod confirm;
pub(crate) mod election;
mod failover;
mod hold;
pub(crate) mod hub;
mod known;
pub(crate) mod line;
pub(crate) mod renew;
mod settle;
mod take;
#[cfg(test)]
mod tests;
mod tokens;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;
#[cfg(feature = "tokio")]
pub(crate) mod turn;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::settings::Settings;
use crate::protocol::keys::{Keys, QueueKeys};
use crate::protocol::lease::{Attempting, Belief, Wait};
use crate::protocol::leasing::{Leasing, LockLeasing, QueueLeasing};
use crate::protocol::lock::{Observed, Pttl};
use crate::protocol::primitive::Primitive;
use crate::protocol::queue::{self, Ask};
use crate::protocol::request::Request;
use crate::transport::send::{send_repeatable, Answered, AnyTransport};
use crate::transport::{ConnId, Transport};
use crate::{CancelToken, Error};
use hub::{Hub, Mailbox, Told};
use line::Line;
use tokens::TokensSeen;

pub use hold::Holder;
use known::Known;

/// How the driver runs on one API: where its requests go, how it waits for the lock, pauses
/// while a server is away, renews, and does work apart from the caller.
pub(crate) trait Runtime: Sized + Send + Sync + 'static {
    /// How the API's names start, from the crate root (`Debug` shows them).
    const API: &'static str;

    /// What makes a plain lock handle's calls take turns: nothing where each call blocks its
    /// thread; on tokio, [`turn::Turns`], so that a call never meets what a dropped one left
    /// in flight.
    type Turns: Default + Clone + Send + Sync + 'static;

    /// Where requests go. `'static`: the background settle keeps it beyond the call.
    type Transport: AnyTransport + ?Sized + 'static;

    /// Where the requests to the servers of `transport` go on this runtime.
    fn over(transport: Arc<dyn Transport>) -> Arc<Self::Transport>;

    /// Pauses for `pause` (a backoff while the server is away); true if `cancel` was
    /// cancelled by the end.
    fn pause(pause: Duration, cancel: &CancelToken) -> impl Future<Output = bool> + Send;

    /// Waits for `mailbox` to be told something by its hub, until `until` (`None`: no limit)
    /// or a cancel: what it was told, if anything.
    fn mail(
        mailbox: &Arc<Mailbox>,
        until: Option<Instant>,
        cancel: &CancelToken,
    ) -> impl Future<Output = Option<Told>> + Send;

    /// Runs an acquire, made by `acquire` with the token that cancels it, so that what it
    /// takes is given back even if its caller goes away: in place, cancelled by the handle's
    /// `cancel`; or on a task of its own, cancelled when the caller's future is dropped or
    /// `cancel` is cancelled (the task's hold is dropped with its output, which releases it).
    fn apart<T, F>(
        name: &str,
        cancel: &CancelToken,
        acquire: impl FnOnce(CancelToken) -> F + Send + 'static,
    ) -> impl Future<Output = Result<T, Error>> + Send
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static;

    /// Finishes `work` for a value being dropped (a hold's release): in place, before the
    /// drop returns; or from a task, and should its runtime end first, `again` on the
    /// dropping thread.
    fn on_drop<A: Future<Output = ()>>(
        work: impl Future<Output = ()> + Send + 'static,
        again: impl FnOnce() -> A + Send + 'static,
    );

    /// Finishes the work `make` makes for a caller that is gone (a wait stopped before its
    /// end), apart from the caller: a thread, or a task (and should its runtime end first,
    /// again on the dropping thread).
    fn unattended<F>(make: impl Fn() -> F + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static;

    /// Starts renewing the lock `inner` just took, first after `first`.
    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error>;

    /// Settles an unsure request of a handle being dropped: closes `conn`, then sends
    /// `unlock` (the handle's own release), by `deadline`, now or from a task of its own.
    fn settle_dropped(
        transport: &Arc<Self::Transport>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    );

    /// Runs `work` apart from the caller: on a thread of its own, or a task.
    fn in_background(work: impl Future<Output = ()> + Send + 'static);
}

/// A renewal under way, scheduled or a task.
pub(crate) trait Renewing: Send {
    /// Stops it; it renews no more once this returns.
    fn stop(self: Box<Self>);
}

/// A lock handle's settings, keys and what it knows, on runtime `R`.
pub(crate) struct Inner<R: Runtime> {
    pub(crate) settings: Settings,
    pub(crate) keys: Keys,
    /// What holding the lease sends: the lock's own requests.
    leasing: Box<dyn Leasing>,
    /// For a primitive on the queue engine, its place there. Its acquire path is then
    /// [`acquire_in_line`](Inner::acquire_in_line), not the lock's.
    place: Option<Place>,
    /// The process's hub on the lock's server, which brings the release's signal to its
    /// waits.
    hub: Arc<Hub>,
    pub(crate) transport: Arc<R::Transport>,
    /// What the servers' clocks may drift apart by over the expiry (a quorum's), taken off
    /// every validity.
    drift: Duration,
    /// What it knows of its lock.
    pub(crate) known: Known,
    /// Whether the servers' eviction policy was asked for (`refuse_evicting`).
    eviction_asked: std::sync::atomic::AtomicBool,
}

/// An acquisition just made: which of its handle's it is, and the token its loss cancels.
pub(crate) struct Taken {
    pub(crate) epoch: u64,
    pub(crate) notice: CancelToken,
}

/// A queue primitive's acquisition, in the queue engine: the line's keys, what it asks for
/// there, and the process's hub that brings its grant.
#[derive(Clone)]
pub(crate) struct Place {
    pub(crate) keys: QueueKeys,
    pub(crate) ask: Ask,
    pub(crate) hub: Arc<Hub>,
    /// The fencing tokens given to the handle's acquisitions so far.
    pub(crate) tokens: Arc<TokensSeen>,
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

impl<R: Runtime> Inner<R> {
    pub(crate) fn new(settings: Settings, transport: Arc<dyn Transport>) -> Self {
        let keys = Keys::new(&settings.name, transport.hash_tags());
        let leasing = Box::new(LockLeasing::new(&keys, &settings));
        let hub = Hub::of(&transport, keys.slot, settings.io_timeout);
        Inner::with_leasing(settings, R::over(transport), keys, leasing, None, hub)
    }

    /// A lock with `settings` on `transport`: python-redis-lock's, or the queue engine's fair
    /// lock.
    pub(crate) fn of_lock(
        mut settings: Settings,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, Error> {
        if !settings.on_queue_engine {
            return Ok(Inner::new(settings, transport));
        }
        let kind = Primitive::FairLock;
        let keys = QueueKeys::new(kind, &settings.name);
        let capacity = kind.capacity(1)?;
        let hub = Hub::of(&transport, keys.slot, settings.io_timeout);
        settings.id = queue::waiter_id(&settings.id, hub.process());
        let ask = Ask::new(
            &settings.id,
            1,
            capacity,
            settings.expire(),
            settings.lapse(),
        )?;
        let tokens = Arc::default();
        Ok(Inner::for_line(
            settings,
            R::over(transport),
            Place {
                keys,
                ask,
                hub,
                tokens,
            },
        ))
    }

    /// One acquisition of a queue primitive, `ask` in the queue of `queue`: its acquire path
    /// is [`acquire_in_line`](Inner::acquire_in_line), its hold the lock's.
    pub(crate) fn for_line(settings: Settings, transport: Arc<R::Transport>, place: Place) -> Self {
        let keys = Keys::new(&settings.name, transport.blocking().hash_tags());
        let leasing = Box::new(QueueLeasing::new(&place.keys, &place.ask));
        let hub = Arc::clone(&place.hub);
        Inner::with_leasing(settings, transport, keys, leasing, Some(place), hub)
    }

    fn with_leasing(
        settings: Settings,
        transport: Arc<R::Transport>,
        keys: Keys,
        leasing: Box<dyn Leasing>,
        place: Option<Place>,
        hub: Arc<Hub>,
    ) -> Self {
        let blocking = transport.blocking();
        let tokens = place
            .as_ref()
            .map_or_else(Default::default, |p| Arc::clone(&p.tokens));
        Inner {
            leasing,
            place,
            hub,
            keys,
            drift: settings
                .expire()
                .map_or(Duration::ZERO, |e| blocking.drift(e)),
            settings,
            transport,
            known: Known::new(tokens),
            eviction_asked: Default::default(),
        }
    }

    /// The hash slot of the keys its lease is kept in: where its renewals go.
    pub(crate) fn lease_slot(&self) -> u16 {
        self.place
            .as_ref()
            .map_or(self.keys.slot, |place| place.keys.slot)
    }

    /// Its place on the queue engine (see `place`); `None` for a plain lock.
    pub(crate) fn place(&self) -> Option<&Place> {
        self.place.as_ref()
    }

    /// The line of `place`, as this handle's waits reach it.
    pub(crate) fn line<'a>(&'a self, place: &'a Place) -> Line<'a, R> {
        Line {
            transport: &self.transport,
            keys: &place.keys,
            hub: &place.hub,
            name: &self.settings.name,
            io_timeout: self.settings.io_timeout,
        }
    }

    pub(crate) fn error(&self, make: impl FnOnce(String) -> Error) -> Error {
        make(self.settings.name.clone())
    }

    pub(super) fn unknown(&self, operation: &'static str, source: redis::RedisError) -> Error {
        Error::OutcomeUnknown {
            name: self.settings.name.clone(),
            operation,
            source,
        }
    }

    /// `valid_until` less the drift.
    pub(super) fn less_drift(&self, valid_until: Option<Instant>) -> Option<Instant> {
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

    pub(super) async fn call_again(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> Result<Answered, Error> {
        Ok(send_repeatable(&*self.transport, request, deadline).await?)
    }

    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    /// Reads owner, TTL and (with fencing) the counter in one round trip.
    pub(super) async fn observe_by(&self, deadline: Instant) -> Result<(Observed, Instant), Error> {
        let request = self.leasing.read();
        let answered = self.call_again(&request, deadline).await?;
        Ok((self.leasing.parse_read(&answered.replies)?, answered.sent))
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
}

impl<R: Runtime> Drop for Inner<R> {
    fn drop(&mut self) {
        // A held lock is left to expire, as python-redis-lock does; only renewing stops.
        let (renewal, belief, settler) = {
            let mut state = self.known.lock();
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
            R::settle_dropped(
                &self.transport,
                unsure.conn,
                self.leasing.release(),
                deadline,
            );
        }
    }
}
