//! The async [`Election`]: the election shell ([`crate::shell::election`]) on tokio, and its
//! watch's `changed().await`.

use crate::Watched;

crate::shell::for_api!(election, aio);

impl Leadership {
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
                    let stale_at = ::tokio::time::Instant::from_std(stale_at);
                    let _ = ::tokio::time::timeout_at(stale_at, watcher.notify.notified()).await;
                }
                Err(None) => watcher.notify.notified().await,
            }
        }
    }
}
