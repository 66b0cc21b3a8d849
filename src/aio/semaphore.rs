//! The async [`Semaphore`]: the semaphore shell ([`crate::shell::semaphore`]) on tokio, and
//! what only futures offer: a permit's loss as a future.

crate::shell::for_api!(semaphore, aio);

impl SemaphorePermit<'_> {
    /// Resolves once the permit is lost, as its [`lost_token`](Self::lost_token) is cancelled
    /// (and as [`LockGuard::when_lost`](super::LockGuard::when_lost) does for a lock): for
    /// `select!`ing work against losing it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let semaphore = redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?;
    /// let permit = semaphore.acquire().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => permit.release().await?,
    ///     () = permit.when_lost() => println!("lost the permit: stopped exporting"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }
}

impl ArcSemaphorePermit {
    /// Resolves once the permit is lost; see [`SemaphorePermit::when_lost`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::sync::Arc;
    /// let semaphore = Arc::new(redis_blpop_lock::aio::Semaphore::new(&client, "exports", 4)?);
    /// let permit = semaphore.acquire_arc().await?;
    /// tokio::spawn(async move { permit.when_lost().await });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn when_lost(&self) {
        self.held.when_lost().await;
    }
}
