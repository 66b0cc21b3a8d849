//! The lock handle and the blocking driver: the acquire, release, extend and reset paths, over
//! the protocol core and the connection seam.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::protocol::keys::Keys;
use crate::protocol::lease::{self, Attempting, Belief, Lease, Next, Unsure, Wait, Waiting};
use crate::protocol::redirect;
use crate::protocol::requests::{self, Attempt, Extended, Observed, Pttl, Request};
use crate::renew::Renewal;
use crate::settings::{millis, Settings};
use crate::timer;
use crate::transport::{self, Admin, Answered, ConnId, Fault, Transport, Waiter};
use crate::Error;

/// A distributed lock on one Redis key, `lock:<name>`.
///
/// Acquiring blocks in `BLPOP lock-signal:<name>` instead of polling; a release wakes exactly
/// one waiter. Each handle has an owner id (random unless given); Redis holds the id of the
/// handle that owns the lock. A handle is `Send + Sync` and may be shared between threads, but
/// the lock is not reentrant: acquiring it again under the same id is an error.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::Lock::builder(&client, "nightly-report")
///     .expire(Duration::from_secs(60))
///     .auto_renewal(true)
///     .build()?;
/// let guard = lock.lock()?;
/// // ... work while the renewal thread keeps the lock alive ...
/// drop(guard);
/// # Ok(())
/// # }
/// ```
pub struct Lock {
    pub(crate) inner: Arc<Inner>,
}

/// Who holds a lock, from [`Lock::holder`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id in `lock:<name>` (converted lossily if it is not UTF-8).
    pub id: String,
    /// What is left of its expiry; `None` when it has none.
    pub ttl: Option<Duration>,
}

pub(crate) struct Inner {
    pub(crate) settings: Settings,
    keys: Keys,
    transport: Arc<dyn Transport>,
    /// What the servers' clocks may drift apart by over the expiry (a quorum's), taken off
    /// every validity.
    drift: Duration,
    state: Mutex<State>,
}

struct State {
    belief: Belief,
    /// The epoch of the latest acquisition.
    epoch: u64,
    renewal: Option<Renewal>,
}

/// What one try found, settled: a lost reply has been resolved by reading the owner.
enum Tried {
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

/// Logs a refusal of `CLIENT KILL` once per process.
static KILL_REFUSED: AtomicBool = AtomicBool::new(false);

fn log_kill_refused_once() {
    if !KILL_REFUSED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "the server refuses CLIENT KILL: lost replies are settled by reading state only; \
             see the ACL rule in the crate docs"
        );
    }
}

impl Lock {
    pub(crate) fn from_settings(settings: Settings, transport: Arc<dyn Transport>) -> Lock {
        let inner = Inner {
            keys: Keys::new(&settings.name, transport.hash_tags()),
            drift: settings
                .expire()
                .map_or(Duration::ZERO, |e| transport.drift(e)),
            settings,
            transport,
            state: Mutex::new(State {
                belief: Belief::Free,
                epoch: 0,
                renewal: None,
            }),
        };
        Lock {
            inner: Arc::new(inner),
        }
    }

    /// The lock's name (the key is `lock:<name>`).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert_eq!(lock.name(), "jobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.settings.name
    }

    /// This handle's owner id: what Redis holds while this handle owns the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert_eq!(lock.id().len(), 24);
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Blocks until the lock is ours. Waiting happens in `BLPOP`, woken by a release and
    /// ended by the client at the holder's expiry, so a crashed holder's lock is taken within
    /// milliseconds of its expiry. Each round trip is bounded by the handle's I/O timeout.
    ///
    /// Fails with [`Error::AlreadyAcquired`] if this owner id already holds the lock, and with
    /// [`Error::Cancelled`] when the handle's [`CancelToken`](crate::CancelToken) is cancelled.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// lock.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self) -> Result<(), Error> {
        self.inner.acquire(Wait::Forever).map(|_| ())
    }

    /// Takes the lock if it is free, never blocking. `Ok(false)` when someone else holds it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// if !lock.try_acquire()? {
    ///     println!("busy, held by {:?}", lock.holder()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub fn try_acquire(&self) -> Result<bool, Error> {
        Ok(self.inner.acquire(Wait::Never)?.is_some())
    }

    /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in time. A zero
    /// timeout is a single try; any size is allowed, including longer than the expiry. The
    /// call returns by `timeout` plus at most the round trip under way (see
    /// [`LockBuilder::io_timeout`](crate::LockBuilder::io_timeout)).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// if lock.acquire_timeout(std::time::Duration::from_secs(5))? {
    ///     lock.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "the lock may not have been taken"]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        Ok(self
            .inner
            .acquire(Wait::timeout(Instant::now(), timeout))?
            .is_some())
    }

    /// Releases the lock and wakes one waiter.
    ///
    /// Fails with [`Error::NotAcquired`], changing nothing, when the lock is not held under
    /// this handle's id. Never says so about a lock its own unlock released: when a reply was
    /// lost and the retry finds the lock gone, that is success. When Redis could not be
    /// reached in time it is [`Error::OutcomeUnknown`], and the next acquire asks Redis.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// assert!(matches!(lock.release(), Err(redis_blpop_lock::Error::NotAcquired { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self) -> Result<(), Error> {
        self.inner.release(None)
    }

    /// Gives the lock a new expiry: `expire`, or the handle's configured one when `None`.
    ///
    /// Fails with [`Error::NotAcquired`] when the lock is not held under this id,
    /// [`Error::NotExpirable`] when it was taken without an expiry, and
    /// [`Error::InvalidArgument`] when neither `expire` nor a configured expiry is there.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .build()?;
    /// let _guard = lock.lock()?;
    /// lock.extend(Some(Duration::from_secs(60)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        let ms = match expire {
            Some(d) => millis("expire", d)?,
            None => self.inner.settings.expire_ms.ok_or_else(|| {
                Error::invalid("extend(None) needs an expire configured on the lock")
            })?,
        };
        match self.inner.extend_ms(ms)? {
            Extended::Yes => Ok(()),
            Extended::NotOurs => {
                // If this handle thought it held the lock, it has just learned otherwise.
                self.inner.mark_lost();
                Err(self.inner.error(|name| Error::NotAcquired { name }))
            }
            Extended::NoExpiry => Err(self.inner.error(|name| Error::NotExpirable { name })),
        }
    }

    /// Frees the lock whoever holds it and wakes one waiter: an operator's tool for a lock
    /// left by a holder that will never release it. Returns whether the lock was held.
    ///
    /// It reads the owner, then deletes the lock only if that owner still holds it, so it can
    /// never delete a lock taken after it looked. A key at `lock:<name>` that is not a string
    /// is not a lock: it is left alone and reported as [`Error::Corrupt`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "stuck-job")?;
    /// if lock.reset()? {
    ///     println!("freed a stuck lock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "says whether there was a lock to reset"]
    pub fn reset(&self) -> Result<bool, Error> {
        self.inner.reset()
    }

    /// Who holds the lock and for how much longer, read in one round trip; `None` when it is
    /// free.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// match lock.holder()? {
    ///     Some(holder) => println!("held by {} for {:?}", holder.id, holder.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder(&self) -> Result<Option<Holder>, Error> {
        let observed = self.inner.observe()?;
        Ok(observed.owner.map(|id| Holder {
            id: String::from_utf8_lossy(&id).into_owned(),
            ttl: match observed.pttl {
                Pttl::Left(left) => Some(left),
                Pttl::Forever | Pttl::Gone => None,
            },
        }))
    }

    /// Whether anyone holds the lock (one round trip).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// println!("held: {}", lock.locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn locked(&self) -> Result<bool, Error> {
        Ok(self.inner.observe()?.owner.is_some())
    }

    /// The id of the lock's current owner, or `None` when it is free (one round trip); see
    /// [`holder`](Self::holder) for the remaining expiry too.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// assert_eq!(lock.owner_id()?.as_deref(), Some(lock.id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner_id(&self) -> Result<Option<String>, Error> {
        Ok(self.holder()?.map(|h| h.id))
    }

    /// Whether the lock this handle acquired has been lost since: its expiry passed without a
    /// renewal getting through, or a renewal or [`extend`](Self::extend) found another id in
    /// the key. No round trip: it is what this handle knows. Stays true until the lock is
    /// released or acquired again; false when the handle holds nothing.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "jobs")
    ///     .expire(Duration::from_secs(10))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// if guard.lost() {
    ///     // stop writing: someone else may hold the lock now
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        match self.inner.state.lock().belief {
            Belief::Held(lease) => lease.is_lost(Instant::now()),
            Belief::Free | Belief::Unsure(_) => false,
        }
    }

    /// The fencing token of the current acquisition, when the lock was built with
    /// [`fencing(true)`](crate::LockBuilder::fencing) and is held.
    ///
    /// Tokens grow with every acquisition of the name, so a storage system that remembers the
    /// highest token it has seen can refuse a write from a holder that lost the lock (paused
    /// past its expiry) after someone else took it:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger")
    ///     .expire(std::time::Duration::from_secs(10))
    ///     .fencing(true)
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// if let Some(token) = guard.fencing_token() {
    ///     // The store keeps the highest token it has accepted and rejects lower ones, e.g.
    ///     // in SQL: UPDATE ledger SET ..., fence = $token WHERE id = $id AND fence < $token
    ///     println!("writing with token {token}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        match self.inner.state.lock().belief {
            Belief::Held(lease) => lease.token,
            Belief::Free | Belief::Unsure(_) => None,
        }
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id stays out: anyone who knows it can release the lock.
        f.debug_struct("Lock")
            .field("name", &self.inner.settings.name)
            .field("expire_ms", &self.inner.settings.expire_ms)
            .field("auto_renewal", &self.inner.settings.auto_renewal)
            .field("fencing", &self.inner.settings.fencing)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn error(&self, make: impl FnOnce(String) -> Error) -> Error {
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

    fn is_ours(&self, owner: Option<&[u8]>) -> bool {
        owner == Some(self.settings.id.as_bytes())
    }

    fn cancelled(&self) -> bool {
        self.settings.cancel.is_cancelled()
    }

    /// The end of a round trip started now: the I/O timeout, and for a wait with a deadline,
    /// no later than the deadline plus the grace.
    fn io_deadline(&self, wait: Wait) -> Instant {
        self.io_deadline_after(Instant::now(), wait)
    }

    /// The end of a round trip whose reply is due at `due` rather than now: a wait's `BLPOP`.
    /// A `WAIT` for replicas may add its own timeout.
    fn io_deadline_after(&self, due: Instant, wait: Wait) -> Instant {
        let replicas = self.settings.replicas_timeout();
        let io = due + self.settings.io_timeout + replicas;
        match wait {
            Wait::Until(deadline) => io.min(deadline + self.settings.grace() + replicas),
            Wait::Never | Wait::Forever => io,
        }
    }

    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        transport::send(&*self.transport, request, deadline)
    }

    fn call_again(&self, request: &Request, deadline: Instant) -> Result<Answered, Error> {
        Ok(transport::send_repeatable(
            &*self.transport,
            request,
            deadline,
        )?)
    }

    fn name(&self) -> &str {
        &self.settings.name
    }

    /// Reads owner, TTL and (with fencing) the counter in one round trip.
    fn observe_by(&self, deadline: Instant) -> Result<(Observed, Instant), Error> {
        let request = requests::observe(&self.keys, self.settings.fencing);
        let answered = self.call_again(&request, deadline)?;
        Ok((
            requests::parse_observe(&self.keys, &answered.replies)?,
            answered.sent,
        ))
    }

    fn observe(&self) -> Result<Observed, Error> {
        Ok(self.observe_by(self.io_deadline(Wait::Never))?.0)
    }

    /// The acquire path: one try on a short connection, then `BLPOP` + try in a single round
    /// trip on a connection of the wait's own, until the lock is ours or the wait is over.
    /// Returns the acquisition's epoch.
    pub(crate) fn acquire(self: &Arc<Self>, wait: Wait) -> Result<Option<u64>, Error> {
        if self.cancelled() {
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        self.transport.check_acquire(&self.settings)?;
        if let Some(epoch) = self.before_acquire(wait)? {
            return Ok(Some(epoch));
        }
        log::debug!("lock {:?}: acquiring", self.name());
        let mut waiter: Option<Box<dyn Waiter + '_>> = None;
        let mut waiting = Waiting::new(wait);
        let mut tried = self.try_short(wait)?;
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
                            || attempt.needs_confirming(Instant::now(), self.settings.expire())
                    });
                    if let Some(ms) = confirming {
                        match self.confirm(wait, ms) {
                            Ok(Some(confirmed)) => {
                                valid_until = confirmed.valid_until;
                                if confirmed.acks.is_some() {
                                    acks = Ok(confirmed.acks);
                                }
                            }
                            Ok(None) => {
                                tried = self.try_short(wait)?;
                                continue;
                            }
                            // Taken but not confirmed: give it back rather than leave it.
                            Err(e) => {
                                self.unlock_quietly();
                                return Err(e);
                            }
                        }
                    }
                    if let Err(e) = self.replicated("acquire", acks) {
                        // Not confirmed: a failover could hand it to someone else as well.
                        self.unlock_quietly();
                        return Err(e);
                    }
                    if self.cancelled() {
                        // Granted just as the wait was cancelled: give it back, which also
                        // passes the wake-up on to the next waiter.
                        self.unlock_quietly();
                        return Err(self.error(|name| Error::Cancelled { name }));
                    }
                    if let Some(waiter) = waiter.take() {
                        waiter.keep_for_holder();
                    }
                    return self.acquired(valid_until, token).map(Some);
                }
                Tried::Busy { owner, .. } if self.is_ours(owner.as_deref()) => {
                    return Err(self.error(|name| Error::AlreadyAcquired { name }));
                }
                Tried::Busy { pttl, at, .. } => {
                    if self.cancelled() {
                        return Err(self.error(|name| Error::Cancelled { name }));
                    }
                    tried = match waiting.after_busy(at, pttl) {
                        Next::GiveUp => {
                            log::debug!("lock {:?}: not acquired in time", self.name());
                            return Ok(None);
                        }
                        Next::TryNow => self.try_short(wait)?,
                        Next::Block(block) => self.wait_once(&mut waiter, at + block, wait)?,
                    };
                }
            }
        }
    }

    /// One try on a short connection; a lost reply is settled by reading the owner.
    fn try_short(&self, wait: Wait) -> Result<Tried, Error> {
        let request = requests::try_lock(
            &self.keys,
            &self.settings.id,
            self.settings.expire_ms,
            self.settings.fencing,
        )
        .replicated(self.settings.replicas);
        let deadline = self.io_deadline(wait);
        let sent = Instant::now();
        match self.call(&request, deadline) {
            Ok(mut replies) => {
                // The `WAIT`'s reply comes off first; if it failed, a lock taken is given back.
                let acks = request.acks(&mut replies);
                self.tried(&replies, Attempting::new(sent, false), acks)
            }
            Err(Fault::NotSent(e)) => Err(e.into()),
            Err(Fault::Lost { conn, error }) => self.settle_try(conn, error, wait),
        }
    }

    /// Blocks in `BLPOP` until `until` at the latest, then tries, all in one round trip on
    /// the wait's own connection. The client keeps the time: at `until` it ends the `BLPOP`
    /// with `CLIENT UNBLOCK`, instead of waiting for the server's timer (up to 100 ms late at
    /// the default `hz 10`).
    fn wait_once<'t>(
        &'t self,
        slot: &mut Option<Box<dyn Waiter + 't>>,
        until: Instant,
        wait: Wait,
    ) -> Result<Tried, Error> {
        let conn = match slot {
            Some(conn) => conn,
            None => slot.insert(self.waiter_conn(wait)?),
        };
        let block = until.saturating_duration_since(Instant::now());
        let request = requests::wait_then_try(
            &self.keys,
            &self.settings.id,
            self.settings.expire_ms,
            self.settings.fencing,
            Some(block),
        )
        .replicated(self.settings.replicas);
        // Connected where the wait will block before its id is read, so that a cancel or the
        // timer reaches that connection.
        if let Err(fault) = conn.ready(self.io_deadline(wait)) {
            *slot = None;
            return Err(fault.into_error().into());
        }
        let id = conn.id();
        // While registered, a cancel ends the `BLPOP` from the cancelling thread.
        let registration = match id {
            Some(id) => match self.settings.cancel.blocking(&self.transport, id) {
                Some(registration) => Some(registration),
                None => return Err(self.error(|name| Error::Cancelled { name })),
            },
            None => None,
        };
        let sent = Instant::now();
        let attempt = Attempting::new(sent, true);
        let outcome = self.exchange_wait(conn.as_mut(), &request, until, wait);
        drop(registration);
        match outcome {
            // Turned away whole after the wait (the key moved, the primary is changing): the
            // next try goes by the short path, which finds where the key lives now.
            Ok((replies, _)) if requests::try_redirected(&replies) => Ok(Tried::Busy {
                owner: None,
                pttl: Pttl::Gone,
                at: Instant::now(),
            }),
            Ok((mut replies, refused)) => {
                let acks = request.acks(&mut replies);
                match (self.tried(&replies, attempt, acks)?, refused) {
                    (Tried::Busy { .. }, Some(e)) if e.code() == "WRONGTYPE" => {
                        Err(Error::Corrupt {
                            key: self.keys.signal.clone(),
                            reason:
                                "it holds a value that is not a list, so waiters cannot block on it"
                                    .into(),
                        })
                    }
                    (Tried::Busy { .. }, Some(e)) => Err(Error::Redis(e.into())),
                    (tried, _) => Ok(tried),
                }
            }
            Err(fault) => {
                // The connection was closed on the failure; the next wait takes another.
                *slot = None;
                match fault {
                    Fault::NotSent(e) => Err(e.into()),
                    Fault::Lost { conn, error } => self.settle_try(conn, error, wait),
                }
            }
        }
    }

    fn waiter_conn(&self, wait: Wait) -> Result<Box<dyn Waiter + '_>, Error> {
        self.reconnecting(wait, |deadline| {
            self.transport
                .waiter(self.keys.slot, deadline)
                .map_err(|fault| {
                    let e = fault.into_error();
                    log::warn!("lock {:?}: no connection to wait on: {e}", self.name());
                    e.into()
                })
        })
    }

    /// Sends the `BLPOP` + try and reads the try's replies (the `BLPOP`'s own is not needed).
    /// The timer thread ends the `BLPOP` at `until`; the reads' deadline is only the backstop
    /// for a server that does not answer.
    fn exchange_wait(
        &self,
        conn: &mut dyn Waiter,
        request: &Request,
        until: Instant,
        wait: Wait,
    ) -> Result<(Vec<Value>, Option<redis::ServerError>), Fault> {
        conn.send(request, self.io_deadline(wait))?;
        let alarm = conn.id().map(|id| timer::set(until, &self.transport, id));
        let blpop = conn.recv(self.io_deadline_after(until, wait));
        drop(alarm);
        let blpop = blpop?;
        let reply_deadline = self.io_deadline(wait);
        let mut replies = Vec::with_capacity(request.cmds.len());
        // A `BLPOP` refused (the signal key is not a list) still lets the try run. One turned
        // away by a cluster or a changing primary did not wait: the try says what to do.
        let refused = match blpop {
            Value::ServerError(e) if redirect::of(&e).is_none() => Some(e),
            _ => None,
        };
        for _ in 1..request.cmds.len() {
            replies.push(conn.recv(reply_deadline)?);
        }
        // The try's NOSCRIPT: the `BLPOP` is done, so the try alone goes again.
        if let Some((at, retry)) = request.noscript_retry(&replies, 1) {
            let retried = self.transport.call(&retry, reply_deadline)?;
            request.patch(&mut replies, at, retried);
        }
        Ok((replies, refused))
    }

    fn tried(
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
    fn settle_try(
        &self,
        conn: Option<ConnId>,
        error: redis::RedisError,
        wait: Wait,
    ) -> Result<Tried, Error> {
        log::warn!(
            "lock {:?}: reply to a try lost ({error}); settling",
            self.name()
        );
        match self.settle(conn, wait) {
            Ok((observed, sent)) if self.is_ours(observed.owner.as_deref()) => {
                Ok(Tried::Acquired {
                    valid_until: self.less_drift(lease::valid_from_read(sent, observed.pttl)),
                    token: observed.fence,
                    attempt: Attempting::new(sent, false),
                    acks: Ok(None),
                })
            }
            Ok((observed, _)) => Ok(Tried::Busy {
                owner: observed.owner,
                pttl: observed.pttl,
                at: Instant::now(),
            }),
            Err(settling) => {
                self.state.lock().belief = Belief::Unsure(Unsure {
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
    fn settle(&self, conn: Option<ConnId>, wait: Wait) -> Result<(Observed, Instant), Error> {
        self.reconnecting(wait, |deadline| {
            if let Some(conn) = conn {
                match self.transport.kill(conn, deadline) {
                    Ok(Admin::Refused) => log_kill_refused_once(),
                    Ok(Admin::Done | Admin::Nothing) => {}
                    Err(fault) => return Err(fault.into_error().into()),
                }
            }
            self.observe_by(deadline)
        })
    }

    /// Runs `step` with its round trip's deadline, again after a pause while it fails for
    /// want of a connection, until the wait's end. Backoff for a server that is away, never a
    /// way of waiting for the lock.
    fn reconnecting<T>(
        &self,
        wait: Wait,
        mut step: impl FnMut(Instant) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let give_up = match wait {
            Wait::Until(deadline) => deadline + self.settings.grace(),
            Wait::Never | Wait::Forever => Instant::now() + self.settings.io_timeout,
        };
        let mut pause = Duration::from_millis(10);
        loop {
            let deadline = (Instant::now() + self.settings.io_timeout).min(give_up);
            let error = match step(deadline) {
                Err(Error::Redis(e)) if e.is_io_error() || e.is_connection_refusal() => e,
                other => return other,
            };
            let left = give_up.saturating_duration_since(Instant::now());
            if left <= pause {
                return Err(error.into());
            }
            log::debug!(
                "lock {:?}: server away ({error}); trying again",
                self.name()
            );
            if self.settings.cancel.pause(pause) {
                return Err(self.error(|name| Error::Cancelled { name }));
            }
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Before a new acquisition: a handle that holds the lock may not take it again; one
    /// whose lock was lost may; one that is unsure asks Redis, and if the lock turns out to be
    /// ours it is acquired (its epoch is returned).
    fn before_acquire(self: &Arc<Self>, wait: Wait) -> Result<Option<u64>, Error> {
        let belief = self.state.lock().belief;
        match belief {
            Belief::Free => Ok(None),
            Belief::Held(lease) if !lease.is_lost(Instant::now()) => {
                Err(self.error(|name| Error::AlreadyAcquired { name }))
            }
            Belief::Held(_) => {
                self.forget();
                Ok(None)
            }
            Belief::Unsure(unsure) => {
                let (observed, sent) = self.settle(unsure.conn, wait)?;
                self.forget();
                if !self.is_ours(observed.owner.as_deref()) {
                    return Ok(None);
                }
                if self.cancelled() {
                    self.unlock_quietly();
                    return Err(self.error(|name| Error::Cancelled { name }));
                }
                let valid_until = self.less_drift(lease::valid_from_read(sent, observed.pttl));
                self.acquired(valid_until, observed.fence).map(Some)
            }
        }
    }

    /// Restarts the expiry of a lock just taken; `None` if it is not ours. Says until when it
    /// is valid, and how many replicas acknowledged it when that was asked.
    fn confirm(&self, wait: Wait, ms: u64) -> Result<Option<Confirmed>, Error> {
        let request =
            requests::extend(&self.keys, &self.settings.id, ms).replicated(self.settings.replicas);
        let mut answered = self.call_again(&request, self.io_deadline(wait))?;
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
            Some(expire) => match Renewal::start(self, expire * 2 / 3, Inner::renew) {
                Ok(renewal) => Some(renewal),
                Err(e) => {
                    // Without its renewal the lock would expire under the holder: give it back.
                    self.unlock_quietly();
                    return Err(Error::Thread(e));
                }
            },
            None => None,
        };
        let mut state = self.state.lock();
        state.epoch += 1;
        state.belief = Belief::Held(Lease::new(state.epoch, valid_until, token));
        state.renewal = renewal;
        log::debug!("lock {:?}: acquired", self.name());
        Ok(state.epoch)
    }

    /// Releases the lock: any acquisition (`epoch` `None`), or only acquisition `epoch`, as a
    /// guard does.
    pub(crate) fn release(&self, epoch: Option<u64>) -> Result<(), Error> {
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
        self.stop_renewal();
        let deadline = self.io_deadline(Wait::Never);
        let mut unsure_release = false;
        if let Belief::Unsure(unsure) = belief {
            unsure_release = unsure.releasing;
            if let Some(conn) = unsure.conn {
                if let Err(fault) = self.transport.kill(conn, deadline) {
                    return Err(self.unknown("release", fault.into_error()));
                }
            }
        }
        let request = requests::unlock(
            &self.keys,
            self.settings.id.as_bytes(),
            self.settings.signal_expire_ms,
        )
        .replicated(self.settings.replicas);
        match self.call_again(&request, deadline) {
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
                self.state.lock().belief = Belief::Unsure(Unsure {
                    conn: None,
                    releasing: true,
                });
                match e {
                    Error::Redis(source) => Err(self.unknown("release", source)),
                    other => Err(other),
                }
            }
        }
    }

    /// Gives back a lock no caller will hold; a failure is logged, and the lock frees itself
    /// at its expiry.
    fn unlock_quietly(&self) {
        let request = requests::unlock(
            &self.keys,
            self.settings.id.as_bytes(),
            self.settings.signal_expire_ms,
        );
        if let Err(e) = self.call_again(&request, self.io_deadline(Wait::Never)) {
            log::error!("lock {:?}: release failed: {e}", self.name());
        }
    }

    /// Sets a new expiry of `ms` if the lock is ours, and moves the known deadline with it.
    pub(crate) fn extend_ms(&self, ms: u64) -> Result<Extended, Error> {
        let request =
            requests::extend(&self.keys, &self.settings.id, ms).replicated(self.settings.replicas);
        let mut answered = self.call_again(&request, self.io_deadline(Wait::Never))?;
        let acks = request.acks(&mut answered.replies);
        let extended = requests::parse_extend(&self.keys, answered.first())?;
        if extended == Extended::Yes {
            // Not replicated, the longer expiry may not survive a failover: the lease keeps
            // the old one.
            self.replicated("extend", acks)?;
            if let Belief::Held(lease) = &mut self.state.lock().belief {
                // The drift of this expiry, which need not be the configured one.
                let expire = Duration::from_millis(ms);
                let granted = expire.saturating_sub(self.transport.drift(expire));
                lease.extended(answered.sent, granted);
            }
        }
        Ok(extended)
    }

    fn reset(&self) -> Result<bool, Error> {
        let deadline = self.io_deadline(Wait::Never);
        let (observed, _) = self.observe_by(deadline)?;
        let Some(owner) = observed.owner else {
            return Ok(false);
        };
        if self.is_ours(Some(&owner)) {
            self.forget();
        }
        let request = requests::unlock(&self.keys, &owner, self.settings.signal_expire_ms);
        let answered = self.call_again(&request, deadline)?;
        // Deleted now, or released by its owner in between: either way that owner's lock is
        // gone, and no later one was touched.
        requests::parse_unlock(&self.keys, answered.first())?;
        log::info!("lock {:?} reset", self.name());
        Ok(true)
    }

    /// One renewal, from the renewal thread: the wait before the next, or `None` to stop.
    fn renew(&self) -> Option<Duration> {
        let expire = self.settings.expire()?;
        let interval = expire * 2 / 3;
        match self.extend_ms(self.settings.expire_ms?) {
            Ok(Extended::Yes) => {
                log::debug!("lock {:?}: renewed", self.name());
                Some(interval)
            }
            Ok(Extended::NotOurs) => {
                self.mark_lost();
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
                self.mark_lost();
                log::error!(
                    "lock {:?}: lost (expired before a renewal got through: {e})",
                    self.name()
                );
                None
            }
            Err(e) => {
                // Try again soon: the lock is lost if the expiry passes first.
                log::warn!("lock {:?}: renewal failed, retrying: {e}", self.name());
                Some((interval / 8).max(Duration::from_millis(1)))
            }
        }
    }

    fn expired(&self) -> bool {
        matches!(self.state.lock().belief, Belief::Held(lease) if lease.is_lost(Instant::now()))
    }

    pub(crate) fn mark_lost(&self) {
        if let Belief::Held(lease) = &mut self.state.lock().belief {
            lease.mark_lost();
        }
    }

    /// Whether acquisition `epoch` is over or lost.
    pub(crate) fn lost_since(&self, epoch: u64) -> bool {
        match self.state.lock().belief {
            Belief::Held(lease) if lease.epoch == epoch => lease.is_lost(Instant::now()),
            _ => true,
        }
    }

    /// Forgets the acquisition and stops its renewal.
    fn forget(&self) {
        self.state.lock().belief = Belief::Free;
        self.stop_renewal();
    }

    fn stop_renewal(&self) {
        let renewal = self.state.lock().renewal.take();
        if let Some(renewal) = renewal {
            renewal.stop();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A held lock is left to expire, as python-redis-lock does; only renewing stops.
        if let Some(renewal) = self.state.get_mut().renewal.take() {
            renewal.stop();
        }
        // But an unsettled request may have taken the lock for nobody: settle it now, or a
        // lock without expiry would stay held for good.
        if let Belief::Unsure(unsure) = self.state.get_mut().belief {
            let deadline = Instant::now() + self.settings.io_timeout;
            if let Some(conn) = unsure.conn {
                let _ = self.transport.kill(conn, deadline);
            }
            self.unlock_quietly();
        }
    }
}
