//! The blocking lock handle, and how the driver's shared path runs on a blocking transport:
//! each wait blocks in `BLPOP` + try on a connection of its own, ended on time by the timer
//! thread or a [`CancelToken`](crate::CancelToken).

use std::future::{ready, Future};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::driver::{self, now, Exchange, Inner, Io, Renewing, Tried};
use crate::protocol::lease::Wait;
use crate::protocol::requests::{self, Request};
use crate::renew::Renewal;
use crate::settings::Settings;
use crate::timer;
use crate::transport::{Admin, ConnId, Fault, Transport, Waiter};
use crate::{CancelToken, Error};

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
    pub(crate) inner: Arc<Inner<dyn Transport>>,
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

impl Lock {
    pub(crate) fn from_settings(settings: Settings, transport: Arc<dyn Transport>) -> Lock {
        Lock {
            inner: Arc::new(Inner::new(settings, transport)),
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
        now(self
            .inner
            .acquire(Wait::Forever, &self.inner.settings.cancel))
        .map(|_| ())
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
        Ok(self.take(Wait::Never)?.is_some())
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
        Ok(self.take(Wait::timeout(Instant::now(), timeout))?.is_some())
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
        now(self.inner.release(None))
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
        now(self.inner.extend(expire))
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
        now(self.inner.reset())
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
        now(self.inner.holder())
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
        Ok(self.holder()?.is_some())
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
        self.inner.lost()
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
        self.inner.fencing_token()
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

impl Exchange for dyn Transport {
    fn exchange(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Value>, Fault>> + Send {
        ready(self.call(request, deadline))
    }
}

impl Io for dyn Transport {
    type Waiting<'a> = Box<dyn Waiter + 'a>;

    fn place(&self) -> &dyn Transport {
        self
    }

    fn close(
        &self,
        conn: ConnId,
        deadline: Instant,
    ) -> impl Future<Output = Result<Admin, Fault>> + Send {
        ready(self.kill(conn, deadline))
    }

    fn pause(&self, pause: Duration, cancel: &CancelToken) -> impl Future<Output = bool> + Send {
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

    fn keep_for_holder(waiting: Self::Waiting<'_>) {
        waiting.keep_for_holder();
    }

    fn renewal(inner: &Arc<Inner<Self>>, first: Duration) -> Result<Box<dyn Renewing>, Error> {
        let renewal = Renewal::start(inner, first, |inner| now(inner.renew()));
        Ok(Box::new(renewal.map_err(Error::Thread)?))
    }

    fn settle_dropped(
        transport: &Arc<Self>,
        conn: Option<ConnId>,
        unlock: Request,
        deadline: Instant,
    ) {
        if let Some(conn) = conn {
            let _ = transport.kill(conn, deadline);
        }
        if let Err(e) = now(driver::send_repeatable(&**transport, &unlock, deadline)) {
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
    inner: &'t Inner<dyn Transport>,
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
    let request = requests::wait_then_try(
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
        Some(id) => match cancel.blocking(&inner.transport, id) {
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
    now(inner.after_wait(&request, sent, replies, wait, cancel))
}

/// A connection for the waits, again after a pause while the server is away.
fn waiter_conn<'t>(
    inner: &'t Inner<dyn Transport>,
    wait: Wait,
    cancel: &CancelToken,
) -> Result<Box<dyn Waiter + 't>, Error> {
    let give_up = inner.give_up(wait);
    let mut pause = driver::FIRST_PAUSE;
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
    inner: &Inner<dyn Transport>,
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
