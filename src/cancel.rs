//! Cancelling a blocking wait from another thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Ends the waits of the locks built with it, from any thread; also the loss notice of a
/// guard or permit (`lost_token()`), which the crate cancels when the acquisition is lost.
///
/// Once cancelled, a wait on such a lock (`lock()`, `acquire()`, `try_lock_for`, ...) returns
/// [`Error::Cancelled`](crate::Error::Cancelled) within about one round trip, and so does
/// every later one: a token stays cancelled. Nothing is left behind: if the lock was granted
/// to the wait just as it was cancelled, it is released (which passes the wake-up on to the
/// next waiter).
///
/// A waiter waits at its process's hub, not in a `BLPOP` of its own: `cancel` wakes it there
/// at once, and it leaves the line (no `CLIENT UNBLOCK` or `CLIENT KILL` is sent). A try whose
/// reply has not come yet is awaited, and what it took given back.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use redis_blpop_lock::{CancelToken, Error, Lock};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let token = CancelToken::new();
/// let lock = Lock::builder(&client, "deploy").cancel_token(token.clone()).build()?;
/// let waiter = std::thread::spawn(move || lock.acquire());
/// token.cancel(); // e.g. on SIGTERM
/// match waiter.join() {
///     Ok(Err(Error::Cancelled { .. })) => println!("gave up waiting"),
///     other => println!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    next: AtomicU64,
    /// The waits blocked in `BLPOP` now.
    blocked: Mutex<Vec<Blocked>>,
    /// Wakes the pauses of waits that back off while their server is away.
    woken: Condvar,
    /// Wakes async waits.
    #[cfg(feature = "tokio")]
    cancelled_async: tokio::sync::Notify,
}

struct Blocked {
    key: u64,
    interrupt: Arc<dyn Interrupt>,
}

impl CancelToken {
    /// A token that is not cancelled.
    ///
    /// ```
    /// let token = redis_blpop_lock::CancelToken::new();
    /// assert!(!token.is_cancelled());
    /// ```
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels every wait on the locks built with this token, now and later.
    ///
    /// ```
    /// let token = redis_blpop_lock::CancelToken::new();
    /// token.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        let blocked: Vec<(u64, Arc<dyn Interrupt>)> = {
            let blocked = self.inner.blocked.lock();
            self.inner.cancelled.store(true, Ordering::SeqCst);
            self.inner.woken.notify_all();
            #[cfg(feature = "tokio")]
            self.inner.cancelled_async.notify_waiters();
            blocked
                .iter()
                .map(|b| (b.key, Arc::clone(&b.interrupt)))
                .collect()
        };
        for (key, interrupt) in blocked {
            interrupt.interrupt(&|| self.inner.blocked.lock().iter().any(|b| b.key == key));
        }
    }

    /// Whether [`cancel`](Self::cancel) has been called.
    ///
    /// ```
    /// let token = redis_blpop_lock::CancelToken::new();
    /// assert!(!token.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Blocks up to `timeout` unless the token is, or gets, cancelled; whether it is. For a
    /// thread that paces its work by a loss notice (`lost_token()`): it stops at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// let token = redis_blpop_lock::CancelToken::new();
    /// assert!(!token.wait_timeout(Duration::from_millis(1)));
    /// token.cancel();
    /// assert!(token.wait_timeout(Duration::from_secs(60)));
    /// ```
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.pause(timeout)
    }

    /// Records that a wait is about to block, which `interrupt` ends; `None` if the token is
    /// cancelled already, so the wait must not start.
    pub(crate) fn blocking(&self, interrupt: Arc<dyn Interrupt>) -> Option<Registration<'_>> {
        let mut blocked = self.inner.blocked.lock();
        if self.is_cancelled() {
            return None;
        }
        let key = self.inner.next.fetch_add(1, Ordering::SeqCst);
        blocked.push(Blocked { key, interrupt });
        Some(Registration { token: self, key })
    }

    /// Waits up to `pause` unless the token is, or gets, cancelled; whether it is. The
    /// backoff of a wait whose server is away, so that a cancel cuts it short.
    pub(crate) fn pause(&self, pause: Duration) -> bool {
        let mut blocked = self.inner.blocked.lock();
        if !self.is_cancelled() {
            let _ = self.inner.woken.wait_for(&mut blocked, pause);
        }
        self.is_cancelled()
    }

    /// Resolves once the token is cancelled, at once if it is already (feature `tokio`).
    /// Safe to drop at any `.await`. For `select!`ing work against a cancel, or against the
    /// loss of a lock through a guard's [`lost_token`](crate::handle::Hold::lost_token):
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_blpop_lock::Error> {
    /// # let client = redis::Client::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let lock = redis_blpop_lock::aio::Lock::builder(&client, "exports")
    ///     .expire(Duration::from_secs(10))
    ///     .auto_renewal(true)
    ///     .build()?;
    /// let guard = lock.lock().await?;
    /// let lost = guard.lost_token();
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(30)) => guard.unlock().await?,
    ///     () = lost.cancelled() => println!("lost the lock: export stopped"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn cancelled(&self) {
        let notified = self.inner.cancelled_async.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the check, so a cancel in between is not missed.
        notified.as_mut().enable();
        if !self.is_cancelled() {
            notified.await;
        }
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A wait's entry in its token, removed when the wait's `BLPOP` has returned.
/// Ends a wait blocked at a server, for a cancel from another thread.
pub(crate) trait Interrupt: Send + Sync {
    /// Ends the wait; `still_waiting` says whether it is still registered, that is, whether
    /// its connection is still its own.
    fn interrupt(&self, still_waiting: &dyn Fn() -> bool);
}

pub(crate) struct Registration<'a> {
    token: &'a CancelToken,
    key: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.token
            .inner
            .blocked
            .lock()
            .retain(|b| b.key != self.key);
    }
}
