//! [`Quorum`]: Redlock, a lock held on a majority of independent servers.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::backend::{sealed, Backend};
use crate::transport::quorum::Quorum as QuorumTransport;
use crate::transport::server::{self, Server};
use crate::transport::Transport;
use crate::Error;

/// How long one server of a quorum may take to answer unless
/// [`server_timeout`](Quorum::server_timeout) says otherwise.
const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_millis(100);

static QUORUMS: LazyLock<Mutex<HashMap<String, Weak<dyn Transport>>>> =
    LazyLock::new(Default::default);

/// N ≥ 3 independent Redis servers (not replicas of each other) as one place where locks
/// live: the Redlock algorithm. A lock is held when a majority of the servers hold it, so it
/// survives the loss of a minority.
///
/// Each request goes to every server at once, each with a short timeout of its own (a dead
/// server costs a refused connection, a frozen one the timeout). The lock is held when a
/// majority said yes and time is left of its validity, counted from before the first request
/// went out: expiry − elapsed − drift, the drift being 1 % of the expiry + 2 ms; `lost()` and
/// the renewal count from that. A try that did not win is given back on every server that
/// may hold it, including those whose reply was lost. A renewal holds where the key is still
/// ours on a majority, and takes it again where it went missing (a server that restarted
/// empty). Waiting stays blocking: every waiter of a lock blocks in `BLPOP` on the same
/// server's signal list (each release pushes to all, those that never had the holder's key
/// included), and moves to another server if that one fails.
///
/// A call ends within a few server timeouts, whatever the handle's I/O timeout: against a
/// frozen majority, `OutcomeUnknown` after about three. What its try may have taken there
/// (the servers run it when they resume) is given back in the background as soon as a
/// majority answers, without waiting for the handle's next call.
///
/// A quorum lock needs an [`expire`](crate::LockBuilder::expire), and has no fencing tokens
/// (`.fencing(true)` is refused): see the crate docs' Redlock section for why, and for the
/// caveat about a server that restarts empty.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use std::time::Duration;
/// use redis_blpop_lock::{Lock, Quorum};
///
/// let quorum = Quorum::new([
///     redis::Client::open("redis://10.0.0.1:6379/")?,
///     redis::Client::open("redis://10.0.0.2:6379/")?,
///     redis::Client::open("redis://10.0.0.3:6379/")?,
/// ])?;
/// let lock = Lock::builder(&quorum, "invoices")
///     .expire(Duration::from_secs(10))
///     .auto_renewal(true)
///     .build()?;
/// let _guard = lock.lock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Quorum {
    clients: Vec<redis::Client>,
    server_timeout: Duration,
}

impl Quorum {
    /// The servers `clients` point at: three or more, each a different server.
    ///
    /// ```
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let two = [
    ///     redis::Client::open("redis://10.0.0.1/")?,
    ///     redis::Client::open("redis://10.0.0.2/")?,
    /// ];
    /// assert!(redis_blpop_lock::Quorum::new(two).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(clients: impl IntoIterator<Item = redis::Client>) -> Result<Quorum, Error> {
        let clients: Vec<redis::Client> = clients.into_iter().collect();
        if clients.len() < 3 {
            return Err(Error::invalid(format!(
                "a quorum needs at least 3 servers, got {}",
                clients.len()
            )));
        }
        // One server under different databases is still one server.
        let mut seen: Vec<String> = clients
            .iter()
            .map(|c| format!("{:?}", c.get_connection_info().addr()))
            .collect();
        seen.sort();
        seen.dedup();
        if seen.len() < clients.len() {
            return Err(Error::invalid(
                "a quorum's servers must be different servers",
            ));
        }
        Ok(Quorum {
            clients,
            server_timeout: DEFAULT_SERVER_TIMEOUT,
        })
    }

    /// How long one server may take to answer, default 100 ms: past it, that server counts
    /// as not answering. Keep it far below the locks' expiry.
    ///
    /// ```
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// # let clients = (1..=3).map(|i| redis::Client::open(format!("redis://10.0.0.{i}/")))
    /// #     .collect::<Result<Vec<_>, _>>()?;
    /// let quorum = redis_blpop_lock::Quorum::new(clients)?
    ///     .server_timeout(std::time::Duration::from_millis(20));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn server_timeout(mut self, timeout: Duration) -> Quorum {
        self.server_timeout = timeout;
        self
    }
}

impl Backend for Quorum {}

impl sealed::Sealed for Quorum {
    fn connect(&self) -> Result<sealed::OpaqueTransport, Error> {
        if self.server_timeout.is_zero() {
            return Err(Error::invalid(
                "a quorum's server timeout must be above zero",
            ));
        }
        let key = format!(
            "{:?}|{:?}",
            self.clients
                .iter()
                .map(|c| server::identity(c.get_connection_info()))
                .collect::<Vec<_>>(),
            self.server_timeout
        );
        let mut known = QUORUMS.lock();
        // A quorum no handle uses any more leaves the registry (its entry is only a weak one).
        known.retain(|_, transport| transport.strong_count() > 0);
        if let Some(found) = known.get(&key).and_then(Weak::upgrade) {
            return Ok(sealed::OpaqueTransport(found));
        }
        let servers = self
            .clients
            .iter()
            .map(Server::shared)
            .collect::<Result<Vec<&'static Arc<Server>>, Error>>()?;
        let transport: Arc<dyn Transport> =
            Arc::new(QuorumTransport::new(servers, self.server_timeout));
        known.insert(key, Arc::downgrade(&transport));
        Ok(sealed::OpaqueTransport(transport))
    }
}
