//! The blocking [`Election`]: the election shell ([`crate::shell::election`]) on the blocking
//! runtime, and its watch as an iterator.

use std::time::{Duration, Instant};

use crate::Watched;

crate::shell::for_api!(election, blocking);

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
