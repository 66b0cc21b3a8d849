//! The async [`Election`]: the election shell ([`crate::shell::election`]) on tokio, and its
//! watch's `changed().await`.

use crate::Leader;

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
    /// Resolves when the leader changes (at first: the leader now), with the leader from then
    /// on, `None` while nobody leads. Safe to drop at its `.await`: no change is lost.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::aio::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch().await?;
    /// loop {
    ///     match watch.changed().await {
    ///         Some(leader) => println!("{} leads (term {})", leader.info, leader.term),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn changed(&mut self) -> Option<Leader> {
        let watcher = &self.watching.watcher;
        loop {
            // A change pushed after this look stores a permit the `notified` below takes.
            if let Some(leader) = watcher.take() {
                return leader;
            }
            watcher.notify.notified().await;
        }
    }
}
