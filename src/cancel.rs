//! Cancelling a blocking wait from another thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::transport::{Admin, Transport};

/// How long [`CancelToken::cancel`] keeps trying to end a wait whose `BLPOP` the server has
/// not started yet (it was sent a moment before the cancel).
const UNBLOCK_PERSISTENCE: Duration = Duration::from_secs(2);

/// Ends the waits of the locks built with it, from any thread.
///
/// Once cancelled, a wait on such a lock (`lock()`, `acquire()`, `try_lock_for`, ...) returns
/// [`Error::Cancelled`](crate::Error::Cancelled) within about one round trip, and so does
/// every later one: a token stays cancelled. Nothing is left behind: if the lock was granted
/// to the wait just as it was cancelled, it is released (which passes the wake-up on to the
/// next waiter).
///
/// `cancel` ends a wait blocked in `BLPOP` with `CLIENT UNBLOCK`, sent from the calling
/// thread. Where an ACL refuses that command, the wait ends when its current `BLPOP` does
/// (at most 5 s).
///
/// ```no_run
/// # fn main() -> Result<(), redis_lock::Error> {
/// use redis_lock::{CancelToken, Error, Lock};
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let token = CancelToken::new();
/// let lock = Lock::builder(&client, "deploy").cancel_token(token.clone()).build()?;
/// let waiter = std::thread::spawn(move || lock.acquire());
/// token.cancel(); // e.g. on SIGTERM
/// match waiter.join().unwrap() {
///     Err(Error::Cancelled { .. }) => println!("gave up waiting"),
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
}

struct Blocked {
    key: u64,
    transport: Arc<dyn Transport>,
    conn: u64,
}

impl CancelToken {
    /// A token that is not cancelled.
    ///
    /// ```
    /// let token = redis_lock::CancelToken::new();
    /// assert!(!token.is_cancelled());
    /// ```
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels every wait on the locks built with this token, now and later.
    ///
    /// ```
    /// let token = redis_lock::CancelToken::new();
    /// token.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        let blocked: Vec<(u64, Arc<dyn Transport>, u64)> = {
            let blocked = self.inner.blocked.lock();
            self.inner.cancelled.store(true, Ordering::SeqCst);
            blocked
                .iter()
                .map(|b| (b.key, Arc::clone(&b.transport), b.conn))
                .collect()
        };
        for (key, transport, conn) in blocked {
            self.unblock(key, &*transport, conn);
        }
    }

    /// Whether [`cancel`](Self::cancel) has been called.
    ///
    /// ```
    /// let token = redis_lock::CancelToken::new();
    /// assert!(!token.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Records that connection `conn` is about to block; `None` if the token is cancelled
    /// already, so the wait must not start.
    pub(crate) fn blocking(
        &self,
        transport: &Arc<dyn Transport>,
        conn: u64,
    ) -> Option<Registration<'_>> {
        let mut blocked = self.inner.blocked.lock();
        if self.is_cancelled() {
            return None;
        }
        let key = self.inner.next.fetch_add(1, Ordering::SeqCst);
        blocked.push(Blocked {
            key,
            transport: Arc::clone(transport),
            conn,
        });
        Some(Registration { token: self, key })
    }

    /// Ends the `BLPOP` of a registered wait. The server may not have started it yet (it was
    /// sent just before the cancel): then the unblock finds nothing, and is sent again until
    /// the wait has ended or the server refuses.
    fn unblock(&self, key: u64, transport: &dyn Transport, conn: u64) {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match transport.unblock(conn, Instant::now() + UNBLOCK_PERSISTENCE) {
                Ok(Admin::Done) | Ok(Admin::Refused) | Err(_) => return,
                Ok(Admin::Nothing) => {}
            }
            let still_blocked = self.inner.blocked.lock().iter().any(|b| b.key == key);
            if !still_blocked || started.elapsed() > UNBLOCK_PERSISTENCE {
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
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
