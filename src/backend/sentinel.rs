//! [`Sentinel`]: locks on the primary that Redis Sentinel names.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use crate::backend::{sealed, Backend};
use crate::transport::nodes::{addr_of, with_addr};
use crate::transport::routed::Routed;
use crate::transport::sentinel::{listen, Primary};
use crate::transport::Transport;
use crate::Error;

/// The backends in use, shared by their handles. Held weakly: each has threads listening to
/// its sentinels, which end once its last handle is gone.
static SENTINELS: LazyLock<Mutex<HashMap<String, Weak<Routed<Primary>>>>> =
    LazyLock::new(Default::default);

/// The primary of a Sentinel-monitored service, as a place where locks live (feature
/// `sentinel`).
///
/// The sentinels are asked which node is the primary (and the node confirms it with
/// `ROLE`), and listened to (`+switch-master`, a thread per sentinel while handles on the
/// backend live): the moment one of them names a new primary, tries, renewals and waits go
/// there, even while the old one, still up, answers as a primary. While no sentinel can be
/// heard, each try and renewal asks one first, and fails if none answers: a primary that no
/// sentinel vouches for may have been replaced. A lock the old primary had not yet replicated
/// is lost in a failover: its holder learns it through `lost()` at its next renewal, and
/// [`LockBuilder::replicas`](crate::LockBuilder::replicas) narrows that window.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use redis_blpop_lock::{Lock, Sentinel};
///
/// let sentinel = Sentinel::new(
///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
///     "mymaster",
/// )?;
/// let lock = Lock::new(&sentinel, "invoices")?;
/// let _guard = lock.lock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Sentinel {
    sentinels: Vec<ConnectionInfo>,
    service: String,
    primary: RedisConnectionInfo,
}

impl Sentinel {
    /// The primary of `service`, as the sentinels at `sentinels` name it. Their URLs carry
    /// the sentinels' own credentials; a `rediss://` URL means TLS to the primary too.
    ///
    /// ```
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let sentinel = redis_blpop_lock::Sentinel::new(["redis://127.0.0.1:26379"], "mymaster")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        service: impl Into<String>,
    ) -> Result<Sentinel, Error> {
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(Error::invalid("Sentinel::new needs at least one sentinel"));
        }
        if sentinels.iter().any(|s| addr_of(s).is_none()) {
            return Err(Error::invalid(
                "sentinels are reached over TCP, not Unix sockets",
            ));
        }
        Ok(Sentinel {
            sentinels,
            service: service.into(),
            primary: RedisConnectionInfo::default(),
        })
    }

    /// The primary's credentials and database (the sentinels' URLs carry their own).
    ///
    /// ```
    /// # fn main() -> Result<(), redis_blpop_lock::Error> {
    /// let sentinel = redis_blpop_lock::Sentinel::new(["redis://127.0.0.1:26379"], "mymaster")?
    ///     .primary_settings(redis::RedisConnectionInfo::default().set_password("s3cret"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn primary_settings(mut self, settings: RedisConnectionInfo) -> Sentinel {
        self.primary = settings;
        self
    }
}

impl Backend for Sentinel {}

impl sealed::Sealed for Sentinel {
    fn connect(&self) -> Result<sealed::OpaqueTransport, Error> {
        let key = format!(
            "{:?}|{}|{}",
            self.sentinels.iter().map(addr_of).collect::<Vec<_>>(),
            self.service,
            crate::transport::server::login(&self.primary)
        );
        let mut known = SENTINELS.lock();
        known.retain(|_, routed| routed.strong_count() > 0);
        if let Some(found) = known.get(&key).and_then(Weak::upgrade) {
            return Ok(sealed::OpaqueTransport(found));
        }
        // The primary is reached like the first sentinel (TCP or TLS), with its own settings.
        let Some(first) = self.sentinels.first() else {
            return Err(Error::invalid("Sentinel::new needs at least one sentinel"));
        };
        let template = with_addr(first, "", 0).set_redis_settings(self.primary.clone());
        let topology = Primary::new(self.sentinels.clone(), self.service.clone());
        let routed = Arc::new(Routed::new(topology, template));
        listen(&Arc::downgrade(&routed), self.sentinels.len()).map_err(Error::Thread)?;
        known.insert(key, Arc::downgrade(&routed));
        let transport: Arc<dyn Transport> = routed;
        Ok(sealed::OpaqueTransport(transport))
    }
}
