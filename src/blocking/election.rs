//! The blocking [`Election`]: the election shell ([`crate::shell::election`]) on the blocking
//! runtime, and its watch as an iterator.

use std::time::{Duration, Instant};

use crate::Leader;

crate::shell::for_api!(election, blocking);

impl Watch {
    /// Blocks until the leader changes (at first: the leader now), and returns the leader from
    /// then on, `None` while nobody leads.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch()?;
    /// loop {
    ///     match watch.changed() {
    ///         Some(leader) => println!("{} leads (term {})", leader.info, leader.term),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn changed(&mut self) -> Option<Leader> {
        loop {
            if let Some(leader) = self.watching.watcher.wait(None) {
                return leader;
            }
        }
    }

    /// As [`changed`](Self::changed), for up to `timeout`: `None` when the leader did not
    /// change meanwhile.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
    /// let mut watch = election.watch()?;
    /// if let Some(now) = watch.changed_for(Duration::from_secs(1)) {
    ///     println!("leader: {:?}", now.map(|l| l.info));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn changed_for(&mut self, timeout: Duration) -> Option<Option<Leader>> {
        let until = Instant::now().checked_add(timeout);
        self.watching.watcher.wait(until)
    }
}

/// Each change of the leader, for ever: `Some(None)` while nobody leads.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
/// for leader in election.watch()? {
///     println!("leader: {:?}", leader.map(|l| l.info));
/// }
/// # Ok(())
/// # }
/// ```
impl Iterator for Watch {
    type Item = Option<Leader>;

    fn next(&mut self) -> Option<Option<Leader>> {
        Some(self.changed())
    }
}
