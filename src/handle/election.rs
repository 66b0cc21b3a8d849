//! The [`Election`]: campaigns over the queue engine's
//! [`Acquirer`](crate::driver::acquirer::Acquirer), one unit of capacity 1, whose holder
//! leads, on either API; and the [`Watch`] of its leader.

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::{ended, Blocking, Runtime};
use crate::driver::acquirer::Acquirer;
use crate::driver::election::Term;
use crate::driver::hub::Watching;
use crate::protocol::lease::Wait;
use crate::protocol::primitive::Primitive;
use crate::transport::send::now;
use crate::{Backend, CancelToken, Error, Leader, LockBuilder, Watched};

/// A leader election shared by every handle of the same name, on the fair queue engine:
/// candidates lead one at a time, in the order they campaigned, and each new leader's term is
/// larger than the last (a fencing token). See the crate docs' "Leader election" section. The
/// blocking handles ([`crate::Election`]) and the async ones ([`crate::aio::Election`]) of one
/// name are the same election.
///
/// The leader holds a lease (30 s by default, renewed while it leads): a leader that crashes
/// is succeeded at its expiry by the next candidate in line. Anyone can read the leader
/// ([`leader`](Self::leader)) or watch it change ([`watch`](Self::watch)) without
/// campaigning.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
/// let leadership = election.campaign("10.0.0.5:8080")?;
/// println!("leading in term {}", leadership.term());
/// // ... run the jobs while `!leadership.lost()` ...
/// leadership.resign()?;
/// # Ok(())
/// # }
/// ```
pub struct Election<R: Runtime = Blocking> {
    acquirer: Acquirer<R>,
}

/// A term of office: the election is this handle's until it resigns, drops this, or loses the
/// lease ([`lost`](Self::lost)). Dropped, it resigns (a failure is logged, and the lease ends
/// at its expiry).
#[must_use = "the leadership is given up as soon as it is dropped"]
pub struct Leadership<R: Runtime = Blocking> {
    term: Term<R>,
    info: String,
}

/// The changes of an election's leader, from [`Election::watch`]: each is what the watch
/// knows from then on, a [`Watched`]: the leader, nobody, or that it cannot tell while the
/// server does not answer.
pub struct Watch<R: Runtime = Blocking> {
    watching: Watching,
    api: PhantomData<R>,
}

impl Election {
    /// A handle on the election `name`, with the default settings. Refused on a
    /// [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// assert_eq!(election.name(), "scheduler");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for an election handle: the leader's lease (`expire`), heartbeat, I/O
    /// timeout, id, cancel token.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::Election::builder(&client, "scheduler")
    ///     .expire(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into()).on_queue_engine()
    }

    /// Waits in line until this handle leads, then publishes `info` (an address, a host name:
    /// anything the others should know of the leader).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("host-a")?;
    /// assert_eq!(leadership.info(), "host-a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn campaign(&self, info: &str) -> Result<Leadership, Error> {
        now(self.run_for(info, Wait::Forever))?.ok_or_else(ended)
    }

    /// Campaigns for up to `timeout` (zero: leads only if nobody does and nobody waits);
    /// `None` when another still leads then, and this handle has left the line.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// match election.try_campaign_for("host-a", Duration::from_secs(1))? {
    ///     Some(leadership) => println!("leading in term {}", leadership.term()),
    ///     None => println!("someone else leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_campaign_for(
        &self,
        info: &str,
        timeout: Duration,
    ) -> Result<Option<Leadership>, Error> {
        now(self.run_for(info, Wait::timeout(Instant::now(), timeout)))
    }

    /// The leader now, or `None` (one round trip). A leader is reported once it has announced
    /// itself, and until its lease ends.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// match election.leader()? {
    ///     Some(leader) => println!("{} leads since {:?}", leader.info, leader.since),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        now(self.acquirer.leader())
    }

    /// Watches the leader: the watch's first change is the leader now, then one for each
    /// change, as it happens. Nothing polls: a new leader, or one that resigns, tells the
    /// watching processes, and a leader that crashes with nobody in line is found when its
    /// lease ends. All the watches of a process share its one waiting connection and one read
    /// of the leader per change. A change that another follows within that read is reported
    /// as the later one.
    ///
    /// A watch never reports a leader it cannot vouch for: the process reads the leader again
    /// when the lease it read ends, or this handle's lease
    /// ([`expire`](crate::LockBuilder::expire)) after its last word from the server,
    /// whichever comes first. A read that fails (the server is away, or does not answer
    /// within the [`io_timeout`](crate::LockBuilder::io_timeout)), or silence past the read
    /// that was due plus the I/O timeout, is reported as [`Watched::Unknown`]: once, and
    /// within the lease plus the I/O timeout (and a grace of at most 250 ms) of the server's
    /// last word. A server killed is found at once, by the waiting connection that breaks.
    /// Once a read gets through again, the watch reports the leader, or nobody, even if that
    /// did not change.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// use redis_blpop_lock::Watched;
    ///
    /// let election = redis_blpop_lock::Election::builder(&client, "scheduler")
    ///     .expire(Duration::from_secs(10))
    ///     .io_timeout(Duration::from_secs(2))
    ///     .build()?;
    /// let mut watch = election.watch()?;
    /// loop {
    ///     match watch.changed() {
    ///         Watched::Leader(leader) => println!("send jobs to {}", leader.info),
    ///         Watched::Nobody => println!("nobody leads: hold the jobs"),
    ///         // At most 12 s (and a grace) after the server's last word.
    ///         Watched::Unknown { reason } => println!("no telling who leads: {reason}"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn watch(&self) -> Result<Watch, Error> {
        now(self.watching())
    }
}

/// The async API's election ([`crate::aio::Election`]): the same methods, as futures.
#[cfg(feature = "tokio")]
impl Election<super::Tokio> {
    /// A handle on the election `name`, with the default settings; see [`Election::new`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(backend: &(impl Backend + ?Sized), name: impl Into<String>) -> Result<Self, Error> {
        Self::builder(backend, name).build()
    }

    /// A builder for an async election handle; see [`Election::builder`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::aio::Election::builder(&client, "scheduler")
    ///     .expire(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<B: Backend + ?Sized>(backend: &B, name: impl Into<String>) -> LockBuilder<Self> {
        LockBuilder::new(backend, name.into()).on_queue_engine()
    }

    /// Waits in line until this handle leads, then publishes `info`; see
    /// [`Election::campaign`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("host-a").await?;
    /// assert_eq!(leadership.info(), "host-a");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self, info: &str) -> Result<Leadership<super::Tokio>, Error> {
        self.run_for(info, Wait::Forever).await?.ok_or_else(ended)
    }

    /// Campaigns for up to `timeout`; see [`Election::try_campaign_for`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// match election.try_campaign_for("host-a", Duration::from_secs(1)).await? {
    ///     Some(leadership) => println!("leading in term {}", leadership.term()),
    ///     None => println!("someone else leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_campaign_for(
        &self,
        info: &str,
        timeout: Duration,
    ) -> Result<Option<Leadership<super::Tokio>>, Error> {
        self.run_for(info, Wait::timeout(Instant::now(), timeout))
            .await
    }

    /// The leader now, or `None` (one round trip); see [`Election::leader`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// if let Some(leader) = election.leader().await? {
    ///     println!("{} leads", leader.info);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        self.acquirer.leader().await
    }

    /// Watches the leader; see [`Election::watch`] for what a watch reports, and when.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch().await?;
    /// println!("{:?}", watch.changed().await);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self) -> Result<Watch<super::Tokio>, Error> {
        self.watching().await
    }
}

impl<R: Runtime> Election<R> {
    /// The election's name (its keys are `election:{<name>}:*`, or `election:=<name>:*` for a
    /// name with a hash tag of its own).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// assert_eq!(election.name(), "scheduler");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.acquirer.settings.name
    }

    async fn run_for(&self, info: &str, wait: Wait) -> Result<Option<Leadership<R>>, Error> {
        let term = self.acquirer.campaign(info, wait).await?;
        Ok(term.map(|term| Leadership {
            term,
            info: info.to_owned(),
        }))
    }

    async fn watching(&self) -> Result<Watch<R>, Error> {
        let watching = self.acquirer.watch().await?;
        Ok(Watch {
            watching,
            api: PhantomData,
        })
    }
}

impl<R: Runtime> LockBuilder<Election<R>> {
    /// Lets `token` cancel this handle's campaigns: a campaign cancelled while it waits
    /// returns [`Error::Cancelled`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// let election = redis_blpop_lock::Election::builder(&client, "scheduler")
    ///     .cancel_token(token.clone())
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel_token(self, token: CancelToken) -> Self {
        self.cancelled_by(token)
    }

    /// Checks the settings and makes the handle. No connection is opened yet.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::builder(&client, "scheduler").build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Election<R>, Error> {
        let (settings, transport, capacity) = self.checked_for(Primitive::Election)?;
        Ok(Election {
            acquirer: Acquirer::new(Primitive::Election, settings, transport, capacity),
        })
    }
}

impl<R: Runtime> Leadership<R> {
    /// The term: larger for every new leader of the election, so a store that remembers the
    /// highest term it has seen can refuse a deposed leader's writes.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("")?;
    /// println!("term {}", leadership.term());
    /// # Ok(())
    /// # }
    /// ```
    pub fn term(&self) -> u64 {
        self.term.term
    }

    /// What this leader published.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("host-a")?;
    /// assert_eq!(leadership.info(), "host-a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn info(&self) -> &str {
        &self.info
    }

    /// This leadership's id, as [`Leader::id`] reports it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("")?;
    /// assert_eq!(election.leader()?.map(|l| l.id).as_deref(), Some(leadership.id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        self.term.held.id()
    }

    /// Whether the office may have slipped away: the lease expired without a renewal (a
    /// pause, a server away), or it was reset. Once true, it stays true: stop acting as
    /// leader. No round trip.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("")?;
    /// assert!(!leadership.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.term.held.lost()
    }

    /// A token cancelled once the office is lost, for work to stop by (the same
    /// [`CancelToken`] that cancels waits): a renewal found the term gone (an operator's
    /// reset), or the lease ran out (renewals failed, a pause, or
    /// [`max_hold`](crate::LockBuilder::max_hold) was reached). Never while this leader leads,
    /// nor by its resignation; cancelled already when taken after the loss. When and how, as
    /// for a lock: [`LockGuard::lost_token`](crate::handle::Hold::lost_token).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("")?;
    /// let stop = leadership.lost_token();
    /// assert!(!stop.is_cancelled());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_token(&self) -> CancelToken {
        self.term.held.lost_token()
    }
}

impl Leadership {
    /// Gives the office up now and reports how that went: the next candidate in line leads,
    /// or nobody, and the watchers hear of it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// election.campaign("")?.resign()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn resign(self) -> Result<(), Error> {
        now(self.term.resign())
    }
}

#[cfg(feature = "tokio")]
impl Leadership<super::Tokio> {
    /// Gives the office up now and reports how that went; see [`Leadership::resign`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// election.campaign("").await?.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(self) -> Result<(), Error> {
        self.term.resign().await
    }

    /// Resolves once the office is lost, as its [`lost_token`](Self::lost_token) is
    /// cancelled: for `select!`ing the leader's work against losing it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// # async fn schedule(_term: u64) {}
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// let leadership = election.campaign("host-a").await?;
    /// tokio::select! {
    ///     () = schedule(leadership.term()) => leadership.resign().await?,
    ///     () = leadership.when_lost() => eprintln!("lost the office: stopped scheduling"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.term.held.when_lost().await;
    }
}

impl Watch {
    /// Blocks until what the watch knows changes (at first: the leader now), and returns it
    /// from then on: [`Watched::Leader`], [`Watched::Nobody`], or [`Watched::Unknown`] once
    /// it can no longer tell (a read failed, or the server said nothing past the lease plus
    /// the I/O timeout), reported once, until the server answers again.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use redis_blpop_lock::Watched;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch()?;
    /// loop {
    ///     match watch.changed() {
    ///         Watched::Leader(leader) => println!("{} leads (term {})", leader.info, leader.term),
    ///         Watched::Nobody => println!("nobody leads"),
    ///         Watched::Unknown { reason } => println!("who leads is unknown: {reason}"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn changed(&mut self) -> Watched {
        loop {
            if let Some(change) = self.watching.watcher.wait(None) {
                return change;
            }
        }
    }

    /// As [`changed`](Self::changed), for up to `timeout`: `None` when nothing changed
    /// meanwhile.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch()?;
    /// if let Some(now) = watch.changed_for(Duration::from_secs(1)) {
    ///     println!("leader: {:?}", now.leader().map(|l| &l.info));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn changed_for(&mut self, timeout: Duration) -> Option<Watched> {
        let until = Instant::now().checked_add(timeout);
        self.watching.watcher.wait(until)
    }
}

/// Each change of what the watch knows, for ever (see [`Watch::changed`]).
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
/// for change in election.watch()? {
///     println!("leader: {:?}", change);
/// }
/// # Ok(())
/// # }
/// ```
impl Iterator for Watch {
    type Item = Watched;

    fn next(&mut self) -> Option<Watched> {
        Some(self.changed())
    }
}

#[cfg(feature = "tokio")]
impl Watch<super::Tokio> {
    /// Resolves when what the watch knows changes (at first: the leader now), with what it
    /// knows from then on: [`Watched::Leader`], [`Watched::Nobody`], or [`Watched::Unknown`]
    /// once it can no longer tell (a read failed, or the server said nothing past the lease
    /// plus the I/O timeout), reported once, until the server answers again. Safe to drop at
    /// its `.await`: no change is lost.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use redis_blpop_lock::Watched;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch().await?;
    /// loop {
    ///     match watch.changed().await {
    ///         Watched::Leader(leader) => println!("{} leads (term {})", leader.info, leader.term),
    ///         Watched::Nobody => println!("nobody leads"),
    ///         Watched::Unknown { reason } => println!("who leads is unknown: {reason}"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn changed(&mut self) -> Watched {
        let watcher = &self.watching.watcher;
        loop {
            // A change pushed after this look stores a permit the `notified` below takes.
            match watcher.take() {
                Ok(change) => return change,
                // Until what the watch knows is vouched for no more.
                Err(Some(stale_at)) => {
                    let stale_at = tokio::time::Instant::from_std(stale_at);
                    let _ = tokio::time::timeout_at(stale_at, watcher.notify.notified()).await;
                }
                Err(None) => watcher.notify.notified().await,
            }
        }
    }
}

impl<R: Runtime> fmt::Debug for Election<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Election", R::API))
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> fmt::Debug for Leadership<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Leadership", R::API))
            .field("term", &self.term())
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> fmt::Debug for Watch<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Watch", R::API))
            .finish_non_exhaustive()
    }
}
