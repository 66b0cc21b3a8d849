//! The async [`RwLock`]: the read-write lock shell ([`crate::shell::rwlock`]) on tokio, and
//! what only futures offer: a hold's loss as a future.

crate::shell::for_api!(rwlock, aio);

impl RwLockReadGuard<'_> {
    /// Resolves once the read lock is lost, as its
    /// [`lost_token`](Self::lost_token) is cancelled: for `select!`ing work against losing it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let read = config.read().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => read.unlock().await?,
    ///     () = read.when_lost() => println!("lost the read lock: stopped reading"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }
}

impl RwLockWriteGuard<'_> {
    /// Resolves once the write lock is lost, as its
    /// [`lost_token`](Self::lost_token) is cancelled: for `select!`ing work against losing it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let config = redis_blpop_lock::aio::RwLock::new(&client, "config")?;
    /// let write = config.write().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => write.unlock().await?,
    ///     () = write.when_lost() => println!("lost the write lock: stopped writing"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }
}
