//! The lock handle: the acquire, release, extend and reset paths.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Cmd, Connection, RedisResult, Value};

use crate::builder::{millis, LockBuilder};
use crate::guard::LockGuard;
use crate::pool::{Pool, PooledConnection};
use crate::renew::Renewal;
use crate::scripts::{self, ACQUIRE, EXTEND, RESET, UNLOCK};
use crate::Error;

/// The longest single `BLPOP`. A waiter that missed its wake-up signal (it was paused for longer
/// than `signal_expire`, or its connection dropped just as the signal came) tries the lock again
/// after at most this long, even when the holder has no expiry and the caller no timeout.
pub(crate) const MAX_BLOCK: Duration = Duration::from_secs(5);
/// How long a waiter whose connection dropped keeps trying to reconnect when it has no
/// timeout of its own.
const RECONNECT_WINDOW: Duration = Duration::from_secs(10);

/// A distributed lock on one Redis key, `lock:<name>`.
///
/// Acquiring blocks in `BLPOP lock-signal:<name>` instead of polling; a release wakes exactly
/// one waiter. Each handle has an owner id (random unless given); Redis holds the id of the
/// handle that owns the lock. A handle is `Send + Sync` and may be shared between threads, but
/// the lock is not reentrant: acquiring it again under the same id is an error.
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_lock::Lock::builder(&client, "nightly-report")
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
    inner: Arc<Inner>,
}

/// A lock's checked settings, from [`LockBuilder::build`].
pub(crate) struct Settings {
    pub(crate) name: String,
    pub(crate) id: String,
    pub(crate) expire_ms: Option<u64>,
    pub(crate) signal_expire_ms: u64,
    pub(crate) auto_renewal: bool,
    pub(crate) fencing: bool,
}

pub(crate) struct Inner {
    settings: Settings,
    key: String,
    signal_key: String,
    fence_key: String,
    pool: Arc<Pool>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    holding: Option<Holding>,
    renewal: Option<Renewal>,
}

/// What this handle knows about the lock it acquired, without asking Redis.
#[derive(Clone, Copy)]
struct Holding {
    /// When the key expires at the earliest, as far as this process can tell.
    valid_until: Option<Instant>,
    token: Option<u64>,
    lost: bool,
}

impl Holding {
    fn is_lost(&self, now: Instant) -> bool {
        self.lost || self.valid_until.is_some_and(|t| now >= t)
    }
}

/// One try at the lock, as Redis reports it.
enum Attempt {
    Acquired {
        token: Option<u64>,
    },
    /// `owner` is empty when the lock came free during the try.
    Busy {
        owner: Vec<u8>,
        pttl_ms: i64,
    },
}

/// How a call to `extend.lua` came out.
pub(crate) enum Extended {
    Yes,
    NotOurs,
    NoExpiry,
}

impl Lock {
    /// A handle on the lock `name`, with no expiry and a random owner id.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "cron:cleanup")?;
    /// if lock.try_acquire()? {
    ///     // ... only one process in the fleet gets here at a time ...
    ///     lock.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(client: &redis::Client, name: impl Into<String>) -> Result<Lock, Error> {
        Lock::builder(client, name).build()
    }

    /// A builder for a handle on the lock `name`; see [`LockBuilder`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::builder(&client, "cron:cleanup")
    ///     .expire(std::time::Duration::from_secs(10))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(client: &redis::Client, name: impl Into<String>) -> LockBuilder<'_> {
        LockBuilder::new(client, name.into())
    }

    /// A handle from settings the builder has checked.
    pub(crate) fn from_settings(settings: Settings, pool: Arc<Pool>) -> Lock {
        let inner = Inner {
            key: format!("lock:{}", settings.name),
            signal_key: format!("lock-signal:{}", settings.name),
            fence_key: format!("lock-fence:{}", settings.name),
            settings,
            pool,
            state: Mutex::new(State::default()),
        };
        Lock {
            inner: Arc::new(inner),
        }
    }

    /// The lock's name (the key is `lock:<name>`).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
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
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// assert_eq!(lock.id().len(), 24);
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Blocks until the lock is ours. Waiting happens in `BLPOP`, woken by a release and
    /// bounded by the holder's remaining expiry, so a crashed holder's lock is taken within
    /// milliseconds of its expiry.
    ///
    /// Fails with [`Error::AlreadyAcquired`] if this owner id already holds the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// lock.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self) -> Result<(), Error> {
        self.inner.acquire(None).map(|_| ())
    }

    /// Takes the lock if it is free, never blocking. `Ok(false)` when someone else holds it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// if !lock.try_acquire()? {
    ///     println!("busy, held by {:?}", lock.owner_id()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self) -> Result<bool, Error> {
        self.inner.acquire(Some(Instant::now()))
    }

    /// Waits up to `timeout` for the lock; `Ok(false)` if it did not come free in time. A zero
    /// timeout is a single try; any size is allowed, including longer than the expiry.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// if lock.acquire_timeout(std::time::Duration::from_secs(5))? {
    ///     lock.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        self.inner.acquire(Instant::now().checked_add(timeout))
    }

    /// Blocks until the lock is ours and returns a guard that releases it on drop.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// {
    ///     let _guard = lock.lock()?;
    ///     // ... critical section ...
    /// } // released here
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<LockGuard<'_>, Error> {
        self.acquire()?;
        Ok(LockGuard::new(self))
    }

    /// The guard if the lock is free now, `None` if someone else holds it; never blocks.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// match lock.try_lock()? {
    ///     Some(_guard) => println!("got it"),
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self) -> Result<Option<LockGuard<'_>>, Error> {
        Ok(self.try_acquire()?.then(|| LockGuard::new(self)))
    }

    /// The guard if the lock comes free within `timeout`, else `None`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// if let Some(_guard) = lock.try_lock_for(std::time::Duration::from_millis(500))? {
    ///     // ... critical section ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_>>, Error> {
        Ok(self.acquire_timeout(timeout)?.then(|| LockGuard::new(self)))
    }

    /// Releases the lock and wakes one waiter. Fails with [`Error::NotAcquired`], changing
    /// nothing, when the lock is not held under this handle's id.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// assert!(matches!(lock.release(), Err(redis_lock::Error::NotAcquired { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self) -> Result<(), Error> {
        self.inner.release()
    }

    /// Gives the lock a new expiry: `expire`, or the handle's configured one when `None`.
    ///
    /// Fails with [`Error::NotAcquired`] when the lock is not held under this id,
    /// [`Error::NotExpirable`] when it was taken without an expiry, and
    /// [`Error::InvalidArgument`] when neither `expire` nor a configured expiry is there.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_lock::Lock::builder(&client, "jobs")
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

    /// Deletes the lock whoever holds it and wakes one waiter: an operator's tool for a lock
    /// left by a holder that will never release it. Returns whether there was a lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "stuck-job")?;
    /// if lock.reset()? {
    ///     println!("freed a stuck lock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn reset(&self) -> Result<bool, Error> {
        self.inner.stop_holding();
        let inner = &self.inner;
        let deleted: i64 = inner.pool.run(|c| {
            RESET.run(c, |cmd| {
                cmd.arg(2)
                    .arg(&inner.key)
                    .arg(&inner.signal_key)
                    .arg(inner.settings.signal_expire_ms);
            })
        })?;
        log::info!("lock {:?} reset", inner.settings.name);
        Ok(deleted > 0)
    }

    /// Whether anyone holds the lock (one round trip).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// println!("held: {}", lock.locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn locked(&self) -> Result<bool, Error> {
        let key = &self.inner.key;
        Ok(self
            .inner
            .pool
            .run(|c| redis::cmd("EXISTS").arg(key).query(c))?)
    }

    /// The id of the lock's current owner, or `None` when it is free (one round trip). An id
    /// that is not UTF-8 (written by another client) is converted lossily.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::new(&client, "jobs")?;
    /// lock.acquire()?;
    /// assert_eq!(lock.owner_id()?.as_deref(), Some(lock.id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner_id(&self) -> Result<Option<String>, Error> {
        let key = &self.inner.key;
        let owner: Option<Vec<u8>> = self
            .inner
            .pool
            .run(|c| redis::cmd("GET").arg(key).query(c))?;
        Ok(owner.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Whether the lock this handle acquired has been lost: its renewal was refused, or its
    /// expiry passed without a renewal. No round trip: this is what the handle knows. Once
    /// true it stays true (someone else may have held the lock meanwhile) until the handle
    /// releases or acquires again; `false` when the handle does not hold the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::builder(&client, "jobs")
    ///     .expire(std::time::Duration::from_secs(5))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// for step in 0..100 {
    ///     if lock.lost() {
    ///         break; // someone else may hold it now: stop writing
    ///     }
    ///     // ... step ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        let state = self.inner.state.lock();
        state.holding.is_some_and(|h| h.is_lost(Instant::now()))
    }

    /// The fencing token of the current acquisition, when the lock was built with
    /// [`fencing(true)`](LockBuilder::fencing) and is held.
    ///
    /// Tokens grow with every acquisition of the name, so a storage system that remembers the
    /// highest token it has seen can refuse a write from a holder that lost the lock (paused
    /// past its expiry) after someone else took it:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # fn main() -> Result<(), redis_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_lock::Lock::builder(&client, "ledger")
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
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.state.lock().holding.and_then(|h| h.token)
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
    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    pub(crate) fn expire_ms(&self) -> Option<u64> {
        self.settings.expire_ms
    }

    fn error(&self, make: impl FnOnce(String) -> Error) -> Error {
        make(self.settings.name.clone())
    }

    /// The acquire path: one try, then `BLPOP` + try in a single round trip until the lock is
    /// ours or `deadline` passes (`None`: wait forever).
    fn acquire(self: &Arc<Self>, deadline: Option<Instant>) -> Result<bool, Error> {
        self.forget_lost_holding()?;
        log::debug!("lock {:?}: acquiring", self.settings.name);
        let mut conn = self.pool.get()?;
        // When the request whose try took the lock was sent: the key was set no earlier, so
        // its expiry is counted from here, never from the reply.
        let mut sent = Instant::now();
        let mut attempt = conn.run(|c| self.try_lock(c, None));
        let mut woken = false;
        let mut reply_lost = false;
        loop {
            let outcome = match attempt {
                Ok(outcome) => outcome?,
                Err(e) if conn.is_broken() => {
                    log::warn!(
                        "lock {:?}: connection lost while waiting: {e}",
                        self.settings.name
                    );
                    drop(conn);
                    conn = self.reconnect(deadline)?;
                    reply_lost = true;
                    woken = false;
                    sent = Instant::now();
                    attempt = conn.run(|c| self.try_lock(c, None));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match outcome {
                Attempt::Acquired { token } => {
                    let mut valid_until = self.expiry_from(sent);
                    if woken && self.expires_soon(valid_until) {
                        // After a long wait the count from the send is near its end, though
                        // the key was most likely set just now (or long ago, if the reply was
                        // held up): one extend says which.
                        let confirmed = Instant::now();
                        if !self.still_ours(&mut conn)? {
                            woken = false;
                            sent = Instant::now();
                            attempt = conn.run(|c| self.try_lock(c, None));
                            continue;
                        }
                        valid_until = self.expiry_from(confirmed);
                    }
                    drop(conn);
                    self.acquired(valid_until, token)?;
                    return Ok(true);
                }
                Attempt::Busy { owner, pttl_ms } if owner == self.settings.id.as_bytes() => {
                    if !reply_lost {
                        return Err(self.error(|name| Error::AlreadyAcquired { name }));
                    }
                    // Our own try got through before the connection dropped; only its reply
                    // was lost. What is left of the lock is its TTL, counted from this try.
                    let token = self.current_token(&mut conn)?;
                    drop(conn);
                    let valid_until = u64::try_from(pttl_ms)
                        .ok()
                        .and_then(|ms| sent.checked_add(Duration::from_millis(ms)));
                    self.acquired(valid_until, token)?;
                    return Ok(true);
                }
                Attempt::Busy { pttl_ms, .. } => {
                    reply_lost = false;
                    let Some(block) = self.next_block(deadline, pttl_ms) else {
                        log::debug!("lock {:?}: not acquired in time", self.settings.name);
                        return Ok(false);
                    };
                    woken = true;
                    sent = Instant::now();
                    attempt = conn.run(|c| self.try_lock(c, Some(block)));
                }
            }
        }
    }

    /// When a key set at `set_at` with this handle's expiry expires, if it has one.
    fn expiry_from(&self, set_at: Instant) -> Option<Instant> {
        self.settings
            .expire_ms
            .and_then(|ms| set_at.checked_add(Duration::from_millis(ms)))
    }

    /// Whether less than half the expiry is left before `valid_until`.
    fn expires_soon(&self, valid_until: Option<Instant>) -> bool {
        match (valid_until, self.settings.expire_ms) {
            (Some(until), Some(ms)) => {
                until.saturating_duration_since(Instant::now()) < Duration::from_millis(ms) / 2
            }
            _ => false,
        }
    }

    /// Restarts the expiry of a lock just taken; `false` if it is not ours any more.
    fn still_ours(&self, conn: &mut PooledConnection<'_>) -> Result<bool, Error> {
        let ms = self.settings.expire_ms.unwrap_or(0);
        let code: i64 = conn.run(|c| EXTEND.run(c, |cmd| self.extend_args(cmd, ms)))?;
        Ok(code != 1)
    }

    /// How long to block before the next try: never past the caller's deadline, the holder's
    /// expiry or [`MAX_BLOCK`]. `None` when the deadline has passed.
    fn next_block(&self, deadline: Option<Instant>, pttl_ms: i64) -> Option<Duration> {
        let mut block = MAX_BLOCK;
        if let Some(deadline) = deadline {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return None;
            }
            block = block.min(remaining);
        }
        if let Ok(pttl) = u64::try_from(pttl_ms) {
            // One millisecond past the expiry, so the next try finds the key gone.
            block = block.min(Duration::from_millis(pttl.saturating_add(1)));
        }
        Some(block)
    }

    fn acquire_args(&self, cmd: &mut Cmd) {
        cmd.arg(2)
            .arg(&self.key)
            .arg(&self.fence_key)
            .arg(&self.settings.id)
            .arg(self.settings.expire_ms.unwrap_or(0))
            .arg(if self.settings.fencing { "1" } else { "0" });
    }

    /// One try at the lock, after a `BLPOP` of `block` when given. In one pipeline, Redis runs
    /// the try the moment the `BLPOP` returns, so a woken waiter has the lock one network trip
    /// after the release.
    fn try_lock(
        &self,
        conn: &mut Connection,
        block: Option<Duration>,
    ) -> RedisResult<Result<Attempt, Error>> {
        let mut pipe = redis::pipe();
        if let Some(block) = block {
            let ms = block.as_millis().max(1);
            let timeout = format!("{}.{:03}", ms / 1000, ms % 1000);
            pipe.cmd("BLPOP")
                .arg(&self.signal_key)
                .arg(timeout)
                .ignore();
        }
        if self.settings.fencing {
            // The token must be taken atomically with the lock.
            pipe.add_command(ACQUIRE.evalsha(|cmd| self.acquire_args(cmd)));
        } else {
            // Three plain commands cost the server a third of what a script does. They are not
            // atomic, but need not be: if the owner lets go between them, GET finds no owner
            // and the next try follows at once.
            let set = pipe
                .cmd("SET")
                .arg(&self.key)
                .arg(&self.settings.id)
                .arg("NX");
            if let Some(ms) = self.settings.expire_ms {
                set.arg("PX").arg(ms);
            }
            pipe.cmd("GET").arg(&self.key).cmd("PTTL").arg(&self.key);
        }
        let reply: Vec<Value> = match pipe.query(conn) {
            Ok(reply) => reply,
            // Only the EVALSHA can say NOSCRIPT, so any BLPOP is done: just try again.
            Err(e) if scripts::is_noscript(&e) => {
                vec![ACQUIRE.run(conn, |cmd| self.acquire_args(cmd))?]
            }
            Err(e) => return Err(e),
        };
        Ok(self.parse_attempt(&reply))
    }

    fn parse_attempt(&self, reply: &[Value]) -> Result<Attempt, Error> {
        match reply {
            [Value::Okay, _, _] => Ok(Attempt::Acquired { token: None }),
            [Value::Nil, Value::BulkString(owner), Value::Int(pttl_ms)] => Ok(Attempt::Busy {
                owner: owner.clone(),
                pttl_ms: *pttl_ms,
            }),
            [Value::Nil, Value::Nil, _] => Ok(Attempt::Busy {
                owner: Vec::new(),
                pttl_ms: 0,
            }),
            [Value::Array(script)] => match script.as_slice() {
                [Value::Int(1), Value::Int(token)] => Ok(Attempt::Acquired {
                    token: u64::try_from(*token).ok(),
                }),
                [Value::Int(0), Value::BulkString(owner), Value::Int(pttl_ms)] => {
                    Ok(Attempt::Busy {
                        owner: owner.clone(),
                        pttl_ms: *pttl_ms,
                    })
                }
                _ => Err(Error::unexpected(&script)),
            },
            _ => Err(Error::unexpected(&reply)),
        }
    }

    fn current_token(&self, conn: &mut PooledConnection<'_>) -> Result<Option<u64>, Error> {
        if !self.settings.fencing {
            return Ok(None);
        }
        let token: Option<u64> = conn.run(|c| redis::cmd("GET").arg(&self.fence_key).query(c))?;
        Ok(token)
    }

    /// A new connection after one dropped mid-wait, trying until the caller's deadline (or for
    /// [`RECONNECT_WINDOW`] when there is none); the last error if the server stays away.
    fn reconnect(&self, deadline: Option<Instant>) -> Result<PooledConnection<'_>, Error> {
        let give_up = deadline.unwrap_or_else(|| Instant::now() + RECONNECT_WINDOW);
        let mut pause = Duration::from_millis(10);
        loop {
            let error = match self.pool.get() {
                Ok(conn) => return Ok(conn),
                Err(e) => e,
            };
            let remaining = give_up.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                log::error!(
                    "lock {:?}: could not reconnect: {error}",
                    self.settings.name
                );
                return Err(error.into());
            }
            // Backoff between connection attempts while the server is away; waiting for the
            // lock itself is never done this way.
            thread::sleep(pause.min(remaining));
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// A handle that thinks it holds a lock that has since been lost may try again; one that
    /// still holds it may not.
    fn forget_lost_holding(&self) -> Result<(), Error> {
        let mut state = self.state.lock();
        match state.holding {
            Some(h) if !h.is_lost(Instant::now()) => {
                Err(self.error(|name| Error::AlreadyAcquired { name }))
            }
            Some(_) => {
                state.holding = None;
                let renewal = state.renewal.take();
                drop(state);
                if let Some(renewal) = renewal {
                    renewal.stop();
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn acquired(
        self: &Arc<Self>,
        valid_until: Option<Instant>,
        token: Option<u64>,
    ) -> Result<(), Error> {
        let renewal = match self
            .settings
            .expire_ms
            .filter(|_| self.settings.auto_renewal)
        {
            Some(ms) => match Renewal::start(self, Duration::from_millis(ms)) {
                Ok(renewal) => Some(renewal),
                Err(e) => {
                    // Without its renewal the lock would expire under the holder: give it back.
                    if let Err(release) = self.unlock() {
                        log::error!("lock {:?}: release failed: {release}", self.settings.name);
                    }
                    return Err(Error::Thread(e));
                }
            },
            None => None,
        };
        let mut state = self.state.lock();
        state.holding = Some(Holding {
            valid_until,
            token,
            lost: false,
        });
        state.renewal = renewal;
        log::debug!("lock {:?}: acquired", self.settings.name);
        Ok(())
    }

    fn release(&self) -> Result<(), Error> {
        log::debug!("lock {:?}: releasing", self.settings.name);
        self.stop_renewal();
        let result = self.unlock();
        if result.is_ok() || matches!(result, Err(Error::NotAcquired { .. })) {
            self.state.lock().holding = None;
        }
        result
    }

    fn unlock(&self) -> Result<(), Error> {
        let code: i64 = self.pool.run(|c| {
            UNLOCK.run(c, |cmd| {
                cmd.arg(2)
                    .arg(&self.key)
                    .arg(&self.signal_key)
                    .arg(&self.settings.id)
                    .arg(self.settings.signal_expire_ms);
            })
        })?;
        match code {
            0 => Ok(()),
            1 => Err(self.error(|name| Error::NotAcquired { name })),
            other => Err(Error::unexpected(&other)),
        }
    }

    /// Sets a new expiry of `ms` if the lock is ours, and moves the known deadline with it.
    pub(crate) fn extend_ms(&self, ms: u64) -> Result<Extended, Error> {
        let sent = Instant::now();
        let code: i64 = self
            .pool
            .run(|c| EXTEND.run(c, |cmd| self.extend_args(cmd, ms)))?;
        match code {
            0 => {
                if let Some(holding) = self.state.lock().holding.as_mut() {
                    // Once lost, always lost: after the deadline passed someone else may have
                    // held the lock, even if the key is ours again now.
                    if holding.is_lost(sent) {
                        holding.lost = true;
                    } else {
                        holding.valid_until = sent.checked_add(Duration::from_millis(ms));
                    }
                }
                Ok(Extended::Yes)
            }
            1 => Ok(Extended::NotOurs),
            2 => Ok(Extended::NoExpiry),
            other => Err(Error::unexpected(&other)),
        }
    }

    fn extend_args(&self, cmd: &mut Cmd, ms: u64) {
        cmd.arg(1).arg(&self.key).arg(&self.settings.id).arg(ms);
    }

    /// Whether the known deadline of the lock this handle holds has passed.
    pub(crate) fn expired(&self) -> bool {
        let state = self.state.lock();
        state.holding.is_some_and(|h| h.is_lost(Instant::now()))
    }

    pub(crate) fn mark_lost(&self) {
        if let Some(holding) = self.state.lock().holding.as_mut() {
            holding.lost = true;
        }
    }

    /// Forgets the holding and stops its renewal (a reset took the lock away).
    fn stop_holding(&self) {
        self.state.lock().holding = None;
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
        // The lock itself is left to expire, as python-redis-lock does; only renewing stops.
        if let Some(renewal) = self.state.get_mut().renewal.take() {
            renewal.stop();
        }
    }
}
