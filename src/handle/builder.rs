//! [`LockBuilder`]: the settings every handle is built with, checked once. Each handle's
//! `builder` and `build` are beside the handle, in its own file.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{transport_of, Backend};
use crate::config::id;
use crate::config::settings::{
    millis, Settings, DEFAULT_HEARTBEAT, DEFAULT_IO_TIMEOUT, DEFAULT_QUEUE_EXPIRE,
    DEFAULT_SIGNAL_EXPIRE,
};
use crate::observe::Label;
use crate::protocol::primitive::Primitive;
use crate::transport::Transport;
use crate::Lock;
use crate::{CancelToken, Error};

/// Builds a [`Lock`] with an expiry, auto-renewal, a chosen owner id, and so on.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let lock = redis_blpop_lock::Lock::builder(&client, "invoices")
///     .expire(Duration::from_secs(30))
///     .id("worker-7")
///     .build()?;
/// assert_eq!(lock.id(), "worker-7");
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct LockBuilder<K = Lock> {
    kind: std::marker::PhantomData<fn() -> K>,
    /// Where the lock lives; a backend that cannot be used fails the build.
    transport: Result<Arc<dyn Transport>, Error>,
    name: String,
    expire: Option<Duration>,
    auto_renewal: bool,
    max_hold: Option<Duration>,
    id: Option<String>,
    signal_expire: Duration,
    fencing: bool,
    io_timeout: Duration,
    cancel: Option<CancelToken>,
    replicas: Option<(u32, Duration)>,
    metrics_label: Option<Cow<'static, str>>,
    heartbeat: Duration,
    on_queue_engine: bool,
    /// A semaphore's permits.
    capacity: u64,
    refuse_evicting: bool,
    after_failover: Option<Duration>,
}

impl<K> LockBuilder<K> {
    pub(crate) fn new<B: Backend + ?Sized>(backend: &B, name: String) -> Self {
        LockBuilder::on_result(transport_of(backend), name)
    }

    /// A builder for a lock on `transport`, for the crate's own helpers that have one.
    pub(crate) fn on(transport: Arc<dyn Transport>, name: String) -> Self {
        LockBuilder::on_result(Ok(transport), name)
    }

    fn on_result(transport: Result<Arc<dyn Transport>, Error>, name: String) -> Self {
        LockBuilder {
            kind: std::marker::PhantomData,
            transport,
            name,
            expire: None,
            auto_renewal: false,
            max_hold: None,
            id: None,
            signal_expire: DEFAULT_SIGNAL_EXPIRE,
            fencing: false,
            io_timeout: DEFAULT_IO_TIMEOUT,
            cancel: None,
            replicas: None,
            metrics_label: None,
            heartbeat: DEFAULT_HEARTBEAT,
            on_queue_engine: false,
            capacity: 1,
            refuse_evicting: false,
            after_failover: None,
        }
    }

    /// Makes the lock expire this long after it is taken (or last extended), so a crashed
    /// holder cannot keep it forever. Rounded up to whole milliseconds; at least 1 ms.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn expire(mut self, expire: Duration) -> Self {
        self.expire = Some(expire);
        self
    }

    /// Keeps an expiring lock alive while it is held: a thread extends it whenever a third of
    /// the expiry is left (by what the handle knows of it: two thirds of the way through, and
    /// sooner after a long wait), until it is released or the handle is dropped. Needs
    /// [`expire`](Self::expire).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .expire(Duration::from_secs(30))
    ///     .auto_renewal(true) // extended every 20 s while held
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn auto_renewal(mut self, on: bool) -> Self {
        self.auto_renewal = on;
        self
    }

    /// Bounds how long one acquisition is kept alive: the renewal stops once the acquisition
    /// has been held for `max_hold`, counted from the grant, so a holder stuck in its work (a
    /// hung thread, a deadlock) cannot keep the lock for good while its renewal runs on. The
    /// renewal that would carry the lease past `max_hold` extends it only to that point and is
    /// the last, so the lock expires `max_hold` after the grant at the latest (give or take a
    /// network trip) and the next waiter takes it then. The holder is told as for any loss:
    /// [`lost()`](crate::Lock::lost) turns true and the guard's
    /// [`lost_token`](crate::handle::Hold::lost_token) is cancelled at that expiry. An explicit
    /// [`extend`](crate::Lock::extend) is the caller's own choice and is not bounded.
    ///
    /// Needs [`expire`](Self::expire), and is at least as long (a first lease longer than
    /// `max_hold` could not be kept within it); otherwise `build()` fails with
    /// [`Error::InvalidArgument`], as it does for zero. For every primitive: a lock, a fair
    /// lock, a semaphore's permits and a read-write lock's holds, in both APIs.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "nightly-report")
    ///     .expire(Duration::from_secs(30))
    ///     .auto_renewal(true)
    ///     .max_hold(Duration::from_secs(3600)) // a report never takes an hour
    ///     .build()?;
    /// let guard = lock.lock()?;
    /// let stop = guard.lost_token(); // cancelled at the latest an hour from now
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Uses this owner id instead of a random one. Handles with the same id are the same
    /// owner: either may extend or release the lock. Compared byte for byte; not empty.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job").id("host-a:worker-3").build()?;
    /// assert_eq!(lock.id(), "host-a:worker-3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long a release's wake-up signal waits for a waiter that is about to block
    /// (default 1000 ms, as in python-redis-lock).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .signal_expire(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn signal_expire(mut self, signal_expire: Duration) -> Self {
        self.signal_expire = signal_expire;
        self
    }

    /// Takes a fencing token with every acquisition: a number from `lock-fence:<name>`,
    /// greater than any token handed out before for this name. See
    /// [`Lock::fencing_token`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger").fencing(true).build()?;
    /// let guard = lock.lock()?;
    /// println!("token {:?}", guard.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// The deadline of every call that has none of its own (release, extend, reset, the
    /// owner queries, `try_acquire`, and each round trip of `acquire()`), default 5 s. A frozen
    /// or unreachable server costs a call at most this long, however many replies it waits
    /// for. A wait with a timeout ends by that timeout, plus at most the round trip under way
    /// (at most the smaller of this and 250 ms).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "job")
    ///     .io_timeout(Duration::from_millis(500))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Has `replicas` replicas acknowledge each acquisition, extension and release before
    /// the call returns: the same connection sends `WAIT replicas timeout` right after it.
    /// Off by default.
    ///
    /// Fewer acknowledgements within `timeout` is [`Error::NotReplicated`]; an acquisition
    /// that could not be confirmed is released before that error is returned. What it buys:
    /// a failover to a replica that acknowledged keeps the lock. What it does not: `WAIT` is
    /// not consensus, and a replica that did not acknowledge may still be promoted (the
    /// crate docs' Sentinel section says more).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger")
    ///     .expire(Duration::from_secs(30))
    ///     .replicas(1, Duration::from_millis(100))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// The value of the `lock` label on this handle's metrics (`metrics` feature); without
    /// it, the label is `"other"`, or what [`label_lock_names`](crate::observe::label_lock_names)
    /// maps the name to. Lock names are not labels by default, since they can be unbounded.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "report:2026-11-23")
    ///     .metrics_label("report")
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn metrics_label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.metrics_label = Some(label.into());
        self
    }

    /// How often a process with waiters of a queue primitive ([`Semaphore`](crate::Semaphore),
    /// [`RwLock`](crate::RwLock), a [fair](LockBuilder::fair) lock) tells the server they are
    /// still there: one heartbeat per process and primitive, for all its waiters there. A
    /// process that misses two (it crashed or was stopped) loses its waiters' places, each
    /// taken out of the queue by the next script that meets it, so it delays the others by
    /// at most that. Default 1 s (so 2 s at most). Other locks do not queue and ignore it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let backups = redis_blpop_lock::Semaphore::builder(&client, "backups", 2)
    ///     .heartbeat(Duration::from_millis(500))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn heartbeat(mut self, interval: Duration) -> Self {
        self.heartbeat = interval;
        self
    }

    /// Refuses to acquire on a server that can evict the lock's keys (a `maxmemory-policy`
    /// other than `noeviction`): an acquisition is then [`Error::Unsupported`], naming the
    /// server and its policy, and nothing is taken. Off by default: such a server is only
    /// warned about, once (see the crate docs' section on eviction). The policy is read from
    /// `INFO memory` once per server, before the handle's first acquisition; a server that
    /// does not say (its ACL refuses `INFO`) is not refused.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::builder(&client, "ledger")
    ///     .refuse_evicting(true)
    ///     .build()?;
    /// match lock.acquire() {
    ///     Err(redis_blpop_lock::Error::Unsupported(why)) => eprintln!("{why}"),
    ///     other => drop(other?),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn refuse_evicting(mut self, on: bool) -> Self {
        self.refuse_evicting = on;
        self
    }

    /// A queue primitive's builder: renewed leases by default, so a crashed holder's share
    /// comes back within the expiry.
    pub(crate) fn on_queue_engine(mut self) -> Self {
        self.on_queue_engine = true;
        if self.expire.is_none() {
            self.expire = Some(DEFAULT_QUEUE_EXPIRE);
            self.auto_renewal = true;
        }
        self
    }

    /// A lock's builder made fair (on the queue engine) or not: for either API's lock.
    pub(crate) fn fair_or_not(self, on: bool) -> Self {
        match on {
            true => self.on_queue_engine(),
            false => LockBuilder {
                on_queue_engine: false,
                ..self
            },
        }
    }

    /// Lets `token` cancel the waits of the handle built: for the handles whose builders
    /// offer it.
    pub(crate) fn cancelled_by(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    pub(crate) fn permits(mut self, permits: u32) -> Self {
        self.capacity = u64::from(permits);
        self
    }

    /// The checked settings of a `kind` primitive, where it lives, and its capacity.
    pub(crate) fn checked_for(
        self,
        kind: Primitive,
    ) -> Result<(Settings, Arc<dyn Transport>, u64), Error> {
        let capacity = kind.capacity(u32::try_from(self.capacity).unwrap_or(u32::MAX))?;
        let (settings, transport) = self.checked()?;
        Ok((settings, transport, capacity))
    }

    /// How long after its backend learned of a new primary (a Sentinel failover) an
    /// acquisition is not handed to its caller: taken on the new primary then, it waits
    /// until this has passed since the switch, renewed if it renews, and a wait that ends
    /// first ends without it, with nothing held. A holder of the old primary may still
    /// believe it holds for up to its own expiry after the switch (its last renewal there
    /// counted, and the replica promoted may never have seen it, nor even its grant): once
    /// that has passed, its [`lost()`](crate::Lock::lost) is true. Default: the handle's
    /// own [`expire`](Self::expire), which covers a holder with the same one; a holder with a
    /// longer expiry needs as long here. `Duration::ZERO` hands an acquisition over at once,
    /// as before; a handle without an expiry has no wait unless one is set here. See
    /// docs/faults.md, "A failover".
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # #[cfg(feature = "sentinel")]
    /// # {
    /// use std::time::Duration;
    ///
    /// let backend = redis_blpop_lock::Sentinel::new(["redis://10.0.0.1:26379"], "primary")?;
    /// let lock = redis_blpop_lock::Lock::builder(&backend, "ledger")
    ///     .expire(Duration::from_secs(10))
    ///     .auto_renewal(true)
    ///     // Other holders of "ledger" renew a 30 s lease.
    ///     .after_failover(Duration::from_secs(30))
    ///     .build()?;
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    pub fn after_failover(mut self, pause: Duration) -> Self {
        self.after_failover = Some(pause);
        self
    }

    /// The checked settings, and where the lock lives.
    pub(crate) fn checked(self) -> Result<(Settings, Arc<dyn Transport>), Error> {
        if self.name.is_empty() {
            return Err(Error::invalid("the lock name is empty"));
        }
        let expire_ms = self.expire.map(|d| millis("expire", d)).transpose()?;
        let signal_expire_ms = millis("signal_expire", self.signal_expire)?;
        if self.auto_renewal && expire_ms.is_none() {
            return Err(Error::invalid("auto_renewal needs an expire"));
        }
        if let Some(max_hold) = self.max_hold {
            millis("max_hold", max_hold)?;
            let Some(expire) = self.expire else {
                return Err(Error::invalid("max_hold needs an expire"));
            };
            if max_hold < expire {
                return Err(Error::invalid(format!(
                    "max_hold ({max_hold:?}) must be at least the expire ({expire:?})"
                )));
            }
        }
        let id = match self.id {
            Some(id) if id.is_empty() => return Err(Error::invalid("the owner id is empty")),
            Some(id) => id,
            None => id::random_id()?,
        };
        // Its half is how often a waiter asks again; under 1 ms there is none.
        if self.heartbeat < Duration::from_millis(1) {
            return Err(Error::invalid("heartbeat must be at least 1 ms"));
        }
        if self.io_timeout < Duration::from_millis(1) {
            return Err(Error::invalid("io_timeout must be at least 1 ms"));
        }
        let replicas = match self.replicas {
            Some((0, _)) => return Err(Error::invalid("replicas must be at least 1")),
            Some((n, timeout)) => Some((n, millis("the replicas' timeout", timeout)?)),
            None => None,
        };
        let settings = Settings {
            id,
            expire_ms,
            signal_expire_ms,
            auto_renewal: self.auto_renewal,
            max_hold: self.max_hold,
            fencing: self.fencing,
            io_timeout: self.io_timeout,
            cancel: self.cancel.unwrap_or_default(),
            replicas,
            label: Label::new(&self.name, self.metrics_label),
            name: self.name,
            heartbeat: self.heartbeat,
            on_queue_engine: self.on_queue_engine,
            refuse_evicting: self.refuse_evicting,
            after_failover: self.after_failover,
        };
        let transport = self.transport?;
        transport.check(&settings)?;
        Ok((settings, transport))
    }
}
