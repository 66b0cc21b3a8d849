//! [`Hold`]: what every guard and permit stands for, one acquisition's lease, and what it
//! knows of it. The guards deref to it, so `lost()`, `lost_token()`, `fencing_token()` and
//! (async) `when_lost()` are written once, here, for all of them.

use std::fmt;

use super::{Blocking, Runtime};
use crate::driver::acquirer::Acquisition;
use crate::CancelToken;

/// One acquisition held: a lock's, a permit's, a read or write lock's. Every guard and permit
/// derefs to its hold, so these methods are theirs:
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// let exports = redis_blpop_lock::Semaphore::new(&client, "exports", 4)?;
/// let permit = exports.acquire()?;
/// assert!(!permit.lost());
/// println!("fencing token {:?}", permit.fencing_token());
/// # Ok(())
/// # }
/// ```
pub struct Hold<R: Runtime = Blocking> {
    pub(crate) acquisition: Acquisition<R>,
}

impl<R: Runtime> Hold<R> {
    pub(crate) fn new(acquisition: Acquisition<R>) -> Self {
        Hold { acquisition }
    }

    /// Whether this acquisition may have slipped away: its lease expired without a renewal
    /// getting through (a pause, a server away), or a renewal or an `extend` found another
    /// owner in the key (it was reset, or taken after it expired). Once true, it stays true.
    /// No round trip: it is what this process knows.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// assert!(!guard.lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> bool {
        self.acquisition.lost()
    }

    /// A token cancelled when this acquisition is lost: for work to check
    /// ([`CancelToken::is_cancelled`]), or in async code to `select!` on
    /// (`CancelToken::cancelled`, feature `tokio`). Taking it costs no round trip.
    ///
    /// It is cancelled when the loss becomes knowable, within one renewal interval (two
    /// thirds of the expiry) at most:
    /// - a renewal, or an `extend`, finds another owner in the key, or none (someone reset
    ///   the lock, or took it after it expired): at that renewal;
    /// - the lease runs out: renewals failed until then (the server is away), the lock does
    ///   not renew, or the hold reached [`max_hold`](crate::LockBuilder::max_hold): at the
    ///   expiry, by the process's timer thread.
    ///
    /// It is never cancelled while the acquisition holds, nor by its release (an unlock, the
    /// guard's drop, the handle's release): a released acquisition's token stays as it was.
    /// Once cancelled it stays so, and [`lost`](Self::lost) is true; a token taken after the
    /// loss is cancelled already. Each acquisition has its own: the handle's next one comes
    /// with a fresh token. A write lock downgraded keeps its token.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let lock = redis_blpop_lock::Lock::new(&client, "tickets")?;
    /// let guard = lock.lock()?;
    /// let lost = guard.lost_token();
    /// for batch in 0..100 {
    ///     if lost.is_cancelled() {
    ///         break; // someone else may hold the lock now: stop writing
    ///     }
    ///     println!("batch {batch}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_token(&self) -> CancelToken {
        self.acquisition.lost_token()
    }

    /// This acquisition's fencing token: larger for every grant of the name, so a store that
    /// remembers the highest token it has accepted can refuse a write from a holder whose
    /// acquisition was given to someone else since. A plain lock has one when it was built
    /// with [`fencing(true)`](crate::LockBuilder::fencing); see
    /// [`Lock::fencing_token`](super::Lock::fencing_token).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let config = redis_blpop_lock::RwLock::new(&client, "config")?;
    /// assert!(config.write()?.fencing_token().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.acquisition.fencing_token()
    }
}

#[cfg(feature = "tokio")]
impl Hold<super::Tokio> {
    /// Resolves once this acquisition is lost, as its [`lost_token`](Self::lost_token) is
    /// cancelled (see there for when). Never resolves while it holds, nor for a release, nor
    /// for a lock without an expiry that nobody takes away. For `select!`ing work against
    /// losing it:
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
        self.acquisition.when_lost().await;
    }
}

impl<R: Runtime> fmt::Debug for Hold<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&format!("{}Hold", R::API))
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}
